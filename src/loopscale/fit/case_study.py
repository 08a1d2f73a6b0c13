"""``loopscale compare``'s document: Δφ of a recipe change and what else the two arms show.

``compare_arms`` runs the estimates of ``fit.compare`` (shared-nuisance Δφ under the base's selected law
form, the paper's separate fits, Δφ per budget, the change of a φ trend) and adds what a reader weighs them
with: the law check of each arm, the loss change of every looped run at matched (budget, width, r), the
shift of the iso-FLOP optimum per (budget, r), the loop tax per arm, and the design's power. Its first line
is the verdict; ``format_compare`` prints the whole document as text, ``to_json`` keeps what compare.json
holds.
"""

from __future__ import annotations

import math

import numpy as np

from loopscale.errors import UserError
from loopscale.fit.analyses import cell_gaps, parabola_minima
from loopscale.fit.compare import (
    PAPER_EFFECTS,
    Arms,
    deciding_end,
    delta_phi_separate,
    delta_phi_shared,
    make_arms,
    per_budget,
    trend_change,
)
from loopscale.fit.effect_rule import REFERENCE_EFFECTS
from loopscale.fit.effect_text import delta_phi_story, effect_lines, effect_sentence, fmt_ci, p_text
from loopscale.fit.effects import analyse_pairs
from loopscale.fit.fitter import fit_law
from loopscale.fit.priors import NO_LAW_CHECK, Held, fixed_lines, fixed_settings
from loopscale.fit.table import RunTable

TREND_FORMS = ("phi-trend-c", "phi-trend-n")
SAME_OPTIMUM = 0.01  # |log N* ratio| below which the optimum has not moved (1%)


def _cell_means(t: RunTable) -> dict[tuple[float, int, int], float]:
    """Mean loss per (budget, width, r) over seeds (nats)."""
    groups: dict[tuple[float, int, int], list[float]] = {}
    for b, w, r, loss in zip(t.budget, t.width, t.r, t.loss):
        groups.setdefault((float(b), int(w), int(r)), []).append(float(loss))
    return {k: float(np.mean(v)) for k, v in groups.items()}


def loss_changes(arms: Arms) -> dict:
    """Variant − base loss (nats) of every looped (budget, width, r) both arms ran (means over seeds)."""
    base = _cell_means(arms.base_table.subset(arms.base_table.r > 1))
    variant = _cell_means(arms.variant_table.subset(arms.variant_table.r > 1))
    rows = [
        {
            "budget": k[0],
            "width": k[1],
            "r": k[2],
            "base": base[k],
            "variant": variant[k],
            "change": variant[k] - base[k],
        }
        for k in sorted(set(base) & set(variant))
    ]
    changes = np.array([row["change"] for row in rows])
    per_r = {
        str(r): float(np.mean([row["change"] for row in rows if row["r"] == r]))
        for r in sorted({row["r"] for row in rows})
    }
    return {
        "rows": rows,
        "matched": len(rows),
        "lower": int((changes < 0).sum()),
        "mean": float(changes.mean()) if len(rows) else None,
        "mean_per_r": per_r,
    }


def optimum_shift(arms: Arms) -> list[dict]:
    """Per (budget, r > 1): the iso-FLOP optimum N* of each arm (parabola vertex in log N, bracketed only)
    and the direction the variant moves it: "wider", "narrower", "unchanged" (within 1% in N*), or "not
    bracketed" (either arm's vertex outside its runs, or its lowest run at an end of the widths)."""
    minima = {
        name: {(m["budget"], m["r"]): m for m in parabola_minima(t)}
        for name, t in (("base", arms.base_table), ("variant", arms.variant_table))
    }
    rows = []
    for key in sorted(set(minima["base"]) & set(minima["variant"])):
        if key[1] == 1:
            continue
        b, v = minima["base"][key], minima["variant"][key]
        row = {"budget": key[0], "r": key[1], "base_n_star": b["n_star"], "variant_n_star": v["n_star"]}
        if b["bracketed"] and v["bracketed"] and b["runs_bracket"] and v["runs_bracket"]:
            row["ratio"] = v["n_star"] / b["n_star"]
            row["shift"] = (
                "unchanged"
                if abs(math.log(row["ratio"])) < SAME_OPTIMUM
                else ("wider" if row["ratio"] > 1 else "narrower")
            )
        else:
            row["ratio"] = None
            row["shift"] = "not bracketed"
        rows.append(row)
    return rows


def loss_change_text(lc: dict) -> str:
    """``loss_changes`` in one line: how many matched looped cells the variant lowers, the mean per r."""
    per_r = ", ".join(f"r = {r}: {v:+.4f}" for r, v in lc["mean_per_r"].items())
    return (
        f"{lc['lower']} of {lc['matched']} matched (budget, width, r) cells lower with the variant; mean "
        f"{lc['mean']:+.4f} nats ({per_r})"
    )


def loop_tax(t: RunTable) -> list[dict]:
    """L*(r) − L*(r = 1) per budget (nats; iso-FLOP minima, bracketed cells only)."""
    return cell_gaps(parabola_minima(t))


def _rejected_arms(doc: dict) -> str:
    """'the base and variant arms' whose law check rejects one constant φ ('' when none does)."""
    arms = [arm for arm, check in (doc["law_check"] or {}).items() if check["verdict"] == "rejected"]
    return "" if not arms else " and ".join(arms) + (" arms" if len(arms) > 1 else " arm")


def mc_text(d: dict) -> str:
    """Where the CI end nearest 0 could lie at this resample count (its Monte Carlo range) and whether the
    bootstrap was grown to settle it; '' without a bootstrap."""
    if d.get("ci_mc") is None:
        return ""
    side, near = deciding_end(d["ci_mc"], d["estimate"])
    grown = (
        f", the bootstrap grown from {d['resamples_requested']} to {d['resamples']} resamples to settle it"
        if d["resamples"] > d["resamples_requested"]
        else ""
    )
    return f"Monte Carlo range of the {side} end {fmt_ci(near)}{grown}"


def verdict(doc: dict) -> str:
    """The first line: whether the law holds on the arms, then what the recipe does: the effect model the
    matched pairs choose (``fit.effects``) with its size, interval and tests, or, without pairs, what Δφ
    is (and which parameters were held: Δφ is conditional on them)."""
    rejected = _rejected_arms(doc)
    fixed = doc["settings"]["fixed"]
    given = f" (given {', '.join(fixed)} held fixed, not fitted)" if fixed else ""
    if doc.get("effects"):
        lead = f"the law check rejects one constant phi on the {rejected}; " if rejected else ""
        return lead + f"{doc['name']}: " + effect_sentence(doc["effects"]) + given
    lead = (
        f"the law check rejects one constant phi on the {rejected}, so delta phi compares averages over "
        "budgets, not measurements: "
        if rejected
        else ""
    )
    return lead + _delta_phi_sentence(doc) + given


def effect_power(e: dict) -> dict[str, float]:
    """Power of the pairs' rule to name a Δφ of each reference size alone (simulated on this design)."""
    return {
        f"{d:+.2f}": e["calibration"][f"delta phi = {d:+.2f}"]["power"]
        for d in REFERENCE_EFFECTS
        if f"delta phi = {d:+.2f}" in e["calibration"]
    }


def _delta_phi_sentence(doc: dict) -> str:
    d, name = doc["delta_phi"], doc["name"]
    rows = [row for row in doc["per_budget"] if row["delta_phi"] is not None]
    form = "" if d["form"] == "paper" else f" (under the {d['form']} form the base's law check selects)"
    if d["resolved"]:
        signs = {np.sign(row["delta_phi"]) for row in rows}
        where = (
            "at every budget"
            if signs == {np.sign(d["estimate"])}
            else "but not at every budget (per budget "
            + ", ".join(f"{row['delta_phi']:+.2f}" for row in rows)
            + ")"
        )
        way = "raises" if d["estimate"] > 0 else "lowers"
        grown = d.get("resamples", 0) > d.get("resamples_requested", 0)
        at = f", {d['resamples']} resamples: settled beyond Monte Carlo error" if grown else ""
        size = f"{abs(d['estimate']):.2f} {fmt_ci(d['ci'])} ({p_text(d['p'])}{at})"
        return f"{name} {way} phi by {size}, {where}{form}"
    if not d.get("mc_settled", True):
        side, near = deciding_end(d["ci_mc"], d["estimate"])
        return (
            f"delta phi not resolved for {name}, on the edge: {d['estimate']:+.3f} {fmt_ci(d['ci'])} "
            f"({p_text(d['p'])}): the interval's {side} end lies within Monte Carlo error of 0 even at "
            f"{d['resamples']} resamples (range {fmt_ci(near)}){form}"
        )
    p08 = doc["power"].get(f"{REFERENCE_EFFECTS[0]:+.2f}")
    power_text = (
        ""
        if p08 is None
        else f"; this design's power for delta phi = {REFERENCE_EFFECTS[0]:+.2f} is {p08:.2f}"
    )
    return (
        f"delta phi not resolved for {name}: {d['estimate']:+.3f} {fmt_ci(d['ci'])} ({p_text(d['p'])})"
        f"{form}{power_text}"
    )


def compare_arms(
    base: RunTable,
    variant: RunTable,
    *,
    name: str = "variant",
    form: str = "auto",
    restarts: int = 500,
    resamples: int = 200,
    bootstrap_restarts: int = 10,
    seed: int = 0,
    noise: float | None = None,
    law_check: bool = True,
    advance=None,
    held: Held | None = None,
) -> dict:
    """The compare document (see the module docstring). ``form`` "auto": the base's selected form when its
    law check rejects the paper's law, else the paper's; ``noise``: run-to-run noise (nats) for law checks
    of tables without replicates; ``advance(k)``: progress callback (bootstrap refits); ``held``
    (``fit.priors.build_held``): shared parameters held in every fit and refit of both arms, a prior's draws
    resampled per refit; the law checks are then skipped."""
    from loopscale.fit.lawcheck import check_law

    arms = make_arms(base, variant)
    checks, notes = {}, [NO_LAW_CHECK] if law_check and held else []
    if law_check and not held:
        for arm, t in (("base", arms.base_table), ("variant", arms.variant_table)):
            fit = fit_law(t, restarts=restarts, seed=seed)
            checks[arm] = check_law(t, fit, noise=noise, resamples=0, seed=seed)
    if form == "auto":
        form = checks["base"]["selected_form"] if checks else "paper"
    settings = {"restarts": restarts, "bootstrap_restarts": bootstrap_restarts, "seed": seed}
    shared = delta_phi_shared(arms, form, resamples=resamples, advance=advance, held=held, **settings)
    model, theta = shared.pop("_model"), shared.pop("_theta")
    doc: dict = {
        "name": name,
        "verdict": "",
        "delta_phi": shared,
        "delta_phi_paper_form": None,
        "delta_phi_separate": delta_phi_separate(
            arms, resamples=resamples, advance=advance, held=held, **settings
        ),
        "per_budget": per_budget(arms, model, theta, resamples, seed),
        "trend": trend_change(arms, form, theta, restarts=max(20, restarts // 10), seed=seed, held=held)
        if form in TREND_FORMS
        else None,
        "law_check": checks or None,
        "loss_change": loss_changes(arms),
        "optimum_shift": optimum_shift(arms),
        "loop_tax": {"base": loop_tax(arms.base_table), "variant": loop_tax(arms.variant_table)},
        "effects": None,
        "power": {},
        "runs": {
            "base": len(arms.base_table),
            "variant": int(arms.variant.sum()),
            "anchors": int((arms.variant_table.r == 1).sum()),
            "shared_anchors": arms.shared_anchors,
            "own_plain": arms.own_plain,
            "budgets": sorted(set(arms.table.budget.tolist())),
        },
        "paper": {"effects": PAPER_EFFECTS, "base_phi": 0.453},
        "settings": {
            **settings,
            "resamples": resamples,
            "form": form,
            "noise": noise,
            "fixed": fixed_settings(held, None),
            "prior": None if held is None else held.prior,
        },
        "notes": notes,
    }
    try:
        base_fit = fit_law(
            arms.base_table, restarts=restarts, seed=seed, extension=None if form == "paper" else form,
            held=held.theta if held else None,
        )  # fmt: skip
        doc["effects"] = analyse_pairs(
            arms.base_table, arms.variant_runs, base_fit, base_resamples=resamples, seed=seed
        )
        doc["power"] = effect_power(doc["effects"])
    except UserError as exc:  # tables without matched pairs: the shared fit alone
        doc["effects"] = None
        doc["notes"].append(f"no matched-pair analysis: {exc}")
    if form != "paper":
        paper = delta_phi_shared(arms, "paper", resamples=0, held=held, **settings)
        doc["delta_phi_paper_form"] = {k: paper[k] for k in ("estimate", "F_test", "phi")}
    doc["verdict"] = verdict(doc)
    return doc


def to_json(doc: dict) -> dict:
    """compare.json: the document without the bootstrap samples."""
    out = dict(doc)
    out["delta_phi"] = {k: v for k, v in doc["delta_phi"].items() if k != "samples"}
    return out


def format_compare(doc: dict) -> str:
    """The document as text, verdict first."""
    d, s = doc["delta_phi"], doc["delta_phi_separate"]
    runs = doc["runs"]
    lines = [doc["verdict"], ""]
    for arm, check in (doc["law_check"] or {}).items():
        lines.append(f"law check, {arm} arm: {check['verdict']}: {check['headline']}")
    lines.append(
        f"{runs['base']} base runs and {runs['variant']} variant runs at {len(runs['budgets'])} budgets; "
        f"{runs['anchors']} r = 1 anchors ({runs['shared_anchors']} identical in both tables)"
    )
    lines += fixed_lines(doc["settings"]["fixed"], doc["settings"]["prior"])
    lines.append(
        f"shared nuisance ({d['form']} form): delta phi = {d['estimate']:+.4f} {fmt_ci(d['ci'])}"
        + ("" if d["se"] is None else f", SE {d['se']:.3f}, t({d['t_df']}) {p_text(d['p'])}; {mc_text(d)}")
        + f"; F-test F = {d['F_test']['F']:.2f}, {p_text(d['F_test']['p'])}; "
        f"phi (base) {d['phi']:.3f}"
    )
    if doc["delta_phi_paper_form"] is not None:
        q = doc["delta_phi_paper_form"]
        lines.append(
            f"  under the paper's form: delta phi = {q['estimate']:+.4f} (F-test {p_text(q['F_test']['p'])})"
        )
    lines.append(
        f"separate fits (the paper's): phi {s['base_phi']:.3f} -> {s['variant_phi']:.3f}, delta "
        f"{s['estimate']:+.4f} {fmt_ci(s['ci'])} (paper: 0.453 -> 0.380 truncated BPTT, 0.646 "
        "hyperconnections)"
    )
    lines.append("delta phi per budget (E, alpha, beta of the shared fit held):")
    for row in doc["per_budget"]:
        est = "refused" if row["delta_phi"] is None else f"{row['delta_phi']:+.3f} {fmt_ci(row['ci'])}"
        why = f"; {row['reason']}" if row.get("reason") else ""
        lines.append(f"  C = {row['budget']:.3g}: {est}  ({row['n']} runs{why})")
    if doc["trend"] is not None:
        t = doc["trend"]
        lines.append(f"{t['label']}: {t['estimate']:+.3f} (F = {t['F']:.2f}, {p_text(t['p'])})")
    if doc["loss_change"]["matched"]:
        lines.append(f"loss change (variant - base): {loss_change_text(doc['loss_change'])}")
    shifts = doc["optimum_shift"]
    counts = {
        k: sum(1 for row in shifts if row["shift"] == k) for k in ("wider", "narrower", "not bracketed")
    }
    lines.append(
        f"iso-FLOP optimum: {counts['wider']} wider, {counts['narrower']} narrower, "
        f"{counts['not bracketed']} not bracketed of {len(shifts)} (budget, r) cells"
    )
    for arm in ("base", "variant"):
        gaps = doc["loop_tax"][arm]
        top = [g for g in gaps if g["r"] == max((g["r"] for g in gaps), default=0)]
        text = ", ".join(f"{g['gap']:+.3f} at {g['budget']:.3g}" for g in top) or "no bracketed cells"
        lines.append(f"loop tax ({arm}, largest r): {text}")
    story = delta_phi_story(doc)
    if story:
        lines.append(story)
    if doc.get("effects"):
        lines += effect_lines(doc["effects"])
    if doc["power"]:
        lines.append(
            "power of the pairs' rule to name delta phi alone (simulated on this design): "
            + ", ".join(f"delta phi = {k}: {v:.2f}" for k, v in doc["power"].items())
        )
    lines += [f"note: {n}" for n in doc["notes"]]
    return "\n".join(lines)
