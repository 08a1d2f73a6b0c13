"""Honest stopping for ``loopscale price``: a look after every batch of pairs, each at its share of α.

``price`` trains a recipe's seed-matched pairs in batches and re-reads them after each batch, stopping as
soon as the rule (``pairs.rule``) names an effect. Testing at the full size α at every look would
inflate false attribution with the number of looks (optional stopping). So the looks spend α: look k, at
information fraction t_k = n_k / n_max (pairs analysed over the most the plan may train), tests at

    size_k = α(t_k) − α(t_{k−1}),     α(t) = α·ln(1 + (e − 1)·t)     (Lan–DeMets, Pocock type),

and its printed intervals are at 1 − size_k. Whatever the dependence between looks, the chance that any look
names an effect the truth lacks is at most Σ size_k = α(t_K) ≤ α (a union bound; a boundary that used the
looks' correlation would be less conservative). The Pocock-type function spends α evenly enough that the
first look's size can be calibrated by simulation (``simulations_for``): an O'Brien–Fleming-type function
would give the first of four looks 4·10⁻⁵, a quantile no affordable simulation resolves, and would make an
early stop all but impossible, which is the point of pricing in an hour. Where the hour cap ends the plan
before t = 1, the α not yet spent is simply not used.

Stopping for precision (the interval's half-width reaching a target) reads the SE, not the estimate, and
does not spend α.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from loopscale.pairs.results import SequentialCalibration
from loopscale.pairs.rule import (
    TOKENS_ONLY,
    UNATTRIBUTED,
    Simulator,
    calibrate_rule,
    model_name,
    run_rule,
)


def spent(fraction: float, alpha: float) -> float:
    """α(t) = α·ln(1 + (e − 1)·t): the size spent by information fraction ``fraction`` ∈ [0, 1]."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"information fraction must be in [0, 1], got {fraction}")
    return alpha * math.log(1.0 + (math.e - 1.0) * fraction)


def look_sizes(counts: list[int], most: int, alpha: float) -> list[float]:
    """Each look's test size, for looks after ``counts`` pairs (increasing) of at most ``most``."""
    if any(b <= a for a, b in zip(counts, counts[1:])) or not counts or counts[-1] > most or counts[0] < 1:
        raise ValueError(f"look counts must increase within 1..{most}, got {counts}")
    levels = [spent(n / most, alpha) for n in counts]
    return [levels[0], *(b - a for a, b in zip(levels, levels[1:]))]


def look_counts(first: int, batch: int, most: int) -> list[int]:
    """Pairs analysed at each look: ``first``, then every ``batch`` more, the last at ``most``."""
    if first < 1 or batch < 1 or most < first:
        raise ValueError(f"need 1 <= first <= most and batch >= 1, got {first}, {batch}, {most}")
    counts = list(range(first, most, batch))
    return [*counts, most]


def simulations_for(size: float, least: int = 2000, tail: int = 40) -> int:
    """Simulated tables per null for a test of ``size``: at least ``tail`` beyond the critical value."""
    return max(least, math.ceil(tail / size))


def sequential_calibration(
    sim: Simulator, counts: list[int], sizes: list[float], available, fitted: dict, truth: dict, count: int,
    rng: np.random.Generator,
) -> SequentialCalibration:  # fmt: skip
    """The stopping rule in the loop, on ``count`` simulated sequences of pairs with ``truth`` {term: value}:
    each sequence is one draw of the errors of every planned pair (``sim`` holds all of them, in plan
    order); look k reads its first ``counts[k]`` pairs with the rule calibrated at ``sizes[k]`` (``fitted``:
    the null truths' coefficients) and the sequence stops at the first look that names a term."""
    change, pick = sim.tables(truth, count, rng)
    stopped = np.full(count, -1)
    chosen = np.full(count, "", dtype=object)
    wrong, disagree, covered = np.zeros(count, bool), np.zeros(count, bool), np.zeros(count, bool)
    true_terms = tuple(t for t in available if t in truth)
    for k, (n, size) in enumerate(zip(counts, sizes)):
        part = dataclasses.replace(
            sim, token_fit=sim.token_fit[:n], slope_fit=sim.slope_fit[:n], token_draws=sim.token_draws[:, :n],
            slope_draws=sim.slope_draws[:, :n], looped=sim.looped[:n],
            cluster=np.unique(sim.cluster[:n], return_inverse=True)[1],
            known=None if sim.known is None else sim.known[:n, :n],
        )  # fmt: skip
        rule = calibrate_rule(part, available, fitted, simulations_for(size), rng, size)
        run = run_rule(part, rule, change[:, :n], pick)
        names, fits = run.chosen, run.fits
        named = np.array([name not in (TOKENS_ONLY, UNATTRIBUTED) for name in names])
        ends = (stopped < 0) & (named | (k == len(counts) - 1))
        for m, (beta, se) in fits.items():
            crit = np.array([rule.term[m][t] for t in m])
            rows = ends & (names == model_name(m))
            disagree |= rows & (np.abs(beta) <= crit * se).any(axis=1)
            if any(t not in truth for t in m):
                wrong |= rows
            if m == true_terms:
                covered |= ends & (np.abs(beta - np.array([truth[t] for t in m])) <= crit * se).all(axis=1)
        stopped[ends], chosen[ends] = k, names[ends]
    return SequentialCalibration(
        stopped_at=tuple(float(np.mean(stopped == k)) for k in range(len(counts))),
        chosen={name: float(np.mean(chosen == name)) for name in sorted(set(chosen.tolist()))},
        wrong=float(wrong.mean()),
        disagreement=float(disagree.mean()),
        coverage=float(covered.mean()) if true_terms else None,
    )
