"""Sentences of ``loopscale design``'s document (``design.results``): the document as the text the command
prints, a simulated design's disagreement with its prediction, and the constraints a design breaks."""

from __future__ import annotations

from loopscale.design.results import AGREEMENT, DesignDocument, DesignRow, Problem
from loopscale.present.fit_text import minimum_miss_text
from loopscale.sweep.plan import format_seconds


def agreement_text(row: DesignRow) -> str:
    """The sentence of a simulated design whose realised φ CI width lies outside ±``AGREEMENT`` of the
    asymptotic prediction (``row.agreement`` set): trust the simulation, not the prediction."""
    ratio = row.realised.ci_width["phi"] / row.predicted_ci["phi"]
    return (
        f"the realised phi CI is {ratio:.2f}x the asymptotic prediction ({row.agreement} than "
        f"±{AGREEMENT:.0%}): the Fisher information is not a reliable guide for this design (few cells, "
        "bound hits or a non-Gaussian fit); trust the simulation"
    )


def problem_text(p: Problem) -> str:
    """One constraint a design breaks (``design.search.check_design``), in words; a document written before
    the problems were records holds its sentence, printed as it is."""
    if isinstance(p, str):
        return p
    match p.code:
        case "end_budget_missing":
            return f"budget {p.budget:.3g} (an end of the range) is not included"
        case "budget_gap":
            ratio = p.budget_hi / p.budget
            return f"budgets {p.budget:.3g} and {p.budget_hi:.3g} are {ratio:.2f}x apart > {p.limit:g}x"
        case "budget_lacks_r":
            return f"budget {p.budget:.3g} lacks r = {list(p.lacking)}"
        case "thin_cell":
            return f"cell ({p.budget:.3g}, r={p.r}) has {p.widths} width(s) < {p.limit:g}"
        case "not_bracketed":
            why = minimum_miss_text(p.reason)
            return f"cell ({p.budget:.3g}, r={p.r}) does not bracket its predicted minimum: {why}"


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
        lines.append("design breaks: " + "; ".join(problem_text(p) for p in doc.constraints.problems))
    if doc.reference_constraint_problems:
        lines.append(
            f"reference breaks (under the prior): {len(doc.reference_constraint_problems)} "
            f"constraint(s), e.g. {problem_text(doc.reference_constraint_problems[0])}"
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
