"""The result section: φ's intervals side by side and whether they agree, the comparison with the paper
(only for an identified φ, as a comparison of intervals), the parameters at an edge of the fit box, what
one loop is worth and the equivalence statement at this sweep's scale (method §9.7, §9.8)."""

from __future__ import annotations

import math

from loopscale.errors import UserError
from loopscale.fit.analyses import bptt_by_r, equivalence
from loopscale.fit.labels import count_label, percent_text
from loopscale.fit.law import LOWER, PARAMS, UPPER
from loopscale.fit.protocol_results import Equivalence, ProtocolResult
from loopscale.paper import JOINT_FIT, PHI_CI
from loopscale.present.fit_text import protocol_note_text
from loopscale.present.identification import disagreement_text, profile_method
from loopscale.present.plots import method_name
from loopscale.report.document import Bullets, Section, Table
from loopscale.report.formatting import SYMBOL, ci_method, identified, level, num, rejected

PAPER_BUDGETS = "4.64e17–2.15e19 FLOPs"
_BOX_OF = {"A": ("a", True), "B": ("b", True), "E": ("e", True)}  # coefficient → (box parameter, exp)


def _param(name: str) -> str:
    """A parameter name with its box range, e.g. "E (box [0.0498, 7.39])", "φ (box [-3, 3])"."""
    key, exp = _BOX_OF.get(name, (name, False))
    if key not in PARAMS:
        return SYMBOL.get(name, name)
    lo, hi = LOWER[PARAMS.index(key)], UPPER[PARAMS.index(key)]
    box = f"[{math.exp(lo):.3g}, {math.exp(hi):.3g}]" if exp else f"[{lo:g}, {hi:g}]"
    return f"{SYMBOL.get(name, name)} (box {box})"


def _bounds_blocks(doc: ProtocolResult) -> list:
    at = doc.diagnostics.at_bound
    items = []
    fix_phi = doc.settings.fix_phi
    main_form = "joint" if fix_phi is None else f"phi={fix_phi:g}"  # the main fit's row among the forms
    if at.point and at.forms.get(main_form) != at.point:
        items.append("main fit: " + ", ".join(_param(n) for n in at.point))
    for form, names in at.forms.items():
        if names:
            items.append(f"{form}: " + ", ".join(_param(n) for n in names))
    share = {k: v for k, v in at.bootstrap_share.items() if v}
    if share:
        items.append(
            "bootstrap resamples with the parameter at an edge: "
            + ", ".join(f"{SYMBOL.get(k, k)} {percent_text(v)}" for k, v in share.items())
        )
    if not items:
        return ["No fitted parameter sits at an edge of the fit box (method §8.3)."]
    return [
        "Parameters at an edge of the fit box (method §8.3); an estimate there is set by the box:",
        Bullets(items),
    ]


def _overlap_text(name: str, ours, theirs) -> str:
    lo, hi = ours
    if lo is None or hi is None:
        return ""
    if lo <= theirs[1] and theirs[0] <= hi:
        return (
            f"this sweep's {name} [{lo:.3f}, {hi:.3f}] and the paper's 95% CI [{theirs[0]}, {theirs[1]}] "
            f"overlap on [{max(lo, theirs[0]):.3f}, {min(hi, theirs[1]):.3f}]"
        )
    side = "above" if lo > theirs[1] else "below"
    return (
        f"this sweep's {name} [{lo:.3f}, {hi:.3f}] lies {side} the paper's 95% CI "
        f"[{theirs[0]}, {theirs[1]}] (no overlap)"
    )


def paper_comparison(doc: ProtocolResult) -> str:
    paper = f"φ = {JOINT_FIT['phi']}, 95% CI [{PHI_CI[0]}, {PHI_CI[1]}] at {PAPER_BUDGETS}"
    if rejected(doc):
        return (
            f"No comparison with the paper ({paper}) is made: these runs reject one constant φ (law check), "
            "so its single number is not a measurement to compare."
        )
    if not identified(doc):
        return (
            f"No comparison with the paper ({paper}) is made: φ is not identified by this sweep, so its "
            "intervals say nothing about the paper's value."
        )
    parts = []
    if doc.phi_ci:
        name = "bootstrap CI" if ci_method(doc) is None else f"{method_name(ci_method(doc))} CI"
        parts.append(_overlap_text(name, doc.phi_ci, PHI_CI))
    prof = doc.profile
    if prof and not any(prof.open):
        parts.append(_overlap_text("profile interval", prof.interval, PHI_CI))
    parts = [p for p in parts if p]
    if not parts:
        return f"The paper reports {paper}; this sweep has no closed interval to compare with it."
    return f"Compared with the paper ({paper}): " + "; ".join(parts) + "."


def _interval_rows(doc: ProtocolResult) -> list[list[str]]:
    rows = []
    boot = doc.bootstrap
    method = ci_method(doc)
    cells = f"{boot.resamples} resamples of {boot.cells} (budget, r) cells" if boot else ""
    if doc.phi_ci:
        lo, hi = doc.phi_ci
        name = "block bootstrap (percentile)" if method is None else method_name(method)
        how = cells if method is None else "the interval reported with φ (law check, docs/fitting.md)"
        rows.append([name, level(doc), num(lo, "{:.3f}"), num(hi, "{:.3f}"), how])
    else:
        rows.append(["block bootstrap (percentile)", "", "–", "–", "not computed (bootstrap off)"])
    for name, interval in doc.ci_secondary.items():
        if name in ("profile", method or "cell_bootstrap") or not interval:
            continue  # the profile has its own row below; the reported interval is above
        how = f"secondary: {cells}" if name == "cell_bootstrap" else "secondary"
        rows.append([method_name(name), level(doc), *(num(v, "{:.3f}") for v in interval), how])
    prof = doc.profile
    if prof:
        ends = [
            "open" if v is None else f"{v:.3f}" + (" (open)" if o else "")
            for v, o in zip(prof.interval, prof.open)
        ]
        rows.append(
            [
                "profile likelihood",
                f"{100 * prof.level:.0f}%",
                *ends,
                f"deviance ≤ {prof.threshold:.3f} (χ²₁), φ refitted on a grid",
            ]
        )
    else:
        rows.append(["profile likelihood", "", "–", "–", "not computed"])
    return rows


def _agreement(doc: ProtocolResult) -> str:
    prof = doc.profile
    if not prof:
        return ""
    if prof.agrees_with_bootstrap is False:
        return disagreement_text(prof.disagreement)
    if prof.agrees_with_bootstrap is True:
        return "The bootstrap CI and the profile-likelihood interval agree."
    return "The two intervals were not compared."


def _trained(eq: Equivalence) -> str:
    """How the looped model's FLOPs were charged, where not full BPTT."""
    if eq.bptt_k is None:
        return ""
    return f" as trained (truncated BPTT: the last {eq.bptt_k} of {eq.r} loops backpropagated)"


def result_section(doc: ProtocolResult, table, template) -> Section:
    phi = doc.fit.phi
    blocks: list = []  # φ itself is on the first screen; here its intervals side by side
    if phi is not None and doc.settings.fix_phi is None:
        blocks.append(Table(["interval for φ", "level", "lower", "upper", "how"], _interval_rows(doc)))
        agreement = _agreement(doc)
        if agreement:
            blocks.append(agreement)
        if doc.profile:
            blocks.append(f"Profile method: {profile_method()}.")
        blocks.append(paper_comparison(doc))
    if doc.phi_identified is False:
        blocks.append("Why φ is not identified: see the list at the top of this report.")
    blocks += _bounds_blocks(doc)
    caveat = ""
    if rejected(doc):
        caveat = " (from the constant-φ law these runs reject: an illustration, not a finding)"
    elif not identified(doc):
        caveat = " (from the point estimate of a φ that is not identified: an illustration, not a finding)"
    if doc.loop_worth:
        blocks.append(
            f"What one loop is worth{caveat}: "
            + "; ".join(
                f"r = {w.r} loops ≈ {w.worth:.2f} unique blocks "
                f"({percent_text(w.fraction)} of full equivalence)"
                for w in doc.loop_worth
            )
            + "."
        )
    looped = [r for r in sorted(set(table.r.tolist())) if r > 1]
    plain = table.n[table.r == 1]
    if phi is not None and looped and len(plain):
        r = 4 if 4 in looped else looped[-1]
        params = float(sorted(plain)[len(plain) // 2])
        try:
            eq = equivalence(params, r, phi, template, bptt_by_r(table).at(r))
        except UserError as exc:
            blocks.append(f"No equivalence statement: {exc}")
        else:
            blocks.append(
                f"Equivalence at this scale{caveat}: next to an r = 1 model with {count_label(params)} "
                f"non-embedding parameters (d ≈ {eq.width:.0f}), the r = {r} model of the same width has "
                f"{count_label(eq.unique_params)} unique parameters ({eq.unique_ratio:.2f}×) and is "
                f"worth {count_label(eq.effective_params)} non-looped "
                f"parameters ({eq.effective_ratio:.2f}×, r^φ = {eq.worth:.2f}), while it costs "
                f"{eq.flops_ratio:.3f}× the training FLOPs per token{_trained(eq)}, as much as an r = 1 "
                f"model with {count_label(eq.cost_equivalent_params)} parameters."
            )
    for note in doc.notes:
        blocks.append(f"Note: {protocol_note_text(note)}")
    return Section("Result", blocks)
