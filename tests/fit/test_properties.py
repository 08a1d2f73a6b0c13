"""Invariants of the law and the fitter (hypothesis): unit changes of N and D, row order."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loopscale.fit import fit_law, load_table
from loopscale.fit.law import Design, objective_and_gradient

from .conftest import simulated_grid

ROWS = simulated_grid(noise=0.01, seed=21)
R1_ROWS = [r for r in ROWS if r["r"] == 1]
SCALE = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False)


def _design(rows, k_n=1.0, k_d=1.0):
    col = {k: np.array([r[k] for r in rows], float) for k in ("n_once", "n_rec", "r", "tokens", "loss")}
    return Design.build(col["n_once"] * k_n, col["n_rec"] * k_n, col["r"], col["tokens"] * k_d, col["loss"])


@settings(max_examples=60, deadline=None)
@given(
    k_n=SCALE,
    k_d=SCALE,
    a=st.floats(0, 10),
    b=st.floats(0, 10),
    e=st.floats(-1, 1),
    alpha=st.floats(0.05, 1),
    beta=st.floats(0.05, 1),
    phi=st.floats(-1, 2),
)
def test_objective_is_invariant_to_units_when_a_and_b_shift(k_n, k_d, a, b, e, alpha, beta, phi):
    """Measuring N in units of 1/k_n and D in 1/k_d is the same law with a + α·log k_n and b + β·log k_d."""
    theta = np.array([[a, b, e, alpha, beta, phi]])
    shifted = np.array([[a + alpha * math.log(k_n), b + beta * math.log(k_d), e, alpha, beta, phi]])
    f0, _ = objective_and_gradient(theta, _design(ROWS))
    f1, _ = objective_and_gradient(shifted, _design(ROWS, k_n, k_d))
    np.testing.assert_allclose(f1, f0, rtol=1e-9, atol=1e-15)


@settings(max_examples=5, deadline=None)
@given(k_n=st.floats(0.05, 20), k_d=st.floats(0.05, 20))
def test_fitted_a_and_b_shift_by_exponent_times_log_scale(k_n, k_d):
    base = fit_law(load_table(R1_ROWS), form="chinchilla", restarts=30, seed=0)
    scaled_rows = [
        {**r, "n_once": r["n_once"] * k_n, "n_rec": r["n_rec"] * k_n, "tokens": r["tokens"] * k_d}
        for r in R1_ROWS
    ]
    scaled = fit_law(load_table(scaled_rows), form="chinchilla", restarts=30, seed=0)
    assert math.isclose(scaled.objective, base.objective, rel_tol=1e-7)
    assert math.isclose(scaled.alpha, base.alpha, abs_tol=1e-5)
    assert math.isclose(scaled.beta, base.beta, abs_tol=1e-5)
    assert math.isclose(scaled.E, base.E, rel_tol=1e-5)
    assert math.isclose(
        scaled.coefficients["a"], base.coefficients["a"] + base.alpha * math.log(k_n), abs_tol=1e-4
    )
    assert math.isclose(
        scaled.coefficients["b"], base.coefficients["b"] + base.beta * math.log(k_d), abs_tol=1e-4
    )


@settings(max_examples=3, deadline=None)
@given(perm_seed=st.integers(0, 2**32 - 1))
def test_row_order_changes_nothing(perm_seed):
    order = np.random.default_rng(perm_seed).permutation(len(ROWS))
    base = fit_law(load_table(ROWS), restarts=30, seed=3)
    permuted = fit_law(load_table([ROWS[i] for i in order]), restarts=30, seed=3)
    assert math.isclose(permuted.objective, base.objective, rel_tol=1e-9)
    np.testing.assert_allclose(permuted.theta, base.theta, atol=1e-6)
    assert math.isclose(permuted.r2, base.r2, rel_tol=1e-9)
