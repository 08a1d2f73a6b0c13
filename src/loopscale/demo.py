"""What ``loopscale demo``'s runs can say, as its last line: the share of runs below the bigram table first
(below 90% the demo is a pipeline check, not a measurement), then the law check's verdict with its power.

The power is that of the law check's constant-φ test against a drift of φ with compute (the ``phi-trend-c``
extension, an F(1, n − 7) test at the check's Bonferroni level) of the size the laptop sweep measured
(results/laptop-factorial: φ falls ≈ 0.40 per decade of compute, seed noise σ ≈ 0.012 nats), predicted by
linearising the law at that sweep's fit on the demo's runs: Var(drift) = σ²·[(JᵀWJ)⁻¹], J = ∂ log L̂/∂θ, W the
inverse variance of each run's log loss (σ/L̂)⁻². Units: budgets and FLOPs are training FLOPs, losses and σ
nats, the drift φ per decade of compute.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: The demo is a measurement only when at least this share of its finished runs beats the bigram table.
BELOW_BIGRAM_SHARE = 0.9
#: Power from which "the law holds" is said without "too few to reject".
ENOUGH_POWER = 0.8
#: The fitted laptop sweep whose φ drift is the effect the power is computed for (in a source checkout).
REFERENCE_FIT = Path(__file__).resolve().parents[2] / "results" / "laptop-factorial" / "fit.json"


@dataclass(frozen=True)
class Drift:
    """The alternative a power is computed against: a law θ (``fit.law`` parameterisation), the noise σ of one
    run's final loss (nats) and a drift of φ per decade of compute; ``source`` names where they come from."""

    theta: np.ndarray
    sigma: float
    per_decade: float
    source: str

    @classmethod
    def from_fit_json(cls, path: Path) -> Drift | None:
        """The law, seed noise and ``phi-trend-c`` estimate of a fit.json whose law check ran; None when the
        file is missing or has no such estimate."""
        from loopscale.design.prior import Prior
        from loopscale.errors import UserError

        try:
            doc = json.loads(Path(path).read_text())
            fit, check = doc["fit"], doc["law_check"]
            trend = next(e["estimate"] for e in check["extensions"] if e["form"] == "phi-trend-c")
            sigma = float(check["noise"]["sigma"])
            theta = Prior.from_coefficients(fit, sigma, str(path)).theta  # the design's reading of a fit
            return cls(theta, sigma, float(trend), path.parent.name)
        except (OSError, ValueError, KeyError, TypeError, StopIteration, UserError):
            return None


def drift_power(runs: list[dict], drift: Drift, threshold: float) -> float | None:
    """Predicted power of the law check's φ-trend test (level ``threshold``) on ``runs`` (dicts with n_once,
    n_rec, r, tokens, budget) when φ drifts as ``drift`` says; None when the test has no degree of freedom
    (fewer than 8 runs) or the runs cannot tell the drift from the law (a singular information matrix)."""
    from scipy.stats import f as f_dist
    from scipy.stats import ncf

    from loopscale.fit.bootstrap import design_jacobian
    from loopscale.fit.law import Design, extension_covariate, log_prediction

    keys = ("n_once", "n_rec", "r", "tokens", "budget")
    cols = {k: np.array([float(run[k]) for run in runs]) for k in keys}
    df = len(runs) - len(drift.theta) - 1
    if df < 1:
        return None
    centre = float(np.log10(cols["budget"]).mean())  # the law check's centre: the geometric mean budget
    z = extension_covariate("phi-trend-c", cols["n_once"], cols["n_rec"], cols["r"], cols["budget"], centre)
    design = Design.build(cols["n_once"], cols["n_rec"], cols["r"], cols["tokens"], np.ones(len(runs)))
    design = dataclasses.replace(design, ext_z=z[None, :], ext_target=("phi",))
    theta = np.append(drift.theta, drift.per_decade)
    jac = design_jacobian(theta, design, np.ones(len(theta), bool))
    weight = (np.exp(log_prediction(theta, design)) / drift.sigma) ** 2
    info = jac.T @ (jac * weight[:, None])
    if np.linalg.cond(info) > 1e13:
        return None
    noncentrality = drift.per_decade**2 / float(np.linalg.inv(info)[-1, -1])
    critical = f_dist.isf(threshold, 1, df)
    if noncentrality == 0:  # SciPy's noncentral F is wrong at zero noncentrality
        return float(f_dist.sf(critical, 1, df))
    return float(ncf.sf(critical, 1, df, noncentrality))


def _phi_text(doc: dict) -> str:
    """φ as far as the fit says anything about it: "(not identified)", "(the constant-φ law, rejected)" or
    its bootstrap interval."""
    phi = doc["fit"].get("phi")
    if phi is None:
        return "no phi fitted"
    if doc["diagnostics"].get("phi_identified") is False:
        return f"phi not identified (the point fit's {phi:.2f} is no measurement)"
    if (doc.get("law_check") or {}).get("verdict") == "rejected":
        return f"phi = {phi:.2f} (the constant-phi law, rejected)"
    ci = doc.get("ci", {}).get("phi")
    interval = f", 95% CI [{ci[0]:.2f}, {ci[1]:.2f}]" if ci and None not in ci else ""
    return f"phi = {phi:.3f}{interval}"


def _law_text(check: dict | None, runs: int, power: float | None, drift: Drift | None) -> str:
    """The law check's verdict, led by what ``runs`` runs can say."""
    if check is None:
        return f"{runs} runs: the law was not checked"
    if check.get("verdict") == "rejected":
        return f"{runs} runs reject one constant phi: {check['headline'].split(': ', 1)[-1]}"
    if check.get("verdict") != "holds":
        return f"{runs} runs: too few to check the law ({check.get('headline') or 'untestable'})"
    tests = f"none of {check['tests']} tests rejects it at family level {check['family_level']:g}"
    if drift is None:
        return f"{runs} runs: too few to reject one constant phi ({tests}; its power was not computed)"
    effect = (
        f"power {'n/a' if power is None else f'{power:.2f}'} to detect the drift the {drift.source} sweep "
        f"measured, phi {'falling' if drift.per_decade < 0 else 'rising'} {abs(drift.per_decade):.2f} per "
        "decade of compute"
    )
    if power is not None and power >= ENOUGH_POWER:
        return f"the law holds on these {runs} runs ({tests}, {effect})"
    return f"{runs} runs: too few to reject one constant phi ({tests}; {effect})"


def demo_line(
    doc: dict,
    finished: int,
    below: int | None,
    bigram: float | None,
    power: float | None,
    drift: Drift | None,
    effort: str,
) -> str:
    """The demo's last line from its fit.json ``doc``: ``finished`` runs, ``below`` of them below the bigram
    table of loss ``bigram`` nats (None: no baselines), the law check's ``power`` against ``drift``, and
    ``effort`` (the fit's restarts and bootstrap resamples, in words)."""
    if bigram is None or below is None:
        beside = "bigram table not available"
    else:
        beside = f"{below} of {finished} runs below the bigram table ({bigram:.3f} nats)"
    if below is not None and below < BELOW_BIGRAM_SHARE * finished:
        above = finished - below
        who = "most runs" if 2 * above > finished else f"{above} of {finished} runs"
        return (
            f"{who} are above a bigram table ({bigram:.3f} nats): a pipeline check, not a measurement; "
            f"{_phi_text(doc)}; {beside}; fit: {effort}"
        )
    law = _law_text(doc.get("law_check"), finished, power, drift)
    return f"{law}; {_phi_text(doc)}; {beside}; fit: {effort}"
