"""The run contract (docs/contract.md): ``loopscale sweep --trainer CMD`` hands each run to another trainer
through run.json and reads result.json (or a LOOPSCALE_RESULT line) back. Every violation ends as one line
naming the run and the field, the run is kept out of the table's ok rows, and nothing else is lost; a run
killed by SIGTERM is preempted and resumed by the next start."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from loopscale.errors import UserError
from loopscale.sweep.contract import check_result, check_template, is_preempted, trainer_command

from .helpers import env_with

FAKE = Path(__file__).parent / "fake_trainer.py"
MODEL = {"depth": 4, "prelude": 1, "coda": 1, "head_dim": 16, "vocab_size": 64, "seq_len": 16}
GOOD = ("good", "stdout", "bpb")
BROKEN = {  # group → the field its one line names
    "nofile": "without result.json or a LOOPSCALE_RESULT line",
    "unit": "val_loss_unit must be",
    "flops": "-10.0% off the planned",
    "nmismatch": "n_rec",
    "nan": "val_loss must be a finite number, got nan",
    "crash": "exit code 1: CUDA error: an illegal memory access",
}


def _spec(tmp_path: Path, data: Path, groups) -> Path:
    spec = {
        "name": "contract",
        "batch_tokens": 64,
        "model": MODEL,
        "train": {
            "device": "cpu",
            "progress": False,
            "data": {"path": str(data), "val_tokens": 256},
            "optim": {"ref_width": 32, "ref_batch_tokens": 64, "ref_r_looped": 2},
        },
        "groups": [{"name": g, "rs": [2], "grid": [{"budget": 1e9, "widths": [16]}]} for g in groups],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _sweep(spec: Path, out: Path, trainer: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "loopscale", "sweep", str(spec), "--out", str(out), "--trainer", trainer]
    return subprocess.run(
        [*cmd, "--workers", "2", "--threads", "1"], env=env_with(), capture_output=True, text=True
    )


def _rows(out: Path) -> dict[str, dict]:
    with open(out / "results.csv") as fh:
        return {row["group"]: row for row in csv.DictReader(fh)}


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "runs").rglob("*")) if p.is_file()}


def test_every_violation_is_one_line_and_loses_nothing(tmp_path, tiny_dataset):
    """A sweep of ten runs, one per clause kept or broken: the good ones (a file, a stdout line, bits per
    byte) enter the table in nats; each broken one is a failed row whose reason names its field, printed as
    one line; the SIGTERM run is pending, and the same command again resumes it to ok without touching the
    others."""
    groups = [*GOOD, *BROKEN, "sigterm"]
    spec = _spec(tmp_path, tiny_dataset, groups)
    out = tmp_path / "sweep"
    trainer = f"{sys.executable} {FAKE} {{run_dir}}"
    first = _sweep(spec, out, trainer)
    assert first.returncode == 3, first.stderr
    assert "Traceback" not in first.stderr
    rows = _rows(out)
    plan = {g: json.loads((out / "runs" / rows[g]["run"] / "run.json").read_text()) for g in groups}
    for group in GOOD:
        assert rows[group]["status"] == "ok", rows[group]["reason"]
        expected = plan[group]["unigram_entropy"] - 0.5 - 0.01 - 0.04  # the fake's loss at width 16, r 2
        assert float(rows[group]["loss"]) == pytest.approx(expected, rel=1e-12)
    for group, field in BROKEN.items():
        row = rows[group]
        assert row["status"] == "failed" and field in row["reason"], (group, row["reason"])
        lines = [line for line in first.stderr.splitlines() if f"failed {row['run']} (" in line]
        assert len(lines) == 1 and field in lines[0], (group, first.stderr)
    assert rows["sigterm"]["status"] == "pending"
    assert f"did not finish (rerun to resume): {rows['sigterm']['run']}" in first.stderr
    # the trainer's own files stay as it wrote them: a violating result.json is kept, not rewritten
    assert "NaN" in (out / "runs" / rows["nan"]["run"] / "result.json").read_text()
    before = _files(out)

    second = _sweep(spec, out, trainer)
    assert second.returncode == 3, second.stderr
    again = _rows(out)
    assert again["sigterm"]["status"] == "ok" and int(again["sigterm"]["tokens"]) == plan["sigterm"]["tokens"]
    # a run that wrote a result is done, whatever its checks say; one that ended without a result (crash,
    # nofile) is retried like any unfinished run, and fails the same way
    assert {g: (r["status"], r["reason"]) for g, r in again.items() if g != "sigterm"} == {
        g: (r["status"], r["reason"]) for g, r in rows.items() if g != "sigterm"
    }
    after = _files(out)
    changed = {name.split("/")[1] for name in before if after.get(name) != before[name]}
    assert changed == {rows[g]["run"] for g in ("sigterm", "crash", "nofile")}, changed
    assert (out / "curves.parquet").is_file()


def test_check_result_converts_bits_per_byte_and_names_the_first_violation():
    expected = {
        "trainer": "x", "flops": 1000, "tokens": 100, "flops_per_token": 10, "n_once": 5, "n_rec": 7,
        "width": 16, "r": 2, "unigram_entropy": 4.0,
    }  # fmt: skip
    good = {"status": "ok", "val_loss": 3.0, "val_loss_unit": "nats_per_token", "tokens": 100,
            "flops_per_token": 10, "n_once": 5, "n_rec": 7}  # fmt: skip
    assert check_result(good, expected) == (good, None)
    bpb = {**good, "val_loss": 1.0, "val_loss_unit": "bits_per_byte", "bytes_per_token": 4.0}
    converted, problem = check_result(bpb, expected)
    assert problem is None and converted["val_loss"] == pytest.approx(4 * math.log(2))
    assert problem is None and converted["val_loss_reported"] == {"value": 1.0, "unit": "bits_per_byte"}
    cases = {
        "val_loss_unit 'bits_per_byte' needs bytes_per_token": {**bpb, "bytes_per_token": None},
        "not below the unigram entropy": {**good, "val_loss": 4.2},
        "val_loss_unit must be 'nats_per_token' or 'bits_per_byte', got 'perplexity'": {
            **good, "val_loss_unit": "perplexity"
        },
        "tokens must be a whole number": {**good, "tokens": "100"},
        "n_once 6 is not the plan's 5": {**good, "n_once": 6},
        "status must be 'ok' or 'failed'": {**good, "status": "done"},
    }
    for message, result in cases.items():
        assert message in check_result(result, expected)[1], message
    # 2% is the edge: 2.0% passes, 3.0% does not
    assert check_result({**good, "tokens": 102}, expected)[1] is None
    assert "+3.0% off" in check_result({**good, "tokens": 103}, expected)[1]
    # loopscale's own results before the contract carry no unit: nats per token
    own = {k: v for k, v in good.items() if k != "val_loss_unit"}
    assert check_result(own, {**expected, "trainer": None})[1] is None


def test_trainer_template_is_checked_and_filled_word_by_word(tmp_path):
    folder = tmp_path / "a b"
    assert trainer_command("train.py --out {run_dir} --id={run_id}", folder, "r1") == [
        "train.py", "--out", str(folder), "--id=r1",
    ]  # fmt: skip
    refused = (("", "empty"), ("x {rundir}", r"unknown placeholder \{rundir\}"), ("x 'y", "quotation"))
    for bad, message in refused:
        with pytest.raises(UserError, match=message):
            check_template(bad)
    assert is_preempted(143) and is_preempted(-15) and is_preempted(130) and not is_preempted(137)
    assert not is_preempted(1)


def test_loopscale_train_as_a_trainer_command_passes_the_checks(tmp_path, tiny_dataset):
    """loopscale's own trainer honours the contract: run through --trainer, its result.json passes the same
    checks (unit, loss below the unigram entropy, FLOPs, N) and its row equals the plan."""
    spec = _spec(tmp_path, tiny_dataset, ["own"])
    out = tmp_path / "sweep"
    trainer = f"{sys.executable} -m loopscale train --config {{config}} --out {{run_dir}} --threads 1"
    proc = _sweep(spec, out, trainer)
    assert proc.returncode == 0, proc.stderr
    row = _rows(out)["own"]
    plan = json.loads((out / "runs" / row["run"] / "run.json").read_text())
    assert row["status"] == "ok" and float(row["loss"]) < plan["unigram_entropy"]
    assert (int(row["tokens"]), int(row["n_rec"])) == (plan["tokens"], plan["n_rec"])
    assert plan["learning_rates"]["matrix"] > 0 and plan["pairs_with"] is None


def test_the_slurm_executor_runs_the_trainer_through_the_same_contract(tmp_path, tiny_dataset):
    """The SLURM path's run function (submitit's local executor here) reads the trainer from sweep.yaml: a
    good run is ok, a run off its FLOPs budget is failed with its one line."""
    from loopscale.sweep import load_spec
    from loopscale.sweep.executors import SlurmOptions, run_slurm
    from loopscale.sweep.rundir import init_sweep, run_state
    from loopscale.sweep.runner import with_trainer

    spec = load_spec(_spec(tmp_path, tiny_dataset, ["good", "flops"]))
    spec = with_trainer(spec, f"{sys.executable} {FAKE} {{run_dir}}")
    out = tmp_path / "sweep"
    runs = init_sweep(spec, out)
    statuses = run_slurm(out, runs, SlurmOptions(cluster="local", cpus_per_task=1), poll_s=0.2)
    assert statuses == {"good_C1e9_d16_r2": "ok", "flops_C1e9_d16_r2": "failed"}
    assert "-10.0% off the planned" in run_state(out, "flops_C1e9_d16_r2").reason


def test_the_hugging_face_trainer_example_prices_through_the_contract(tmp_path, tiny_dataset):
    """examples/trainers/hf_trainer.py (transformers.Trainer on the exported model code) as --trainer: a
    looped run passes the checks (N counted from the model's modules as loopscale's accounting counts it),
    learns (loss well below the unigram entropy) and logs its curve."""
    pytest.importorskip("transformers")
    example = Path(__file__).resolve().parents[2] / "examples" / "trainers" / "hf_trainer.py"
    spec = _spec(tmp_path, tiny_dataset, ["hf"])
    out = tmp_path / "sweep"
    proc = _sweep(spec, out, f"{sys.executable} {example} {{run_dir}}")
    assert proc.returncode == 0, proc.stderr + "".join(
        p.read_text()[-2000:] for p in (out / "runs").glob("*/train.log")
    )
    with open(out / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [row["status"] for row in rows] == ["ok"]
    for row in rows:
        plan = json.loads((out / "runs" / row["run"] / "run.json").read_text())
        assert float(row["loss"]) < plan["unigram_entropy"] - 0.5
        assert (out / "runs" / row["run"] / "metrics.jsonl").read_text().count("\n") >= 10


def test_price_prices_a_recipe_through_a_trainer_end_to_end(tmp_path, monkeypatch):
    """``price --trainer``: the variant runs of the published laptop base go to a trainer that reports each
    base run's loss + 0.05 nats (read through run.json's pairs_with); every result passes the checks, and the
    looks price the recipe at +0.05 nats at every r."""
    import numpy as np

    import loopscale.data
    from loopscale.analysis.price import PriceSettings, price
    from loopscale.data.dataset import SplitWriter, finish_build, row_dtype, start_build

    base = Path(__file__).resolve().parents[2] / "results" / "laptop-factorial"
    folder = start_build(tmp_path / "bpe1024-T128")  # uniform tokens of the base's vocabulary and length
    rng, dtype, splits = np.random.default_rng(0), row_dtype(1024), {}
    for split, rows in (("train", 64), ("val", 1024)):
        writer = SplitWriter(folder, split, 129, dtype, seed=0)
        writer.extend(rng.integers(1, 1024, (rows, 129)))
        splits[split] = writer.close()
    data = finish_build(folder, {"vocab_size": 1024, "bos_id": 0, "seq_len": 128, "row_len": 129,
                                 "dtype": dtype.name, "splits": splits})  # fmt: skip
    monkeypatch.setattr(loopscale.data, "prepare_default", lambda *a, **k: data)
    from loopscale.recipes import resolve_recipe

    settings = PriceSettings(
        recipe=resolve_recipe("hyperconnections"), base=base, out=tmp_path / "price", max_hours=0.25,
        bootstrap=20, restarts=40, workers=2, sequences=200, data_root=tmp_path / "data",
        trainer=f"{sys.executable} {FAKE} {{run_dir}}",
    )  # fmt: skip
    lines = []
    result = price(settings, echo=lines.append)
    runs = sorted((tmp_path / "price" / "runs").iterdir())
    assert len(runs) == result.looks[-1].pairs >= 4
    for run in runs:
        plan = json.loads((run / "run.json").read_text())
        assert (run / plan["pairs_with"] / "result.json").is_file()
    assert all(abs(v.change - 0.05) < 1e-9 for v in result.effects.per_r.values())
    assert lines[-2].startswith("hyperconnections: ")
    assert result.settings["trainer"] == settings.trainer  # price.json says who trained the variant


def test_runs_reused_from_a_base_are_not_the_trainers(tmp_path, tiny_dataset, monkeypatch):
    """A trainer sweep that reuses a base's finished runs (a case study's anchors): the copied runs keep
    loopscale's results unchecked by the contract (no run.json), the runs to train get one."""
    from loopscale.sweep import load_spec
    from loopscale.sweep.rundir import init_sweep, run_dir, run_state
    from loopscale.sweep.runner import with_trainer

    monkeypatch.chdir(tmp_path)
    init_sweep(load_spec(_spec(tmp_path, tiny_dataset, ["main"])), "base")
    done = run_dir("base", "main_C1e9_d16_r2")
    (done / "result.json").write_text(json.dumps({"status": "ok", "val_loss": 3.25}))  # a run of before
    spec = load_spec(_spec(tmp_path, tiny_dataset, ["main", "other"]))
    spec = with_trainer(dataclasses.replace(spec, reuse=["base"]), "train.py {run_dir}")
    init_sweep(spec, "variant")
    assert run_state("variant", "main_C1e9_d16_r2").status == "ok"
    assert not (run_dir("variant", "main_C1e9_d16_r2") / "run.json").exists()
    assert (run_dir("variant", "other_C1e9_d16_r2") / "run.json").is_file()
