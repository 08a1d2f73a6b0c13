"""Issue 20: with two sweep processes on one folder, progress counts the folder (a run is done when its
result.json exists, whoever finished it) and the final statuses never list a finished run as running in
the other process; an interrupted lr-sweep or demo names the command that resumes it."""

from __future__ import annotations

import io
import json
import re
from types import SimpleNamespace

from loopscale.cli import main
from loopscale.sweep import executors
from loopscale.sweep.rundir import run_dir
from loopscale.sweep.runner import exit_code as _exit_code

from .helpers import write_spec


def finish(root, name: str, status: str = "ok") -> None:
    folder = run_dir(root, name)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(json.dumps({"status": status, "reason": None, "val_loss": 1.0}))


def test_progress_counts_runs_finished_by_another_process(tmp_path, monkeypatch):
    runs = [SimpleNamespace(name=name, total_flops=10) for name in "abcd"]
    finish(tmp_path, "a")
    stream = io.StringIO()
    progress = executors.Progress(tmp_path, runs, stream)
    progress.show("start")
    finish(tmp_path, "b")  # by the other sweep process: this one never ran it
    finish(tmp_path, "c", "failed")
    progress.show("later")
    first, second = stream.getvalue().splitlines()
    assert first.startswith("[sweep 1/4 done] start")
    assert second.startswith("[sweep 3/4 done, 1 failed] later")
    assert (progress.remaining_flops, progress.finished_flops) == (10, 20)


def test_a_run_the_other_process_finished_is_not_reported_running(tmp_path, capsys):
    finish(tmp_path, "a")
    finish(tmp_path, "b")  # was "busy" (locked by the other process) and has finished since
    statuses = executors.final_statuses(tmp_path, {"a": "ok", "b": "busy", "c": "busy"})
    assert statuses == {"a": "ok", "b": "ok", "c": "busy"}
    assert _exit_code(statuses) == 0
    err = capsys.readouterr().err
    assert "2 run(s) done, 1 running in another sweep process on this folder, which finishes them: c" in err


def test_an_interrupted_lr_sweep_names_its_resume_command(tiny_dataset, tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C while the first run trains

    monkeypatch.setattr(executors, "execute_run", interrupted)
    spec = write_spec(tmp_path, tiny_dataset)
    args = ["lr-sweep", str(spec), "--out", str(tmp_path / "lr"), "--budget", "1e8", "--widths", "16",
            "--rs", "1", "--multipliers", "0.5", "1", "2", "--threads", "1"]
    assert main(args) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.fullmatch(r"loopscale lr-sweep: interrupted; resume with `loopscale lr-sweep .*`", last)
    assert last.endswith(f"`loopscale lr-sweep {spec} --out {tmp_path / 'lr'} --budget 1e8 --widths 16 "
                         "--rs 1 --multipliers 0.5 1 2 --threads 1`")
