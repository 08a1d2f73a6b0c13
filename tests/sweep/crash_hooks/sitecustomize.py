"""Test-only pause points for the crash-safety tests, loaded through PYTHONPATH by every Python process of
a test sweep (the executor and each training run). Each pause writes a marker file and sleeps, so the test
can deliver a real ``kill -9`` at exactly that moment:

- LOOPSCALE_TEST_PAUSE=checkpoint: inside the checkpoint writer, after the weights file and before the
  optimiser state (a half-written checkpoint folder exists);
- LOOPSCALE_TEST_PAUSE=between-runs: in the executor, after a run finished and before the next starts;
- LOOPSCALE_TEST_PAUSE=hold: in each training run, right after its first checkpoint: marks
  ``hold-<run folder name>`` and waits (holding the run's lock) until the test creates the file ``release``.
- LOOPSCALE_TEST_PAUSE=eval-hold: in ``eval-sweep`` (its worker processes), the first run to finish writes
  its eval.json; every later run stops half-way through writing its own (the temporary file holds a
  truncated document), marks ``hold-<run folder name>`` and waits there until the process is killed.

Markers go to LOOPSCALE_TEST_MARKERS (a folder). Without these variables nothing is patched.
"""

import os
import time
from pathlib import Path

_PAUSE = os.environ.get("LOOPSCALE_TEST_PAUSE")
_MARKERS = os.environ.get("LOOPSCALE_TEST_MARKERS")


def _mark_and_sleep(name: str) -> None:
    Path(_MARKERS, name).touch()
    time.sleep(120)


if _PAUSE == "checkpoint" and _MARKERS:
    import loopscale.train.checkpoint as checkpoint

    _save_tensors = checkpoint.save_tensors

    def save_tensors(path, tensors):
        _save_tensors(path, tensors)
        if path.name == checkpoint.WEIGHTS:
            _mark_and_sleep("checkpoint")

    checkpoint.save_tensors = save_tensors

if _PAUSE == "between-runs" and _MARKERS:
    import loopscale.sweep.executors as executors

    _execute_run = executors.execute_run

    def execute_run(*args, **kwargs):
        status = _execute_run(*args, **kwargs)
        if status == "ok":
            _mark_and_sleep("between-runs")
        return status

    executors.execute_run = execute_run

if _PAUSE == "hold" and _MARKERS:
    import loopscale.train.checkpoint as checkpoint

    _save_checkpoint = checkpoint.save_checkpoint

    def save_checkpoint(run_dir, step, *args, **kwargs):
        _save_checkpoint(run_dir, step, *args, **kwargs)
        release = Path(_MARKERS, "release")
        if not release.exists():
            Path(_MARKERS, f"hold-{Path(run_dir).name}").touch()
        while not release.exists():
            time.sleep(0.05)

    checkpoint.save_checkpoint = save_checkpoint

if _PAUSE == "eval-hold" and _MARKERS:
    import json

    import loopscale.eval.suite as suite
    from loopscale.io import atomic_write

    _atomic_write_json = suite.atomic_write_json

    def atomic_write_json(path, obj):
        try:  # the first run of the whole sweep (across worker processes) is written as usual
            os.close(os.open(Path(_MARKERS, "first"), os.O_CREAT | os.O_EXCL))
            return _atomic_write_json(path, obj)
        except FileExistsError:
            pass

        def write_half_and_wait(tmp):
            Path(tmp).write_text(json.dumps(obj)[:20])
            Path(_MARKERS, f"hold-{Path(path).parent.name}").touch()
            while True:
                time.sleep(0.05)

        return atomic_write(path, write_half_and_wait)

    suite.atomic_write_json = atomic_write_json
