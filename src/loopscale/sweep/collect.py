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

import csv
import io
import math
from pathlib import Path

from loopscale.errors import UserError
from loopscale.io import atomic_write, atomic_write_text
from loopscale.sweep.plan import PLAN_COLUMNS, run_train_config
from loopscale.sweep.rundir import open_sweep, read_json, run_dir, run_state
from loopscale.train.config import OptimConfig

# The plan's columns (what was planned) followed by what the run produced.
RESULT_COLUMNS = tuple(c for c in PLAN_COLUMNS if c != "total_flops") + (
    "loss",
    "status",
    "reason",
    "recipe",
    "wall_time_s",
    "train_time_s",
    "started_at",
    "finished_at",
)
EVAL_FILE = "eval.json"
TASKS_PREFIX = "tasks_"  # text columns: the tasks behind each axis_<name> number
SE_PREFIX = "se_"  # se_axis_<name>: the standard error (nats) of axis_<name>
NO_TASKS = "-"  # an evaluated axis none of whose tasks had data (an unevaluated run leaves the cell empty)


def _axis_losses(folder: Path) -> dict[str, float | str]:
    """Per-axis continuation losses (nats) from eval.json: ``{"axes": {name: loss | {"loss": loss}}}``,
    and each axis's task list (``tasks`` and ``standins`` of the axis entry) when the file has one."""
    path = folder / EVAL_FILE
    if not path.exists():
        return {}
    axes = read_json(path).get("axes", {})
    if not isinstance(axes, dict):
        raise UserError(f"{path}: 'axes' must map axis names to losses")
    out = {}
    for name, value in axes.items():
        loss = value.get("loss") if isinstance(value, dict) else value
        out[f"axis_{name}"] = float(loss) if loss is not None else math.nan
        if isinstance(value, dict) and "loss_se" in value:
            se = value["loss_se"]
            out[f"{SE_PREFIX}axis_{name}"] = float(se) if se is not None else math.nan
        if isinstance(value, dict) and isinstance(value.get("tasks"), list):
            standins = set(value.get("standins") or [])
            listed = " ".join(t + "*" * (t in standins) for t in value["tasks"])
            out[f"{TASKS_PREFIX}{name}"] = listed or NO_TASKS
    return out


def collect_rows(root: str | Path) -> list[dict]:
    """The results table of sweep folder ``root`` as a list of row dicts (columns RESULT_COLUMNS + axis_*)."""
    root = Path(root)
    spec, runs = open_sweep(root)
    rows = []
    for run in runs:
        state = run_state(root, run.name)
        row = {key: value for key, value in run.row().items() if key != "total_flops"}
        result = state.result or {}
        for key in ("n", "n_once", "n_rec", "flops_per_token", "steps", "tokens"):
            if result.get(key) is not None:
                row[key] = int(result[key])
        loss = result.get("val_loss") if state.status == "ok" else None
        row.update(
            loss=float(loss) if loss is not None else math.nan,
            status=state.status,
            reason=state.reason,
            recipe=str((run_train_config(spec, run).get("optim") or {}).get("recipe", OptimConfig.recipe)),
            **{
                key: float(result[key]) if result.get(key) is not None else math.nan
                for key in ("wall_time_s", "train_time_s", "started_at", "finished_at")
            },
        )
        if state.status == "ok" and not math.isfinite(row["loss"]):
            row.update(status="failed", reason=f"result.json reports a non-finite val_loss ({loss})")
        row.update(_axis_losses(run_dir(root, run.name)))
        rows.append(row)
    return rows


def _columns(rows: list[dict]) -> list[str]:
    axes = sorted({key for row in rows for key in row if key.startswith("axis_")})
    errors = sorted({key for row in rows for key in row if key.startswith(SE_PREFIX)})
    tasks = sorted({key for row in rows for key in row if key.startswith(TASKS_PREFIX)})
    return [*RESULT_COLUMNS, *axes, *errors, *tasks]


def write_results(root: str | Path, rows: list[dict], out: str | Path | None = None) -> tuple[Path, Path]:
    """Write ``results.csv`` and ``results.parquet`` (atomically) into ``out`` (default: the sweep folder)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out) if out is not None else Path(root)
    columns = _columns(rows)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: _csv_value(row.get(key, _absent(key))) for key in columns})
    csv_path = atomic_write_text(out / "results.csv", buf.getvalue())
    table = pa.table({key: [row.get(key, _absent(key)) for row in rows] for key in columns})
    parquet_path = atomic_write(out / "results.parquet", lambda tmp: pq.write_table(table, tmp))
    return csv_path, parquet_path


def _absent(column: str) -> float | None:
    """The value of a column a row lacks: NaN for numbers, None for a task list (an unevaluated run)."""
    return None if column.startswith(TASKS_PREFIX) else math.nan


def _csv_value(value: object) -> object:
    # repr-exact floats so a loss read back from CSV is bit-identical to the one in result.json
    return repr(value) if isinstance(value, float) and math.isfinite(value) else value


_INT_COLUMNS = ("width", "r", "bptt_k", "seed", "n", "n_once", "n_rec", "flops_per_token", "steps", "tokens")
_TEXT_COLUMNS = ("run", "group", "status", "reason", "recipe")


def read_results(path: str | Path) -> list[dict]:
    """Rows of a ``results.csv`` that ``collect`` wrote, typed as ``collect_rows`` returns them.

    This is how a published results folder (sweep.yaml + results.csv, without the run folders) is reported.
    """
    path = Path(path)
    try:
        with open(path, newline="") as fh:
            raw = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"cannot read results table {path} ({exc})") from None
    rows = []
    for i, record in enumerate(raw, start=2):
        row: dict = {}
        try:
            for key, value in record.items():
                if key in _TEXT_COLUMNS or key.startswith(TASKS_PREFIX):
                    row[key] = value or None
                elif key in _INT_COLUMNS:
                    row[key] = int(float(value)) if value not in ("", None) else None
                else:
                    row[key] = float(value) if value not in ("", None) else math.nan
        except (TypeError, ValueError):
            raise UserError(f"{path}:{i}: column {key!r} holds {value!r}, not a number") from None
        rows.append(row)
    optional = ("train_time_s", "started_at", "finished_at")  # tables written before these columns existed
    missing = [c for c in RESULT_COLUMNS if raw and c not in raw[0] and c not in optional]
    if missing:
        raise UserError(f"{path} is not a loopscale results table (missing {', '.join(missing)})")
    return rows


def collect(root: str | Path, out: str | Path | None = None) -> tuple[list[dict], Path, Path]:
    """collect_rows + write_results: the one entry point of ``loopscale collect``."""
    rows = collect_rows(root)
    csv_path, parquet_path = write_results(root, rows, out)
    return rows, csv_path, parquet_path
