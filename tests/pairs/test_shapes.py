"""The shape table's lack-of-fit test (``pairs.shapes.lack_of_fit``; issue 49, item 5): calibrated beyond the
(r, width) heterogeneity the rule models as a random effect, and still able to reject a wrong shape."""

from __future__ import annotations

import numpy as np

from loopscale.pairs.shapes import SHAPE_LEVEL, lack_of_fit

CLUSTERS = np.repeat(np.arange(12), [5, 5, 5, 2] * 3)  # the published base's 12 looped (r, width) clusters
GROWS = np.repeat(np.linspace(-1.0, 1.0, 12), [5, 5, 5, 2] * 3)  # a column growing from cluster to cluster
BENDS = GROWS**2  # another shape: a reference direction the first lacks


def _table(
    rng: np.random.Generator, effect: np.ndarray, cluster_sd: float, iid_sd: float = 0.015
) -> np.ndarray:
    return effect + rng.normal(0, cluster_sd, 12)[CLUSTERS] + rng.normal(0, iid_sd, len(CLUSTERS))


def _p(excess: np.ndarray, shape: np.ndarray) -> float:
    x = shape[:, None]
    reference = np.column_stack([np.ones_like(GROWS), GROWS, BENDS])
    return lack_of_fit(excess, x, reference, CLUSTERS, excess[None], x[None])


def test_a_true_shape_is_rejected_at_its_level_whatever_the_heterogeneity():
    """400 tables whose truth is the shape (0.05·GROWS) with (r, width) sd 0.015, as large as the iid sd: the
    test of issue 49 rejects at 1% in 0–2.5% of them (binomial sd 0.5%); the within-cluster F it replaced
    rejected in most (the heterogeneity read as lack of fit)."""
    rng = np.random.default_rng(0)
    ps = np.array([_p(_table(rng, 0.05 * GROWS, 0.015), GROWS) for _ in range(400)])
    assert np.mean(ps < SHAPE_LEVEL) <= 0.025
    assert 0.4 < np.mean(ps) < 0.6  # roughly uniform, not merely conservative


def test_a_wrong_shape_is_rejected():
    """The truth bends (0.08·BENDS) and the shape only grows: rejected in most tables at (r, width) sd 0.005;
    an offset is accepted for an offset truth."""
    rng = np.random.default_rng(1)
    wrong = [_p(_table(rng, 0.08 * BENDS, 0.005), GROWS) for _ in range(100)]
    assert np.mean(np.array(wrong) < SHAPE_LEVEL) > 0.8
    assert _p(_table(rng, np.full(len(CLUSTERS), -0.06), 0.005), np.ones_like(GROWS)) >= SHAPE_LEVEL


def test_the_base_laws_draws_widen_the_test():
    """A shape column known only up to the base law's error (its draws scatter it): the same table's p is
    larger with the draws than without them."""
    rng = np.random.default_rng(2)
    excess = _table(rng, 0.05 * GROWS + 0.01 * BENDS, 0.005)
    x = GROWS[:, None]
    reference = np.column_stack([np.ones_like(GROWS), GROWS, BENDS])
    draws = x[None] * (1 + rng.normal(0, 0.3, (50, 1, 1))) + 0.02 * BENDS[None, :, None] * rng.normal(
        0, 1, (50, 1, 1)
    )
    alone = lack_of_fit(excess, x, reference, CLUSTERS, excess[None], x[None])
    widened = lack_of_fit(excess, x, reference, CLUSTERS, np.broadcast_to(excess, (50, len(excess))), draws)
    assert widened > alone
