"""Crash safety with a real ``kill -9`` of a running sweep (issue 4, must-show 2) and a diverging run
(must-show 3).

A reference sweep runs uninterrupted. Three more copies are killed (SIGKILL to the whole process group:
executor and training process) at three moments — mid-run, between runs, during a checkpoint write — and
rerun with the same command. Each final table must hold every run exactly once with losses bit-identical
to the reference.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .helpers import env_with, results, sweep_cmd, write_spec


def kill_when(proc: subprocess.Popen, ready) -> None:
    # No deadline: the sweep ends by itself, and ending before the kill point is the failure.
    while not ready():
        assert proc.poll() is None, "the sweep ended before the kill point"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # kill -9 of the executor and its training process
    proc.wait()


def metrics_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("moment", ["mid-run", "between-runs", "checkpoint"])
def test_kill_9_then_rerun_gives_the_uninterrupted_table(reference, tmp_path, moment):
    spec, expected = reference
    out, markers = tmp_path / "sweep", tmp_path / "markers"
    markers.mkdir()
    first = out / "runs" / next(iter(expected))
    pause = None if moment == "mid-run" else moment
    proc = subprocess.Popen(
        sweep_cmd(out, spec),
        env=env_with(pause, markers),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if moment == "mid-run":
        ckpt, metrics = first / "checkpoints" / "latest", first / "metrics.jsonl"
        kill_when(proc, lambda: ckpt.exists() and metrics_lines(metrics) > 30)
        assert not (first / "result.json").exists()
    else:
        kill_when(proc, lambda: (markers / moment).exists())
    if moment == "checkpoint":  # the kill left a half-written checkpoint folder behind
        assert list((first / "checkpoints").glob(".step_*.tmp"))
        assert not (first / "result.json").exists()
    if moment == "between-runs":
        assert (first / "result.json").exists()
        assert sum((run / "result.json").exists() for run in (out / "runs").iterdir()) == 1

    rerun = subprocess.run(sweep_cmd(out), env=env_with(), capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert results(out) == expected  # every run once, same status, bit-identical loss (repr in CSV)
    for name, (_, loss) in expected.items():
        assert repr(json.loads((out / "runs" / name / "result.json").read_text())["val_loss"]) == loss


def test_diverging_run_is_recorded_and_the_sweep_continues(tiny_dataset, tmp_path, capsys):
    from loopscale.cli import main

    spec = write_spec(tmp_path, tiny_dataset, budget=5e8, rs=(1,), widths=(16, 32), diverging=True)
    out = tmp_path / "sweep"
    proc = subprocess.run(sweep_cmd(out, spec), env=env_with(), capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr  # the sweep finished, one run failed
    order = re.findall(r"\] start (\S+)", proc.stderr)
    assert order == ["main_C5e8_d16_r1", "diverge_C5e8_d16_r2", "main_C5e8_d32_r1"]  # it continued after it
    table = results(out)
    assert {name: status for name, (status, _) in table.items()} == {
        "main_C5e8_d16_r1": "ok",
        "diverge_C5e8_d16_r2": "failed",
        "main_C5e8_d32_r1": "ok",
    }
    with open(out / "results.csv") as fh:
        row = next(r for r in csv.DictReader(fh) if r["run"] == "diverge_C5e8_d16_r2")
    assert "finite" in row["reason"].lower() and row["loss"] == "nan"
    # collect lists it; a rerun does not retry it (result.json says failed)
    assert main(["collect", str(out)]) == 0
    assert "failed   diverge_C5e8_d16_r2" in capsys.readouterr().out
    rerun = subprocess.run(sweep_cmd(out), env=env_with(), capture_output=True, text=True)
    assert rerun.returncode == 3 and "] start " not in rerun.stderr
