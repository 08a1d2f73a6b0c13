"""``loopscale report SWEEP_DIR``: collect → fit (spec §8 protocol) → report.md + self-contained report.html.

What a report shows (spec §8–§9): φ with its block-bootstrap CI and R²; what one loop is worth (r^φ); the
equivalence statement at this sweep's scale (spec §9.8); the restricted φ = 0 / φ = 1 fits; the
compute-optimal table from the fitted law with the gap to r = 1; the empirical iso-FLOP minima per cell;
residuals per r; the runs the fit left out and why; the figures (iso-FLOP curves per r with the fitted law,
φ bootstrap, residuals, frontier) and, when ``loopscale eval-sweep`` added ``axis_*`` columns, axis loss
against validation loss per r. Losses are in nats, compute in training FLOPs, D in tokens.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

from loopscale.config import ModelConfig, from_dict
from loopscale.fit import equivalence, load_table, plot_protocol, run_protocol
from loopscale.fit.table import SkippedRunsWarning
from loopscale.io import atomic_write, atomic_write_json, atomic_write_text
from loopscale.paper import JOINT_FIT, PHI_CI
from loopscale.report.document import Document, Image, Pre, Section, Table
from loopscale.sweep.collect import collect
from loopscale.sweep.rundir import open_sweep


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
) -> Report:
    """Collect ``sweep_dir``, run the fitting protocol, write the report folder (default SWEEP_DIR/report)."""
    sweep_dir = Path(sweep_dir)
    folder = Path(out) if out is not None else sweep_dir / "report"
    spec, runs = open_sweep(sweep_dir)
    rows, _, _ = collect(sweep_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRunsWarning)  # the report lists them itself
        table = load_table(rows)
    template = from_dict(ModelConfig, {**spec.model, "width": runs[0].width}, "sweep model")
    protocol = run_protocol(table, restarts=restarts, bootstrap=bootstrap, seed=seed, flops_model=template)
    doc = protocol.to_dict()
    fit, ci = doc["fit"], doc["ci"]
    phi, r2 = fit["phi"], fit["r2"]
    phi_ci = ci.get("phi")
    ci_text = f"95% CI [{phi_ci[0]:.3f}, {phi_ci[1]:.3f}]" if phi_ci else "no CI (bootstrap off)"
    skipped = list(table.skipped)
    summary = (
        f"phi = {phi:.3f} ({ci_text}), R² = {r2:.4f}, {len(table)} of {len(rows)} runs fitted"
        + (f", {len(skipped)} left out" if skipped else "")
        + f" [sweep {spec.name}]"
    )

    plots = [p for p in plot_protocol(protocol, table, folder / "plots") if p.suffix == ".png"]
    plots += _axis_plots(rows, folder / "plots")
    report = Document(title=f"loopscale report: sweep {spec.name}", summary=summary)
    report.sections.append(_result_section(doc, table, template, phi_ci))
    report.sections.append(_fits_section(doc))
    report.sections.append(_frontier_section(doc))
    report.sections.append(_minima_section(doc))
    axes_section = _axes_section(rows)
    if axes_section is not None:
        report.sections.append(axes_section)
    report.sections.append(_runs_section(rows, skipped))
    report.sections.append(Section("Figures", [Image(p, _caption(p)) for p in plots]))
    report.sections.append(Section("Full fit output", [Pre(protocol.format())]))

    fit_json = atomic_write_json(folder / "fit.json", doc)
    md = atomic_write_text(folder / "report.md", report.markdown(folder))
    page = atomic_write_text(folder / "report.html", report.html())
    return Report(folder, md, page, fit_json, f"{summary} → {page}", skipped)


def _result_section(doc, table, template, phi_ci) -> Section:
    fit = doc["fit"]
    phi = fit["phi"]
    blocks = []
    paper = JOINT_FIT["phi"]
    compare = ""
    if phi_ci:
        inside = phi_ci[0] <= paper <= phi_ci[1]
        overlap = phi_ci[0] <= PHI_CI[1] and PHI_CI[0] <= phi_ci[1]
        compare = (
            f" The paper's φ = {paper} (95% CI [{PHI_CI[0]}, {PHI_CI[1]}], 4.64e17–2.15e19 FLOPs) lies "
            f"{'inside' if inside else 'outside'} this CI; the two CIs "
            f"{'overlap' if overlap else 'do not overlap'}."
        )
    blocks.append(
        f"**φ = {phi:.3f}**"
        + (f" (95% block-bootstrap CI [{phi_ci[0]:.3f}, {phi_ci[1]:.3f}])" if phi_ci else "")
        + f", R² = {fit['r2']:.4f} on {len(table)} runs."
        + compare
    )
    if doc["loop_worth"]:
        blocks.append(
            "What one loop is worth: "
            + "; ".join(
                f"r = {w['r']} loops ≈ {w['worth']:.2f} unique blocks "
                f"({100 * w['fraction']:.0f}% of full equivalence)"
                for w in doc["loop_worth"]
            )
            + "."
        )
    looped = [r for r in sorted(set(table.r.tolist())) if r > 1]
    plain = table.n[table.r == 1]
    if looped and len(plain):
        r = 4 if 4 in looped else looped[-1]
        params = float(sorted(plain)[len(plain) // 2])
        eq = equivalence(params, r, phi, template)
        blocks.append(
            f"Equivalence at this scale: next to an r = 1 model with {_m(params)} non-embedding parameters "
            f"(d ≈ {eq['width']:.0f}), the r = {r} model of the same width has "
            f"{_m(eq['unique_params'])} unique "
            f"parameters ({eq['unique_ratio']:.2f}×) and is worth {_m(eq['effective_params'])} non-looped "
            f"parameters ({eq['effective_ratio']:.2f}×, r^φ = {eq['worth']:.2f}), while it costs "
            f"{eq['flops_ratio']:.3f}× the training FLOPs per token, as much as an r = 1 model with "
            f"{_m(eq['cost_equivalent_params'])} parameters."
        )
    for note in doc["notes"]:
        blocks.append(f"Note: {note}")
    return Section("Result", blocks)


def _fits_section(doc) -> Section:
    header = ["form", "E", "A", "B", "α", "β", "φ", "R²", "objective"]
    rows = []
    for name, f in [*doc["forms"].items(), *((f"r={k} (Chinchilla)", v) for k, v in doc["per_r"].items())]:
        phi = f.get("phi")
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
            ]
        )
    res = doc["residuals"]
    res_rows = [
        [key, str(s["n"]), f"{s['mean']:+.4f}", f"{s['max_abs']:.4f}", f"{s['rmse']:.4f}"]
        for key, s in [("all", res["overall"]), *res["per_r"].items()]
    ]
    blocks = [
        Table(header, rows),
        "Residuals of the joint fit (observed − predicted, nats), per r:",
        Table(["r", "n", "mean", "max |res|", "RMSE"], res_rows),
    ]
    if doc["ci"]:
        blocks.append(
            "95% block-bootstrap CIs: "
            + ", ".join(f"{k} [{lo:.4g}, {hi:.4g}]" for k, (lo, hi) in doc["ci"].items())
            + "."
        )
    return Section("Law fits (Huber on log loss, L-BFGS-B, spec §8)", blocks)


def _frontier_section(doc) -> Section:
    frontier = doc["compute_optimal"]
    if not frontier:
        return Section("Compute-optimal allocation", ["Not available: " + "; ".join(doc["notes"])])
    header = ["C (FLOPs)", "r", "width d*", "N* (unique)", "N_eff*", "D* (tokens)", "L* (nats)", "gap to r=1"]
    rows = []
    for r, entry in frontier["per_r"].items():
        gaps = entry.get("gap_to_r1") or [math.nan] * len(entry["rows"])
        for row, gap in zip(entry["rows"], gaps):
            edge = " (edge)" if row["at_edge"] else ""
            rows.append(
                [
                    f"{row['budget']:.3g}",
                    r,
                    f"{row['width']:.0f}{edge}",
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
        if "a_N" in e
    )
    return Section(
        "Compute-optimal allocation (fitted joint law, exact FLOPs over continuous width)",
        [Table(header, rows), exps + "." if exps else ""],
    )


def _minima_section(doc) -> Section:
    gaps = {(g["budget"], g["r"]): g["gap"] for g in doc["cell_gaps"]}
    rows = []
    for m in doc["cell_minima"]:
        if m["n_star"] is None:
            rows.append([f"{m['budget']:.3g}", str(m["r"]), str(m["n_runs"]), "", "", m.get("note", ""), ""])
            continue
        gap = gaps.get((m["budget"], m["r"]))
        rows.append(
            [
                f"{m['budget']:.3g}",
                str(m["r"]),
                str(m["n_runs"]),
                _m(m["n_star"]),
                f"{m['loss_star']:.4f}",
                "inside" if m.get("inside") else "outside the widths run",
                "" if gap is None else f"{gap:+.4f}",
            ]
        )
    return Section(
        "Empirical iso-FLOP minima (parabola in log N per cell, spec §8.7)",
        [
            Table(["C (FLOPs)", "r", "runs", "N*", "L* (nats)", "vertex", "gap to r=1"], rows),
            "A vertex outside the widths run means that iso-FLOP curve does not bracket its minimum.",
        ],
    )


def _runs_section(rows: list[dict], skipped: list[tuple[str, str]]) -> Section:
    ok = [r for r in rows if r["status"] == "ok"]
    blocks = [f"{len(ok)} of {len(rows)} planned runs finished; {len(skipped)} left out of the fit."]
    if skipped:
        blocks.append(Table(["run", "why it was left out"], [[run, why] for run, why in skipped]))
    return Section("Runs", blocks)


def _caption(path: Path) -> str:
    return {
        "isoflop": "Iso-FLOP curves per r: observed final validation loss (points) and the fitted joint law.",
        "phi_bootstrap": "Block-bootstrap distribution of φ with the point estimate and the 95% CI.",
        "residuals": "Residuals of the joint fit (observed − predicted, nats) against N and D.",
        "frontier": "Compute-optimal loss L* and size N* per r from the fitted law.",
        "axes": "Downstream axis continuation loss against validation loss, per r (loopscale eval-sweep).",
    }.get(path.stem, path.stem)


def _axis_columns(rows: list[dict]) -> list[str]:
    return sorted({k for row in rows for k in row if k.startswith("axis_")})


def _axes_section(rows: list[dict]) -> Section | None:
    """Per (budget, r) cell, the compute-optimal checkpoint (lowest validation loss in the cell, spec §10.2)
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

    table = Table(
        ["C (FLOPs)", "r", "run", "val loss", *(a.removeprefix("axis_") for a in axes)],
        [
            [f"{budget:.3g}", str(r), row["run"], cell(row["loss"]), *(cell(row.get(a)) for a in axes)]
            for (budget, r), row in sorted(best.items())
        ],
    )
    note = ("Per-axis continuation loss (nats per gold token; axis = mean of its tasks) of the "
            "compute-optimal run of each (budget, r) cell; – where a run was not evaluated.")
    return Section("Downstream axes at the compute-optimal checkpoints", [note, table])


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
