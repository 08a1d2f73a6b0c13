"""The matched-pair effect models (fit.effects): which effect a recipe has, on tables with a known truth,
and on the two published case-study arms."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopscale.errors import UserError
from loopscale.fit.compare import make_arms
from loopscale.fit.effects import (
    _ols_t,
    analyse_pairs,
    cluster_robust,
    known_covariance,
    match_pairs,
    noise_components,
    with_base_fit,
)
from loopscale.fit.fitter import fit_law
from loopscale.fit.law import law_loss
from loopscale.fit.table import RunTable, load_table

RESULTS = Path(__file__).resolve().parents[2] / "results"
TRUE = {"E": 1.9, "A": 60.0, "B": 40.0, "alpha": 0.35, "beta": 0.28, "phi": 0.45}


def _law(t: RunTable, phi: float = TRUE["phi"], tokens_factor: float = 1.0) -> np.ndarray:
    return law_loss({**TRUE, "phi": phi}, t.n_once, t.n_rec, t.r, t.tokens * tokens_factor)


def _arms(delta_phi=0.0, offset=0.0, tokens_factor=1.0, noise=0.004, seed=0) -> tuple[RunTable, RunTable]:
    """A base table on the published factorial design with losses from a known law, and a variant of its
    looped runs with the given effect (and ``tokens_factor`` times the tokens), both with iid noise."""
    rng = np.random.default_rng(seed)
    base = load_table(RESULTS / "laptop-factorial" / "results.csv")
    base = dataclasses.replace(base, loss=_law(base) + rng.normal(0, noise, len(base)))
    looped = base.subset(base.r > 1)
    loss = _law(looped, TRUE["phi"] + delta_phi, tokens_factor) + offset + rng.normal(0, noise, len(looped))
    variant = dataclasses.replace(looped, tokens=looped.tokens * tokens_factor, loss=loss)
    return base, variant


def _analyse(base: RunTable, variant: RunTable, resamples: int = 20) -> dict:
    fit = fit_law(base, restarts=60, seed=0)
    return analyse_pairs(base, variant, fit, base_resamples=resamples, simulations=1000, seed=1)


def test_a_change_of_phi_is_named_and_measured():
    doc = _analyse(*_arms(delta_phi=0.15))
    assert doc["chosen"] == "delta phi"
    lo, hi = doc["models"]["delta phi"]["ci"]["delta_phi"]
    assert lo < 0.15 < hi and hi - lo < 0.2
    assert doc["tests"]["offset"]["p"] > 0.04  # the Δφ-only model is not rejected


def test_a_constant_offset_is_not_called_phi():
    doc = _analyse(*_arms(offset=-0.06))
    assert doc["chosen"] == "offset"
    lo, hi = doc["models"]["offset"]["ci"]["offset"]
    assert lo < -0.06 < hi
    # the shared-style reading: a Δφ-only model of an offset gives a positive Δφ, and the rule rejects it
    assert doc["models"]["delta phi"]["delta_phi"] > 0 and doc["tests"]["offset"]["p"] < 0.04


def test_a_token_gain_is_tokens_only_and_delta_phi_covers_zero():
    doc = _analyse(*_arms(tokens_factor=1.32))
    assert doc["chosen"] == "tokens only"
    assert all(v["token_part"] < -0.005 for v in doc["per_r"].values())  # the law predicts the gain
    lo, hi = doc["models"]["delta phi"]["ci"]["delta_phi"]
    assert lo < 0 < hi


def test_calibration_reports_wrong_attribution_and_power():
    doc = _analyse(*_arms(offset=-0.05))
    cal = doc["calibration"]
    assert set(cal) >= {"tokens only", "delta phi", "offset", "offset + delta phi", "delta phi = +0.19"}
    for row in cal.values():
        assert abs(sum(row["chosen"].values()) - 1.0) < 1e-9
        assert 0.0 <= row["wrong_attribution"] <= 0.1  # 4% per test; the union is bounded near 5%
    assert cal["tokens only"]["power"] > 0.85


def test_match_pairs_pairs_by_budget_width_r_seed_and_refuses_ambiguity():
    base, variant = _arms()
    pairs = match_pairs(base, variant)
    assert len(pairs) == int((base.r > 1).sum())
    assert np.all(pairs.base.seed == pairs.variant.seed) and np.all(pairs.base.width == pairs.variant.width)
    no_seed = dataclasses.replace(variant, seed=np.full(len(variant), np.nan))
    with pytest.raises(UserError, match="seed"):
        match_pairs(dataclasses.replace(base, seed=np.full(len(base), np.nan)), no_seed)
    with pytest.raises(UserError, match="matched pairs"):
        match_pairs(base, variant.subset(np.arange(3)))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 2))
def test_cluster_robust_matches_a_direct_sum_and_the_vectorised_t(seed, k):
    rng = np.random.default_rng(seed)
    n, groups = 30, 6
    cluster = np.arange(n) % groups
    x = np.column_stack([np.ones(n), rng.normal(size=n)])[:, :k]
    y = x @ rng.normal(size=k) + rng.normal(size=n) + rng.normal(size=groups)[cluster]
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    resid = y - x @ beta
    meat = sum(np.outer(x[cluster == g].T @ resid[cluster == g], x[cluster == g].T @ resid[cluster == g])
               for g in range(groups))  # fmt: skip
    bread = np.linalg.inv(x.T @ x)
    expected = groups / (groups - 1) * (n - 1) / (n - k) * bread @ meat @ bread
    np.testing.assert_allclose(cluster_robust(x, resid, cluster), expected, rtol=1e-9)
    coef, t, _ = _ols_t(y[None], x[None], cluster)
    np.testing.assert_allclose(coef[0], beta, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(t[0], beta / np.sqrt(np.diag(expected)), rtol=1e-8)


def test_noise_components_recover_cluster_and_iid_variances():
    rng = np.random.default_rng(3)
    groups, per = 400, 5
    cluster = np.repeat(np.arange(groups), per)
    resid = rng.normal(0, 0.02, groups)[cluster] + rng.normal(0, 0.01, groups * per)
    comp = noise_components(resid, cluster, 0)
    assert comp["iid"] == pytest.approx(0.01**2, rel=0.1)
    assert comp["cluster"] == pytest.approx(0.02**2, rel=0.2)


@pytest.mark.parametrize(
    ("arm", "chosen"), [("laptop-hyperconnections", "offset"), ("laptop-truncated-bptt", "tokens only")]
)
def test_published_arms(arm, chosen):
    """Hyperconnections: the loss change is flat in r (an offset, the Δφ-only model rejected); truncated
    BPTT: the loss change is the token gain the base law predicts, Δφ ≈ 0."""
    arms = make_arms(
        load_table(RESULTS / "laptop-factorial" / "results.csv"), load_table(RESULTS / arm / "results.csv")
    )
    fit = with_base_fit(arms.base_table, "e-per-r", 100, 0)
    doc = analyse_pairs(arms.base_table, arms.variant_table, fit, base_resamples=50, simulations=1000)
    assert doc["n_pairs"] == 51 and doc["chosen"] == chosen
    lo, hi = doc["models"]["delta phi"]["ci"]["delta_phi"]
    if chosen == "tokens only":
        assert lo < 0 < hi and hi - lo < 0.1  # the shared-nuisance interval is 0.20 wide
        assert all(1.3 < v["token_ratio"] < 1.34 for v in doc["per_r"].values())
    else:
        assert doc["tests"]["offset"]["p"] < 0.04 and doc["tests"]["delta_phi"]["p"] > 0.05


def test_a_few_pairs_with_known_noise_measure_the_offset():
    """The demo's path: 4 pairs (r = 2 and 8), the pairs' error covariance taken as known."""
    base, variant = _arms(offset=-0.06)
    cells = [(3.2e12, 64, 2), (3.2e12, 32, 8), (5e12, 64, 2), (5e12, 48, 8)]
    keep = np.array(
        [
            (b, w, r) in cells and s == 0
            for b, w, r, s in zip(variant.budget, variant.width, variant.r, variant.seed)
        ]
    )
    fit = fit_law(base, restarts=60, seed=0)
    noise = {"sd": 0.006, "cluster_sd": 0.002, "df": 12}
    doc = analyse_pairs(
        base, variant.subset(keep), fit, base_resamples=20, simulations=1000, seed_noise=noise
    )
    assert doc["n_pairs"] == 4 and doc["t_df"] == 12 and "taken as known" in doc["errors"]
    lo, hi = doc["models"]["offset"]["ci"]["offset"]
    assert lo < -0.06 < hi and doc["chosen"] == "offset"


def test_known_covariance_has_the_cluster_blocks():
    cov = known_covariance(np.array([0, 0, 1]), 0.1, 0.2)
    np.testing.assert_allclose(cov, [[0.05, 0.04, 0], [0.04, 0.05, 0], [0, 0, 0.05]])
