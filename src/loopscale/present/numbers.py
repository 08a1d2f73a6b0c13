"""How numbers are written: intervals, p-values and budgets, one writer each."""

from __future__ import annotations

import math


def interval(ci, digits: int = 3, signed: bool = False) -> str:
    """``[lo, hi]`` (a ``ConfidenceInterval`` or a pair); an end that is None is written "open"."""
    if ci is None:
        return "no interval"
    ends = (ci.low, ci.high) if hasattr(ci, "low") else tuple(ci)
    spec = f"{'+' if signed else ''}.{digits}f"
    return "[" + ", ".join("open" if x is None else format(x, spec) for x in ends) + "]"


def p_value(p: float | None) -> str:
    """"p = 0.0031"-style to 2 significant digits, "p < 1e-4" below that, "p n/a" without one."""
    if p is None or not math.isfinite(p):
        return "p n/a"
    return f"p = {p:.2g}" if p >= 1e-4 else "p < 1e-4"


def budget(c: float) -> str:
    """A budget in FLOPs as 1.25e13."""
    return f"{c:.3g}".replace("e+", "e")
