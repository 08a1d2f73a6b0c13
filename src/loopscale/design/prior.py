"""The prior a design is planned under: the law θ = (a, b, e, α, β, φ) (the parameterisation of
``fit.law``) and the noise σ of one run's final validation loss (nats, additive Gaussian), from the paper's
published fit, a ``loopscale fit --json`` document or a pilot results table fitted here."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loopscale.errors import UserError
from loopscale.fit.fitter import fit_law
from loopscale.fit.law import PARAMS, PHI, law_loss, theta_to_coefficients
from loopscale.fit.table import RunTable, load_table
from loopscale.io import shown
from loopscale.paper import JOINT_FIT

DEFAULT_SIGMA = 0.01  # nats: the noise level of the paper's law fit (RMSE 0.010, method §9.2)
TABLE_SUFFIXES = (".csv", ".jsonl", ".ndjson", ".parquet")


@dataclass(frozen=True)
class Prior:
    """The law a design is planned under and the noise of one run's final loss.

    ``theta`` is (a, b, e, α, β, φ) with A = eᵃ, B = eᵇ, E = eᵉ (``fit.law``); ``sigma`` the standard
    deviation of a run's final validation loss around the law, in nats (additive Gaussian).
    """

    theta: np.ndarray
    sigma: float
    source: str

    @classmethod
    def from_coefficients(cls, coef: dict, sigma: float, source: str) -> Prior:
        if not (math.isfinite(sigma) and sigma > 0):
            raise UserError(f"the noise level sigma must be a positive number of nats, got {sigma!r}")
        try:
            theta = [math.log(coef["A"]), math.log(coef["B"]), math.log(coef["E"])]
            theta += [float(coef["alpha"]), float(coef["beta"]), float(coef["phi"])]
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{source}: needs coefficients A, B, E > 0 and alpha, beta, phi") from None
        return cls(theta=np.array(theta), sigma=float(sigma), source=source)

    @property
    def phi(self) -> float:
        return float(self.theta[PHI])

    @property
    def coefficients(self) -> dict[str, float]:
        """{E, A, B, alpha, beta, phi, a, b, e}."""
        return theta_to_coefficients(self.theta)

    def loss(self, n_once, n_rec, r, tokens) -> np.ndarray:
        """The prior's noise-free final loss (nats)."""
        return law_loss(self.coefficients, n_once, n_rec, r, tokens)

    def to_dict(self) -> dict:
        coef = {k: v for k, v in self.coefficients.items() if k in ("E", "A", "B", "alpha", "beta", "phi")}
        return {**coef, "sigma": self.sigma, "source": self.source}


def load_prior(source: str, sigma: float | None = None, *, restarts: int = 200, seed: int = 0) -> Prior:
    """``paper`` (the published joint fit, method §9.2), a ``loopscale fit --json`` document, or a pilot
    results table (.csv/.jsonl/.parquet) fitted here. σ: given, else the fit's residual RMSE scaled by
    √(n/(n − 6)) for the six fitted parameters, else (paper) 0.01 nats."""
    if source == "paper":
        return Prior.from_coefficients(JOINT_FIT, DEFAULT_SIGMA if sigma is None else sigma, "paper (§9.2)")
    path = Path(source)
    if not path.is_file():
        raise UserError(
            f"prior {shown(source)!r}: not 'paper' and no such file (give a fit.json or a results table)"
        )
    if path.suffix.lower() == ".json":
        try:
            doc = json.loads(path.read_text())
            coef, n = doc["fit"], int(doc["fit"]["n_runs"])
            rmse = doc["residuals"]["overall"]["rmse"]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, UnicodeDecodeError):
            raise UserError(
                f"{path}: not a `loopscale fit --json` document (needs fit and residuals)"
            ) from None
        if coef.get("form") != "joint":
            raise UserError(
                f"{path}: the prior must be a joint fit with phi free, got form {coef.get('form')!r}"
            )
        noise = sigma if sigma is not None else rmse * math.sqrt(n / max(n - len(PARAMS), 1))
        return Prior.from_coefficients(coef, noise, f"fit document {path}")
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise UserError(
            f"prior {path}: use 'paper', a fit .json or a results table ({', '.join(TABLE_SUFFIXES)})"
        )
    return prior_from_table(load_table(path), sigma, f"joint fit of the pilot table {path}", restarts, seed)


def prior_from_table(
    table: RunTable, sigma: float | None, source: str, restarts: int = 200, seed: int = 0
) -> Prior:
    """Fit the joint law to ``table`` (``fit_law``); σ given, else the residual RMSE with n − 6 degrees of
    freedom."""
    fit = fit_law(table, restarts=restarts, seed=seed)
    resid = table.loss - fit.predict_table(table)
    noise = (
        sigma if sigma is not None else float(np.sqrt(np.sum(resid**2) / max(len(table) - len(PARAMS), 1)))
    )
    return Prior.from_coefficients(fit.coefficients, noise, source)
