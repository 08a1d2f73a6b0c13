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
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from loopscale.config import ModelConfig, from_dict
from loopscale.errors import UserError
from loopscale.fit import equivalence, load_table, plot_protocol, run_protocol
from loopscale.fit.labels import count_label, flops_label, interval_text, percent_text
from loopscale.fit.law import LOWER, PARAMS, UPPER, law_loss
from loopscale.fit.plots import method_name, no_data_note, panel_grid
from loopscale.fit.table import SkippedRunsWarning
from loopscale.io import atomic_write, atomic_write_json, atomic_write_text
from loopscale.paper import JOINT_FIT, PHI_CI
from loopscale.published import path_from, relative_text
from loopscale.report.document import Bullets, Document, Image, Pre, Section, Table
from loopscale.sweep.collect import collect
from loopscale.sweep.results import NO_TASKS, SE_PREFIX, TASKS_PREFIX, read_results
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
        template_source=f"the sweep's template ({path_from(folder, sweep_dir / 'sweep.yaml')})",
    )
    doc = protocol.to_dict()
    skipped = list(table.skipped)
    baselines = _baselines(spec, folder)
    below_bigram = _below_bigram(baselines, rows)
    summary = summary_line(doc, len(table), len(rows), skipped, spec.name, below_bigram)

    figures = plot_protocol(protocol, table, folder / "plots", baselines["values"])
    plots = [p for p in figures if p.suffix == ".png"]
    residual_figure = next((p for p in plots if p.stem == "residuals_vs_width"), None)
    plots = [p for p in plots if p != residual_figure]  # shown once, in the law check
    plots += _axis_plots(rows, folder / "plots")
    doc["baselines"] = baselines
    report = Document(
        title=f"loopscale report: sweep {spec.name}",
        lead=_lead(doc, len(table), len(rows), _baseline_statement(baselines, below_bigram)),
    )
    if spec.reuse:  # a case study: Δφ against the base sweep whose r = 1 runs it reuses
        compare_doc, section = _case_study(spec, table, folder, restarts, bootstrap, seed)
        atomic_write_json(folder / "compare.json", compare_doc)
        report.lead.insert(0, f"**Case study: {compare_doc['verdict']}** (section below; compare.json).")
        report.sections.append(section)
        summary = f"{compare_doc['verdict']}; {summary}"
    report.sections.append(_law_check_section(doc, residual_figure))
    report.sections.append(_design_checks_section(doc, rows, below_bigram))
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


def _case_study(spec, table, folder: Path, restarts: int, bootstrap: int, seed: int):
    """``report.compare.case_study`` of this sweep (the variant) against its first ``reuse`` folder."""
    from loopscale.report.compare import case_study

    base_dir = Path(spec.reuse[0])
    base_rows = (
        read_results(base_dir / "results.csv") if not (base_dir / "runs").is_dir() else collect(base_dir)[0]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRunsWarning)
        base = load_table(base_rows)
    settings = {"restarts": restarts, "resamples": bootstrap, "seed": seed}
    return case_study(base, table, spec.name, folder / "plots", **settings)


# --- φ: verdict, intervals, identification ---------------------------------------------------------------


def _identified(doc) -> bool:
    return doc["diagnostics"]["phi_identified"] is True


def _level(doc) -> str:
    boot = doc["bootstrap"]
    return f"{100 * boot['level']:.0f}%" if boot else "95%"


def _intervals_text(doc, digits: int = 3) -> str:
    """The intervals for φ the protocol computed, side by side: ``ci.phi`` (named by ``ci.phi_method``, the
    block bootstrap when fit.json names none), then the profile-likelihood interval."""
    parts = [_main_interval_text(doc, digits)] if doc["ci"].get("phi") else []
    prof = doc["profile"]
    if prof:
        parts.append(
            f"profile-likelihood {100 * prof['level']:.0f}% interval "
            f"{interval_text(prof['interval'], prof['open'], digits=digits)}"
        )
    return ", ".join(parts)


def _ci_method(doc) -> str | None:
    """How ``ci.phi`` was made (fit.json ``ci_method``, e.g. "random_effects_bootstrap"); None for the cell
    block bootstrap, the only interval before the law check."""
    method = doc["ci"].get("phi_method") or doc.get("ci_method")
    return None if method in (None, "cell_bootstrap") else str(method)


def _main_interval_text(doc, digits: int = 3) -> str:
    """``ci.phi``: "95% CI [lo, hi] (random-effects bootstrap)", or "bootstrap 95% CI [lo, hi]" when it is
    the cell block bootstrap's."""
    interval = interval_text(doc["ci"]["phi"], digits=digits)
    method = _ci_method(doc)
    if method is None:
        return f"bootstrap {_level(doc)} CI {interval}"
    return f"{_level(doc)} CI {interval} ({method_name(method)})"


def _law_verdict(doc) -> str:
    """The first sentence of the report and of the CLI line: what the law check (fit.json
    ``law_check``) says about the law, without φ. Rejected: its headline, the strongest evidence."""
    check = doc.get("law_check")
    if check is None:
        return "law not checked (fit.json predates the law check)"
    reasons = "; ".join(r for r in check.get("reasons") or [] if r)
    verdict = check.get("verdict")
    if verdict == "rejected":
        return check.get("headline") or f"the law is rejected: {reasons or 'no reason recorded'}"
    if verdict == "holds":  # its headline without φ, which the report gives with its interval next
        headline = re.split(r";\s*(?:phi|φ)\s*=", check.get("headline") or "")[0].strip()
        return headline or "the law holds on these runs (no test of the law check rejects it)"
    return f"the law could not be checked: {reasons or check.get('headline') or 'no reason recorded'}"


def _rejected(doc) -> bool:
    return (doc.get("law_check") or {}).get("verdict") == "rejected"


def _per_budget_text(check: dict) -> str:
    """φ per budget with its CI and per budget half (the law check's refits), one phrase."""
    items = [
        f"C = {flops_label(row['budget'])}: {_num(row.get('phi'), '{:.2f}')} {_ci_text(row.get('ci'), 2)}"
        for row in check.get("per_budget_phi") or []
    ]
    halves = check.get("halves") or {}
    text = "per budget " + "; ".join(items) if items else "no per-budget φ"
    half_items = [
        f"{name} {_num(h.get('phi'), '{:.2f}')} {_ci_text(h.get('ci'), 2)}"
        for name, h in halves.items()
        if h
    ]
    if half_items:
        text += "; budget halves: " + ", ".join(half_items)
    return text


def _ci_text(ci, digits: int = 3) -> str:
    """An interval from fit.json, "[–]" when it is missing or has a missing end."""
    if not ci or len(ci) != 2 or any(v is None for v in ci):
        return "[–]"
    return interval_text(ci, digits=digits)


def summary_line(
    doc, fitted: int, planned: int, skipped, sweep: str, bigram: tuple[int, int, float] | None = None
) -> str:
    """The CLI's one line (the last line of ``loopscale report`` and ``loopscale demo``): the law check's
    verdict first, then φ (marked when the constant-φ law is rejected or φ is not identified) with its
    intervals, R², the runs fitted and how many runs are below the bigram table (``bigram`` = (below,
    finished runs, its loss in nats); None when the baselines are not available)."""
    fit = doc["fit"]
    line = _law_verdict(doc).rstrip(".") + ". "
    phi = fit.get("phi")  # absent for the plain Chinchilla law
    if phi is not None:
        details = [_intervals_text(doc) or "no interval computed"]
        if doc["diagnostics"]["phi_identified"] is False:
            details.insert(0, "not identified")
        if _rejected(doc):
            details.insert(0, "constant-φ law, rejected")
        line += f"phi = {phi:.3f} ({'; '.join(details)}), "
    if bigram is None:
        beside = "bigram table not available"
    else:
        below, finished, loss = bigram
        beside = f"{below} of {finished} runs below the bigram table ({loss:.3f} nats)"
    return (
        line
        + f"R² = {fit['r2']:.4f}, {fitted} of {planned} runs fitted"
        + (f", {len(skipped)} left out" if skipped else "")
        + f", {beside} [sweep {sweep}]"
    )


def _phi_statement(doc) -> str:
    """φ with its intervals: bold only when identified by a law the law check does not reject; plain with
    "(not identified)" when the protocol says so; beside φ per budget when the constant-φ law is rejected."""
    fit, diag = doc["fit"], doc["diagnostics"]
    phi = fit.get("phi")
    if phi is None:
        return "The plain Chinchilla law has no φ."
    if doc["settings"].get("fix_phi") is not None:
        return f"φ fixed at {phi:g} (not fitted)."
    intervals = _intervals_text(doc)
    tail = f": {intervals}." if intervals else " (no interval computed)."
    marker = {False: " (not identified)", None: " (identification not assessed)"}.get(
        diag["phi_identified"], ""
    )
    if _rejected(doc):
        return (
            f"φ = {phi:.3f}{marker} is the constant-φ law's single number, which these runs reject: "
            f"{intervals or 'no interval computed'}; {_per_budget_text(doc['law_check'])}."
        )
    if not marker:
        return f"**φ = {phi:.3f}**{tail}"
    return f"φ = {phi:.3f}{marker}{tail}"


def _quality_statement(doc) -> str:
    fit = doc["fit"]
    return (
        f"R² = {fit['r2']:.4f} (raw losses, nats) beside the objective that was minimised: "
        f"{fit['objective']:.3e} (summed Huber, δ = {doc['settings']['huber_delta']:g}, on log loss); "
        "why the two can rank forms differently: see Law fits."
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
    measured fp32 matmul peak, and the per-run overhead (process wall − training-loop time).

    ``peak_flops`` (FLOP/s): a given peak; None probes this machine (``train.perf.peak_measurement``). A
    peak probed while other work loaded the machine reads low, so no utilisation is computed from it:
    ``peak_load`` then records that load (``load_1min``, ``cores``) and ``utilisation`` stays None."""
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
        "peak_load": None,
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

                from loopscale.train.perf import peak_measurement

                torch.set_num_threads(os.cpu_count() or 1)
                peak = peak_measurement("cpu", "float32")  # the best idle probe here (re-measured daily)
                peak_flops = peak.flops
                if peak.busy:
                    out["peak_load"] = {"load_1min": peak.load.load_1min, "cores": peak.load.cores}
            out["peak_flops_per_s"] = float(peak_flops)
            if out["peak_load"] is None:
                out["utilisation"] = out["achieved_flops_per_s"] / peak_flops
    return out


def throughput_text(use: dict) -> str | None:
    """What the sweep achieved against the machine's fp32 matmul peak (a ``machine_use`` dict), the one
    wording of the report's and the sweep's machine-use line; None without run timings."""
    if use["achieved_flops_per_s"] is None:
        return None
    achieved = f"{use['achieved_flops_per_s'] / 1e9:.1f} GFLOP/s"
    if use["utilisation"] is not None:
        return (
            f"{achieved} = {100 * use['utilisation']:.1f}% of the fp32 matmul peak of this machine "
            f"({use['peak_flops_per_s'] / 1e9:.0f} GFLOP/s, all cores)"
        )
    load = use["peak_load"]
    # a peak cached before loads were recorded carries none (an infinite load, null in fit.json)
    known = load["load_1min"] is not None and math.isfinite(load["load_1min"])
    shown = f"load {load['load_1min']:.1f} on {load['cores']} cores" if known else "load not recorded"
    return f"{achieved}; no utilisation: peak not measured on an idle machine ({shown})"


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
    throughput = throughput_text(use)
    if throughput is not None:
        lines.append(
            f"Busy wall time {use['busy_wall_s'] / 3600:.2f} h over {use['timed_runs']} timed runs: "
            f"{throughput}."
        )
    else:
        lines.append("Sweep utilisation: not available (the runs carry no start and finish times).")
    return Section("Machine use", lines)


def _baselines(spec, folder: Path) -> dict:
    """Unigram/bigram cross-entropy of the sweep's validation tokens, or why they are not available; the
    dataset path relative to the report ``folder`` (a published report names no machine path)."""
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
        return {"values": None, "note": f"not available: {relative_text(str(exc), folder)}"}
    return {"values": values.to_dict(), "dataset": path_from(folder, path), "note": None}


def _below_bigram(baselines: dict, rows: list[dict]) -> tuple[int, int, float] | None:
    """(finished runs below the bigram table, finished runs, the bigram table's loss in nats), or None
    when the baselines are not available."""
    values = baselines["values"]
    if values is None:
        return None
    losses = [row["loss"] for row in _finished(rows)]
    return sum(loss < values["bigram"] for loss in losses), len(losses), values["bigram"]


def _finished(rows: list[dict]) -> list[dict]:
    """The rows of runs that finished with a finite loss."""
    return [row for row in rows if row.get("status") == "ok" and math.isfinite(row.get("loss", math.nan))]


def _baseline_statement(baselines: dict, below_bigram: tuple[int, int, float] | None) -> str:
    values = baselines["values"]
    if values is None:
        return f"Count-model baselines (unigram / bigram loss of the validation tokens) {baselines['note']}"
    below, finished, _ = below_bigram
    return (
        f"Baselines on the same {values['val_tokens']:,} validation tokens: a unigram table scores "
        f"{values['unigram']:.3f} nats and a bigram table (Witten–Bell) {values['bigram']:.3f} nats; "
        f"{below} of {finished} finished runs are below the bigram table"
        + (
            "."
            if below == finished
            else ": a run above it has learned less than token-pair statistics, so read φ with that in mind."
        )
    )


def _lead(doc, fitted: int, planned: int, baseline: str | None = None) -> list:
    """The first screen, each thing once: the law check's verdict (with φ and ``ci.phi`` in the same
    paragraph when the law holds; its headline alone when it is rejected, φ per budget right under it),
    why φ is not identified, the count baselines, the fit quality, the runs fitted."""
    diag = doc["diagnostics"]
    verdict = f"**Verdict:** {_law_verdict(doc).rstrip('.')}"
    if (doc.get("law_check") or {}).get("verdict") == "holds":
        blocks: list = [f"{verdict}; {_phi_statement(doc)}"]
    else:
        blocks = [f"{verdict}.", _phi_statement(doc)]
    if diag["phi_identified"] is False and diag["reasons"]:
        blocks += ["Why φ is not identified:", Bullets(list(diag["reasons"]))]
    if baseline:  # on the first screen: a φ measured on runs worse than a bigram table is about token
        blocks.append(baseline)  # statistics, not language, whatever the fit says
    blocks.append(_quality_statement(doc))
    blocks.append(f"{fitted} of {planned} planned runs fitted.")
    return blocks


# --- the law check: does the law describe the runs at all? --------------------------------------


_NOISE_SOURCE = {
    "replicates": "the replicate seeds' variance",
    "--noise": "the noise figure given with --noise",
    "none": "no noise figure (no replicate seeds and no --noise)",
}


def _noise_text(check: dict) -> str:
    noise = check.get("noise") or {}
    source = noise.get("source") or "none"
    if noise.get("sigma") is None or source == "none":
        return (
            "Noise: not known (no replicate seeds and no --noise), so nothing below is measured in noise "
            "units and the lack-of-fit test is not run."
        )
    df = f" from {noise['df']} degrees of freedom" if noise.get("df") is not None else ""
    ci = f", 95% CI {_ci_text(noise.get('ci'))}" if noise.get("ci") else ""
    return f"Noise: σ = {noise['sigma']:.4f} nats{df} ({_NOISE_SOURCE.get(source, source)}{ci})."


def _lack_of_fit_text(check: dict) -> str:
    lof = check.get("lack_of_fit")
    if not lof:
        return "Lack-of-fit test: not run (no replicate seeds and no --noise to test the residuals against)."
    name = "F" if lof.get("test") == "F" else "χ²"
    df = lof.get("df")
    df_text = "" if df is None else f" on {tuple(df)} df" if isinstance(df, list) else f" on {df} df"
    source = _NOISE_SOURCE.get(lof.get("source"), lof.get("source") or "an unnamed noise figure")
    return (
        f"Lack-of-fit test: {name} = {_num(lof.get('statistic'), '{:.2f}')}{df_text}, "
        f"p = {_num(lof.get('p'), '{:.2g}')}, against {source}: residual RMSE "
        f"{_num(lof.get('rmse'), '{:.4f}')} nats against σ = {_num(lof.get('sigma'), '{:.4f}')} nats."
    )


def _law_check_section(doc, figure: Path | None = None) -> Section:
    """The law check's evidence: leave-one-budget-out prediction, lack of fit, the one-parameter extensions
    of the law, φ per budget and per half, the residual decomposition and residuals against width."""
    check = doc.get("law_check")
    if check is None:
        return Section(
            "Law check",
            [
                "Law not checked (fit.json predates the law check): nothing here says whether one constant φ "
                "describes these runs; rerun `loopscale fit` or `loopscale report` with this version."
            ],
        )
    blocks: list = []
    # the verdict is the report's first line; an untestable one gives its reasons there, the others here
    if check.get("reasons") and check.get("verdict") in ("rejected", "holds"):
        reasons = Bullets([str(reason) for reason in check["reasons"]])
        blocks += [f"The tests behind the verdict ({check['verdict']}):", reasons]
    blocks.append(_noise_text(check))
    lobo = check.get("leave_one_budget_out") or []
    if lobo:
        blocks.append(
            "Leave one budget out: fit without it, predict it (the top budget is the extrapolation a user "
            "relies on); RMSE and bias (observed − predicted) in nats and in units of the noise σ:"
        )
        tested = any("F" in row for row in lobo)  # a test of each prediction, when the check made one
        blocks.append(
            Table(
                ["C (FLOPs)", "runs", "RMSE (nats)", "bias (nats)", "RMSE / σ", "bias / σ"]
                + (["F", "p"] if tested else []),
                [
                    [
                        _num(row.get("budget"), flops_label),
                        _num(row.get("n")),
                        _num(row.get("rmse"), "{:.4f}"),
                        _num(row.get("bias"), "{:+.4f}"),
                        _num(row.get("rmse_over_noise"), "{:.1f}"),
                        _num(row.get("bias_over_noise"), "{:+.1f}"),
                    ]
                    + ([_num(row.get("F"), "{:.2f}"), _num(row.get("p"), "{:.2g}")] if tested else [])
                    for row in lobo
                ],
            )
        )
    else:
        blocks.append("Leave one budget out: not available (fewer than two budgets).")
    blocks.append(_lack_of_fit_text(check))
    extensions = check.get("extensions") or []
    if extensions:
        selected = check.get("selected_form")
        blocks.append(
            "One-parameter extensions of the law (each against the constant-φ law: likelihood-ratio "
            "statistic LR, extra-sum-of-squares F and its p-value, AIC, residual RMSE and "
            "leave-one-budget-out RMSE; CI from the cell bootstrap)"
            + (f"; selected form: {selected}." if selected else ".")
        )
        header = ["form", "extra parameter", "estimate", "CI", "base φ", "LR", "F", "p", "AIC", "RMSE"]
        blocks.append(
            Table(
                [*header, "leave-out RMSE"],
                [
                    [
                        str(e.get("form")) + (" (selected)" if e.get("form") == selected else ""),
                        str(e.get("label") or ""),
                        _num(e.get("estimate"), "{:+.3f}"),
                        _ci_text(e.get("ci")),
                        _num(e.get("phi0"), "{:.3f}"),
                        _num(e.get("lr"), "{:.1f}"),
                        _num(e.get("F"), "{:.1f}"),
                        _num(e.get("p"), "{:.2g}"),
                        _num(e.get("aic"), "{:.1f}"),
                        _num(e.get("rmse"), "{:.4f}"),
                        _num(e.get("lobo_rmse"), "{:.4f}"),
                    ]
                    for e in extensions
                ],
            )
        )
    per_budget = check.get("per_budget_phi") or []
    halves = check.get("halves") or {}
    if per_budget or halves:
        rows = [
            [
                f"C = {flops_label(row['budget'])}",
                _num(row.get("n")),
                _num(row.get("phi"), "{:.3f}"),
                _ci_text(row.get("ci")),
            ]
            for row in per_budget
        ]
        rows += [
            [
                f"{name} half ({', '.join(flops_label(b) for b in h.get('budgets') or [])})",
                _num(h.get("n")),
                _num(h.get("phi"), "{:.3f}"),
                _ci_text(h.get("ci")),
            ]
            for name, h in halves.items()
            if h
        ]
        blocks.append("φ refitted per budget and per half of the budgets (E, α, β shared within a refit):")
        blocks.append(Table(["refit on", "runs", "φ", "CI"], rows))
    shares = check.get("decomposition") or {}
    shares = {k: v for k, v in shares.items() if v is not None}
    if shares:
        names = {"r_x_width": "r × width", "budget_x_r": "budget × r"}
        blocks.append(
            "Share of the residual sum of squares explained by the group means: "
            + ", ".join(f"{names.get(k, k)} {percent_text(v)}" for k, v in shares.items())
            + " (a law that describes the runs leaves residuals no grouping explains)."
        )
    if figure is not None:
        blocks.append(Image(figure, _caption(figure)))
    return Section("Law check", blocks)


# Targets of a sweep built to test the law (docs/sweeps.md, the factorial laptop design): a law that
# describes the runs fits them, and predicts a left-out top budget, to within twice the seed noise.
NOISE_MULTIPLE = 2.0
MIN_REPLICATED_RUNS = 8


def _selected_form(check: dict) -> tuple[str, float | None, list[dict]]:
    """(name, residual RMSE in nats, leave-one-budget-out rows) of the form the law check selected."""
    name = check.get("selected_form") or "paper"
    if name == "paper":
        return name, check.get("rmse"), check.get("leave_one_budget_out") or []
    ext = next((e for e in check.get("extensions") or [] if e.get("form") == name), {})
    return name, ext.get("rmse"), ext.get("leave_one_budget_out") or []


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _design_checks_section(doc, rows: list[dict], below_bigram: tuple[int, int, float] | None) -> Section:
    """Can these runs test the law? The factorial laptop design's targets (docs/sweeps.md), each with the
    measured value, so that a missed one shows by how much, and the cells or runs that miss it."""
    check = doc.get("law_check") or {}
    finished = _finished(rows)
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
    noise = check.get("noise") or {}
    sigma = noise.get("sigma") if noise.get("source") == "replicates" else None
    replicated = noise.get("replicated_runs") if sigma else 0
    noise_value = (
        f"{replicated} runs in {replicated - noise['df']} replicated cells: σ = {sigma:.4f} nats on "
        f"{noise['df']} df, "
        f"95% CI {_ci_text(noise.get('ci'), 4)}"
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
    top = max((row for row in lobo if "rmse" in row), key=lambda row: row["budget"], default=None)
    if top is not None and sigma:
        name = f"top budget ({flops_label(top['budget'])}) left out, predicted by {label}"
        measured = f"RMSE {top['rmse']:.4f} nats = {top['rmse'] / sigma:.1f} σ"
        add(name, measured, target, top["rmse"] <= NOISE_MULTIPLE * sigma)
    minima = doc.get("cell_minima") or []
    if minima:
        vertex = sum(bool(m.get("bracketed")) for m in minima)
        by_runs = sum(bool(m.get("runs_bracket")) for m in minima)
        name = "iso-FLOP cells bracketed: vertex inside the widths / lowest run inside"
        add(name, f"{vertex} / {by_runs} of {len(minima)}", "all", vertex == by_runs == len(minima))
        edge: dict[float, list[str]] = {}
        for m in minima:
            if not m.get("runs_bracket"):
                edge.setdefault(m["budget"], []).append(str(m["r"]))
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
        shares = {k: v for k, v in (check.get("decomposition") or {}).items() if v is not None}
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
            + ", ".join(f"{_SYMBOL.get(k, k)} {percent_text(v)}" for k, v in share.items())
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
    if _rejected(doc):
        return (
            f"No comparison with the paper ({paper}) is made: these runs reject one constant φ (law check), "
            "so its single number is not a measurement to compare."
        )
    if not _identified(doc):
        return (
            f"No comparison with the paper ({paper}) is made: φ is not identified by this sweep, so its "
            "intervals say nothing about the paper's value."
        )
    parts = []
    if doc["ci"].get("phi"):
        name = "bootstrap CI" if _ci_method(doc) is None else f"{method_name(_ci_method(doc))} CI"
        parts.append(_overlap_text(name, doc["ci"]["phi"], PHI_CI))
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
    method = _ci_method(doc)
    cells = f"{boot['resamples']} resamples of {boot['cells']} (budget, r) cells" if boot else ""
    if doc["ci"].get("phi"):
        lo, hi = doc["ci"]["phi"]
        name = "block bootstrap (percentile)" if method is None else method_name(method)
        how = cells if method is None else "the interval reported with φ (law check, docs/fitting.md)"
        rows.append([name, _level(doc), _num(lo, "{:.3f}"), _num(hi, "{:.3f}"), how])
    else:
        rows.append(["block bootstrap (percentile)", "", "–", "–", "not computed (bootstrap off)"])
    for name, interval in (doc.get("ci_secondary") or {}).items():
        if name in ("profile", method or "cell_bootstrap") or not interval:
            continue  # the profile has its own row below; the reported interval is above
        how = f"secondary: {cells}" if name == "cell_bootstrap" else "secondary"
        rows.append([method_name(name), _level(doc), *(_num(v, "{:.3f}") for v in interval), how])
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
    blocks: list = []  # φ itself is on the first screen; here its intervals side by side
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
    caveat = ""
    if _rejected(doc):
        caveat = " (from the constant-φ law these runs reject: an illustration, not a finding)"
    elif not _identified(doc):
        caveat = " (from the point estimate of a φ that is not identified: an illustration, not a finding)"
    if doc["loop_worth"]:
        blocks.append(
            f"What one loop is worth{caveat}: "
            + "; ".join(
                f"r = {w['r']} loops ≈ {w['worth']:.2f} unique blocks "
                f"({percent_text(w['fraction'])} of full equivalence)"
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
                f"Equivalence at this scale{caveat}: next to an r = 1 model with {count_label(params)} "
                f"non-embedding parameters (d ≈ {eq['width']:.0f}), the r = {r} model of the same width has "
                f"{count_label(eq['unique_params'])} unique parameters ({eq['unique_ratio']:.2f}×) and is "
                f"worth {count_label(eq['effective_params'])} non-looped "
                f"parameters ({eq['effective_ratio']:.2f}×, r^φ = {eq['worth']:.2f}), while it costs "
                f"{eq['flops_ratio']:.3f}× the training FLOPs per token, as much as an r = 1 model with "
                f"{count_label(eq['cost_equivalent_params'])} parameters."
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
    intervals = {k: v for k, v in doc["ci"].items() if isinstance(v, list | tuple) and len(v) == 2}
    if intervals:
        method = _ci_method(doc)
        blocks.append(
            f"{_level(doc)} CIs ({method_name(method) if method else 'cell block bootstrap'})"
            + ": "
            + ", ".join(f"{k} [{_num(a, '{:.4g}')}, {_num(b, '{:.4g}')}]" for k, (a, b) in intervals.items())
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
            head = [flops_label(row["budget"]), r]
            if why:
                unidentified_r.add(r)
                rows.append([*head, "not identified: " + ", ".join(why), "–", "–", "–", "–", "–"])
                continue
            rows.append(
                [
                    *head,
                    f"{row['width']:.0f}",
                    count_label(row["n"]),
                    count_label(row["n_eff"]),
                    count_label(row["tokens"]),
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
        head = [flops_label(m["budget"]), str(m["r"]), str(m["n_runs"])]
        if not m["bracketed"]:  # no vertex numbers: an extrapolated vertex can be absurd
            rows.append([*head, "not bracketed", "–", "–", m["reason"]])
            continue
        gap = gaps.get((m["budget"], m["r"]))
        gap_text = "–" if gap is None else f"{gap:+.4f}"
        # fit.json files written before runs_bracket existed: no note rather than a guess
        edge = "lowest loss at an end of the width range" if m.get("runs_bracket") is False else ""
        rows.append([*head, count_label(m["n_star"]), f"{m['loss_star']:.4f}", gap_text, edge])
    bracketed = sum(m["bracketed"] for m in doc["cell_minima"])
    by_runs = sum(bool(m.get("runs_bracket")) for m in doc["cell_minima"])
    return Section(
        "Empirical iso-FLOP minima (parabola in log N per cell, method §8.7)",
        [
            f"{bracketed} of {len(doc['cell_minima'])} cells bracket their minimum; in {by_runs} the runs "
            "themselves do (the lowest loss has a higher one on each side in N).",
            Table(["C (FLOPs)", "r", "runs", "N*", "L* (nats)", "gap to r=1", "note"], rows),
            "A vertex is given only where the widths run bracket it (at least three sizes, a parabola that "
            "opens upwards, the vertex between the smallest and largest N run); otherwise the cell is "
            '"not bracketed" and a wider width range at that budget is needed. A vertex whose lowest run is '
            "at an end of the width range rests on the parabola's shape alone.",
        ],
    )


def _num(value, fmt="{:.0f}") -> str:
    """A table cell: ``fmt`` (a format string or a function such as ``flops_label``) of a finite number,
    "–" for anything else (None, NaN, text)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "–"
    if not math.isfinite(value):
        return "–"
    return fmt(value) if callable(fmt) else fmt.format(value)


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
                _num(row.get("budget"), flops_label),
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
        "residuals_vs_width": "Residuals of the fit (observed − predicted, nats) against width, one panel "
        "per r, coloured by budget, with the mean per width: a law that describes the runs leaves a flat "
        "band around 0 in every panel.",
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
            [flops_label(budget), str(r), row["run"], cell(row["loss"]), *(with_se(row, a) for a in axes)]
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
            body.append([flops_label(budget), str(r), *cells])
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
    """axes.png: ``axis_figure`` of the rows (nothing when no run was evaluated)."""
    fig = axis_figure(rows)
    if fig is None:
        return []
    import matplotlib.pyplot as plt

    path = out_dir / "axes.png"
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=130, bbox_inches="tight"))
    finally:
        plt.close(fig)
    return [path]


def axis_figure(rows: list[dict]):
    """Axis continuation loss vs validation loss (nats), one panel per axis, coloured by r; a panel whose
    axis no run has a loss on says "no data". None without axis columns or finished runs."""
    axes = _axis_columns(rows)
    ok = [row for row in rows if row["status"] == "ok"]
    if not axes or not ok:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs = sorted({row["r"] for row in ok})
    colors = {r: plt.cm.viridis(i / max(1, len(rs) - 1)) for i, r in enumerate(rs)}
    n_rows, cols = panel_grid(len(axes))
    fig, grid = plt.subplots(n_rows, cols, figsize=(4.5 * cols, 3.6 * n_rows), squeeze=False)
    for ax, name in zip(grid.flat, axes):
        for r in rs:
            pts = [
                (row["loss"], row[name])
                for row in ok
                if row["r"] == r and math.isfinite(row.get(name, math.nan))
            ]
            if pts:
                ax.scatter(*zip(*pts), color=colors[r], s=16, label=f"r={r}")
        if not ax.has_data():  # an axis whose tasks had no data (e.g. math_word_problems without ASDiv)
            no_data_note(ax, "no data: no run has a loss on this axis")
        ax.set(title=name.removeprefix("axis_"), xlabel="validation loss (nats)", ylabel="axis loss (nats)")
    for ax in list(grid.flat)[len(axes) :]:
        ax.set_visible(False)
    with_data = [ax for ax in grid.flat if ax.get_legend_handles_labels()[0]]
    if with_data:
        with_data[0].legend(fontsize=8)
    fig.tight_layout()
    return fig
