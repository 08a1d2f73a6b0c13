"""Loops at test time: does a recipe's model gain more than its base pair's from loop counts it was not
trained at? (issue 41: a Huginn-style claim is about more loops at test time.)

Every looped run of a priced arm, and its seed-matched base run, is evaluated on its own validation tokens
at test-time loop counts {1, r/2, r, 2r} (``eval.test_time``). For one pair and one test-time count t the
*change* is L(t) − L(r) in nats/token; the recipe's effect at t is the variant's change minus the base's.
Each relation ("1", "r/2", "2r") pools the pairs that have it and gets a t interval over pairs, at a level
Bonferroni-adjusted over the relations so that naming one is a 95% statement for the arm.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

from loopscale.fit.results import ConfidenceInterval
from loopscale.pairs.results import (
    TEST_TIME_SCHEMA,
    Relation,
    TestTimeCurve,
    TestTimeDepth,
    TestTimeGain,
    TestTimePair,
    TestTimeRun,
)

TEST_TIME_FILE = "test_time.json"  # a run's evaluations (TestTimeRun) or an arm's summary (TestTimeDepth)
RELATIONS: tuple[Relation, ...] = ("1", "r/2", "2r")
FAMILY_LEVEL = 0.95


def eval_loop_counts(train_r: int) -> tuple[int, ...]:
    """{1, r/2, r, 2r} in increasing order, without repeats (r/2 only where it is a whole count above 1)."""
    half = (train_r // 2,) if train_r % 2 == 0 and train_r // 2 > 1 else ()
    return tuple(sorted({1, *half, train_r, 2 * train_r}))


def relation_loops(relation: Relation, train_r: int) -> int | None:
    """The test-time loop count a relation names for a run trained at ``train_r`` (None: it has none)."""
    if relation == "1":
        return 1
    if relation == "2r":
        return 2 * train_r
    return train_r // 2 if train_r % 2 == 0 and train_r // 2 > 1 else None


def _mean_interval(values: np.ndarray, level: float) -> tuple[float, float, float]:
    """(mean, half-width of the t interval at ``level``, two-sided p of a zero mean); n = 1 gives an
    unbounded half-width and p = 1: one pair says nothing about its spread."""
    n, mean = len(values), float(values.mean())
    if n < 2:
        return mean, float("inf"), 1.0
    se = float(values.std(ddof=1)) / np.sqrt(n)
    if se == 0:
        return mean, 0.0, 0.0 if mean != 0 else 1.0
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return mean, half, float(2 * stats.t.sf(abs(mean) / se, n - 1))


def _changes(run: TestTimeRun, loops: Sequence[int]) -> np.ndarray:
    return np.array([run.at(t) - run.at(run.train_r) for t in loops])


def analyse_test_time(recipe: str, pairs: Sequence[TestTimePair]) -> TestTimeDepth:
    """The gains at every relation some pair has and one curve per trained r (module docstring)."""
    for p in pairs:
        if p.base.train_r != p.r or p.variant.train_r != p.r:
            raise ValueError(
                f"pair at r = {p.r} holds runs trained at r = {p.base.train_r}, {p.variant.train_r}"
            )
    present = [rel for rel in RELATIONS if any(relation_loops(rel, p.r) is not None for p in pairs)]
    level = 1 - (1 - FAMILY_LEVEL) / max(len(present), 1)
    gains = []
    for rel in present:
        having = [p for p in pairs if relation_loops(rel, p.r) is not None]
        base = np.array([_changes(p.base, [relation_loops(rel, p.r)])[0] for p in having])
        variant = np.array([_changes(p.variant, [relation_loops(rel, p.r)])[0] for p in having])
        mean, half, p_value = _mean_interval(variant - base, level)
        gains.append(
            TestTimeGain(
                relation=rel,
                pairs=len(having),
                base_change=float(base.mean()),
                variant_change=float(variant.mean()),
                difference=mean,
                # one pair leaves the interval open (None ends, as JSON keeps them)
                ci=ConfidenceInterval(
                    *((None, None) if np.isinf(half) else (mean - half, mean + half)), level, "t over pairs"
                ),
                p=p_value,
            )
        )
    curves = []
    for r in sorted({p.r for p in pairs}):
        group = [p for p in pairs if p.r == r]
        loops = eval_loop_counts(r)
        base = np.array([_changes(p.base, loops) for p in group])
        variant = np.array([_changes(p.variant, loops) for p in group])
        columns = [
            [_mean_interval(arm[:, j], FAMILY_LEVEL) for j in range(len(loops))] for arm in (base, variant)
        ]
        curves.append(
            TestTimeCurve(
                train_r=r,
                pairs=len(group),
                test_r=loops,
                base_change=tuple(c[0] for c in columns[0]),
                variant_change=tuple(c[0] for c in columns[1]),
                base_half_width=tuple(0.0 if len(group) < 2 else c[1] for c in columns[0]),
                variant_half_width=tuple(0.0 if len(group) < 2 else c[1] for c in columns[1]),
            )
        )
    gap = max((run.reproduction_gap for p in pairs for run in (p.base, p.variant)), default=0.0)
    return TestTimeDepth(
        schema=TEST_TIME_SCHEMA,
        recipe=recipe,
        pairs=tuple(pairs),
        level=level,
        gains=tuple(gains),
        curves=tuple(curves),
        largest_reproduction_gap=gap,
    )
