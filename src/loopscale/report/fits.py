"""The law fits section: every form's coefficients (free φ, φ = 0, φ = 1, per-r Chinchilla) with R², the
minimised objective and the parameters at a box edge, the joint fit's residuals per r (nats) and the CIs
(method §8)."""

from __future__ import annotations

from loopscale.fit.protocol_results import ProtocolResult
from loopscale.present.identification import objective_note
from loopscale.present.plots import method_name
from loopscale.report.document import Section, Table
from loopscale.report.formatting import SYMBOL, ci_method, level, num


def fits_section(doc: ProtocolResult) -> Section:
    header = ["form", "E", "A", "B", "α", "β", "φ", "R²", "objective", "at a box edge"]
    at_bound = doc.diagnostics.at_bound.forms
    rows = []
    for name, f in [*doc.forms.items(), *((f"r={k} (Chinchilla)", v) for k, v in doc.per_r.items())]:
        rows.append(
            [
                name,
                f"{f.E:.4f}",
                f"{f.A:.4g}",
                f"{f.B:.4g}",
                f"{f.alpha:.4f}",
                f"{f.beta:.4f}",
                "" if f.phi is None else f"{f.phi:.4f}",  # the per-r Chinchilla fits have none
                f"{f.r2:.4f}",
                f"{f.objective:.3e}",
                ", ".join(SYMBOL.get(n, n) for n in at_bound.get(name, ())),
            ]
        )
    res = doc.residuals
    res_rows = [
        [key, str(s.n), f"{s.mean:+.4f}", f"{s.max_abs:.4f}", f"{s.rmse:.4f}"]
        for key, s in [("all", res.overall), *res.per_r.items()]
    ]
    blocks = [
        Table(header, rows),
        objective_note(doc.diagnostics.ranking),
        "Residuals of the joint fit (observed − predicted, nats), per r:",
        Table(["r", "n", "mean", "max abs", "RMSE"], res_rows),
    ]
    intervals = doc.ci
    if intervals:
        method = ci_method(doc)
        blocks.append(
            f"{level(doc)} CIs ({method_name(method) if method else 'cell block bootstrap'})"
            + ": "
            + ", ".join(f"{k} [{num(a, '{:.4g}')}, {num(b, '{:.4g}')}]" for k, (a, b) in intervals.items())
            + "."
        )
    return Section("Law fits (Huber on log loss, L-BFGS-B, method §8)", blocks)
