"""The design checks section: can these runs test the law? The factorial laptop design's targets
(docs/sweeps.md), each with its measured value, so that a missed one shows by how much, and the cells or
runs that miss it. RMSEs and σ in nats."""

from __future__ import annotations

from loopscale.fit.labels import flops_label, percent_text
from loopscale.fit.protocol_results import ProtocolResult
from loopscale.fit.results import LawCheck
from loopscale.present.numbers import interval
from loopscale.report.document import Bullets, Section, Table
from loopscale.report.formatting import finished_runs

# Targets of a sweep built to test the law (docs/sweeps.md, the factorial laptop design): a law that
# describes the runs fits them, and predicts a left-out top budget, to within twice the seed noise.
NOISE_MULTIPLE = 2.0
MIN_REPLICATED_RUNS = 8


def _selected_form(check: LawCheck | None) -> tuple[str, float | None, tuple]:
    """(name, residual RMSE in nats, leave-one-budget-out rows) of the form the law check selected."""
    if check is None:
        return "paper", None, ()
    if check.selected_form == "paper":
        return "paper", check.rmse, check.leave_one_budget_out
    ext = next(e for e in check.extensions if e.form == check.selected_form)
    return check.selected_form, ext.rmse, ext.leave_one_budget_out or ()


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def design_checks_section(
    doc: ProtocolResult, rows: list[dict], below_bigram: tuple[int, int, float] | None
) -> Section:
    """Can these runs test the law? The factorial laptop design's targets (docs/sweeps.md), each with the
    measured value, so that a missed one shows by how much, and the cells or runs that miss it. ``doc``: its
    law check and cell minima are read."""
    check = doc.law_check
    finished = finished_runs(rows)
    table: list[list[str]] = []
    notes: list[str] = []

    def add(name: str, measured: str, target: str, ok: bool) -> None:
        table.append([name, measured, target, _met(ok)])

    widths: dict[float, set[int]] = {}
    for row in finished:
        widths.setdefault(float(row["budget"]), set()).add(int(row["width"]))
    if widths:
        shared = set.intersection(*widths.values())
        factorial = all(w == shared for w in widths.values())
        value = (
            f"widths {', '.join(map(str, sorted(shared)))} at all {len(widths)} budgets"
            if factorial
            else "; ".join(f"{flops_label(c)}: {sorted(w)}" for c, w in sorted(widths.items()))
        )
        add("same widths at every budget (budget and width not confounded)", value, "yes", factorial)
    noise = None if check is None else check.noise
    sigma = noise.sigma if noise is not None and noise.source == "replicates" else None
    replicated = noise.replicated_runs if sigma else 0
    noise_value = (
        f"{replicated} runs in {replicated - noise.df} replicated cells: σ = {sigma:.4f} nats on "
        f"{noise.df} df, "
        f"95% CI {interval(noise.ci, 4, missing='[–]', open_missing=False)}"
        if sigma
        else "none (no replicate seeds)"
    )
    enough = bool(replicated) and replicated >= MIN_REPLICATED_RUNS
    add("replicated runs (seed noise σ)", noise_value, f"≥ {MIN_REPLICATED_RUNS}", enough)
    form, rmse, lobo = _selected_form(check)
    label = "the paper's law" if form == "paper" else f"form {form}"
    target = f"≤ {NOISE_MULTIPLE:g} σ"
    if rmse is not None and sigma:
        measured = f"{rmse:.4f} nats = {rmse / sigma:.1f} σ"
        add(
            f"residual RMSE under the selected form ({label})",
            measured,
            target,
            rmse <= NOISE_MULTIPLE * sigma,
        )
    top = max((row for row in lobo if not row.failed), key=lambda row: row.budget, default=None)
    if top is not None and sigma:
        name = f"top budget ({flops_label(top.budget)}) left out, predicted by {label}"
        measured = f"RMSE {top.rmse:.4f} nats = {top.rmse / sigma:.1f} σ"
        add(name, measured, target, top.rmse <= NOISE_MULTIPLE * sigma)
    minima = doc.cell_minima
    if minima:
        vertex = sum(m.bracketed for m in minima)
        by_runs = sum(bool(m.runs_bracket) for m in minima)
        name = "iso-FLOP cells bracketed: vertex inside the widths / lowest run inside"
        add(name, f"{vertex} / {by_runs} of {len(minima)}", "all", vertex == by_runs == len(minima))
        edge: dict[float, list[str]] = {}
        for m in minima:
            if not m.runs_bracket:
                edge.setdefault(m.budget, []).append(str(m.r))
        if edge:
            notes.append(
                "Cells whose lowest-loss run is at an end of the widths run: "
                + "; ".join(f"{flops_label(c)}, r = {', '.join(rs)}" for c, rs in sorted(edge.items()))
                + " (a narrower or wider width at that budget would bracket them)."
            )
    if below_bigram is not None:
        below, total, bigram = below_bigram
        add(f"runs below the bigram table ({bigram:.3f} nats)", f"{below} of {total}", "all", below == total)
        above = sorted((row for row in finished if row["loss"] >= bigram), key=lambda row: -row["loss"])
        if above:
            notes.append(
                "Runs above the bigram table: "
                + ", ".join(f"{row['run']} ({row['loss']:.3f})" for row in above[:8])
                + (f" and {len(above) - 8} more" if len(above) > 8 else "")
                + "."
            )
    if sigma and rmse is not None and rmse > NOISE_MULTIPLE * sigma:
        shares = check.decomposition
        if shares:
            key, share = max(shares.items(), key=lambda kv: kv[1])
            names = {"r_x_width": "r × width", "budget_x_r": "budget × r"}
            notes.append(
                f"The misfit is structured: the {names.get(key, key)} group means explain "
                f"{percent_text(share)} of the residual sum of squares (law check above)."
            )
    blocks: list = [
        "Whether these runs can test the law: the targets of the factorial laptop design (docs/sweeps.md); "
        f"a law that describes the runs fits them, and predicts a left-out top budget, to within "
        f"{NOISE_MULTIPLE:g}× the seed noise.",
        Table(["check", "measured", "target", "met"], table),
    ]
    if notes:
        blocks.append(Bullets(notes))
    return Section("Design checks", blocks)
