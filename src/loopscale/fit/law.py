"""The joint iso-depth law and the Hoffmann-style objective (method §8.1–8.3), vectorised over fits.

    L̂ = E + A·N_eff^(−α) + B·D^(−β),   N_eff = N_once + r^φ·N_rec     (losses in nats, D in tokens)

Parameters live in log space as θ = (a, b, e, α, β, φ) with A = eᵃ, B = eᵇ, E = eᵉ. The objective is the
**summed** Huber loss (δ = 1e-3) of log L̂ − log L over runs, optionally weighted by integer run counts
(a bootstrap resample is a weight vector). Every function here takes a batch of K parameter vectors at once
so that restarts and bootstrap resamples are evaluated in one NumPy pass.

The plain Chinchilla law is the same objective with N_once = N, N_rec = 0 and φ fixed (it then cancels).
A design with ``delta = inf`` turns the objective into least squares, ½·Σ(log L̂ − log L)² (the Gaussian
profile likelihood of ``fit.profile`` uses it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

PARAMS = ("a", "b", "e", "alpha", "beta", "phi")
#: The fit box of method §8.3, in the order of ``PARAMS``.
LOWER = np.array([-5.0, -5.0, -3.0, 0.0, 0.0, -3.0])
UPPER = np.array([35.0, 35.0, 2.0, 2.5, 2.5, 3.0])
HUBER_DELTA = 1e-3
PHI = PARAMS.index("phi")
#: How reports name the parameters of θ: A, B, E for a, b, e (a bound on e is a bound on E = eᵉ).
PARAM_LABELS = ("A", "B", "E", "alpha", "beta", "phi")
#: A parameter within this distance of its box edge (in θ, i.e. log A, log B, log E) is "at a bound".
BOUND_TOL = 1e-6


@dataclass(frozen=True)
class Design:
    """The runs as the objective sees them: per-run sizes (parameters), tokens and log losses (nats)."""

    n_once: np.ndarray  # parameters applied once per token
    n_rec: np.ndarray  # parameters applied r times per token (0 for a plain model)
    log_r: np.ndarray  # log of the loop count
    log_tokens: np.ndarray  # log D
    log_loss: np.ndarray  # log of the final validation loss in nats
    delta: float = HUBER_DELTA  # Huber δ of the objective; inf = least squares

    @classmethod
    def build(cls, n_once, n_rec, r, tokens, loss) -> Design:
        f = np.asarray
        return cls(
            n_once=f(n_once, dtype=float),
            n_rec=f(n_rec, dtype=float),
            log_r=np.log(f(r, dtype=float)),
            log_tokens=np.log(f(tokens, dtype=float)),
            log_loss=np.log(f(loss, dtype=float)),
        )

    def __len__(self) -> int:
        return len(self.log_loss)


def huber(x: np.ndarray, delta: float = HUBER_DELTA) -> np.ndarray:
    """Huber_δ(x) = x²/2 for |x| ≤ δ, δ·(|x| − δ/2) otherwise."""
    ax = np.abs(x)
    return np.where(ax <= delta, 0.5 * x * x, delta * (ax - 0.5 * delta))


def objective_and_gradient(
    theta: np.ndarray, design: Design, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Summed Huber objective and its analytic gradient for θ [K, 6] → (f [K], ∂f/∂θ [K, 6]).

    ``weights`` is None (each run once), [n] (shared) or [K, n] (one weight vector per parameter vector).
    The three terms are summed directly rather than with a max-shifted log-sum-exp: inside the box
    E ≥ e⁻³ keeps the sum away from 0, and a, b ≤ 35 keep each term far below overflow.
    """
    theta = np.atleast_2d(theta)
    a, b, e, alpha, beta, phi = theta.T
    r_phi = np.exp(np.multiply.outer(phi, design.log_r))
    n_eff = design.n_once + r_phi * design.n_rec
    log_n = np.log(n_eff)
    term_n = np.exp(a[:, None] - alpha[:, None] * log_n)
    term_d = np.exp(b[:, None] - np.multiply.outer(beta, design.log_tokens))
    term_e = np.exp(e)
    total = term_n + term_d + term_e[:, None]
    resid = np.log(total) - design.log_loss
    if math.isinf(design.delta):  # least squares
        loss = 0.5 * resid * resid
        slope = resid / total
    else:
        loss = huber(resid, design.delta)
        slope = np.clip(resid, -design.delta, design.delta) / total  # ∂Huber/∂L̂
    if weights is not None:
        loss = loss * weights
        slope = slope * weights
    f = loss.sum(axis=1)
    grad = np.empty_like(theta)
    u_n = slope * term_n
    u_d = slope * term_d
    grad[:, 0] = u_n.sum(axis=1)
    grad[:, 1] = u_d.sum(axis=1)
    grad[:, 2] = slope.sum(axis=1) * term_e
    grad[:, 3] = -(u_n * log_n).sum(axis=1)
    grad[:, 4] = -(u_d @ design.log_tokens)
    dlogn_dphi = (r_phi * design.n_rec * design.log_r) / n_eff
    grad[:, 5] = -alpha * (u_n * dlogn_dphi).sum(axis=1)
    return f, grad


def at_bound(theta: np.ndarray, free: np.ndarray | None = None, tol: float = BOUND_TOL) -> np.ndarray:
    """Which parameters sit within ``tol`` of their box edge: θ [..., 6] → bool [..., 6] (``free`` only)."""
    theta = np.asarray(theta, dtype=float)
    hit = (theta - LOWER <= tol) | (UPPER - theta <= tol)
    return hit if free is None else hit & np.asarray(free, dtype=bool)


def bound_names(theta: np.ndarray, free: np.ndarray | None = None) -> list[str]:
    """Labels (``PARAM_LABELS``) of the free parameters of one θ [6] that sit at a bound of the box."""
    return [name for name, hit in zip(PARAM_LABELS, at_bound(theta, free)) if hit]


def theta_to_coefficients(theta: np.ndarray) -> dict[str, float]:
    """θ → {E, A, B, alpha, beta, phi, a, b, e} (A, B, E = exp of a, b, e)."""
    a, b, e, alpha, beta, phi = (float(v) for v in theta)
    return {
        "E": math.exp(e),
        "A": math.exp(a),
        "B": math.exp(b),
        "alpha": alpha,
        "beta": beta,
        "phi": phi,
        "a": a,
        "b": b,
        "e": e,
    }


def law_loss(coef: dict[str, float], n_once, n_rec, r, tokens) -> np.ndarray:
    """L̂ in nats from coefficients {E, A, B, alpha, beta[, phi]}.

    Without phi it is the plain Chinchilla law with N = N_once + N_rec (unique parameters).
    """
    n_once, n_rec, r, tokens = (np.asarray(v, dtype=float) for v in (n_once, n_rec, r, tokens))
    phi = coef.get("phi")
    n_eff = n_once + (n_rec if phi is None else r**phi * n_rec)
    return coef["E"] + coef["A"] * n_eff ** (-coef["alpha"]) + coef["B"] * tokens ** (-coef["beta"])
