"""The sentences of ``loopscale price``'s report: the verdict that leads it and the pairs' errors."""

from __future__ import annotations

from collections.abc import Iterable

from loopscale.pairs.results import PairedEffects, PooledClusterSd, PriceResult
from loopscale.present.effect_text import detectable_text, effect_sentence


def price_verdict(result: PriceResult, power: Iterable[tuple[str, float, float]] = ()) -> str:
    """The price's first line: what the pairs name at the last look (where nothing is named, what they rule
    out and, given the plan's ``power`` rows (shape, effect, power; ``effect_text.detectable_text``), the
    smallest effect of each shape the plan names with 80% power), and how the looks ended."""
    e, last = result.effects, result.looks[-1]
    detectable = "" if e.chosen_terms else detectable_text(power)
    ended = {
        "decided": "stopped as soon as an effect was named",
        "precise": "stopped at the target precision of delta phi",
        "last look": "the plan's last look: its hour cap or its cells ran out",
    }[last.stop]
    return (
        f"{result.recipe}: {effect_sentence(e)}{'; ' + detectable if detectable else ''}; {last.pairs} "
        f"pairs, look {last.look} of "
        f"{len(result.plan.counts)} ({ended}); tests at size {last.size:.4f} of alpha "
        f"{result.settings['alpha']} spent over the looks, intervals at {100 * e.ci_level:.1f}%; "
        f"{noise_text(e, last.cluster_sd)}"
    )


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
