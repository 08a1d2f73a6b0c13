"""The report's figures beyond ``fit.plot_protocol``'s: φ per budget with its intervals against the
constant-φ fit (the second figure of the first screen), the captions of every figure, and how a figure is
written (PNG for report.md, SVG with its text kept as text for report.html)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loopscale.fit.labels import flops_label
from loopscale.paper import JOINT_FIT

#: matplotlib settings for every figure the report writes: SVG text stays text (searchable, crisp)
SVG_TEXT = {"svg.fonttype": "none"}


def svg_text():
    """A context in which figures are saved with SVG text as text (``SVG_TEXT``)."""
    import matplotlib

    return matplotlib.rc_context(SVG_TEXT)


def save_figure(fig, stem: Path) -> Path:
    """Write ``fig`` as STEM.png and STEM.svg (``fit.plots``' writer), close it, return the PNG's path."""
    import matplotlib.pyplot as plt

    from loopscale.fit.plots import _save

    try:
        with svg_text():
            _save(fig, stem.parent, stem.name)
    finally:
        plt.close(fig)
    return stem.with_suffix(".png")


def phi_per_budget_figure(doc, stem: Path) -> Path | None:
    """φ refitted per budget (points, with their CIs) and per half of the budgets (segments) against the
    constant-φ fit's φ (line) and its reported interval (band), with the paper's φ dashed: drift is seen,
    not read. None without per-budget refits (fit.json ``law_check.per_budget_phi``)."""
    check = doc.get("law_check") or {}
    rows = [row for row in check.get("per_budget_phi") or [] if row.get("phi") is not None]
    phi = doc["fit"].get("phi")
    if not rows or phi is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    budgets = np.array([row["budget"] for row in rows])
    est = np.array([row["phi"] for row in rows])
    ci = [row.get("ci") if row.get("ci") and None not in row["ci"] else (v, v) for row, v in zip(rows, est)]
    lo, hi = np.array([c[0] for c in ci]), np.array([c[1] for c in ci])
    interval = doc["ci"].get("phi")
    if interval and None not in interval:
        ax.axhspan(*interval, color="tab:blue", alpha=0.15, label="constant-φ fit, its interval")
    unidentified = doc["diagnostics"].get("phi_identified") is False
    what = "point fit, not identified" if unidentified else "φ"
    ax.axhline(phi, color="tab:blue", lw=1.5, label=f"constant-φ fit: {what} = {phi:.3f}")
    ax.axhline(JOINT_FIT["phi"], color="tab:red", ls="--", lw=1.0, label=f"paper: φ = {JOINT_FIT['phi']}")
    ax.errorbar(
        budgets,
        est,
        yerr=np.clip([est - lo, hi - est], 0, None),
        fmt="o",
        color="black",
        capsize=4,
        label="per budget",
    )
    for name, half in (check.get("halves") or {}).items():
        if half and half.get("phi") is not None and half.get("budgets"):
            span = (min(half["budgets"]) / 1.08, max(half["budgets"]) * 1.08)
            ax.plot(span, [half["phi"]] * 2, color="tab:green", lw=3, alpha=0.6)
            ax.annotate(
                f"{name} half",
                (span[0], half["phi"]),
                fontsize=7,
                color="tab:green",
                xytext=(0, 3),
                textcoords="offset points",
            )
    ax.set_xscale("log")
    ax.set_xticks(budgets, [flops_label(b) for b in budgets])
    ax.minorticks_off()
    ax.set_xlim(budgets.min() / 1.3, budgets.max() * 1.3)
    ax.set_xlabel("compute budget C (FLOPs)")
    ax.set_ylabel("φ")
    ax.set_title("φ refitted per budget against one constant φ", fontsize=10)
    ax.legend(fontsize=7.5, loc="best")
    fig.tight_layout()
    return save_figure(fig, stem)


def caption(path: Path) -> str:
    """The caption of a report figure, by its file name (the stem itself for an unknown one)."""
    return {
        "collapse": "Data collapse: L − B·D^−β against N_eff = N_once + r^φ·N_rec (log x) with the fitted φ, "
        "φ = 0 and φ = 1, each with its own form's coefficients; the line is E + A·N_eff^−α. When φ is "
        "right every r falls on one curve (panel titles give each form's RMSE).",
        "loop_tax": "The loop tax: per budget, loss against N for each r (points) with the fitted joint law "
        "(lines), the parabola in log N and its vertex (star) where the widths bracket it.",
        "loss_change_by_r": "Is it φ? The loss change of every seed-matched pair (variant − base at one "
        "budget, width, r and seed; colour: budget) against r, its mean per r (±2 SE), and what each effect "
        "model predicts (base-law token part + the model's excess; the chosen one bold): a change of φ must "
        "grow with r, an offset is flat, a token gain follows the token part.",
        "excess_by_width": "Is it one constant? The excess of every seed-matched pair beyond the base law's "
        "token part against width (log x; colour: r, r = 1 pairs hollow), the mean per (r, width) "
        "cluster, and the slope of the excess left beyond the chosen model along log width with its "
        "interval: a constant effect leaves a flat band, one that grows with size a slope.",
        "isoflop": "Iso-FLOP curves per r: observed final validation loss (points), the fitted joint law "
        "(lines), the parabola in log N (dotted) and its vertex (star) where bracketed; cells marked "
        '"not bracketed" have no vertex.',
        "phi_profile": "Profile likelihood of φ: deviance against φ with the χ²₁ threshold, the profile "
        "interval (shaded), the bootstrap CI (dashed) and φ̂.",
        "phi_bootstrap": "Block-bootstrap distribution of φ with the point estimate and the 95% CI.",
        "residuals": "Residuals of the joint fit (observed − predicted, nats) against N and D.",
        "residuals_vs_width": "Residuals of the fit (observed − predicted, nats) against width, one panel "
        "per r, coloured by budget, with the mean per width: a law that describes the runs leaves a flat "
        "band around 0 in every panel.",
        "frontier": "Compute-optimal loss L* and size N* per r from the fitted law.",
        "phi_per_budget": "φ refitted per budget (E, α, β shared within a refit; points with their CIs) and "
        "per half of the budgets (segments), against the constant-φ fit (line, its interval shaded) and the "
        "paper's φ (dashed): a law with one constant φ puts every point on the line.",
        "delta_phi_per_budget": "Δφ per budget (both arms refitted at each budget with E, α, β of the pooled "
        "shared fit held; run-bootstrap 95% CIs); band: the pooled shared estimate and its interval; dashed: "
        "the paper's effect for this case study.",
        "isoflop_arms": "Iso-FLOP curves of both arms, one panel per budget: loss against N, colour by r; "
        "filled markers and solid lines the base, open markers and dashed lines the variant (r = 1: the "
        "shared anchors).",
        "axes": "Downstream axis continuation loss against validation loss, per r (loopscale eval-sweep).",
    }.get(path.stem, path.stem)
