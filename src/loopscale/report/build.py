"""``loopscale report SWEEP_DIR``: collect → fit (method §8) → report.md + self-contained report.html.

The first screen holds the law check's verdict with φ and its interval (bold only when identified by a law
the check does not reject), a table of the headline numbers and the key figures: the iso-FLOP curves per r
with the fitted law (for a case study, Δφ per budget against the paper's effect) and φ refitted per budget
against the constant-φ line. Then one section each, in the order ``_sections`` gives: summary, case study,
law check, design checks, result, law fits, compute-optimal allocation, iso-FLOP minima, downstream axes,
machine use, runs, figures, the full fit output and the methods. Losses are in nats, compute in training
FLOPs, D in tokens.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from loopscale.config import ModelConfig, from_dict
from loopscale.fit import load_table, plot_protocol, run_protocol
from loopscale.fit.table import SkippedRunsWarning
from loopscale.io import atomic_write_json, atomic_write_text
from loopscale.published import path_from
from loopscale.report.allocation import frontier_section, minima_section
from loopscale.report.axes import axes_section, axis_plots
from loopscale.report.baselines import baseline_statement, below_bigram_counts, dataset_baseline_losses
from loopscale.report.design_checks import design_checks_section
from loopscale.report.document import Document, Image, Pre, Section
from loopscale.report.figures import caption, phi_per_budget_figure, svg_text
from loopscale.report.fits import fits_section
from loopscale.report.law_check import law_check_section
from loopscale.report.machine import machine_section, machine_use
from loopscale.report.methods import methods_section
from loopscale.report.result import result_section
from loopscale.report.runs import runs_section
from loopscale.report.verdict import headline_table, lead_blocks, summary_line, summary_section
from loopscale.sweep.collect import collect
from loopscale.sweep.results import read_results
from loopscale.sweep.rundir import open_sweep

#: The sweep's figure on the first screen (a case study shows its Δφ per budget instead).
KEY_FIGURE = "isoflop"
#: Shown in the law check section rather than among the figures.
LAW_CHECK_FIGURE = "residuals_vs_width"


@dataclass(frozen=True)
class Report:
    folder: Path
    markdown: Path
    html: Path
    fit_json: Path
    summary_line: str  # the CLI's one line (``verdict.summary_line``), without the report's path
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
    rows = _rows(sweep_dir)
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
    doc["baselines"] = dataset_baseline_losses(spec, folder)
    below_bigram = below_bigram_counts(doc["baselines"], rows)
    summary = summary_line(doc, len(table), len(rows), skipped, spec.name, below_bigram)
    with svg_text():
        plots = [p for p in plot_protocol(protocol, table, folder / "plots", doc["baselines"]["values"])
                 if p.suffix == ".png"]  # fmt: skip
    plots += axis_plots(rows, folder / "plots")
    phi_figure = phi_per_budget_figure(doc, folder / "plots" / "phi_per_budget")
    figures = {p.stem: Image(p, caption(p)) for p in plots}

    case_study = None
    if spec.reuse:  # a case study: Δφ against the base sweep whose r = 1 runs it reuses
        settings = {"restarts": restarts, "bootstrap": bootstrap, "seed": seed}
        compare_doc, case_study, case_figures = _case_study(spec, table, sweep_dir, folder, **settings)
        atomic_write_json(folder / "compare.json", compare_doc)
        summary = f"{compare_doc['verdict']}; {summary}"
    report = Document(
        title=f"loopscale report: sweep {spec.name}",
        lead=lead_blocks(doc, below_bigram),
        headline=headline_table(
            doc, len(table), len(rows), below_bigram, compare_doc if case_study else None
        ),
        key_figures=case_figures if case_study else [figures.pop(KEY_FIGURE)],
    )
    if case_study:
        report.lead.insert(0, f"**Case study: {compare_doc['verdict']}** (section below; compare.json).")
    if phi_figure is not None:
        report.key_figures.append(Image(phi_figure, caption(phi_figure)))
    doc["machine_use"] = machine_use(rows, peak_flops)
    sections = _sections(doc, rows, skipped, table, template, below_bigram, figures, case_study)
    report.sections += [section for section in sections if section is not None]
    report.sections.append(Section("Full fit output", [Pre(protocol.format())], collapsed=True))
    report.sections.append(methods_section(doc))

    fit_json = atomic_write_json(folder / "fit.json", doc)
    md = atomic_write_text(folder / "report.md", report.markdown(folder))
    page = atomic_write_text(folder / "report.html", report.html())
    return Report(folder, md, page, fit_json, summary, skipped)


def _sections(doc, rows, skipped, table, template, below_bigram, figures: dict, case_study) -> list:
    """The report's sections in reading order (None: a section this sweep has nothing for); ``figures``:
    the figures not on the first screen, by name."""
    law_figure = figures.pop(LAW_CHECK_FIGURE, None)
    baseline = baseline_statement(doc["baselines"], below_bigram)
    return [
        summary_section(doc, len(table), len(rows), baseline),
        case_study,
        law_check_section(doc, law_figure.path if law_figure else None),
        design_checks_section(doc, rows, below_bigram),
        result_section(doc, table, template),
        _collapsed(fits_section(doc)),
        _collapsed(frontier_section(doc)),
        _collapsed(minima_section(doc)),
        axes_section(rows),
        _collapsed(machine_section(doc["machine_use"])),
        _collapsed(runs_section(rows, skipped, doc["fit"])),
        Section("Figures", list(figures.values())),
    ]


def _collapsed(section: Section) -> Section:
    section.collapsed = True
    return section


def _rows(sweep_dir: Path) -> list[dict]:
    """The sweep's result rows: collected from its runs, or read from results.csv in a published folder
    (sweep.yaml + results.csv, no run folders)."""
    if not (sweep_dir / "runs").is_dir() and (sweep_dir / "results.csv").is_file():
        return read_results(sweep_dir / "results.csv")
    return collect(sweep_dir)[0]


def _case_study(spec, table, sweep_dir: Path, folder: Path, restarts: int, bootstrap: int, seed: int):
    """``report.compare.case_study`` of this sweep (the variant) against its first ``reuse`` folder;
    arms that are not comparable (``fit.comparable``: another vocabulary, template or data) are refused."""
    from loopscale.analysis.comparable import check_setups
    from loopscale.report.compare import case_study

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRunsWarning)
        base = load_table(_rows(Path(spec.reuse[0])))
    check_setups(Path(spec.reuse[0]), sweep_dir, base, table)  # its note (nothing to check) is not shown
    settings = {"restarts": restarts, "resamples": bootstrap, "seed": seed}
    return case_study(base, table, spec.name, folder / "plots", **settings)
