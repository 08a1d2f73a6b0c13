"""Variable-projection start points for refits (issue 26).

For fixed exponents (α, β, φ, and any extra columns of θ) the law is linear in its coefficients:
L̂ = E·u + A·x + B·z with u = 1 (or 2^(ext·z) for a loop-dependent floor), x = N_eff^(−α), z = D^(−β). On a
grid of the free exponents, ``seed_starts`` solves the weighted least-squares problem
min Σ wᵢ (Lᵢ − L̂ᵢ)² / Lᵢ² (relative errors in nats, ≈ the log-loss residuals the objective sees) for
(E, A, B) exactly, one 3×3 normal-equation system per (fit, grid point), projects the coefficients into the
fit box and keeps the ``count`` grid points with the lowest residual sum. They are start points only: the
fitter then descends the Huber objective from them, beside the warm start and the uniform random starts.
A held coefficient (``--fix``, ``--prior``) keeps its value; a held exponent is not gridded.
"""

from __future__ import annotations

import itertools

import numpy as np

from loopscale.fit.law import LOWER, PARAMS, PHI, UPPER, Design, _terms

#: Exponent grids (method §8.3 box: α, β ∈ [0, 2.5], φ ∈ [−3, 3]): 10 × 10 × 13 points.
EXPONENT_GRID = {
    PARAMS.index("alpha"): np.geomspace(0.02, 2.5, 10),
    PARAMS.index("beta"): np.geomspace(0.02, 2.5, 10),
    PHI: np.linspace(LOWER[PHI], UPPER[PHI], 13),
}
LINEAR = (PARAMS.index("e"), PARAMS.index("a"), PARAMS.index("b"))  # θ columns of (E, A, B), log scale
SEEDS_PER_REFIT = 20  # VarPro start points per refit (beside the warm start); 10 missed a basin once pruned
RIDGE = 1e-12  # relative ridge on the normal equations (collinear regressors at α ≈ β)


def seed_starts(
    design: Design,
    free: np.ndarray,
    base: np.ndarray,
    weights: np.ndarray,
    targets: np.ndarray | None,
    count: int,
    lower: np.ndarray = LOWER,
    upper: np.ndarray = UPPER,
) -> np.ndarray:
    """The ``count`` best variable-projection start points of each fit → [R, count, P] (the grid's points
    again from the best when it has fewer than ``count``: every exponent held).

    ``base`` [R, P]: each fit's values of the parameters the grid does not set (held ones, extra columns);
    ``weights`` [R, n]: run weights per fit; ``targets`` None or [R, n]: log losses per fit (nats, logged).
    """
    n_fits, p = base.shape
    gridded = [i for i in EXPONENT_GRID if free[i]]
    points = np.array(list(itertools.product(*(EXPONENT_GRID[i] for i in gridded))))  # [G, len(gridded)]
    linear = np.array(LINEAR)
    exponents = np.delete(base, linear, axis=1)  # α, β, φ and any extra columns
    shared = np.all(exponents == exponents[:1])  # the same in every fit: one set of regressors
    rows = base[:1] if shared else base
    theta = np.repeat(rows[:, None, :], len(points), axis=1)  # [R', G, P]
    theta[:, :, gridded] = points
    theta[:, :, linear] = 0.0  # a = b = e = 0: the terms are the regressors themselves
    term_n, term_d, term_e = _terms(theta.reshape(-1, p), design)
    shape = (len(rows), len(points), len(design))
    x = np.stack([np.broadcast_to(term_e, term_n.shape), term_n, term_d], axis=-1).reshape(*shape, 3)
    loss = np.exp(design.log_loss if targets is None else targets)
    loss = np.broadcast_to(loss, weights.shape)
    w = weights / loss**2
    # Σᵢ wᵢ·xᵢₐ·xᵢᵦ and Σᵢ wᵢ·Lᵢ·xᵢₐ as matrix products over the runs: [R, G, 3, 3] and [R, G, 3].
    products = (x[..., :, None] * x[..., None, :]).reshape(*shape, 9)
    normal = _run_sum(w, products).reshape(n_fits, len(points), 3, 3)
    rhs = _run_sum(w * loss, x)
    total = (w * loss**2).sum(axis=1)
    held = ~free[linear]
    system, target = normal.copy(), rhs.copy()
    system += RIDGE * np.trace(normal, axis1=2, axis2=3)[..., None, None] * np.eye(3)
    system[..., held, :] = np.eye(3)[held]
    target[..., held] = np.exp(base[:, linear[held]])[:, None, :]
    coef = np.linalg.solve(system, target[..., None])[..., 0]
    coef = np.clip(coef, np.exp(lower[linear]), np.exp(upper[linear]))
    rss = total[:, None] - 2 * (coef * rhs).sum(axis=-1) + np.einsum("rga,rgab,rgb->rg", coef, normal, coef)
    order = np.argsort(rss, axis=1)
    best = order[:, np.arange(count) % order.shape[1]]  # [R, count]; a grid smaller than count repeats
    starts = np.repeat(base[:, None, :], best.shape[1], axis=1)
    starts[:, :, gridded] = points[best]
    starts[:, :, linear] = np.log(np.take_along_axis(coef, best[..., None], axis=1))
    return starts


def _run_sum(w: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Σᵢ w[r, i]·values[r or 0, g, i, k] → [R, G, k] (one BLAS product when the grid is shared)."""
    if len(values) == 1:
        return np.tensordot(w, values[0], axes=([1], [1]))
    return np.matmul(w[:, None, None, :], values)[:, :, 0, :]
