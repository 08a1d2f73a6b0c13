"""The effect models' document in words (``pairs.effects.analyse_pairs``; the compare and price verdicts): one
function per sentence, each reading the typed numbers the analysis returned and computing nothing new."""

from __future__ import annotations

import math

import numpy as np

from loopscale.pairs.case_study_results import CaseStudy
from loopscale.pairs.results import ModelFit, Pair, PairedEffects
from loopscale.present.numbers import interval

# An excess-beyond-tokens p below this, though above the test's size, is not named and not called absent
SUGGESTIVE = 0.05


def p_text(p) -> str:
    return "p n/a" if p is None or not math.isfinite(p) else (f"p = {p:.2g}" if p >= 1e-4 else "p < 1e-4")


def _unbounded(m: ModelFit, t: str) -> str:
    """'' where term ``t``'s interval in ``m`` is bounded, else what its open ends mean."""
    low, high = m.open_ends(t)
    beside = " beside an offset" if "offset" in m.terms else ""
    if low and high:
        return f" (unbounded: not identified{beside} by these pairs)"
    side = "below" if low else "above" if high else ""
    return f" (unbounded {side}: the pairs bound it on one side{beside})" if side else ""


def _ci(m: ModelFit, t: str) -> str:
    """Term ``t``'s interval in ``m``, its open ends named (Δφ's box edge is no bound)."""
    return interval(m.ci[t], signed=True, open_ends=m.open_ends(t)) + _unbounded(m, t)


def _term(m: ModelFit, t: str, unit: str = "") -> str:
    return f"{m.estimate[t]:+.3f}{unit} {_ci(m, t)}"


def _tests_text(e: PairedEffects) -> str:
    """The rule's tests in one parenthesis: excess beyond tokens, then each term beyond the others."""
    labels = {"every": "every model", "offset": "an offset beyond delta phi", "delta_phi": "delta phi beyond "
              "an offset"}  # fmt: skip
    if "delta_phi" not in e.available:
        labels["offset"] = "looped models beyond every model" if "every" in e.available else "looped models"
    parts = [f"excess beyond tokens: {p_text(e.tests['any'].p)}"]
    parts += [f"{labels[t]}: {p_text(e.tests[t].p)}" for t in e.available]
    return "(" + "; ".join(parts) + ")"


def _width_profile(e: PairedEffects, looped: bool) -> str:
    """'-0.026 at d = 32 to -0.102 at d = 80': the mean loss change at the smallest and largest width."""
    rows = [row for row in e.per_width if row.looped == looped]
    lo, hi = rows[0], rows[-1]
    return f"{lo.change:+.3f} at d = {lo.width:.0f} to {hi.change:+.3f} at d = {hi.width:.0f}"


def _trend_text(e: PairedEffects) -> str:
    return f"{e.trend.slope:+.3f} nats per decade of width {interval(e.trend.ci, signed=True)}"


def _not_separable(e: PairedEffects) -> str:
    sep = e.separability
    why = (
        f"one looped r ({sep.looped_r[0]})"
        if sep.reason == "one looped r"
        else f"their columns' cosine {sep.cosine:.4f} > {sep.bound}"
    )
    return (
        f"an offset and a change of phi are not separable on this design ({why}): `loopscale design --reuse` "
        "picks runs at other loop counts that would separate them"
    )


# Where each term's ruled-out range comes from when no term is named: the model that prices that shape as the
# plan's power table does. An offset or an every-model change: its model alone (the range a constant may
# have were it all the recipe does). Δφ: the offset + Δφ model, Δφ beyond whatever offset the pairs allow
# (the claim that holds whatever looped models' constant does); beside it the Δφ-only model's narrower range,
# were a change of φ all the recipe does. Every range is the values the test of that term in that model
# rejects at its size (estimate ± c·SE for a constant), so "ruled out" at 1 − size; an end at Δφ's box
# (``ModelFit.open_ends``) rules out nothing on its side.
RULED_OUT_FROM = {"delta_phi": "offset + delta phi", "offset": "offset", "every": "every model"}
ALONE = {"delta_phi": "delta phi"}  # the narrower range beside Δφ's


def _outside(m: ModelFit, term: str, unit: str = "") -> str | None:
    """'below -0.053 or above +0.128 (estimate +0.037)': the values a term's interval in ``m`` excludes
    (an open end excludes nothing on its side; None where both are open)."""
    lo, hi = m.ci[term]
    low, high = m.open_ends(term)
    sides = ([] if low else [f"below {lo:+.3f}"]) + ([] if high else [f"above {hi:+.3f}"])
    return f"{' or '.join(sides)}{unit} (estimate {m.estimate[term]:+.3f})" if sides else None


def ruled_out_text(e: PairedEffects) -> str:
    """What the pairs rule out where the rule names no term, at the level of its tests: for each available
    term, the values outside its interval in the model ``RULED_OUT_FROM`` names ('at the level of its tests
    (99.9%) the pairs rule out delta phi below -0.169 or above +0.259 (estimate +0.045) beyond an offset
    and below -0.053 or above +0.128 (estimate +0.037) were it the only change, and an offset on looped
    models below -0.025 or above +0.012 nats (estimate -0.007)'); where such an interval excludes 0 though
    nothing is named, says so and why. Reads the intervals ``analyse_pairs`` recorded; computes none."""

    def ci(term: str, model: dict = RULED_OUT_FROM) -> Pair:
        return e.models[model[term]].ci[term]

    def said(term: str) -> str | None:
        beyond = _outside(e.models[RULED_OUT_FROM[term]], term, "" if term == "delta_phi" else " nats")
        if term == "delta_phi":
            alone = _outside(e.models[ALONE[term]], term)
            told = ([f"{beyond} beyond an offset"] if beyond else []) + (
                [f"{alone} were it the only change"] if alone else []
            )
            return f"delta phi {' and '.join(told)}" if told else None
        scope = "an offset on looped models" if term == "offset" else "a change of every model"
        return f"{scope} {beyond}" if beyond else None

    parts = [v for v in (said(t) for t in ("delta_phi", "offset", "every") if t in e.available) if v]
    level = f"at the level of its tests ({100 * e.ci_level:.3g}%)"
    text = f"{level} the pairs rule out " + (
        f"{', '.join(parts[:-1])}, and {parts[-1]}" if len(parts) > 1 else parts[0]
    ) if parts else f"{level} the pairs rule out no value of any term"
    phi = e.models[RULED_OUT_FROM["delta_phi"]] if "delta_phi" in e.available else None
    if phi is not None and all(phi.open_ends("delta_phi")):
        text += (f"; delta phi is not identified beside an offset by these pairs (its interval is unbounded, "
                 f"estimate {phi.estimate['delta_phi']:+.3f})")  # fmt: skip
    names = {
        "delta_phi": "delta phi beyond an offset",
        "offset": "the offset",
        "every": "an every-model change",
    }
    stated = [(names[t], ci(t)) for t in e.available] + (
        [("delta phi alone", ci("delta_phi", ALONE))] if "delta_phi" in e.available else []
    )
    apart = [name for name, (lo, hi) in stated if lo > 0 or hi < 0]
    if not apart:
        return text
    # nothing named: either the excess beyond tokens is not named, or it is and the terms are collinear on
    # this design, so that each fits alone but beside the others no term's test rejects 0
    why = (
        "the rule names a term only once the excess beyond tokens is named"
        if e.chosen == "tokens only"
        else "the excess is named, but beside each other no term's test rejects 0, so these pairs cannot "
        "say which term carries it"
    )
    return f"{text}; the interval of {' and of '.join(apart)} excludes 0, yet no term is named: {why}"


#: The shapes a plan's power table may price, in the words a null uses for them.
POWER_SHAPES = {
    "delta_phi": "delta phi beyond an offset",
    "delta_phi_alone": "delta phi alone",
    "offset": "an offset",
    "every": "an every-model change",
}
TARGET_POWER = 0.8


def detectable_text(rows, who: str = "the plan", target: float = TARGET_POWER) -> str:
    """The smallest effect of each shape that ``who`` names with ``target`` power: ``rows`` are (shape, a
    key of ``POWER_SHAPES``; effect, in nats or units of φ; power) at the sizes the power table tried. Per
    shape and sign, the smallest size whose power reaches ``target``, else the largest tried with its power
    ('with 80% power the plan names delta phi beyond an offset of neither -0.15 (power 0.17) nor +0.15
    (power 0.22), and an offset of -0.06 or +0.06'); '' without rows."""
    by_shape: dict[str, dict[bool, list[tuple[float, float]]]] = {}
    for shape, effect, power in rows:
        by_shape.setdefault(shape, {}).setdefault(effect > 0, []).append((float(effect), float(power)))
    said = []
    for shape in (s for s in POWER_SHAPES if s in by_shape):
        reached, short = [], []
        for _, tried in sorted(by_shape[shape].items()):
            tried.sort(key=lambda row: abs(row[0]))
            hit = next((x for x, power in tried if power >= target), None)
            if hit is None:
                short.append(f"{tried[-1][0]:+.2f} (power {tried[-1][1]:.2f})")
            else:
                reached.append(f"{hit:+.2f}")
        label = POWER_SHAPES[shape]
        if not short:
            said.append(f"{label} of {' or '.join(reached)}")
        elif not reached:
            neither = f"of neither {' nor '.join(short)}" if len(short) > 1 else f"not of {short[0]}"
            said.append(f"{label} {neither}")
        else:
            said.append(f"{label} of {' or '.join(reached)}, not of {' or '.join(short)}")
    listed = f"{', '.join(said[:-1])}, and {said[-1]}" if len(said) > 1 else "".join(said)
    return f"with {100 * target:.0f}% power {who} names {listed}" if said else ""


def _every_model_profile(e: PairedEffects, profile: str, tested: str) -> str:
    """The verdict where plain models change with size: the recipe changes every model, with each scope's
    profile along width and slope; 'plain ones most' only where the slopes' difference excludes 0."""
    scopes = e.scope_trends
    diff = scopes.difference
    most = ""
    if diff and diff.varies:
        most = ", plain ones most" if diff.slope * scopes.plain.slope > 0 else ", looped ones most"

    def scope(name: str, looped: bool) -> str:
        tr = getattr(scopes, name)
        slope = (
            ""
            if tr is None
            else f" ({tr.slope:+.3f} nats per decade of width {interval(tr.ci, signed=True)})"
        )
        return f"{name} {_width_profile(e, looped)}{slope}"

    loop_part = (
        "" if e.separability.separable else f"; what is loop-specific cannot be named: {_not_separable(e)}"
    )
    return (
        f"the recipe changes every model, plain ones included{most}: not one constant along width: "
        f"{scope('plain', False)}, {scope('looped', True)} ({profile}){loop_part} {tested}"
    )


def effect_sentence(e: PairedEffects) -> str:
    """What the pairs say, in words and nats (``pairs.effects.analyse_pairs``'s document): the named terms
    with their intervals (each excludes 0: the rule names nothing else), the shape along width where one
    constant does not fit, what the design cannot separate, and the tests."""
    models, per_r, terms = e.models, e.per_r, e.chosen_terms
    profile = (
        "loss change "
        + " / ".join(f"{v.change:+.3f}" for v in per_r.values())
        + f" nats at r = {' / '.join(per_r)}"
    )
    phi = models["delta phi"]
    dphi = f"{phi.delta_phi:+.3f} " + (_ci(phi, "delta_phi") if "delta_phi" in phi.ci else interval(None))
    varies = e.trend is not None and e.trend.varies
    shape = f"not one constant along width: looped {_width_profile(e, True)}" + (
        f", plain {_width_profile(e, False)}" if "every" in e.terms else ""
    )
    shape += f" ({_trend_text(e)})" if e.trend is not None else ""  # no trend under 3 widths
    tested = _tests_text(e)
    anchors = (
        "" if e.anchors == "paired"
        else "; r = 1 models taken as unchanged (the variant has no r = 1 runs of its own to pair)"
    )  # fmt: skip
    separable = e.separability.separable
    plain = e.scope_trends.plain
    if e.chosen != "tokens only" and plain is not None and plain.varies:
        return _every_model_profile(e, profile, tested)
    if e.chosen == "tokens only":
        ratio = float(np.mean([v.token_ratio for v in per_r.values()]))
        predicted = " / ".join(f"{v.token_part:+.3f}" for v in per_r.values())
        what = (
            f"a token gain: at the same FLOPs it trains on {ratio:.2f}x the tokens, and the "
            if abs(ratio - 1) > 0.05
            else "nothing named beyond what N and D predict: the "
        )
        left = f"; but the excess left is {shape}" if varies else ""
        tail = "" if separable else f"; {_not_separable(e)}"
        any_p, size = e.tests["any"].p, 1 - e.ci_level
        if any_p < SUGGESTIVE:  # not named at this size, but no claim that the law accounts for all of it
            said = (
                f"{what}{profile} against {predicted} that the base law predicts from its N and D: an excess "
                f"beyond them is not named at this test's size {size:.2g} (p = {any_p:.2g}), nor ruled out"
            )
        else:
            said = f"{what}{profile} is what the base law predicts from its N and D ({predicted})"
        return f"{said}{left}; {ruled_out_text(e)} {tested}{tail}{anchors}"
    if e.chosen == "excess not attributed":
        looped_mean = _term(models["offset"], "offset", " nats")
        if e.cancelling:
            why = (
                "the model that fits has terms that cancel each other, each several times the largest change"
            )
        elif not separable:
            why = _not_separable(e)
        else:
            why = "no term of it is named on this design"
        return (
            f"an excess of {looped_mean} beyond tokens on looped models ({profile}) that is not attributed: "
            f"{why}; {ruled_out_text(e)} {tested}{anchors}"
        )
    parts = []
    if "every" in terms:
        m = e.chosen_model
        most = (
            ", plain ones most"
            if abs(per_r["1"].excess) > max(abs(v.excess) for r, v in per_r.items() if r != "1")
            else ""
        )
        parts.append(
            f"the recipe changes every model, plain ones included{most}: "
            + (shape if varies else f"by {_term(m, 'every', ' nats')} on each")
        )
        if "offset" in terms and not varies:
            parts.append(f"looped models by {_term(m, 'offset', ' nats')} more")
        if not separable:
            parts.append(f"what is loop-specific cannot be named: {_not_separable(e)}")
    elif "offset" in terms:
        m = e.chosen_model
        if varies:
            parts.append(
                f"not a change of phi: an effect on looped models that is {shape}, mean "
                f"{_term(m, 'offset', ' nats')}"
            )
        elif separable:
            parts.append(
                f"not a change of phi: a constant {_term(m, 'offset', ' nats')} for every looped model"
            )
        else:
            parts.append(f"looped models change by {_term(m, 'offset', ' nats')}: {_not_separable(e)}")
    if "delta_phi" in terms:
        m = e.chosen_model
        way = "raises" if m.delta_phi > 0 else "lowers"
        alone = "" if "offset" in terms or "every" in terms else " (growing with r as a change of phi must)"
        parts.append(f"{way} phi by {abs(m.delta_phi):.3f} {_ci(m, 'delta_phi')}{alone}")
        if varies:
            parts.append(f"what is left is {shape}")
    parts += [_also_consistent(e, name) for name in e.also_consistent]
    offset_alone = "offset" in terms and "delta_phi" not in terms and separable
    rejected = f"; the delta-phi-only model ({dphi}) is rejected" if offset_alone else ""
    return "; ".join(parts) + f" ({profile}){rejected} {tested}{anchors}"


_MULTIPLIED = {
    "N multiplier": "a parameter (compute) multiplier N x",
    "D multiplier": "a data multiplier D x",
}


def _also_consistent(e: PairedEffects, name: str) -> str:
    """'or, as well on this design, a data multiplier D x 1.47 [1.21, 1.79] (lack of fit p = 0.3)': a
    multiplier the pairs allow beside the model named."""
    row = e.shape(name)
    m, lo, hi = row.multiplier
    return (
        f"or, as well on this design, {_MULTIPLIED[name]} {m:.2f} {interval((lo, hi), 2)} "
        f"(lack of fit {p_text(row.lack_of_fit_p)}): the pairs do not tell it from the model named"
    )


def design_text(e: PairedEffects) -> str:
    """What the pairs' design can separate, in one line."""
    sep = e.separability
    return (
        f"design: looped r {list(sep.looped_r)}; offset vs dL/dphi columns: cosine {sep.cosine:.3f}, "
        f"condition number {sep.condition:.1f}; " + ("separable" if sep.separable else _not_separable(e))
    )


def shape_text(e: PairedEffects) -> str:
    """The excess left beyond the chosen model along width, and the heterogeneity left, in one line."""
    tr, het = e.trend, e.heterogeneity
    return (
        f"shape left beyond the chosen model, along width: {_trend_text(e)} ({p_text(tr.p)}; "
        f"{100 * tr.explained:.0f}% of the cluster means' spread); heterogeneity left: (r, width) sd "
        f"{het.cluster_sd:.4f}, iid sd {het.iid_sd:.4f}, I2 {het.i2:.2f}"
    )


def wild_text(e: PairedEffects) -> str | None:
    """The wild cluster bootstrap's second opinion on the rule's tests, in one line (None without it)."""
    wild = e.wild_cluster
    if not wild:
        return None
    names = {"every": "every model", "offset": "offset", "delta_phi": "delta phi"}
    ps = ", ".join(f"{names[t]} {p_text(p)}" for t, p in wild.p.items())
    return (
        f"second opinion on the tests: wild cluster bootstrap-t (restricted, Webb weights, {wild.draws} "
        f"tables; the pairs' noise only, not the base law's): {ps}"
    )


SHAPE_MEANING = {
    "offset": "a constant on looped models (no law parameter)",
    "delta phi": "phi",
    "N multiplier": "N_eff x m, i.e. A x m^-alpha (estimate: ln m, to first order)",
    "D multiplier": "D x m, i.e. B x m^-beta (estimate: ln m, to first order)",
    "width slope": "none of the law's parameters (an effect growing with size; estimate: nats per decade)",
}


def shapes_text(e: PairedEffects) -> str:
    """Which one-parameter shapes the pairs allow (``pairs.shapes``), in one line."""
    allowed = [row.shape for row in e.shapes if row.consistent]
    listed = "; ".join(
        f"{row.shape} {row.estimate:+.3f} {interval(row.ci, signed=True)} "
        f"(lack of fit {p_text(row.lack_of_fit_p)})"
        for row in e.shapes
    )
    head = (
        f"shapes the pairs allow (lack of fit p >= 0.01): {', '.join(allowed)}"
        if allowed
        else "no one-parameter shape describes the pairs (lack of fit p < 0.01 for each)"
    )
    return f"{head}; {listed}"


def _interval_meaning(e: PairedEffects) -> str:
    """What the printed intervals are: the values the test does not reject (issue 49); a record read before
    it printed estimate ± c·SE, and its report re-renders with the words it had."""
    if not e.inverted:
        return "estimate +- c*SE"
    return "the values the test does not reject (estimate +- c*SE for a constant)"


def effect_lines(e: PairedEffects) -> list[str]:
    """The pairs' effect models as text lines: per r, what the design separates, each model's fit, the
    tests, the shape left, the calibration."""
    lines = [
        f"matched pairs (budget, width, r, seed): {e.n_pairs} ({e.plain_pairs} at r = 1) in "
        f"{e.clusters} (r, width) clusters; token part from the base law ({e.base_form} form, "
        f"{e.base_resamples} bootstrap draws)"
    ]
    for r, v in e.per_r.items():
        lines.append(
            f"  r = {r}: {v.pairs} pairs, loss change {v.change:+.4f} (sd {v.change_sd or 0:.4f}), "
            f"token part {v.token_part:+.4f} ({v.token_ratio:.3f}x tokens), excess {v.excess:+.4f}"
        )
    lines.append(f"  {design_text(e)}")
    level = f"{100 * e.ci_level:.0f}%"
    for name, m in e.models.items():
        coefs = [
            f"{t} {_term(m, t)} (c {m.critical[t]:.2f}, SE {m.se[t]:.4f}: pairs "
            f"{m.se_pairs[t]:.4f}, base law {m.se_base_law[t]:.4f})"
            for t in m.terms
        ]
        mark = " <- chosen" if name == e.chosen else ""
        flag = " (terms cancel each other: never chosen)" if m.cancelling else ""
        lines.append(f"  model {name}: {'; '.join(coefs) or 'no excess'}; RSS {m.rss:.5f}{flag}{mark}")
    lines.append(
        f"  tests (Monte Carlo p, {e.simulations} simulated tables per null; intervals at {level} = "
        f"{_interval_meaning(e)}, c the same test's critical value): {_tests_text(e)[1:-1]}"
    )
    if wild_text(e):
        lines.append(f"  {wild_text(e)}")
    if e.shapes:
        lines.append(f"  {shapes_text(e)}")
    if e.trend is not None:
        lines.append(f"  {shape_text(e)}")
    cal = e.calibration
    worst = max(c.wrong_attribution for c in cal.values())
    disagree = max(c.disagreement for c in cal.values())
    cover = min((v for c in cal.values() for v in c.coverage.values()), default=float("nan"))
    lines.append(
        "  the rule on tables simulated with each model as the truth: "
        + "; ".join(f"{k}: names it {c.power:.2f}" for k, c in cal.items())
        + f"; wrong attribution at most {worst:.3f}; named with an interval holding 0 at most "
        f"{disagree:.3f}; interval coverage at least {cover:.3f}"
    )
    return lines


def delta_phi_story(doc: CaseStudy) -> str | None:
    """One sentence where the shared fit, the separate fits and the pairs' Δφ-only model disagree in sign
    or beyond their intervals, naming which to read and why (the pairs first, where their Δφ-only model is
    not rejected); None where they agree or there are no pairs."""
    if doc.effects is None:
        return None
    e = doc.effects
    pairs = e.models["delta phi"]
    estimates = {
        "shared fit": (doc.delta_phi.estimate, doc.delta_phi.ci),
        "separate fits": (doc.delta_phi_separate.estimate, doc.delta_phi_separate.ci),
        "pairs": (pairs.delta_phi, pairs.ci.get("delta_phi")),
    }
    signs = {bool(v > 0) for v, _ in estimates.values()}
    cis = [ci for _, ci in estimates.values() if ci is not None]
    apart = any(a[1] < b[0] or b[1] < a[0] for a in cis for b in cis)
    if len(signs) == 1 and not apart:
        return None
    listed = ", ".join(f"{k} {v:+.3f} {interval(ci, signed=True)}" for k, (v, ci) in estimates.items())
    phi_alone = e.separability.separable and "offset" not in e.chosen_terms and not e.cancelling
    if phi_alone and "every" not in e.chosen_terms:
        read = "read the pairs': they compare like with like, and their delta-phi-only model is not rejected"
    else:
        read = (
            f"none of them measures the recipe: the pairs choose '{e.chosen}', so a change of phi alone "
            "does not describe the runs"
        )
    return f"the three estimates of delta phi disagree ({listed}): {read}"
