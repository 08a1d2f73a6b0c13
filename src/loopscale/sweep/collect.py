"""Collect a sweep folder into the results table the fitter reads (CSV + parquet).

One row per planned run, always: finished runs carry their final validation loss (nats); failed runs
carry ``status = failed`` and a reason (non-finite loss, out of memory, killed, …); runs that have not
finished carry ``status = pending`` and say whether they never started or were interrupted. There are no
silent gaps. If ``eval.json`` exists in a run folder (``loopscale eval-sweep``), its per-axis continuation
losses become ``axis_<name>`` columns, their standard errors ``se_axis_<name>`` (nats, over the sampled
examples), and the tasks each one averages become ``tasks_<name>`` columns
(space-separated task names; a ``*`` marks a task whose data differ from the paper's, e.g. a subset;
``-`` an axis that was evaluated but none of whose tasks had data).
"""

from __future__ import annotations

import math
from pathlib import Path

from loopscale.sweep.curves import pack_curves
from loopscale.sweep.plan import run_train_config
from loopscale.sweep.results import NO_TASKS, SE_PREFIX, TASKS_PREFIX, write_results
from loopscale.sweep.rundir import (
    RESULT_FILE,
    DamagedFile,
    is_number,
    open_sweep,
    read_json,
    run_dir,
    run_state,
)
from loopscale.train.config import OptimConfig

EVAL_FILE = "eval.json"


def _axis_losses(folder: Path) -> dict[str, float | str]:
    """Per-axis continuation losses (nats) from eval.json: ``{"axes": {name: loss | {"loss": loss}}}``,
    and each axis's task list (``tasks`` and ``standins`` of the axis entry) when the file has one. A field of
    the wrong kind raises ``DamagedFile``."""
    path = folder / EVAL_FILE
    if not path.exists():
        return {}
    axes = read_json(path).get("axes", {})
    if not isinstance(axes, dict):
        raise DamagedFile(path, "axes", "must map axis names to losses")
    out = {}
    for name, value in axes.items():
        entry = value if isinstance(value, dict) else {"loss": value}
        out[f"axis_{name}"] = _number_or_nan(entry.get("loss"), path, f"axes.{name}.loss")
        if "loss_se" in entry:
            out[f"{SE_PREFIX}axis_{name}"] = _number_or_nan(entry["loss_se"], path, f"axes.{name}.loss_se")
        if isinstance(entry.get("tasks"), list):
            tasks, standins = entry["tasks"], entry.get("standins") or []
            if not isinstance(standins, list) or not all(isinstance(t, str) for t in tasks + standins):
                raise DamagedFile(path, f"axes.{name}", "must list tasks and standins as names")
            listed = " ".join(t + "*" * (t in standins) for t in tasks)
            out[f"{TASKS_PREFIX}{name}"] = listed or NO_TASKS
    return out


def _number_or_nan(value, path: Path, field: str) -> float:
    """A JSON number as a float, null as NaN; anything else raises ``DamagedFile``."""
    if value is None:
        return math.nan
    if not is_number(value):
        raise DamagedFile(path, field, f"must be a number, got {value!r}")
    return float(value)


_COUNT_FIELDS = ("n", "n_once", "n_rec", "flops_per_token", "steps", "tokens")  # result.json: whole numbers
_TIME_FIELDS = ("wall_time_s", "train_time_s", "started_at", "finished_at")  # result.json: seconds


def _outcome(root: Path, run) -> dict:
    """What one run produced (its row's columns beyond the plan); a run file with a field of the wrong kind
    raises ``DamagedFile``."""
    state = run_state(root, run.name)
    result = state.result or {}
    result_path = run_dir(root, run.name) / RESULT_FILE
    out = {}
    for key in _COUNT_FIELDS:
        count = result.get(key)
        if count is not None:
            if not (is_number(count) and math.isfinite(count) and count == int(count)):
                raise DamagedFile(result_path, key, f"must be a whole number, got {count!r}")
            out[key] = int(count)
    loss = result.get("val_loss") if state.status == "ok" else None
    out.update(
        loss=float(loss) if loss is not None else math.nan,
        status=state.status,
        reason=state.reason,
        **{key: _number_or_nan(result.get(key), result_path, key) for key in _TIME_FIELDS},
    )
    if state.status == "ok" and not math.isfinite(out["loss"]):
        out.update(status="failed", reason=f"result.json reports a non-finite val_loss ({loss})")
    out.update(_axis_losses(run_dir(root, run.name)))
    return out


def collect_rows(root: str | Path) -> list[dict]:
    """The results table of sweep folder ``root`` as a list of row dicts (columns RESULT_COLUMNS + axis_*).

    A run whose result.json or eval.json holds a field of the wrong kind (text where a number belongs) is a
    failed row whose reason names the file (relative to ``root``) and the field; an unreadable file
    (truncated, not text) stops collect with one line naming it."""
    root = Path(root)
    spec, runs = open_sweep(root)
    rows = []
    for run in runs:
        row = {key: value for key, value in run.row().items() if key != "total_flops"}
        optim = run_train_config(spec, run).get("optim") or {}
        row["recipe"] = str(optim.get("recipe", OptimConfig.recipe))
        try:
            row.update(_outcome(root, run))
        except DamagedFile as damage:
            where = damage.path.relative_to(root) if damage.path.is_relative_to(root) else damage.path
            reason = f"damaged {where}: {damage.field} {damage.problem}"
            row.update(loss=math.nan, status="failed", reason=reason, **dict.fromkeys(_TIME_FIELDS, math.nan))
        rows.append(row)
    return rows


def collect(root: str | Path, out: str | Path | None = None) -> tuple[list[dict], Path, Path]:
    """collect_rows + write_results + the curves' Parquet file: the one entry point of ``loopscale
    collect``."""
    rows = collect_rows(root)
    csv_path, parquet_path = write_results(root, rows, out)
    pack_curves(root, out)  # the per-step curves beside the table (what a published sweep keeps of them)
    return rows, csv_path, parquet_path
