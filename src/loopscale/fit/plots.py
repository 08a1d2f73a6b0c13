"""Figures of a fitted protocol (matplotlib, Agg backend), each written as PNG and SVG.

- ``isoflop``: observed loss vs N per (r, budget) with the fitted law along each iso-FLOP curve;
- ``phi_bootstrap``: the bootstrap distribution of φ with the point estimate and the percentile CI;
- ``residuals``: observed − predicted (nats) against N and against D, coloured by r;
- ``frontier``: the compute-optimal L* and N* per r against compute.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loopscale.fit.protocol import Protocol
from loopscale.fit.table import RunTable
from loopscale.io import atomic_write


def _save(fig, out_dir: Path, name: str) -> list[Path]:
    paths = []
    for ext in ("png", "svg"):
        path = out_dir / f"{name}.{ext}"
        atomic_write(path, lambda tmp, ext=ext: fig.savefig(tmp, format=ext, dpi=130, bbox_inches="tight"))
        paths.append(path)
    return paths


def plot_protocol(protocol: Protocol, table: RunTable, out_dir: str | Path) -> list[Path]:
    """Write the protocol's figures into ``out_dir`` and return their paths (PNG and SVG of each)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fit = protocol.fit
    rs = sorted(set(table.r.tolist()))
    colors = {r: plt.cm.viridis(i / max(1, len(rs) - 1)) for i, r in enumerate(rs)}
    paths: list[Path] = []

    # Iso-FLOP curves per r.
    cols = min(2, len(rs))
    rows = -(-len(rs) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(5.5 * cols, 4 * rows), squeeze=False, sharey=True, layout="constrained"
    )
    budgets = sorted(set(table.budget.tolist())) if table.has_budget else [float("nan")]
    shades = plt.cm.plasma(np.linspace(0.05, 0.85, len(budgets)))
    for ax, r in zip(axes.flat, rs):
        for shade, c in zip(shades, budgets):
            mask = (table.r == r) & ((table.budget == c) if table.has_budget else True)
            if not mask.any():
                continue
            order = np.argsort(table.n[mask])
            n = table.n[mask][order]
            ax.scatter(
                n,
                table.loss[mask][order],
                color=shade,
                s=18,
                zorder=3,
                label=f"C={c:.3g}" if table.has_budget else None,
            )
            if table.has_budget and mask.sum() >= 2:
                grid = np.geomspace(n.min(), n.max(), 60)
                interp = {
                    name: np.exp(
                        np.interp(np.log(grid), np.log(n), np.log(getattr(table, name)[mask][order]))
                    )
                    for name in ("n_once", "tokens")
                }
                n_rec = grid - interp["n_once"]
                ax.plot(grid, fit.predict(interp["n_once"], n_rec, r, interp["tokens"]), color=shade, lw=1.2)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"r = {r}")
        ax.set_xlabel("unique non-embedding parameters N")
        ax.set_ylabel("validation loss (nats)")
    for ax in list(axes.flat)[len(rs) :]:
        ax.set_visible(False)
    if table.has_budget:
        axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"iso-FLOP curves with the fitted {fit.form} law")
    paths += _save(fig, out_dir, "isoflop")
    plt.close(fig)

    # Bootstrap distribution of φ.
    if protocol.bootstrap is not None and "phi" in protocol.bootstrap["samples"]:
        phis = protocol.bootstrap["samples"]["phi"]
        lo, hi = protocol.ci["phi"]
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        ax.hist(phis, bins=30, color="0.7", edgecolor="0.4")
        ax.axvline(fit.phi, color="C3", label=f"φ = {fit.phi:.3f}")
        for v in (lo, hi):
            ax.axvline(v, color="C0", ls="--")
        ax.set_title(f"bootstrap φ: {100 * protocol.bootstrap['level']:.0f}% CI [{lo:.3f}, {hi:.3f}]")
        ax.set_xlabel("φ")
        ax.set_ylabel("resamples")
        ax.legend()
        paths += _save(fig, out_dir, "phi_bootstrap")
        plt.close(fig)

    # Residuals vs N and D.
    resid = table.loss - fit.predict_table(table)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, x, label in ((axes[0], table.n, "unique parameters N"), (axes[1], table.tokens, "tokens D")):
        for r in rs:
            m = table.r == r
            ax.scatter(x[m], resid[m], s=16, color=colors[r], label=f"r = {r}")
        ax.axhline(0, color="0.3", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel(label)
    axes[0].set_ylabel("observed − predicted (nats)")
    axes[0].legend(fontsize=8)
    paths += _save(fig, out_dir, "residuals")
    plt.close(fig)

    # Compute-optimal frontier.
    if protocol.compute_optimal is not None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
        for key, entry in protocol.compute_optimal["per_r"].items():
            c = [row["budget"] for row in entry["rows"]]
            color = colors.get(int(key), "k")
            axes[0].plot(c, [row["loss"] for row in entry["rows"]], "o-", color=color, label=f"r = {key}")
            axes[1].plot(
                c,
                [row["n"] for row in entry["rows"]],
                "o-",
                color=color,
                label=f"r = {key}" + (f" (a_N = {entry['a_N']:.2f})" if "a_N" in entry else ""),
            )
        for ax in axes:
            ax.set_xscale("log")
            ax.set_xlabel("training compute C (FLOPs)")
            ax.legend(fontsize=8)
        axes[1].set_yscale("log")
        axes[0].set_ylabel("compute-optimal loss L* (nats)")
        axes[1].set_ylabel("compute-optimal N*")
        paths += _save(fig, out_dir, "frontier")
        plt.close(fig)
    return paths
