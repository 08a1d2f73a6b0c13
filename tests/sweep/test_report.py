"""Collect + report on a sweep folder whose losses follow a known law: the report recovers φ, names the
runs the fit left out, embeds every plot in report.html and adds axis plots when eval-sweep ran."""

from __future__ import annotations

import csv
import json
import re

import pyarrow.parquet as pq
import pytest

from loopscale.cli import main

from .helpers import LAW, law_loss, synthetic_sweep

FAILED = "main_C1.26e11_d16_r2"


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    root = tmp_path_factory.mktemp("report") / "sweep"
    runs = synthetic_sweep(root, "demo", failed=FAILED, axes=True)
    assert main(["report", str(root), "--restarts", "60", "--bootstrap", "30"]) == 0
    return root, runs


def test_results_table_has_every_run_once_with_the_fitter_schema(reported):
    root, runs = reported
    with open(root / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["run"] for r in rows] == [run.name for run in runs]
    for column in (
        "run",
        "budget",
        "width",
        "r",
        "n",
        "n_once",
        "n_rec",
        "flops_per_token",
        "steps",
        "tokens",
        "loss",
        "status",
        "reason",
        "recipe",
        "wall_time_s",
        "axis_knowledge",
        "axis_reading",
    ):
        assert column in rows[0]
    failed = [r for r in rows if r["status"] != "ok"]
    assert [(r["run"], r["status"], r["reason"], r["loss"]) for r in failed] == [
        (FAILED, "failed", "non-finite loss at step 7", "nan")
    ]
    run = next(run for run in runs if run.name == rows[0]["run"])
    assert float(rows[0]["loss"]) == law_loss(run.n_once, run.n_rec, run.r, run.tokens)  # repr round trip
    assert float(rows[0]["axis_reading"]) == pytest.approx(float(rows[0]["loss"]) - 0.2)
    parquet = pq.read_table(root / "results.parquet").to_pylist()
    assert [r["run"] for r in parquet] == [r["run"] for r in rows]
    assert parquet[0]["loss"] == float(rows[0]["loss"])


def test_report_recovers_phi_and_names_the_left_out_run(reported):
    root, runs = reported
    fit = json.loads((root / "report" / "fit.json").read_text())
    assert fit["fit"]["phi"] == pytest.approx(LAW["phi"], abs=0.01)
    assert fit["fit"]["alpha"] == pytest.approx(LAW["alpha"], abs=0.01)
    assert fit["table"]["n_runs"] == len(runs) - 1
    assert [s["run"] for s in fit["table"]["skipped"]] == [FAILED]
    md = (root / "report" / "report.md").read_text()
    assert FAILED in md and "non-finite loss at step 7" in md
    assert re.search(r"φ = 0\.5\d\d", md)
    for needle in ("Equivalence at this scale", "Compute-optimal allocation", "gap to r=1", "95%"):
        assert needle in md


def test_report_html_is_self_contained_with_embedded_plots(reported):
    root, _ = reported
    page = (root / "report" / "report.html").read_text()
    images = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(images) >= 4  # iso-FLOP curves, φ bootstrap, residuals, frontier (+ axes)
    assert all(src.startswith("data:image/png;base64,") for src in images)
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing fetched from elsewhere
    assert "axis continuation loss against validation loss" in page
    assert (root / "report" / "plots" / "axes.png").exists()


def test_report_summary_line(tmp_path, capsys):
    root = tmp_path / "sweep"
    synthetic_sweep(root, "demo")
    assert (
        main(["report", str(root), "--restarts", "40", "--bootstrap", "10", "--out", str(tmp_path / "r")])
        == 0
    )
    line = capsys.readouterr().out.strip()
    assert len(line.splitlines()) == 1
    assert re.match(r"phi = 0\.5\d\d \(95% CI \[0\.\d+, 0\.\d+\]\), R² = 1\.0000, 27 of 27 runs fitted", line)
    assert (tmp_path / "r" / "report.html").exists()


def test_report_lists_axis_losses_of_each_cells_compute_optimal_run(reported):
    root, _ = reported
    with open(root / "results.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r["status"] == "ok"]
    best = {}
    for row in rows:
        key = (float(row["budget"]), int(row["r"]))
        if key not in best or float(row["loss"]) < float(best[key]["loss"]):
            best[key] = row
    md = (root / "report" / "report.md").read_text()
    section = md.split("## Downstream axes at the compute-optimal checkpoints")[1].split("\n## ")[0]
    lines = [line for line in section.splitlines() if line.startswith("| ") and "run" not in line]
    assert len(lines) == len(best)
    for (budget, r), row in best.items():
        expected = f"| {budget:.3g} | {r} | {row['run']} | {float(row['loss']):.4f} | "
        expected += f"{float(row['axis_knowledge']):.4f} | {float(row['axis_reading']):.4f} |"
        assert expected in lines
