"""Real processes: kill -9 + --resume reproduces an uninterrupted run exactly; torchrun DDP on CPU (gloo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import run_cli, tiny_config

from loopscale.config import dump_yaml
from loopscale.train import load_checkpoint_model
from loopscale.train.checkpoint import latest_checkpoint
from loopscale.train.perf import tcmalloc_library


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_kill_9_then_resume_equals_an_uninterrupted_run_exactly(dataset, tmp_path):
    cfg = tiny_config(dataset, steps=40, checkpoint_every_steps=3)
    (tmp_path / "run.yaml").write_text(dump_yaml(cfg))
    args = ["train", "--config", str(tmp_path / "run.yaml")]
    env = {"LOOPSCALE_NO_TCMALLOC": "0"}  # the default path: tcmalloc preloaded when installed
    reference = run_cli([*args, "--out", str(tmp_path / "reference")], env=env)
    assert reference.returncode == 0, reference.stderr

    run = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopscale", *args, "--out", str(run)],
        env={**os.environ, "OMP_NUM_THREADS": "1", **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while proc.poll() is None:  # no deadline: a run that finishes first fails the assertion below
        lines = (run / "metrics.jsonl").read_text().count("\n") if (run / "metrics.jsonl").exists() else 0
        if lines >= 11:
            break
        time.sleep(0.005)
    proc.kill()  # SIGKILL (kill -9); a no-op if the run already ended
    proc.wait()
    assert not (run / "result.json").exists(), "the run finished before it could be killed"
    checkpoint = latest_checkpoint(run)
    assert checkpoint is not None
    model, loaded = load_checkpoint_model(checkpoint)  # a checkpoint folder loads on its own
    assert loaded == replace(cfg, threads=1, compile=False) and model.cfg == cfg.model  # threads, compile

    resumed = run_cli([*args, "--out", str(run), "--resume"], env=env)
    assert resumed.returncode == 0, resumed.stderr
    ref_result = json.loads((tmp_path / "reference" / "result.json").read_text())
    result = json.loads((run / "result.json").read_text())
    assert result["val_loss"] == ref_result["val_loss"]  # exactly, not approximately
    assert result["train_loss"] == ref_result["train_loss"]
    assert [m["step"] for m in metrics(run)] == list(range(1, 41))  # redone steps are not duplicated
    assert [m["loss"] for m in metrics(run)] == [m["loss"] for m in metrics(tmp_path / "reference")]
    assert (run / "model.safetensors").read_bytes() == (
        tmp_path / "reference" / "model.safetensors"
    ).read_bytes()
    assert result["tcmalloc"] == (tcmalloc_library() is not None)


def test_torchrun_two_processes_match_one_process_with_the_same_global_batch(dataset, tmp_path):
    cfg = tiny_config(dataset, steps=5, micro_batch=2, checkpoint_every_steps=2)
    (tmp_path / "run.yaml").write_text(dump_yaml(cfg))
    args = ["train", "--config", str(tmp_path / "run.yaml")]
    single = run_cli([*args, "--out", str(tmp_path / "single")])
    assert single.returncode == 0, single.stderr
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "loopscale",
    ]
    ddp = run_cli([*args, "--out", str(tmp_path / "ddp")], launcher=torchrun)
    assert ddp.returncode == 0, ddp.stderr[-2000:]
    one, two = metrics(tmp_path / "single"), metrics(tmp_path / "ddp")
    assert [m["step"] for m in two] == [1, 2, 3, 4, 5]
    for a, b in zip(one, two):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5, abs=1e-6)
    r1 = json.loads((tmp_path / "single" / "result.json").read_text())
    r2 = json.loads((tmp_path / "ddp" / "result.json").read_text())
    assert r2["world_size"] == 2 and r1["world_size"] == 1
    assert r2["val_loss"] == pytest.approx(r1["val_loss"], rel=1e-5)
    assert r2["tokens"] == r1["tokens"]


def test_compiled_run_killed_and_resumed_equals_an_uninterrupted_compiled_run(dataset, tmp_path):
    """compile: true stays deterministic across kill -9 + --resume (the resumed process compiles again)."""
    cfg = tiny_config(dataset, steps=20, checkpoint_every_steps=3, compile=True)
    (tmp_path / "run.yaml").write_text(dump_yaml(cfg))
    args = ["train", "--config", str(tmp_path / "run.yaml")]
    reference = run_cli([*args, "--out", str(tmp_path / "reference")])
    assert reference.returncode == 0, reference.stderr

    run = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopscale", *args, "--out", str(run)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while proc.poll() is None:  # no deadline: a run that finishes first fails the assertion below
        if (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count("\n") >= 7:
            break
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    assert not (run / "result.json").exists(), "the run finished before it could be killed"
    resumed = run_cli([*args, "--out", str(run), "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert [m["loss"] for m in metrics(run)] == [m["loss"] for m in metrics(tmp_path / "reference")]
    ref = json.loads((tmp_path / "reference" / "result.json").read_text())
    assert json.loads((run / "result.json").read_text())["val_loss"] == ref["val_loss"]
