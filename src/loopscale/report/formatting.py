"""Numbers and intervals as the report writes them (shared by its sections): table cells, φ's intervals
with the method that made them, and the tests of the law check's verdict. Losses in nats."""

from __future__ import annotations

import math

from loopscale.fit.protocol_results import ProtocolResult
from loopscale.present.numbers import interval
from loopscale.present.plots import method_name

SYMBOL = {"alpha": "α", "beta": "β", "phi": "φ"}


def num(value, fmt="{:.0f}") -> str:
    """A table cell: ``fmt`` (a format string or a function such as ``flops_label``) of a finite number,
    "–" for anything else (None, NaN, text)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "–"
    if not math.isfinite(value):
        return "–"
    return fmt(value) if callable(fmt) else fmt.format(value)


def finished_runs(rows: list[dict]) -> list[dict]:
    """The rows of runs that finished with a finite loss."""
    return [row for row in rows if row.get("status") == "ok" and math.isfinite(row.get("loss", math.nan))]


def identified(doc: ProtocolResult) -> bool:
    return doc.phi_identified is True


def rejected(doc: ProtocolResult) -> bool:
    return doc.law_check is not None and doc.law_check.verdict == "rejected"


def level(doc: ProtocolResult) -> str:
    return f"{100 * doc.bootstrap.level:.0f}%" if doc.bootstrap else "95%"


def intervals_text(doc: ProtocolResult, digits: int = 3) -> str:
    """The intervals for φ the protocol computed, side by side: ``ci.phi`` (named by ``ci_method``, the
    block bootstrap when fit.json names none), then the profile-likelihood interval."""
    parts = [main_interval_text(doc, digits)] if doc.phi_ci else []
    prof = doc.profile
    if prof:
        parts.append(
            f"profile-likelihood {100 * prof.level:.0f}% interval "
            f"{interval(prof.interval, digits, open_ends=prof.open)}"
        )
    return ", ".join(parts)


def ci_method(doc: ProtocolResult) -> str | None:
    """How ``ci.phi`` was made (fit.json ``ci_method``, e.g. "random_effects_bootstrap"); None for the cell
    block bootstrap, the only interval before the law check."""
    return None if doc.ci_method in (None, "cell_bootstrap") else doc.ci_method


def main_interval_text(doc: ProtocolResult, digits: int = 3) -> str:
    """``ci.phi``: "95% CI [lo, hi] (random-effects bootstrap)", or "bootstrap 95% CI [lo, hi]" when it is
    the cell block bootstrap's."""
    written = interval(doc.phi_ci, digits)
    method = ci_method(doc)
    if method is None:
        return f"bootstrap {level(doc)} CI {written}"
    return f"{level(doc)} CI {written} ({method_name(method)})"
