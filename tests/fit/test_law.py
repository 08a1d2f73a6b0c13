"""The objective, its analytic gradient and the law's predictions (method §8.2, V5)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loopscale.fit.law import LOWER, UPPER, Design, huber, law_loss, objective_and_gradient
from loopscale.paper import JOINT_FIT

from .conftest import simulated_grid


def _design(noise=0.01):
    runs = simulated_grid(noise=noise, seed=5)
    cols = {k: np.array([r[k] for r in runs]) for k in ("n_once", "n_rec", "r", "tokens", "loss")}
    return Design.build(
        **{
            "n_once": cols["n_once"],
            "n_rec": cols["n_rec"],
            "r": cols["r"],
            "tokens": cols["tokens"],
            "loss": cols["loss"],
        }
    ), cols


def test_objective_matches_a_plain_loop_over_runs():
    design, cols = _design()
    theta = np.array([3.4, 6.7, 0.45, 0.21, 0.36, 0.5])
    expected = 0.0
    for i in range(len(cols["loss"])):
        n_eff = cols["n_once"][i] + cols["r"][i] ** theta[5] * cols["n_rec"][i]
        pred = math.log(
            math.exp(theta[0]) * n_eff ** -theta[3]
            + math.exp(theta[1]) * cols["tokens"][i] ** -theta[4]
            + math.exp(theta[2])
        )
        x = pred - math.log(cols["loss"][i])
        expected += 0.5 * x * x if abs(x) <= 1e-3 else 1e-3 * (abs(x) - 0.5e-3)
    f, _ = objective_and_gradient(theta[None], design)
    assert f[0] == pytest.approx(expected, rel=1e-12)


def test_huber_pieces():
    assert huber(np.array([0.0005]))[0] == pytest.approx(0.5 * 0.0005**2)
    assert huber(np.array([-0.01]))[0] == pytest.approx(1e-3 * (0.01 - 0.5e-3))


def test_gradient_matches_central_differences():
    design, _ = _design()
    rng = np.random.default_rng(0)
    thetas = LOWER + (UPPER - LOWER) * rng.random((6, 6))
    thetas[0] = [3.3, 6.8, 0.45, 0.2, 0.37, 0.46]  # near the optimum, residuals inside the Huber kink
    f, g = objective_and_gradient(thetas, design)
    for k in range(6):
        h = 1e-6 * np.maximum(1.0, np.abs(thetas[:, k]))
        up, down = thetas.copy(), thetas.copy()
        up[:, k] += h
        down[:, k] -= h
        numeric = (objective_and_gradient(up, design)[0] - objective_and_gradient(down, design)[0]) / (2 * h)
        np.testing.assert_allclose(g[:, k], numeric, rtol=1e-5, atol=1e-9 * np.maximum(1, np.abs(f)).max())


def test_weights_equal_duplicated_runs():
    design, cols = _design()
    theta = np.array([[3.0, 7.0, 0.5, 0.2, 0.35, 0.4]])
    weights = np.zeros(len(design))
    weights[[0, 3, 3, 7]] = 0
    weights[0], weights[3], weights[7] = 1, 2, 3
    picks = [0, 3, 3, 7, 7, 7]
    dup = Design.build(
        cols["n_once"][picks],
        cols["n_rec"][picks],
        cols["r"][picks],
        cols["tokens"][picks],
        cols["loss"][picks],
    )
    fw, gw = objective_and_gradient(theta, design, weights)
    fd, gd = objective_and_gradient(theta, dup)
    np.testing.assert_allclose(fw, fd, rtol=1e-13)
    np.testing.assert_allclose(gw, gd, rtol=1e-12)


# V5: cells (C, s, r) → (N_eff, A·N_eff^-α, B·D^-β, L̂) with the paper split.
V5 = [
    (4.64e17, 6, 1, 3.5406e7, 0.8780, 0.4445, 2.8903),
    (4.64e17, 6, 8, 1.7044e7, 1.0157, 0.4494, 3.0328),
    (1e18, 10, 4, 5.8374e7, 0.7948, 0.4483, 2.8108),
    (2.15e18, 12, 2, 1.0779e8, 0.7033, 0.3751, 2.6462),
    (4.64e18, 16, 2, 1.9162e8, 0.6272, 0.3367, 2.5316),
    (4.64e18, 20, 8, 1.8931e8, 0.6287, 0.3926, 2.5891),
    (1e19, 20, 1, 3.9327e8, 0.5435, 0.2907, 2.4019),
    (1e19, 24, 4, 3.3618e8, 0.5607, 0.3300, 2.4584),
    (2.15e19, 28, 4, 4.5757e8, 0.5273, 0.2754, 2.3704),
    (2.15e19, 34, 8, 5.4707e8, 0.5089, 0.3165, 2.3931),
]


@pytest.mark.parametrize("budget,s,r,n_eff,n_term,d_term,loss", V5)
def test_published_law_predictions_v5(budget, s, r, n_eff, n_term, d_term, loss):
    run = next(x for x in simulated_grid() if x["budget"] == budget and x["width"] == 64 * s and x["r"] == r)
    phi = JOINT_FIT["phi"]
    got_n_eff = run["n_once"] + r**phi * run["n_rec"]
    assert got_n_eff == pytest.approx(n_eff, rel=5e-5)
    assert JOINT_FIT["A"] * got_n_eff ** -JOINT_FIT["alpha"] == pytest.approx(n_term, abs=5e-5)
    assert JOINT_FIT["B"] * run["tokens"] ** -JOINT_FIT["beta"] == pytest.approx(d_term, abs=5e-5)
    assert float(law_loss(JOINT_FIT, run["n_once"], run["n_rec"], r, run["tokens"])) == pytest.approx(
        loss, abs=5e-5
    )
