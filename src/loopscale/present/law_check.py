"""The law check's sentences (``fit.results.LawCheck`` → words): its headline, the evidence of each test,
the reasons a report lists under it, and the φ-trend test's power."""

from __future__ import annotations

from loopscale.fit.results import MIN_BUDGETS, Evidence, LawCheck, TrendPower
from loopscale.present.numbers import budget as budget_text

_NO_POWER = {
    "no_df": "no degree of freedom for the phi-trend test",
    "no_noise": "no run-to-run noise to compute a power with",
    "not_separable": "these runs cannot tell a drift of phi from the law's own parameters",
}


def power_text(power: TrendPower) -> str:
    """'power 0.12 to detect phi falling 0.40 per decade of compute' (or why there is none)."""
    drift = power.drift_per_decade
    what = f"phi {'falling' if drift < 0 else 'rising'} {abs(drift):.2f} per decade of compute"
    if power.value is None:
        return f"no power to detect {what} ({_NO_POWER[power.why]})"
    return f"power {power.value:.2f} to detect {what}"


def evidence_text(check: LawCheck, evidence: Evidence) -> str:
    """What one test found, with its statistic and p-value."""
    if evidence.kind == "lack_of_fit":
        lof = check.lack_of_fit
        noise = "seed" if lof.source == "replicates" else "stated"
        return (
            f"the residuals (RMSE {lof.rmse:.4f} nats) are {lof.rmse / lof.sigma:.1f}x the {noise} noise "
            f"{lof.sigma:.4f} ({lof.test} = {lof.statistic:.2f}, p = {lof.p:.2g})"
        )
    if evidence.kind == "extension":
        ext = next(e for e in check.extensions if e.form == evidence.key)
        est = ext.estimate
        if ext.form == "phi-trend-c":
            what = f"phi {'falls' if est < 0 else 'rises'} {abs(est):.2f} per decade of compute"
        elif ext.form == "phi-trend-n":
            what = f"phi {'falls' if est < 0 else 'rises'} {abs(est):.2f} per decade of model size"
        else:
            what = (
                f"the loss floor {'rises' if est > 0 else 'falls'} with r (E_r = E*r^{est:.3f}, "
                f"{ext.nats_per_doubling:+.3f} nats per doubling of r)"
            )
        return f"{what} (F = {ext.F:.1f}, p = {ext.p:.2g})"
    row = next(r for r in check.leave_one_budget_out if r.budget == evidence.budget)
    noise = "" if row.rmse_over_noise is None else f", {row.rmse_over_noise:.1f}x the noise"
    return (
        f"budget {budget_text(row.budget)} left out is predicted with RMSE {row.rmse:.4f} nats{noise} "
        f"(predictive F = {row.F:.2f}, p = {row.p:.2g})"
    )


def law_headline(check: LawCheck) -> str:
    """The law check in one sentence: the strongest evidence when rejected, else what the tests could say."""
    level = f"family level {check.family_level:g}"
    if check.verdict == "rejected":
        drift = check.phi_drift
        trail = "; per budget phi " + " -> ".join(f"{phi:.2f}" for phi in drift) if len(drift) >= 2 else ""
        return f"one constant phi is rejected: {evidence_text(check, check.rejected_by[0])}{trail}"
    if check.untestable == "too_few_budgets":
        count = "fewer than 3" if check.budgets is None else str(check.budgets)
        return (
            f"law not checked: {count} budget(s); checking that one φ holds across budgets needs at least "
            f"{MIN_BUDGETS}"
        )
    if check.verdict == "untestable":
        return "law not checked: the fit leaves no residual variance or degree of freedom to test against"
    if check.verdict == "holds":
        return (
            f"the law holds on these runs: none of {check.tests} tests rejects one constant phi ({level}; "
            f"the phi-trend test had {power_text(check.power)})"
        )
    if check.verdict == "not rejected":
        return (
            f"the law is not rejected on these runs (none of {check.tests} tests rejects one constant phi at "
            f"{level}), but its lack of fit has p = {check.lack_of_fit.p:.2g}: not rejected, not confirmed"
        )
    return (
        f"too few to reject one constant phi (none of {check.tests} tests rejects it at {level}; the "
        f"phi-trend test has {power_text(check.power)})"
    )


def law_reasons(check: LawCheck) -> list[str]:
    """What a report lists under the verdict: each rejecting test (rejected), or the headline (a check that
    could not say "holds"); nothing when the law holds or is not rejected."""
    if check.verdict == "rejected":
        return [evidence_text(check, e) for e in check.rejected_by]
    if check.verdict in ("untestable", "inconclusive"):
        return [law_headline(check)]
    return []
