"""How much a "holds" from the law check is worth: the power of its constant-φ test against a stated drift.

A law check that rejects nothing says "the law holds" only if it could have seen the law fail. The check's
most direct test of the law's central claim (one φ at every budget) is the ``phi-trend-c`` extension:
φ + κ·(log10 C − centre), an F(1, n − p − 1) test of κ = 0 at the check's Bonferroni level. Its power against
a drift of ``REFERENCE_PHI_DRIFT`` per decade of compute is predicted by linearising the law at the fitted θ
on the table's own runs: Var(κ̂) = [(JᵀWJ)⁻¹]_κκ with J = ∂ log L̂/∂(θ, κ) and W = (L̂/σ)² (the noise σ of one
run's final loss in nats, as a log-loss variance), noncentrality κ²/Var(κ̂), power = P(F'(1, df, λ) >
F_crit). Below ``ENOUGH_POWER`` the verdict is "inconclusive": too few runs to reject the law, not a law that
holds.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy.stats import f as f_dist
from scipy.stats import ncf

from loopscale.fit.bootstrap import design_jacobian
from loopscale.fit.fitter import LawFit, design_for
from loopscale.fit.law import extension_reference, log_prediction
from loopscale.fit.results import TrendPower
from loopscale.fit.table import RunTable

#: The drift of φ per decade of compute the power is computed for: what results/laptop-factorial's law check
#: measured (φ falling 0.40 per decade over 3.2e12–3.2e13 FLOPs, 68 runs), a drift seen in a real looped
#: sweep rather than a convenient number.
REFERENCE_PHI_DRIFT = -0.40
#: Power from which a law check that rejects nothing says "holds" rather than "inconclusive".
ENOUGH_POWER = 0.8
#: Information matrices worse conditioned than this cannot tell the drift from the law's own parameters.
MAX_CONDITION = 1e13


def phi_trend_power(
    table: RunTable, fit: LawFit, sigma: float | None, level: float, drift: float = REFERENCE_PHI_DRIFT
) -> TrendPower:
    """The ``power`` entry of the law check: the predicted power of its φ-trend test at ``level`` (the
    Bonferroni level of one test) against φ drifting ``drift`` per decade of compute, at the fitted law
    ``fit`` with run noise ``sigma`` (nats; None: the fit's residual standard deviation). ``value`` is None
    with a ``why`` code when the test cannot run ("no_df"), there is no noise ("no_noise") or the runs
    cannot tell a drift from the law ("not_separable")."""
    none = TrendPower(test="phi-trend-c", drift_per_decade=drift, level=level, value=None)
    n, free = len(table), np.append(fit.free, True)
    df = n - int(free.sum())
    if not table.has_budget or df < 1:
        return dataclasses.replace(none, why="no_df")
    resid = table.loss - fit.predict_table(table)
    if sigma is None:
        sigma = math.sqrt(float((resid**2).sum()) / max(n - int(fit.free.sum()), 1))
    none = dataclasses.replace(none, sigma=sigma)
    if not sigma > 0:
        return dataclasses.replace(none, why="no_noise")
    centre = extension_reference("phi-trend-c", table.n_once, table.n_rec, table.r, table.budget)
    design = design_for(table, plain=False, extension="phi-trend-c", ext_ref=centre)
    theta = np.append(fit.theta, drift)
    jac = design_jacobian(theta, design, free)
    weight = (np.exp(log_prediction(theta, design)) / sigma) ** 2
    info = jac.T @ (jac * weight[:, None])
    if not np.all(np.isfinite(info)) or np.linalg.cond(info) > MAX_CONDITION:
        return dataclasses.replace(none, why="not_separable")
    noncentrality = drift**2 / float(np.linalg.inv(info)[-1, -1])
    critical = f_dist.isf(level, 1, df)
    return dataclasses.replace(none, value=float(ncf.sf(critical, 1, df, noncentrality)))
