"""``collect`` (and ``report``) on a sweep folder where single fields of run files hold the wrong kind of
value: each such run is a failed row whose reason names the file (relative to the sweep) and the field; the
other runs are collected and reported as if nothing had happened."""

from __future__ import annotations

import json
import math

import pytest

from loopscale.cli import main
from loopscale.sweep.collect import collect_rows
from loopscale.sweep.results import read_results

from .helpers import law_loss, synthetic_sweep

# run index → (file, the field to damage, the value it gets)
DAMAGE = {
    1: ("result.json", "val_loss", "low"),
    4: ("result.json", "n_rec", "many"),
    6: ("result.json", "wall_time_s", [1, 2]),
    9: ("eval.json", "knowledge", "high"),
    11: ("eval.json", "reading", {"loss": 3.0, "loss_se": "small"}),
}


def damage(root, runs) -> dict[str, str]:
    """Apply DAMAGE to a synthetic sweep; run name → the file it damaged (relative to ``root``)."""
    damaged = {}
    for i, (name, field, value) in DAMAGE.items():
        path = root / "runs" / runs[i].name / name
        doc = json.loads(path.read_text())
        (doc["axes"] if name == "eval.json" else doc)[field] = value
        path.write_text(json.dumps(doc))
        damaged[runs[i].name] = f"runs/{runs[i].name}/{name}"
    return damaged


@pytest.fixture(scope="module")
def damaged_sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("damaged") / "sweep"
    runs = synthetic_sweep(root, "demo", axes=True)
    return root, runs, damage(root, runs)


def test_collect_makes_each_damaged_run_a_failed_row_naming_file_and_field(damaged_sweep, capsys):
    root, runs, damaged = damaged_sweep
    assert main(["collect", str(root)]) == 0
    out = capsys.readouterr().out
    rows = {row["run"]: row for row in read_results(root / "results.csv")}
    assert len(rows) == len(runs)
    for i, (_, field, _) in DAMAGE.items():
        row = rows[runs[i].name]
        assert row["status"] == "failed" and math.isnan(row["loss"])
        assert row["reason"].startswith(f"damaged {damaged[runs[i].name]}: ") and field in row["reason"]
        assert str(root) not in row["reason"]  # published tables hold no machine path
        assert f"failed   {runs[i].name}: damaged" in out
    for run in runs:
        if run.name not in damaged:
            row = rows[run.name]
            assert row["status"] == "ok"
            assert row["loss"] == law_loss(run.n_once, run.n_rec, run.r, run.tokens)
            assert row["axis_knowledge"] == row["loss"] + 0.5
    assert f"{len(runs) - len(DAMAGE)} ok, {len(DAMAGE)} failed" in out


def test_a_whole_number_field_must_be_whole(tmp_path):
    root = tmp_path / "sweep"
    runs = synthetic_sweep(root, "demo")
    path = root / "runs" / runs[0].name / "result.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "steps": 12.5}))
    row = next(row for row in collect_rows(root) if row["run"] == runs[0].name)
    assert row["status"] == "failed" and "steps must be a whole number, got 12.5" in row["reason"]


def test_report_works_on_the_undamaged_runs(damaged_sweep, tmp_path, capsys):
    root, runs, damaged = damaged_sweep
    out = tmp_path / "report"
    assert main(["report", str(root), "--restarts", "20", "--bootstrap", "0", "--out", str(out)]) == 0
    line = capsys.readouterr().out
    assert f"{len(runs) - len(DAMAGE)} of {len(runs)} runs fitted" in line  # the damaged ones left out
    text = (out / "report.md").read_text()
    assert all(name in text for name in damaged)
