"""The test-time loop-count analysis (``pairs.test_time``): the counts, the relations, and the recipe's effect
against an independent computation (scipy's one-sample t test over the pairs' differences)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from loopscale.pairs.results import TestTimeDepth, TestTimePair, TestTimeRun
from loopscale.pairs.test_time import (
    analyse_test_time,
    eval_loop_counts,
    relation_loops,
)


@pytest.mark.parametrize(
    "r, counts", [(2, (1, 2, 4)), (3, (1, 3, 6)), (4, (1, 2, 4, 8)), (8, (1, 4, 8, 16)), (1, (1, 2))]
)
def test_the_counts_are_1_half_r_r_and_2r_without_repeats(r, counts):
    assert eval_loop_counts(r) == counts
    assert relation_loops("2r", r) == 2 * r and relation_loops("1", r) == 1
    assert relation_loops("r/2", r) == (r // 2 if r in (4, 8) else None)


def _run(r: int, losses: dict[int, float], name: str = "run") -> TestTimeRun:
    counts = eval_loop_counts(r)
    return TestTimeRun(
        schema=1,
        run=name,
        train_r=r,
        test_r=counts,
        val_loss=tuple(losses[t] for t in counts),
        val_tokens=1024,
        threads=1,
        weights="run",
        published_val_loss=losses[r],
    )


def _pair(r: int, base: dict[int, float], variant: dict[int, float], seed: int = 0) -> TestTimePair:
    return TestTimePair(1e12, 32, r, seed, _run(r, base), _run(r, variant))


def _random_pairs(rng: np.random.Generator, n_per_r: int = 5, extra_2r: float = -0.01) -> list[TestTimePair]:
    pairs = []
    for r in (2, 4, 8):
        for k in range(n_per_r):
            base = {t: 3.5 + 0.1 * (t < r) + rng.normal(0, 0.01) for t in eval_loop_counts(r)}
            variant = {
                t: v + rng.normal(0, 0.005) + (extra_2r if t == 2 * r else 0.0) for t, v in base.items()
            }
            pairs.append(_pair(r, base, variant, seed=k))
    return pairs


def test_the_effect_at_each_relation_is_scipy_s_t_interval_at_the_bonferroni_level():
    pairs = _random_pairs(np.random.default_rng(0))
    depth = analyse_test_time("sampled-depth", pairs)
    assert [g.relation for g in depth.gains] == ["1", "r/2", "2r"]
    assert depth.level == pytest.approx(1 - 0.05 / 3)
    for gain in depth.gains:
        having = [p for p in pairs if relation_loops(gain.relation, p.r) is not None]
        diffs = np.array(
            [
                (p.variant.at(relation_loops(gain.relation, p.r)) - p.variant.at(p.r))
                - (p.base.at(relation_loops(gain.relation, p.r)) - p.base.at(p.r))
                for p in having
            ]
        )
        test = stats.ttest_1samp(diffs, 0.0)
        ci = test.confidence_interval(depth.level)
        assert gain.pairs == len(having) == (10 if gain.relation == "r/2" else 15)
        assert gain.difference == pytest.approx(diffs.mean())
        assert gain.p == pytest.approx(test.pvalue)
        assert (gain.ci.low, gain.ci.high) == pytest.approx((ci.low, ci.high))
    two_r = depth.gains[-1]
    assert two_r.ci.high < 0  # the planted −0.01 nats at 2r is found
    assert TestTimeDepth.from_dict(depth.to_dict()) == depth


def test_the_curves_start_at_zero_at_the_trained_r_and_hold_each_arm_s_mean_change():
    pairs = _random_pairs(np.random.default_rng(1))
    depth = analyse_test_time("x", pairs)
    assert [c.train_r for c in depth.curves] == [2, 4, 8]
    for curve in depth.curves:
        group = [p for p in pairs if p.r == curve.train_r]
        at_r = curve.test_r.index(curve.train_r)
        assert curve.base_change[at_r] == curve.variant_change[at_r] == 0.0
        for j, t in enumerate(curve.test_r):
            assert curve.base_change[j] == pytest.approx(
                np.mean([p.base.at(t) - p.base.at(p.r) for p in group])
            )
        assert all(h > 0 for h, t in zip(curve.variant_half_width, curve.test_r) if t != curve.train_r)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), shift=st.floats(-1, 1))
def test_a_constant_shift_of_a_run_changes_nothing_and_swapping_the_arms_negates_the_effect(seed, shift):
    pairs = _random_pairs(np.random.default_rng(seed), n_per_r=3)
    depth = analyse_test_time("x", pairs)
    shifted = [
        TestTimePair(
            p.budget,
            p.width,
            p.r,
            p.seed,
            p.base,
            _run(p.r, {t: p.variant.at(t) + shift for t in p.variant.test_r}),
        )
        for p in pairs
    ]
    swapped = [TestTimePair(p.budget, p.width, p.r, p.seed, p.variant, p.base) for p in pairs]
    for a, b, c in zip(
        depth.gains, analyse_test_time("x", shifted).gains, analyse_test_time("x", swapped).gains
    ):
        assert b.difference == pytest.approx(a.difference, abs=1e-9)
        assert c.difference == pytest.approx(-a.difference, abs=1e-12) and c.p == pytest.approx(a.p)


def test_one_pair_leaves_the_interval_open_and_names_nothing():
    pair = _pair(4, {1: 4.0, 2: 3.6, 4: 3.5, 8: 3.5}, {1: 3.8, 2: 3.55, 4: 3.5, 8: 3.45})
    depth = analyse_test_time("x", [pair])
    assert all(g.ci.low is None and g.ci.high is None and g.p == 1.0 for g in depth.gains)
    assert TestTimeDepth.from_dict(depth.to_dict()) == depth


def test_a_pair_of_runs_trained_at_another_r_is_refused():
    with pytest.raises(ValueError, match="trained at r"):
        analyse_test_time(
            "x", [TestTimePair(1e12, 32, 4, 0, _run(2, {1: 1, 2: 1, 4: 1}), _run(2, {1: 1, 2: 1, 4: 1}))]
        )


def test_the_sentence_names_a_difference_only_where_its_interval_excludes_0_and_the_figure_draws(tmp_path):
    from loopscale.present.test_time import TestTimeDisplay, depth_lines, gain_sentence

    depth = analyse_test_time("sampled-depth", _random_pairs(np.random.default_rng(0)))
    named = [g for g in depth.gains if g.ci.high < 0 or g.ci.low > 0]
    assert [g.relation for g in named] == ["2r"]
    assert "change lies 0.0" in gain_sentence(
        named[0], "sampled-depth"
    ) and "below its base pairs'" in gain_sentence(named[0], "sampled-depth")
    for gain in depth.gains:
        if gain not in named:
            assert "no difference named" in gain_sentence(gain, "sampled-depth")
    lines = depth_lines(depth)
    assert len(lines) == 4 and "98.3%" in lines[-1] and "Bonferroni" in lines[-1]
    png = TestTimeDisplay.from_result(depth).plot().save(tmp_path / "loss_by_test_time_r")
    assert png.is_file() and png.with_suffix(".svg").is_file()
