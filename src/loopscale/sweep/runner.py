"""Running a sweep folder from a spec on this machine or through SLURM: the one function every command that
trains a sweep calls (``loopscale sweep``, ``demo``, ``price``), with its thread policy and exit code."""

from __future__ import annotations

import sys
from pathlib import Path

from loopscale.errors import UserError


def with_data(spec, data: str | None):
    """``spec`` with its training data at ``data`` (None: as it is)."""
    if data is None:
        return spec
    from loopscale.config import replace

    train = dict(spec.train)
    train["data"] = {**(train.get("data") or {}), "path": str(data)}
    return replace(spec, train=train)


def with_trainer(spec, trainer: str | None):
    """``spec`` trained by the command ``trainer`` through the run contract (None: as it is)."""
    if trainer is None:
        return spec
    from loopscale.config import replace

    return replace(spec, trainer=trainer)


def _threads(workers: int, threads: int | None) -> int | None:
    import os

    if threads is not None:
        return threads
    return max(1, (os.cpu_count() or 1) // workers) if workers > 1 else None


def check_counts(workers: int | None, threads: int | None) -> None:
    """Refuse a worker or thread count below 1 (one line)."""
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    if threads is not None and threads < 1:
        raise UserError(f"--threads must be >= 1, got {threads}")


def run_sweep(
    spec,
    out: Path,
    *,
    executor: str = "local",
    workers: int | None = None,
    threads: int | None = None,
    slurm=None,
    pairs: dict[str, str] | None = None,
) -> dict[str, str]:
    """Create or resume sweep folder ``out`` and run every unfinished run; returns {run: status} (``pairs``:
    run name → the base run folder it pairs with, for run.json under a trainer).

    Every input is checked before anything is written. A local sweep records its thread policy
    (``executor.json``: workers and threads per run) on its first start and reuses it on resume unless
    ``workers`` / ``threads`` are given; another thread count is allowed but not bit-identical (a note says
    so), since the count changes the floating-point reduction order of every run.
    """
    from loopscale.io import atomic_write_json, check_output, claim_folder
    from loopscale.sweep.executors import run_local, run_slurm
    from loopscale.sweep.rundir import POLICY_FILE, init_sweep, open_sweep, read_policy, run_state

    out = Path(out)
    check_counts(workers, threads)
    check_output(out, "--out", folder=True, kind="sweep", deep=True)
    if spec is None:
        spec, _ = open_sweep(out)
    recorded = read_policy(out)
    runs = init_sweep(spec, out, pairs)
    claim_folder(out, "sweep")  # marked once init_sweep validated every run and wrote sweep.yaml
    if executor == "slurm":
        return run_slurm(out, runs, slurm, nproc=spec.nproc)
    override = False
    if recorded is None:
        if workers is None and threads is None:
            from loopscale.sweep.plan import default_layout

            todo = [run for run in runs if run_state(out, run.name).status != "ok"]
            layout = default_layout(spec, todo)
            workers, threads = layout.workers, layout.threads
            print(f"loopscale sweep: layout: {layout.why} (--workers / --threads change it)", file=sys.stderr)
        else:
            workers = workers or 1
            threads = _threads(workers, threads)
        atomic_write_json(out / POLICY_FILE, {"workers": workers, "threads": threads})
    else:
        workers = workers or recorded.get("workers") or 1
        if threads is None:
            threads = recorded.get("threads")
        elif threads != recorded.get("threads"):
            override = True
            started = recorded.get("threads") or "default number of"
            print(
                f"loopscale sweep: note: --threads {threads} differs from the {started} thread(s) per run "
                "this sweep started with; resumed runs will not be bit-identical to an uninterrupted sweep",
                file=sys.stderr,
            )
    return run_local(out, runs, workers=workers, nproc=spec.nproc, threads=threads, override_threads=override)


def exit_code(statuses: dict[str, str]) -> int:
    """0 when every run finished ok, or when every run is ok or running in another sweep process on this
    folder (this one has nothing left to do); 3 when some failed or did not finish (stopped, cancelled)."""
    busy = sorted(name for name, s in statuses.items() if s == "busy")
    if busy and all(s in ("ok", "busy") for s in statuses.values()):
        print(
            f"nothing left to run here: {len(statuses) - len(busy)} run(s) done, {len(busy)} running in "
            f"another sweep process on this folder, which finishes them: {', '.join(busy)}",
            file=sys.stderr,
        )
        return 0
    code = 0
    for status, what in (
        ("failed", "failed"),
        ("pending", "did not finish (rerun to resume)"),
        ("busy", "are running in another sweep process on this folder"),
    ):
        names = sorted(name for name, s in statuses.items() if s == status)
        if names:
            print(f"{len(names)} run(s) {what}: {', '.join(names)} (reasons in results.csv)", file=sys.stderr)
            code = 3
    return code
