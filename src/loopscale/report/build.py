"""``loopscale report SWEEP_DIR``: collect → fit (method §8) → report.md + self-contained report.html.

The report leads with the protocol's verdict (is φ identified by this sweep, and why not). φ is printed in
bold only when it is identified; otherwise it is printed plainly with "(not identified)" and the reasons.
Beside it: the block-bootstrap CI and the profile-likelihood interval (and the disagreement between them,
when there is one), R² next to the objective that was minimised with a line on why they can rank forms
differently, and the parameters that sit at an edge of the fit box. The paper's φ is compared only with an
identified φ, as a comparison of intervals. Then: what one loop is worth and the equivalence statement at
this sweep's scale (method §9.8); the law fits (free φ, φ = 0, φ = 1, per-r Chinchilla); the compute-optimal
table from the fitted law with the gap to r = 1; the empirical iso-FLOP minima per cell, where a vertex the
widths do not bracket is reported as "not bracketed" and never as a number; the per-axis downstream losses
when ``loopscale eval-sweep`` ran; one row per run (sizes, tokens, steps, loss, law prediction, residual,
status); and the figures (data collapse, loop tax, iso-FLOP curves with vertices, φ profile, φ bootstrap,
residuals, frontier, axes). Losses are in nats, compute in training FLOPs, D in tokens.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from loopscale.config import ModelConfig, from_dict
from loopscale.errors import UserError
from loopscale.fit import equivalence, load_table, plot_protocol, run_protocol
from loopscale.fit.law import LOWER, PARAMS, UPPER, law_loss
from loopscale.fit.plots import interval_text
from loopscale.fit.table import SkippedRunsWarning
from loopscale.io import atomic_write, atomic_write_json, atomic_write_text
from loopscale.paper import JOINT_FIT, PHI_CI
from loopscale.report.document import Bullets, Document, Image, Pre, Section, Table
from loopscale.sweep.collect import NO_TASKS, SE_PREFIX, TASKS_PREFIX, collect, read_results
from loopscale.sweep.rundir import open_sweep

PAPER_BUDGETS = "4.64e17–2.15e19 FLOPs"


@dataclass(frozen=True)
class Report:
    folder: Path
    markdown: Path
    html: Path
    fit_json: Path
    summary_line: str
    skipped: list[tuple[str, str]]  # (run, reason) left out of the fit


def _m(x: float) -> str:
    """A parameter or token count in readable units."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def build_report(
    sweep_dir: str | Path,
    out: str | Path | None = None,
    *,
    restarts: int = 500,
    bootstrap: int = 200,
    seed: int = 0,
    peak_flops: float | None = None,
) -> Report:
    """Collect ``sweep_dir``, run the fitting protocol, write the report folder (default SWEEP_DIR/report).

    ``peak_flops``: the machine's fp32 matmul peak (FLOP/s, all cores) for the utilisation line; None
    measures it now, on this machine (say so when the sweep ran elsewhere)."""
    sweep_dir = Path(sweep_dir)
    folder = Path(out) if out is not None else sweep_dir / "report"
    spec, runs = open_sweep(sweep_dir)
    if not (sweep_dir / "runs").is_dir() and (sweep_dir / "results.csv").is_file():
        rows = read_results(sweep_dir / "results.csv")  # a published folder: sweep.yaml + results.csv
    else:
        rows, _, _ = collect(sweep_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRunsWarning)  # the report lists them itself
        table = load_table(rows)
    template = from_dict(ModelConfig, {**spec.model, "width": runs[0].width}, "sweep model")
    protocol = run_protocol(
        table,
        restarts=restarts,
        bootstrap=bootstrap,
        seed=seed,
        flops_model=template,
        template_source=f"the sweep's template ({sweep_dir / 'sweep.yaml'})",
    )
    doc = protocol.to_dict()
    skipped = list(table.skipped)
    summary = summary_line(doc, len(table), len(rows), skipped, spec.name)

    baselines = _baselines(spec)
    figures = plot_protocol(protocol, table, folder / "plots", baselines["values"])
    plots = [p for p in figures if p.suffix == ".png"]
    plots += _axis_plots(rows, folder / "plots")
    doc["baselines"] = baselines
    report = Document(
        title=f"loopscale report: sweep {spec.name}",
        lead=_lead(doc, len(table), len(rows), _baseline_statement(baselines, rows)),
    )
    report.sections.append(_result_section(doc, table, template))
    report.sections.append(_fits_section(doc))
    report.sections.append(_frontier_section(doc))
    report.sections.append(_minima_section(doc))
    axes_section = _axes_section(rows)
    if axes_section is not None:
        report.sections.append(axes_section)
    doc["machine_use"] = machine_use(rows, peak_flops)
    report.sections.append(_machine_section(doc["machine_use"]))
    report.sections.append(_runs_section(rows, skipped, doc["fit"]))
    report.sections.append(Section("Figures", [Image(p, _caption(p)) for p in plots]))
    report.sections.append(Section("Full fit output", [Pre(protocol.format())]))

    fit_json = atomic_write_json(folder / "fit.json", doc)
    md = atomic_write_text(folder / "report.md", report.markdown(folder))
    page = atomic_write_text(folder / "report.html", report.html())
    return Report(folder, md, page, fit_json, f"{summary} → {page}", skipped)


# --- φ: verdict, intervals, identification ---------------------------------------------------------------


def _identified(doc) -> bool:
    return doc["diagnostics"]["phi_identified"] is True


def _level(doc) -> str:
    boot = doc["bootstrap"]
    return f"{100 * boot['level']:.0f}%" if boot else "95%"


def _intervals_text(doc, digits: int = 3) -> str:
    """The intervals for φ the protocol computed, side by side: bootstrap CI, profile-likelihood interval."""
    parts = []
    phi_ci = doc["ci"].get("phi")
    if phi_ci:
        parts.append(f"bootstrap {_level(doc)} CI {interval_text(phi_ci, digits=digits)}")
    prof = doc["profile"]
    if prof:
        parts.append(
            f"profile-likelihood {100 * prof['level']:.0f}% interval "
            f"{interval_text(prof['interval'], prof['open'], digits=digits)}"
        )
    return ", ".join(parts)


def summary_line(doc, fitted: int, planned: int, skipped, sweep: str) -> str:
    """The CLI's one line: the verdict first, then φ (marked when not identified), intervals, R², runs."""
    diag, fit = doc["diagnostics"], doc["fit"]
    line = diag["verdict"].rstrip(".") + ". "
    phi = fit.get("phi")  # absent for the plain Chinchilla law
    if phi is not None:
        details = [_intervals_text(doc) or "no interval computed"]
        if diag["phi_identified"] is False:
            details.insert(0, "not identified")
        line += f"phi = {phi:.3f} ({'; '.join(details)}), "
    return (
        line
        + f"R² = {fit['r2']:.4f}, {fitted} of {planned} runs fitted"
        + (f", {len(skipped)} left out" if skipped else "")
        + f" [sweep {sweep}]"
    )


def _phi_statement(doc) -> str:
    """φ with its intervals: bold only when identified, "(not identified)" when the protocol says so."""
    fit, diag = doc["fit"], doc["diagnostics"]
    phi = fit.get("phi")
    if phi is None:
        return "The plain Chinchilla law has no φ."
    if doc["settings"].get("fix_phi") is not None:
        return f"φ fixed at {phi:g} (not fitted)."
    intervals = _intervals_text(doc)
    tail = f": {intervals}." if intervals else " (no interval computed)."
    if diag["phi_identified"] is True:
        return f"**φ = {phi:.3f}**{tail}"
    if diag["phi_identified"] is False:
        return f"φ = {phi:.3f} (not identified){tail}"
    return f"φ = {phi:.3f} (identification not assessed){tail}"


def _quality_statement(doc) -> str:
    fit = doc["fit"]
    return (
        f"R² = {fit['r2']:.4f} (raw losses, nats) beside the objective that was minimised: "
        f"{fit['objective']:.3e} (summed Huber, δ = {doc['settings']['huber_delta']:g}, on log loss). "
        + doc["diagnostics"]["objective_note"]
    )


def _union_seconds(spans: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals (seconds)."""
    total, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def machine_use(rows: list[dict], peak_flops: float | None = None) -> dict:
    """How well the sweep used the machine: training FLOPs of the finished runs over their busy wall time
    (the union of the runs' process spans, which overlap when several workers run) against the machine's
    measured fp32 matmul peak, and the per-run overhead (process wall − training-loop time)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    timed = [
        r
        for r in ok
        if math.isfinite(r.get("started_at", math.nan)) and math.isfinite(r.get("finished_at", math.nan))
    ]
    walls = [r["wall_time_s"] for r in ok if math.isfinite(r.get("wall_time_s", math.nan))]
    trains = [r.get("train_time_s", math.nan) for r in ok if math.isfinite(r.get("wall_time_s", math.nan))]
    out: dict = {
        "runs": len(ok),
        "flops": float(sum(r["flops_per_token"] * r["tokens"] for r in ok)),
        "sum_run_wall_s": float(sum(walls)),
        "overhead_share": None,
        "timed_runs": len(timed),
        "busy_wall_s": None,
        "achieved_flops_per_s": None,
        "peak_flops_per_s": None,
        "utilisation": None,
    }
    if walls and all(math.isfinite(t) for t in trains):
        out["overhead_share"] = float(1 - sum(trains) / sum(walls))
    if timed:
        busy = _union_seconds([(r["started_at"], r["finished_at"]) for r in timed])
        flops = sum(r["flops_per_token"] * r["tokens"] for r in timed)
        out["busy_wall_s"] = busy
        out["achieved_flops_per_s"] = flops / busy if busy > 0 else None
        if out["achieved_flops_per_s"]:
            if peak_flops is None:
                import torch

                from loopscale.train.perf import peak_flops as cached_peak

                torch.set_num_threads(os.cpu_count() or 1)
                peak_flops = cached_peak("cpu", "float32")  # the best measured here (re-measured daily)
            out["peak_flops_per_s"] = float(peak_flops)
            out["utilisation"] = out["achieved_flops_per_s"] / peak_flops
    return out


def _machine_section(use: dict) -> Section:
    lines = [
        f"{use['runs']} finished runs, {use['flops']:.3g} training FLOPs, "
        f"{use['sum_run_wall_s'] / 3600:.2f} h of run processes (summed over runs)."
    ]
    if use["overhead_share"] is not None:
        lines.append(
            f"Per-run overhead (process start, dataset, model build, final evaluation, writes): "
            f"{100 * use['overhead_share']:.1f}% of the run processes' time."
        )
    if use["utilisation"] is not None:
        lines.append(
            f"Busy wall time {use['busy_wall_s'] / 3600:.2f} h over {use['timed_runs']} timed runs: "
            f"{use['achieved_flops_per_s'] / 1e9:.1f} GFLOP/s = {100 * use['utilisation']:.1f}% of the "
            f"fp32 matmul peak measured on the reporting machine ({use['peak_flops_per_s'] / 1e9:.0f} "
            "GFLOP/s, all cores)."
        )
    else:
        lines.append("Sweep utilisation: not available (the runs carry no start and finish times).")
    return Section("Machine use", lines)


def _baselines(spec) -> dict:
    """Unigram/bigram cross-entropy of the sweep's validation tokens, or why they are not available."""
    from loopscale.data.baselines import dataset_baselines
    from loopscale.data.dataset import PackedDataset
    from loopscale.train.config import DEFAULT_DATASET

    data = (spec.train or {}).get("data") or {}
    path = data.get("path") or DEFAULT_DATASET
    try:
        ds = PackedDataset(path)
        val_tokens = data.get("val_tokens") or ds.num_rows("val") * ds.seq_len
        values = dataset_baselines(path, int(val_tokens))
    except UserError as exc:
        return {"values": None, "note": f"not available: {exc}"}
    return {"values": values.to_dict(), "dataset": str(path), "note": None}


def _baseline_statement(baselines: dict, rows: list[dict]) -> str:
    values = baselines["values"]
    if values is None:
        return f"Count-model baselines (unigram / bigram loss of the validation tokens) {baselines['note']}"
    losses = [row["loss"] for row in rows if row.get("status") == "ok" and math.isfinite(row["loss"])]
    below = sum(loss < values["bigram"] for loss in losses)
    return (
        f"Baselines on the same {values['val_tokens']:,} validation tokens: a unigram table scores "
        f"{values['unigram']:.3f} nats and a bigram table (Witten–Bell) {values['bigram']:.3f} nats; "
        f"{below} of {len(losses)} finished runs are below the bigram table"
        + (
            "."
            if below == len(losses)
            else ": a run above it has learned less than token-pair statistics, so read φ with that in mind."
        )
    )


def _lead(doc, fitted: int, planned: int, baseline: str | None = None) -> list:
    diag = doc["diagnostics"]
    blocks: list = [f"**Verdict:** {diag['verdict']}"]
    if baseline:  # right under the verdict: a φ measured on runs worse than a bigram table is about token
        blocks.append(baseline)  # statistics, not language, whatever the fit says
    blocks.append(_phi_statement(doc))
    if diag["phi_identified"] is False and diag["reasons"]:
        blocks += ["Why φ is not identified:", Bullets(list(diag["reasons"]))]
    blocks.append(_quality_statement(doc))
    blocks.append(f"{fitted} of {planned} planned runs fitted.")
    return blocks


_SYMBOL = {"alpha": "α", "beta": "β", "phi": "φ"}
_BOX_OF = {"A": ("a", True), "B": ("b", True), "E": ("e", True)}  # coefficient → (box parameter, exp)


def _param(name: str) -> str:
    """A parameter name with its box range, e.g. "E (box [0.0498, 7.39])", "φ (box [-3, 3])"."""
    key, exp = _BOX_OF.get(name, (name, False))
    if key not in PARAMS:
        return _SYMBOL.get(name, name)
    lo, hi = LOWER[PARAMS.index(key)], UPPER[PARAMS.index(key)]
    box = f"[{math.exp(lo):.3g}, {math.exp(hi):.3g}]" if exp else f"[{lo:g}, {hi:g}]"
    return f"{_SYMBOL.get(name, name)} (box {box})"


def _bounds_blocks(doc) -> list:
    at = doc["diagnostics"]["at_bound"]
    items = []
    fix_phi = doc["settings"].get("fix_phi")
    main_form = "joint" if fix_phi is None else f"phi={fix_phi:g}"  # the main fit's row among the forms
    if at["point"] and at["forms"].get(main_form) != at["point"]:
        items.append("main fit: " + ", ".join(_param(n) for n in at["point"]))
    for form, names in at["forms"].items():
        if names:
            items.append(f"{form}: " + ", ".join(_param(n) for n in names))
    share = {k: v for k, v in at["bootstrap_share"].items() if v}
    if share:
        items.append(
            "bootstrap resamples with the parameter at an edge: "
            + ", ".join(f"{_SYMBOL.get(k, k)} {100 * v:.0f}%" for k, v in share.items())
        )
    if not items:
        return ["No fitted parameter sits at an edge of the fit box (method §8.3)."]
    return [
        "Parameters at an edge of the fit box (method §8.3); an estimate there is set by the box:",
        Bullets(items),
    ]


def _overlap_text(name: str, ours, theirs) -> str:
    lo, hi = ours
    if lo is None or hi is None:
        return ""
    if lo <= theirs[1] and theirs[0] <= hi:
        return (
            f"this sweep's {name} [{lo:.3f}, {hi:.3f}] and the paper's 95% CI [{theirs[0]}, {theirs[1]}] "
            f"overlap on [{max(lo, theirs[0]):.3f}, {min(hi, theirs[1]):.3f}]"
        )
    side = "above" if lo > theirs[1] else "below"
    return (
        f"this sweep's {name} [{lo:.3f}, {hi:.3f}] lies {side} the paper's 95% CI "
        f"[{theirs[0]}, {theirs[1]}] (no overlap)"
    )


def _paper_comparison(doc) -> str:
    paper = f"φ = {JOINT_FIT['phi']}, 95% CI [{PHI_CI[0]}, {PHI_CI[1]}] at {PAPER_BUDGETS}"
    if not _identified(doc):
        return (
            f"No comparison with the paper ({paper}) is made: φ is not identified by this sweep, so its "
            "intervals say nothing about the paper's value."
        )
    parts = []
    if doc["ci"].get("phi"):
        parts.append(_overlap_text("bootstrap CI", doc["ci"]["phi"], PHI_CI))
    prof = doc["profile"]
    if prof and not any(prof["open"]):
        parts.append(_overlap_text("profile interval", prof["interval"], PHI_CI))
    parts = [p for p in parts if p]
    if not parts:
        return f"The paper reports {paper}; this sweep has no closed interval to compare with it."
    return f"Compared with the paper ({paper}): " + "; ".join(parts) + "."


def _interval_rows(doc) -> list[list[str]]:
    rows = []
    boot = doc["bootstrap"]
    if doc["ci"].get("phi"):
        lo, hi = doc["ci"]["phi"]
        rows.append(
            [
                "block bootstrap (percentile)",
                _level(doc),
                f"{lo:.3f}",
                f"{hi:.3f}",
                f"{boot['resamples']} resamples of {boot['cells']} (budget, r) cells",
            ]
        )
    else:
        rows.append(["block bootstrap (percentile)", "", "–", "–", "not computed (bootstrap off)"])
    prof = doc["profile"]
    if prof:
        ends = [
            "open" if v is None else f"{v:.3f}" + (" (open)" if o else "")
            for v, o in zip(prof["interval"], prof["open"])
        ]
        rows.append(
            [
                "profile likelihood",
                f"{100 * prof['level']:.0f}%",
                *ends,
                f"deviance ≤ {prof['threshold']:.3f} (χ²₁), φ refitted on a grid",
            ]
        )
    else:
        rows.append(["profile likelihood", "", "–", "–", "not computed"])
    return rows


def _agreement(doc) -> str:
    prof = doc["profile"]
    if not prof:
        return ""
    if prof["agrees_with_bootstrap"] is False:
        return prof["disagreement"] or "The bootstrap CI and the profile-likelihood interval disagree."
    if prof["agrees_with_bootstrap"] is True:
        return "The bootstrap CI and the profile-likelihood interval agree."
    return "The two intervals were not compared."


def _result_section(doc, table, template) -> Section:
    fit, diag = doc["fit"], doc["diagnostics"]
    phi = fit.get("phi")
    blocks: list = [_phi_statement(doc)]
    if phi is not None and doc["settings"].get("fix_phi") is None:
        blocks.append(Table(["interval for φ", "level", "lower", "upper", "how"], _interval_rows(doc)))
        agreement = _agreement(doc)
        if agreement:
            blocks.append(agreement)
        if doc["profile"]:
            blocks.append(f"Profile method: {doc['profile']['method']}.")
        blocks.append(_paper_comparison(doc))
    if diag["phi_identified"] is False:
        blocks.append("Why φ is not identified: see the list at the top of this report.")
    blocks += _bounds_blocks(doc)
    caveat = (
        ""
        if _identified(doc)
        else " (from the point estimate of a φ that is not identified: an illustration, not a finding)"
    )
    if doc["loop_worth"]:
        blocks.append(
            f"What one loop is worth{caveat}: "
            + "; ".join(
                f"r = {w['r']} loops ≈ {w['worth']:.2f} unique blocks "
                f"({100 * w['fraction']:.0f}% of full equivalence)"
                for w in doc["loop_worth"]
            )
            + "."
        )
    looped = [r for r in sorted(set(table.r.tolist())) if r > 1]
    plain = table.n[table.r == 1]
    if phi is not None and looped and len(plain):
        r = 4 if 4 in looped else looped[-1]
        params = float(sorted(plain)[len(plain) // 2])
        try:
            eq = equivalence(params, r, phi, template)
        except UserError as exc:
            blocks.append(f"No equivalence statement: {exc}")
        else:
            blocks.append(
                f"Equivalence at this scale{caveat}: next to an r = 1 model with {_m(params)} non-embedding "
                f"parameters (d ≈ {eq['width']:.0f}), the r = {r} model of the same width has "
                f"{_m(eq['unique_params'])} unique parameters ({eq['unique_ratio']:.2f}×) and is worth "
                f"{_m(eq['effective_params'])} non-looped "
                f"parameters ({eq['effective_ratio']:.2f}×, r^φ = {eq['worth']:.2f}), while it costs "
                f"{eq['flops_ratio']:.3f}× the training FLOPs per token, as much as an r = 1 model with "
                f"{_m(eq['cost_equivalent_params'])} parameters."
            )
    for note in doc["notes"]:
        blocks.append(f"Note: {note}")
    return Section("Result", blocks)


def _fits_section(doc) -> Section:
    header = ["form", "E", "A", "B", "α", "β", "φ", "R²", "objective", "at a box edge"]
    at_bound = doc["diagnostics"]["at_bound"]["forms"]
    rows = []
    for name, f in [*doc["forms"].items(), *((f"r={k} (Chinchilla)", v) for k, v in doc["per_r"].items())]:
        phi = f.get("phi")  # the per-r Chinchilla fits have none
        rows.append(
            [
                name,
                f"{f['E']:.4f}",
                f"{f['A']:.4g}",
                f"{f['B']:.4g}",
                f"{f['alpha']:.4f}",
                f"{f['beta']:.4f}",
                "" if phi is None else f"{phi:.4f}",
                f"{f['r2']:.4f}",
                f"{f['objective']:.3e}",
                ", ".join(_SYMBOL.get(n, n) for n in at_bound.get(name, [])),
            ]
        )
    res = doc["residuals"]
    res_rows = [
        [key, str(s["n"]), f"{s['mean']:+.4f}", f"{s['max_abs']:.4f}", f"{s['rmse']:.4f}"]
        for key, s in [("all", res["overall"]), *res["per_r"].items()]
    ]
    blocks = [
        Table(header, rows),
        doc["diagnostics"]["objective_note"],
        "Residuals of the joint fit (observed − predicted, nats), per r:",
        Table(["r", "n", "mean", "max abs", "RMSE"], res_rows),
    ]
    if doc["ci"]:
        blocks.append(
            f"{_level(doc)} block-bootstrap CIs: "
            + ", ".join(f"{k} [{lo:.4g}, {hi:.4g}]" for k, (lo, hi) in doc["ci"].items())
            + "."
        )
    return Section("Law fits (Huber on log loss, L-BFGS-B, method §8)", blocks)


def _frontier_section(doc) -> Section:
    """The law's compute-optimal allocation per (budget, r). An optimum on the edge of the legal widths or
    outside the widths the sweep ran is an extrapolation the runs cannot check: it is named, not numbered."""
    frontier = doc["compute_optimal"]
    if not frontier:
        return Section("Compute-optimal allocation", ["Not available: " + "; ".join(doc["notes"])])
    header = ["C (FLOPs)", "r", "width d*", "N* (unique)", "N_eff*", "D* (tokens)", "L* (nats)", "gap to r=1"]
    rows = []
    unidentified_r = set()
    for r, entry in frontier["per_r"].items():
        gaps = entry.get("gap_to_r1") or [math.nan] * len(entry["rows"])
        for row, gap in zip(entry["rows"], gaps):
            why = []
            if row["at_edge"]:
                why.append(f"at the edge of the legal widths (d = {row['width']:.0f})")
            if row.get("within_widths_run") is False:
                why.append(f"outside the widths run (d = {row['width']:.0f})")
            head = [f"{row['budget']:.3g}", r]
            if why:
                unidentified_r.add(r)
                rows.append([*head, "not identified: " + ", ".join(why), "–", "–", "–", "–", "–"])
                continue
            rows.append(
                [
                    *head,
                    f"{row['width']:.0f}",
                    _m(row["n"]),
                    _m(row["n_eff"]),
                    _m(row["tokens"]),
                    f"{row['loss']:.4f}",
                    "" if r == "1" else f"{gap:+.4f}",
                ]
            )
    rows.sort(key=lambda row: (float(row[0]), int(row[1])))
    exps = "; ".join(
        f"r = {r}: N* ∝ C^{e['a_N']:.2f}, D* ∝ C^{e['a_D']:.2f}"
        for r, e in frontier["per_r"].items()
        if "a_N" in e and r not in unidentified_r
    )
    blocks: list = [Table(header, rows)]
    if exps:
        blocks.append(exps + ".")
    if unidentified_r:
        blocks.append(
            "Rows marked not identified put the law's optimum where no run was made; their numbers and the "
            f"scaling exponents of r = {', '.join(sorted(unidentified_r, key=int))} would be extrapolations, "
            "so they are not printed."
        )
    return Section("Compute-optimal allocation (fitted joint law, exact FLOPs over continuous width)", blocks)


def _minima_section(doc) -> Section:
    gaps = {(g["budget"], g["r"]): g["gap"] for g in doc["cell_gaps"]}
    rows = []
    for m in doc["cell_minima"]:
        head = [f"{m['budget']:.3g}", str(m["r"]), str(m["n_runs"])]
        if not m["bracketed"]:  # no vertex numbers: an extrapolated vertex can be absurd
            rows.append([*head, "not bracketed", "–", "–", m["reason"]])
            continue
        gap = gaps.get((m["budget"], m["r"]))
        rows.append(
            [*head, _m(m["n_star"]), f"{m['loss_star']:.4f}", "–" if gap is None else f"{gap:+.4f}", ""]
        )
    bracketed = sum(m["bracketed"] for m in doc["cell_minima"])
    return Section(
        "Empirical iso-FLOP minima (parabola in log N per cell, method §8.7)",
        [
            f"{bracketed} of {len(doc['cell_minima'])} cells bracket their minimum.",
            Table(["C (FLOPs)", "r", "runs", "N*", "L* (nats)", "gap to r=1", "note"], rows),
            "A vertex is given only where the widths run bracket it (at least three sizes, a parabola that "
            "opens upwards, the vertex between the smallest and largest N run); otherwise the cell is "
            '"not bracketed" and a wider width range at that budget is needed.',
        ],
    )


def _num(value, fmt: str = "{:.0f}") -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "–"
    return fmt.format(value) if math.isfinite(value) else "–"


def _runs_section(rows: list[dict], skipped: list[tuple[str, str]], fit: dict) -> Section:
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
            pred = float(law_loss(fit, *(float(v) for v in sizes)))
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
                _num(row.get("budget"), "{:.3g}"),
                _num(row.get("width")),
                str(row["r"]),
                _num(row.get("n")),
                _num(row.get("n_once")),
                _num(row.get("n_rec")),
                _num(row.get("tokens")),
                _num(row.get("steps")),
                _num(loss, "{:.4f}"),
                _num(pred, "{:.4f}"),
                _num(0.0 if abs(resid) < 5e-5 else resid, "{:+.4f}"),
                status,
            ]
        )
    blocks += [
        "Every run: sizes in parameters (N = N_once + N_rec, non-embedding), D in tokens, losses in nats; "
        '"law" is the fitted joint law\'s prediction and the residual is observed − predicted.',
        Table(header, table),
    ]
    return Section("Runs", blocks)


def _caption(path: Path) -> str:
    return {
        "collapse": "Data collapse: L − B·D^−β against N_eff = N_once + r^φ·N_rec (log x) with the fitted φ, "
        "φ = 0 and φ = 1, each with its own form's coefficients; the line is E + A·N_eff^−α. When φ is "
        "right every r falls on one curve (panel titles give each form's RMSE).",
        "loop_tax": "The loop tax: per budget, loss against N for each r (points) with the fitted joint law "
        "(lines), the parabola in log N and its vertex (star) where the widths bracket it.",
        "isoflop": "Iso-FLOP curves per r: observed final validation loss (points), the fitted joint law "
        "(lines), the parabola in log N (dotted) and its vertex (star) where bracketed; cells marked "
        '"not bracketed" have no vertex.',
        "phi_profile": "Profile likelihood of φ: deviance against φ with the χ²₁ threshold, the profile "
        "interval (shaded), the bootstrap CI (dashed) and φ̂.",
        "phi_bootstrap": "Block-bootstrap distribution of φ with the point estimate and the 95% CI.",
        "residuals": "Residuals of the joint fit (observed − predicted, nats) against N and D.",
        "frontier": "Compute-optimal loss L* and size N* per r from the fitted law.",
        "axes": "Downstream axis continuation loss against validation loss, per r (loopscale eval-sweep).",
    }.get(path.stem, path.stem)


def _axis_columns(rows: list[dict]) -> list[str]:
    return sorted({k for row in rows for k in row if k.startswith("axis_")})


def _axes_section(rows: list[dict]) -> Section | None:
    """Per (budget, r) cell, the compute-optimal checkpoint (lowest validation loss in the cell, method §10.2)
    and its per-axis continuation losses (nats), as in the paper's headline downstream view."""
    axes = _axis_columns(rows)
    if not axes:
        return None
    best: dict[tuple[float, int], dict] = {}
    for row in rows:
        if row["status"] != "ok":
            continue
        key = (row["budget"], row["r"])
        if key not in best or row["loss"] < best[key]["loss"]:
            best[key] = row

    def cell(value) -> str:
        return f"{value:.4f}" if isinstance(value, float) and math.isfinite(value) else "–"

    def with_se(row: dict, axis: str) -> str:
        se = row.get(SE_PREFIX + axis)
        value = cell(row.get(axis))
        known = value != "–" and isinstance(se, float) and math.isfinite(se)
        return f"{value} ± {se:.4f}" if known else value

    table = Table(
        ["C (FLOPs)", "r", "run", "val loss", *(a.removeprefix("axis_") for a in axes)],
        [
            [f"{budget:.3g}", str(r), row["run"], cell(row["loss"]), *(with_se(row, a) for a in axes)]
            for (budget, r), row in sorted(best.items())
        ],
    )
    note = (
        "Per-axis continuation loss (nats per gold token; axis = mean of its tasks; ± its standard error "
        "over the sampled examples) of the compute-optimal run of each (budget, r) cell; – where a run was "
        "not evaluated."
    )
    title = "Downstream axes at the compute-optimal checkpoints"
    blocks = [note, table, *_axis_gaps(best, axes), *_axis_correlations(rows, axes), *_axis_task_lists(rows)]
    return Section(title, blocks)


def _axis_gaps(best: dict[tuple[float, int], dict], axes: list[str]) -> list:
    """Per budget and looped r, each axis's loss minus r = 1's (compute-optimal checkpoints, nats) ± the
    standard error of the difference; a gap within two standard errors is marked as not resolved."""
    budgets = sorted({budget for budget, _ in best})
    looped = sorted({r for _, r in best if r != 1})
    body = []
    for budget in budgets:
        base = best.get((budget, 1))
        for r in looped:
            row = best.get((budget, r))
            if base is None or row is None:
                continue
            cells = []
            for axis in axes:
                a, b = row.get(axis), base.get(axis)
                sa, sb = row.get(SE_PREFIX + axis), base.get(SE_PREFIX + axis)
                if not all(isinstance(v, float) and math.isfinite(v) for v in (a, b, sa, sb)):
                    cells.append("–")
                    continue
                gap, se = a - b, math.hypot(sa, sb)
                cells.append(f"{gap:+.3f} ± {se:.3f}" + ("" if abs(gap) > 2 * se else " (not resolved)"))
            body.append([f"{budget:.3g}", str(r), *cells])
    if not body:
        return []
    note = ("Gap to r = 1 at the same budget (axis loss of the looped model minus r = 1's, nats; positive = "
            "r = 1 better) ± the standard error of the difference; \"not resolved\" where it is within two "
            "standard errors (the paper: knowledge gaps grow with r, reading comprehension and compositional "
            "symbolic close them, reasoning primitives unresolved; method §10.5). The standard error counts "
            "only the sampling of examples, not run-to-run variation (seed, width): an axis whose gaps "
            "change sign from one budget to the next, or that barely correlates with the validation loss "
            "(below), varies more between runs than this ± says, and its gaps are not findings.")
    return [note, Table(["C (FLOPs)", "r", *(a.removeprefix("axis_") for a in axes)], body)]


def _axis_correlations(rows: list[dict], axes: list[str]) -> list:
    """Pearson correlation of each axis loss (and of their mean) with the validation loss over every
    evaluated run: the paper's check that continuation loss tracks validation loss (+0.983 for the
    macro average, method §10.1)."""
    import statistics

    def finite(value) -> bool:
        return isinstance(value, float) and math.isfinite(value)

    ok = [row for row in rows if row["status"] == "ok" and finite(row["loss"])]
    measured = [a for a in axes if any(finite(row.get(a)) for row in ok)]  # e.g. not an axis without data
    series = {a.removeprefix("axis_"): [(row["loss"], row[a]) for row in ok if finite(row.get(a))]
              for a in measured}
    series["macro (mean of axes)"] = [(row["loss"], sum(row[a] for a in measured) / len(measured))
                                      for row in ok if measured and all(finite(row.get(a)) for a in measured)]
    def pearson(pairs) -> str:
        try:
            return f"{statistics.correlation(*zip(*pairs)):+.3f}"
        except statistics.StatisticsError:  # one of the two is constant
            return "–"

    body = [[name, pearson(pairs), str(len(pairs))] for name, pairs in series.items() if len(pairs) >= 3]
    if not body:
        return []
    note = ("Pearson correlation with the validation loss over every evaluated run (the paper: +0.983 for "
            "the macro continuation loss). A low value says the axis measures something the validation "
            "loss does not, or that its tasks are too noisy at this scale (see the ± in the table above).")
    return [note, Table(["axis", "Pearson r with val loss", "runs"], body)]


def _axis_task_lists(rows: list[dict]) -> list:
    """Which tasks each axis number averages (the ``tasks_<axis>`` columns of collect), which of them hold
    other data than the paper's (``*``), and which of the paper's tasks of that axis had none."""
    from loopscale.eval.axes import AXES

    lists: dict[tuple[str, str], int] = {}
    for row in rows:
        for key, value in row.items():
            if key.startswith(TASKS_PREFIX) and row["status"] == "ok" and isinstance(value, str):
                axis = key.removeprefix(TASKS_PREFIX)
                lists[(axis, value)] = lists.get((axis, value), 0) + 1
    if not lists:
        return []
    body = []
    for (axis, tasks), runs in sorted(lists.items()):
        names = set() if tasks == NO_TASKS else {t.rstrip("*") for t in tasks.split()}
        missing = [t for t in AXES.get(axis, ()) if t not in names]
        body.append([axis, tasks if names else "–", ", ".join(missing) or "none", str(runs)])
    table = Table(["axis", "tasks evaluated", "paper tasks without data", "runs"], body)
    note = ("The tasks behind each axis number. * marks data that differ from the paper's (a subset, another "
            "copy or a generated stand-in; `loopscale eval prepare` lists how); an axis is comparable across "
            "runs only with the same task list.")
    return [note, table]


def _axis_plots(rows: list[dict], out_dir: Path) -> list[Path]:
    """Axis continuation loss vs validation loss (nats), one panel per axis, coloured by r."""
    axes = _axis_columns(rows)
    ok = [row for row in rows if row["status"] == "ok"]
    if not axes or not ok:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs = sorted({row["r"] for row in ok})
    colors = {r: plt.cm.viridis(i / max(1, len(rs) - 1)) for i, r in enumerate(rs)}
    cols = min(3, len(axes))
    fig, grid = plt.subplots(
        -(-len(axes) // cols), cols, figsize=(4.5 * cols, 3.6 * -(-len(axes) // cols)), squeeze=False
    )
    for ax, name in zip(grid.flat, axes):
        for r in rs:
            pts = [
                (row["loss"], row[name])
                for row in ok
                if row["r"] == r and math.isfinite(row.get(name, math.nan))
            ]
            if pts:
                ax.scatter(*zip(*pts), color=colors[r], s=16, label=f"r={r}")
        ax.set(title=name.removeprefix("axis_"), xlabel="validation loss (nats)", ylabel="axis loss (nats)")
    for ax in list(grid.flat)[len(axes) :]:
        ax.set_visible(False)
    grid.flat[0].legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / "axes.png"
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=130, bbox_inches="tight"))
    plt.close(fig)
    return [path]
