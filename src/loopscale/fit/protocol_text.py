"""Text pieces of the ``loopscale fit`` report (``Protocol.format``): the law check's lines."""

from __future__ import annotations

from loopscale.fit.labels import end_ranges_text
from loopscale.fit.power import power_text


def _ci_text(ci: list | None) -> str:
    return "" if not ci else f" [{ci[0]:.3f}, {ci[1]:.3f}]"


def law_check_lines(check: dict) -> list[str]:
    """The law check as text: noise, lack of fit, leave-one-budget-out, extensions, halves, decomposition."""
    noise = check["noise"]
    lines = [
        f"law check (verdict: {check['verdict']}; {check['tests']} tests, each at "
        f"p < {check['threshold']:.2g}):"
    ]
    if check.get("power"):
        lines.append(f"  {power_text(check['power'])} (the phi-trend test at p < {check['threshold']:.2g})")
    if noise["source"] == "replicates":
        lines.append(
            f"  noise: seed sd {noise['sigma']:.4f} nats from {noise['replicated_runs']} replicated runs "
            f"({noise['df']} df, 95% CI [{noise['ci'][0]:.4f}, {noise['ci'][1]:.4f}])"
        )
    elif noise["source"] == "--noise":
        lines.append(f"  noise: {noise['sigma']:.4f} nats as stated (--noise)")
    else:
        lines.append("  noise: unknown (no replicate seeds, no --noise): lack of fit untestable")
    lof = check.get("lack_of_fit")
    if lof:
        lines.append(
            f"  lack of fit: RMSE {lof['rmse']:.4f} nats = {lof['rmse'] / lof['sigma']:.1f}x the noise; "
            f"{lof['test']} = {lof['statistic']:.2f} on {lof['df']} df, p = {lof['p']:.2g}"
        )
    lines.append("  leave one budget out (fit the others, predict it; nats):")
    for row in check["leave_one_budget_out"]:
        if "rmse" not in row:
            lines.append(f"    C={row['budget']:.3g}: {row['error']}")
            continue
        units = f" ({row['rmse_over_noise']:.1f}x noise)" if "rmse_over_noise" in row else ""
        lines.append(
            f"    C={row['budget']:.3g}: RMSE {row['rmse']:.4f}{units}, bias {row['bias']:+.4f}, "
            "p = " + ("n/a (no residual variance)" if row["p"] is None else f"{row['p']:.2g}")
        )
    lines.append(
        f"  {'form':<13}{'extra':>26}{'phi0':>8}{'LR':>7}{'F':>7}{'p (F)':>9}{'AIC':>9}{'LOBO RMSE':>11}"
    )
    paper_lobo = check.get("paper_lobo_rmse")
    lines.append(f"  {'paper':<13}{'':>26}{'':>8}{'':>7}{'':>7}{'':>9}{'':>9}{_num(paper_lobo):>11}")
    for ext in check["extensions"]:
        extra = f"{ext['estimate']:+.3f}{_ci_text(ext.get('ci'))}"
        lines.append(
            f"  {ext['form']:<13}{extra:>26}{ext['phi0']:8.3f}{ext['lr']:7.1f}{_num(ext['F'], '.1f'):>7}"
            f"{_num(ext['p'], '.2g'):>9}"
            f"{ext['aic']:9.1f}{_num(ext['lobo_rmse']):>11}"
        )
    halves = check.get("halves") or {}
    if halves:
        lines.append(
            "  phi per half of the budgets: "
            + ", ".join(
                f"{k} {v['phi']:.3f}{_ci_text(v.get('ci'))}{_mc_text(v.get('ci_mc'))}"
                for k, v in halves.items()
                if v["phi"] is not None
            )
        )
    shares = ", ".join(f"{k} {100 * v:.1f}%" for k, v in check["decomposition"].items())
    lines.append(f"  residual sum of squares explained by group means: {shares}")
    return lines


def _mc_text(ranges) -> str:
    """The Monte Carlo ranges of a CI's ends (``fit.bootstrap.end_ranges``), when recorded."""
    return f" (Monte Carlo range of the ends: {end_ranges_text(ranges)})" if ranges else ""


def _num(x: float | None, spec: str = ".4f") -> str:
    return "-" if x is None else format(x, spec)
