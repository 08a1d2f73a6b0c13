"""A sweep's per-step curves in one Parquet file (sweep.curves): what collect writes, read back exactly, and
the per-run metrics.jsonl of older folders read the same way."""

from __future__ import annotations

import json
from pathlib import Path

from loopscale.sweep.curves import CURVES_FILE, load_curves, pack_curves


def _run(root: Path, name: str, lines: list[dict], finished: bool = True, torn: bool = False) -> None:
    folder = root / "runs" / name
    folder.mkdir(parents=True)
    text = "".join(json.dumps(line) + "\n" for line in lines) + ('{"step": 9, "lo' if torn else "")
    (folder / "metrics.jsonl").write_text(text)
    if finished:
        (folder / "result.json").write_text(json.dumps({"status": "ok", "val_loss": 3.0}))


def test_curves_round_trip_and_leave_out_unfinished_runs_torn_lines_and_derivable_columns(tmp_path):
    a = [{"step": s, "loss": 7.0 - s / 4, "lr": 0.5, "tokens": 2048 * s, "mfu": 0.2} for s in (1, 2, 3)]
    b = [{"step": 1, "loss": 6.5, "lr": 0.25, "tokens": 2048, "loops": [3, 5], "flops": 3961257984}]
    _run(tmp_path, "a", a, torn=True)
    _run(tmp_path, "b", b)
    _run(tmp_path, "c", a, finished=False)  # still training: not published
    before = load_curves(tmp_path)  # from the runs' metrics.jsonl
    assert before == {"a": a, "b": b}
    assert pack_curves(tmp_path) == tmp_path / CURVES_FILE
    for run in ("a", "b"):
        (tmp_path / "runs" / run / "metrics.jsonl").unlink()  # a published folder keeps the Parquet file only
    published = {
        run: [{k: v for k, v in row.items() if k != "mfu"} for row in rows] for run, rows in before.items()
    }
    assert load_curves(tmp_path) == published  # values exact in float32 here; mfu is derivable, left out


def test_no_finished_run_writes_no_file(tmp_path):
    _run(tmp_path, "c", [{"step": 1, "loss": 7.0}], finished=False)
    assert pack_curves(tmp_path) is None and not (tmp_path / CURVES_FILE).exists()


def test_packing_again_without_the_runs_files_keeps_the_published_curves(tmp_path):
    """A fresh clone has curves.parquet but no run's metrics.jsonl: a new run trained there and collected
    adds its curve; the published ones stay."""
    old = [{"step": 1, "loss": 6.5, "lr": 0.5, "tokens": 2048}]
    _run(tmp_path, "old", old)
    pack_curves(tmp_path)
    (tmp_path / "runs" / "old" / "metrics.jsonl").unlink()
    new = [{"step": 1, "loss": 6.25, "lr": 0.5, "tokens": 2048}]
    _run(tmp_path, "new", new)
    pack_curves(tmp_path)
    assert load_curves(tmp_path) == {"new": new, "old": old}
