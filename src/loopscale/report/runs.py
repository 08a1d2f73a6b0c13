"""The runs section: one row per planned run (sizes in parameters, D in tokens, losses in nats, the fitted
law's prediction and the residual), and the runs the fit left out with the reason."""

from __future__ import annotations

import math

from loopscale.fit.labels import flops_label
from loopscale.fit.law import law_loss
from loopscale.fit.protocol_results import FitSummary
from loopscale.report.document import Section, Table
from loopscale.report.formatting import num


def runs_section(rows: list[dict], skipped: list[tuple[str, str]], fit: FitSummary) -> Section:
    ok = [r for r in rows if r["status"] == "ok"]
    left_out = dict(skipped)
    blocks: list = [f"{len(ok)} of {len(rows)} planned runs finished; {len(skipped)} left out of the fit."]
    if skipped:
        blocks.append(Table(["run", "why it was left out"], [[run, why] for run, why in skipped]))
    header = [
        "run",
        "C (FLOPs)",
        "width",
        "r",
        "N",
        "N_once",
        "N_rec",
        "D (tokens)",
        "steps",
        "val loss",
        "law",
        "residual",
        "status",
    ]
    table = []
    for row in rows:
        sizes = [row.get(k) for k in ("n_once", "n_rec", "r", "tokens")]
        try:
            pred = float(law_loss(fit.coefficients, *(float(v) for v in sizes)))
        except (TypeError, ValueError):
            pred = math.nan
        loss = float(row["loss"]) if row.get("loss") is not None else math.nan
        resid = loss - pred if row["status"] == "ok" and row["run"] not in left_out else math.nan
        status = row["status"] + (f": {row['reason']}" if row.get("reason") else "")
        if row["run"] in left_out:
            status += " (left out of the fit)"
        table.append(
            [
                str(row["run"]),
                num(row.get("budget"), flops_label),
                num(row.get("width")),
                str(row["r"]),
                num(row.get("n")),
                num(row.get("n_once")),
                num(row.get("n_rec")),
                num(row.get("tokens")),
                num(row.get("steps")),
                num(loss, "{:.4f}"),
                num(pred, "{:.4f}"),
                num(0.0 if abs(resid) < 5e-5 else resid, "{:+.4f}"),
                status,
            ]
        )
    blocks += [
        "Every run: sizes in parameters (N = N_once + N_rec, non-embedding), D in tokens, losses in nats; "
        '"law" is the fitted joint law\'s prediction and the residual is observed − predicted.',
        Table(header, table),
    ]
    return Section("Runs", blocks)
