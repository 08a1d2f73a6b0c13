"""The power of the law check's φ-trend test (``fit.power``) and the verdict it decides: a law check that
rejects nothing says "holds" only with power ≥ 0.8 against the drift a real looped sweep showed."""

from __future__ import annotations

import numpy as np
import pytest

from loopscale.fit import load_table
from loopscale.fit.fitter import LawFit
from loopscale.fit.law import law_loss, theta_to_coefficients
from loopscale.fit.lawcheck import check_law
from loopscale.fit.power import ENOUGH_POWER, REFERENCE_PHI_DRIFT, phi_trend_power
from loopscale.fit.results import TrendPower
from loopscale.present.law_check import law_headline, law_reasons, power_text

# A law in fit.law's parameterisation (a, b, e, alpha, beta, phi) near the laptop sweep's fit.
THETA = np.array([2.5, 6.0, 0.6, 0.2, 0.43, 0.4])
SIGMA = 0.012  # nats: the laptop sweep's seed noise


def _rows(budgets, rs=(1, 2, 4, 8), widths=(32, 64), noise=0.0, seed=0) -> list[dict]:
    """Runs of the 10-layer laptop template (N_once, N_rec per width and r, D = C / (6·N_unrolled)) with
    losses from THETA plus Gaussian noise (nats)."""
    rng = np.random.default_rng(seed)
    coef = theta_to_coefficients(THETA)
    rows = []
    for c in budgets:
        for d in widths:
            block = 12 * d * d
            for r in rs:
                n_once, n_rec = 2 * block, (8 // r) * block
                tokens = c / (6 * (n_once + r * n_rec))
                loss = float(law_loss(coef, n_once, n_rec, r, tokens)) + noise * rng.standard_normal()
                rows.append({"run": f"C{c:g}_d{d}_r{r}", "n_once": n_once, "n_rec": n_rec, "r": r,
                             "tokens": tokens, "budget": c, "loss": loss})  # fmt: skip
    return rows


def _table(budgets, **kwargs):
    return load_table(_rows(budgets, **kwargs))


def _fit(n_runs: int) -> LawFit:
    return LawFit("joint", THETA.copy(), 0.0, 0.0, 0.99, n_runs, 1, 1)


def test_power_grows_with_the_budget_span_and_is_the_level_without_a_drift():
    narrow, wide = _table([1.6e12, 1.8e12, 2e12]), _table([1e12, 1e13, 1e14])
    low = phi_trend_power(narrow, _fit(len(narrow)), SIGMA, 0.01 / 3).value
    high = phi_trend_power(wide, _fit(len(wide)), SIGMA, 0.01 / 3).value
    assert 0 < low < 0.05 < ENOUGH_POWER < high <= 1
    null = phi_trend_power(wide, _fit(len(wide)), SIGMA, 0.01, drift=1e-12).value
    assert null == pytest.approx(0.01, rel=1e-3)  # no drift: the test rejects at its level
    # more noise, less power
    noisy = phi_trend_power(wide, _fit(len(wide)), 4 * SIGMA, 0.01 / 3).value
    assert noisy < high


def test_no_power_without_a_degree_of_freedom_or_noise():
    seven = load_table(_rows([1e12, 1e13], rs=(1, 2))[:7])
    power = phi_trend_power(seven, _fit(7), SIGMA, 0.01)
    assert power.value is None and power.why == "no_df"
    text = power_text(power)
    assert text.startswith("no power to detect phi falling 0.40 per decade of compute (no degree")
    exact = _table([1e12, 1e13, 1e14])  # law-exact losses and no stated noise: σ from the residuals is 0
    power = phi_trend_power(exact, _fit(len(exact)), None, 0.01)
    assert power.value is None and power.why == "no_noise"


def test_power_text_names_the_reference_drift():
    power = TrendPower(test="phi-trend-c", drift_per_decade=REFERENCE_PHI_DRIFT, level=0.01, value=0.934)
    assert power_text(power) == "power 0.93 to detect phi falling 0.40 per decade of compute"


@pytest.mark.parametrize(
    "budgets, verdict", [([1.6e12, 1.8e12, 2e12], "inconclusive"), ([1e12, 1e13, 1e14], "holds")]
)
def test_check_law_says_holds_only_with_power(budgets, verdict):
    """The same law and noise: three budgets within 1.25× cannot see φ drift, three decades apart can."""
    table = _table(budgets, noise=SIGMA, seed=3)
    fit = _fit(len(table))
    check = check_law(table, fit, noise=SIGMA, resamples=0, restarts=2)
    headline = law_headline(check)
    assert check.verdict == verdict, headline
    assert check.power.test == "phi-trend-c" and check.power.level == check.threshold
    if verdict == "holds":
        assert headline.startswith("the law holds on these runs: none of")
        assert check.power.value >= ENOUGH_POWER
        assert "the phi-trend test had power 1.00 to detect" in headline
    else:
        assert headline.startswith("too few to reject one constant phi (none of")
        assert check.power.value < ENOUGH_POWER and law_reasons(check) == [headline]
