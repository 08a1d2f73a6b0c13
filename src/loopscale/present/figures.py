"""Figures beyond ``present.plots.plot_protocol``'s, and how every figure is written (PNG for report.md, SVG
with its text kept as text for report.html): φ per budget with its intervals against the constant-φ fit (the
second figure of the first screen) and the downstream axes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from loopscale.fit.labels import flops_label
from loopscale.fit.protocol_results import ProtocolResult
from loopscale.paper import JOINT_FIT
from loopscale.present.plot_axes import no_data_note, panel_grid

#: matplotlib settings for every figure the report writes: SVG text stays text (searchable, crisp)
SVG_TEXT = {"svg.fonttype": "none"}


def svg_text():
    """A context in which figures are saved with SVG text as text (``SVG_TEXT``)."""
    import matplotlib

    return matplotlib.rc_context(SVG_TEXT)


def save_figure(fig, stem: Path) -> Path:
    """Write ``fig`` as STEM.png and STEM.svg (``present.plots``' writer), close it, return the PNG's path."""
    import matplotlib.pyplot as plt

    from loopscale.present.plots import _save

    try:
        with svg_text():
            _save(fig, stem.parent, stem.name)
    finally:
        plt.close(fig)
    return stem.with_suffix(".png")


def phi_per_budget_figure(doc: ProtocolResult, stem: Path) -> Path | None:
    """φ refitted per budget (points, with their CIs) and per half of the budgets (segments) against the
    constant-φ fit's φ (line) and its reported interval (band), with the paper's φ dashed: drift is seen,
    not read. None without per-budget refits (fit.json ``law_check.per_budget_phi``)."""
    check = doc.law_check
    rows = [] if check is None else [row for row in check.per_budget_phi if row.phi is not None]
    phi = doc.fit.phi
    if not rows or phi is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    budgets = np.array([row.budget for row in rows])
    est = np.array([row.phi for row in rows])
    ci = [row.ci or (v, v) for row, v in zip(rows, est)]
    lo, hi = np.array([c[0] for c in ci]), np.array([c[1] for c in ci])
    interval = doc.phi_ci
    if interval and None not in interval:
        ax.axhspan(*interval, color="tab:blue", alpha=0.15, label="constant-φ fit, its interval")
    unidentified = doc.phi_identified is False
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
    for half in check.halves:
        if half.phi is not None and half.budgets:
            span = (min(half.budgets) / 1.08, max(half.budgets) * 1.08)
            ax.plot(span, [half.phi] * 2, color="tab:green", lw=3, alpha=0.6)
            ax.annotate(
                f"{half.half} half",
                (span[0], half.phi),
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


def axis_columns(rows: list[dict]) -> list[str]:
    """The downstream axis columns of the result rows (``axis_*``)."""
    return sorted({k for row in rows for k in row if k.startswith("axis_")})


def axis_plots(rows: list[dict], out_dir: Path) -> list[Path]:
    """axes.png and axes.svg: ``axis_figure`` of the rows; the PNG's path (nothing when no run was
    evaluated)."""
    fig = axis_figure(rows)
    return [] if fig is None else [save_figure(fig, out_dir / "axes")]


def axis_figure(rows: list[dict]):
    """Axis continuation loss vs validation loss (nats), one panel per axis, coloured by r; a panel whose
    axis no run has a loss on says "no data". None without axis columns or finished runs."""
    axes = axis_columns(rows)
    ok = [row for row in rows if row["status"] == "ok"]
    if not axes or not ok:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs = sorted({row["r"] for row in ok})
    colors = {r: plt.cm.viridis(i / max(1, len(rs) - 1)) for i, r in enumerate(rs)}
    n_rows, cols = panel_grid(len(axes))
    fig, grid = plt.subplots(n_rows, cols, figsize=(4.5 * cols, 3.6 * n_rows), squeeze=False)
    for ax, name in zip(grid.flat, axes):
        for r in rs:
            pts = [
                (row["loss"], row[name])
                for row in ok
                if row["r"] == r and math.isfinite(row.get(name, math.nan))
            ]
            if pts:
                ax.scatter(*zip(*pts), color=colors[r], s=16, label=f"r={r}")
        if not ax.has_data():  # an axis whose tasks had no data (e.g. math_word_problems without ASDiv)
            no_data_note(ax, "no data: no run has a loss on this axis")
        ax.set(title=name.removeprefix("axis_"), xlabel="validation loss (nats)", ylabel="axis loss (nats)")
    for ax in list(grid.flat)[len(axes) :]:
        ax.set_visible(False)
    with_data = [ax for ax in grid.flat if ax.get_legend_handles_labels()[0]]
    if with_data:
        with_data[0].legend(fontsize=8)
    fig.tight_layout()
    return fig
