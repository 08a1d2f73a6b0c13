"""The sentences of a case study (``fit.case_study_results.CaseStudy``, compare.json): its verdict, the
Monte Carlo range of a CI end, the loss change, a per-budget refusal, a note, and the text of ``loopscale
compare``, verdict first."""

from __future__ import annotations

import numpy as np

from loopscale.fit.law import EXTENSIONS
from loopscale.fit.priors import NO_LAW_CHECK, fixed_lines
from loopscale.pairs.case_study_results import (
    CaseStudy,
    LossChange,
    Note,
    Refusal,
    SharedDelta,
    TrendDelta,
    deciding_end,
)
from loopscale.pairs.rule import REFERENCE_EFFECTS
from loopscale.present.effect_text import (
    delta_phi_story,
    detectable_text,
    effect_lines,
    effect_sentence,
    p_text,
)
from loopscale.present.law_check import law_headline
from loopscale.present.numbers import interval

REFUSALS = {
    "missing_runs": "needs r = 1, base looped and variant runs at this budget",
    "not_identified": "no more runs than the free parameters (A, B, φ, Δφ): not identified",
    "zero_width": "the bootstrap interval has zero width (resamples on a bound or a flat direction): no "
    "interval",
    "excludes_estimate": "the bootstrap interval excludes its own estimate (resamples on a bound or a flat "
    "direction): no interval",
}
NOTES = {
    "no_law_check": NO_LAW_CHECK,
    "no_pairs": "no matched-pair analysis: fewer than 4 runs of the variant have a base run at the same "
    "(budget, width, r, seed)",
    "setup_unchecked": "the arms' vocabulary, sequence length, template and data could not be checked: no "
    "sweep.yaml or runs/*/config.yaml next to a table; compare only arms that differ in the recipe alone",
}


def refusal_text(reason: Refusal | None) -> str:
    """Why Δφ (or its interval) is missing at a budget ('' when nothing is)."""
    return "" if reason is None else REFUSALS[reason]


def note_text(note: Note) -> str:
    return NOTES[note]


def trend_label(t: TrendDelta) -> str:
    """What the trend's change is a change of (its form's parameter)."""
    return f"change of {EXTENSIONS[t.form].label}"


def loss_change_text(lc: LossChange) -> str:
    """``loss_changes`` in one line: how many matched looped cells the variant lowers, the mean per r."""
    per_r = ", ".join(f"r = {r}: {v:+.4f}" for r, v in lc.mean_per_r.items())
    return (
        f"{lc.lower} of {lc.matched} matched (budget, width, r) cells lower with the variant; mean "
        f"{lc.mean:+.4f} nats ({per_r})"
    )


def _rejected_arms(doc: CaseStudy) -> str:
    """'the base and variant arms' whose law check rejects one constant φ ('' when none does)."""
    arms = doc.rejected_arms
    return "" if not arms else " and ".join(arms) + (" arms" if len(arms) > 1 else " arm")


def mc_text(d: SharedDelta) -> str:
    """Where the CI end nearest 0 could lie at this resample count (its Monte Carlo range) and whether the
    bootstrap was grown to settle it; '' without a bootstrap."""
    if d.ci_mc is None:
        return ""
    side, near = deciding_end(d.ci_mc, d.estimate)
    grown = (
        f", the bootstrap grown from {d.resamples_requested} to {d.resamples} resamples to settle it"
        if d.grown
        else ""
    )
    return f"Monte Carlo range of the {side} end {interval(near, signed=True)}{grown}"


def case_study_verdict(doc: CaseStudy) -> str:
    """The first line: whether the law holds on the arms, then what the recipe does: the effect model the
    matched pairs choose (``pairs.effects``) with its size, interval and tests, or, without pairs, what Δφ
    is (and which parameters were held: Δφ is conditional on them)."""
    rejected = _rejected_arms(doc)
    fixed = doc.settings.fixed
    given = f" (given {', '.join(fixed)} held fixed, not fitted)" if fixed else ""
    if doc.effects is not None:
        lead = f"the law check rejects one constant phi on the {rejected}; " if rejected else ""
        power = [("delta_phi_alone", float(size), p) for size, p in doc.power.items()]
        detectable = "" if doc.effects.chosen_terms else detectable_text(power, "this design")
        said = effect_sentence(doc.effects) + (f"; {detectable}" if detectable else "")
        return f"{lead}{doc.name}: {said}{given}"
    lead = (
        f"the law check rejects one constant phi on the {rejected}, so delta phi compares averages over "
        "budgets, not measurements: "
        if rejected
        else ""
    )
    return lead + _delta_phi_sentence(doc) + given


def _delta_phi_sentence(doc: CaseStudy) -> str:
    d, name = doc.delta_phi, doc.name
    rows = doc.estimated_budgets
    form = "" if d.form == "paper" else f" (under the {d.form} form the base's law check selects)"
    if d.resolved:
        signs = {np.sign(row.delta_phi) for row in rows}
        where = (
            "at every budget"
            if signs == {np.sign(d.estimate)}
            else "but not at every budget (per budget "
            + ", ".join(f"{row.delta_phi:+.2f}" for row in rows)
            + ")"
        )
        way = "raises" if d.estimate > 0 else "lowers"
        at = f", {d.resamples} resamples: settled beyond Monte Carlo error" if d.grown else ""
        size = f"{abs(d.estimate):.2f} {interval(d.ci, signed=True)} ({p_text(d.p)}{at})"
        return f"{name} {way} phi by {size}, {where}{form}"
    if not d.mc_settled:
        side, near = deciding_end(d.ci_mc, d.estimate)
        ci = interval(d.ci, signed=True)
        return (
            f"delta phi not resolved for {name}, on the edge: {d.estimate:+.3f} {ci} "
            f"({p_text(d.p)}): the interval's {side} end lies within Monte Carlo error of 0 even at "
            f"{d.resamples} resamples (range {interval(near, signed=True)}){form}"
        )
    p08 = doc.power.get(f"{REFERENCE_EFFECTS[0]:+.2f}")
    power_text = (
        ""
        if p08 is None
        else f"; this design's power for delta phi = {REFERENCE_EFFECTS[0]:+.2f} is {p08:.2f}"
    )
    ci = interval(d.ci, signed=True)
    said = f"delta phi not resolved for {name}: {d.estimate:+.3f} {ci} ({p_text(d.p)})"
    return f"{said}{form}{power_text}"


def format_compare(doc: CaseStudy) -> str:
    """The document as text, verdict first."""
    d, s, runs = doc.delta_phi, doc.delta_phi_separate, doc.runs
    lines = [case_study_verdict(doc), ""]
    for arm, check in (doc.law_check or {}).items():
        lines.append(f"law check, {arm} arm: {check.verdict}: {law_headline(check)}")
    lines.append(
        f"{runs.base} base runs and {runs.variant} variant runs at {len(runs.budgets)} budgets; "
        f"{runs.anchors} r = 1 anchors ({runs.shared_anchors} identical in both tables)"
    )
    lines += fixed_lines(doc.settings.fixed, doc.settings.prior)
    lines.append(
        f"shared nuisance ({d.form} form): delta phi = {d.estimate:+.4f} "
        + interval(d.ci, signed=True)
        + ("" if d.se is None else f", SE {d.se:.3f}, t({d.t_df}) {p_text(d.p)}; {mc_text(d)}")
        + f"; F-test F = {d.F_test.F:.2f}, {p_text(d.F_test.p)}; "
        f"phi (base) {d.phi:.3f}"
    )
    if doc.delta_phi_paper_form is not None:
        q = doc.delta_phi_paper_form
        lines.append(f"  under the paper's form: delta phi = {q.estimate:+.4f} (F-test {p_text(q.F_test.p)})")
    lines.append(
        f"separate fits (the paper's): phi {s.base_phi:.3f} -> {s.variant_phi:.3f}, delta "
        f"{s.estimate:+.4f} {interval(s.ci, signed=True)} (paper: 0.453 -> 0.380 truncated BPTT, 0.646 "
        "hyperconnections)"
    )
    lines.append("delta phi per budget (E, alpha, beta of the shared fit held):")
    for row in doc.per_budget:
        est = "refused" if row.delta_phi is None else f"{row.delta_phi:+.3f} {interval(row.ci, signed=True)}"
        why = f"; {refusal_text(row.reason)}" if row.reason else ""
        lines.append(f"  C = {row.budget:.3g}: {est}  ({row.n} runs{why})")
    if doc.trend is not None:
        t = doc.trend
        lines.append(f"{trend_label(t)}: {t.estimate:+.3f} (F = {t.F:.2f}, {p_text(t.p)})")
    if doc.loss_change.matched:
        lines.append(f"loss change (variant - base): {loss_change_text(doc.loss_change)}")
    shifts = doc.optimum_shift
    counts = {k: sum(1 for row in shifts if row.shift == k) for k in ("wider", "narrower", "not bracketed")}
    lines.append(
        f"iso-FLOP optimum: {counts['wider']} wider, {counts['narrower']} narrower, "
        f"{counts['not bracketed']} not bracketed of {len(shifts)} (budget, r) cells"
    )
    for arm in ("base", "variant"):
        gaps = getattr(doc.loop_tax, arm)
        top = [g for g in gaps if g.r == max((g.r for g in gaps), default=0)]
        text = ", ".join(f"{g.gap:+.3f} at {g.budget:.3g}" for g in top) or "no bracketed cells"
        lines.append(f"loop tax ({arm}, largest r): {text}")
    story = delta_phi_story(doc)
    if story:
        lines.append(story)
    if doc.effects is not None:
        lines += effect_lines(doc.effects)
    if doc.power:
        lines.append(
            "power of the pairs' rule to name delta phi alone (simulated on this design): "
            + ", ".join(f"delta phi = {k}: {v:.2f}" for k, v in doc.power.items())
        )
    lines += [f"note: {note_text(n)}" for n in doc.notes]
    return "\n".join(lines)
