"""Honest stopping for ``loopscale price``: a look after every batch of pairs, all looks held to α together.

``price`` trains a recipe's seed-matched pairs in batches and re-reads them after each batch, stopping as
soon as the rule (``pairs.rule``) names an effect. Testing at the full size α at every look would inflate
false attribution with the number of looks (optional stopping). So look k, at information fraction
t_k = n_k / n_max (pairs analysed over the most the plan may train), holds every term of the rule to one
critical value of its studentised |t|, from a boundary family

    c_k = C·f(t_k),     f(t) = t^(-1/2)  ("obf", O'Brien–Fleming-like: strict early, near the one-look
                                          test at the last look)   or   f(t) = 1  ("pocock": constant),

with the F-ratio gate that matches c_k (``rule.matching_gate``), and prints the intervals its test inverts
at c_k (``rule.inverted_interval``: estimate ± c_k·SE for a constant, Fieller-type for Δφ).
The scale C is set by simulating whole sequences under each null truth of the plan (``rule.sequence_nulls``)
and bisecting on C so that the chance that the sequence stops at a look naming a term the truth lacks is
α less its Monte Carlo margin (``honest_target``) under the worst null truth; the same C must also keep
the chance that the true model's interval at the stop misses the truth (where the null truth has a term)
within that target, so the interval the looks end on covers at 1 − α with the stopping rule in the loop.
A sequence is one draw of the errors of every planned pair, read again as the pairs accumulate, so the
looks keep their real correlation (corr(Z_j, Z_k) = √(n_j/n_k)); a union bound over per-look sizes (the
rule before issue 49: the last of 10 looks at size 0.0012) ignores it and wastes most of α. A family is
scaled, not a per-look quantile simulated, so no look needs a tail of 10⁻⁵ resolved. The same simulated
statistics, under truths with an effect, give the plan's power (``analysis.price.plan_power``) and the
calibration with the stopping rule in the loop (benchmarks/price_calibration.py).

Stopping for precision (the interval's half-width reaching a target) reads the SE, not the estimate, and
can only end a sequence sooner: it names nothing the boundary did not allow.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from loopscale.pairs.results import Boundary, SequentialCalibration
from loopscale.pairs.rule import (
    TOKENS_ONLY,
    UNATTRIBUTED,
    Rule,
    RuleRun,
    Simulator,
    boundary_rule,
    model_name,
    submodels,
)

SHAPES = ("obf", "pocock")
MARGIN_Z = 1.645  # the boundary aims its worst null's simulated rate this many binomial SEs below α


def shape(fractions, kind: str) -> np.ndarray:
    """f(t_k) of the boundary family at information fractions ``fractions`` ∈ (0, 1]."""
    t = np.asarray(fractions, float)
    if kind not in SHAPES:
        raise ValueError(f"boundary shape must be one of {', '.join(SHAPES)}, got {kind!r}")
    if np.any(t <= 0) or np.any(t > 1):
        raise ValueError(f"information fractions must be in (0, 1], got {t.tolist()}")
    return t**-0.5 if kind == "obf" else np.ones_like(t)


def scale_boundary(
    crossing: Callable[[np.ndarray], float], fractions, kind: str, target: float, tol: float = 1e-3
) -> float:
    """The smallest scale C (to ``tol``) whose boundary C·f(t_k) has ``crossing(critical values) ≤ target``:
    bisection on a rate that falls as C grows (the simulated chance of any wrong name over the looks)."""
    f = shape(fractions, kind)
    lo, hi = 0.0, 1.0
    while crossing(hi * f) > target:
        lo, hi = hi, 2 * hi
        if hi > 1e3:
            raise ValueError(f"no boundary holds the crossing rate at {target}")
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if crossing(mid * f) <= target else (mid, hi)
    return hi


def honest_target(alpha: float, sequences: int) -> float:
    """α less ``MARGIN_Z`` binomial SEs of a rate α simulated on ``sequences`` sequences: a boundary scaled
    to this rate has a true rate below α unless its simulation erred by more than that (one-sided 95%)."""
    return alpha - MARGIN_Z * math.sqrt(alpha * (1 - alpha) / sequences)


def look_counts(first: int, batch: int, most: int) -> list[int]:
    """Pairs analysed at each look: ``first``, then every ``batch`` more, the last at ``most``."""
    if first < 1 or batch < 1 or most < first:
        raise ValueError(f"need 1 <= first <= most and batch >= 1, got {first}, {batch}, {most}")
    counts = list(range(first, most, batch))
    return [*counts, most]


def first_pairs(sim: Simulator, n: int) -> Simulator:
    """``sim`` restricted to its first ``n`` pairs (a look's pairs; plan order)."""
    return dataclasses.replace(
        sim, token_fit=sim.token_fit[:n], slope_fit=sim.slope_fit[:n], token_draws=sim.token_draws[:, :n],
        slope_draws=sim.slope_draws[:, :n], looped=sim.looped[:n],
        cluster=np.unique(sim.cluster[:n], return_inverse=True)[1],
        known=None if sim.known is None else sim.known[:n, :n],
    )  # fmt: skip


@dataclass(frozen=True)
class LookStatistics:
    """The rule's statistics on ``S`` simulated sequences under ``truth``, at every count of pairs in
    ``counts``: the F ratio [S], every submodel's (coefficients [S, k], test SEs SE₀ [S, k]) and how each SE
    moves with the hypothesised value (cross [S, k], scale [S, k]; ``rule.base_law_parts``) per count."""

    truth: dict[str, float]
    counts: tuple[int, ...]
    f_ratio: tuple[np.ndarray, ...]
    fits: tuple[dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]], ...]
    scales: tuple[dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]], ...]

    def run(self, look: int, rule: Rule) -> RuleRun:
        """Look ``look`` read with ``rule``: its chosen models, fits and intervals (``RuleRun.interval``)."""
        fits = self.fits[look]
        return RuleRun(rule.decide(self.f_ratio[look], fits), fits, self.scales[look])

    def at(self, counts) -> LookStatistics:
        """The statistics at a plan's look counts (a subset of ``counts``)."""
        idx = [self.counts.index(n) for n in counts]
        return LookStatistics(
            self.truth, tuple(counts), tuple(self.f_ratio[i] for i in idx), tuple(self.fits[i] for i in idx),
            tuple(self.scales[i] for i in idx),
        )  # fmt: skip


def simulate_looks(
    sim: Simulator, counts, available: tuple[str, ...], truths: list[dict[str, float]], count: int,
    rng: np.random.Generator,
) -> list[LookStatistics]:  # fmt: skip
    """``count`` sequences under each of ``truths`` {term: value}: each one draw of every pair ``sim`` holds
    (plan order) and of a base-law draw, read at each count in ``counts`` as ``price`` reads its looks (all
    truths' tables in one batch per count, so the draws' variance is summed once per count)."""
    drawn = [sim.tables(truth, count, rng) for truth in truths]
    change, pick = np.concatenate([c for c, _ in drawn]), np.concatenate([p for _, p in drawn])
    f_ratio, fits = [], []
    for n in counts:
        part = first_pairs(sim, n)
        part_change = change[:, :n]
        fits.append({m: part.estimates(m, part_change, pick) for m in submodels(available)})
        excess = part_change - part.token_draws[pick]
        f_ratio.append(part.any_excess(available, excess, part.slope_draws[pick]))
    rows = [slice(i * count, (i + 1) * count) for i in range(len(truths))]
    return [
        LookStatistics(
            dict(truth), tuple(counts), tuple(f[r] for f in f_ratio),
            tuple({m: (b[r], se[r]) for m, (b, se, _) in fit.items()} for fit in fits),
            tuple({m: (cross[r], scale[r]) for m, (_, _, (cross, scale)) in fit.items()} for fit in fits),
        )  # fmt: skip
        for truth, r in zip(truths, rows)
    ]


@dataclass(frozen=True)
class Sequences:
    """The stopping rule on simulated sequences (``run_sequences``), per sequence [S]: the look it stopped
    at (0-based), the model named there, whether that names a term the truth lacks (``wrong``), a named
    term whose printed interval holds 0 (``disagree``), the true model's printed intervals
    (``RuleRun.interval``) holding the truth (``covered``),
    and each available term named at the stop (``named``)."""

    stopped: np.ndarray
    chosen: np.ndarray
    wrong: np.ndarray
    disagree: np.ndarray
    covered: np.ndarray
    named: dict[str, np.ndarray]


def at_critical(available: tuple[str, ...], critical) -> list[Rule]:
    """Each look's rule at its boundary value ``critical[k]`` (``rule.boundary_rule``)."""
    return [boundary_rule(available, float(c)) for c in critical]


def run_sequences(stats: LookStatistics, rules: list[Rule]) -> Sequences:
    """Look k reads its pairs with ``rules[k]`` (``at_critical``, or any calibrated rule); a sequence stops
    at the first look that names a term, else at the last look."""
    truth, available = stats.truth, rules[0].available
    count, looks = len(stats.f_ratio[0]), len(stats.counts)
    stopped = np.full(count, -1)
    chosen = np.full(count, "", dtype=object)
    wrong, disagree, covered = (np.zeros(count, bool) for _ in range(3))
    named = {t: np.zeros(count, bool) for t in available}
    true_terms = tuple(t for t in available if t in truth)
    for k, rule in enumerate(rules):
        run = stats.run(k, rule)
        names = run.chosen
        ends = (stopped < 0) & (~np.isin(names, (TOKENS_ONLY, UNATTRIBUTED)) | (k == looks - 1))
        for m in stats.fits[k]:
            lo, hi = run.interval(rule, m)
            rows = ends & (names == model_name(m))
            disagree |= rows & ((lo <= 0) & (hi >= 0)).any(axis=1)
            wrong |= rows & any(t not in truth for t in m)
            for t in m:
                named[t] |= rows
            if m == true_terms:
                value = np.array([truth[t] for t in m])
                covered |= ends & ((lo <= value) & (value <= hi)).all(axis=1)
        stopped[ends], chosen[ends] = k, names[ends]
    return Sequences(stopped, chosen, wrong, disagree, covered, named)


def worst_error(nulls: list[LookStatistics], critical, available: tuple[str, ...]) -> float:
    """The largest share, over the null truths' sequences, that stop naming a term the truth lacks or, where
    the truth has a term, whose true model's interval at the stop misses it (1 − coverage)."""
    rules = at_critical(available, critical)
    runs = [run_sequences(s, rules) for s in nulls]
    misses = [float(1 - r.covered.mean()) if s.truth else 0.0 for s, r in zip(nulls, runs)]
    return max(max(float(r.wrong.mean()), miss) for r, miss in zip(runs, misses))


def scaled_boundary(
    nulls: list[LookStatistics], most: int, available: tuple[str, ...], alpha: float, kind: str
) -> Boundary:
    """The boundary of ``kind`` for looks at ``nulls[0].counts`` of at most ``most`` pairs, scaled on the
    null truths' simulated sequences (module docstring) → ``Boundary``."""
    counts = nulls[0].counts
    fractions = np.array(counts, float) / most
    sequences = len(nulls[0].f_ratio[0])
    target = honest_target(alpha, sequences)
    scale = scale_boundary(lambda c: worst_error(nulls, c, available), fractions, kind, target)
    critical = scale * shape(fractions, kind)
    runs = [run_sequences(s, at_critical(available, critical)) for s in nulls]
    spent = [max(float(np.mean(r.wrong & (r.stopped <= k))) for r in runs) for k in range(len(counts))]
    full = nulls[0].fits  # no effect: every term of the full model is null
    levels = [  # the Monte Carlo p-value's convention (1 + beyond) / (1 + S): never 100%, at worst low
        1 - (1 + float(np.max(np.sum(np.abs(f[available][0]) > c * f[available][1], axis=0))))
        / (1 + sequences)
        for f, c in zip(full, critical)
    ]
    return Boundary(
        shape=kind, alpha=alpha, target=target, sequences=sequences, scale=float(scale),
        critical=tuple(float(c) for c in critical), levels=tuple(levels), spent=tuple(spent),
    )  # fmt: skip


def summarise(runs: Sequences, looks: int, truth: dict[str, float]) -> SequentialCalibration:
    """The sequences' calibration record: where they stopped, what they named, the wrong and disagreeing
    shares and the true model's coverage at the stop (None for no effect)."""
    return SequentialCalibration(
        stopped_at=tuple(float(np.mean(runs.stopped == k)) for k in range(looks)),
        chosen={name: float(np.mean(runs.chosen == name)) for name in sorted(set(runs.chosen.tolist()))},
        wrong=float(runs.wrong.mean()),
        disagreement=float(runs.disagree.mean()),
        coverage=float(runs.covered.mean()) if truth else None,
    )
