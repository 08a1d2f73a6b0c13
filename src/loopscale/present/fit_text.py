"""The text report of a fit (``loopscale fit``'s output and the report's "Full fit output"): every form,
the CIs, residuals per r, budget halves, frontier and the law check, from a ``fit.protocol.Protocol``."""

from __future__ import annotations

from loopscale.fit.fitter import LawFit
from loopscale.fit.labels import bptt_text
from loopscale.fit.priors import fixed_lines
from loopscale.fit.protocol import TOP_KEYS, Protocol
from loopscale.fit.results import LawCheck
from loopscale.present.law_check import law_headline, power_text
from loopscale.present.numbers import end_ranges, interval


def fit_document_text(doc: dict) -> str:
    """``protocol_text`` of a saved fit (fit.json), rebuilt without refitting."""
    return protocol_text(Protocol.from_dict(doc))


def protocol_text(protocol: Protocol) -> str:
    """A readable text report: every form, the CIs, residuals per r, budget halves, frontier."""
    lines = []
    check = protocol.law_check
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
        lines += [line for line in (protocol.diagnostics.get("verdict"), headline) if line]
        lines.append("")
    lines += [
        f"{len(fit_rows(protocol))} fits on {protocol.table_summary['n_runs']} runs "
        f"(r = {protocol.table_summary['r']}, {len(protocol.table_summary['budgets'])} budgets); "
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
    if protocol.diagnostics.get("objective_note"):
        lines.append(f"objective vs R2: {protocol.diagnostics['objective_note']}")
    lines += fixed_lines(protocol.settings.get("fixed") or {}, protocol.settings.get("prior"))
    phi_line = phi_intervals_line(protocol)
    if phi_line:
        lines += ["", phi_line]
        if protocol.profile is not None and protocol.profile.get("disagreement"):
            lines.append(f"  {protocol.profile['disagreement']}")
    if protocol.diagnostics.get("reasons"):
        lines.append("flags: " + "; ".join(protocol.diagnostics["reasons"]))
    if protocol.ci:
        if protocol.interval is not None:
            b = protocol.interval
            comps = ", ".join(f"{k} {v:.4f}" for k, v in b["components"].items())
            lines += [
                "",
                f"{100 * b['level']:.0f}% CIs: random-effects parametric bootstrap ({b['resamples']} "
                f"simulated tables; error sd in log loss: {comps}):",
            ]
        else:
            b = protocol.bootstrap
            lines += [
                "",
                f"{100 * b['level']:.0f}% block-bootstrap CIs ({b['resamples']} resamples of "
                f"{b['cells']} cells, percentile):",
            ]
        keys = (*TOP_KEYS, "ext")
        lines += [f"  {k:<6} [{lo:.4g}, {hi:.4g}]" for k, (lo, hi) in protocol.ci.items() if k in keys]
    lines += [
        "",
        "residuals of the fit (observed - predicted, nats):",
        f"  {'r':<8}{'n':>4}{'mean':>9}{'max|res|':>10}{'RMSE':>8}",
    ]
    for key, s in [("all", protocol.residuals["overall"]), *protocol.residuals["per_r"].items()]:
        lines.append(f"  {key:<8}{s['n']:>4}{s['mean']:>+9.4f}{s['max_abs']:>10.4f}{s['rmse']:>8.4f}")
    if protocol.loop_worth:
        caveat = (
            " [phi not identified: not a finding]"
            if protocol.diagnostics.get("phi_identified") is False
            else ""
        )
        lines += [
            "",
            f"worth of r loops (r^phi unique blocks){caveat}: "
            + ", ".join(
                f"r={w['r']}: {w['worth']:.3f} ({100 * w['fraction']:.0f}%)" for w in protocol.loop_worth
            ),
        ]
    if protocol.compute_optimal:
        flops = bptt_text(protocol.compute_optimal.get("bptt_k"), protocol.compute_optimal["per_r"])
        head = f"compute-optimal frontier (fitted law, exact FLOPs over continuous width; {flops}):"
        lines += ["", head]
        for r, e in protocol.compute_optimal["per_r"].items():
            gaps = e.get("gap_to_r1")
            gap = f", gap to r=1 {min(gaps):+.3f}..{max(gaps):+.3f}" if gaps and r != "1" else ""
            exps = f"a_N {e['a_N']:.3f}, a_D {e['a_D']:.3f}" if "a_N" in e else ""
            own = (protocol.compute_optimal_per_r_law or {}).get(r, {})
            if "a_N" in own:
                exps += f" (own per-r law: a_N {own['a_N']:.3f}, a_D {own['a_D']:.3f})"
            lines.append(f"  r={r}: {exps}{gap}")
        outside = [
            f"r={r} C={row['budget']:.3g}"
            for r, e in protocol.compute_optimal["per_r"].items()
            for row in e["rows"]
            if row.get("within_widths_run") is False
        ]
        rows = [row for e in protocol.compute_optimal["per_r"].values() for row in e["rows"]]
        at_edge = sum(bool(row.get("at_edge")) for row in rows)
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
    if check is not None and check.verdict != "untestable":
        lines += ["", *law_check_lines(check)]
    template = protocol.settings.get("template")
    if template:
        lines.append(f"architecture template: {template['source']}")
    lines += [f"note: {n}" for n in protocol.notes]
    return "\n".join(lines)


def phi_intervals_line(protocol: Protocol) -> str | None:
    """φ with its reported CI (random-effects bootstrap), the cell bootstrap's and the profile interval
    side by side (None for the plain law)."""
    joint = protocol.forms.get("joint")
    if joint is None:
        return None
    parts = [f"phi = {joint.phi:.4f}"]
    if protocol.fit.form == "joint" and protocol.interval is not None and "phi" in protocol.interval["ci"]:
        lo, hi = protocol.interval["ci"]["phi"]
        parts.append(
            f"{100 * protocol.interval['level']:.0f}% CI [{lo:.4f}, {hi:.4f}] (random-effects bootstrap)"
        )
    if protocol.fit.form == "joint" and protocol.bootstrap is not None and "phi" in protocol.bootstrap["ci"]:
        lo, hi = protocol.bootstrap["ci"]["phi"]
        parts.append(f"cell bootstrap [{lo:.4f}, {hi:.4f}]")
    elif protocol.interval is None:
        parts.append("bootstrap CI: none")
    if protocol.profile is not None:
        ends = ["open" if x is None else f"{x:.4f}" for x in protocol.profile["interval"]]
        parts.append(
            f"{100 * protocol.profile['level']:.0f}% profile interval [{ends[0]}, {ends[1]}] "
            f"(least-squares phi {protocol.profile['phi_hat']:.4f})"
        )
        agree = protocol.profile.get("agrees_with_bootstrap")
        if agree is not None:
            parts.append("intervals agree" if agree else "intervals DISAGREE")
    else:
        parts.append("profile: not computed")
    identified = protocol.diagnostics.get("phi_identified")
    if identified is False:
        parts.append("NOT IDENTIFIED")
    return "   ".join(parts)


def fit_rows(protocol: Protocol) -> list[tuple[str, LawFit]]:
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
