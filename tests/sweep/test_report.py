"""Collect + report on a sweep folder whose losses follow a known law: the report leads with the law check's
verdict, recovers φ (bold only when identified by a law the data do not reject), says each thing once on its
first screen, names the runs the fit left out, lists every run, prints no vertex for an iso-FLOP curve that
does not bracket it, embeds every plot in report.html and adds axis plots when eval-sweep ran. A sweep whose
losses do not depend on N cannot identify φ: its report says so and never prints φ in bold or compares it
with the paper. The law check renders from hand-written fit.json sections (rejected, holds, untestable,
missing)."""

from __future__ import annotations

import contextlib
import copy
import csv
import dataclasses
import io
import json
import math
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest

from loopscale.cli import main
from loopscale.fit.labels import flops_label
from loopscale.fit.protocol import read_protocol
from loopscale.fit.protocol_results import CellMinimum
from loopscale.fit.results import (
    BudgetPhi,
    Evidence,
    HalfPhi,
    HeldOutBudget,
    LackOfFit,
    LawCheck,
    LawExtension,
    RecordError,
    RunNoise,
    TrendPower,
    law_evidence,
    read_law_check,
)
from loopscale.present.figures import axis_figure
from loopscale.present.fit_text import minimum_miss_text
from loopscale.present.identification import disagreement_text, identification_reasons, objective_note
from loopscale.present.law_check import law_headline, law_reasons
from loopscale.present.plots import FIGURES
from loopscale.report.allocation import minima_section
from loopscale.report.design_checks import design_checks_section
from loopscale.report.document import Document, Section
from loopscale.report.formatting import intervals_text
from loopscale.report.law_check import law_check_section
from loopscale.report.result import paper_comparison
from loopscale.report.verdict import law_verdict, lead_blocks, summary_line

from .helpers import LAW, law_loss, synthetic_sweep

REPO = Path(__file__).resolve().parents[2]

FAILED = "main_C8e11_d16_r8"


@pytest.fixture(scope="module")
def reported_all(tmp_path_factory):
    """A law-exact 18-run sweep with one diverged run, reported: (folder, runs, the CLI's printed line)."""
    root = tmp_path_factory.mktemp("report") / "sweep"
    runs = synthetic_sweep(root, "demo", failed=FAILED, axes=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(root), "--restarts", "60", "--bootstrap", "30"]) == 0
    return root, runs, out.getvalue().strip()


@pytest.fixture(scope="module")
def reported(reported_all):
    return reported_all[:2]


@pytest.fixture(scope="module")
def reported_line(reported_all):
    return reported_all[0], reported_all[2]


@pytest.fixture(scope="module")
def unidentified(tmp_path_factory):
    """A sweep whose losses depend on D only (+ 0.01 nats of noise): nothing in it pins φ down."""
    root = tmp_path_factory.mktemp("unidentified") / "sweep"
    runs = synthetic_sweep(root, "demo")
    rng = np.random.default_rng(0)
    for run in runs:
        path = root / "runs" / run.name / "result.json"
        result = json.loads(path.read_text())
        result["val_loss"] = LAW["E"] + LAW["B"] * run.tokens ** -LAW["beta"] + 0.01 * rng.standard_normal()
        path.write_text(json.dumps(result))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(root), "--restarts", "40", "--bootstrap", "20"]) == 0
    return root, runs, out.getvalue()


def _section(md: str, title: str) -> str:
    return md.split(f"\n## {title}")[1].split("\n## ")[0]


def _lead(md: str) -> list[str]:
    """The paragraphs between the title and the first section."""
    head = md.split("\n## ")[0]
    return [p for p in head.split("\n\n")[1:] if p.strip()]


def _bold_spans(md: str) -> list[str]:
    return re.findall(r"\*\*(.+?)\*\*", md)


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


def test_report_leads_with_the_verdict_and_phi_bold_only_under_a_law_that_holds(reported):
    root, _ = reported
    fit = json.loads((root / "report" / "fit.json").read_text())
    assert fit["diagnostics"]["phi_identified"] is True
    # the runs follow the law exactly: nothing left to test the law against, so φ is no measurement yet
    assert fit["law_check"]["verdict"] == "untestable"
    md = (root / "report" / "report.md").read_text()
    lead = _lead(md)
    result = read_protocol(fit)
    assert lead[0].startswith(f"**Verdict:** {law_verdict(result)}")
    bold_phi = f"φ = {fit['fit']['phi']:.3f}, given a law not checked on these runs"
    assert f"**φ = {fit['fit']['phi']:.3f}**" not in md
    phi_paragraph = next(p for p in lead if bold_phi in p)
    assert "bootstrap 95% CI [" in phi_paragraph or "95% CI [" in phi_paragraph
    assert "profile-likelihood 95% interval [" in phi_paragraph  # the two intervals side by side
    summary = _section(md, "Summary").split("\n\n")  # right under the key figures
    assert any(p.startswith("Count-model baselines") and "not available" in p for p in summary)  # no dataset
    assert any(
        p.startswith(f"R² = {fit['fit']['r2']:.4f} (raw losses, nats) beside the objective") for p in summary
    )
    # each thing once (above the verbatim fit output at the end): φ and its intervals, R² note, verdict
    text = md.split("\n## Full fit output")[0]
    assert text.count(bold_phi) == 1
    assert text.count(intervals_text(result)) == 1
    assert text.count(objective_note(result.diagnostics.ranking)) == 1
    assert text.count(law_verdict(result)) == 1
    assert "\n## Law check\n" in md and md.index("## Law check") < md.index("## Result")
    result = _section(md, "Result")
    assert "| block bootstrap (percentile) | 95% |" in result or "| 95% |" in result
    assert "| profile likelihood | 95% |" in result
    assert "Compared with the paper (φ = 0.459, 95% CI [0.41, 0.53]" in result
    assert "lies inside" not in md and "lies outside" not in md
    page = (root / "report" / "report.html").read_text()
    assert page.index("<strong>Verdict:</strong>") < page.index("<h2>")
    assert "<strong>φ = " not in page and "**" not in page


def test_unidentified_phi_is_flagged_never_bold_and_not_compared_with_the_paper(unidentified):
    root, _, _ = unidentified
    fit = json.loads((root / "report" / "fit.json").read_text())
    result = read_protocol(fit)
    reasons = identification_reasons(result.diagnostics)
    assert result.phi_identified is False and reasons
    md = (root / "report" / "report.md").read_text()
    lead = _lead(md)
    assert lead[0].startswith(f"**Verdict:** {law_verdict(result)}")
    assert any(p.startswith("φ is not identified by these runs: no value of it") for p in lead[:2])
    assert f"{fit['fit']['phi']:.3f}" not in " ".join(lead)  # no number for a φ the runs do not pin down
    for reason in reasons:
        assert f"- {reason}" in md
    assert not [span for span in _bold_spans(md) if "φ" in span and "=" in span]
    page = (root / "report" / "report.html").read_text()
    assert not re.search(r"<strong>[^<]*φ =", page)
    assert "lies inside" not in md and "Compared with the paper" not in md
    assert "No comparison with the paper" in _section(md, "Result")
    assert "not a finding" in _section(md, "Result")  # loop worth / equivalence only as an illustration
    if result.profile and result.profile.disagreement:
        assert disagreement_text(result.profile.disagreement) in md


def test_report_cli_line_leads_with_the_verdict(unidentified):
    root, _, stdout = unidentified
    line = stdout.strip()
    doc = json.loads((root / "report" / "fit.json").read_text())
    verdict = law_verdict(read_protocol(doc))
    assert len(line.splitlines()) == 1 and line.startswith(verdict.rstrip(".") + ". phi not ")
    assert re.search(r"phi not identified \(the point fit's -?\d\.\d\d is no measurement\), R² = ", line)
    assert "bigram table not available [sweep demo]" in line  # the sweep has no dataset
    assert "φ is identified" not in line


def test_not_bracketed_cells_print_no_vertex(reported):
    root, _ = reported
    fit = json.loads((root / "report" / "fit.json").read_text())
    md = (root / "report" / "report.md").read_text()
    rows = [line for line in _section(md, "Empirical iso-FLOP minima").splitlines() if line.startswith("| ")]
    cells = rows[1:]  # under the header
    assert len(cells) == len(fit["cell_minima"])
    for line, m in zip(cells, fit["cell_minima"]):
        assert not m["bracketed"]  # the demo widths do not bracket these synthetic minima
        fields = [f.strip() for f in line.strip("|").split("|")]
        assert fields[3:6] == ["not bracketed", "–", "–"] and fields[6] == minimum_miss_text(m["reason"])


def test_minima_table_gives_a_vertex_only_where_it_is_bracketed(reported):
    root, _ = reported
    doc = copy.deepcopy(json.loads((root / "report" / "fit.json").read_text()))
    doc["cell_minima"][0].update(
        bracketed=True, n_star=12345.0, loss_star=3.21, reason=None, runs_bracket=False
    )
    doc["cell_minima"][1].update(bracketed=False, n_star=None, loss_star=None, reason="above_widths")
    md = Document("t", sections=[minima_section(read_protocol(doc))]).markdown(root)
    rows = [line for line in md.splitlines() if line.startswith("| ") and "FLOPs" not in line]
    assert "| 12.3K | 3.2100 |" in rows[0]
    # a vertex whose lowest run sits at an end of the widths says so, and is not counted as bracketed by runs
    assert rows[0].rstrip().endswith("| lowest loss at an end of the width range |")
    assert "1 of " in md and "in 0 the runs themselves do" in md
    assert f"| not bracketed | – | – | {minimum_miss_text('above_widths')} |" in rows[1]
    assert not re.search(r"\| \d[\d.]*[KMB]? \| \d+\.\d{4} \|", "\n".join(rows[1:]))


def test_report_lists_every_run_with_its_prediction(reported):
    root, runs = reported
    fit = json.loads((root / "report" / "fit.json").read_text())
    md = (root / "report" / "report.md").read_text()
    lines = [line for line in _section(md, "Runs").splitlines() if line.startswith("| main_")]
    lines = [line for line in lines if line.count(" | ") == 12]  # the per-run table, not the left-out list
    assert [line.split(" | ")[0].removeprefix("| ") for line in lines] == [run.name for run in runs]
    header = next(line for line in _section(md, "Runs").splitlines() if line.startswith("| run | C (FLOPs)"))
    assert [h.strip() for h in header.strip("|").split("|")] == [
        "run", "C (FLOPs)", "width", "r", "N", "N_once", "N_rec", "D (tokens)", "steps",
        "val loss", "law", "residual", "status",
    ]  # fmt: skip
    by_name = {
        line.split(" | ")[0].removeprefix("| "): [f.strip() for f in line.strip("|").split("|")]
        for line in lines
    }
    run = runs[0]
    row = by_name[run.name]
    assert row[2:9] == [
        str(run.width),
        str(run.r),
        str(run.n),
        str(run.n_once),
        str(run.n_rec),
        str(run.tokens),
        str(run.steps),
    ]
    loss = law_loss(run.n_once, run.n_rec, run.r, run.tokens)
    assert row[9] == f"{loss:.4f}" and row[10] == f"{loss:.4f}" and row[11] == "+0.0000" and row[12] == "ok"
    failed = by_name[FAILED]
    assert failed[9] == "–" and failed[11] == "–"
    assert failed[12] == "failed: non-finite loss at step 7 (left out of the fit)"
    assert fit["fit"]["phi"] == pytest.approx(LAW["phi"], abs=0.01)


def test_report_writes_every_figure(reported):
    root, _ = reported
    plots = root / "report" / "plots"
    for name in FIGURES:
        assert (plots / f"{name}.png").exists() and (plots / f"{name}.svg").exists(), name
    assert (plots / "phi_per_budget.svg").exists() and (plots / "axes.svg").exists()
    page = (root / "report" / "report.html").read_text()
    assert len(re.findall(r"<figure>", page)) == len(FIGURES) + 2  # + φ per budget and the axes plot


def test_markdown_tables_escape_pipes(tmp_path):
    from loopscale.report.document import Table

    md = Document("t", sections=[Section("s", [Table(["max |res|"], [["a|b"]])])]).markdown(tmp_path)
    assert "| max \\|res\\| |" in md and "| a\\|b |" in md


def test_report_html_is_self_contained_with_embedded_plots(reported):
    root, _ = reported
    page = (root / "report" / "report.html").read_text()
    figures = re.findall(r"<figure>(.*?)</figure>", page, re.DOTALL)
    assert len(figures) >= len(FIGURES)  # collapse, loop tax, iso-FLOP, profile, bootstrap, … (+ axes)
    assert all(figure.startswith("<svg ") for figure in figures)  # inlined, crisp, its text searchable
    assert not re.search(r'(src|href)="(?!data:|#)', page)  # nothing fetched from elsewhere
    assert "<script src" not in page and "@import" not in page and "url(http" not in page
    assert "axis continuation loss against validation loss" in page
    assert (root / "report" / "plots" / "axes.png").exists()


def test_report_summary_line(reported_line):
    root, line = reported_line
    doc = json.loads((root / "report" / "fit.json").read_text())
    assert len(line.splitlines()) == 1
    assert line.startswith(law_verdict(read_protocol(doc)).rstrip(".") + ". phi = 0.5")  # the law check first
    assert re.search(
        r"\. phi = 0\.5\d\d \(given a law not checked on these runs; (bootstrap 95% CI|95% CI) \[0\.\d+, "
        r"0\.\d+\].*, profile-likelihood 95% "
        r"interval \[0\.\d+, 0\.\d+\]\), R² = 1\.0000, 17 of 18 runs fitted, 1 left out, bigram table not "
        r"available \[sweep demo\] → .*report\.html$",
        line,
    )


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
    # the rows of the per-cell table name their run (the gap and correlation tables below do not)
    lines = [line for line in section.splitlines() if line.startswith("| ") and " | main_" in line]
    assert len(lines) == len(best)
    for (budget, r), row in best.items():
        expected = f"| {flops_label(budget)} | {r} | {row['run']} | {float(row['loss']):.4f} | "
        expected += f"{float(row['axis_knowledge']):.4f} | {float(row['axis_reading']):.4f} |"
        assert expected in lines


def test_published_folder_reports_like_its_sweep(reported, tmp_path):
    """sweep.yaml + results.csv without the run folders (how results/ is published) gives the same fit."""
    import shutil

    root, _ = reported
    published = tmp_path / "published"
    published.mkdir()
    for name in ("sweep.yaml", "results.csv"):
        shutil.copy(root / name, published / name)
    assert main(["report", str(published), "--restarts", "60", "--bootstrap", "30"]) == 0
    ours = json.loads((published / "report" / "fit.json").read_text())
    theirs = json.loads((root / "report" / "fit.json").read_text())
    assert ours["fit"] == theirs["fit"] and ours["ci"] == theirs["ci"]
    assert ours["diagnostics"] == theirs["diagnostics"]
    md = (published / "report" / "report.md").read_text()
    original = (root / "report" / "report.md").read_text()
    assert md.count(f"| {FAILED} |") == original.count(f"| {FAILED} |") >= 1


def test_report_states_the_count_baselines_beside_the_runs(tmp_path, tiny_dataset):
    """With the sweep's dataset present, the lead gives its unigram/bigram loss on the runs' validation
    tokens and how many runs beat the bigram table; fit.json records the numbers."""
    from loopscale.data.baselines import dataset_baselines

    root = tmp_path / "sweep"
    runs = synthetic_sweep(root, "demo", data={"path": str(tiny_dataset), "val_tokens": 256})
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(root), "--restarts", "20", "--bootstrap", "0"]) == 0
    expected = dataset_baselines(tiny_dataset, 256)
    doc = json.loads((root / "report" / "fit.json").read_text())
    assert doc["baselines"]["values"] == expected.to_dict()
    below = sum(law_loss(r.n_once, r.n_rec, r.r, r.tokens) < expected.bigram for r in runs)
    summary = _section((root / "report" / "report.md").read_text(), "Summary").split("\n\n")
    baseline = next(p for p in summary if p.startswith("Baselines on the same 256 validation tokens"))
    assert f"a unigram table scores {expected.unigram:.3f} nats" in baseline
    assert f"{below} of {len(runs)} finished runs are below the bigram table" in baseline
    # the CLI's (and the demo's) last line says it too
    line = out.getvalue()
    assert f"{below} of {len(runs)} runs below the bigram table ({expected.bigram:.3f} nats)" in line


def test_machine_use_takes_the_union_of_run_spans_and_the_overhead():
    from loopscale.analysis.machine import machine_use

    def row(start, end, wall, train, flops=1e9, tokens=1000):
        return {
            "status": "ok",
            "started_at": start,
            "finished_at": end,
            "wall_time_s": wall,
            "train_time_s": train,
            "flops_per_token": flops,
            "tokens": tokens,
        }

    rows = [row(0, 10, 10, 9), row(5, 20, 15, 12), row(30, 40, 10, 9), {"status": "failed"}]
    use = machine_use(rows, peak_flops=1e12)
    assert use.busy_wall_s == 30  # [0, 20] ∪ [30, 40]
    assert use.flops == 3e12 and use.achieved_flops_per_s == pytest.approx(1e11)
    assert use.utilisation == pytest.approx(0.1)
    assert use.overhead_share == pytest.approx(1 - 30 / 35)
    untimed = machine_use([{**r, "started_at": math.nan} for r in rows[:3]], peak_flops=1e12)
    assert untimed.utilisation is None and untimed.overhead_share == pytest.approx(1 - 30 / 35)


# --- the law check from hand-written fit.json sections following its schema ------------------

BUDGETS = [2.5e12, 4.3e12, 7.3e12, 1.25e13]


def _extension(form: str, **kw) -> LawExtension:
    base = dict(form=form, label="", covariate="", estimate=0.0, ci=None, phi0=0.5, lr=0.0, F=None,
                df=(1, 60), p=None, aic=0.0, rmse=0.03, at_bound=(), ext_ref=None)  # fmt: skip
    return LawExtension(**{**base, **kw})


def _law_check(verdict: str) -> dict:
    """A ``law_check`` section as ``loopscale fit`` writes it (``fit.results.LawCheck.to_dict``): rejected
    by φ's trend and a loop-dependent floor, holding with power 0.93, or untestable on one budget."""
    rejected = verdict == "rejected"
    noise = RunNoise(sigma=0.010, df=4, ci=(0.006, 0.029), source="replicates", ss=0.0004, replicated_runs=8)
    statistic, p = (9.1, 0.02) if rejected else (1.1, 0.5)
    lof = LackOfFit("F", statistic, (44, 4), p, "replicates", 0.033, 0.010)
    lobo = tuple(
        HeldOutBudget(budget=c, n=16, rmse=0.046, bias=0.02, rmse_over_noise=4.6, bias_over_noise=2.0)
        for c in BUDGETS
    )
    extensions = (
        _extension("phi-trend-c", label="φ₁ per decade of C", estimate=-0.52, ci=(-0.67, -0.37), phi0=0.567,
                   lr=34.7, F=38.0, p=1e-8, aic=-512.3, rmse=0.0258, lobo_rmse=0.03),
        _extension("e-per-r", label="η per doubling of r", estimate=0.046, phi0=0.91, lr=29.0, F=31.0,
                   p=7e-8 if rejected else 0.3, aic=-506.0, rmse=0.027, nats_per_doubling=0.05),
    )  # fmt: skip
    if not rejected:
        extensions = (dataclasses.replace(extensions[0], p=0.4, F=0.7), extensions[1])
    per_budget = tuple(
        BudgetPhi(budget=c, phi=phi, ci=(phi - 0.12, phi + 0.13), n=16)
        for c, phi in zip(BUDGETS, (0.72, 0.56, 0.41, 0.20))
    )
    halves = (
        HalfPhi(half="low", budgets=tuple(BUDGETS[:2]), phi=0.60, ci=(0.54, 0.73), n=32),
        HalfPhi(half="high", budgets=tuple(BUDGETS[2:]), phi=0.26, ci=(-0.09, 0.52), n=32,
                ci_mc=((-0.81, 0.18), (0.50, 0.55))),
    )  # fmt: skip
    parts = dict(
        family_level=0.01, noise=noise, rmse=0.033, lack_of_fit=lof, decomposition={
            "budget": 0.036, "width": 0.059, "r": 0.142, "r_x_width": 0.718},
        selected_form="phi-trend-c" if rejected else "paper", budgets=len(BUDGETS),
    )  # fmt: skip
    if verdict == "untestable":
        return LawCheck(
            verdict="untestable", leave_one_budget_out=(), extensions=(), per_budget_phi=(), halves=(),
            untestable="too_few_budgets", **{**parts, "budgets": 1},
        ).to_dict()  # fmt: skip
    evidence = law_evidence(lof, extensions, lobo)
    threshold = 0.01 / len(evidence)
    power = None if rejected else TrendPower("phi-trend-c", -0.40, threshold, 0.93)
    return LawCheck(
        verdict=verdict, leave_one_budget_out=lobo, extensions=extensions, per_budget_phi=per_budget,
        halves=halves, evidence=evidence, rejected_by=tuple(e for e in evidence if e.p < threshold),
        tests=len(evidence), threshold=threshold, power=power, **parts,
    ).to_dict()  # fmt: skip


HEADLINE = (
    "one constant phi is rejected: phi falls 0.52 per decade of compute (F = 38.0, p = 1e-08); per budget "
    "phi 0.72 -> 0.56 -> 0.41 -> 0.20"
)


@pytest.fixture(scope="module")
def fitted_doc(reported):
    """The reported sweep's fit.json without a law check (it is added per test)."""
    root, _ = reported
    doc = json.loads((root / "report" / "fit.json").read_text())
    doc["law_check"] = None
    return doc


def _render(doc: dict, tmp_path) -> tuple[list, str, str]:
    """(lead blocks, first screen as Markdown, the Law check section as Markdown) of a fit.json mapping."""
    doc = read_protocol(doc)
    lead = lead_blocks(doc)
    first = Document("t", lead=lead).markdown(tmp_path)
    section = Document("t", sections=[law_check_section(doc)]).markdown(tmp_path)
    return lead, first, section


def test_a_rejected_law_leads_with_its_headline_and_never_calls_phi_identified(fitted_doc, tmp_path):
    doc = {**copy.deepcopy(fitted_doc), "law_check": _law_check("rejected")}
    assert doc["diagnostics"]["phi_identified"] is True  # identifiable, yet not one number
    lead, first, section = _render(doc, tmp_path)
    assert lead[0] == f"**Verdict:** {HEADLINE}."
    phi = doc["fit"]["phi"]
    assert lead[1].startswith(f"φ = {phi:.3f} is the constant-φ law's single number, which these runs reject")
    assert "C = 2.5e12: 0.72 [0.60, 0.85]" in lead[1] and "C = 1.25e13: 0.20 [0.08, 0.33]" in lead[1]
    # halves are detail: whole-law refits whose CI ends move with the resample seed (fit.lawcheck.phi_halves)
    assert "half" not in first and "halves" not in first
    assert not [span for span in _bold_spans(first) if "φ" in span]
    assert "identified" not in first
    assert "No comparison with the paper" in paper_comparison(read_protocol(doc))
    line = summary_line(read_protocol(doc), 18, 18, [], "laptop", (4, 18, 4.078))
    pipeline = "most runs are above a bigram table (4.078 nats): a pipeline check, not a measurement; "
    assert line.startswith(pipeline + HEADLINE + ". phi = ") and "constant-φ law, rejected" in line
    assert "identified" not in line
    assert line.endswith("4 of 18 runs below the bigram table (4.078 nats) [sweep laptop]")
    # the evidence, in nats and in noise units
    assert "| 2.5e12 | 16 | 0.0460 | +0.0200 | 4.6 | +2.0 |" in section
    assert "Lack-of-fit test: F = 9.10 on (44, 4) df, p = 0.02, against the replicate seeds' var" in section
    assert "Noise: σ = 0.0100 nats from 4 degrees of freedom (the replicate seeds' variance" in section
    extension = "| phi-trend-c (selected) | φ₁ per decade of C | -0.520 | [-0.670, -0.370] | 0.567 | 34.7 |"
    assert extension in section
    assert "| e-per-r | η per doubling of r | +0.046 | [–] | 0.910 | 29.0 |" in section  # null CI, null RMSE
    assert "| C = 7.3e12 | 16 | 0.410 | [0.290, 0.540] | – |" in section
    assert "| 0.260 | [-0.090, 0.520] | [-0.81, 0.18] / [0.50, 0.55] |" in section
    assert "| low half (2.5e12, 4.3e12) | 32 | 0.600 | [0.540, 0.730] |" in section
    assert "budget 3.6%, width 5.9%, r 14%, r × width 72%" in section
    assert section.count(HEADLINE) == 0  # said once, on the first screen


def test_a_law_that_holds_gives_phi_with_its_reported_interval_on_the_first_line(fitted_doc, tmp_path):
    doc = copy.deepcopy(fitted_doc)
    doc["law_check"] = _law_check("holds")
    doc["ci"] = {**doc["ci"], "phi": [0.41, 0.53]}
    doc["ci_method"] = "cluster_bootstrap"
    doc["ci_secondary"] = {"bootstrap_cell": [0.45, 0.5], "profile": [0.44, 0.52]}
    lead, first, section = _render(doc, tmp_path)
    phi = doc["fit"]["phi"]
    holds = "the law holds on these runs: none of 3 tests rejects one constant phi (family level 0.01; the "
    assert lead[0].startswith(f"**Verdict:** {holds}")
    assert "; **φ" in lead[0]  # the check's headline, then φ
    assert f"; **φ = {phi:.3f}**: 95% CI [0.410, 0.530] (cluster bootstrap), profile-likelihood" in lead[0]
    assert first.count(f"φ = {phi:.3f}") == 1
    assert "The tests behind the verdict" not in section and "p = 0.5" in section  # nothing rejects
    line = summary_line(read_protocol(doc), 18, 18, [], "laptop", None)
    assert line.startswith(holds) and ". phi = " in line
    assert "95% CI [0.410, 0.530] (cluster bootstrap)" in line


def test_an_untestable_law_says_why(fitted_doc, tmp_path):
    doc = {**copy.deepcopy(fitted_doc), "law_check": _law_check("untestable")}
    lead, _, _ = _render(doc, tmp_path)
    why = "law not checked: 1 budget(s); checking that one φ holds across budgets needs at least 3"
    assert lead[0] == f"**Verdict:** the law could not be checked: {why}."
    # identified, but under a law nothing here tested: the number, not bold, and why it is no measurement
    assert lead[1].startswith(f"φ = {doc['fit']['phi']:.3f}, given a law not checked on these runs: 95% CI")


def test_a_fit_json_without_a_law_check_says_so(fitted_doc, tmp_path):
    lead, _, section = _render(copy.deepcopy(fitted_doc), tmp_path)
    assert lead[0] == "**Verdict:** law not checked (fit.json predates the law check)."
    assert "Law not checked (fit.json predates the law check)" in section


def test_a_law_check_with_null_fields_still_renders(fitted_doc, tmp_path):
    """Every field the type lets be null (no noise, no lack of fit, no per-budget φ or halves, extensions
    without CIs or leave-out RMSE): no crash, "–" in its cells."""
    check = _law_check("rejected")
    check.update(noise={"sigma": None, "df": None, "ci": None, "source": "none"}, lack_of_fit=None,
                 per_budget_phi=[], halves=[], leave_one_budget_out=[])  # fmt: skip
    check["evidence"] = check["rejected_by"] = [e for e in check["evidence"] if e["kind"] == "extension"]
    for ext in check["extensions"]:
        ext.update(ci=None, lobo_rmse=None, phi0_ci=None)
    doc = {**copy.deepcopy(fitted_doc), "law_check": check}
    lead, _, section = _render(doc, tmp_path)
    first = "one constant phi is rejected: phi falls 0.52 per decade of compute (F = 38.0, p = 1e-08)"
    assert lead[0] == f"**Verdict:** {first}." and "no per-budget φ" in lead[1]
    assert "Lack-of-fit test: not run" in section and "Noise: not known" in section and "[–]" in section


def test_a_law_check_json_refuses_unknown_keys_and_reads_the_old_schema(fitted_doc, tmp_path):
    """A key the record does not know is one line naming it; a law check written before ``fit.results``
    (headline and reasons as sentences, halves by name) is read through its converter, and says the same."""
    check = {**_law_check("rejected"), "headline": "stale"}
    doc = {**copy.deepcopy(fitted_doc), "law_check": check}
    with pytest.raises(RecordError, match="unknown key.*headline"):
        read_protocol(doc)
    published = json.loads((REPO / "results" / "laptop-factorial" / "fit.json").read_text())["law_check"]
    assert "schema" not in published  # written before fit.results
    typed = read_law_check(published)
    assert law_headline(typed) == published["headline"] and law_reasons(typed) == published["reasons"]
    assert LawCheck.from_dict(json.loads(json.dumps(typed.to_dict()))) == typed


def test_an_axis_without_data_says_no_data():
    import matplotlib.pyplot as plt

    rows = [
        {"status": "ok", "r": r, "loss": 4.0 + 0.1 * i, "axis_knowledge": 5.0 + 0.1 * i,
         "axis_math_word_problems": math.nan}
        for i, r in enumerate((1, 2, 4, 1))
    ]  # fmt: skip
    fig = axis_figure(rows)
    try:
        panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
        assert set(panels) == {"knowledge", "math_word_problems"}
        assert [t.get_text() for t in panels["math_word_problems"].texts] == [
            "no data: no run has a loss on this axis"
        ]
        assert not panels["knowledge"].texts and panels["knowledge"].get_legend() is not None
    finally:
        plt.close(fig)


def _design_doc(selected: str, rmse: float, top_rmse: float) -> SimpleNamespace:
    lobo = (HeldOutBudget(budget=1e12, n=4, rmse=0.5), HeldOutBudget(budget=4e12, n=4, rmse=top_rmse))
    check = LawCheck(
        verdict="rejected", family_level=0.01,
        noise=RunNoise(sigma=0.01, df=8, ci=(0.007, 0.019), source="replicates", replicated_runs=16),
        rmse=0.05, lack_of_fit=None, leave_one_budget_out=(HeldOutBudget(budget=4e12, n=4, rmse=0.5),),
        extensions=(_extension("phi-trend-c", rmse=rmse, p=1e-6, leave_one_budget_out=lobo),),
        per_budget_phi=(), halves=(), decomposition={"r": 0.1, "r_x_width": 0.7}, selected_form=selected,
        budgets=2, evidence=(Evidence("extension", 1e-6, key="phi-trend-c"),),
        rejected_by=(Evidence("extension", 1e-6, key="phi-trend-c"),), tests=1, threshold=0.01,
    )  # fmt: skip
    cell = dict(n_runs=2, n_star=1e6, loss_star=3.0, bracketed=True)
    minima = (
        CellMinimum(budget=1e12, r=1, runs_bracket=False, **cell),
        CellMinimum(budget=1e12, r=8, runs_bracket=False, **cell),
        CellMinimum(budget=4e12, r=1, runs_bracket=True, **cell),
    )
    return SimpleNamespace(law_check=check, cell_minima=minima)  # the parts of a ProtocolResult it reads


def _design_rows(widths_at_top=(16, 32)) -> list[dict]:
    rows = [
        {"run": f"a{w}", "budget": 1e12, "width": w, "loss": 4.0 + w / 1000, "status": "ok"} for w in (16, 32)
    ]
    rows += [{"run": f"b{w}", "budget": 4e12, "width": w, "loss": 3.5, "status": "ok"} for w in widths_at_top]
    return rows + [{"run": "c", "budget": 4e12, "width": 64, "loss": math.nan, "status": "failed"}]


def _checks(section: Section, tmp_folder) -> dict[str, list[str]]:
    md = Document("t", sections=[section]).markdown(tmp_folder)
    lines = [line for line in md.splitlines() if line.startswith("| ")]
    cells = [[f.strip() for f in line.strip("|").split("|")] for line in lines]
    return {row[0]: row[1:] for row in cells[1:]}


def test_design_checks_show_each_target_with_its_measured_value(tmp_path):
    """Where a design goal is missed, the report says by how much (the measured value beside the
    target) and where (the cells, the runs); the selected form's RMSE and top-budget leave-out are used."""
    section = design_checks_section(_design_doc("phi-trend-c", 0.015, 0.025), _design_rows(), (2, 4, 4.01))
    checks = _checks(section, tmp_path)
    assert checks["same widths at every budget (budget and width not confounded)"] == [
        "widths 16, 32 at all 2 budgets", "yes", "yes"]  # fmt: skip
    assert checks["replicated runs (seed noise σ)"][0].startswith(
        "16 runs in 8 replicated cells: σ = 0.0100 nats on 8 df"
    )
    assert checks["residual RMSE under the selected form (form phi-trend-c)"] == [
        "0.0150 nats = 1.5 σ", "≤ 2 σ", "yes"]  # fmt: skip
    assert checks["top budget (4e12) left out, predicted by form phi-trend-c"] == [
        "RMSE 0.0250 nats = 2.5 σ", "≤ 2 σ", "**no**"]  # fmt: skip
    assert checks["iso-FLOP cells bracketed: vertex inside the widths / lowest run inside"] == [
        "3 / 1 of 3", "all", "**no**"]  # fmt: skip
    assert checks["runs below the bigram table (4.010 nats)"] == ["2 of 4", "all", "**no**"]
    notes = "\n".join(section.blocks[-1].items)
    assert "1e12, r = 1, 8" in notes and "a32 (4.032), a16 (4.016)" in notes
    assert "structured" not in notes  # the RMSE target is met: no misfit note


def test_design_checks_name_a_confounded_grid_and_a_structured_misfit(tmp_path):
    doc = _design_doc("paper", 0.015, 0.025)
    checks = _checks(design_checks_section(doc, _design_rows((32, 64)), None), tmp_path)
    assert checks["same widths at every budget (budget and width not confounded)"] == [
        "1e12: [16, 32]; 4e12: [32, 64]", "yes", "**no**"]  # fmt: skip
    assert checks["residual RMSE under the selected form (the paper's law)"][-1] == "**no**"  # 5 σ
    top = checks["top budget (4e12) left out, predicted by the paper's law"]
    assert top[0] == "RMSE 0.5000 nats = 50.0 σ"
    assert not any(k.startswith("runs below") for k in checks)  # no baselines: no row, no guess
    notes = "\n".join(design_checks_section(doc, _design_rows(), None).blocks[-1].items)
    assert "r × width group means explain 70%" in notes


def test_a_case_study_sweep_reports_delta_phi_against_the_base_it_reuses(tmp_path, monkeypatch):
    """A variant sweep (its spec reuses a base sweep's r = 1 runs) leads its report with the compare verdict,
    writes compare.json and the two case-study figures; Δφ is recovered on law-exact losses (+ 0.002 nats)."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(3)
    data = {"path": str(tmp_path / "no-dataset")}  # one dataset for both arms (else compare refuses them)
    synthetic_sweep(tmp_path / "results" / "laptop-factorial", "laptop", data=data)
    variant = tmp_path / "variant"
    runs = synthetic_sweep(variant, "laptop-truncated-bptt", data=data)
    for run in runs:
        path = variant / "runs" / run.name / "result.json"
        result = json.loads(path.read_text())
        coef = {**LAW, "phi": LAW["phi"] - 0.1} if run.r > 1 else LAW
        result["val_loss"] = law_loss(run.n_once, run.n_rec, run.r, run.tokens, coef) + 0.002 * (
            rng.standard_normal() if run.r > 1 else 0.0
        )
        if run.r == 1:  # the anchors are the base's own runs, bit for bit
            base = tmp_path / "results" / "laptop-factorial" / "runs" / run.name / "result.json"
            result = json.loads(base.read_text())
        path.write_text(json.dumps(result))
    assert main(["report", str(variant), "--restarts", "40", "--bootstrap", "20"]) == 0
    doc = json.loads((variant / "report" / "compare.json").read_text())
    assert doc["delta_phi"]["estimate"] == pytest.approx(-0.1, abs=0.02)
    assert doc["runs"]["shared_anchors"] == 17  # 12 main + 3 seed-1 + 2 wide r = 1 runs
    md = (variant / "report" / "report.md").read_text()
    assert _lead(md)[0].startswith("**Case study: laptop-truncated-bptt: lowers phi by 0.1")
    assert "## Case study: laptop-truncated-bptt against its base" in md
    for name in ("loss_change_by_r", "delta_phi_per_budget", "isoflop_arms"):
        assert (variant / "report" / "plots" / f"{name}.png").stat().st_size > 0


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_report_from_its_analysis_renders_the_same_page_without_a_fit(reported_line, tmp_path, monkeypatch):
    """Issue 42: `loopscale report SWEEP` saves its analysis (analysis.json beside fit.json); `--from` renders
    the same report.md and line from it, with the fitting protocol, collect and the torch probe never run."""
    root, line = reported_line
    folder = tmp_path / "report"
    shutil.copytree(root / "report", folder)
    before = (folder / "report.md").read_text()
    (folder / "report.md").unlink()
    import loopscale.analysis.sweep
    import loopscale.fit.protocol

    def refuse(*args, **kwargs):
        raise AssertionError("--from recomputed")

    for module, name in ((loopscale.fit.protocol, "run_protocol"), (loopscale.analysis.sweep, "collect"),
                         (loopscale.analysis.sweep, "analyse_sweep")):  # fmt: skip
        monkeypatch.setattr(module, name, refuse)
    code, out, err = _cli(["report", "--from", str(folder / "analysis.json")])
    assert code == 0, err
    assert (folder / "report.md").read_text() == before
    assert out.strip().split(" → ")[0] == line.split(" → ")[0]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["report", "--from", "{tmp}/report/nowhere.json"], "no such file"),
        (["report", "--from", "{tmp}/report/bad.json"], "not a loopscale analysis.json"),
        (["report", "--from", "{tmp}/theirs/analysis.json"], "not created by loopscale"),
        (["report"], "give a SWEEP_DIR to analyse, or --from"),
        (["report", "{tmp}", "--from", "{tmp}/report/bad.json"], "give no SWEEP_DIR or --out"),
    ],
)
def test_report_from_bad_input_is_one_line(tmp_path, argv, message):
    from loopscale.io import claim_folder

    (tmp_path / "report").mkdir()
    claim_folder(tmp_path / "report", "report")
    (tmp_path / "report" / "bad.json").write_text('{"schema": 0}')
    (tmp_path / "theirs").mkdir()  # a folder of the user's: --from would rewrite report.md there
    (tmp_path / "theirs" / "analysis.json").write_text("{}")
    code, out, err = _cli([a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["laptop-hyperconnections", "laptop-truncated-bptt"])
@pytest.mark.parametrize("written_before_analysis_json", [False, True])
def test_a_published_case_study_re_renders_from_its_folder_byte_identical(name, written_before_analysis_json,
                                                                          tmp_path):  # fmt: skip
    """A published report folder re-renders from what it holds (its analysis.json, or for a folder written
    before that, its fit.json, compare.json and the figures its report shows): the same report.md."""
    folder = tmp_path / name
    shutil.copytree(REPO / "results" / name, folder, ignore=shutil.ignore_patterns("runs"))
    if written_before_analysis_json:
        (folder / "analysis.json").unlink()
    before = (folder / "report.md").read_text()
    code, _, err = _cli(["report", "--from", str(folder)])
    assert code == 0, err
    assert (folder / "report.md").read_text() == before
    assert json.loads((folder / "analysis.json").read_text())["schema"] == 1
