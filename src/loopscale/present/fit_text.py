"""The text report of a fit (``loopscale fit``'s output and the report's "Full fit output"): every form,
the CIs, residuals per r, budget halves, frontier and the law check, from a
``fit.protocol_results.ProtocolResult``."""

from __future__ import annotations

from loopscale.fit.labels import bptt_text
from loopscale.fit.priors import NO_LAW_CHECK, fixed_lines
from loopscale.fit.protocol_results import (
    MIN_PARABOLA_WIDTHS,
    FitSummary,
    MinimumMiss,
    ProtocolNote,
    ProtocolResult,
)
from loopscale.fit.results import LawCheck
from loopscale.present.identification import (
    disagreement_text,
    identification_reasons,
    identification_verdict,
    objective_note,
)
from loopscale.present.law_check import law_headline, power_text
from loopscale.present.numbers import end_ranges, interval

MINIMUM_MISSES = {
    "few_widths": f"fewer than {MIN_PARABOLA_WIDTHS} widths run at this budget",
    "opens_downward": "the parabola opens downward (no minimum): not bracketed",
    "below_widths": "vertex below the narrowest width run: the minimum is not bracketed",
    "above_widths": "vertex above the widest width run: the minimum is not bracketed",
}


def minimum_miss_text(reason: MinimumMiss) -> str:
    """Why a cell's iso-FLOP vertex is not given (``CellMinimum.reason``)."""
    return MINIMUM_MISSES[reason]


def protocol_note_text(note: ProtocolNote) -> str:
    """The sentence of one note of the protocol (a part the table could not support, and why)."""
    frontier = "no compute-optimal frontier"
    match note.code:
        case "no_per_r_fit":
            return f"no per-r fit for r={note.r}: {note.error}"
        case "no_budget_halves":
            return f"no budget-half refits: {note.budgets} budget(s), each half needs at least 2"
        case "no_half_refit":
            return f"no {note.half}-half refit: {note.error}"
        case "no_profile":
            return "no profile interval: φ is not identified by the point fit and bootstrap alone"
        case "fit_at_bound":
            return (
                "the random-effects bootstrap simulates from the fit, which has "
                f"{', '.join(note.at_bound)} on the edge of the fit box: its tables cannot show what that "
                "edge hides, so it is not the reported interval; ci.phi is the wider of the cell bootstrap "
                "and the profile interval"
            )
        case "no_law_check":
            return NO_LAW_CHECK
        case "no_budget_column":
            return f"{frontier} or cell minima: the table has no 'budget' column"
        case "no_width_column":
            return f"{frontier}: the table has no 'width' column and no FLOPs model was given"
        case "template_mismatch":
            return (
                f"{frontier}: the architecture template ({note.template}) does not match the runs: "
                f"{note.error}; pass the sweep's template (--model-config sweep.yaml or a run's config.yaml)"
            )
        case "no_frontier":
            return f"{frontier}: {note.error}"


def protocol_text(protocol: ProtocolResult) -> str:
    """A readable text report: every form, the CIs, residuals per r, budget halves, frontier."""
    lines = []
    check = protocol.law_check
    diag = protocol.diagnostics
    if check is not None and check.verdict == "rejected":
        lines += [law_headline(check)]
        per_budget = [row for row in check.per_budget_phi if row.phi is not None]
        if per_budget:
            lines.append(
                "phi per budget (E, alpha, beta of the pooled fit): "
                + ", ".join(
                    f"C={row.budget:.3g}: {row.phi:.3f}" + (f" {interval(row.ci)}" if row.ci else "")
                    for row in per_budget
                )
            )
        lines.append(
            f"the pooled phi below is NOT a measurement; the form with the best leave-one-budget-out "
            f"prediction is {check.selected_form} (--form {check.selected_form})"
        )
        lines.append("")
    else:  # identifiability first (is φ pinned down?), then whether the law was checked and holds
        headline = None if check is None else law_headline(check)
        lines += [line for line in (identification_verdict(diag), headline) if line]
        lines.append("")
    table = protocol.table
    lines += [
        f"{len(fit_rows(protocol))} fits on {table.n_runs} runs "
        f"(r = {list(table.r)}, {len(table.budgets)} budgets); "
        f"losses in nats, objective = summed Huber(δ=1e-3) on log loss"
    ]
    header = (
        f"{'form':<16}{'E':>8}{'A':>11}{'B':>11}{'alpha':>8}{'beta':>8}{'phi':>8}"
        f"{'objective':>12}{'R2':>8}{'|grad|':>10}"
    )
    lines += ["", header, "-" * len(header)]
    for name, f in fit_rows(protocol):
        phi = "" if f.phi is None else f"{f.phi:8.4f}"
        lines.append(
            f"{name:<16}{f.E:8.4f}{f.A:11.4g}{f.B:11.4g}{f.alpha:8.4f}{f.beta:8.4f}{phi:>8}"
            f"{f.objective:12.4e}{f.r2:8.4f}{f.grad_norm:10.1e}"
            + (f"  at bound: {', '.join(f.at_bound)}" if f.at_bound else "")
        )
    lines.append(f"objective vs R2: {objective_note(diag.ranking)}")
    lines += fixed_lines(protocol.settings.fixed or {}, protocol.settings.prior)
    phi_line = phi_intervals_line(protocol)
    if phi_line:
        lines += ["", phi_line]
        if protocol.profile is not None and protocol.profile.disagreement is not None:
            lines.append(f"  {disagreement_text(protocol.profile.disagreement)}")
    reasons = identification_reasons(diag)
    if reasons:
        lines.append("flags: " + "; ".join(reasons))
    if protocol.ci:
        if protocol.random_effects_bootstrap is not None:
            b = protocol.random_effects_bootstrap
            comps = ", ".join(f"{k} {v:.4f}" for k, v in b.components.items())
            lines += [
                "",
                f"{100 * b.level:.0f}% CIs: random-effects parametric bootstrap ({b.resamples} "
                f"simulated tables; error sd in log loss: {comps}):",
            ]
        else:
            b = protocol.bootstrap
            lines += [
                "",
                f"{100 * b.level:.0f}% block-bootstrap CIs ({b.resamples} resamples of "
                f"{b.cells} cells, percentile):",
            ]
        lines += [f"  {k:<6} [{lo:.4g}, {hi:.4g}]" for k, (lo, hi) in protocol.ci.items()]
    lines += [
        "",
        "residuals of the fit (observed - predicted, nats):",
        f"  {'r':<8}{'n':>4}{'mean':>9}{'max|res|':>10}{'RMSE':>8}",
    ]
    for key, s in [("all", protocol.residuals.overall), *protocol.residuals.per_r.items()]:
        lines.append(f"  {key:<8}{s.n:>4}{s.mean:>+9.4f}{s.max_abs:>10.4f}{s.rmse:>8.4f}")
    if protocol.loop_worth:
        caveat = " [phi not identified: not a finding]" if diag.phi_identified is False else ""
        lines += [
            "",
            f"worth of r loops (r^phi unique blocks){caveat}: "
            + ", ".join(f"r={w.r}: {w.worth:.3f} ({100 * w.fraction:.0f}%)" for w in protocol.loop_worth),
        ]
    if protocol.compute_optimal:
        lines += ["", *_frontier_lines(protocol)]
    if check is not None and check.verdict != "untestable":
        lines += ["", *law_check_lines(check)]
    lines.append(f"architecture template: {protocol.settings.template.source}")
    lines += [f"note: {protocol_note_text(n)}" for n in protocol.notes]
    return "\n".join(lines)


def _frontier_lines(protocol: ProtocolResult) -> list[str]:
    """The compute-optimal frontier: each r's scaling exponents, gaps to r = 1 and the optima that are
    extrapolations (on the edge of the width search or outside the widths run)."""
    frontier = protocol.compute_optimal
    flops = bptt_text(frontier.bptt_k, frontier.per_r)
    lines = [f"compute-optimal frontier (fitted law, exact FLOPs over continuous width; {flops}):"]
    for r, e in frontier.per_r.items():
        gaps = e.gap_to_r1
        gap = f", gap to r=1 {min(gaps):+.3f}..{max(gaps):+.3f}" if gaps and r != "1" else ""
        exps = f"a_N {e.a_N:.3f}, a_D {e.a_D:.3f}" if e.a_N is not None else ""
        own = (protocol.compute_optimal_per_r_law or {}).get(r)
        if own is not None and own.a_N is not None:
            exps += f" (own per-r law: a_N {own.a_N:.3f}, a_D {own.a_D:.3f})"
        lines.append(f"  r={r}: {exps}{gap}")
    outside = [
        f"r={r} C={row.budget:.3g}"
        for r, e in frontier.per_r.items()
        for row in e.rows
        if row.within_widths_run is False
    ]
    rows = [row for e in frontier.per_r.values() for row in e.rows]
    at_edge = sum(row.at_edge for row in rows)
    if at_edge:
        lines.append(
            f"  {at_edge} of {len(rows)} optima sit on the edge of the width search (one head, or "
            "65,536): the fitted law has no interior optimum there, so their a_N, a_D mean little"
        )
    if outside:
        lines.append(
            f"  {len(outside)} of the optima lie outside the widths run (extrapolated): "
            + ", ".join(outside[:6])
            + (" …" if len(outside) > 6 else "")
        )
    return lines


def phi_intervals_line(protocol: ProtocolResult) -> str | None:
    """φ with its reported CI (random-effects bootstrap), the cell bootstrap's and the profile interval
    side by side (None for the plain law)."""
    joint = protocol.forms.get("joint")
    if joint is None:
        return None
    parts = [f"phi = {joint.phi:.4f}"]
    joint_main = protocol.fit.form == "joint"
    interval_re, boot, prof = protocol.random_effects_bootstrap, protocol.bootstrap, protocol.profile
    if joint_main and interval_re is not None and "phi" in interval_re.ci:
        lo, hi = interval_re.ci["phi"]
        parts.append(f"{100 * interval_re.level:.0f}% CI [{lo:.4f}, {hi:.4f}] (random-effects bootstrap)")
    if joint_main and boot is not None and "phi" in boot.ci:
        lo, hi = boot.ci["phi"]
        parts.append(f"cell bootstrap [{lo:.4f}, {hi:.4f}]")
    elif interval_re is None:
        parts.append("bootstrap CI: none")
    if prof is not None:
        ends = ["open" if x is None else f"{x:.4f}" for x in prof.interval]
        parts.append(
            f"{100 * prof.level:.0f}% profile interval [{ends[0]}, {ends[1]}] "
            f"(least-squares phi {prof.phi_hat:.4f})"
        )
        if prof.agrees_with_bootstrap is not None:
            parts.append("intervals agree" if prof.agrees_with_bootstrap else "intervals DISAGREE")
    else:
        parts.append("profile: not computed")
    if protocol.diagnostics.phi_identified is False:
        parts.append("NOT IDENTIFIED")
    return "   ".join(parts)


def fit_rows(protocol: ProtocolResult) -> list[tuple[str, FitSummary]]:
    rows = [(name, f) for name, f in protocol.forms.items()]
    if protocol.fit.form == "chinchilla":
        rows = [("chinchilla", protocol.fit)]
    rows += [(f"r={k} chinchilla", f) for k, f in protocol.per_r.items()]
    rows += [(f"{k} half", f) for k, f in protocol.budget_halves.items()]
    return rows


def law_check_lines(check: LawCheck) -> list[str]:
    """The law check as text: noise, lack of fit, leave-one-budget-out, extensions, halves, decomposition."""
    noise = check.noise
    lines = [f"law check (verdict: {check.verdict}; {check.tests} tests, each at p < {check.threshold:.2g}):"]
    if check.power is not None:
        lines.append(f"  {power_text(check.power)} (the phi-trend test at p < {check.threshold:.2g})")
    if noise.source == "replicates":
        lines.append(
            f"  noise: seed sd {noise.sigma:.4f} nats from {noise.replicated_runs} replicated runs "
            f"({noise.df} df, 95% CI {interval(noise.ci, 4)})"
        )
    elif noise.source == "--noise":
        lines.append(f"  noise: {noise.sigma:.4f} nats as stated (--noise)")
    else:
        lines.append("  noise: unknown (no replicate seeds, no --noise): lack of fit untestable")
    lof = check.lack_of_fit
    if lof:
        lines.append(
            f"  lack of fit: RMSE {lof.rmse:.4f} nats = {lof.rmse / lof.sigma:.1f}x the noise; "
            f"{lof.test} = {lof.statistic:.2f} on {list(lof.df)} df, p = {lof.p:.2g}"
        )
    lines.append("  leave one budget out (fit the others, predict it; nats):")
    for row in check.leave_one_budget_out:
        if row.failed:
            lines.append(f"    C={row.budget:.3g}: the other budgets could not be fitted")
            continue
        units = "" if row.rmse_over_noise is None else f" ({row.rmse_over_noise:.1f}x noise)"
        lines.append(
            f"    C={row.budget:.3g}: RMSE {row.rmse:.4f}{units}, bias {row.bias:+.4f}, "
            "p = " + ("n/a (no residual variance)" if row.p is None else f"{row.p:.2g}")
        )
    lines.append(
        f"  {'form':<13}{'extra':>26}{'phi0':>8}{'LR':>7}{'F':>7}{'p (F)':>9}{'AIC':>9}{'LOBO RMSE':>11}"
    )
    paper = _num(check.paper_lobo_rmse)
    lines.append(f"  {'paper':<13}{'':>26}{'':>8}{'':>7}{'':>7}{'':>9}{'':>9}{paper:>11}")
    for ext in check.extensions:
        extra = f"{ext.estimate:+.3f}" + (f" {interval(ext.ci)}" if ext.ci else "")
        lines.append(
            f"  {ext.form:<13}{extra:>26}{ext.phi0:8.3f}{ext.lr:7.1f}{_num(ext.F, '.1f'):>7}"
            f"{_num(ext.p, '.2g'):>9}"
            f"{ext.aic:9.1f}{_num(ext.lobo_rmse):>11}"
        )
    halves = [half for half in check.halves if half.phi is not None]
    if halves:
        lines.append(
            "  phi per half of the budgets: "
            + ", ".join(
                f"{h.half} {h.phi:.3f}" + (f" {interval(h.ci)}" if h.ci else "") + _mc_text(h.ci_mc)
                for h in halves
            )
        )
    shares = ", ".join(f"{k} {100 * v:.1f}%" for k, v in check.decomposition.items())
    lines.append(f"  residual sum of squares explained by group means: {shares}")
    return lines


def _mc_text(ranges) -> str:
    """The Monte Carlo ranges of a CI's ends (``fit.bootstrap.end_ranges``), when recorded."""
    return f" (Monte Carlo range of the ends: {end_ranges(ranges)})" if ranges else ""


def _num(x: float | None, spec: str = ".4f") -> str:
    return "-" if x is None else format(x, spec)
