"""The precision a set of runs buys, predicted: the asymptotic covariance of the project's fit, the summed
Huber (δ = 1e-3) of log L̂ − log L minimised over θ.

For an M-estimator it is the sandwich H⁻¹·V·H⁻¹ with H = Σᵢ E[ψ'(εᵢ)]·JᵢJᵢᵀ and V = Σᵢ E[ψ(εᵢ)²]·JᵢJᵢᵀ, where
Jᵢ = ∂ log L̂ᵢ/∂θ, ψ is Huber's derivative (the residual clipped to ±δ) and εᵢ ≈ N(0, (σ/L̂ᵢ)²) is the residual
in log space. At σ = 0.01 nats and L ≈ 3 the residuals are ≈ 3δ, so the fit is mostly in Huber's linear
(L1-like) regime, which the sandwich accounts for (plain least-squares Fisher information would not). CI
widths are in the parameter's own units (E in nats).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import replace as dc_replace

import numpy as np
from scipy.stats import norm

from loopscale.design.candidates import Candidates
from loopscale.design.prior import Prior
from loopscale.fit.law import (
    HUBER_DELTA,
    PARAMS,
    PHI,
    Design,
    law_loss,
    objective_and_gradient,
    theta_to_coefficients,
)

Z95 = float(norm.ppf(0.975))


def log_loss_jacobian(theta: np.ndarray, n_once, n_rec, r, tokens, chunk: int = 256) -> np.ndarray:
    """J [n, 6] = ∂ log L̂ᵢ / ∂θ at θ, read off ``objective_and_gradient`` (so it is the fit's own derivative).

    With δ = ∞ and every observed log loss one below the prediction, each residual is 1 and the gradient of
    ½·Σ wᵢ·residᵢ² is Σ wᵢ·Jᵢ; a one-hot weight row per run therefore returns that run's Jᵢ.
    """
    theta = np.asarray(theta, float)
    n_once, n_rec, r, tokens = (np.asarray(v, float) for v in (n_once, n_rec, r, tokens))
    coef = theta_to_coefficients(theta)
    jac = np.empty((len(n_once), len(PARAMS)))
    for lo in range(0, len(n_once), chunk):
        sl = slice(lo, lo + chunk)
        pred = law_loss(coef, n_once[sl], n_rec[sl], r[sl], tokens[sl])
        design = dc_replace(
            Design.build(n_once[sl], n_rec[sl], r[sl], tokens[sl], pred / math.e), delta=math.inf
        )
        k = len(pred)
        _, grad = objective_and_gradient(np.repeat(theta[None, :], k, axis=0), design, np.eye(k))
        jac[sl] = grad
    return jac


def huber_moments(scale: np.ndarray, delta: float = HUBER_DELTA) -> tuple[np.ndarray, np.ndarray]:
    """For a residual ε ~ N(0, scale²): (E ψ'(ε), E ψ(ε)²) = (P(|ε| ≤ δ), E min(ε², δ²))."""
    c = delta / np.asarray(scale, float)
    inside = 2 * norm.cdf(c) - 1
    meat = scale**2 * (inside - 2 * c * norm.pdf(c)) + delta**2 * (1 - inside)
    return inside, meat


@dataclass(frozen=True)
class Information:
    """Per-run pieces of the sandwich covariance of the Huber fit under a prior (see the module docstring).

    ``held``: θ indices the fit holds at the prior's values (``design --hold``, as ``fit --fix`` would): they
    are known exactly, so the covariance is that of the free block and a held parameter's CI width is 0."""

    jac: np.ndarray  # [n, 6] ∂ log L̂ / ∂θ
    bread: np.ndarray  # [n] E ψ'(ε)
    meat: np.ndarray  # [n] E ψ(ε)²
    loss: np.ndarray  # [n] the prior's noise-free loss (nats)
    theta: np.ndarray
    held: tuple[int, ...] = ()

    @classmethod
    def build(cls, prior: Prior, cands: Candidates, held: tuple[int, ...] = ()) -> Information:
        cols = cands.columns()
        loss = prior.loss(**cols)
        bread, meat = huber_moments(prior.sigma / loss)
        return cls(log_loss_jacobian(prior.theta, **cols), bread, meat, loss, prior.theta, tuple(held))

    @property
    def free(self) -> np.ndarray:
        """Indices of the fitted (not held) parameters."""
        return np.array([i for i in range(len(PARAMS)) if i not in self.held])

    def matrices(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(H, V) of the free parameters for run weights [n] (how often each run is in the design)."""
        jac = self.jac[:, self.free]
        jw = jac * weights[:, None]
        return (jw * self.bread[:, None]).T @ jac, (jw * self.meat[:, None]).T @ jac

    def sandwich(self, weights: np.ndarray, meat_weights: np.ndarray | None = None) -> np.ndarray:
        """H⁻¹·V·H⁻¹ [6, 6] (held rows and columns 0), V from ``meat_weights`` (default ``weights``);
        infinite when the design cannot identify the free parameters."""
        h, v = self.matrices(weights)
        if meat_weights is not None:
            _, v = self.matrices(meat_weights)
        out = np.zeros((len(PARAMS), len(PARAMS)))
        if np.linalg.cond(h) > 1e13:
            return np.full_like(out, np.inf)
        h_inv = np.linalg.inv(h)
        out[np.ix_(self.free, self.free)] = h_inv @ v @ h_inv
        return out

    def covariance(self, weights: np.ndarray) -> np.ndarray:
        """Asymptotic covariance of θ̂ [6, 6]; infinite when the design cannot identify θ."""
        return self.sandwich(weights)

    def phi_variance(self, weights: np.ndarray) -> float:
        return float(self.covariance(weights)[PHI, PHI])

    def ci_widths(self, weights: np.ndarray) -> dict[str, float]:
        """Predicted 95% CI widths 2·1.96·SE of φ, α, β and E (E by the delta method, nats)."""
        cov = self.covariance(weights)
        se = np.sqrt(np.diag(cov))
        se_e = math.exp(self.theta[2]) * se[2]
        return {
            "phi": 2 * Z95 * float(se[PHI]),
            "alpha": 2 * Z95 * float(se[3]),
            "beta": 2 * Z95 * float(se[4]),
            "E": 2 * Z95 * float(se_e),
        }
