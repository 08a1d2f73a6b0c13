"""How numbers are written: intervals, p-values and budgets, one writer each."""

from __future__ import annotations

import math


def interval(
    ci,
    digits: int = 3,
    *,
    signed: bool = False,
    missing: str = "no interval",
    open_ends: tuple[bool, bool] = (False, False),
    open_missing: bool = True,
) -> str:
    """The one way an interval is written: ``[lo, hi]`` of a ``ConfidenceInterval`` or a pair, to ``digits``
    decimals (with a sign: ``signed``). An end that is None is "open" (``open_missing``; else the whole
    interval is ``missing``), an end flagged in ``open_ends`` (the box edge, the grid's end) gets "(open)";
    no interval at all is ``missing``."""
    if ci is None:
        return missing
    ends = (ci.low, ci.high) if hasattr(ci, "low") else tuple(ci)
    if len(ends) != 2 or (not open_missing and None in ends):
        return missing
    spec = f"{'+' if signed else ''}.{digits}f"
    words = [
        "open" if x is None else format(x, spec) + (" (open)" if is_open else "")
        for x, is_open in zip(ends, open_ends)
    ]
    return f"[{words[0]}, {words[1]}]"


def end_ranges(ranges, digits: int = 2) -> str:
    """The Monte Carlo ranges of a CI's two ends (``fit.bootstrap.end_ranges``) as "[a, b] / [c, d]", a side
    beyond the resamples "open"; "–" when there are none (an older fit.json, or no bootstrap)."""
    if not ranges or len(ranges) != 2:
        return "–"
    return " / ".join(interval(r, digits) for r in ranges)


def p_value(p: float | None) -> str:
    """ "p = 0.0031"-style to 2 significant digits, "p < 1e-4" below that, "p n/a" without one."""
    if p is None or not math.isfinite(p):
        return "p n/a"
    return f"p = {p:.2g}" if p >= 1e-4 else "p < 1e-4"


def budget(c: float) -> str:
    """A budget in FLOPs as 1.25e13."""
    return f"{c:.3g}".replace("e+", "e")
