"""Issue 12: a sweep resumed with the README's bare command keeps its thread policy (bit-identical losses);
a failed bookkeeping write fails one run, not the sweep; two sweeps on one folder; Ctrl-C to the driver."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import yaml

from loopscale.sweep import executors
from loopscale.sweep.rundir import RunState
from loopscale.train.checkpoint import latest_checkpoint

from .helpers import env_with, results, sweep_cmd, write_spec
from .test_crash_safety import kill_when, metrics_lines


def bare_env() -> dict:
    """The user's environment: no OMP_NUM_THREADS, so only the sweep's own policy sets the threads."""
    return {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}


def sweep(*args: str) -> list[str]:
    return [sys.executable, "-m", "loopscale", "sweep", *args]


def test_workers_2_killed_then_bare_resume_is_bit_identical(tiny_dataset, tmp_path):
    spec = write_spec(tmp_path, tiny_dataset)
    ref = tmp_path / "reference"
    proc = subprocess.run(
        sweep(str(spec), "--out", str(ref), "--workers", "2"), env=bare_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    expected = results(ref)
    policy = json.loads((ref / "executor.json").read_text())
    assert policy == {"workers": 2, "threads": max(1, (os.cpu_count() or 1) // 2)}

    out = tmp_path / "sweep"
    proc = subprocess.Popen(
        sweep(str(spec), "--out", str(out), "--workers", "2"),
        env=bare_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first = out / "runs" / next(iter(expected))
    kill_when(
        proc,
        lambda: (first / "checkpoints" / "latest").exists() and metrics_lines(first / "metrics.jsonl") > 30,
    )
    assert not (first / "result.json").exists()
    time.sleep(0.2)  # the training processes die with the executor (PDEATHSIG)

    rerun = subprocess.run(sweep("--out", str(out)), env=bare_env(), capture_output=True, text=True)  # README
    assert rerun.returncode == 0, rerun.stderr
    assert results(out) == expected  # bit-identical losses (repr in the CSV)
    for name in expected:
        config = yaml.safe_load((out / "runs" / name / "config.yaml").read_text())
        assert config["threads"] == policy["threads"]


def test_an_explicit_other_thread_count_on_resume_is_announced(tiny_dataset, tmp_path):
    spec = write_spec(tmp_path, tiny_dataset, budget=2e8, rs=(1,))
    out = tmp_path / "sweep"
    first = subprocess.run(
        sweep(str(spec), "--out", str(out), "--threads", "1"), env=bare_env(), capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    again = subprocess.run(
        sweep("--out", str(out), "--threads", "2"), env=bare_env(), capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr
    assert "--threads 2 differs from the 1 thread(s) per run" in again.stderr
    assert "not be bit-identical" in again.stderr


def test_a_failed_bookkeeping_write_fails_that_run_and_the_sweep_goes_on(tmp_path, monkeypatch):
    calls = []

    def fake_execute(root, name, nproc, threads, override_threads):
        calls.append(name)
        if name == "a":
            raise OSError(28, "No space left on device", str(root / "runs" / "a" / "exit.json"))
        return "ok"

    monkeypatch.setattr(executors, "_execute_run", fake_execute)
    monkeypatch.setattr(executors, "run_state", lambda root, name: RunState("pending", "", None))
    runs = [SimpleNamespace(name=name, total_flops=1, steps=1) for name in "abc"]  # what run_local reads
    stream = io.StringIO()
    statuses = executors.run_local(tmp_path, runs, workers=1, stream=stream)
    assert statuses == {"a": "failed", "b": "ok", "c": "ok"} and calls == ["a", "b", "c"]
    assert "failed a (could not write the run's files (No space left on device:" in stream.getvalue()


def test_a_second_sweep_with_nothing_left_says_so_plainly(tiny_dataset, tmp_path, capsys):
    from loopscale.sweep.runner import exit_code as _exit_code

    assert _exit_code({"a": "ok", "b": "busy"}) == 0
    err = capsys.readouterr().err
    assert "nothing left to run here: 1 run(s) done, 1 running in another sweep process" in err
    assert _exit_code({"a": "failed", "b": "busy"}) == 3


def test_two_sweeps_on_one_folder_cooperate(tiny_dataset, tmp_path):
    """A second `loopscale sweep` on a folder whose runs are all in flight in the first one says so in one
    line, starts nothing and exits 0; the first finishes every run once."""
    spec = write_spec(tmp_path, tiny_dataset, budget=2e8)
    expected = ["main_C2e8_d16_r1", "main_C2e8_d16_r2"]
    out, markers = tmp_path / "sweep", tmp_path / "markers"
    markers.mkdir()
    first = subprocess.Popen(
        [*sweep_cmd(out, spec), "--workers", "2"],
        env=env_with("hold", markers),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    while len(list(markers.glob("hold-*"))) < len(expected):  # both runs train, each holding its lock
        assert first.poll() is None, first.communicate()[1]
        time.sleep(0.05)
    second = subprocess.run(sweep("--out", str(out)), env=env_with(), capture_output=True, text=True)
    (markers / "release").touch()
    assert second.returncode == 0, second.stderr
    assert (
        f"nothing left to run here: 0 run(s) done, 2 running in another sweep process on this folder, "
        f"which finishes them: {', '.join(expected)}"
    ) in second.stderr
    assert all(f"busy {name} (another sweep process is running it)" in second.stderr for name in expected)
    assert first.wait() == 0, first.communicate()[1]
    assert {name: status for name, (status, _) in results(out).items()} == dict.fromkeys(expected, "ok")
    for name in expected:  # one training process per run: the second sweep started none
        log = (out / "runs" / name / "train.log").read_text()
        assert sum(line.startswith("=== ") for line in log.splitlines()) == 1


def test_sigint_to_the_driver_is_forwarded_and_the_run_resumes(tiny_dataset, tmp_path, reference):
    spec, expected = reference
    out = tmp_path / "sweep"
    proc = subprocess.Popen(
        sweep(str(spec), "--out", str(out), "--threads", "1"),
        env=bare_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # a shell starts background jobs with SIGINT ignored, and Python keeps an ignored SIGINT ignored:
        # give the driver the default disposition an interactive user's sweep has
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    first = out / "runs" / next(iter(expected))
    while metrics_lines(first / "metrics.jsonl") < 20:
        assert proc.poll() is None, "the sweep ended before the interrupt"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)  # to the driver only (as `kill -INT`): it forwards it to the run
    err = proc.communicate()[1]
    assert proc.returncode == 130, err
    assert "interrupted: stopping 1 running run(s)" in err
    assert f"resume with `loopscale sweep --out {out}`" in err
    assert (first / "checkpoints" / "latest").exists() and not (first / "result.json").exists()
    rerun = subprocess.run(sweep("--out", str(out)), env=bare_env(), capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert results(out) == expected


def test_a_second_sigint_stops_the_runs_at_once(tiny_dataset, tmp_path):
    """The first Ctrl-C lets a run finish its step and checkpoint; while it is still busy, a second one is
    forwarded too and stops it at once, keeping its last checkpoint."""
    spec = write_spec(tmp_path, tiny_dataset, budget=2e8, rs=(1,))
    out, markers, log = tmp_path / "sweep", tmp_path / "markers", tmp_path / "stderr"
    markers.mkdir()
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            sweep_cmd(out, spec),
            env=env_with("hold", markers),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    run = out / "runs" / "main_C2e8_d16_r1"
    while not (markers / f"hold-{run.name}").exists():  # the run waits inside its step-10 checkpoint write
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    while "at their next step boundary" not in log.read_text():  # forwarded; the run is still busy
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    assert proc.wait() == 130, log.read_text()
    err = log.read_text()
    assert "stopping 1 running run(s) at once" in err and f"resume with `loopscale sweep --out {out}`" in err
    assert metrics_lines(run / "metrics.jsonl") == 10 and latest_checkpoint(run).name == "step_00000010"
    assert not (run / "result.json").exists()


@pytest.mark.parametrize(
    "executor, expected",
    [
        ("local", "every run keeps its last checkpoint: resume with `loopscale sweep --out {out}`"),
        ("slurm", "the submitted SLURM tasks keep running (scancel stops them;"),
    ],
)
def test_the_interrupt_line_fits_the_executor(tmp_path, capsys, monkeypatch, executor, expected):
    from loopscale.cli import main
    from loopscale.cli import sweep as cli_sweep

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_sweep, "run_sweep", interrupted)
    out = tmp_path / "sweep"
    assert main(["sweep", "--out", str(out), "--executor", executor]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected.format(out=out) in err, err


def test_a_long_failure_reason_keeps_its_advice():
    advice = "; lower data.val_tokens"
    line = "loopscale train: error: " + "x" * 900 + advice
    reason = executors.classify_exit(2, f"noise\n{line}\n")
    assert reason.endswith(advice) and len(reason) < 700
    assert executors.classify_exit(2, "short message\n") == "exit code 2: short message"


def test_a_pending_reason_says_whether_a_checkpoint_exists(tmp_path):
    from loopscale.sweep.rundir import run_state

    folder = tmp_path / "runs" / "a"
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("")
    assert "no checkpoint yet: restarts from step 0" in run_state(tmp_path, "a").reason
    (folder / "checkpoints" / "step_00000010").mkdir(parents=True)
    assert "resumes from its checkpoint at step 10" in run_state(tmp_path, "a").reason
