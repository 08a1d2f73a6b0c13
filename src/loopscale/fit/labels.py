"""How numbers are written, in the figures, report.md, report.html and the CLI lines alike: one function per
kind of number, so a budget reads ``1.25e13`` everywhere and a share of 0.5% never becomes "0%"."""

from __future__ import annotations

import math


def count_label(x: float, _pos=None) -> str:
    """A parameter or token count in short units: 500, 8K, 1.5M, 2B (three significant digits)."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def flops_label(x: float, _pos=None) -> str:
    """Training FLOPs (a budget, a tick) as ``1.25e13``: the fewest significant digits (at most four) that
    give the value back to one part in 10^6, so 1.25e13 is never shown as 1.2e13 and a tick at 2e11 stays
    "2e11"."""
    if not math.isfinite(x) or x <= 0:
        return f"{x:g}"
    for digits in range(1, 5):
        text = f"{x:.{digits - 1}e}"  # the e-format carries 9.99996 over to 1.000e(k+1) itself
        if abs(float(text) - x) <= 1e-6 * x:
            break
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{int(exponent)}"


def percent_text(share: float, digits: int = 2) -> str:
    """A share (0.005 = 0.5%) as a percentage with at most ``digits`` significant digits for shares under
    10% and whole percents above: 72%, 5.3%, 0.5%, 0%, never "0%" for a share that is not zero."""
    value = 100 * share
    if value == 0 or not math.isfinite(value):
        return f"{value:.0f}%"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return (text.rstrip("0").rstrip(".") if "." in text else text) + "%"


def bptt_text(bptt_k: dict, rs=()) -> str:
    """Which FLOPs per token a frontier or equivalence used: full BPTT, or truncated BPTT with its k per r
    (``fit.analyses.bptt_by_r(...).k``; keys may be str from fit.json). ``rs``: every loop count of the
    table, to name the r > 1 that kept full BPTT beside truncated ones."""
    if not bptt_k:
        return "full BPTT (every loop backpropagated), FLOPs per token as trained"
    ks = {int(r): int(k) for r, k in bptt_k.items()}
    full = [int(r) for r in rs if int(r) > 1 and int(r) not in ks]
    pairs = ", ".join(f"r={r}: k={k}" for r, k in sorted(ks.items()))
    pairs += "".join(f", r={r}: full" for r in full)
    rule = "k = ⌈r/2⌉" if not full and all(k == -(-r // 2) for r, k in ks.items()) else "the last k"
    return f"truncated BPTT: {rule} loops backpropagated ({pairs}), FLOPs per token as trained"
