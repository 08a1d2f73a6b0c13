"""The sentences of ``loopscale price``'s report: the verdict that leads it and the pairs' errors."""

from __future__ import annotations

from pathlib import Path

from loopscale.pairs.results import (
    Boundary,
    PairedEffects,
    PlanPower,
    PlanSeparation,
    PooledClusterSd,
    PricedLook,
    PricePlan,
    PriceResult,
)
from loopscale.present.effect_text import detectable_text, effect_sentence

SHAPE_NAMES = {"obf": "O'Brien–Fleming-like", "pocock": "Pocock-like"}
TRUTH_NAMES = {
    "offset": "an offset",
    "delta_phi": "delta phi beyond an offset",
    "every": "an every-model change",
}
UNITS = {"offset": " nats", "delta_phi": "", "every": " nats"}


def verdict_line(name: str, e: PairedEffects, looked: str, errors: str, detectable: str = "") -> str:
    """The one verdict line of ``price`` and ``compare``: the arm's name, what its pairs name (with sizes
    in nats and intervals; where nothing is named, what they rule out and, given ``detectable``, what the
    plan names with 80% power), how the pairs were looked at (``looked``), the intervals' level and the
    errors they read (``errors``)."""
    said = f"{effect_sentence(e)}{'; ' + detectable if detectable else ''}"
    return f"{name}: {said}; {looked}, intervals at {100 * e.ci_level:.1f}%; {errors}"


def paired_with(result: PriceResult) -> str:
    """What the variant's runs were paired with: 'base', or the other arm's folder name ('laptop-parcae')."""
    return "base" if result.against is None else Path(result.against).name


def arm_label(result: PriceResult) -> str:
    """What a price names: its recipe, and the arm it was paired with where that is not the base
    ('parcae-zero against laptop-parcae')."""
    return result.recipe if result.against is None else f"{result.recipe} against {paired_with(result)}"


def look_line(look: PricedLook) -> str:
    """One look as ``price`` prints it when read: its pairs, critical value, chosen model and any stop."""
    stop = f" -> stop ({look.stop})" if look.stop else ""
    said = f"{look.pairs} pairs at critical value {look.critical:.3f}: {look.chosen}{stop}"
    return f"  look {look.look}: {said}"


def price_verdict(result: PriceResult) -> str:
    """The price's first line: what the pairs name at the last look (where nothing is named, what they rule
    out and, from the plan's power table where the price has one, the smallest effect of each shape the
    plan names with 80% power: what it could not reach), how the looks ended and at which boundary."""
    e, last = result.effects, result.looks[-1]
    detectable = "" if e.chosen_terms or result.power is None else power_text(result.power)
    ended = {
        "decided": "stopped as soon as an effect was named",
        "precise": "stopped at the target precision of delta phi",
        "last look": "the plan's last look: its hour cap or its cells ran out",
    }[last.stop]
    boundary = result.plan.boundary
    if boundary is None:  # a plan from before issue 49: α spent look by look, a union bound
        tests = f"tests at size {last.size:.4f} of alpha {result.settings['alpha']} spent over the looks"
    else:
        tests = (
            f"critical value {last.critical:.2f} at this look ({SHAPE_NAMES[boundary.shape]} boundary "
            f"holding alpha {boundary.alpha:g} over all looks)"
        )
    looked = f"{last.pairs} pairs, look {last.look} of {len(result.plan.counts)} ({ended}); {tests}"
    return verdict_line(arm_label(result), e, looked, noise_text(e, last.cluster_sd), detectable)


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


def looks_intro(plan: PricePlan, inverted: bool = True) -> str:
    """The sentence above the report's table of looks; ``inverted``: the looks' intervals are the values
    each test does not reject (``PairedEffects.inverted``), not estimate ± c·SE."""
    if plan.boundary is None:
        return (
            "Each look analyses the pairs trained so far at its share of alpha (Lan–DeMets, Pocock type), so "
            "looking after every batch does not inflate false attribution; a look names an effect only where "
            "its interval at 1 − size excludes 0."
        )
    named = "A look names a term only where its interval excludes 0."
    return f"{boundary_text(plan.boundary, plan.most, inverted)} {named}"


def boundary_text(b: Boundary, most: int, inverted: bool = True) -> str:
    """What the boundary is and how it was scaled; ``inverted`` as in ``looks_intro``."""
    form = f"{b.scale:.3f}·(n/{most})^(-1/2)" if b.shape == "obf" else f"{b.scale:.3f} at every look"
    intervals = "the values its test does not reject (estimate ± c·SE for a constant)" if inverted else (
        "estimate ± c·SE"
    )
    return (
        f"Every term's |t| at look k is held to one critical value, {SHAPE_NAMES[b.shape]}: c = {form}, "
        f"with intervals {intervals}. The scale is "
        f"set on {b.sequences} simulated sequences per null truth (the same pairs read again as they "
        "accumulate, the stopping rule in the loop) so that, under the worst null truth, the chance that the "
        "looks name a term the truth lacks, or end on an interval "
        f"that misses the truth, is at most {b.target:.3f} (alpha {b.alpha:g} less its Monte Carlo margin; "
        f"a wrong name: {b.spent[-1]:.3f})."
    )


def plan_lines(plan: PricePlan, power: PlanPower | None = None) -> list[str]:
    """The plan's looks: each look's pairs, critical value and interval level, then its power."""
    b = plan.boundary
    separated = [] if plan.separation is None else [separation_text(plan.separation)]
    lines = [boundary_text(b, plan.most), *separated]
    lines += [
        f"look {k + 1}: {n} pairs, critical value {c:.3f}, intervals at {100 * level:.2f}%, a wrong name by "
        f"this look {spent:.3f}"
        for k, (n, c, level, spent) in enumerate(zip(plan.counts, b.critical, b.levels, b.spent))
    ]
    return lines + ([] if power is None else power_lines(power))


def separation_text(s: PlanSeparation) -> str:
    """What the plan's pairs tell apart before any is trained: the cosine and condition number of the offset
    and ∂L/∂φ columns, Δφ's design SE beyond an offset, and each term's."""

    def se(v: float | None, unit: str) -> str:
        return "not estimable" if v is None else f"{v:.4f}{unit}"

    mix = f"{s.plain} r = 1 pair(s)" + (f", {s.extension} on base extension runs" if s.extension else "")
    return (
        f"separation ({mix}; cells chosen by {s.criterion}): offset vs dL/dphi cosine {s.cosine:.3f}, "
        f"condition number {s.condition:.2f}; design SE of delta phi beyond an offset {s.se_delta_phi:.4f}, "
        f"offset {se(s.se_offset, ' nats')}, every model {se(s.se_every, ' nats')}, width slope "
        f"{se(s.se_width, ' nats/decade')} (the pairs' known errors; the base law's uncertainty comes on top)"
    )


def dry_run_lines(recipe: str, base, workers: int, plan: PricePlan, power: PlanPower) -> list[str]:
    """``price --dry-run``'s output: the plan, its looks and boundary, its power and the hours it needs."""
    head = (
        f"loopscale price --dry-run: {recipe} against {base}: up to {plan.most} seed-matched pairs within "
        f"{power.hours:g} h on {workers} worker(s); nothing is trained"
    )
    return [head, *plan_lines(plan, power)]


def _size(term: str, size: float) -> str:
    return f"{size:+.2f}{UNITS[term]}"


def power_intro(power: PlanPower) -> str:
    """The sentence above the plan's power table."""
    return (
        f"What {power.pairs} pairs within {power.hours:g} h can decide ({power.sequences} simulated "
        "sequences per truth, the stopping rule and the boundary in the loop; a truth counts as named when "
        "the looks stop naming its term):"
    )


def power_table(power: PlanPower) -> tuple[list[str], list[list[str]]]:
    """The plan's power as a table: (headers, one row per truth: the truth, its power, what reaches the
    target power; the last column only where the plan's neighbours were searched)."""
    searched = power.most_pairs > power.pairs or any(row.pairs is not None for row in power.rows)
    rows = []
    for row in power.rows:
        truth = f"{TRUTH_NAMES[row.term]} of {_size(row.term, row.size)}"
        if row.named_as != row.term:
            truth += " (named as an offset: the plan trains no r = 1 pairs, so it cannot tell it from one)"
        if row.pairs is None:
            need = f"not within all {power.most_pairs} cells the plan may pair at ({power.most_hours:.2f} h)"
        else:
            need = f"{row.pairs} pairs ({row.hours:.2f} h)"
        rows.append([truth, f"{row.power:.2f}", *([need] if searched else [])])
    heads = ["truth", "power", *([f"{100 * power.target:.0f}% power needs"] if searched else [])]
    return heads, rows


def power_lines(power: PlanPower) -> list[str]:
    """What the plan can decide before it spends, as lines: each truth's power and the plan that reaches
    the target power."""
    heads, rows = power_table(power)
    return [power_intro(power)] + [
        f"  {row[0]}: power {row[1]}" + (f"; {heads[2]} {row[2]}" if len(row) > 2 else "") for row in rows
    ]


def power_text(power: PlanPower) -> str:
    """The smallest effect of each shape the plan names with its target power (``detectable_text``), from
    its power table: where a size falls short, what the price could not reach."""
    # a change the plan can only name as another term (every model, as an offset, without r = 1 pairs) is
    # not said to be named
    rows = [(row.term, row.size, row.power) for row in power.rows if row.named_as == row.term]
    return detectable_text(rows, "the plan", power.target)


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
