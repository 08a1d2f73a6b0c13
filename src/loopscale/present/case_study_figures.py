"""The case study's figures (a ``fit.case_study.compare_arms`` document, and its arms): the loss change per
r with the effect models' curves, the excess against width, Δφ per budget against the paper's, and the two
arms' iso-FLOP curves. Each is written as STEM.png and STEM.svg; the PNG's path is returned."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loopscale.fit.labels import flops_label
from loopscale.paper import paper_effect
from loopscale.present.figures import save_figure
from loopscale.present.numbers import interval


def excess_width_figure(doc: dict, stem: Path) -> Path:
    """The pairs' excess (beyond the token part) against width, per r, with each (r, width) cluster's mean
    and the chosen model's left-over slope along log width (``fit.effects.width_trend``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from loopscale.present.plots import _r_colors

    e = doc["effects"]
    rows = e["pairs"]
    rs = sorted({row["r"] for row in rows})
    colors = _r_colors(rs)
    fig, ax = plt.subplots(figsize=(8.0, 4.4))
    rng = np.random.default_rng(0)
    for r in rs:
        pts = [row for row in rows if row["r"] == r]
        widths = np.array([row["width"] for row in pts])
        face = "white" if r == 1 else colors[r]
        x = widths * np.exp(rng.uniform(-0.03, 0.03, len(pts)))
        ax.plot(x, [row["excess"] for row in pts], "o", ms=3.5, alpha=0.5, color=colors[r], mfc=face)
        means = [
            (w, np.mean([row["excess"] for row in pts if row["width"] == w])) for w in sorted(set(widths))
        ]
        ax.plot(*zip(*means), "s-", color=colors[r], mfc=face, ms=6, lw=1.2, label=f"r = {r}: mean per width")
    trend = e.get("trend")
    if trend is not None:
        widths = np.array(sorted({row["width"] for row in rows}))
        centre = float(np.mean([row["excess"] for row in rows]))
        x = np.log10(widths) - np.mean(np.log10([k[1] for k in _cluster_keys(rows)]))
        slope = f"left-over slope {trend['slope']:+.3f} per decade {interval(trend['ci'], signed=True)}"
        ax.plot(widths, centre + trend["slope"] * x, "k--", lw=1.5, label=slope)
    ax.axhline(0.0, color="black", lw=0.7)
    ax.set_xscale("log")
    ax.minorticks_off()
    ticks = sorted({row["width"] for row in rows})
    ax.set_xticks(ticks, [f"{w:.0f}" for w in ticks])
    ax.set_xlabel("width d")
    ax.set_ylabel("excess beyond the token part (nats)")
    ax.set_title(f"{doc['name']}: is it one constant? excess per matched pair against width", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return save_figure(fig, stem)


def _cluster_keys(rows: list[dict]) -> list[tuple[int, float]]:
    return sorted({(row["r"], row["width"]) for row in rows})


def effects_figure(doc: dict, stem: Path) -> Path:
    """Loss change (variant − base) per matched pair against r, with the mean per r and the curves of each
    effect model (token part + the model's excess, mean per r)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    e = doc["effects"]
    rows = e["pairs"]
    rs = [int(r) for r in e["per_r"]]
    budgets = sorted({row["budget"] for row in rows})
    cmap = plt.get_cmap("viridis")
    fig, ax = plt.subplots(figsize=(8.0, 4.4))
    rng = np.random.default_rng(0)
    for i, c in enumerate(budgets):
        pts = [row for row in rows if row["budget"] == c]
        x = np.array([row["r"] for row in pts]) * np.exp(rng.uniform(-0.08, 0.08, len(pts)))
        color = cmap(i / max(len(budgets) - 1, 1))
        ax.plot(x, [row["change"] for row in pts], "o", ms=3.5, alpha=0.6, color=color,
                label=f"pairs at C = {flops_label(c)}")  # fmt: skip
    styles = {"tokens only": ("gray", ":"), "delta phi": ("tab:red", "--"), "offset": ("tab:blue", "-."),
              "offset + delta phi": ("tab:purple", "-")}  # fmt: skip
    shown = [name for name in e["models"] if name in styles or name == e["chosen"]]
    for name in shown:
        color, ls = styles.get(name, ("tab:green", "-"))
        y = [e["per_r"][str(r)]["predicted"][name] for r in rs]
        width = 2.6 if name == e["chosen"] else 1.3
        ax.plot(rs, y, ls, color=color, lw=width, label=f"model: {name}" + (" (chosen)" if name == e["chosen"]
                else ""))  # fmt: skip
    means = [e["per_r"][str(r)]["change"] for r in rs]
    sds = [e["per_r"][str(r)]["change_sd"] or np.nan for r in rs]  # one pair: no spread, no bar
    counts = [e["per_r"][str(r)]["pairs"] for r in rs]
    errors = [2 * sd / np.sqrt(n) for sd, n in zip(sds, counts)]
    ax.errorbar(rs, means, yerr=errors, fmt="s", color="black", ms=6, capsize=4, label="mean per r (±2 SE)")
    ax.axhline(0.0, color="black", lw=0.7)
    ax.set_xscale("log", base=2)
    ax.set_xticks(rs, [str(r) for r in rs])
    ax.set_xlabel("loop count r")
    ax.set_ylabel("loss change, variant − base (nats)")
    ax.set_title(f"{doc['name']}: is it φ? loss change per matched pair; chosen: {e['chosen']}", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return save_figure(fig, stem)


def delta_phi_figure(doc: dict, stem: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in doc["per_budget"] if row["delta_phi"] is not None]
    d = doc["delta_phi"]
    fig, ax = plt.subplots(figsize=(8.0, 4.2))
    x = np.arange(len(rows))
    if d["ci"] is not None:
        ax.axhspan(d["ci"][0], d["ci"][1], color="tab:blue", alpha=0.15, label="pooled shared Δφ, 95% CI")
    ax.axhline(d["estimate"], color="tab:blue", lw=1.5, label=f"pooled Δφ = {d['estimate']:+.3f}")
    ax.axhline(0.0, color="black", lw=0.8)
    effect = paper_effect(doc["name"])
    if effect is not None:
        ax.axhline(effect[1], color="tab:red", ls="--", lw=1.2, label=f"paper: {effect[1]:+.3f}")
    est = np.array([row["delta_phi"] for row in rows])
    lo = np.array([row["ci"][0] if row["ci"] else v for row, v in zip(rows, est)])
    hi = np.array([row["ci"][1] if row["ci"] else v for row, v in zip(rows, est)])
    ax.errorbar(x, est, yerr=[est - lo, hi - est], fmt="o", color="black", capsize=4, label="per budget")
    ax.set_xticks(x, [flops_label(row["budget"]) for row in rows])
    ax.set_xlabel("compute budget C (FLOPs)")
    ax.set_ylabel("Δφ (variant − base)")
    ax.set_title(f"{doc['name']}: Δφ per budget")
    ax.legend(fontsize=7, loc="best")
    return save_figure(fig, stem)


def isoflop_arms_figure(arms, stem: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from loopscale.present.plot_axes import log_axis, panel_grid
    from loopscale.present.plots import _r_colors

    t = arms.table
    budgets = sorted(set(t.budget.tolist()))
    rs = sorted(set(t.r.tolist()))
    colors = _r_colors(rs)
    nrows, ncols = panel_grid(len(budgets), max_cols=4)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 3.0 * nrows), squeeze=False, sharey=False)
    for ax, c in zip(axes.flat, budgets):
        for r in rs:
            for variant, style, face in ((False, "-", None), (True, "--", "white")):
                mask = (t.budget == c) & (t.r == r) & (arms.variant == variant)
                if not mask.any():
                    continue
                order = np.argsort(t.n[mask])
                n, loss = t.n[mask][order], t.loss[mask][order]
                ax.plot(n, loss, style, color=colors[r], lw=1.0)
                ax.plot(n, loss, "o", color=colors[r], mfc=face or colors[r], ms=4)
        ax.set_xscale("log")
        log_axis(ax, "x")
        ax.set_title(f"C = {flops_label(c)}", fontsize=9)
        ax.set_xlabel("N (parameters)")
        ax.set_ylabel("loss (nats)")
    for ax in list(axes.flat)[len(budgets) :]:
        ax.axis("off")
    handles = [plt.Line2D([], [], color=colors[r], marker="o", label=f"r = {r}") for r in rs]
    handles += [
        plt.Line2D([], [], color="gray", ls="-", marker="o", label="base"),
        plt.Line2D([], [], color="gray", ls="--", marker="o", mfc="white", label="variant"),
    ]
    fig.legend(handles=handles, loc="center right", fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.88, 1))
    return save_figure(fig, stem)
