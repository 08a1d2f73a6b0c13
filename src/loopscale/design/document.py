"""What the design step hands on: the chosen runs as a sweep spec that ``loopscale sweep`` runs as it is (or,
sequential mode, as new groups appended to a partial sweep's spec), and the design document's rows and text
(runs, training FLOPs, estimated wall seconds, predicted and realised 95% CI widths, the Pareto path, the
simulated designs and the Δφ power table)."""

from __future__ import annotations

import numpy as np

from loopscale.config import replace
from loopscale.design.candidates import Candidates
from loopscale.design.results import DesignDocument, DesignRow, Realisation
from loopscale.design.search import PathPoint, RunDesign
from loopscale.design.simulation import agreement
from loopscale.errors import UserError
from loopscale.present.design_text import agreement_text
from loopscale.sweep.plan import format_seconds, plan_sweep
from loopscale.sweep.spec import BudgetWidths, RunGroup, SweepSpec


def design_groups(cands: Candidates, idx: np.ndarray, name: str) -> list[RunGroup]:
    """Runs ``idx`` as sweep groups of the candidates' group variant: (budget, width) pairs that share one set
    of r form one group (``name``, or ``name-r1.8`` style names when several sets are needed)."""
    by_point: dict[tuple[float, int], list[int]] = {}
    for i in idx:
        run = cands.runs[i]
        by_point.setdefault((run.budget, run.width), []).append(run.r)
    by_rs: dict[tuple[int, ...], dict[float, list[int]]] = {}
    for (budget, width), rs in sorted(by_point.items()):
        by_rs.setdefault(tuple(sorted(rs)), {}).setdefault(budget, []).append(width)
    base = cands.group
    groups = []
    for rs, grid in sorted(by_rs.items(), key=lambda item: (-len(item[0]), item[0])):
        label = name if len(by_rs) == 1 else f"{name}-r{'.'.join(map(str, rs))}"
        cells = [BudgetWidths(b, sorted(ws)) for b, ws in sorted(grid.items())]
        # replace re-validates the group and its cells, as a spec's loader does
        groups.append(
            replace(
                base,
                name=label,
                rs=list(rs),
                grid=cells,
                model=dict(base.model),
                train=dict(base.train),
                seeds=None,
            )
        )
    return groups


def design_spec(cands: Candidates, design: RunDesign, name: str) -> SweepSpec:
    """A new sweep spec holding exactly the design's runs, each with ``replicates`` seeds."""
    groups = design_groups(cands, design.idx, cands.group.name)
    spec = replace(cands.spec, name=name, groups=groups, seeds=list(range(design.replicates)))
    plan_sweep(spec)  # refuses a spec the planner cannot run (one line)
    return spec


def extension_spec(cands: Candidates, design: RunDesign) -> SweepSpec:
    """The partial sweep's spec with the design's new runs appended as group(s) ``extN`` (the first free N):
    every planned run keeps its name and config, so ``loopscale sweep`` runs only the new ones."""
    spec = cands.spec
    new = design.idx[~cands.fixed[design.idx]]
    if len(new) == 0:
        raise UserError(
            "the design adds no runs to this sweep: no candidate run fits the target (raise --flop-cap, or "
            "offer more budgets or widths with --preset/SPEC, --budgets, --widths)"
        )
    names = {g.name.split("-r")[0] for g in spec.groups}
    n = 1
    while f"ext{n}" in names:
        n += 1
    extended = replace(spec, groups=[*spec.groups, *design_groups(cands, new, f"ext{n}")])
    plan_sweep(extended)
    return extended


def summary_row(
    point: PathPoint,
    cands: Candidates,
    seconds: float | None,
    realised: Realisation | None,
    *,
    new_only: bool,
) -> DesignRow:
    """One row of the side-by-side table; ``new_only``: count only the runs not already in a partial sweep."""
    new = point.design.idx[~cands.fixed[point.design.idx]] if new_only else point.design.idx
    return DesignRow(
        label=point.design.label or point.step,
        runs=int(len(new) * point.design.replicates),
        replicates=point.design.replicates,
        flops=point.flops,
        est_seconds=seconds,
        predicted_ci=point.predicted,
        cells=tuple(
            sorted(
                {
                    (float(b), int(r))
                    for b, r in zip(cands.budget[point.design.idx], cands.r[point.design.idx])
                }
            )
        ),
        realised=realised,
        agreement=None if realised is None else agreement(point.predicted["phi"], realised.ci_width["phi"]),
    )


def format_design(doc: DesignDocument) -> str:
    """The design document as the text ``loopscale design`` prints."""
    ref, des = doc.reference_grid, doc.design
    prior = doc.prior
    lines = [
        f"prior: {prior['source']}: phi {prior['phi']:.4g}, alpha {prior['alpha']:.4g}, "
        f"beta {prior['beta']:.4g}, E {prior['E']:.4g}; sigma {prior['sigma']:.4g} nats",
        *(
            [f"held at the prior's values in every fit (known exactly, no CI): {', '.join(doc.held)}"]
            if doc.held
            else []
        ),
        "",
        f"{'':<12}{'runs':>6}{'FLOPs':>11}{'share':>7}{'est. wall':>13}  predicted 95% CI width "
        f"{'phi':>7}{'alpha':>7}{'beta':>7}{'E':>7}   realised phi (coverage)",
    ]
    for name, row in (("design", des), ("reference", ref)):
        wall = "-" if row.est_seconds is None else format_seconds(row.est_seconds)
        if row is des and row.est_seconds is not None and ref.est_seconds:
            wall += f" ({row.est_seconds / ref.est_seconds:.0%})"
        pred = {k: "held" if k in doc.held else f"{v:.4f}" for k, v in row.predicted_ci.items()}
        real = row.realised
        real_text = f"{real.ci_width['phi']:.4f} ({100 * real.coverage:.0f}% of {real.k})" if real else "-"
        lines.append(
            f"{name:<12}{row.runs:>6}{row.flops:>11.3e}{row.flops / ref.flops:>7.1%}{wall:>13}"
            f"{'':>24}{pred['phi']:>7}{pred['alpha']:>7}{pred['beta']:>7}{pred['E']:>7}"
            f"   {real_text}"
        )
    lines.append(f"reference: {ref.label}; design: {des.label} ({len(des.cells)} cells)")
    target = doc.target
    if target.flop_cap is not None:
        lines.append(f"target: the narrowest phi CI under {target.flop_cap:.3e} FLOPs")
    elif target.wall_cap_seconds is not None:
        cap = format_seconds(target.wall_cap_seconds)
        lines.append(f"target: the narrowest phi CI under {cap} of estimated wall time; cost: {doc.cost}")
    else:
        lines.append(f"target: phi CI width {target.ci_phi:.4f} ({target.source}); cost: {doc.cost}")
    if doc.wall_source:
        lines.append(f"est. wall from {doc.wall_source}")
    if ref.est_seconds is None:
        lines.append(
            "no wall-time estimate (--no-probe, or the narrowest model is too large to probe on this "
            "machine); wall time is the planner's compute estimate (loopscale plan)"
        )
    for name, row in (("design", des), ("reference", ref)):
        if row.agreement:
            lines.append(f"{name}: {agreement_text(row)}")
    if doc.constraints.problems:
        lines.append("design breaks: " + "; ".join(doc.constraints.problems))
    if doc.reference_constraint_problems:
        lines.append(
            f"reference breaks (under the prior): {len(doc.reference_constraint_problems)} "
            f"constraint(s), e.g. {doc.reference_constraint_problems[0]}"
        )
    if doc.pareto:
        wall = doc.cost == "wall"
        what = "estimated wall time" if wall else "FLOPs"
        lines += ["", f"Pareto path (predicted phi CI width vs {what}, the search's cost):"]
        step = max(1, len(doc.pareto) // 10)
        for p in doc.pareto[::step]:
            cost = f"  wall {format_seconds(p.cost)}" if wall else ""
            lines.append(
                f"  {p.flops:.3e} ({p.flops / ref.flops:6.1%}){cost}  "
                f"{p.runs * p.replicates:>4} runs  phi {p.predicted['phi']:.4f}  ({p.design})"
            )
    if doc.simulation_rounds:
        lines += ["", "simulated designs, in the order simulated (realised = median phi CI width):"]
        lines.append(
            f"  {'design':<22}{'runs':>5}{'FLOPs':>8}{'wall':>8}{'predicted':>11}{'realised':>10}  coverage"
        )
        for row in doc.simulation_rounds:
            real = row.realised
            mark = {True: "  reaches target", False: "  misses target", None: ""}[row.reaches_target]
            lines.append(
                f"  {row.design:<22}{row.runs:>5}{row.flops / ref.flops:>8.1%}"
                f"{_share(row.est_seconds, ref.est_seconds):>8}{row.predicted['phi']:>11.4f}"
                f"{real.ci_width['phi']:>10.4f}  {real.coverage * real.k:.0f}/{real.k}{mark}"
            )
    power = doc.power
    lines += [
        "",
        f"delta-phi power (detect {power.delta_phi:g} at 5% two-sided; SE x "
        f"{power.optimism_factor:.2f} measured optimism; r = 1 runs shared):",
        f"  {'design':<34}{'runs/arm':>10}{'FLOPs base':>12}{'FLOPs variant':>15}{'SE':>8}{'power':>7}",
    ]
    for row in power.rows:
        lines.append(
            f"  {row.label[:34]:<34}{row.runs_base:>5}/{row.runs_variant:<4}"
            f"{row.flops_base:>12.3e}{row.flops_variant:>15.3e}{row.se_delta_phi:>8.4f}{row.power:>7.2f}"
        )
    sim = power.simulated
    if sim:
        lines += [
            "",
            f"simulated `compare` ({sim.k} base/variant pairs per design), searching for power >= "
            f"{sim.target_power:g}:",
            f"  {'design':<22}{'runs base/variant':>18}{'FLOPs':>8}{'wall':>8}{'SE':>8}{'predicted':>10}"
            f"{'simulated':>10}  median CI of delta-phi",
        ]
        for row in sim.candidates:
            lines.append(
                f"  {row.design:<22}{row.runs_base:>13}/{row.runs_variant:<4}"
                f"{row.flops / ref.flops:>8.1%}"
                f"{_share(row.est_seconds, ref.est_seconds):>8}{row.se_delta_phi:>8.4f}"
                f"{row.predicted_power:>10.2f}{row.simulated.power:>10.2f}"
                f"  {row.simulated.median_ci_width:.3f}"
            )
        if sim.design is None:
            lines.append(f"  no simulated design reached power {sim.target_power:g}")
        else:
            lines.append(
                f"  cheapest reaching it: {sim.design} (simulated power {sim.power:.2f}, "
                f"{sim.flops / ref.flops:.1%} of the reference's FLOPs)"
            )
    return "\n".join(lines)


def _share(seconds, ref_seconds) -> str:
    return "-" if seconds is None or not ref_seconds else f"{seconds / ref_seconds:.1%}"
