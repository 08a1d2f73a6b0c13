"""Figures of a fitted protocol (matplotlib, Agg backend), each written as PNG and SVG.

- ``collapse``: the data collapse. L − B·D^(−β) against N_eff = N_once + r^φ·N_rec (log x) for every run,
  with the fitted φ, with φ = 0 and with φ = 1 side by side (each panel uses its own form's coefficients;
  the line is E + A·N_eff^(−α)). When φ is right, every r falls on one curve;
- ``loop_tax``: one panel per budget, loss against N per r with the fitted joint law, so the gap between
  the r curves at equal compute (the loop tax) is read off directly; parabola vertices marked, the cells
  whose vertex the widths do not bracket named in the panel; one legend for the figure;
- ``isoflop``: one panel per r, loss against N per budget with the fitted law along each iso-FLOP curve,
  the least-squares parabola in log N and its vertex where the curve brackets it; a cell whose vertex is
  not bracketed is marked "not bracketed" in the legend and gets no vertex;
- ``phi_profile``: the profile-likelihood deviance of φ with the χ²₁ threshold, the profile interval,
  the bootstrap CI and φ̂ (only when the protocol computed a profile);
- ``phi_bootstrap``: the bootstrap distribution of φ with the point estimate and the percentile CI, on a
  robust axis range (``robust_range``) with the number of resamples outside it written on the figure;
- ``residuals``: observed − predicted (nats) against N and against D, coloured by r;
- ``residuals_vs_width``: the same residuals against width, one panel per r, coloured by budget, with the
  mean per width (the law check's r × width misfit);
- ``frontier``: the compute-optimal L* and N* per r against compute.

Log axes get at most a handful of labelled ticks (1, 2, 5 × 10^k or sparser) in compact units (``20K``,
``2e11``) so tick labels never overlap (``tests/fit/test_plots.py`` checks every figure for overlaps); budgets
are written by ``labels.flops_label`` (``C = 1.25e13``), as in the report; a panel with nothing to show says
"no data" (``no_data_note``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from loopscale.fit.labels import flops_label
from loopscale.fit.law import law_loss
from loopscale.fit.protocol import Protocol
from loopscale.fit.protocol_results import BaselineValues, CellMinimum, FrontierRow
from loopscale.fit.table import RunTable
from loopscale.io import atomic_write
from loopscale.present.numbers import interval
from loopscale.present.plot_axes import linear_ticks, log_axis, panel_grid, robust_range
from loopscale.progress import progress

#: Every figure ``plot_protocol`` can write, in the order a reader wants them.
FIGURES = (
    "collapse",
    "loop_tax",
    "isoflop",
    "phi_profile",
    "phi_bootstrap",
    "residuals",
    "residuals_vs_width",
    "frontier",
)


def _save(fig, out_dir: Path, name: str) -> list[Path]:
    import matplotlib

    def write(tmp: Path, ext: str) -> None:
        fig.savefig(tmp, format=ext, dpi=130, bbox_inches="tight", metadata={"Date": None})

    paths = []
    # Rebuilt figures differ only where their content does: no date, and SVG ids hashed with a salt of the
    # figure's name (distinct figures inlined in one report.html keep distinct ids) instead of a random one.
    with matplotlib.rc_context({"svg.hashsalt": f"loopscale-{name}"}):
        for ext in ("png", "svg"):
            path = out_dir / f"{name}.{ext}"
            atomic_write(path, lambda tmp, ext=ext: write(tmp, ext))
            paths.append(path)
    return paths


def plot_protocol(
    protocol: Protocol, table: RunTable, out_dir: str | Path, baselines: BaselineValues | None = None
) -> list[Path]:
    """Write the protocol's figures into ``out_dir`` and return their paths (PNG and SVG of each).

    ``baselines`` (unigram and bigram nats on the runs' validation tokens) draws the bigram
    table's loss on the loss-vs-size figures, so a reader sees whether the runs learned more than it."""
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    figures = protocol_figures(protocol, table, baselines)
    for name, fig in progress(figures, "figures", "figure", total=len(FIGURES), upper_bound=True):
        try:
            paths += _save(fig, out_dir, name)
        finally:
            plt.close(fig)
    return paths


# --- axes -------------------------------------------------------------------------------------------------


def _r_colors(rs: list[int]) -> dict[int, tuple]:
    import matplotlib.pyplot as plt

    palette = plt.get_cmap("tab10")
    return {r: palette(i % 10) for i, r in enumerate(rs)}


# --- figures ----------------------------------------------------------------------------------------------


def protocol_figures(
    protocol: Protocol, table: RunTable, baselines: BaselineValues | None = None
) -> Iterator[tuple[str, object]]:
    """Yield (name, open matplotlib Figure) for every figure the protocol supports, in ``FIGURES`` order.

    The caller closes each figure (``plot_protocol`` saves and closes it)."""
    import matplotlib

    matplotlib.use("Agg")

    rs = sorted(set(table.r.tolist()))
    colors = _r_colors(rs)
    minima = {(m.budget, m.r): m for m in protocol.cell_minima}
    builders = (
        ("collapse", lambda: _collapse(protocol, table, rs, colors)),
        ("loop_tax", lambda: _loop_tax(protocol, table, rs, colors, minima, baselines)),
        ("isoflop", lambda: _isoflop(protocol, table, rs, minima, baselines)),
        ("phi_profile", lambda: _phi_profile(protocol)),
        ("phi_bootstrap", lambda: _phi_bootstrap(protocol)),
        ("residuals", lambda: _residuals(protocol, table, rs, colors)),
        ("residuals_vs_width", lambda: _residuals_vs_width(protocol, table, rs)),
        ("frontier", lambda: _frontier(protocol, colors)),
    )
    for name, build in builders:
        fig = build()
        if fig is not None:
            yield name, fig


def _collapse_forms(protocol: Protocol) -> list[tuple[str, dict]]:
    """(panel title, coefficients) of the free fit, φ = 0 and φ = 1 (those the protocol fitted)."""
    fit = protocol.fit
    if fit.phi is None:
        return []
    free = protocol.forms.get("joint", fit if fit.form == "joint" else None)
    out = []
    if free is not None:
        out.append((f"fitted φ = {free.phi:.3f}", free.coefficients))
    elif fit.form == "fixed_phi":
        out.append((f"φ fixed at {fit.phi:g}", fit.coefficients))
    for key, title in (("phi=0", "φ = 0 (loops add nothing)"), ("phi=1", "φ = 1 (a loop = a unique block)")):
        if key in protocol.forms and protocol.forms[key] is not free:
            out.append((title, protocol.forms[key].coefficients))
    return out


def _collapse(protocol: Protocol, table: RunTable, rs, colors):
    import matplotlib.pyplot as plt

    forms = _collapse_forms(protocol)
    if not forms:
        return None
    fig, axes = plt.subplots(
        1, len(forms), figsize=(4.8 * len(forms), 4.2), squeeze=False, sharey=True, layout="constrained"
    )
    for ax, (title, coef) in zip(axes.flat, forms):
        n_eff = table.n_once + table.r.astype(float) ** coef["phi"] * table.n_rec
        y = table.loss - coef["B"] * table.tokens ** (-coef["beta"])
        for r in rs:
            m = table.r == r
            ax.scatter(n_eff[m], y[m], s=18, color=colors[r], label=f"r = {r}", zorder=3)
        grid = np.geomspace(n_eff.min(), n_eff.max(), 100)
        ax.plot(
            grid, coef["E"] + coef["A"] * grid ** (-coef["alpha"]), color="k", lw=1.2, label="E + A·N_eff^−α"
        )
        pred = law_loss(coef, table.n_once, table.n_rec, table.r, table.tokens)
        rmse = float(np.sqrt(np.mean((table.loss - pred) ** 2)))
        ax.set_title(f"{title}\nRMSE {rmse:.4f} nats", fontsize=10)
        log_axis(ax, "x")
        linear_ticks(ax, "y")
        ax.set_xlabel("N_eff = N_once + r^φ·N_rec")
    axes.flat[0].set_ylabel("L − B·D^−β (nats)")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("data collapse: every r on one curve when φ is right")
    return fig


def _law_along(fit, table: RunTable, mask: np.ndarray):
    """The fitted law along one iso-FLOP curve: (N grid, predicted loss), with N_once and D interpolated
    log-log between the curve's runs."""
    order = np.argsort(table.n[mask])
    n = table.n[mask][order]
    grid = np.geomspace(n.min(), n.max(), 60)
    tokens = np.exp(np.interp(np.log(grid), np.log(n), np.log(table.tokens[mask][order])))
    # the once-applied share of N, not N_once itself: N_once may be 0 (everything counted as recurrent)
    once_share = np.interp(np.log(grid), np.log(n), (table.n_once[mask] / table.n[mask])[order])
    r = int(table.r[mask][0])
    return grid, fit.predict(once_share * grid, (1 - once_share) * grid, r, tokens)


def _parabola(ax, table: RunTable, mask: np.ndarray, m: CellMinimum | None, color) -> None:
    """Dotted least-squares parabola in log N through a cell's runs and a star at its vertex, only where
    the protocol found the vertex bracketed by the widths run."""
    if m is None or not m.bracketed:
        return
    log_n, loss = np.log(table.n[mask]), table.loss[mask]
    coef = np.polyfit(log_n, loss, 2)
    x = np.linspace(log_n.min(), log_n.max(), 60)
    ax.plot(np.exp(x), np.polyval(coef, x), ls=":", lw=1.0, color=color)
    ax.scatter([m.n_star], [m.loss_star], marker="*", s=130, color=color, edgecolor="k", lw=0.6, zorder=4)


def _vertex_handles(lone: bool = False):
    """Legend handles of the law's curves and vertices (``lone``: and of the law at a lone run)."""
    from matplotlib.lines import Line2D

    lone_run = Line2D([], [], color="0.3", marker="o", mfc="none", lw=0, label="fitted law at a lone run")
    return [
        Line2D([], [], color="0.3", lw=1.2, label="fitted joint law"),
        *([lone_run] if lone else []),
        Line2D([], [], color="0.3", lw=1.0, ls=":", label="parabola in log N"),
        Line2D([], [], color="0.5", marker="*", ms=11, mec="k", lw=0, label="vertex (bracketed)"),
    ]


def _side_legend(ax, extra=()) -> None:
    """The panel's legend (plus ``extra`` handles) to the right of the panel, clear of the data."""
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=[*handles, *extra], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _baseline_label(baselines: BaselineValues) -> str:
    return f"bigram table {baselines.bigram:.2f} (unigram {baselines.unigram:.2f})"


def _baseline_line(ax, baselines: BaselineValues | None) -> None:
    """The bigram table's validation loss as a dotted line (the unigram's in its label: it is far above)."""
    if baselines:
        ax.axhline(baselines.bigram, ls=":", lw=1.2, color="0.35", label=_baseline_label(baselines))


def _figure_legend(fig, axes, handles) -> None:
    """One legend for the whole figure: in the grid's first spare cell when it has one, else to the right
    of the panels (a legend repeated in every panel says the same thing n times)."""
    spare = [ax for ax in axes.flat if not ax.has_data() and not ax.texts]
    if spare:
        spare[0].axis("off")
        spare[0].legend(handles=handles, loc="center", fontsize=8, frameon=False)
        for ax in spare[1:]:
            ax.set_visible(False)
    else:
        fig.legend(handles=handles, loc="outside right upper", fontsize=8)


def _loop_tax(protocol: Protocol, table: RunTable, rs, colors, minima, baselines=None):
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    if not table.has_budget or protocol.fit.phi is None:
        return None
    budgets = sorted(set(table.budget.tolist()))
    rows, cols = panel_grid(len(budgets))
    fig, axes = plt.subplots(
        rows, cols, figsize=(4.8 * cols, 3.7 * rows), squeeze=False, layout="constrained"
    )
    for ax, c in zip(axes.flat, budgets):
        unbracketed = []
        for r in rs:
            mask = (table.budget == c) & (table.r == r)
            if not mask.any():
                continue
            m = minima.get((c, r))
            if m is not None and not m.bracketed:
                unbracketed.append(f"r = {r}")
            order = np.argsort(table.n[mask])
            ax.scatter(table.n[mask][order], table.loss[mask][order], s=20, color=colors[r], zorder=3)
            if mask.sum() >= 2:
                ax.plot(*_law_along(protocol.fit, table, mask), color=colors[r], lw=1.2)
            if mask.sum() >= 3:
                _parabola(ax, table, mask, m, colors[r])
        if unbracketed:
            ax.text(
                0.02, 0.02, "not bracketed: " + ", ".join(unbracketed), transform=ax.transAxes,
                fontsize=7, color="0.3", va="bottom",
            )  # fmt: skip
        ax.set_title(f"C = {flops_label(c)} FLOPs", fontsize=10)
        if baselines:
            ax.axhline(baselines.bigram, ls=":", lw=1.2, color="0.35")
        log_axis(ax, "x")
        linear_ticks(ax, "y")
        ax.set_xlabel("unique non-embedding parameters N")
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel("validation loss (nats)")
    handles = [Line2D([], [], color=colors[r], marker="o", lw=1.2, label=f"r = {r}") for r in rs]
    handles += _vertex_handles()
    if baselines:
        handles.append(Line2D([], [], ls=":", lw=1.2, color="0.35", label=_baseline_label(baselines)))
    _figure_legend(fig, axes, handles)
    fig.suptitle("the loop tax: loss per r at equal training compute")
    return fig


def _isoflop(protocol: Protocol, table: RunTable, rs, minima, baselines=None):
    import matplotlib.pyplot as plt

    fit = protocol.fit
    cols = min(2, len(rs))
    rows = -(-len(rs) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(7.2 * cols, 4 * rows), squeeze=False, sharey=True, layout="constrained"
    )
    budgets = sorted(set(table.budget.tolist())) if table.has_budget else [float("nan")]
    shades = plt.cm.plasma(np.linspace(0.05, 0.85, len(budgets)))
    for ax, r in zip(axes.flat, rs):
        lone = False
        for shade, c in zip(shades, budgets):
            mask = (table.r == r) & ((table.budget == c) if table.has_budget else True)
            if not mask.any():
                continue
            label = None
            if table.has_budget:
                m = minima.get((c, r))
                label = f"C = {flops_label(c)}" + ("" if m is None or m.bracketed else " (not bracketed)")
            ax.scatter(table.n[mask], table.loss[mask], color=shade, s=18, zorder=3, label=label)
            if table.has_budget and mask.sum() >= 2:
                ax.plot(*_law_along(fit, table, mask), color=shade, lw=1.2)
            elif table.has_budget:  # one width at this budget: no curve to draw, the law at the run itself
                lone = True
                predicted = fit.predict_table(table)[mask]
                ax.scatter(table.n[mask], predicted, s=40, facecolor="none", edgecolor=shade, zorder=3)
                ax.vlines(table.n[mask], table.loss[mask], predicted, color=shade, lw=0.8)
            if table.has_budget and mask.sum() >= 3:
                _parabola(ax, table, mask, minima.get((c, r)), shade)
        _baseline_line(ax, baselines)
        log_axis(ax, "x")
        linear_ticks(ax, "y")
        ax.set_title(f"r = {r}")
        ax.set_xlabel("unique non-embedding parameters N")
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel("validation loss (nats)")
        if table.has_budget:
            _side_legend(ax, _vertex_handles(lone))
    for ax in list(axes.flat)[len(rs) :]:
        ax.set_visible(False)
    fig.suptitle(f"iso-FLOP curves with the fitted {fit.form} law and the parabola vertices")
    return fig


def _phi_profile(protocol: Protocol):
    import matplotlib.pyplot as plt

    prof = protocol.profile
    if not prof or protocol.fit.phi is None:
        return None
    phi = np.asarray(prof.phi, dtype=float)
    dev = np.array([math.nan if v is None else float(v) for v in prof.deviance])
    order = np.argsort(phi)
    phi, dev = phi[order], dev[order]
    threshold = float(prof.threshold)
    pct = f"{100 * prof.level:.0f}%"
    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    lo, hi = prof.interval
    ax.axvspan(
        phi.min() if lo is None else lo,
        phi.max() if hi is None else hi,
        color="C2",
        alpha=0.18,
        label=f"profile {pct} interval {interval(prof.interval, open_ends=prof.open)}",
    )
    ax.plot(phi, dev, "o-", ms=3, lw=1.2, color="k", label="profile deviance", zorder=3)
    ax.axhline(threshold, ls="--", lw=1.0, color="0.4", label=f"χ²₁ {pct} threshold {threshold:.2f}")
    if "phi" in protocol.ci:
        b_lo, b_hi = protocol.ci["phi"]
        name = method_name(getattr(protocol, "ci_method", None))
        ax.axvline(b_lo, ls="--", color="C0", label=f"{name} {pct} CI {interval((b_lo, b_hi))}")
        ax.axvline(b_hi, ls="--", color="C0")
    ax.axvline(protocol.fit.phi, color="C3", label=f"φ̂ = {protocol.fit.phi:.3f}")
    # the profile's own (least-squares) minimum
    ax.axvline(prof.phi_hat, color="C3", ls=":", label=f"profile minimum φ = {prof.phi_hat:.3f}")
    finite = dev[np.isfinite(dev)]
    top = max(2.5 * threshold, min(float(finite.max()) if finite.size else 0.0, 6 * threshold))
    ax.set_ylim(min(0.0, float(finite.min()) if finite.size else 0.0) - 0.05 * top, 1.08 * top)
    # Zoom on what the figure is about: the part of the curve under the top of the plot, both intervals, φ̂.
    shown = [*phi[np.isfinite(dev) & (dev <= top)], *(v for v in prof.interval if v is not None)]
    shown += [protocol.fit.phi, *protocol.ci.get("phi", [])]
    lo_x, hi_x = min(shown), max(shown)
    pad = 0.08 * max(hi_x - lo_x, 0.05)
    ax.set_xlim(max(lo_x - pad, phi.min() - pad), min(hi_x + pad, phi.max() + pad))
    linear_ticks(ax)
    ax.set_xlabel("φ")
    ax.set_ylabel("profile deviance")
    ax.set_title("profile likelihood of φ (other parameters refitted at each φ)", fontsize=10)
    ax.legend(fontsize=7)
    return fig


def method_name(method: str | None) -> str:
    """An interval's method as a reader says it: "random-effects bootstrap", "cell bootstrap"."""
    return (method or "bootstrap").replace("_", " ").replace("random effects", "random-effects")


def _phi_bootstrap(protocol: Protocol):
    import matplotlib.pyplot as plt

    if protocol.bootstrap is None or "phi" not in protocol.bootstrap.samples:
        return None
    fit = protocol.fit
    phis = np.asarray(protocol.bootstrap.samples["phi"], dtype=float)
    phis = phis[np.isfinite(phis)]
    lo, hi = protocol.bootstrap.ci["phi"]  # this histogram's own percentile CI
    reported = protocol.ci.get("phi")  # the interval the report gives, when another method made it
    if reported is not None and list(reported) == [lo, hi]:
        reported = None
    x_lo, x_hi = robust_range(phis)
    in_view = [fit.phi, lo, hi, *(reported or [])]  # φ̂ and the CIs always in view
    x_lo, x_hi = min(x_lo, *in_view), max(x_hi, *in_view)
    inside = (phis >= x_lo) & (phis <= x_hi)
    fig, ax = plt.subplots(figsize=(5.5, 3.8), layout="constrained")
    ax.hist(phis[inside], bins=np.linspace(x_lo, x_hi, 31), color="0.7", edgecolor="0.4")
    ax.set_xlim(x_lo, x_hi)
    ax.axvline(fit.phi, color="C3", label=f"φ̂ = {fit.phi:.3f}")
    for v in (lo, hi):
        ax.axvline(v, color="C0", ls="--")
    if reported is not None:
        name = method_name(getattr(protocol, "ci_method", None))
        ax.axvspan(*reported, color="C2", alpha=0.15, label=f"reported: {name} CI {interval(reported)}")
    outside = int((~inside).sum())
    if outside:
        below, above = int((phis < x_lo).sum()), int((phis > x_hi).sum())
        ax.text(
            0.02, 0.97,
            f"{outside} resample{'s' if outside > 1 else ''} outside the axis: {below} below, {above} above",
            transform=ax.transAxes, fontsize=7, va="top", color="0.25",
        )  # fmt: skip
    linear_ticks(ax)
    level = f"{100 * protocol.bootstrap.level:.0f}%"
    ax.set_title(f"cell bootstrap φ: {level} CI {interval((lo, hi))}", fontsize=10)
    ax.set_xlabel("φ")
    ax.set_ylabel("resamples")
    ax.legend(loc="upper right", fontsize=8)
    return fig


def _residuals(protocol: Protocol, table: RunTable, rs, colors):
    import matplotlib.pyplot as plt

    resid = law_residuals(protocol, table)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True, layout="constrained")
    for ax, x, label in ((axes[0], table.n, "unique parameters N"), (axes[1], table.tokens, "tokens D")):
        for r in rs:
            m = table.r == r
            ax.scatter(x[m], resid[m], s=16, color=colors[r], label=f"r = {r}")
        ax.axhline(0, color="0.3", lw=0.8)
        log_axis(ax, "x")
        linear_ticks(ax, "y")
        ax.set_xlabel(label)
    axes[0].set_ylabel("observed − predicted (nats)")
    axes[0].legend(fontsize=8)
    return fig


def law_residuals(protocol: Protocol, table: RunTable) -> np.ndarray:
    """Observed − predicted loss of every run under the main fit (nats)."""
    return table.loss - protocol.fit.predict_table(table)


def _residuals_vs_width(protocol: Protocol, table: RunTable, rs):
    """Residuals against width, one panel per r, points coloured by budget and the mean per width joined:
    a law that describes the data leaves a flat band around 0 in every panel; a trend with width that
    differs between r is the (r × width) misfit of the law check's decomposition."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    if not np.all(np.isfinite(table.width)):
        return None
    resid = law_residuals(protocol, table)
    budgets = sorted(set(table.budget.tolist())) if table.has_budget else [math.nan]
    shades = dict(zip(budgets, plt.cm.plasma(np.linspace(0.05, 0.85, len(budgets)))))
    rows, cols = panel_grid(len(rs), max_cols=4)
    fig, axes = plt.subplots(
        rows, cols, figsize=(3.6 * cols, 3.2 * rows), squeeze=False, sharex=True, sharey=True,
        layout="constrained",
    )  # fmt: skip
    for ax, r in zip(axes.flat, rs):
        in_r = table.r == r
        for c in budgets:
            m = in_r & ((table.budget == c) if table.has_budget else True)
            ax.scatter(table.width[m], resid[m], s=16, color=shades[c], zorder=3)
        widths = np.unique(table.width[in_r])
        means = [resid[in_r & (table.width == w)].mean() for w in widths]
        ax.plot(widths, means, color="k", lw=1.2, marker="_", ms=10)
        ax.axhline(0, color="0.3", lw=0.8)
        ax.set_title(f"r = {r}", fontsize=10)
        log_axis(ax, "x")
        linear_ticks(ax, "y")
        ax.set_xlabel("width d")
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel("observed − predicted (nats)")
    handles = [Line2D([], [], color="k", lw=1.2, label="mean per width")]
    if table.has_budget:
        handles += [
            Line2D([], [], color=shades[c], marker="o", lw=0, label=f"C = {flops_label(c)}") for c in budgets
        ]
    _figure_legend(fig, axes, handles)
    fig.suptitle(f"residuals of the {protocol.fit.form} law against width, per r", fontsize=10)
    return fig


def _unidentified(row: FrontierRow) -> bool:
    """A law optimum on the edge of the legal widths or outside the widths run: not identified by the runs."""
    return row.at_edge or row.within_widths_run is False


def _frontier(protocol: Protocol, colors):
    import matplotlib.pyplot as plt

    if protocol.compute_optimal is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), layout="constrained")
    any_open = False
    for key, entry in protocol.compute_optimal.per_r.items():
        rows = entry.rows
        c = np.array([row.budget for row in rows])
        open_ = np.array([_unidentified(row) for row in rows])
        any_open |= bool(open_.any())
        color = colors.get(int(key), "k")
        exponent = f" (a_N = {entry.a_N:.2f})" if entry.a_N is not None and not open_.any() else ""
        for ax, values in ((axes[0], [row.loss for row in rows]), (axes[1], [row.n for row in rows])):
            values = np.array(values)
            ax.plot(c, values, "-" if not open_.any() else ":", color=color, label=f"r = {key}{exponent}")
            ax.scatter(c[~open_], values[~open_], color=color, zorder=3)
            ax.scatter(c[open_], values[open_], facecolors="none", edgecolors=color, zorder=3)
    for ax in axes:
        log_axis(ax, "x", flops_label)
        ax.set_xlabel("training compute C (FLOPs)")
    _side_legend(axes[1])
    linear_ticks(axes[0], "y")
    log_axis(axes[1], "y")
    axes[0].set_ylabel("compute-optimal loss L* (nats)")
    axes[1].set_ylabel("compute-optimal N*")
    if any_open:
        fig.suptitle(
            "open markers, dotted lines: the law's optimum lies at the edge of the legal widths or outside "
            "the widths run (not identified by the runs)",
            fontsize=9,
        )
    return fig
