"""The case study's figures (a ``pairs.case_study.compare_arms`` document, and its arms): the loss change per
r with the effect models' curves, the excess against width, Δφ per budget against the paper's, and the two
arms' iso-FLOP curves. Each is written as STEM.png and STEM.svg; the PNG's path is returned. The two figures
of the pairs are Display objects (``EffectsDisplay``, ``ExcessByWidthDisplay``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loopscale.fit.labels import flops_label
from loopscale.pairs.case_study_results import CaseStudy
from loopscale.pairs.results import PairedEffects
from loopscale.paper import paper_effect
from loopscale.present.figures import save_figure
from loopscale.present.numbers import interval


def _axes(ax):
    """(figure, axes) to draw on: ``ax``'s, or a new 8 × 4.4 in figure's (the Agg backend: no display)."""
    if ax is not None:
        return ax.figure, ax
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(8.0, 4.4))


@dataclass
class _PairsDisplay:
    """A figure of ``PairedEffects`` in scikit-learn's Display style: ``from_result(effects, name)``,
    ``plot(ax=None)`` draws it (on ``ax`` or a new figure) and keeps ``figure_``/``ax_``, ``save(stem)``
    writes STEM.png and STEM.svg. The report, ``price`` and the case study draw it from the same object."""

    effects: PairedEffects
    name: str
    reference: str = "base"  # what the variant's runs were paired with (another arm: ``price --against``)
    figure_: object = None
    ax_: object = None

    @classmethod
    def from_result(cls, effects: PairedEffects, name: str, reference: str = "base"):
        return cls(effects, name, reference)

    def save(self, stem: Path) -> Path:
        """STEM.png and STEM.svg (the figure closed) → the PNG's path."""
        self.figure_.tight_layout()
        return save_figure(self.figure_, stem)


@dataclass
class ExcessByWidthDisplay(_PairsDisplay):
    """Is it one constant? The pairs' excess (beyond the token part) against width, per r, with each
    (r, width) cluster's mean and the chosen model's left-over slope along log width."""

    def plot(self, ax=None) -> ExcessByWidthDisplay:
        from loopscale.present.plots import _r_colors

        e = self.effects
        rows = e.pairs
        rs = sorted({row.r for row in rows})
        colors = _r_colors(rs)
        fig, ax = _axes(ax)
        rng = np.random.default_rng(0)
        for r in rs:
            pts = [row for row in rows if row.r == r]
            widths = np.array([row.width for row in pts])
            face = "white" if r == 1 else colors[r]
            x = widths * np.exp(rng.uniform(-0.03, 0.03, len(pts)))
            ax.plot(x, [row.excess for row in pts], "o", ms=3.5, alpha=0.5, color=colors[r], mfc=face)
            means = [(w, np.mean([row.excess for row in pts if row.width == w])) for w in sorted(set(widths))]
            ax.plot(
                *zip(*means), "s-", color=colors[r], mfc=face, ms=6, lw=1.2, label=f"r = {r}: mean per width"
            )
        trend = e.trend
        if trend is not None:
            widths = np.array(sorted({row.width for row in rows}))
            centre = float(np.mean([row.excess for row in rows]))
            x = np.log10(widths) - np.mean(np.log10([k[1] for k in _cluster_keys(rows)]))
            slope = f"left-over slope {trend.slope:+.3f} per decade {interval(trend.ci, signed=True)}"
            ax.plot(widths, centre + trend.slope * x, "k--", lw=1.5, label=slope)
        ax.axhline(0.0, color="black", lw=0.7)
        ax.set_xscale("log")
        ax.minorticks_off()
        ticks = sorted({row.width for row in rows})
        ax.set_xticks(ticks, [f"{w:.0f}" for w in ticks])
        ax.set_xlabel("width d")
        ax.set_ylabel("excess beyond the token part (nats)")
        ax.set_title(f"{self.name}: is it one constant? excess per matched pair against width", fontsize=10)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        self.figure_, self.ax_ = fig, ax
        return self


def _cluster_keys(rows) -> list[tuple[int, float]]:
    return sorted({(row.r, row.width) for row in rows})


@dataclass
class EffectsDisplay(_PairsDisplay):
    """Is it φ? The loss change (variant − base) per matched pair against r, with the mean per r and the
    curves of each effect model (token part + the model's excess, mean per r)."""

    def plot(self, ax=None) -> EffectsDisplay:
        import matplotlib.pyplot as plt

        e = self.effects
        rows = e.pairs
        rs = [int(r) for r in e.per_r]
        budgets = sorted({row.budget for row in rows})
        cmap = plt.get_cmap("viridis")
        fig, ax = _axes(ax)
        rng = np.random.default_rng(0)
        for i, c in enumerate(budgets):
            pts = [row for row in rows if row.budget == c]
            x = np.array([row.r for row in pts]) * np.exp(rng.uniform(-0.08, 0.08, len(pts)))
            color = cmap(i / max(len(budgets) - 1, 1))
            ax.plot(x, [row.change for row in pts], "o", ms=3.5, alpha=0.6, color=color,
                    label=f"pairs at C = {flops_label(c)}")  # fmt: skip
        styles = {"tokens only": ("gray", ":"), "delta phi": ("tab:red", "--"), "offset": ("tab:blue", "-."),
                  "offset + delta phi": ("tab:purple", "-")}  # fmt: skip
        shown = [model for model in e.models if model in styles or model == e.chosen]
        for model in shown:
            color, ls = styles.get(model, ("tab:green", "-"))
            y = [e.per_r[str(r)].predicted[model] for r in rs]
            width = 2.6 if model == e.chosen else 1.3
            label = f"model: {model}" + (" (chosen)" if model == e.chosen else "")
            ax.plot(rs, y, ls, color=color, lw=width, label=label)
        means = [e.per_r[str(r)].change for r in rs]
        sds = [e.per_r[str(r)].change_sd or np.nan for r in rs]  # one pair: no spread, no bar
        counts = [e.per_r[str(r)].pairs for r in rs]
        errors = [2 * sd / np.sqrt(n) for sd, n in zip(sds, counts)]
        ax.errorbar(
            rs, means, yerr=errors, fmt="s", color="black", ms=6, capsize=4, label="mean per r (±2 SE)"
        )
        ax.axhline(0.0, color="black", lw=0.7)
        ax.set_xscale("log", base=2)
        ax.set_xticks(rs, [str(r) for r in rs])
        ax.set_xlabel("loop count r")
        ax.set_ylabel(f"loss change, variant − {self.reference} (nats)")
        ax.set_title(f"{self.name}: is it φ? loss change per matched pair; chosen: {e.chosen}", fontsize=10)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        self.figure_, self.ax_ = fig, ax
        return self


def delta_phi_figure(doc: CaseStudy, stem: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc.estimated_budgets
    d = doc.delta_phi
    fig, ax = plt.subplots(figsize=(8.0, 4.2))
    x = np.arange(len(rows))
    if d.ci is not None:
        ax.axhspan(d.ci[0], d.ci[1], color="tab:blue", alpha=0.15, label="pooled shared Δφ, 95% CI")
    ax.axhline(d.estimate, color="tab:blue", lw=1.5, label=f"pooled Δφ = {d.estimate:+.3f}")
    ax.axhline(0.0, color="black", lw=0.8)
    effect = paper_effect(doc.name)
    if effect is not None:
        ax.axhline(effect[1], color="tab:red", ls="--", lw=1.2, label=f"paper: {effect[1]:+.3f}")
    est = np.array([row.delta_phi for row in rows])
    lo = np.array([row.ci[0] if row.ci else v for row, v in zip(rows, est)])
    hi = np.array([row.ci[1] if row.ci else v for row, v in zip(rows, est)])
    ax.errorbar(x, est, yerr=[est - lo, hi - est], fmt="o", color="black", capsize=4, label="per budget")
    ax.set_xticks(x, [flops_label(row.budget) for row in rows])
    ax.set_xlabel("compute budget C (FLOPs)")
    ax.set_ylabel("Δφ (variant − base)")
    ax.set_title(f"{doc.name}: Δφ per budget")
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
