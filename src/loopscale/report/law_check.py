"""The law check section: does one constant φ describe the runs at all? Leave-one-budget-out prediction,
lack of fit against the seed noise, the one-parameter extensions of the law, φ per budget and per half, the
residual decomposition and the residuals against width (method §8.10). Losses and RMSEs in nats."""

from __future__ import annotations

from pathlib import Path

from loopscale.fit.labels import flops_label, percent_text
from loopscale.fit.protocol_results import ProtocolResult
from loopscale.fit.results import LawCheck
from loopscale.present.law_check import law_reasons
from loopscale.present.numbers import end_ranges, interval
from loopscale.report.document import Bullets, Image, Section, Table
from loopscale.report.figures import caption
from loopscale.report.formatting import num

_NOISE_SOURCE = {
    "replicates": "the replicate seeds' variance",
    "--noise": "the noise figure given with --noise",
    "none": "no noise figure (no replicate seeds and no --noise)",
}


def _noise_text(check: LawCheck) -> str:
    noise = check.noise
    if noise.sigma is None or noise.source == "none":
        return (
            "Noise: not known (no replicate seeds and no --noise), so nothing below is measured in noise "
            "units and the lack-of-fit test is not run."
        )
    df = f" from {noise.df} degrees of freedom" if noise.df is not None else ""
    ci = f", 95% CI {interval(noise.ci, missing='[–]', open_missing=False)}" if noise.ci else ""
    return f"Noise: σ = {noise.sigma:.4f} nats{df} ({_NOISE_SOURCE[noise.source]}{ci})."


def _lack_of_fit_text(check: LawCheck) -> str:
    lof = check.lack_of_fit
    if lof is None:
        return "Lack-of-fit test: not run (no replicate seeds and no --noise to test the residuals against)."
    name = "F" if lof.test == "F" else "χ²"
    return (
        f"Lack-of-fit test: {name} = {num(lof.statistic, '{:.2f}')} on {lof.df} df, "
        f"p = {num(lof.p, '{:.2g}')}, against {_NOISE_SOURCE[lof.source]}: residual RMSE "
        f"{num(lof.rmse, '{:.4f}')} nats against σ = {num(lof.sigma, '{:.4f}')} nats."
    )


def law_check_section(doc: ProtocolResult, figure: Path | None = None) -> Section:
    """The law check's evidence: leave-one-budget-out prediction, lack of fit, the one-parameter extensions
    of the law, φ per budget and per half, the residual decomposition and residuals against width."""
    check = doc.law_check
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
    reasons = law_reasons(check)
    if reasons and check.verdict != "untestable":
        blocks += [f"The tests behind the verdict ({check.verdict}):", Bullets(reasons)]
    blocks.append(_noise_text(check))
    lobo = check.leave_one_budget_out
    if lobo:
        blocks.append(
            "Leave one budget out: fit without it, predict it (the top budget is the extrapolation a user "
            "relies on); RMSE and bias (observed − predicted) in nats and in units of the noise σ:"
        )
        tested = any(not row.failed for row in lobo)  # a test of each prediction, when the check made one
        blocks.append(
            Table(
                ["C (FLOPs)", "runs", "RMSE (nats)", "bias (nats)", "RMSE / σ", "bias / σ"]
                + (["F", "p"] if tested else []),
                [
                    [
                        num(row.budget, flops_label),
                        num(row.n),
                        num(row.rmse, "{:.4f}"),
                        num(row.bias, "{:+.4f}"),
                        num(row.rmse_over_noise, "{:.1f}"),
                        num(row.bias_over_noise, "{:+.1f}"),
                    ]
                    + ([num(row.F, "{:.2f}"), num(row.p, "{:.2g}")] if tested else [])
                    for row in lobo
                ],
            )
        )
    else:
        blocks.append("Leave one budget out: not available (fewer than two budgets).")
    blocks.append(_lack_of_fit_text(check))
    extensions = check.extensions
    if extensions:
        selected = check.selected_form
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
                        e.form + (" (selected)" if e.form == selected else ""),
                        e.label,
                        num(e.estimate, "{:+.3f}"),
                        interval(e.ci, missing="[–]", open_missing=False),
                        num(e.phi0, "{:.3f}"),
                        num(e.lr, "{:.1f}"),
                        num(e.F, "{:.1f}"),
                        num(e.p, "{:.2g}"),
                        num(e.aic, "{:.1f}"),
                        num(e.rmse, "{:.4f}"),
                        num(e.lobo_rmse, "{:.4f}"),
                    ]
                    for e in extensions
                ],
            )
        )
    per_budget, halves = check.per_budget_phi, check.halves
    if per_budget or halves:
        rows = [
            [
                f"C = {flops_label(row.budget)}",
                num(row.n),
                num(row.phi, "{:.3f}"),
                interval(row.ci, missing="[–]", open_missing=False),
                end_ranges(row.ci_mc),
            ]
            for row in per_budget
        ]
        rows += [
            [
                f"{h.half} half ({', '.join(flops_label(b) for b in h.budgets)})",
                num(h.n),
                num(h.phi, "{:.3f}"),
                interval(h.ci, missing="[–]", open_missing=False),
                end_ranges(h.ci_mc),
            ]
            for h in halves
        ]
        blocks.append(
            "φ refitted per budget (E, α, β held at the pooled fit) and per half of the budgets (the whole "
            "law refitted). The last column is the range in which another draw of as many resamples could "
            "put each CI end (95%, from the order statistics): an end with a wide range sits in a thin tail "
            "of refits, and nothing may rest on where in that range it fell."
        )
        header = ["refit on", "runs", "φ", "CI", "Monte Carlo range: lower end / upper end"]
        blocks.append(Table(header, rows))
    shares = check.decomposition
    if shares:
        names = {"r_x_width": "r × width", "budget_x_r": "budget × r"}
        blocks.append(
            "Share of the residual sum of squares explained by the group means: "
            + ", ".join(f"{names.get(k, k)} {percent_text(v)}" for k, v in shares.items())
            + " (a law that describes the runs leaves residuals no grouping explains)."
        )
    if figure is not None:
        blocks.append(Image(figure, caption(figure)))
    return Section("Law check", blocks)
