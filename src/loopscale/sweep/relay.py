"""Progress of a sweep's first runs, relayed from their metrics.jsonl.

A sweep's ETA needs one finished run; until then nothing else says how far the sweep is (a sweep's runs
train without a bar of their own, into train.log). Every training process appends one metrics.jsonl line
per ``log_every`` steps to its run folder, so while the sweep waits for its first run to finish,
``wait_for_next_run`` shows the steps done of the runs in flight as one bar with an ETA.
"""

from __future__ import annotations

import json
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path

from loopscale.progress import progress_bar
from loopscale.sweep.plan import PlannedRun
from loopscale.sweep.rundir import run_dir

METRICS_FILE = "metrics.jsonl"  # written by train/loop.py
RELAY_INTERVAL_S = 2.0  # seconds between reads of the runs' metrics.jsonl
TAIL_BYTES = 4096  # a metrics.jsonl line is about 200 bytes


def latest_step(run_folder: Path) -> int:
    """The last step that ``run_folder/metrics.jsonl`` records (0 before the first line)."""
    try:
        with open(run_folder / METRICS_FILE, "rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - TAIL_BYTES))
            tail = fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return 0
    for line in reversed(tail.splitlines()):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue  # the line cut by the seek, or one being written
    return 0


def wait_for_next_run(root: Path, futures: dict[Future, PlannedRun], *, relay: bool) -> set[Future]:
    """Wait until a run of ``futures`` (future → its run) finishes; the finished futures.

    ``relay`` (no run has finished in this sweep process yet, so there is no ETA): meanwhile show the steps
    done over the steps planned of the runs in flight, read every ``RELAY_INTERVAL_S``; the bar closes
    when the first of them finishes."""
    if not relay:
        return wait(futures, return_when=FIRST_COMPLETED)[0]
    running = list(futures.values())
    label = "first run" if len(running) == 1 else "first runs"
    desc = f"{label} ({', '.join(run.name for run in running)})"
    with progress_bar(sum(run.steps for run in running), desc, "step") as advance:
        shown = 0
        while True:
            finished, _ = wait(futures, timeout=RELAY_INTERVAL_S, return_when=FIRST_COMPLETED)
            steps = sum(min(latest_step(run_dir(root, run.name)), run.steps) for run in running)
            advance(steps - shown)
            shown = steps
            if finished:
                return finished
