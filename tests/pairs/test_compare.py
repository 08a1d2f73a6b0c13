"""Δφ of a recipe change (``loopscale compare``): the shared-nuisance fit, its bootstrap and F-test, the
paper's separate fits, per-budget Δφ, and the document's matched losses, optimum shifts and verdict."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from fit.conftest import simulated_grid
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import least_squares

from loopscale.cli import main
from loopscale.errors import UserError
from loopscale.fit import load_table
from loopscale.fit.law import law_loss, objective_and_gradient
from loopscale.pairs.case_study import compare_arms
from loopscale.pairs.case_study_results import case_study_in, read_case_study
from loopscale.pairs.compare import SharedBootstrap, delta_phi_shared, make_arms, per_budget, shared_model
from loopscale.paper import JOINT_FIT, MAIN_GRID
from loopscale.present.compare_text import case_study_verdict

PHI = JOINT_FIT["phi"]
FOUR = {c: MAIN_GRID[c] for c in sorted(MAIN_GRID)[:4]}
RESULTS = Path(__file__).resolve().parents[2] / "results"


def _arms_rows(delta: float, noise: float, seed: int) -> tuple[list[dict], list[dict]]:
    """The paper's four lower budgets: base rows from the published law, variant looped rows from the same
    law with φ + ``delta`` (tokens as the base's), the base's r = 1 rows listed in both tables."""
    rng = np.random.default_rng(seed)
    base = simulated_grid(noise=noise, seed=seed, grid=FOUR)
    variant = []
    for row in base:
        if row["r"] == 1:
            variant.append(dict(row))
            continue
        coef = {**JOINT_FIT, "phi": PHI + delta}
        loss = float(law_loss(coef, row["n_once"], row["n_rec"], row["r"], row["tokens"]))
        variant.append({**row, "run": "v-" + row["run"], "loss": loss + noise * rng.standard_normal()})
    return base, variant


def test_make_arms_counts_identical_anchors_once_and_keeps_the_variants_budgets():
    base, variant = _arms_rows(-0.07, 0.0, seed=1)
    extra = [r for r in simulated_grid(seed=2) if r["budget"] > max(FOUR)]  # base budgets the variant lacks
    arms = make_arms(load_table(base + extra), load_table(variant))
    n_r1 = sum(1 for r in base if r["r"] == 1)
    assert arms.shared_anchors == n_r1
    assert len(arms.table) == len(base) + sum(1 for r in variant if r["r"] > 1)
    assert arms.variant.sum() == sum(1 for r in variant if r["r"] > 1)
    assert set(arms.table.budget.tolist()) == set(FOUR)
    assert len(arms.variant_table) == len(variant)


def test_make_arms_refuses_tables_it_cannot_pair():
    base, variant = _arms_rows(0.0, 0.0, seed=1)
    with pytest.raises(UserError, match="no looped run"):
        make_arms(load_table(base), load_table([r for r in variant if r["r"] == 1]))
    no_budget = [{k: v for k, v in r.items() if k != "budget"} for r in variant]
    with pytest.raises(UserError, match="budget"):
        make_arms(load_table(base), load_table(no_budget))


@settings(max_examples=25, deadline=None)
@given(
    theta=st.tuples(
        st.floats(0, 6),
        st.floats(0, 8),
        st.floats(-1, 1),
        st.floats(0.1, 0.6),
        st.floats(0.1, 0.6),
        st.floats(0, 1),
        st.floats(-0.5, 0.5),
        st.floats(-0.5, 0.5),
    )
)
def test_the_objective_gradient_with_delta_columns_matches_finite_differences(theta):
    """The extra columns (a φ-trend, Δφ) enter the analytic gradient exactly."""
    base, variant = _arms_rows(0.1, 0.0, seed=3)
    model = shared_model(make_arms(load_table(base), load_table(variant)), "phi-trend-c")
    x = np.array(theta)
    _, grad = objective_and_gradient(x, model.design)
    for i in range(len(x)):
        step = 1e-6
        hi, lo = x.copy(), x.copy()
        hi[i] += step
        lo[i] -= step
        f_hi, f_lo = objective_and_gradient(hi, model.design)[0], objective_and_gradient(lo, model.design)[0]
        fd = (f_hi - f_lo) / (2 * step)
        assert grad[0, i] == pytest.approx(fd[0], rel=1e-4, abs=1e-9)


@pytest.mark.parametrize("delta", [-0.073, 0.0, 0.193])
def test_shared_delta_phi_recovers_the_true_difference(delta):
    base, variant = _arms_rows(delta, 0.003, seed=11)
    out = delta_phi_shared(
        make_arms(load_table(base), load_table(variant)),
        "paper",
        restarts=60,
        resamples=40,
        bootstrap_restarts=3,
        seed=0,
    )
    lo, hi = out.ci
    assert out.estimate == pytest.approx(delta, abs=0.02)
    assert lo <= delta <= hi
    assert out.phi == pytest.approx(PHI, abs=0.03)
    assert out.resolved == (delta != 0.0)


def test_shared_estimate_equals_an_independent_least_squares_refit():
    """An independent fit of the same model (SciPy least_squares on log loss, φ_variant = φ + Δφ) lands on
    the same Δφ as the shared least-squares refit of the F-test."""
    base, variant = _arms_rows(-0.08, 0.004, seed=5)
    arms = make_arms(load_table(base), load_table(variant))
    t, z = arms.table, arms.variant.astype(float)

    def resid(p):
        a, b, e, alpha, beta, phi, dphi = p
        n_eff = t.n_once + t.r ** (phi + dphi * z) * t.n_rec
        pred = np.exp(e) + np.exp(a) * n_eff**-alpha + np.exp(b) * t.tokens**-beta
        return np.log(pred) - np.log(t.loss)

    start = [np.log(JOINT_FIT["A"]), np.log(JOINT_FIT["B"]), np.log(JOINT_FIT["E"]), 0.3, 0.3, 0.5, 0.0]
    independent = least_squares(resid, start, xtol=1e-14, ftol=1e-14, gtol=1e-14).x[6]
    out = delta_phi_shared(arms, "paper", restarts=60, resamples=0, bootstrap_restarts=3, seed=0)
    assert out.estimate == pytest.approx(independent, abs=0.01)


def test_per_budget_delta_phi_is_the_pooled_difference_on_a_noise_free_table():
    base, variant = _arms_rows(0.15, 0.0, seed=7)
    arms = make_arms(load_table(base), load_table(variant))
    out = delta_phi_shared(arms, "paper", restarts=60, resamples=0, bootstrap_restarts=3, seed=0)
    model = shared_model(arms, "paper")
    rows = per_budget(arms, model, np.array(out.theta), resamples=0)
    assert [r.budget for r in rows] == sorted(FOUR)
    assert all(r.delta_phi == pytest.approx(0.15, abs=0.01) for r in rows)


def test_the_document_leads_with_a_verdict_and_carries_the_matched_changes():
    base, variant = _arms_rows(-0.1, 0.003, seed=13)
    doc = compare_arms(
        load_table(base),
        load_table(variant),
        name="truncated BPTT",
        restarts=40,
        resamples=30,
        bootstrap_restarts=3,
        noise=0.003,
    )
    # the pairs name a change of φ
    assert case_study_verdict(doc).startswith("truncated BPTT: lowers phi by 0.1")
    assert doc.effects.chosen == "delta phi"
    assert doc.law_check["base"].verdict == "holds"
    lc = doc.loss_change
    assert lc.matched == sum(1 for r in variant if r["r"] > 1)
    assert lc.lower == 0  # a lower φ makes every looped run worse
    assert doc.delta_phi_separate.estimate == pytest.approx(-0.1, abs=0.03)
    assert set(doc.power) == {"-0.08", "+0.19"}  # the pairs' rule, simulated on this design
    assert read_case_study(json.loads(json.dumps(doc.to_dict()))) == doc  # compare.json reads back


def test_compare_cli_writes_compare_json_and_refuses_bad_input(tmp_path, capsys):
    base, variant = _arms_rows(0.19, 0.003, seed=17)
    for name, rows in (("base", base), ("variant", variant)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "compare.json"
    argv = ["compare", str(tmp_path / "base.jsonl"), str(tmp_path / "variant.jsonl"), "--restarts", "40"]
    cheap = ["--bootstrap", "20", "--bootstrap-restarts", "2", "--noise", "0.003"]
    assert main([*argv, *cheap, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert {"estimate", "ci", "p", "method"} <= set(doc["delta_phi"])
    assert {"delta_phi_separate", "per_budget", "law_check"} <= set(doc) and "verdict" not in doc  # no prose
    assert set(doc["law_check"]) == {"base", "variant"}
    assert all({"budget", "delta_phi", "ci"} <= set(row) for row in doc["per_budget"])
    assert capsys.readouterr().out.splitlines()[0] == case_study_verdict(read_case_study(doc))
    for bad, message in ((["--bootstrap", "1"], "--bootstrap"), (["--noise", "-1"], "--noise")):
        code = main([*argv, *bad])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit):
        main([*argv, "--form", "nope"])
    assert "invalid choice" in capsys.readouterr().err


def _fake_bootstrap(sd_of_estimate: float, calls: list):
    """A stand-in for ``bootstrap_shared``: Δφ draws N(estimate, (estimate·sd_of_estimate)²), one call per
    round, recorded."""

    def fake(model, arms, theta, resamples, restarts, seed, advance, draws):
        calls.append(resamples)
        thetas = np.tile(theta, (resamples, 1))
        est = theta[model.delta]
        noise = np.random.default_rng(seed).standard_normal(resamples)
        thetas[:, model.delta] = est + est * sd_of_estimate * noise
        return SharedBootstrap(thetas, {})

    return fake


def test_an_end_within_monte_carlo_error_of_zero_grows_the_bootstrap_and_gives_no_verdict(monkeypatch):
    """SE = estimate / t: the lower end sits at 0, so its Monte Carlo range holds 0 at every count: the
    bootstrap doubles up to the cap and the result is 'not resolved, on the edge', not a coin flip."""
    from scipy.stats import t as t_dist

    from loopscale.pairs import compare

    arms = make_arms(*(load_table(rows) for rows in _arms_rows(0.193, 0.003, seed=11)))
    df = compare.variant_groups(arms) - 1
    calls: list = []
    monkeypatch.setattr(compare, "bootstrap_shared", _fake_bootstrap(1 / t_dist.ppf(0.975, df), calls))
    monkeypatch.setattr(compare, "MAX_RESAMPLES", 800)
    out = delta_phi_shared(arms, "paper", restarts=60, resamples=100, bootstrap_restarts=3, seed=0)
    assert calls == [100, 100, 200, 400]
    assert out.resamples == 800 and out.resamples_requested == 100
    assert not out.mc_settled and not out.resolved
    lo_range = out.ci_mc[0]
    assert lo_range[0] < 0 < lo_range[1] and lo_range[0] <= out.ci[0] <= lo_range[1]
    published = read_case_study(json.loads((RESULTS / "laptop-truncated-bptt" / "compare.json").read_text()))
    doc = dataclasses.replace(
        published, name="v", delta_phi=out, per_budget=(), power={}, law_check=None, effects=None
    )
    assert case_study_verdict(doc).startswith("delta phi not resolved for v, on the edge")
    assert "even at 800 resamples" in case_study_verdict(doc)


def test_a_clear_interval_settles_at_the_requested_count(monkeypatch):
    from loopscale.pairs import compare

    arms = make_arms(*(load_table(rows) for rows in _arms_rows(0.193, 0.003, seed=11)))
    calls: list = []
    monkeypatch.setattr(compare, "bootstrap_shared", _fake_bootstrap(0.2, calls))
    out = delta_phi_shared(arms, "paper", restarts=60, resamples=100, bootstrap_restarts=3, seed=0)
    assert calls == [100] and out.mc_settled and out.resolved and out.resamples == 100


def test_per_budget_delta_phi_is_refused_where_a_budget_has_no_more_runs_than_free_parameters():
    """Issue 44: 3 runs at a budget (an r = 1 anchor, a base and a variant looped run) for A, B, φ, Δφ:
    nothing is identified there, so no Δφ and no interval is printed, and the reason is given."""
    base, variant = _arms_rows(0.1, 0.002, seed=3)
    full_base, full_variant = load_table(base), load_table(variant)
    arms = make_arms(full_base, full_variant)
    out = delta_phi_shared(arms, "paper", restarts=30, resamples=0, bootstrap_restarts=3, seed=0)
    thin = []
    for c in sorted(FOUR):
        at = [r for r in base if r["budget"] == c]
        thin += [next(r for r in at if r["r"] == 1), next(r for r in at if r["r"] > 1)]
    looped = [next(r for r in variant if r["budget"] == c and r["r"] > 1) for c in sorted(FOUR)]
    small = make_arms(load_table(thin), load_table(looped))
    rows = per_budget(small, shared_model(small, "paper"), np.array(out.theta), resamples=20)
    assert all(r.delta_phi is None and r.ci is None and r.n == 3 for r in rows)
    assert all(r.reason == "not_identified" for r in rows)
    full = per_budget(arms, shared_model(arms, "paper"), np.array(out.theta), resamples=20)
    for r in full:  # where an interval is printed it holds its own estimate and has width
        assert r.ci is None or r.ci[0] < r.delta_phi < r.ci[1]


def test_a_ladder_whose_recipe_hurts_every_model_gets_that_verdict():
    """Issue 44's public ladder, in shape: one seed, r ∈ {1, 2}, 7 rungs whose width and budget grow
    together; the variant re-trains every rung with a recipe that hurts more the larger the model, plain
    models twice as much (+0.062 at the top for r = 1). The verdict says the recipe changes every model,
    plain ones most, names neither a constant nor a Δφ, and no Δφ per budget is printed (3 runs each)."""
    from loopscale.paper import grid_runs

    rng = np.random.default_rng(0)
    rungs = {2e17 * 2**k: (4 + 2 * k,) for k in range(7)}  # widths 256 … 1024 (multiples of head_dim 128)
    base = grid_runs(rungs, rs=(1, 2))
    variant = []
    for row in base:
        law = float(law_loss(JOINT_FIT, row["n_once"], row["n_rec"], row["r"], row["tokens"]))
        rung = sorted(rungs).index(row["budget"])
        harm = 0.062 * rung / 6 * (1.0 if row["r"] == 1 else 0.5)
        row.update(run=f"rung{rung}_r{row['r']}", seed=0, loss=law + rng.normal(0, 0.003), status="ok")
        variant.append({**row, "run": "v-" + row["run"], "loss": law + harm + rng.normal(0, 0.003)})
    doc = compare_arms(load_table(base), load_table(variant), name="ladder", restarts=40, resamples=30,
                       bootstrap_restarts=3, law_check=False)  # fmt: skip
    e = doc.effects
    assert e.plain_pairs == 7 and e.anchors == "paired"
    assert set(e.chosen_terms) <= {"every"}  # neither a loop-specific constant nor a Δφ
    verdict = case_study_verdict(doc)
    assert "changes every model" in verdict and "plain ones most" in verdict, verdict
    assert "phi by" not in verdict and "a constant" not in verdict
    assert all(row.delta_phi is None and row.reason == "not_identified" for row in doc.per_budget)
    for m in e.models.values():  # no printed interval excludes its own estimate
        assert all(lo < m.value(t) < hi for t, (lo, hi) in m.ci.items())


@pytest.mark.parametrize("arm", ["laptop-hyperconnections", "laptop-truncated-bptt"])
def test_a_published_compare_json_reads_as_a_case_study(arm):
    """compare.json as published (its verdict and methods as sentences) reads back as the record: the same
    keys and numbers less the sentences, which become codes; a refusal or note written as a sentence too."""
    data = json.loads((RESULTS / arm / "compare.json").read_text())
    case = read_case_study(data)
    assert set(case.to_dict()) == set(data) - {"verdict"} and read_case_study(case.to_dict()) == case
    assert case.delta_phi.method == "shared_nuisance" and case.delta_phi_separate.method == "separate_fits"
    assert case.delta_phi.ci == tuple(data["delta_phi"]["ci"]) and case.power == data["power"]
    assert {a: c.verdict for a, c in case.law_check.items()} == {
        a: c["verdict"] for a, c in data["law_check"].items()
    }
    old = {
        **data,
        "per_budget": [{**data["per_budget"][0], "reason": "3 runs for 4 free parameters: not identified"}],
        "notes": ["no matched-pair analysis: only 2 runs of the variant have a base run"],
    }
    legacy = read_case_study(old)
    assert legacy.per_budget[0].reason == "not_identified" and legacy.notes == ("no_pairs",)
    with pytest.raises(UserError, match="compare.json: not a case study"):
        case_study_in({**data, "runs": {}}, "compare.json")
