"""The law check, the extended law forms and the random-effects interval (issue 19, docs/fitting.md)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import f as f_dist

from loopscale.fit import load_table
from loopscale.fit.bootstrap import effect_groups, random_effects_bootstrap, variance_components
from loopscale.fit.fitter import design_for, fit_law
from loopscale.fit.law import (
    EXTENSIONS,
    extension_covariate,
    extension_reference,
    law_loss,
    objective_and_gradient,
)
from loopscale.fit.lawcheck import check_law, lack_of_fit, phi_halves, replicate_noise, residual_decomposition
from loopscale.fit.results import Evidence, HalfPhi, LawCheck, RecordError, RunNoise
from loopscale.pairs.case_study_results import read_case_study
from loopscale.paper import JOINT_FIT
from loopscale.present.compare_text import case_study_verdict
from loopscale.present.law_check import law_headline

from .conftest import simulated_grid

# A small iso-depth grid: 4 budgets × 4 widths × r ∈ {1, 2, 4} from the paper's grid (48 runs, fast fits).
SMALL_GRID = {
    1.00e18: (6, 8, 10, 12),
    2.15e18: (8, 10, 12, 14),
    4.64e18: (10, 12, 14, 16),
    1.00e19: (12, 16, 18, 20),
}


def _rows(grid=SMALL_GRID, noise=0.0, seed=0, phi_slope=0.0, rs=(1, 2, 4)):
    """Runs of ``grid`` with losses from the published law; ``phi_slope``: φ changes this much per decade
    of compute around the grid's centre (a law that one constant φ cannot describe)."""
    from loopscale.paper import grid_runs

    rng = np.random.default_rng(seed)
    runs = grid_runs(grid, rs=rs)
    centre = np.mean([math.log10(run["budget"]) for run in runs])
    for run in runs:
        coef = dict(JOINT_FIT)
        coef["phi"] = JOINT_FIT["phi"] + phi_slope * (math.log10(run["budget"]) - centre)
        run["run"] = f"C{run['budget']:.3g}-d{run['width']}-r{run['r']}"
        loss = float(law_loss(coef, run["n_once"], run["n_rec"], run["r"], run["tokens"]))
        run["loss"] = loss + noise * rng.standard_normal()
    return runs


@pytest.mark.parametrize("extension", list(EXTENSIONS))
def test_extension_gradient_matches_finite_differences(extension):
    table = load_table(_rows(noise=0.01))
    ref = extension_reference(extension, table.n_once, table.n_rec, table.r, table.budget)
    design = design_for(table, False, extension, ref)
    theta = np.array([6.0, 7.0, 0.4, 0.3, 0.35, 0.5, -0.2 if extension != "e-per-r" else 0.05])
    _, grad = objective_and_gradient(theta[None], design)
    for i in range(7):
        step = np.zeros(7)
        step[i] = 1e-6
        up = objective_and_gradient((theta + step)[None], design)[0][0]
        down = objective_and_gradient((theta - step)[None], design)[0][0]
        assert grad[0, i] == pytest.approx((up - down) / 2e-6, rel=1e-5, abs=1e-10)


def test_extension_with_zero_ext_is_the_paper_law():
    table = load_table(_rows())
    for extension in EXTENSIONS:
        ref = extension_reference(extension, table.n_once, table.n_rec, table.r, table.budget)
        z = extension_covariate(extension, table.n_once, table.n_rec, table.r, table.budget, ref)
        coef = {**JOINT_FIT, "ext": 0.0}
        np.testing.assert_allclose(
            law_loss(coef, table.n_once, table.n_rec, table.r, table.tokens, extension, z),
            law_loss(JOINT_FIT, table.n_once, table.n_rec, table.r, table.tokens),
        )


def test_phi_trend_c_fit_recovers_the_slope_of_noise_free_data():
    table = load_table(_rows(phi_slope=-0.3))
    fit = fit_law(table, restarts=50, extension="phi-trend-c")
    assert fit.coefficients["ext"] == pytest.approx(-0.3, abs=2e-3)
    assert fit.phi == pytest.approx(JOINT_FIT["phi"], abs=2e-3)
    assert fit.law_form == "phi-trend-c"
    assert fit.to_dict()["extension"] == "phi-trend-c"
    # the fitted law reproduces the data it came from
    np.testing.assert_allclose(fit.predict_table(table), table.loss, rtol=1e-4)


def test_e_per_r_is_a_multiplicative_floor():
    coef = {**JOINT_FIT, "ext": 0.1}
    base = law_loss(JOINT_FIT, 1e8, 1e8, 4, 1e10)
    z = extension_covariate("e-per-r", 1e8, 1e8, 4, None, None)
    extended = law_loss(coef, 1e8, 1e8, 4, 1e10, "e-per-r", z)
    assert float(extended - base) == pytest.approx(JOINT_FIT["E"] * (4**0.1 - 1), rel=1e-12)


def test_replicate_noise_and_lack_of_fit_match_a_hand_computation():
    rows = _rows(noise=0.0)
    # two replicates of three runs: pure-error SS = Σ (x - mean)² over each pair
    extra = []
    for i, delta in zip((0, 5, 9), (0.02, -0.01, 0.03)):
        twin = dict(rows[i])
        twin["run"] += "-s1"
        twin["loss"] = rows[i]["loss"] + delta
        extra.append(twin)
    table = load_table(rows + extra)
    noise = replicate_noise(table)
    ss = sum(d * d / 2 for d in (0.02, -0.01, 0.03))
    assert noise.df == 3 and noise.replicated_runs == 6
    assert noise.sigma == pytest.approx(math.sqrt(ss / 3))
    resid = np.full(len(table), 0.01)
    lof = lack_of_fit(resid, 6, noise)
    n = len(table)
    df_lack = n - 6 - 3
    stat = ((resid**2).sum() - ss) / df_lack / (ss / 3)
    assert lof.statistic == pytest.approx(stat)
    assert lof.p == pytest.approx(f_dist.sf(stat, df_lack, 3))
    stated = lack_of_fit(resid, 6, RunNoise(sigma=0.01, df=None, ci=None, source="--noise"))
    assert stated.test == "chi2" and stated.statistic == pytest.approx(n)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=24, max_size=24), st.floats(0.1, 3))
def test_decomposition_shares_are_fractions_and_find_a_pure_r_by_width_effect(effects, scale):
    table = load_table(_rows())
    groups = effect_groups(table).r_width
    assert groups.shape[1] == 3 * len(set(table.width.tolist()))  # r × width groups: 3 r × 8 widths
    effect = np.asarray(effects) * scale
    resid = groups @ effect
    shares = residual_decomposition(table, resid)
    assert all(-1e-12 <= v <= 1 + 1e-12 for v in shares.values())
    if (resid**2).sum() > 0:
        assert shares["r_x_width"] == pytest.approx(1.0)


def test_variance_components_recover_a_crossed_random_effect():
    rng = np.random.default_rng(3)
    table = load_table(simulated_grid())
    groups = effect_groups(table)
    truth = {"r_width": 0.02, "cell": 0.0, "iid": 0.01}
    resid = rng.normal(0, truth["iid"], len(table)) + groups.r_width @ rng.normal(
        0, truth["r_width"], groups.r_width.shape[1]
    )
    comps = variance_components(resid, groups, np.ones((len(table), 1)))
    assert math.sqrt(comps["r_width"]) == pytest.approx(0.02, rel=0.4)
    assert math.sqrt(comps["iid"]) == pytest.approx(0.01, rel=0.3)
    assert math.sqrt(comps["cell"]) < 0.006


def test_law_check_holds_on_the_published_law_with_iid_noise():
    # the paper's 116-run grid, as in the calibration (benchmarks/law_check_calibration.py: 20 of 20 hold)
    table = load_table(simulated_grid(noise=0.01, seed=1))
    fit = fit_law(table, restarts=40)
    check = check_law(table, fit, noise=0.01, resamples=0, restarts=5)
    assert check.verdict == "holds", law_headline(check)
    assert check.selected_form == "paper" and check.rejected_by == ()
    assert len(check.leave_one_budget_out) == 6
    assert {e.form for e in check.extensions} == set(EXTENSIONS)
    assert check.lack_of_fit.source == "--noise"
    assert LawCheck.from_dict(json.loads(json.dumps(check.to_dict()))) == check  # a JSON round trip


def test_law_check_rejects_a_phi_that_drifts_with_compute():
    table = load_table(_rows(noise=0.005, seed=2, phi_slope=-0.4))
    fit = fit_law(table, restarts=40)
    check = check_law(table, fit, resamples=0, restarts=5)
    assert check.verdict == "rejected"
    assert check.rejected_by[0] == Evidence("extension", check.rejected_by[0].p, key="phi-trend-c")
    headline = law_headline(check)
    assert headline.startswith("one constant phi is rejected: phi falls")
    assert "per decade of compute" in headline
    assert check.selected_form == "phi-trend-c"
    per_budget = [row.phi for row in check.per_budget_phi]
    assert per_budget == sorted(per_budget, reverse=True)  # φ falls with the budget


def test_law_check_is_untestable_with_two_budgets():
    rows = [r for r in _rows(noise=0.01) if r["budget"] < 3e18]
    table = load_table(rows)
    fit = fit_law(table, restarts=20)
    check = check_law(table, fit, resamples=0, restarts=5)
    assert check.verdict == "untestable" and check.untestable == "too_few_budgets" and check.budgets == 2
    assert "2 budget(s)" in law_headline(check)


def test_a_law_exact_table_is_untestable_not_rejected():
    """Losses exactly on the law: every RSS is rounding (≈ 1e-30), so an F ratio of two of them is noise;
    the check says it tested nothing instead of rejecting or holding."""
    table = load_table(_rows(noise=0.0))
    check = check_law(table, fit_law(table, restarts=20), resamples=0, restarts=5)
    assert check.verdict == "untestable" and check.tests == 0 and check.untestable == "no_residual"
    assert "no residual variance" in law_headline(check)
    assert all(e.p is None for e in check.extensions)


def test_seven_runs_leave_the_extensions_no_degree_of_freedom():
    """7 runs, 7 parameters in an extended law: no F-test (was a division by zero)."""
    narrowest = {}
    for row in _rows(noise=0.01, seed=4, rs=(1, 2)):  # one run per (budget, r): 8, then 7
        key = (row["budget"], row["r"])
        if key not in narrowest or row["width"] < narrowest[key]["width"]:
            narrowest[key] = row
    rows = list(narrowest.values())[:7]
    table = load_table(rows)
    check = check_law(table, fit_law(table, restarts=20), resamples=0, restarts=5)
    assert {e.df[1] for e in check.extensions} == {0}
    assert all(e.p is None and e.F is None for e in check.extensions)


def test_random_effects_bootstrap_widens_under_a_shared_effect():
    rng = np.random.default_rng(5)
    rows = _rows()
    table = load_table(rows)
    groups = effect_groups(table).r_width
    shared = groups @ rng.normal(0, 0.03, groups.shape[1])
    iid_rows = [dict(r, loss=r["loss"] + 0.01 * rng.standard_normal()) for r in rows]
    shared_rows = [dict(r, loss=r["loss"] + s + 0.01 * rng.standard_normal()) for r, s in zip(rows, shared)]
    widths = {}
    for name, data in (("iid", iid_rows), ("shared", shared_rows)):
        t = load_table(data)
        fit = fit_law(t, restarts=30)
        out = random_effects_bootstrap(fit, t, resamples=30, restarts=3)
        lo, hi = out.ci["phi"]
        widths[name] = hi - lo
        assert set(out.components) == {"r_width", "cell", "iid"}
    assert widths["shared"] > 1.5 * widths["iid"]


# ---------------------------------------------------------------------------------------------------------
# CLI: `loopscale fit --form/--noise`, `compare` with the law check

CHEAP = ["--restarts", "20", "--bootstrap", "8", "--bootstrap-restarts", "2", "--check-resamples", "0"]


def _write_csv(path, rows):
    import csv

    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def _run_cli(argv):
    import contextlib
    import io

    from loopscale.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_cli_fit_extended_form_reports_its_form_everywhere(tmp_path):
    table = _write_csv(tmp_path / "runs.csv", _rows(noise=0.005, seed=2, phi_slope=-0.4))
    code, out, _ = _run_cli(
        ["fit", table, *CHEAP, "--no-profile", "--form", "phi-trend-c", "--json", str(tmp_path / "f.json")]
    )
    assert code == 0
    doc = json.loads((tmp_path / "f.json").read_text())
    assert doc["form"] == "phi-trend-c" and doc["fit"]["extension"] == "phi-trend-c"
    assert doc["fit"]["ext"] == pytest.approx(-0.4, abs=0.05)
    assert doc["law_check"]["verdict"] == "rejected"
    assert out.splitlines()[0].startswith("one constant phi is rejected")
    assert doc["ci_method"] == "random_effects_bootstrap" and "cell_bootstrap" in doc["ci_secondary"]
    assert {row["form"] for row in doc["loop_worth"]} == {"phi-trend-c"}
    assert {row["budget"] for row in doc["loop_worth"]} == set(SMALL_GRID)  # φ differs per budget
    assert doc["compute_optimal"]["form"] == "phi-trend-c"


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--noise", "-0.01"], "--noise must be a positive number"),
        (["--noise", "nan"], "--noise must be a positive number"),
        (["--check-resamples", "1"], "--check-resamples must be 0"),
        (["--form", "e-per-r", "--fix-phi", "0.5"], "--form e-per-r extends the joint law"),
    ],
)
def test_cli_fit_bad_law_flags_fail_in_one_line(tmp_path, flags, message):
    table = _write_csv(tmp_path / "runs.csv", _rows())
    code, out, err = _run_cli(["fit", table, *flags])
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_cli_compare_leads_with_a_rejected_law(tmp_path):
    base = _write_csv(tmp_path / "base.csv", _rows(noise=0.005, seed=3))
    variant = _write_csv(tmp_path / "variant.csv", _rows(noise=0.005, seed=3, phi_slope=-0.5))
    code, out, _ = _run_cli(
        [
            "compare",
            base,
            variant,
            "--restarts",
            "20",
            "--bootstrap",
            "4",
            "--bootstrap-restarts",
            "1",
            "--json",
            str(tmp_path / "c.json"),
        ]
    )
    assert code == 0
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["law_check"]["variant"]["verdict"] == "rejected"
    first = out.splitlines()[0]  # the verdict: the rejection first, then what the matched pairs say
    assert first.startswith("the law check rejects one constant phi on the variant arm")
    assert first == case_study_verdict(read_case_study(doc)) and "delta phi beyond an offset: p =" in first


def test_phi_halves_give_each_ci_end_its_monte_carlo_range():
    """Each half's CI end lies inside its recorded Monte Carlo range (fit.bootstrap.end_ranges), the
    detail the report gives instead of putting the halves in its lead."""
    table = load_table(_rows(noise=0.005, seed=3))
    halves = {name: fit_law(table.subset(mask), restarts=10) for name, mask in table.budget_halves().items()}
    rows = phi_halves(table, halves, resamples=40)
    assert [row.half for row in rows] == ["low", "high"] and sum(row.n for row in rows) == len(table)
    for row in rows:
        for end, (a, b) in zip(row.ci, row.ci_mc):
            assert (a is None or a <= end) and (b is None or end <= b)
        assert HalfPhi.from_dict(json.loads(json.dumps(row.to_dict()))) == row


def test_a_lack_of_fit_below_one_percent_is_never_called_holds(monkeypatch):
    """Issue 42: the published truncated-BPTT arm passed the family level with a lack of fit p = 0.0022 and
    its report said "holds" beside it. The same check with such a lack of fit says "not rejected"."""
    from loopscale.fit import lawcheck

    table = load_table(simulated_grid(noise=0.01, seed=1))
    fit = fit_law(table, restarts=40)

    real = lawcheck.lack_of_fit
    monkeypatch.setattr(lawcheck, "lack_of_fit", lambda *a: dataclasses.replace(real(*a), p=0.0022))
    check = check_law(table, fit, noise=0.01, resamples=0, restarts=5)
    assert check.verdict == "not rejected" and "not confirmed" in law_headline(check)
    # and the type refuses the word outright: "holds" beside a lack of fit below 1% cannot be built or read
    with pytest.raises(ValueError, match="cannot hold"):
        dataclasses.replace(check, verdict="holds")
    with pytest.raises(RecordError, match="cannot hold"):
        LawCheck.from_dict({**check.to_dict(), "verdict": "holds"})
