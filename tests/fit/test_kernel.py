"""The compiled objective and BFGS loop (fit.kernel): against an independent NumPy computation, thread-count
independence, the first-stage pruning of refits, and argument checks."""

from __future__ import annotations

import dataclasses

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopscale.fit import load_table
from loopscale.fit.fitter import Box, design_for, fit_law, fit_many, minimise_batch
from loopscale.fit.law import LOWER, UPPER, Design, huber, objective_and_gradient

from .conftest import simulated_grid

ROWS = simulated_grid(noise=0.01, seed=3)
TABLE = load_table(ROWS)
BASE = design_for(TABLE, plain=False)
N = len(BASE)
RNG = np.random.default_rng(11)
Z = RNG.normal(size=(2, N))  # covariates of two extra parameters


def numpy_objective(theta: np.ndarray, design: Design, weights: np.ndarray) -> float:
    """Σ wᵢ·Huber(log L̂ᵢ − log Lᵢ) written out in NumPy: φᵢ and log Eᵢ gain θ₆₊ⱼ·zⱼᵢ per extra row."""
    phi = np.full(N, theta[5])
    log_e = np.full(N, theta[2])
    for j, target in enumerate(design.ext_target[: len(theta) - 6]):
        if target == "phi":
            phi = phi + theta[6 + j] * design.ext_z[j]
        else:
            log_e = log_e + theta[6 + j] * design.ext_z[j] * np.log(2)
    n_eff = design.n_once + np.exp(phi * design.log_r) * design.n_rec
    term_d = np.exp(theta[1] - theta[4] * design.log_tokens)
    pred = np.exp(theta[0]) * n_eff ** -theta[3] + term_d + np.exp(log_e)
    resid = np.log(pred) - design.log_loss
    loss = 0.5 * resid**2 if np.isinf(design.delta) else huber(resid, design.delta)
    return float((weights * loss).sum())


EXTRAS = st.sampled_from([(), ("phi",), ("E",), ("phi", "E")])


@settings(max_examples=40, deadline=None)
@given(extras=EXTRAS, least_squares=st.booleans(), seed=st.integers(0, 10_000))
def test_objective_equals_numpy_and_its_gradient_central_differences(extras, least_squares, seed):
    rng = np.random.default_rng(seed)
    z = Z[: len(extras)] if extras else None
    design = dataclasses.replace(BASE, ext_z=z, ext_target=extras, delta=np.inf if least_squares else 1e-3)
    theta = np.concatenate([LOWER + (UPPER - LOWER) * rng.random(6), rng.uniform(-0.5, 0.5, len(extras))])
    theta[[3, 4]] = rng.uniform(0.05, 1.0, 2)  # exponents where the terms are not all ~0
    weights = rng.integers(0, 3, N).astype(float)  # a bootstrap-like weight vector, zeros included
    f, g = objective_and_gradient(theta[None], design, weights)
    assert f[0] == pytest.approx(numpy_objective(theta, design, weights), rel=1e-11, abs=1e-300)
    for k in range(len(theta)):
        h = 1e-6 * max(1.0, abs(theta[k]))
        up, down = theta.copy(), theta.copy()
        up[k] += h
        down[k] -= h
        numeric = (numpy_objective(up, design, weights) - numpy_objective(down, design, weights)) / (2 * h)
        assert g[0, k] == pytest.approx(numeric, rel=1e-4, abs=1e-9 * max(1.0, f[0]))


def test_minimise_does_not_depend_on_the_thread_count():
    """Each start's path is its own: one thread and two threads give the same bits."""
    starts = Box.for_form(None).starts(np.random.default_rng(0), 40)
    weights = np.random.default_rng(1).integers(0, 3, (40, N)).astype(float)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        x1, f1 = minimise_batch(BASE, starts, np.ones(6, bool), weights)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        x2, f2 = minimise_batch(BASE, starts, np.ones(6, bool), weights)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(f1, f2)


def test_pruned_refits_reach_the_unpruned_optimum():
    """A warm-started refit stops starts that sit 2x above its best after 10 steps; on bootstrap-like
    resamples it lands on the optimum of the same refit followed to the end and of a cold 100-start fit."""
    fit = fit_law(TABLE, restarts=60, seed=0)
    box, warm = fit.box, fit.theta
    weights = np.random.default_rng(4).multinomial(N, np.full(N, 1 / N), size=6).astype(float)
    kwargs = dict(extra_starts=warm, seeded=20, scipy_polish=False)
    pruned = fit_many(BASE, box, weights, 2, np.random.default_rng(0), **kwargs)
    full = fit_many(BASE, box, weights, 2, np.random.default_rng(0), prune=False, **kwargs)
    for i, (p, f) in enumerate(zip(pruned, full)):
        rng = np.random.default_rng(9)
        cold = fit_many(BASE, box, weights[i], 100, rng, scipy_polish=False, prune=False)[0]
        assert p.objective <= min(f.objective, cold.objective) * (1 + 1e-9)


def test_rows_of_the_wrong_shape_are_refused():
    theta = np.tile([3.0, 7.0, 0.5, 0.2, 0.35, 0.4], (3, 1))
    with pytest.raises(ValueError, match="weights"):
        objective_and_gradient(theta, BASE, np.ones((2, N)))
    with pytest.raises(ValueError, match="log_loss"):
        objective_and_gradient(theta, BASE, None, np.zeros(N + 1))
    with pytest.raises(ValueError, match="weights"):
        minimise_batch(BASE, theta, np.ones(6, bool), np.ones((4, N)))
