"""The results table's format: its columns (the plan's, then what each run produced) and its typed CSV
reader and CSV + parquet writer. ``collect`` fills it from a sweep folder; ``report``, ``design --from`` and
``plan --timings`` read it back. Imports nothing from the rest of ``sweep`` (the planner reads it too)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from loopscale.errors import UserError
from loopscale.io import atomic_write, atomic_write_text

PLAN_COLUMNS = (
    "run",
    "group",
    "budget",
    "width",
    "r",
    "bptt_k",
    "seed",
    "n",
    "n_once",
    "n_rec",
    "flops_per_token",
    "steps",
    "tokens",
    "total_flops",
)

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
TASKS_PREFIX = "tasks_"  # text columns: the tasks behind each axis_<name> number
SE_PREFIX = "se_"  # se_axis_<name>: the standard error (nats) of axis_<name>
NO_TASKS = "-"  # an evaluated axis none of whose tasks had data (an unevaluated run leaves the cell empty)


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
