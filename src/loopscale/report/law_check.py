"""The law check section: does one constant φ describe the runs at all? Leave-one-budget-out prediction,
lack of fit against the seed noise, the one-parameter extensions of the law, φ per budget and per half, the
residual decomposition and the residuals against width (method §8.10). Losses and RMSEs in nats."""

from __future__ import annotations

from pathlib import Path

from loopscale.fit.labels import end_ranges_text, flops_label, percent_text
from loopscale.report.document import Bullets, Image, Section, Table
from loopscale.report.figures import caption
from loopscale.report.formatting import ci_text, num

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
    ci = f", 95% CI {ci_text(noise.get('ci'))}" if noise.get("ci") else ""
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
        f"Lack-of-fit test: {name} = {num(lof.get('statistic'), '{:.2f}')}{df_text}, "
        f"p = {num(lof.get('p'), '{:.2g}')}, against {source}: residual RMSE "
        f"{num(lof.get('rmse'), '{:.4f}')} nats against σ = {num(lof.get('sigma'), '{:.4f}')} nats."
    )


def law_check_section(doc, figure: Path | None = None) -> Section:
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
    if check.get("reasons") and check.get("verdict") in ("rejected", "inconclusive", "holds", "not rejected"):
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
                        num(row.get("budget"), flops_label),
                        num(row.get("n")),
                        num(row.get("rmse"), "{:.4f}"),
                        num(row.get("bias"), "{:+.4f}"),
                        num(row.get("rmse_over_noise"), "{:.1f}"),
                        num(row.get("bias_over_noise"), "{:+.1f}"),
                    ]
                    + ([num(row.get("F"), "{:.2f}"), num(row.get("p"), "{:.2g}")] if tested else [])
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
                        num(e.get("estimate"), "{:+.3f}"),
                        ci_text(e.get("ci")),
                        num(e.get("phi0"), "{:.3f}"),
                        num(e.get("lr"), "{:.1f}"),
                        num(e.get("F"), "{:.1f}"),
                        num(e.get("p"), "{:.2g}"),
                        num(e.get("aic"), "{:.1f}"),
                        num(e.get("rmse"), "{:.4f}"),
                        num(e.get("lobo_rmse"), "{:.4f}"),
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
                num(row.get("n")),
                num(row.get("phi"), "{:.3f}"),
                ci_text(row.get("ci")),
                end_ranges_text(row.get("ci_mc")),
            ]
            for row in per_budget
        ]
        rows += [
            [
                f"{name} half ({', '.join(flops_label(b) for b in h.get('budgets') or [])})",
                num(h.get("n")),
                num(h.get("phi"), "{:.3f}"),
                ci_text(h.get("ci")),
                end_ranges_text(h.get("ci_mc")),
            ]
            for name, h in halves.items()
            if h
        ]
        blocks.append(
            "φ refitted per budget (E, α, β held at the pooled fit) and per half of the budgets (the whole "
            "law refitted). The last column is the range in which another draw of as many resamples could "
            "put each CI end (95%, from the order statistics): an end with a wide range sits in a thin tail "
            "of refits, and nothing may rest on where in that range it fell."
        )
        header = ["refit on", "runs", "φ", "CI", "Monte Carlo range: lower end / upper end"]
        blocks.append(Table(header, rows))
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
        blocks.append(Image(figure, caption(figure)))
    return Section("Law check", blocks)
