"""The on-disk layout of a sweep folder and the state of each run in it.

::

    SWEEP_DIR/sweep.yaml            the spec (resolved), written once; a rerun must match it
    SWEEP_DIR/runs/NAME/run.yaml    the run's TrainConfig (input of ``loopscale train``)
    SWEEP_DIR/runs/NAME/run.json    a sweep with a ``trainer``: what the run is and must spend and count, for
                                    that trainer and for the checks of its result (``sweep.contract``)
    SWEEP_DIR/runs/NAME/...         written by the training run: config.yaml, metrics.jsonl, checkpoints,
                                    result.json (status ok|failed) at the end
    SWEEP_DIR/runs/NAME/exit.json   written by the executor when the process ended without result.json
                                    (killed, out of memory, crashed); removed when the run is retried
    SWEEP_DIR/runs/NAME/train.log   stdout + stderr of every attempt (appended)
    SWEEP_DIR/runs/NAME/reused.json a run taken finished from a ``reuse`` sweep folder (its small files
                                    copied, result.json last; the source run folder, relative)
    SWEEP_DIR/executor.json         a local sweep's workers and threads per run, reused on resume
    SWEEP_DIR/results.csv|.parquet  written by collect

A run is *done* when result.json exists (status ok or failed): reruns skip it. Anything else is retried
and the training run resumes from its last checkpoint.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from loopscale.config import dump_yaml, from_dict, load_yaml, to_dict
from loopscale.errors import UserError
from loopscale.io import atomic_write_bytes, atomic_write_json, atomic_write_text
from loopscale.sweep.contract import RESULT_FILE, RUN_CONFIG_FILE, RUN_FILE, check_result, run_document
from loopscale.sweep.plan import PlannedRun, plan_sweep, run_train_config
from loopscale.sweep.spec import SweepSpec

SPEC_FILE = "sweep.yaml"
EXIT_FILE = "exit.json"
LOG_FILE = "train.log"
POLICY_FILE = "executor.json"  # local sweeps: {"workers": W, "threads": threads per run or null}


class DamagedFile(UserError):
    """A run's JSON file that reads but holds a field of the wrong kind (``field``: what is wrong, e.g. "must
    be a number, got 'low'"). ``sweep`` refuses to go on (one line); ``collect`` makes the run a failed row
    whose reason names the file and the field, so ``report`` and ``design --from`` work on the rest."""

    def __init__(self, path: Path, field: str, problem: str):
        super().__init__(f"{path}: {field} {problem}; delete it to rerun this run")
        self.path, self.field, self.problem = Path(path), field, problem


def is_number(value) -> bool:
    """A JSON number (int or float, not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class RunState:
    """Where one run stands: status ``ok`` / ``failed`` (finished), ``pending`` (never started or
    interrupted: resumable); ``reason`` says why a run failed or is not finished."""

    status: str
    reason: str
    result: dict | None


def run_dir(root: Path, name: str) -> Path:
    return Path(root) / "runs" / name


def run_names(root: Path) -> list[str]:
    """The names of sweep folder ``root``'s run folders (``root/runs/NAME``), sorted; a one-line UserError
    when it has no runs/ folder (what ``eval-sweep`` needs; ``open_sweep`` needs sweep.yaml as well)."""
    runs = Path(root) / "runs"
    if not runs.is_dir():
        raise UserError(f"{root} is not a sweep folder (no runs/ folder); run `loopscale sweep` first")
    return sorted(p.name for p in runs.iterdir() if p.is_dir())


def read_json(path: Path, remedy: str = "delete it to rerun this run") -> dict:
    """Read a JSON object; a truncated or invalid file is a one-line UserError naming it and ending in
    ``remedy`` (the file is kept)."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        where = f"{exc.msg} at line {exc.lineno}"
        raise UserError(f"{path}: truncated or invalid JSON ({where}); {remedy}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file (invalid UTF-8); {remedy}") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a folder, not a JSON file; {remedy}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object; {remedy}")
    return data


def read_record(path: Path, record: type, remedy: str):
    """``path``'s JSON as a ``record`` (a ``fit.results.Record`` type): unreadable JSON (``read_json``) or
    data that does not make the record is a one-line UserError naming the file and ending in ``remedy``."""
    from loopscale.fit.results import RecordError

    try:
        return record.from_dict(read_json(path, remedy), str(path))
    except RecordError as exc:
        raise UserError(f"{path}: not a {path.name} loopscale reads ({exc}); {remedy}") from exc


def read_policy(root: Path) -> dict | None:
    """The thread policy a local sweep started with (``executor.json``), or None before its first start."""
    path = Path(root) / POLICY_FILE
    if not path.exists():
        return None
    policy = read_json(path)
    for key in ("workers", "threads"):
        value = policy.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise UserError(f"{path}: {key} must be a whole number >= 1 or null, got {value!r}")
    return policy


def read_expected(folder: Path) -> dict | None:
    """run.json of a run folder, None when the run was planned without the contract (no run.json)."""
    path = Path(folder) / RUN_FILE
    return read_json(path, "rerun the sweep to write it again") if path.is_file() else None


def run_state(root: Path, name: str) -> RunState:
    folder = run_dir(root, name)
    result_path = folder / RESULT_FILE
    if result_path.exists():
        result = read_json(result_path)
        expected = read_expected(folder)
        if expected is not None:  # a run of the run contract: its result is checked against its run.json
            result, problem = check_result(result, expected)
            if problem:
                return RunState("failed", f"contract: result.json {problem}", result)
        status = result.get("status")
        if status not in ("ok", "failed"):
            raise DamagedFile(result_path, "status", f"must be 'ok' or 'failed', got {status!r}")
        loss = result.get("val_loss")
        if status == "ok" and not is_number(loss):
            raise DamagedFile(result_path, "val_loss", f"must be a number, got {loss!r}")
        return RunState(status, str(result.get("reason") or ""), result)
    exit_path = folder / EXIT_FILE
    if exit_path.exists():
        info = read_json(exit_path)
        return RunState("failed", str(info.get("reason", "process ended without result.json")), None)
    if (folder / "metrics.jsonl").exists():
        checkpoints = sorted((folder / "checkpoints").glob("step_*"))
        resumes = (
            f"resumes from its checkpoint at step {int(checkpoints[-1].name.split('_')[1])}"
            if checkpoints and checkpoints[-1].name.split("_")[1].isdigit()
            else "no checkpoint yet: restarts from step 0"
        )
        return RunState("pending", f"interrupted: started but no result.json yet ({resumes})", None)
    return RunState("pending", "not run yet", None)


def init_sweep(spec: SweepSpec, root: Path, pairs: dict[str, str] | None = None) -> list[PlannedRun]:
    """Create (or reopen) a sweep folder: write sweep.yaml and every run's run.yaml (and, with a
    ``trainer``, every unfinished run's run.json; ``pairs``: run name → the base run folder it pairs with).

    Every unfinished run is checked first (``check_runnable``); reopening with a different spec is refused
    (a sweep folder holds exactly one sweep, so nothing already trained is mixed with or overwritten by
    another grid).
    """
    from loopscale.sweep.plan import check_runnable

    root = Path(root)
    runs = plan_sweep(spec)
    # Reading every run's state first turns a damaged result.json into one line naming it; runs that
    # finished need no dataset, so only the others are checked.
    unfinished = [run for run in runs if run_state(root, run.name).status != "ok"]
    rates = check_runnable(spec, unfinished)
    # a sweep without a trainer writes sweep.yaml as it did before the contract existed
    fields = {k: v for k, v in to_dict(spec).items() if not (k == "trainer" and v is None)}
    spec_text = yaml.safe_dump(fields, sort_keys=False)
    spec_path = root / SPEC_FILE
    if spec_path.exists():
        # compared as specs, not as text: a sweep written before a spec field was added still resumes
        recorded = from_dict(SweepSpec, load_yaml(spec_path), str(spec_path))
        if spec.extends(recorded):
            added = len(runs) - len(plan_sweep(recorded))
            atomic_write_text(spec_path, spec_text)
            print(f"loopscale sweep: {root}: sweep extended by {added} run(s) in new groups", file=sys.stderr)
        elif recorded != spec:
            raise UserError(
                f"{root} already holds a different sweep ({spec_path}); choose another --out folder, "
                "resume it without a spec, or extend it by adding groups after its own"
            )
    else:
        atomic_write_text(spec_path, spec_text)
    for run in runs:
        config_path = run_dir(root, run.name) / RUN_CONFIG_FILE
        text = dump_yaml(run_train_config(spec, run))
        if not config_path.exists() or config_path.read_text() != text:
            atomic_write_text(config_path, text)
    reused = reuse_runs(spec, root, runs)
    if reused:
        print(
            f"loopscale sweep: {reused} finished run(s) reused from {', '.join(spec.reuse)}", file=sys.stderr
        )
    if spec.trainer is not None:  # the runs the trainer will train: not the ones taken from a reuse folder
        todo = [run for run in unfinished if not (run_dir(root, run.name) / REUSE_FILE).exists()]
        _write_run_documents(spec, root, todo, rates, pairs or {})
    return runs


def _write_run_documents(
    spec: SweepSpec, root: Path, runs: list[PlannedRun], rates: dict[str, dict], pairs: dict[str, str]
) -> None:
    """run.json of every unfinished run of a trainer sweep (rewritten only when it changed)."""
    from loopscale.data.baselines import train_baselines

    unigram = train_baselines(spec.train).unigram if runs else None
    for run in runs:
        folder = run_dir(root, run.name)
        base = pairs.get(run.name)
        document = run_document(
            spec,
            run,
            run_train_config(spec, run),
            learning_rates=rates[run.name],
            unigram=unigram,
            pairs_with=os.path.relpath(base, folder) if base else None,
        )
        path = folder / RUN_FILE
        if not path.is_file() or json.loads(path.read_text()) != document:
            atomic_write_json(path, document)


# A reused run's small files besides result.json, copied from its source run folder (weights and checkpoints
# stay there).
REUSED_FILES = ("config.yaml", "metrics.jsonl", "train.log", "eval.json")
REUSE_FILE = "reused.json"  # {"source": the source run folder, relative to this run folder}


def reuse_runs(spec: SweepSpec, root: Path, runs: list[PlannedRun]) -> int:
    """Copy into ``root`` every unfinished run that a ``spec.reuse`` folder finished ok with an identical
    run.yaml (same name, model, recipe, data, budget and seed); returns how many. result.json is copied
    last, so a copy cut short is an unfinished run that the next start copies again."""
    count = 0
    pending = [run for run in runs if run_state(root, run.name).status != "ok"]
    for source in spec.reuse if pending else ():
        source_root = Path(source)
        if not (source_root / SPEC_FILE).is_file():
            raise UserError(
                f"reuse: {source} is not a sweep folder (no {SPEC_FILE}); reuse paths are relative to the "
                "working directory: run from the folder they were written for, or fix sweep.yaml's reuse list"
            )
        for run in pending:
            here, there = run_dir(root, run.name), run_dir(source_root, run.name)
            if (here / RESULT_FILE).exists() or not (there / RESULT_FILE).is_file():
                continue
            ours, theirs = here / RUN_CONFIG_FILE, there / RUN_CONFIG_FILE
            if not theirs.is_file() or theirs.read_text() != ours.read_text():
                continue
            if run_state(source_root, run.name).status != "ok":
                continue
            for name in REUSED_FILES:
                if (there / name).is_file():
                    atomic_write_bytes(here / name, (there / name).read_bytes())
            link = os.path.relpath(there.resolve(), here.resolve())
            atomic_write_json(here / REUSE_FILE, {"source": link})
            atomic_write_bytes(here / RESULT_FILE, (there / RESULT_FILE).read_bytes())
            count += 1
    return count


def open_sweep(root: Path) -> tuple[SweepSpec, list[PlannedRun]]:
    """Load an existing sweep folder's spec and plan (for resume, collect and report)."""
    root = Path(root)
    spec_path = root / SPEC_FILE
    if not spec_path.exists():
        raise UserError(
            f"{root} is not a sweep folder (no {SPEC_FILE}); start one with `loopscale sweep SPEC --out "
            f"{root}`"
        )
    spec = from_dict(SweepSpec, load_yaml(spec_path), str(spec_path))
    return spec, plan_sweep(spec)
