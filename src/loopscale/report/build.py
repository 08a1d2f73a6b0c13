"""The report of a sweep's analysis (``analysis.sweep.SweepAnalysis``): report.md + a self-contained
report.html, rendered from what the analysis computed, recomputing nothing.

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
from loopscale.fit.table import SkippedRunsWarning, load_table
from loopscale.io import atomic_write_text
from loopscale.present.compare_text import case_study_verdict
from loopscale.present.fit_text import protocol_text
from loopscale.report.allocation import frontier_section, minima_section
from loopscale.report.axes import axes_section
from loopscale.report.baselines import baseline_statement
from loopscale.report.compare import case_study_section
from loopscale.report.design_checks import design_checks_section
from loopscale.report.document import Document, Image, Pre, Section
from loopscale.report.figures import caption
from loopscale.report.fits import fits_section
from loopscale.report.law_check import law_check_section
from loopscale.report.machine import machine_section
from loopscale.report.methods import methods_section
from loopscale.report.result import result_section
from loopscale.report.runs import runs_section
from loopscale.report.verdict import headline_table, lead_blocks, summary_line, summary_section

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


def render_report(analysis, folder: str | Path) -> Report:
    """report.md and report.html in ``folder`` from ``analysis`` (an ``analysis.sweep.SweepAnalysis`` whose
    files and figures lie in ``folder``)."""
    folder = Path(folder)
    doc, rows, below_bigram = analysis.fit, analysis.rows, analysis.below_bigram
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRunsWarning)  # the report lists them itself
        table = load_table(rows)
    template = from_dict(ModelConfig, analysis.template, "sweep model")
    summary = summary_line(doc, len(table), len(rows), analysis.skipped, analysis.name, below_bigram)
    figures = {Path(p).stem: Image(folder / p, caption(Path(p))) for p in analysis.plots}
    case_study = compare = None
    if analysis.compare is not None:
        compare = analysis.compare
        case_study = case_study_section(compare, folder / analysis.arms_figure)
        summary = f"{case_study_verdict(compare)}; {summary}"
    report = Document(
        title=f"loopscale report: sweep {analysis.name}",
        lead=lead_blocks(doc, below_bigram),
        headline=headline_table(doc, len(table), len(rows), below_bigram, compare),
        key_figures=(
            [Image(folder / p, caption(Path(p))) for p in analysis.case_figures]
            if case_study
            else [figures.pop(KEY_FIGURE)]
        ),
    )
    if case_study:
        report.lead.insert(0, f"**Case study: {case_study_verdict(compare)}** (section below; compare.json).")
    if analysis.phi_per_budget is not None:
        path = folder / analysis.phi_per_budget
        report.key_figures.append(Image(path, caption(path)))
    sections = _sections(doc, rows, analysis.skipped, table, template, below_bigram, figures, case_study)
    report.sections += [section for section in sections if section is not None]
    report.sections.append(Section("Full fit output", [Pre(protocol_text(doc))], collapsed=True))
    report.sections.append(methods_section(doc))

    md = atomic_write_text(folder / "report.md", report.markdown(folder))
    page = atomic_write_text(folder / "report.html", report.html())
    return Report(folder, md, page, folder / "fit.json", summary, list(analysis.skipped))


def _sections(doc, rows, skipped, table, template, below_bigram, figures: dict, case_study) -> list:
    """The report's sections in reading order (None: a section this sweep has nothing for); ``figures``:
    the figures not on the first screen, by name."""
    law_figure = figures.pop(LAW_CHECK_FIGURE, None)
    baseline = baseline_statement(doc.baselines, below_bigram)
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
        _collapsed(machine_section(doc.machine_use)),
        _collapsed(runs_section(rows, skipped, doc.fit)),
        Section("Figures", list(figures.values())),
    ]


def _collapsed(section: Section) -> Section:
    section.collapsed = True
    return section
