"""Block bootstrap over (budget, r) cells (method §8.4) and the paired Δφ bootstrap between two tables.

A resample draws as many cells as the table has, with replacement, and pools their runs (duplicates
allowed); it is represented as a weight vector over runs (how often each run was drawn), which is exactly
the summed objective on the pooled runs. All resamples of one bootstrap are fitted in one batch.

Each refit starts from the full-data optimum (the warm start method §8.8 recommends) plus ``restarts`` fresh
uniform start points; ``benchmarks/fit_speed.py`` checks that this reaches the same refits as the full
500-random-start protocol. Resamples that cannot identify the law (one r for the joint law, one budget)
are redrawn. CIs are percentile intervals (2.5th–97.5th by default).
"""

from __future__ import annotations

import numpy as np

from loopscale.errors import UserError
from loopscale.fit.fitter import Box, LawFit, design_for, fit_law, fit_many
from loopscale.fit.law import PHI, theta_to_coefficients
from loopscale.fit.table import RunTable

CI_LEVEL = 0.95
BOOTSTRAP_RESTARTS = 20  # fresh random starts per refit, on top of the warm start
MAX_REDRAWS = 1000


def _draw_cells(rng: np.random.Generator, n_cells: int, valid, count: int) -> np.ndarray:
    """``count`` multisets of cell indices [count, n_cells] for which ``valid(cells)`` holds."""
    draws = np.empty((count, n_cells), dtype=int)
    for i in range(count):
        for _ in range(MAX_REDRAWS):
            cells = rng.integers(0, n_cells, n_cells)
            if valid(cells):
                draws[i] = cells
                break
        else:
            raise UserError(
                f"could not draw an identifiable bootstrap resample in {MAX_REDRAWS} tries; "
                "the table has too few (budget, r) cells"
            )
    return draws


def _validator(keys: list[tuple[float, int]], joint: bool):
    budgets = np.array([k[0] for k in keys])
    rs = np.array([k[1] for k in keys])
    has_budget = bool(np.all(np.isfinite(budgets)))

    def valid(cells: np.ndarray) -> bool:
        if joint and len(set(rs[cells].tolist())) < 2:
            return False
        return not has_budget or len(set(budgets[cells].tolist())) >= 2

    return valid


def cell_weights(cell_of_row: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Run weights [R, n]: how often each run's cell was drawn in each resample."""
    counts = np.stack([np.bincount(d, minlength=cell_of_row.max() + 1) for d in draws])
    return counts[:, cell_of_row].astype(float)


def resample_weights(table: RunTable, resamples: int, seed: int, joint: bool = True) -> np.ndarray:
    """The run weights [resamples, n] of ``bootstrap_fit``'s cell resamples for this ``seed``."""
    cell_of_row, keys = table.cells()
    draws = _draw_cells(np.random.default_rng(seed), len(keys), _validator(keys, joint), resamples)
    return cell_weights(cell_of_row, draws)


def percentile_ci(values: np.ndarray, level: float = CI_LEVEL) -> list[float]:
    tail = 50 * (1 - level)
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return [float(lo), float(hi)]


def refit_weighted(fit: LawFit, table: RunTable, weights: np.ndarray, restarts: int, seed: int) -> np.ndarray:
    """Refit ``fit``'s form on each weight row [R, n] of ``table`` → θ [R, 6], warm-started at ``fit``."""
    plain = fit.form == "chinchilla"
    box = Box.for_form(None if fit.form == "joint" else fit.theta[PHI], plain=plain)
    optima = fit_many(
        design_for(table, plain),
        box,
        weights,
        restarts,
        np.random.default_rng(seed),
        extra_starts=fit.theta,
        polish_top=3,
        scipy_polish=False,
    )
    return np.stack([o.theta for o in optima])


def coefficient_table(thetas: np.ndarray, plain: bool) -> dict[str, np.ndarray]:
    """θ rows → {E, A, B, alpha, beta[, phi], a, b, e}: one array of bootstrap values per coefficient."""
    rows = [theta_to_coefficients(t) for t in thetas]
    keys = [k for k in rows[0] if not (plain and k == "phi")]
    return {k: np.array([row[k] for row in rows]) for k in keys}


def bootstrap_fit(
    fit: LawFit,
    table: RunTable,
    resamples: int = 200,
    restarts: int = BOOTSTRAP_RESTARTS,
    seed: int = 0,
    level: float = CI_LEVEL,
) -> dict:
    """Cell block bootstrap of ``fit`` on ``table``.

    Returns {"samples": {coefficient: [R] values}, "ci": {coefficient: [lo, hi]}, "resamples", "cells", ...}.
    """
    if resamples < 2:
        raise UserError(f"bootstrap needs at least 2 resamples, got {resamples}")
    weights = resample_weights(table, resamples, seed, joint=fit.form == "joint")
    thetas = refit_weighted(fit, table, weights, restarts, seed + 1)
    samples = coefficient_table(thetas, fit.form == "chinchilla")
    return {
        "resamples": resamples,
        "cells": len(table.cells()[1]),
        "restarts_per_refit": restarts,
        "warm_start": True,
        "level": level,
        "samples": samples,
        "ci": {k: percentile_ci(v, level) for k, v in samples.items()},
    }


def _cell_key_rows(table: RunTable, keys: list[tuple[float, int]]) -> np.ndarray:
    index = {k: i for i, k in enumerate(keys)}
    return np.array([index[(float(b), int(r))] for b, r in zip(table.budget, table.r)])


def _r1_runs(table: RunTable) -> set[tuple[float, float, float]]:
    """(budget, N, loss) of the r = 1 runs: identical tuples in two tables are shared anchor runs."""
    return {
        (float(b), float(n), float(x))
        for b, n, x, r in zip(table.budget, table.n, table.loss, table.r)
        if r == 1
    }


def compare_phi(
    base: RunTable,
    variant: RunTable,
    *,
    resamples: int = 200,
    restarts: int = 500,
    bootstrap_restarts: int = BOOTSTRAP_RESTARTS,
    seed: int = 0,
    level: float = CI_LEVEL,
) -> dict:
    """Δφ = φ(variant) − φ(base) with a paired cell bootstrap (method §8.5 case studies).

    Both tables are restricted to the (budget, r) cells they share (the paper refits the baseline on the
    case study's four budgets). Each resample draws one multiset of shared cells and refits both tables on
    it, so shared r = 1 anchor runs enter both fits identically and their noise cancels in Δφ.
    """
    for name, t in (("base", base), ("variant", variant)):
        if not t.has_budget:
            raise UserError(f"{name} table needs a 'budget' column to pair (budget, r) cells")
    shared = sorted(
        {(float(b), int(r)) for b, r in zip(base.budget, base.r)}
        & {(float(b), int(r)) for b, r in zip(variant.budget, variant.r)}
    )
    if not shared:
        raise UserError("the two tables share no (budget, r) cell; Δφ needs common budgets and loop counts")
    shared_set = set(shared)

    def restrict(t: RunTable) -> RunTable:
        return t.subset(np.array([(float(b), int(r)) in shared_set for b, r in zip(t.budget, t.r)]))

    base, variant = restrict(base), restrict(variant)
    fits = {
        "base": fit_law(base, restarts=restarts, seed=seed),
        "variant": fit_law(variant, restarts=restarts, seed=seed),
    }
    rng = np.random.default_rng(seed)
    draws = _draw_cells(rng, len(shared), _validator(shared, joint=True), resamples)
    phis = {}
    for name, t in (("base", base), ("variant", variant)):
        weights = cell_weights(_cell_key_rows(t, shared), draws)
        phis[name] = refit_weighted(fits[name], t, weights, bootstrap_restarts, seed + 1)[:, PHI]
    delta = phis["variant"] - phis["base"]

    return {
        "cells": len(shared),
        "budgets": sorted({k[0] for k in shared}),
        "shared_r1_runs": len(_r1_runs(base) & _r1_runs(variant)),
        "base": fits["base"].to_dict(),
        "variant": fits["variant"].to_dict(),
        "delta_phi": fits["variant"].phi - fits["base"].phi,
        "ci": {
            "delta_phi": percentile_ci(delta, level),
            "base_phi": percentile_ci(phis["base"], level),
            "variant_phi": percentile_ci(phis["variant"], level),
        },
        "p_delta_below_zero": float(np.mean(delta < 0)),
        "resamples": resamples,
        "restarts_per_refit": bootstrap_restarts,
        "level": level,
    }
