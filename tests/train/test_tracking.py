"""Experiment tracking (train.tracker): wandb offline into the run folder, none writes nothing, bad input is
one line before anything is written."""

from __future__ import annotations

import json
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli, tiny_config

from loopscale.cli import main
from loopscale.config import dump_yaml
from loopscale.errors import UserError
from loopscale.train import loop, train

BASE_FILES = {"config.yaml", "metrics.jsonl", "result.json", "model.safetensors"}


def _wandb_records(path: Path) -> list:
    """The protobuf records of an offline run-*.wandb file: a 7-byte W&B header, then a LevelDB log
    (32 KiB blocks of [crc32, length, type] + payload chunks; type 1 full, 2 first, 3 middle, 4 last)."""
    import wandb
    from wandb.proto import wandb_internal_pb2 as pb

    wandb.teardown()  # the wandb-core service writes the file out when it stops (at process exit in a run)
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pos, pending = [], 7, b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # block trailer padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:  # zero padding at the end of a block
            pos += 32768 - pos % 32768
            continue
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _items(items) -> dict:
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}


@pytest.fixture
def offline_wandb(monkeypatch, tmp_path):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    for var in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))


def test_wandb_offline_run_logs_every_step_and_the_result(dataset, tmp_path, offline_wandb):
    out = tmp_path / "main_r2"
    result = train(tiny_config(dataset, tracker="wandb", tracker_group="sweep-x"), out)
    run_files = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(run_files) == 1
    run_id = json.loads((out / "tracker.json").read_text())["id"]
    assert run_files[0].name == f"run-{run_id}.wandb"
    records = _wandb_records(run_files[0])
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert (run.run_id, run.run_group, run.display_name, run.project) == (
        run_id,
        "sweep-x",
        "main_r2",
        "loopscale",
    )
    history = [_items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [h["_step"] for h in history] == [m["step"] for m in metrics] == list(range(1, 7))
    assert [h["loss"] for h in history] == [m["loss"] for m in metrics]
    summary: dict = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary.update(_items(r.summary.update))
    assert summary["val_loss"] == result["val_loss"]
    assert summary["status"] == "ok" and summary["steps_done"] == 6


def test_wandb_resumed_run_continues_its_tracker_run(dataset, tmp_path, offline_wandb, monkeypatch):
    cfg = tiny_config(dataset, steps=5, checkpoint_every_steps=2, tracker="wandb")
    out = tmp_path / "run"

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:  # stopped after the last step: checkpoint at step 4, no result
        m.setattr(loop, "validation_loss", interrupt)
        with pytest.raises(KeyboardInterrupt):
            train(cfg, out)
    run_id = json.loads((out / "tracker.json").read_text())["id"]
    assert train(cfg, out)["status"] == "ok"
    assert json.loads((out / "tracker.json").read_text())["id"] == run_id
    files = sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert files and all(f.name == f"run-{run_id}.wandb" for f in files)
    steps = [
        _items(r.history.item)["_step"]
        for f in files
        for r in _wandb_records(f)
        if r.WhichOneof("record_type") == "history"
    ]
    assert steps[-1] == 5 and set(steps) == {1, 2, 3, 4, 5}  # step 5 was redone after the step-4 checkpoint


def test_wandb_disabled_mode_trains_and_writes_no_tracker_run(dataset, tmp_path, offline_wandb, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")  # tracker_mode unset: wandb's own switch decides
    out = tmp_path / "run"
    assert train(tiny_config(dataset, tracker="wandb"), out)["status"] == "ok"
    assert not (out / "wandb").exists()


def test_only_rank_0_tracks_under_ddp(dataset, tmp_path, offline_wandb):
    """torchrun with 2 ranks: one wandb run in the run folder, each step logged once (rank 1 logs nothing)."""
    config = tmp_path / "train.yaml"
    config.write_text(dump_yaml(tiny_config(dataset, steps=3, tracker="wandb")))
    out = tmp_path / "ddp"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    args = ["train", "--config", str(config), "--out", str(out)]
    proc = run_cli(args, launcher=[*torchrun, "-m", "loopscale"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((out / "result.json").read_text())["world_size"] == 2
    files = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    records = _wandb_records(files[0])
    assert [r.WhichOneof("record_type") for r in records].count("run") == 1
    history = [_items(r.history.item)["_step"] for r in records if r.WhichOneof("record_type") == "history"]
    assert history == [1, 2, 3]


def test_no_tracker_writes_nothing_extra(dataset, tmp_path):
    out = tmp_path / "run"
    train(tiny_config(dataset), out)
    assert {p.name for p in out.iterdir()} <= BASE_FILES | {".loopscale"}  # the folder's ownership marker
    probe = "import sys, loopscale.train.loop; print(sorted({'wandb', 'trackio'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout == "[]\n"


def test_trackio_run_logs_every_step_and_the_result(dataset, tmp_path):
    pytest.importorskip("trackio")
    config = tmp_path / "train.yaml"
    config.write_text(dump_yaml(tiny_config(dataset, tracker="trackio", tracker_group="sweep-x")))
    out, store = tmp_path / "main_r2", tmp_path / "trackio"
    proc = run_cli(["train", "--config", str(config), "--out", str(out)], env={"TRACKIO_DIR": str(store)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("val_loss ") and "Trackio" not in proc.stdout  # banners: on stderr
    db = sqlite3.connect(store / "loopscale.db")
    rows = db.execute("SELECT run_name, step, metrics FROM metrics ORDER BY id").fetchall()
    logged = [(name, step, json.loads(m)) for name, step, m in rows]
    assert {name for name, _, _ in logged} == {"main_r2"}
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(s, m["loss"]) for _, s, m in logged if "loss" in m] == [(m["step"], m["loss"]) for m in metrics]
    result = json.loads((out / "result.json").read_text())
    assert logged[-1][2]["final/val_loss"] == result["val_loss"]


def test_unknown_tracker_is_one_line_exit_2(dataset, tmp_path, capsys):
    config = tmp_path / "train.yaml"
    config.write_text(dump_yaml(tiny_config(dataset)))
    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--tracker", "tensorboard", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tracker must be one of none, wandb, trackio" in err, err
    assert not out.exists()


@pytest.mark.parametrize("tracker", ["wandb", "trackio"])
def test_missing_tracker_package_is_one_line_before_any_write(dataset, tmp_path, monkeypatch, tracker):
    monkeypatch.setitem(sys.modules, tracker, None)  # `import wandb` raises ImportError
    out = tmp_path / "run"
    with pytest.raises(UserError, match=f"pip install {tracker}") as err:
        train(tiny_config(dataset, tracker=tracker), out)
    assert "\n" not in str(err.value)
    assert not out.exists()


def test_sweep_groups_tracker_runs_by_sweep_name():
    from dataclasses import replace

    from loopscale.sweep import plan_sweep, preset
    from loopscale.sweep.plan import run_train_config

    spec = preset("cpu")
    run = plan_sweep(spec)[0]
    assert "tracker_group" not in run_train_config(spec, run)  # no tracker: the run config is unchanged
    tracked = replace(spec, train={**spec.train, "tracker": "wandb"})
    assert run_train_config(tracked, run)["tracker_group"] == spec.name
    mine = replace(spec, train={**spec.train, "tracker": "wandb", "tracker_group": "mine"})
    assert run_train_config(mine, run)["tracker_group"] == "mine"
