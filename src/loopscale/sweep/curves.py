"""A sweep's per-step training curves in one compressed Parquet file (``curves.parquet``; issue 42).

Every training run appends a line per logged step to its own ``runs/NAME/metrics.jsonl`` (step, loss in nats,
lr, tokens, tokens/s, MFU; a loop-count recipe adds its loop counts and FLOPs). Those files stay in each run
folder for resume and progress, but a published sweep keeps its curves as one Parquet file beside
results.csv: one row per (run, step), zstd-compressed, readable by pandas, polars and duckdb
(``pd.read_parquet("curves.parquet")``); loss, lr and tokens/s in float32, the columns in ``DERIVABLE`` left
out. ``load_curves`` reads it, or the per-run files of a folder that predates it.
"""

from __future__ import annotations

import json
from pathlib import Path

from loopscale.io import atomic_write

CURVES_FILE = "curves.parquet"
# Columns of metrics.jsonl the published file leaves out, as derivable from what it keeps: lr_multiplier =
# lr / the run's peak LR (its config.yaml), mfu = tokens/s × FLOPs/token / the peak its result.json records.
DERIVABLE = ("lr_multiplier", "mfu")
METRICS_FILE = "metrics.jsonl"


def _finished_runs(root: Path) -> list[Path]:
    """The run folders of ``root`` with a result.json (finished ok or failed), in name order."""
    return sorted(p.parent for p in (root / "runs").glob("*/result.json"))


def _read_metrics(path: Path) -> list[dict]:
    """The lines of one metrics.jsonl (a torn last line, from a kill mid-write, is left out)."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def pack_curves(root: str | Path, out: str | Path | None = None) -> Path | None:
    """Write ``curves.parquet`` into ``out`` (default ``root``) from the metrics.jsonl of every finished run
    of sweep folder ``root`` (atomically; the rows of one run in step order, a ``run`` column first) → its
    path, None when no finished run logged a step."""
    import pyarrow as pa

    root = Path(root)
    target = Path(out) if out is not None else root
    # a run whose metrics.jsonl is not on this machine (a published folder in a fresh clone) keeps the rows
    # the existing file holds: packing never drops curves it cannot rebuild
    kept = _read_parquet(target / CURVES_FILE) if (target / CURVES_FILE).is_file() else {}
    rows = []
    for run in _finished_runs(root):
        if (run / METRICS_FILE).is_file():
            rows += [{"run": run.name, **line} for line in _read_metrics(run / METRICS_FILE)]
        else:
            rows += [{"run": run.name, **line} for line in kept.get(run.name, [])]
    if not rows:
        return None
    keys = [key for key in dict.fromkeys(key for row in rows for key in row) if key not in DERIVABLE]
    table = pa.table({key: [row.get(key) for row in rows] for key in keys})
    # float32 reals (7 significant digits; the final losses stay exact in each run's result.json), an int32
    # step; other integers (tokens, FLOPs) stay int64
    schema = [
        f.with_type(pa.int32())
        if f.name == "step"
        else f.with_type(pa.float32())
        if f.type == pa.float64()
        else f
        for f in table.schema
    ]
    table = table.cast(pa.schema(schema))
    if kept and _same_table(target / CURVES_FILE, table):
        return target / CURVES_FILE  # unchanged: a published file is not rewritten (no churn in the tree)
    return atomic_write(target / CURVES_FILE, lambda tmp: write_curves(table, tmp))


def _same_table(path: Path, table) -> bool:
    import pyarrow.parquet as pq

    return pq.read_table(path).equals(table)


def write_curves(table, path: Path) -> None:
    """Write a curves table (``pyarrow.Table``): zstd, with the reals byte-stream-split (their bytes grouped
    by position, which zstd compresses to about half; lossless, and read by pandas, polars and duckdb)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    reals = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    others = [f.name for f in table.schema if f.name not in reals]
    pq.write_table(
        table,
        path,
        compression="zstd",
        compression_level=19,
        use_byte_stream_split=reals,
        use_dictionary=others,
    )


def load_curves(root: str | Path) -> dict[str, list[dict]]:
    """{run name: its logged steps (dicts, step order)} from ``curves.parquet``, else from the runs'
    metrics.jsonl (folders written before the Parquet file; every column there)."""
    root = Path(root)
    if (root / CURVES_FILE).is_file():
        return _read_parquet(root / CURVES_FILE)
    return {
        run.name: _read_metrics(run / METRICS_FILE)
        for run in _finished_runs(root)
        if (run / METRICS_FILE).is_file()
    }


def _read_parquet(path: Path) -> dict[str, list[dict]]:
    import pyarrow.parquet as pq

    out: dict[str, list[dict]] = {}
    for row in pq.read_table(path).to_pylist():
        out.setdefault(row.pop("run"), []).append({k: v for k, v in row.items() if v is not None})
    return out
