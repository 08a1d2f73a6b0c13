"""The sentences of ``loopscale price``'s report: the verdict that leads it and the pairs' errors."""

from __future__ import annotations

from loopscale.pairs.results import PairedEffects, PooledClusterSd, PriceResult
from loopscale.present.effect_text import effect_sentence


def verdict_line(name: str, e: PairedEffects, looked: str, errors: str) -> str:
    """The one verdict line of ``price`` and ``compare``: the arm's name, what its pairs name (with sizes
    in nats and intervals), how the pairs were looked at (``looked``), the intervals' level and the errors
    they read (``errors``)."""
    return f"{name}: {effect_sentence(e)}; {looked}, intervals at {100 * e.ci_level:.1f}%; {errors}"


def price_verdict(result: PriceResult) -> str:
    """The price's first line: what the pairs name at the last look, and how the looks ended."""
    e, last = result.effects, result.looks[-1]
    ended = {
        "decided": "stopped as soon as an effect was named",
        "precise": "stopped at the target precision of delta phi",
        "last look": "the plan's last look: its hour cap or its cells ran out",
    }[last.stop]
    looked = (
        f"{last.pairs} pairs, look {last.look} of {len(result.plan.counts)} ({ended}); tests at size "
        f"{last.size:.4f} of alpha {result.settings['alpha']} spent over the looks"
    )
    return verdict_line(result.recipe, e, looked, noise_text(e, last.cluster_sd))


def compare_verdict(name: str, e: PairedEffects) -> str:
    """``compare``'s verdict line, price's line for pairs read once: every pair at one look, each test at
    the full size (no looks to spend it over), the errors the pairs themselves give."""
    looked = f"{e.n_pairs} pairs, one look (compare: all pairs at once); tests at size {1 - e.ci_level:.4f}"
    err = e.errors
    if err.kind == "known":
        errors = (
            f"errors: pair sd {err.sd:.4f} nats and an (r, width) sd {err.cluster_sd:.4f} nats as given "
            f"({err.df} df)"
        )
    else:
        errors = f"errors: cluster-robust over the pairs' {e.clusters} (r, width) clusters, t on {e.t_df} df"
    return verdict_line(name, e, looked, errors)


def noise_text(e: PairedEffects, pooled: PooledClusterSd) -> str:
    """The pairs' errors as ``price`` took them: the base's seed noise and the (r, width) sd learnt from
    the pairs with the base law's misfit as a prior (``pairs.effects.pooled_cluster_sd``)."""
    err = e.errors
    pair = f"errors: pair sd {err.sd:.4f} nats (the base's seed noise, {err.df} df)"
    cluster = f"an (r, width) sd {pooled.cluster_sd:.4f} nats"
    if pooled.estimate is None:
        return (
            f"{pair} and {cluster}, the base law's own misfit (the pairs cannot estimate it yet: no (r, "
            "width) cluster holds two)"
        )
    return (
        f"{pair} and {cluster}: the pairs' own {pooled.estimate:.4f} on {pooled.df} df pooled with "
        f"the base law's misfit {pooled.prior_sd:.4f} as a prior worth {pooled.prior_df:g} clusters"
    )
