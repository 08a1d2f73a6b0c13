"""Executors: run every unfinished run of a sweep folder, each in its own process.

``execute_run`` is the one run function used by every executor (local threads and SLURM array tasks): it
takes the run's lock, skips a finished run, starts ``loopscale train --resume`` (through torchrun when the
sweep has ``nproc > 1``), or the sweep's ``trainer`` command through the run contract (``sweep.contract``),
and, when the process ends without result.json, records why in exit.json (killed, out of memory, crashed).
Because the training run checkpoints atomically and resumes, an executor killed at any moment (kill -9
included) loses at most the work since the last checkpoint: rerunning the same command finishes the sweep.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from loopscale.errors import UserError
from loopscale.io import atomic_write_json
from loopscale.sweep.contract import (
    RESULT_LINE,
    is_preempted,
    trainer_command,
    trainer_env,
    write_stdout_result,
)
from loopscale.sweep.plan import PlannedRun, format_seconds
from loopscale.sweep.relay import wait_for_next_run
from loopscale.sweep.rundir import (
    EXIT_FILE,
    LOG_FILE,
    RESULT_FILE,
    RUN_CONFIG_FILE,
    SPEC_FILE,
    run_dir,
    run_state,
)
from loopscale.train.perf import machine_load

# Exit statuses of a training process stopped on purpose (Ctrl-C, scancel, preemption).
_STOPPED = {-signal.SIGTERM, -signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGINT}
_OOM_MARKERS = ("out of memory", "outofmemoryerror", "cannot allocate memory", "memoryerror")


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child must not load libraries
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child: get SIGKILL when the executor dies (so a killed sweep leaves no orphan training run),
    and leave the terminal's process group, so a Ctrl-C reaches only the executor, which forwards it once
    (a training process stops at once on a second interrupt)."""
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setpgrp()


# Seconds torchrun gives its ranks to finish the current step and write a checkpoint after a forwarded
# interrupt before it kills them (its default, 30 s, is shorter than one step plus a checkpoint of a large
# model); a second interrupt to the sweep stops them at once.
TORCHRUN_SHUTDOWN_S = 900


def train_command(
    root: Path, name: str, nproc: int, *, resume: bool = True, threads: int | None = None
) -> list[str]:
    """The command line of one run: ``loopscale train --config run.yaml --out RUN_DIR [--resume]``
    (``--resume`` once the run has started; ``--threads N`` when the user overrides the recorded count)."""
    folder = run_dir(root, name)
    args = ["train", "--config", str(folder / RUN_CONFIG_FILE), "--out", str(folder)]
    if resume:
        args.append("--resume")
    if threads is not None:
        args += ["--threads", str(threads)]
    if nproc > 1:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            f"--shutdown-timeout={TORCHRUN_SHUTDOWN_S}",
            "-m",
            "loopscale",
            *args,
        ]
    return [sys.executable, "-m", "loopscale", *args]


def loggable_command(command: list[str], folder: Path) -> str:
    """A run's command line as train.log records it: the interpreter by its name and paths inside the run
    folder relative to it (``--config run.yaml --out .``), marked ``[in the run folder]``, so a published
    sweep carries no absolute path of the machine that ran it."""
    inside = str(folder)
    words = []
    for word in command:
        if word == sys.executable:
            word = Path(word).name
        elif word == inside or word.startswith(inside + os.sep):
            word = os.path.relpath(word, inside)
        words.append(word)
    return "[in the run folder] " + " ".join(words)


def classify_exit(returncode: int, log_tail: str) -> str:
    """One-line reason for a training process that ended without writing result.json."""
    oom = any(marker in log_tail.lower() for marker in _OOM_MARKERS)
    if returncode < 0:
        sig = signal.Signals(-returncode).name
        if oom or sig == "SIGKILL":
            return f"killed by {sig}" + (" (out of memory)" if oom else " (out of memory or cancelled)")
        return f"killed by {sig}"
    if oom:
        return "out of memory"
    last = next((line.strip() for line in reversed(log_tail.splitlines()) if line.strip()), "")
    return f"exit code {returncode}" + (f": {shorten(last)}" if last else "")


def shorten(line: str, limit: int = 600) -> str:
    """A long one-line reason cut in the middle, never at the end (where the advice usually is)."""
    if len(line) <= limit:
        return line
    keep = (limit - 3) // 2
    return f"{line[:keep]} … {line[-keep:]}"


def execute_run(
    root: str | Path,
    name: str,
    nproc: int = 1,
    threads: int | None = None,
    override_threads: bool = False,
) -> str:
    """Run one run to completion (or resume it); returns its final status: ok, failed, pending or busy.

    ``busy``: another executor holds the run's lock (it is running right now elsewhere). ``pending``: the
    process was stopped (executor interrupted) and the run will resume on the next attempt. ``threads``
    sets OMP/MKL threads of a run's first start; a started run keeps the count recorded in its config.yaml
    unless ``override_threads`` (the user's explicit ``--threads``). A bookkeeping write that fails (disk
    full, read-only run folder) makes this run ``failed`` (reason in ``bookkeeping_failures``); it never
    raises, so the other runs of the sweep go on.
    """
    root = Path(root)
    try:
        return _execute_run(root, name, nproc, threads, override_threads)
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        bookkeeping_failures[(str(root), name)] = (
            f"could not write the run's files ({exc.strerror or exc}:{where})"
        )
        return "failed"


# (sweep folder, run) → why its bookkeeping failed in this process (it could not be written to exit.json)
bookkeeping_failures: dict[tuple[str, str], str] = {}


def _execute_run(root: Path, name: str, nproc: int, threads: int | None, override_threads: bool) -> str:
    bookkeeping_failures.pop((str(root), name), None)
    folder = run_dir(root, name)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "busy"
        if (folder / RESULT_FILE).exists():
            return run_state(root, name).status
        (folder / EXIT_FILE).unlink(missing_ok=True)
        env = dict(os.environ)
        if threads is not None:
            env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        trainer = _trainer(root)
        if trainer is None:
            command = train_command(
                root,
                name,
                nproc,
                resume=(folder / "config.yaml").exists(),
                threads=threads if override_threads else None,
            )
        else:  # another trainer, through the run contract (sweep.contract)
            command = trainer_command(trainer, folder, name)
            env.update(trainer_env(folder, name))
        log_path = folder / LOG_FILE
        with open(log_path, "a") as log:
            log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {loggable_command(command, folder)}\n")
            log.flush()
            attempt_start = log.tell()
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=_die_with_parent,
            )
            _children.add(proc)
            try:
                returncode = proc.wait()
            finally:
                _children.discard(proc)
        if trainer is not None and not (folder / RESULT_FILE).exists() and returncode == 0:
            with open(log_path, errors="replace") as fh:
                fh.seek(attempt_start)
                write_stdout_result(folder, fh.read())  # a trainer that prints its result instead
        if (folder / RESULT_FILE).exists():
            return run_state(root, name).status
        stopped = is_preempted(returncode) if trainer is not None else returncode in _STOPPED
        if stopped or _stopping.is_set():
            return "pending"  # stopped on purpose (sweep interrupted, job preempted): resume later
        with open(log_path, errors="replace") as fh:
            fh.seek(max(0, log_path.stat().st_size - 4000))
            tail = fh.read()
        reason = classify_exit(returncode, tail)
        if trainer is not None and returncode == 0:
            reason = (
                f"contract: the trainer exited 0 without result.json or a {RESULT_LINE} line on stdout "
                "(docs/contract.md)"
            )
        atomic_write_json(
            folder / EXIT_FILE, {"status": "failed", "reason": reason, "returncode": returncode}
        )
        return "failed"


def _trainer(root: Path) -> str | None:
    """The sweep's trainer command (sweep.yaml's ``trainer``), None for loopscale's own."""
    from loopscale.config import load_yaml

    path = root / SPEC_FILE
    trainer = load_yaml(path).get("trainer") if path.is_file() else None
    return None if trainer is None else str(trainer)


_children: set[subprocess.Popen] = set()  # training processes of this executor now running


_stopping = threading.Event()  # set when the local executor is interrupted


# ---------------------------------------------------------------------------------------------- progress


@dataclass
class Progress:
    """Whole-sweep progress: runs done / total, failures, the runs in flight and an ETA.

    Counts come from the sweep folder, not from this process: a run is done when its result.json exists
    (whichever sweep process on the folder finished it). The ETA divides the training FLOPs of the runs
    still without result.json by the FLOP rate of the runs finished since this invocation started (so it
    includes process start and evaluation overheads, and every process working on the folder). ``busy``:
    the hint printed beside the ETA when other work loaded the machine as a local sweep started
    (``perf.MachineLoad.note``).
    """

    root: Path
    runs: list[PlannedRun]
    stream: TextIO | None = None  # None: the current sys.stderr
    running: list[str] = field(default_factory=list)
    start: float = field(default_factory=time.monotonic)
    busy: str | None = None
    done: int = 0
    failed: int = 0
    remaining_flops: int = 0
    finished_flops: int = 0
    unfinished_at_start: frozenset[str] = field(init=False, default=frozenset())

    def __post_init__(self) -> None:
        self.unfinished_at_start = frozenset(self.statuses_on_disk()[1])
        self.recount()

    @property
    def total(self) -> int:
        return len(self.runs)

    def statuses_on_disk(self) -> tuple[dict[str, str], list[str]]:
        """({run: ok | failed} of the runs with result.json, [the runs without one])."""
        finished, unfinished = {}, []
        for run in self.runs:
            if (run_dir(self.root, run.name) / RESULT_FILE).exists():
                try:
                    finished[run.name] = run_state(self.root, run.name).status
                except UserError:  # a damaged result.json: done, and collect names it
                    finished[run.name] = "failed"
            else:
                unfinished.append(run.name)
        return finished, unfinished

    def recount(self) -> None:
        """Read the counts from the sweep folder."""
        finished, unfinished = self.statuses_on_disk()
        flops = {run.name: run.total_flops for run in self.runs}
        self.done = len(finished)
        self.failed = sum(status == "failed" for status in finished.values())
        self.remaining_flops = sum(flops[name] for name in unfinished)
        self.finished_flops = sum(flops[name] for name in finished if name in self.unfinished_at_start)

    def eta(self) -> str:
        elapsed = time.monotonic() - self.start
        if self.finished_flops == 0 or elapsed <= 0:
            eta = "ETA after the first run"
        else:
            eta = f"ETA {format_seconds(self.remaining_flops / (self.finished_flops / elapsed))}"
        return f"{eta} ({self.busy})" if self.busy else eta

    def show(self, event: str) -> None:
        self.recount()
        elapsed = format_seconds(time.monotonic() - self.start)
        current = ", ".join(self.running) if self.running else "-"
        failed = f", {self.failed} failed" if self.failed else ""
        print(
            f"[sweep {self.done}/{self.total} done{failed}] {event} | running: {current} | "
            f"elapsed {elapsed}, "
            f"{self.eta()}",
            file=self.stream or sys.stderr,
            flush=True,
        )


def _start(
    root: Path, runs: list[PlannedRun], stream: TextIO | None
) -> tuple[dict[str, str], list[PlannedRun], Progress]:
    """Statuses now, the runs to (re)run — every run without result.json, including runs whose process was
    killed or crashed (they resume from their checkpoint) — and a Progress counting the sweep folder."""
    states = {run.name: run_state(root, run.name) for run in runs}
    todo = [run for run in runs if states[run.name].result is None]
    progress = Progress(root, runs, stream)
    return {name: state.status for name, state in states.items()}, todo, progress


def final_statuses(root: Path, statuses: dict[str, str]) -> dict[str, str]:
    """``statuses`` with every run another sweep process was running (``busy``) replaced by its state on
    disk once it finished there (result.json present): a finished run is never reported as running."""
    finished = {name for name, status in statuses.items()
                if status == "busy" and (run_dir(root, name) / RESULT_FILE).exists()}
    return {name: run_state(root, name).status if name in finished else status
            for name, status in statuses.items()}


def _event(root: Path, name: str, status: str) -> str:
    if status == "failed":
        reason = bookkeeping_failures.get((str(root), name)) or run_state(root, name).reason
        return f"failed {name} ({reason})"
    if status == "pending":
        return f"stopped {name} (resumes on the next call)"
    if status == "busy":
        return f"busy {name} (another sweep process is running it)"
    return f"{status} {name}"


# ---------------------------------------------------------------------------------------------- local


def run_local(
    root: Path,
    runs: list[PlannedRun],
    *,
    workers: int = 1,
    nproc: int = 1,
    threads: int | None = None,
    override_threads: bool = False,
    stream: TextIO | None = None,
) -> dict[str, str]:
    """Run every unfinished run with ``workers`` concurrent processes; returns {run name: final status}.

    Finished runs (result.json present) are skipped; interrupted, killed or crashed ones are retried and
    resume from their checkpoint. An interrupt (Ctrl-C, SIGTERM to this process) is forwarded to the
    running training processes, which checkpoint and stop; then KeyboardInterrupt propagates.
    """
    if workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    statuses, todo, progress = _start(root, runs, stream)
    progress.busy = machine_load().note("ETA may be longer")  # measured before this sweep adds its own load
    progress.show(f"{progress.done} finished before, {len(todo)} to run with {workers} worker(s)")
    _stopping.clear()
    pool = ThreadPoolExecutor(max_workers=workers)
    futures = {}
    queue = list(todo)
    previous = _interrupt_on_signals()
    try:
        while queue or futures:
            while queue and len(futures) < workers:
                run = queue.pop(0)
                futures[pool.submit(execute_run, root, run.name, nproc, threads, override_threads)] = run
                progress.running.append(run.name)
                progress.show(f"start {run.name}")
            # until a run finishes there is no ETA: show the running runs' steps meanwhile
            finished = wait_for_next_run(root, futures, relay=progress.finished_flops == 0)
            for future in finished:
                run = futures.pop(future)
                status = future.result()
                statuses[run.name] = status
                progress.running.remove(run.name)
                progress.show(_event(root, run.name, status))
    except BaseException:
        _stopping.set()
        _stop_children(progress)
        raise
    finally:
        _wait_for_runs(pool, progress)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return final_statuses(root, statuses)


def _wait_for_runs(pool: ThreadPoolExecutor, progress: Progress) -> None:
    """Wait until the running training processes ended; an interrupt meanwhile is forwarded as well (a
    training process stops at once on its second interrupt, torchrun kills its ranks)."""
    while True:
        try:
            pool.shutdown(wait=True, cancel_futures=True)
            return
        except KeyboardInterrupt:
            _stop_children(progress, again=True)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _interrupt_on_signals() -> dict:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the driver, whatever disposition it inherited (a shell
    starts background jobs with SIGINT ignored, and Python keeps it ignored); returns the old handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}


def _stop_children(progress: Progress, again: bool = False) -> None:
    """Forward the interrupt to the running training processes: the first one checkpoints and stops them
    after their current step, a second one (``again``) stops them at once."""
    children = list(_children)
    if not children:
        return
    if again:
        what = "at once (each resumes from its last checkpoint)"
    else:
        what = "at their next step boundary (each writes a checkpoint first; interrupt again to stop at once)"
    print(
        f"interrupted: stopping {len(children)} running run(s) {what}: {', '.join(progress.running)}",
        file=progress.stream or sys.stderr,
        flush=True,
    )
    for proc in children:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)


# ---------------------------------------------------------------------------------------------- SLURM


@dataclass
class SlurmOptions:
    """SLURM resources per array task (one task = one run). ``parallelism`` caps concurrent tasks.

    ``cluster``: "slurm", or "local" for submitit's local executor (same run function and job files, no
    scheduler; the fallback where SLURM cannot run).
    """

    cluster: str = "slurm"
    partition: str | None = None
    timeout_min: int = 60
    cpus_per_task: int = 1
    gpus_per_task: int = 0
    mem_gb: float | None = None
    parallelism: int = 16
    extra: dict = field(default_factory=dict)  # passed to submitit as slurm_additional_parameters


def _slurm_job_class():
    import submitit

    class RunJob(submitit.helpers.Checkpointable):
        """A requeue-safe array task: on timeout/preemption submitit requeues it with the same arguments,
        and the run resumes from its last checkpoint."""

        def __call__(self, root: str, name: str, nproc: int, threads: int | None) -> str:
            return execute_run(root, name, nproc, threads)

    return RunJob


def run_slurm(
    root: Path,
    runs: list[PlannedRun],
    options: SlurmOptions,
    *,
    nproc: int = 1,
    stream: TextIO | None = None,
    poll_s: float = 2.0,
) -> dict[str, str]:
    """Submit every unfinished run as ONE SLURM array job (submitit) and wait for it, showing progress."""
    import submitit

    statuses, todo, progress = _start(root, runs, stream)
    if not todo:
        progress.show("nothing to run")
        return statuses
    executor = submitit.AutoExecutor(folder=Path(root) / "slurm" / "%j", cluster=options.cluster)
    params: dict = {
        "timeout_min": options.timeout_min,
        "cpus_per_task": options.cpus_per_task,
        "slurm_array_parallelism": options.parallelism,
        "name": f"loopscale-{Path(root).name}",
    }
    if options.partition:
        params["slurm_partition"] = options.partition
    if options.gpus_per_task:
        params["gpus_per_node"] = options.gpus_per_task
    if options.mem_gb:
        params["mem_gb"] = options.mem_gb
    if options.extra:
        params["slurm_additional_parameters"] = options.extra
    executor.update_parameters(**params)
    job = _slurm_job_class()()
    n = len(todo)
    jobs = executor.map_array(
        job, [str(root)] * n, [r.name for r in todo], [nproc] * n, [options.cpus_per_task] * n
    )
    progress.show(f"submitted array job {jobs[0].job_id.split('_')[0]} with {n} task(s)")
    pending = dict(zip(jobs, todo))
    while pending:
        time.sleep(poll_s)
        for slurm_job in [j for j in pending if j.done()]:
            run = pending.pop(slurm_job)
            try:
                status = slurm_job.result()
            except Exception as exc:  # the task itself died (cancelled, node failure): record why
                if not (run_dir(root, run.name) / RESULT_FILE).exists():
                    last = (str(exc).strip().splitlines() or ["no message"])[-1]
                    last = shorten(last)
                    atomic_write_json(
                        run_dir(root, run.name) / EXIT_FILE,
                        {"status": "failed", "reason": f"SLURM task {slurm_job.job_id} ended: {last}"},
                    )
                status = run_state(root, run.name).status
            statuses[run.name] = status
            progress.show(_event(root, run.name, status))
    return statuses
