"""Compute-optimal allocation from the fitted law (method §8.7) and the empirical iso-FLOP minima per
(budget, r) cell: a vertex the widths do not bracket is "not bracketed", never a number. Losses in nats,
compute in training FLOPs, D in tokens."""

from __future__ import annotations

import math

from loopscale.fit.labels import bptt_text, count_label, flops_label
from loopscale.fit.protocol_results import ProtocolResult
from loopscale.present.fit_text import minimum_miss_text, protocol_note_text
from loopscale.report.document import Section, Table


def frontier_section(doc: ProtocolResult) -> Section:
    """The law's compute-optimal allocation per (budget, r). An optimum on the edge of the legal widths or
    outside the widths the sweep ran is an extrapolation the runs cannot check: it is named, not numbered."""
    frontier = doc.compute_optimal
    if not frontier:
        return Section(
            "Compute-optimal allocation", ["Not available: " + "; ".join(map(protocol_note_text, doc.notes))]
        )
    header = ["C (FLOPs)", "r", "width d*", "N* (unique)", "N_eff*", "D* (tokens)", "L* (nats)", "gap to r=1"]
    rows = []
    unidentified_r = set()
    for r, entry in frontier.per_r.items():
        gaps = entry.gap_to_r1 or [math.nan] * len(entry.rows)
        for row, gap in zip(entry.rows, gaps):
            why = []
            if row.at_edge:
                why.append(f"at the edge of the legal widths (d = {row.width:.0f})")
            if row.within_widths_run is False:
                why.append(f"outside the widths run (d = {row.width:.0f})")
            head = [flops_label(row.budget), r]
            if why:
                unidentified_r.add(r)
                rows.append([*head, "not identified: " + ", ".join(why), "–", "–", "–", "–", "–"])
                continue
            rows.append(
                [
                    *head,
                    f"{row.width:.0f}",
                    count_label(row.n),
                    count_label(row.n_eff),
                    count_label(row.tokens),
                    f"{row.loss:.4f}",
                    "" if r == "1" else f"{gap:+.4f}",
                ]
            )
    rows.sort(key=lambda row: (float(row[0]), int(row[1])))
    exps = "; ".join(
        f"r = {r}: N* ∝ C^{e.a_N:.2f}, D* ∝ C^{e.a_D:.2f}"
        for r, e in frontier.per_r.items()
        if e.a_N is not None and r not in unidentified_r
    )
    flops = bptt_text(frontier.bptt_k, frontier.per_r)
    blocks: list = [f"FLOPs model: {flops}.", Table(header, rows)]
    if exps:
        blocks.append(exps + ".")
    if unidentified_r:
        blocks.append(
            "Rows marked not identified put the law's optimum where no run was made; their numbers and the "
            f"scaling exponents of r = {', '.join(sorted(unidentified_r, key=int))} would be extrapolations, "
            "so they are not printed."
        )
    return Section("Compute-optimal allocation (fitted joint law, exact FLOPs over continuous width)", blocks)


def minima_section(doc: ProtocolResult) -> Section:
    gaps = {(g.budget, g.r): g.gap for g in doc.cell_gaps}
    rows = []
    for m in doc.cell_minima:
        head = [flops_label(m.budget), str(m.r), str(m.n_runs)]
        if not m.bracketed:  # no vertex numbers: an extrapolated vertex can be absurd
            rows.append([*head, "not bracketed", "–", "–", minimum_miss_text(m.reason)])
            continue
        gap = gaps.get((m.budget, m.r))
        gap_text = "–" if gap is None else f"{gap:+.4f}"
        # fit.json files written before runs_bracket existed: no note rather than a guess
        edge = "lowest loss at an end of the width range" if m.runs_bracket is False else ""
        rows.append([*head, count_label(m.n_star), f"{m.loss_star:.4f}", gap_text, edge])
    bracketed = sum(m.bracketed for m in doc.cell_minima)
    by_runs = sum(bool(m.runs_bracket) for m in doc.cell_minima)
    return Section(
        "Empirical iso-FLOP minima (parabola in log N per cell, method §8.7)",
        [
            f"{bracketed} of {len(doc.cell_minima)} cells bracket their minimum; in {by_runs} the runs "
            "themselves do (the lowest loss has a higher one on each side in N).",
            Table(["C (FLOPs)", "r", "runs", "N*", "L* (nats)", "gap to r=1", "note"], rows),
            "A vertex is given only where the widths run bracket it (at least three sizes, a parabola that "
            "opens upwards, the vertex between the smallest and largest N run); otherwise the cell is "
            '"not bracketed" and a wider width range at that budget is needed. A vertex whose lowest run is '
            "at an end of the width range rests on the parabola's shape alone.",
        ],
    )
