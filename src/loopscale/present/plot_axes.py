"""Axes of loopscale's figures: log axes with a few labelled ticks, linear tick counts, panel grids, the
note of an empty panel and the range of a long-tailed distribution (shared by ``present.plots`` and the
report's figures)."""

from __future__ import annotations

import math

import numpy as np

from loopscale.fit.labels import count_label


def log_locator(max_ticks: int = 6):
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


def log_axis(ax, which: str = "x", label=count_label) -> None:
    """Log scale with a few labelled ticks in compact units and unlabelled minor ticks."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis.set_major_locator(log_locator())
    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_formatter(NullFormatter())


def linear_ticks(ax, which: str = "both") -> None:
    from matplotlib.ticker import MaxNLocator

    for axis in (ax.xaxis, ax.yaxis) if which == "both" else ((ax.xaxis,) if which == "x" else (ax.yaxis,)):
        axis.set_major_locator(MaxNLocator(nbins=6))


def panel_grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    """(rows, columns) for ``n`` panels with the fewest empty cells (then the most columns, at most
    ``max_cols``): 4 panels are 2 × 2, not 3 + 1 with two blank cells."""
    if n <= max_cols:
        return 1, max(n, 1)
    cols = min(range(2, max_cols + 1), key=lambda c: (-n % c, -c))
    return -(-n // cols), cols


def no_data_note(ax, what: str = "no data") -> None:
    """Write "no data" in the middle of a panel that has nothing to show, so an empty panel reads as
    such and not as a plotting failure."""
    ax.text(0.5, 0.5, what, transform=ax.transAxes, ha="center", va="center", fontsize=10, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def robust_range(values: np.ndarray, fence: float = 3.0, widen: float = 0.05) -> tuple[float, float]:
    """The axis range of a distribution: its smallest and largest values inside Tukey's far-out fences
    (quartiles ∓ ``fence`` interquartile ranges, about ±4.7 sd for a normal sample, so nothing of a normal
    bulk is cut), widened by ``widen`` of the span on each side. A handful of far-out values (bootstrap
    resamples stuck at a box edge: 4 of 200 at φ = −3 is 2%, more than a 0.5–99.5 percentile range cuts)
    then cannot squeeze the bulk of a histogram into one bin."""
    q1, q3 = np.percentile(values, [25, 75])
    iqr = q3 - q1
    kept = values[(values >= q1 - fence * iqr) & (values <= q3 + fence * iqr)]
    lo, hi = float(kept.min()), float(kept.max())
    pad = widen * max(hi - lo, 1e-3 * max(abs(lo), abs(hi), 1.0))
    return lo - pad, hi + pad
