"""``loopscale report SWEEP_DIR``'s analysis: the one code that collects a sweep, fits it and compares it with
its base, computed once and saved so the report renders without recomputing (issue 42).

``analyse_sweep`` collects the sweep's runs (or reads a published folder's results.csv), runs the fitting
protocol (method §8), the dataset baselines, the machine's use, a case study against the base sweep it
reuses, and draws every figure; it writes fit.json, compare.json (a case study) and analysis.json into the
report folder. ``read_analysis`` reads them back, and ``report.build.render_report`` renders what it
holds: ``loopscale report --from FOLDER/analysis.json`` re-renders in seconds.

analysis.json (``SCHEMA``): the sweep's name and folder (relative to the report folder), the result rows,
the runs left out of the fit, the bigram count, the template, the figures' paths (relative), and the names
of the fit.json and compare.json beside it, which hold the fit and the case study.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from loopscale.analysis.baselines import dataset_baseline_losses
from loopscale.analysis.comparable import check_setups
from loopscale.analysis.machine import machine_use
from loopscale.config import ModelConfig, from_dict
from loopscale.errors import UserError
from loopscale.fit import load_table, run_protocol
from loopscale.fit.protocol import read_protocol
from loopscale.fit.protocol_results import ProtocolResult
from loopscale.fit.results import RecordError
from loopscale.fit.table import SkippedRunsWarning
from loopscale.io import atomic_write_json
from loopscale.pairs.case_study import compare_arms
from loopscale.pairs.case_study_results import CaseStudy, case_study_in
from loopscale.pairs.compare import make_arms
from loopscale.present.case_study_figures import (
    EffectsDisplay,
    ExcessByWidthDisplay,
    delta_phi_figure,
    isoflop_arms_figure,
)
from loopscale.present.figures import axis_plots, phi_per_budget_figure, svg_text
from loopscale.present.plots import FIGURES, plot_protocol
from loopscale.published import path_from
from loopscale.report.baselines import below_bigram_counts
from loopscale.report.build import render_report
from loopscale.sweep.collect import collect, collect_rows
from loopscale.sweep.results import read_results
from loopscale.sweep.rundir import open_sweep, read_json

ANALYSIS_FILE = "analysis.json"
FIT_FILE = "fit.json"
COMPARE_FILE = "compare.json"
SCHEMA = 1
FIGURE_DIR = "plots"
REMEDY = "rerun `loopscale report SWEEP_DIR`"  # what a damaged analysis file's error line suggests


@dataclass(frozen=True)
class SweepAnalysis:
    """Everything a sweep's report renders, computed once. Paths are relative to the report folder."""

    name: str  # the sweep's name
    sweep: str  # the sweep folder
    fit: ProtocolResult  # the fitting protocol's document (fit.json), with the baselines and machine use
    compare: CaseStudy | None  # the case study against the base sweep (compare.json), if the sweep reuses one
    rows: list[dict]  # the sweep's result rows (results.csv's)
    skipped: list[tuple[str, str]]  # (run, reason) left out of the fit
    below_bigram: tuple[int, int, float] | None  # (runs below the bigram table, finished runs, its loss)
    template: dict  # the sweep's model template (a ModelConfig mapping)
    plots: list[str]  # the protocol's and the axes' figures (PNG)
    phi_per_budget: str | None  # φ per budget against the constant-φ fit (PNG)
    case_figures: list[str]  # the case study's first-screen figures (PNG)
    arms_figure: str | None  # the case study's iso-FLOP curves of both arms (PNG)

    def manifest(self) -> dict:
        """analysis.json's content (the fit and the case study stay in their own files beside it)."""
        return {
            "schema": SCHEMA,
            "name": self.name,
            "sweep": self.sweep,
            "fit": FIT_FILE,
            "compare": COMPARE_FILE if self.compare is not None else None,
            "rows": self.rows,
            "skipped": [list(pair) for pair in self.skipped],
            "below_bigram": None if self.below_bigram is None else list(self.below_bigram),
            "template": self.template,
            "plots": self.plots,
            "phi_per_budget": self.phi_per_budget,
            "case_figures": self.case_figures,
            "arms_figure": self.arms_figure,
        }


def save_analysis(analysis: SweepAnalysis, folder: Path) -> Path:
    """Write fit.json, compare.json (a case study) and analysis.json into ``folder``; the manifest last, so
    a folder whose analysis.json exists holds the files it names."""
    atomic_write_json(folder / FIT_FILE, analysis.fit.to_dict())
    if analysis.compare is not None:
        atomic_write_json(folder / COMPARE_FILE, analysis.compare.to_dict())
    return atomic_write_json(folder / ANALYSIS_FILE, analysis.manifest())


def read_analysis(path: str | Path) -> tuple[SweepAnalysis, Path]:
    """(the analysis, its report folder) from analysis.json (or the folder holding it); a file that is not
    one, or names a file that is missing, is a one-line UserError."""
    path = Path(path)
    if path.is_dir() and not (path / ANALYSIS_FILE).is_file() and (path / FIT_FILE).is_file():
        # a report folder written before analysis.json: read what it holds (its sweep is the folder itself,
        # or the folder above a SWEEP_DIR/report)
        sweep = path if (path / "sweep.yaml").is_file() else path.parent
        return analysis_of_report(path, sweep), path
    path = path / ANALYSIS_FILE if path.is_dir() else path
    if not path.is_file():
        raise UserError(f"--from {path}: no such file; give a report folder's {ANALYSIS_FILE}")
    manifest = read_json(path, REMEDY)
    folder = path.parent
    keys = set(SweepAnalysis.__dataclass_fields__) | {"schema"}
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA or set(manifest) != keys:
        raise UserError(
            f"--from {path}: not a loopscale {ANALYSIS_FILE} of schema {SCHEMA}; rerun "
            "`loopscale report SWEEP_DIR`"
        )
    parts = {}
    for key, name in (("fit", manifest["fit"]), ("compare", manifest["compare"])):
        if name is None:
            parts[key] = None
            continue
        if not (folder / name).is_file():
            raise UserError(f"--from {path}: it names {name}, which is not in {folder}")
        parts[key] = read_json(folder / name, REMEDY)
    if parts["compare"] is not None:
        parts["compare"] = case_study_in(parts["compare"], str(folder / manifest["compare"]))
    parts["fit"] = _protocol(parts["fit"], folder / manifest["fit"])
    analysis = SweepAnalysis(
        name=manifest["name"],
        sweep=manifest["sweep"],
        rows=manifest["rows"],
        skipped=[tuple(pair) for pair in manifest["skipped"]],
        below_bigram=None if manifest["below_bigram"] is None else tuple(manifest["below_bigram"]),
        template=manifest["template"],
        plots=manifest["plots"],
        phi_per_budget=manifest["phi_per_budget"],
        case_figures=manifest["case_figures"],
        arms_figure=manifest["arms_figure"],
        **parts,
    )
    return analysis, folder


def _protocol(doc, path: Path) -> ProtocolResult:
    """fit.json as the report reads it (an older document converted, ``fit.protocol.read_protocol``); one
    that is not one is a one-line UserError naming the key."""
    try:
        return read_protocol(doc)
    except (RecordError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a fit document loopscale can read ({exc}); {REMEDY}") from exc


def sweep_rows(sweep_dir: Path) -> list[dict]:
    """The sweep's result rows: collected from its runs, or read from results.csv in a published folder
    (sweep.yaml + results.csv, no run folders)."""
    if not (sweep_dir / "runs").is_dir() and (sweep_dir / "results.csv").is_file():
        return read_results(sweep_dir / "results.csv")
    return collect(sweep_dir)[0]


def analyse_sweep(
    sweep_dir: str | Path,
    folder: str | Path,
    *,
    restarts: int = 500,
    bootstrap: int = 200,
    seed: int = 0,
    peak_flops: float | None = None,
) -> SweepAnalysis:
    """Collect ``sweep_dir``, run the fitting protocol, the baselines, the machine's use and (a sweep that
    reuses a base) the case study, draw every figure into FOLDER/plots, and save the analysis (fit.json,
    compare.json, analysis.json) into ``folder``.

    ``peak_flops``: the machine's fp32 matmul peak (FLOP/s, all cores) for the utilisation line; None
    measures it now, on this machine (say so when the sweep ran elsewhere)."""
    sweep_dir, folder = Path(sweep_dir), Path(folder)
    spec, runs = open_sweep(sweep_dir)
    rows = sweep_rows(sweep_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRunsWarning)  # the report lists them itself
        table = load_table(rows)
    template = {**spec.model, "width": runs[0].width}
    protocol = run_protocol(
        table,
        restarts=restarts,
        bootstrap=bootstrap,
        seed=seed,
        flops_model=from_dict(ModelConfig, template, "sweep model"),
        template_source=f"the sweep's template ({path_from(folder, sweep_dir / 'sweep.yaml')})",
    )
    result = protocol.result()
    baselines = dataset_baseline_losses(spec, folder)
    plots_dir = folder / FIGURE_DIR
    with svg_text():
        plots = [p for p in plot_protocol(protocol, table, plots_dir, baselines.values) if p.suffix == ".png"]
    plots += axis_plots(rows, plots_dir)
    phi_figure = phi_per_budget_figure(result, plots_dir / "phi_per_budget")
    compare = None
    case_figures: list[Path] = []
    arms_figure = None
    if spec.reuse:  # a case study: Δφ against the base sweep whose r = 1 runs it reuses
        settings = {"restarts": restarts, "resamples": bootstrap, "seed": seed}
        compare, case_figures, arms_figure = _case_study(spec, table, sweep_dir, plots_dir, settings)
    fit = dataclasses.replace(result, baselines=baselines, machine_use=machine_use(rows, peak_flops))

    def rel(path: Path | None) -> str | None:
        return None if path is None else os.path.relpath(path, folder)

    analysis = SweepAnalysis(
        name=spec.name,
        sweep=os.path.relpath(sweep_dir, folder),
        fit=fit,
        compare=compare,
        rows=rows,
        skipped=list(table.skipped),
        below_bigram=below_bigram_counts(fit.baselines, rows),
        template=template,
        plots=[rel(p) for p in plots],
        phi_per_budget=rel(phi_figure),
        case_figures=[rel(p) for p in case_figures],
        arms_figure=rel(arms_figure),
    )
    save_analysis(analysis, folder)
    return analysis


def _case_study(spec, table, sweep_dir: Path, plots_dir: Path, settings: dict):
    """``pairs.case_study.compare_arms`` of this sweep (the variant) against its first ``reuse`` folder and
    its figures → (compare.json's document, the first-screen figures, the arms' iso-FLOP figure); arms that
    are not comparable (``analysis.comparable``: another vocabulary, template or data) are refused."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRunsWarning)
        base = load_table(sweep_rows(Path(spec.reuse[0])))
    check_setups(Path(spec.reuse[0]), sweep_dir, base, table)  # its note (nothing to check) is not shown
    doc = compare_arms(base, table, name=spec.name, **settings)
    key = [delta_phi_figure(doc, plots_dir / "delta_phi_per_budget")]
    if doc.effects is not None:
        effects = doc.effects
        key[:0] = [
            EffectsDisplay.from_result(effects, spec.name).plot().save(plots_dir / "loss_change_by_r"),
            ExcessByWidthDisplay.from_result(effects, spec.name).plot().save(plots_dir / "excess_by_width"),
        ]
    arms = isoflop_arms_figure(make_arms(base, table), plots_dir / "isoflop_arms")
    return doc, key, arms


def report_sweep(sweep_dir: str | Path, out: str | Path | None = None, **settings):
    """``loopscale report SWEEP_DIR``: ``analyse_sweep`` into the report folder (default SWEEP_DIR/report),
    then ``report.build.render_report`` → the ``report.build.Report``."""
    folder = Path(out) if out is not None else Path(sweep_dir) / "report"
    return render_report(analyse_sweep(sweep_dir, folder, **settings), folder)


def analysis_of_report(folder: str | Path, sweep_dir: str | Path) -> SweepAnalysis:
    """The analysis behind a report folder written before analysis.json existed, read from what it holds
    (fit.json, compare.json, the figures under plots/) and its sweep's rows and template: nothing is
    refitted. Saves analysis.json beside them, so ``--from`` re-renders it from then on."""
    folder, sweep_dir = Path(folder), Path(sweep_dir)
    if not (folder / FIT_FILE).is_file():
        raise UserError(f"{folder} holds no {FIT_FILE}: run `loopscale report {sweep_dir}` to analyse it")
    spec, runs = open_sweep(sweep_dir)
    has_runs = (sweep_dir / "runs").is_dir()
    rows = collect_rows(sweep_dir) if has_runs else read_results(sweep_dir / "results.csv")
    fit = _protocol(read_json(folder / FIT_FILE, REMEDY), folder / FIT_FILE)
    compare = (
        case_study_in(read_json(folder / COMPARE_FILE, REMEDY), str(folder / COMPARE_FILE))
        if (folder / COMPARE_FILE).is_file()
        else None
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRunsWarning)
        table = load_table(rows)

    # the figures the folder's report shows (a figure left in plots/ by another command is not the fit's)
    shown = (folder / "report.md").read_text() if (folder / "report.md").is_file() else None

    def present(*names: str) -> list[str]:
        paths = [f"{FIGURE_DIR}/{name}.png" for name in names]
        return [path for path in paths if (folder / path).is_file() and (shown is None or path in shown)]

    case = present("loss_change_by_r", "excess_by_width", "delta_phi_per_budget") if compare else []
    analysis = SweepAnalysis(
        name=spec.name,
        sweep=os.path.relpath(sweep_dir, folder),
        fit=fit,
        compare=compare,
        rows=rows,
        skipped=list(table.skipped),
        below_bigram=below_bigram_counts(fit.baselines, rows),
        template={**spec.model, "width": runs[0].width},
        plots=present(*FIGURES, "axes"),
        phi_per_budget=(present("phi_per_budget") or [None])[0],
        case_figures=case,
        arms_figure=(present("isoflop_arms") or [None])[0] if compare else None,
    )
    atomic_write_json(folder / ANALYSIS_FILE, analysis.manifest())
    return analysis
