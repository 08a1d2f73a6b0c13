"""The effect models' document in words (``pairs.effects.analyse_pairs``; the compare and price verdicts): one
function per sentence, each reading the typed numbers the analysis returned and computing nothing new."""

from __future__ import annotations

import math

import numpy as np

from loopscale.pairs.case_study_results import CaseStudy
from loopscale.pairs.results import ModelFit, PairedEffects
from loopscale.present.numbers import interval

# An excess-beyond-tokens p below this, though above the test's size, is not named and not called absent
SUGGESTIVE = 0.05


def p_text(p) -> str:
    return "p n/a" if p is None or not math.isfinite(p) else (f"p = {p:.2g}" if p >= 1e-4 else "p < 1e-4")


def _term(m: ModelFit, t: str, unit: str = "") -> str:
    return f"{m.estimate[t]:+.3f}{unit} {interval(m.ci[t], signed=True)}"


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
    dphi = f"{phi.delta_phi:+.3f} {interval(phi.ci.get('delta_phi'), signed=True)}"
    varies = e.trend is not None and e.trend.varies
    shape = f"not one constant along width: looped {_width_profile(e, True)}" + (
        f", plain {_width_profile(e, False)}" if "every" in e.terms else ""
    )
    shape += f" ({_trend_text(e)})"
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
            f"a token gain, not a change of phi: at the same FLOPs it trains on {ratio:.2f}x the tokens, "
            "and the "
            if abs(ratio - 1) > 0.05
            else "no effect named beyond what N and D predict: the "
            if e.tests["any"].p < SUGGESTIVE
            else "no effect beyond what N and D predict: the "
        )
        left = f"; but the excess left is {shape}" if varies else ""
        tail = f"; delta phi {dphi}" if separable else f"; {_not_separable(e)}"
        any_p, size = e.tests["any"].p, 1 - e.ci_level
        if any_p < SUGGESTIVE:  # not named at this size, but no claim that the law accounts for all of it
            said = (
                f"{what}{profile} against {predicted} that the base law predicts from its N and D: an excess "
                f"beyond them is not named at this test's size {size:.2g} (p = {any_p:.2g}), nor ruled out"
            )
        else:
            said = f"{what}{profile} is what the base law predicts from its N and D ({predicted})"
        return f"{said}{left} {tested}{tail}{anchors}"
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
            f"{why} {tested}{anchors}"
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
        parts.append(f"{way} phi by {abs(m.delta_phi):.3f} {interval(m.ci['delta_phi'], signed=True)}{alone}")
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
        f"estimate +- c*SE, c the same test's critical value): {_tests_text(e)[1:-1]}"
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
