"""Figures of a fitted protocol (matplotlib, Agg backend), each written as PNG and SVG.

- ``collapse``: the data collapse. L − B·D^(−β) against N_eff = N_once + r^φ·N_rec (log x) for every run,
  with the fitted φ, with φ = 0 and with φ = 1 side by side (each panel uses its own form's coefficients;
  the line is E + A·N_eff^(−α)). When φ is right, every r falls on one curve;
- ``loop_tax``: one panel per budget, loss against N per r with the fitted joint law, so the gap between
  the r curves at equal compute (the loop tax) is read off directly; parabola vertices marked;
- ``isoflop``: one panel per r, loss against N per budget with the fitted law along each iso-FLOP curve,
  the least-squares parabola in log N and its vertex where the curve brackets it; a cell whose vertex is
  not bracketed is marked "not bracketed" in the legend and gets no vertex;
- ``phi_profile``: the profile-likelihood deviance of φ with the χ²₁ threshold, the profile interval,
  the bootstrap CI and φ̂ (only when the protocol computed a profile);
- ``phi_bootstrap``: the bootstrap distribution of φ with the point estimate and the percentile CI;
- ``residuals``: observed − predicted (nats) against N and against D, coloured by r;
- ``frontier``: the compute-optimal L* and N* per r against compute.

Log axes get at most a handful of labelled ticks (1, 2, 5 × 10^k or sparser) in compact units (``20K``,
``2e11``) so tick labels never overlap; ``tests/fit/test_plots.py`` checks every figure for overlaps.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from loopscale.fit.law import law_loss
from loopscale.fit.protocol import Protocol
from loopscale.fit.table import RunTable
from loopscale.io import atomic_write

#: Every figure ``plot_protocol`` can write, in the order a reader wants them.
FIGURES = ("collapse", "loop_tax", "isoflop", "phi_profile", "phi_bootstrap", "residuals", "frontier")


def _save(fig, out_dir: Path, name: str) -> list[Path]:
    paths = []
    for ext in ("png", "svg"):
        path = out_dir / f"{name}.{ext}"
        atomic_write(path, lambda tmp, ext=ext: fig.savefig(tmp, format=ext, dpi=130, bbox_inches="tight"))
        paths.append(path)
    return paths


def plot_protocol(
    protocol: Protocol, table: RunTable, out_dir: str | Path, baselines: dict | None = None
) -> list[Path]:
    """Write the protocol's figures into ``out_dir`` and return their paths (PNG and SVG of each).

    ``baselines`` ({"unigram": nats, "bigram": nats} on the runs' validation tokens) draws the bigram
    table's loss on the loss-vs-size figures, so a reader sees whether the runs learned more than it."""
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for name, fig in protocol_figures(protocol, table, baselines):
        try:
            paths += _save(fig, out_dir, name)
        finally:
            plt.close(fig)
    return paths


def interval_text(interval, open_ends=(False, False), digits: int = 3) -> str:
    """``[lo, hi]`` with an end that is None or open (at the box edge or the end of the grid) marked open."""
    ends = []
    for value, is_open in zip(interval, open_ends):
        if value is None:
            ends.append("open")
        else:
            ends.append(f"{value:.{digits}f}" + (" (open)" if is_open else ""))
    return f"[{ends[0]}, {ends[1]}]"


# --- axes -------------------------------------------------------------------------------------------------


def count_label(x: float, _pos=None) -> str:
    """A parameter or token count as a short tick label: 500, 8K, 1.5M, 2B."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def flops_label(x: float, _pos=None) -> str:
    """Training FLOPs as a short tick label: 2e11, 1e12."""
    if x <= 0:
        return f"{x:g}"
    exponent = math.floor(math.log10(x) + 1e-9)
    mantissa = x / 10**exponent
    return f"{mantissa:.2g}e{exponent}"


def _log_locator(max_ticks: int = 6):
    from matplotlib.ticker import Locator

    class LogTicks(Locator):
        """Ticks at s·10^k for the densest ``subs`` that keeps at most ``max_ticks`` inside the view
        (sparser decades when even 10^k alone is too many): never a crowd of minor-tick labels."""

        SUBS = (
            (1.0,),
            (1.0, 3.0),
            (1.0, 2.0, 5.0),
            (1.0, 2.0, 3.0, 5.0, 7.0),
            tuple(float(s) for s in range(1, 10)),
        )

        def __call__(self):
            vmin, vmax = self.axis.get_view_interval()
            return self.tick_values(vmin, vmax)

        def tick_values(self, vmin, vmax):
            lo, hi = sorted((float(vmin), float(vmax)))
            if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= 0:
                return np.array([])
            lo = max(lo, hi * 1e-12)
            d0, d1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
            chosen = None
            for subs in self.SUBS:
                ticks = [s * 10.0**d for d in range(d0 - 1, d1 + 1) for s in subs]
                inside = [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
                if len(inside) > max_ticks:
                    break
                chosen = ticks
                if len(inside) >= 3:
                    break
            if chosen is None:  # too many decades even for 10^k alone: every step-th decade
                step = math.ceil((d1 - d0 + 1) / max_ticks)
                chosen = [10.0**d for d in range(d0 - d0 % step - step, d1 + step, step)]
            return np.array(chosen)

    return LogTicks()


def _log_axis(ax, which: str = "x", label=count_label) -> None:
    """Log scale with a few labelled ticks in compact units and unlabelled minor ticks."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis.set_major_locator(_log_locator())
    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_formatter(NullFormatter())


def _linear_ticks(ax, which: str = "both") -> None:
    from matplotlib.ticker import MaxNLocator

    for axis in (ax.xaxis, ax.yaxis) if which == "both" else ((ax.xaxis,) if which == "x" else (ax.yaxis,)):
        axis.set_major_locator(MaxNLocator(nbins=6))


def _r_colors(rs: list[int]) -> dict[int, tuple]:
    import matplotlib.pyplot as plt

    palette = plt.get_cmap("tab10")
    return {r: palette(i % 10) for i, r in enumerate(rs)}


# --- figures ----------------------------------------------------------------------------------------------


def protocol_figures(
    protocol: Protocol, table: RunTable, baselines: dict | None = None
) -> Iterator[tuple[str, object]]:
    """Yield (name, open matplotlib Figure) for every figure the protocol supports, in ``FIGURES`` order.

    The caller closes each figure (``plot_protocol`` saves and closes it)."""
    import matplotlib

    matplotlib.use("Agg")

    rs = sorted(set(table.r.tolist()))
    colors = _r_colors(rs)
    minima = {(m["budget"], m["r"]): m for m in protocol.cell_minima}
    builders = (
        ("collapse", lambda: _collapse(protocol, table, rs, colors)),
        ("loop_tax", lambda: _loop_tax(protocol, table, rs, colors, minima, baselines)),
        ("isoflop", lambda: _isoflop(protocol, table, rs, minima, baselines)),
        ("phi_profile", lambda: _phi_profile(protocol)),
        ("phi_bootstrap", lambda: _phi_bootstrap(protocol)),
        ("residuals", lambda: _residuals(protocol, table, rs, colors)),
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
        _log_axis(ax, "x")
        _linear_ticks(ax, "y")
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


def _parabola(ax, table: RunTable, mask: np.ndarray, m: dict | None, color) -> None:
    """Dotted least-squares parabola in log N through a cell's runs and a star at its vertex, only where
    the protocol found the vertex bracketed by the widths run."""
    if m is None or not m["bracketed"]:
        return
    log_n, loss = np.log(table.n[mask]), table.loss[mask]
    coef = np.polyfit(log_n, loss, 2)
    x = np.linspace(log_n.min(), log_n.max(), 60)
    ax.plot(np.exp(x), np.polyval(coef, x), ls=":", lw=1.0, color=color)
    ax.scatter(
        [m["n_star"]], [m["loss_star"]], marker="*", s=130, color=color, edgecolor="k", lw=0.6, zorder=4
    )


def _vertex_handles():
    from matplotlib.lines import Line2D

    return [
        Line2D([], [], color="0.3", lw=1.2, label="fitted joint law"),
        Line2D([], [], color="0.3", lw=1.0, ls=":", label="parabola in log N"),
        Line2D([], [], color="0.5", marker="*", ms=11, mec="k", lw=0, label="vertex (bracketed)"),
    ]


def _side_legend(ax, extra=()) -> None:
    """The panel's legend (plus ``extra`` handles) to the right of the panel, clear of the data."""
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=[*handles, *extra], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _baseline_line(ax, baselines: dict | None) -> None:
    """The bigram table's validation loss as a dotted line (the unigram's in its label: it is far above)."""
    if baselines:
        ax.axhline(
            baselines["bigram"],
            ls=":",
            lw=1.2,
            color="0.35",
            label=f"bigram table {baselines['bigram']:.2f} (unigram {baselines['unigram']:.2f})",
        )


def _loop_tax(protocol: Protocol, table: RunTable, rs, colors, minima, baselines=None):
    import matplotlib.pyplot as plt

    if not table.has_budget or protocol.fit.phi is None:
        return None
    budgets = sorted(set(table.budget.tolist()))
    cols = min(3, len(budgets))
    rows = -(-len(budgets) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(6.2 * cols, 3.9 * rows), squeeze=False, layout="constrained"
    )
    for ax, c in zip(axes.flat, budgets):
        for r in rs:
            mask = (table.budget == c) & (table.r == r)
            if not mask.any():
                continue
            m = minima.get((c, r))
            label = f"r = {r}" + ("" if m is None or m["bracketed"] else " (not bracketed)")
            order = np.argsort(table.n[mask])
            ax.scatter(
                table.n[mask][order], table.loss[mask][order], s=20, color=colors[r], label=label, zorder=3
            )
            if mask.sum() >= 2:
                ax.plot(*_law_along(protocol.fit, table, mask), color=colors[r], lw=1.2)
            if mask.sum() >= 3:
                _parabola(ax, table, mask, m, colors[r])
        ax.set_title(f"C = {flops_label(c)} FLOPs", fontsize=10)
        _baseline_line(ax, baselines)
        _log_axis(ax, "x")
        _linear_ticks(ax, "y")
        ax.set_xlabel("unique non-embedding parameters N")
        ax.set_ylabel("validation loss (nats)")
        _side_legend(ax, _vertex_handles())
    for ax in list(axes.flat)[len(budgets) :]:
        ax.set_visible(False)
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
        for shade, c in zip(shades, budgets):
            mask = (table.r == r) & ((table.budget == c) if table.has_budget else True)
            if not mask.any():
                continue
            label = None
            if table.has_budget:
                m = minima.get((c, r))
                label = f"C = {flops_label(c)}" + ("" if m is None or m["bracketed"] else " (not bracketed)")
            ax.scatter(table.n[mask], table.loss[mask], color=shade, s=18, zorder=3, label=label)
            if table.has_budget and mask.sum() >= 2:
                ax.plot(*_law_along(fit, table, mask), color=shade, lw=1.2)
            if table.has_budget and mask.sum() >= 3:
                _parabola(ax, table, mask, minima.get((c, r)), shade)
        _baseline_line(ax, baselines)
        _log_axis(ax, "x")
        _linear_ticks(ax, "y")
        ax.set_title(f"r = {r}")
        ax.set_xlabel("unique non-embedding parameters N")
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel("validation loss (nats)")
        if table.has_budget:
            _side_legend(ax, _vertex_handles())
    for ax in list(axes.flat)[len(rs) :]:
        ax.set_visible(False)
    fig.suptitle(f"iso-FLOP curves with the fitted {fit.form} law and the parabola vertices")
    return fig


def _phi_profile(protocol: Protocol):
    import matplotlib.pyplot as plt

    prof = protocol.profile
    if not prof or protocol.fit.phi is None:
        return None
    phi = np.asarray(prof["phi"], dtype=float)
    dev = np.array([math.nan if v is None else float(v) for v in prof["deviance"]])
    order = np.argsort(phi)
    phi, dev = phi[order], dev[order]
    threshold = float(prof["threshold"])
    pct = f"{100 * prof['level']:.0f}%"
    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    lo, hi = prof["interval"]
    ax.axvspan(
        phi.min() if lo is None else lo,
        phi.max() if hi is None else hi,
        color="C2",
        alpha=0.18,
        label=f"profile {pct} interval {interval_text(prof['interval'], prof['open'])}",
    )
    ax.plot(phi, dev, "o-", ms=3, lw=1.2, color="k", label="profile deviance", zorder=3)
    ax.axhline(threshold, ls="--", lw=1.0, color="0.4", label=f"χ²₁ {pct} threshold {threshold:.2f}")
    if "phi" in protocol.ci:
        b_lo, b_hi = protocol.ci["phi"]
        ax.axvline(b_lo, ls="--", color="C0", label=f"bootstrap {pct} CI {interval_text((b_lo, b_hi))}")
        ax.axvline(b_hi, ls="--", color="C0")
    ax.axvline(protocol.fit.phi, color="C3", label=f"φ̂ = {protocol.fit.phi:.3f}")
    if prof.get("phi_hat") is not None:  # the profile's own (least-squares) minimum, when it reports one
        ax.axvline(prof["phi_hat"], color="C3", ls=":", label=f"profile minimum φ = {prof['phi_hat']:.3f}")
    finite = dev[np.isfinite(dev)]
    top = max(2.5 * threshold, min(float(finite.max()) if finite.size else 0.0, 6 * threshold))
    ax.set_ylim(min(0.0, float(finite.min()) if finite.size else 0.0) - 0.05 * top, 1.08 * top)
    # Zoom on what the figure is about: the part of the curve under the top of the plot, both intervals, φ̂.
    shown = [*phi[np.isfinite(dev) & (dev <= top)], *(v for v in prof["interval"] if v is not None)]
    shown += [protocol.fit.phi, *protocol.ci.get("phi", [])]
    lo_x, hi_x = min(shown), max(shown)
    pad = 0.08 * max(hi_x - lo_x, 0.05)
    ax.set_xlim(max(lo_x - pad, phi.min() - pad), min(hi_x + pad, phi.max() + pad))
    _linear_ticks(ax)
    ax.set_xlabel("φ")
    ax.set_ylabel("profile deviance")
    ax.set_title("profile likelihood of φ (other parameters refitted at each φ)", fontsize=10)
    ax.legend(fontsize=7)
    return fig


def _phi_bootstrap(protocol: Protocol):
    import matplotlib.pyplot as plt

    if protocol.bootstrap is None or "phi" not in protocol.bootstrap["samples"]:
        return None
    fit = protocol.fit
    phis = protocol.bootstrap["samples"]["phi"]
    lo, hi = protocol.ci["phi"]
    fig, ax = plt.subplots(figsize=(5.5, 3.8), layout="constrained")
    ax.hist(phis, bins=30, color="0.7", edgecolor="0.4")
    ax.axvline(fit.phi, color="C3", label=f"φ̂ = {fit.phi:.3f}")
    for v in (lo, hi):
        ax.axvline(v, color="C0", ls="--")
    _linear_ticks(ax)
    ax.set_title(f"bootstrap φ: {100 * protocol.bootstrap['level']:.0f}% CI {interval_text((lo, hi))}")
    ax.set_xlabel("φ")
    ax.set_ylabel("resamples")
    ax.legend()
    return fig


def _residuals(protocol: Protocol, table: RunTable, rs, colors):
    import matplotlib.pyplot as plt

    resid = table.loss - protocol.fit.predict_table(table)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True, layout="constrained")
    for ax, x, label in ((axes[0], table.n, "unique parameters N"), (axes[1], table.tokens, "tokens D")):
        for r in rs:
            m = table.r == r
            ax.scatter(x[m], resid[m], s=16, color=colors[r], label=f"r = {r}")
        ax.axhline(0, color="0.3", lw=0.8)
        _log_axis(ax, "x")
        _linear_ticks(ax, "y")
        ax.set_xlabel(label)
    axes[0].set_ylabel("observed − predicted (nats)")
    axes[0].legend(fontsize=8)
    return fig


def _unidentified(row: dict) -> bool:
    """A law optimum on the edge of the legal widths or outside the widths run: not identified by the runs."""
    return bool(row.get("at_edge")) or row.get("within_widths_run") is False


def _frontier(protocol: Protocol, colors):
    import matplotlib.pyplot as plt

    if protocol.compute_optimal is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), layout="constrained")
    any_open = False
    for key, entry in protocol.compute_optimal["per_r"].items():
        rows = entry["rows"]
        c = np.array([row["budget"] for row in rows])
        open_ = np.array([_unidentified(row) for row in rows])
        any_open |= bool(open_.any())
        color = colors.get(int(key), "k")
        exponent = f" (a_N = {entry['a_N']:.2f})" if "a_N" in entry and not open_.any() else ""
        for ax, values in ((axes[0], [row["loss"] for row in rows]), (axes[1], [row["n"] for row in rows])):
            values = np.array(values)
            ax.plot(c, values, "-" if not open_.any() else ":", color=color, label=f"r = {key}{exponent}")
            ax.scatter(c[~open_], values[~open_], color=color, zorder=3)
            ax.scatter(c[open_], values[open_], facecolors="none", edgecolors=color, zorder=3)
    for ax in axes:
        _log_axis(ax, "x", flops_label)
        ax.set_xlabel("training compute C (FLOPs)")
    _side_legend(axes[1])
    _linear_ticks(axes[0], "y")
    _log_axis(axes[1], "y")
    axes[0].set_ylabel("compute-optimal loss L* (nats)")
    axes[1].set_ylabel("compute-optimal N*")
    if any_open:
        fig.suptitle(
            "open markers, dotted lines: the law's optimum lies at the edge of the legal widths or outside "
            "the widths run (not identified by the runs)",
            fontsize=9,
        )
    return fig
