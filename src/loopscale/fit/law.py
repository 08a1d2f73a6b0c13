"""The joint iso-depth law and the Hoffmann-style objective (method §8.1–8.3), vectorised over fits.

    L̂ = E + A·N_eff^(−α) + B·D^(−β),   N_eff = N_once + r^φ·N_rec     (losses in nats, D in tokens)

Parameters live in log space as θ = (a, b, e, α, β, φ) with A = eᵃ, B = eᵇ, E = eᵉ. A one-parameter
extension of the law (``EXTENSIONS``: φ trending with compute or size, or a loop-dependent floor) appends a
seventh parameter ``ext`` to θ; its per-run covariate rides on the ``Design``. The objective is the
**summed** Huber loss (δ = 1e-3) of log L̂ − log L over runs, optionally weighted by integer run counts
(a bootstrap resample is a weight vector). Every function here takes a batch of K parameter vectors at once
(restarts, bootstrap resamples); the objective itself runs compiled (``fit.kernel``).

The plain Chinchilla law is the same objective with N_once = N, N_rec = 0 and φ fixed (it then cancels).
A design with ``delta = inf`` turns the objective into least squares, ½·Σ(log L̂ − log L)² (the Gaussian
profile likelihood of ``fit.profile`` uses it).
"""

from __future__ import annotations

import functools
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


EXT = len(PARAMS)  # index of the extension parameter in a 7-column θ


@dataclass(frozen=True)
class Extension:
    """One-parameter extension of the paper's law: θ gains ``ext``, which acts through a per-run covariate z.

    ``target`` "phi": φ_i = φ + ext·z_i (φ is then φ at z = 0, the table's centre); "E": E_i = E·2^(ext·z_i)
    with z = log2 r (a multiplicative loop-dependent floor, positive for every ext; ext > 0: more loops, a
    higher floor). ``bounds``: the box for ext.
    """

    name: str
    label: str  # how reports name ext
    covariate: str  # what z is, in words
    target: str  # "phi" or "E"
    bounds: tuple[float, float]


EXTENSIONS = {
    "phi-trend-c": Extension(
        "phi-trend-c",
        "phi_1 per decade of C",
        "log10(C / C_ref), C_ref the geometric mean budget",
        "phi",
        (-3.0, 3.0),
    ),
    "phi-trend-n": Extension(
        "phi-trend-n",
        "phi_1 per decade of N_unrolled",
        "log10(N_u / N_ref), N_u = N_once + r·N_rec (the non-looped twin's size at the same width), "
        "N_ref the geometric mean",
        "phi",
        (-3.0, 3.0),
    ),
    "e-per-r": Extension(
        "e-per-r",
        "kappa (E_r = E·r^kappa)",
        "log2 r",
        "E",
        (-1.0, 1.0),
    ),
}
#: The forms ``loopscale fit --form`` accepts: the paper's law and its one-parameter extensions.
FORMS = ("paper", *EXTENSIONS)


def extension_bounds(extension: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The fit box (lower, upper) for θ of the paper's law (6) or of an extension (7 parameters)."""
    if extension is None:
        return LOWER, UPPER
    lo, hi = EXTENSIONS[extension].bounds
    return np.append(LOWER, lo), np.append(UPPER, hi)


@dataclass(frozen=True)
class Design:
    """The runs as the objective sees them: per-run sizes (parameters), tokens and log losses (nats)."""

    n_once: np.ndarray  # parameters applied once per token
    n_rec: np.ndarray  # parameters applied r times per token (0 for a plain model)
    log_r: np.ndarray  # log of the loop count
    log_tokens: np.ndarray  # log D
    log_loss: np.ndarray  # log of the final validation loss in nats
    delta: float = HUBER_DELTA  # Huber δ of the objective; inf = least squares
    # Extra parameters θ[6 + j] (an extension of the law, or a Δφ of ``pairs.compare``): covariate rows
    # ext_z[j] (per run) and what each acts on, ext_target[j] ∈ {"phi", "E"}.
    ext_z: np.ndarray | None = None  # [m, n]
    ext_target: tuple[str, ...] = ()

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

    @functools.cached_property
    def runs(self) -> np.ndarray:
        """[4, n] rows N_once, N_rec, log r, log D: the compiled kernel's view of the runs."""
        return np.ascontiguousarray(np.stack([self.n_once, self.n_rec, self.log_r, self.log_tokens]))

    @functools.cached_property
    def _extra_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(covariates [m, n], acts-on-E flags [m]) of the design's m extra-parameter rows."""
        m = len(self.ext_target)
        z = np.zeros((0, len(self))) if m == 0 else np.asarray(self.ext_z, dtype=float)[:m]
        return np.ascontiguousarray(z), np.array([t == "E" for t in self.ext_target], dtype=np.int64)

    def kernel_args(
        self, k: int, n_params: int, weights: np.ndarray | None = None, log_loss: np.ndarray | None = None
    ) -> tuple:
        """(runs, targets, weights, δ, ext_z, ext_is_e) as ``fit.kernel`` takes them, for k θ rows of
        n_params columns: targets and weights as [1, n] (shared) or [k, n]; ext_z [m, n] and ext_is_e [m]
        for the m = n_params − 6 extra columns (a column past the design's rows has covariate 0: it moves
        nothing and its gradient is 0)."""
        rows = []
        for name, values in (("log_loss", self.log_loss if log_loss is None else log_loss),
                             ("weights", np.ones(len(self)) if weights is None else weights)):  # fmt: skip
            values = np.ascontiguousarray(np.atleast_2d(values), dtype=float)
            if values.shape[1] != len(self) or values.shape[0] not in (1, k):
                expected = f"[{len(self)}] or [{k}, {len(self)}]"
                raise ValueError(f"{name} has shape {values.shape}; expected {expected}")
            rows.append(values)
        z, on_e = self._extra_rows
        m = n_params - EXT
        if m > len(on_e):  # pad: the columns past the design's rows act on nothing
            z = np.concatenate([z, np.zeros((m - len(on_e), len(self)))])
            on_e = np.concatenate([on_e, np.zeros(m - len(on_e), dtype=np.int64)])
        return self.runs, rows[0], rows[1], float(self.delta), z[:m], on_e[:m]


def huber(x: np.ndarray, delta: float = HUBER_DELTA) -> np.ndarray:
    """Huber_δ(x) = x²/2 for |x| ≤ δ, δ·(|x| − δ/2) otherwise."""
    ax = np.abs(x)
    return np.where(ax <= delta, 0.5 * x * x, delta * (ax - 0.5 * delta))


def _terms(theta: np.ndarray, design: Design):
    """The law's three terms A·N_eff^(−α), B·D^(−β), E for θ [K, P] on the design's runs → 3 × [K, n]."""
    a, b, e, alpha, beta, phi = theta[:, :6].T
    extras = list(enumerate(design.ext_target[: theta.shape[1] - EXT], start=EXT))
    phi_row = phi[:, None]
    log_e = e[:, None]
    for col, target in extras:
        z = design.ext_z[col - EXT]
        if target == "phi":
            phi_row = phi_row + np.multiply.outer(theta[:, col], z)
        else:  # E·2^(θ·z): with z = log2 r, E·r^κ
            log_e = log_e + np.multiply.outer(theta[:, col], z * math.log(2))
    r_phi = np.exp(phi_row * design.log_r)
    n_eff = design.n_once + r_phi * design.n_rec
    log_n = np.log(n_eff)
    term_n = np.exp(a[:, None] - alpha[:, None] * log_n)
    term_d = np.exp(b[:, None] - np.multiply.outer(beta, design.log_tokens))
    return term_n, term_d, np.exp(log_e)


def log_prediction(theta: np.ndarray, design: Design) -> np.ndarray:
    """log L̂ (log nats) of the design's runs for θ [K, P] (or one θ [P]) → [K, n] (or [n])."""
    theta = np.asarray(theta, dtype=float)
    term_n, term_d, term_e = _terms(np.atleast_2d(theta), design)
    out = np.log(term_n + term_d + term_e)
    return out[0] if theta.ndim == 1 else out


def objective_and_gradient(
    theta: np.ndarray,
    design: Design,
    weights: np.ndarray | None = None,
    log_loss: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Summed Huber objective and its analytic gradient for θ [K, P] → (f [K], ∂f/∂θ [K, P]).

    f = Σᵢ wᵢ·Huber_δ(log L̂ᵢ − log Lᵢ), and with slopeᵢ = wᵢ·clip(residualᵢ, ±δ)/L̂ᵢ and the law's terms
    Tₙ = A·N_eff^(−α), T_D = B·D^(−β), T_E = E: ∂f/∂a = Σ slope·Tₙ, ∂f/∂b = Σ slope·T_D, ∂f/∂e = Σ slope·T_E,
    ∂f/∂α = −Σ slope·Tₙ·log N_eff, ∂f/∂β = −Σ slope·T_D·log D, ∂f/∂φ = −α·Σ slope·Tₙ·r^φ·N_rec·log r / N_eff.

    ``weights`` is None (each run once), [n] (shared) or [K, n] (one weight vector per parameter vector);
    ``log_loss`` overrides the design's targets with [n] or [K, n] (one simulated table per parameter vector).
    Columns past the sixth are extra parameters acting through ``design.ext_z`` / ``design.ext_target``:
    φ_i = φ + Σ_j θ_j·z_ji over the "phi" rows, E_i = E·2^(Σ_j θ_j·z_ji) over the "E" rows (an extension of
    the law, ``Extension``, is one such row; ``pairs.compare`` adds Δφ rows).
    The three terms are summed directly rather than with a max-shifted log-sum-exp: inside the box
    E ≥ e⁻³ keeps the sum away from 0, and a, b ≤ 35 keep each term far below overflow.
    Computed by ``fit.kernel.objective_rows`` (compiled); ``tests/fit/test_law.py`` checks it against a
    plain loop over runs and ``tests/fit/test_kernel.py`` against NumPy, gradients against finite
    differences.
    """
    from loopscale.fit import kernel  # Numba loads SciPy: not at import (the CLI checks its inputs first)

    theta = np.ascontiguousarray(np.atleast_2d(theta), dtype=float)
    f, grad = np.empty(len(theta)), np.empty_like(theta)
    kernel.objective_rows(theta, *design.kernel_args(len(theta), theta.shape[1], weights, log_loss), f, grad)
    return f, grad


def at_bound(
    theta: np.ndarray, free: np.ndarray | None = None, tol: float = BOUND_TOL, extension: str | None = None
) -> np.ndarray:
    """Which parameters sit within ``tol`` of their box edge: θ [..., P] → bool [..., P] (``free`` only)."""
    theta = np.asarray(theta, dtype=float)
    lower, upper = extension_bounds(extension)
    hit = (theta - lower <= tol) | (upper - theta <= tol)
    return hit if free is None else hit & np.asarray(free, dtype=bool)


def bound_names(theta: np.ndarray, free: np.ndarray | None = None, extension: str | None = None) -> list[str]:
    """Labels (``PARAM_LABELS``, then "ext") of the free parameters of one θ at a bound of the box."""
    hits = at_bound(theta, free, extension=extension)
    return [name for name, hit in zip((*PARAM_LABELS, "ext"), hits) if hit]


def theta_to_coefficients(theta: np.ndarray) -> dict[str, float]:
    """θ → {E, A, B, alpha, beta, phi, a, b, e[, ext]} (A, B, E = exp of a, b, e; ext for a 7-column θ)."""
    a, b, e, alpha, beta, phi = (float(v) for v in theta[:6])
    coef = {
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
    if len(theta) > len(PARAMS):
        coef["ext"] = float(theta[EXT])
    return coef


def extension_covariate(extension: str, n_once, n_rec, r, budget, reference: float | None) -> np.ndarray:
    """The covariate z of ``extension`` per run (see ``EXTENSIONS``); ``reference`` is the centre of the
    logged quantity (log10 C_ref or log10 N_ref; unused for "e-per-r"). NaN budgets give NaN for
    phi-trend-c."""
    r = np.asarray(r, dtype=float)
    if extension == "e-per-r":
        return np.log2(r)
    if extension == "phi-trend-c":
        return np.log10(np.asarray(budget, dtype=float)) - reference
    if extension == "phi-trend-n":
        unrolled = np.asarray(n_once, dtype=float) + r * np.asarray(n_rec, dtype=float)
        return np.log10(unrolled) - reference
    raise ValueError(f"unknown extension {extension!r}")


def extension_reference(extension: str, n_once, n_rec, r, budget) -> float | None:
    """The centre of an extension's covariate on a table: the mean of log10 C or log10 N_unrolled."""
    if extension == "phi-trend-c":
        return float(np.mean(np.log10(np.asarray(budget, dtype=float))))
    if extension == "phi-trend-n":
        n_once, n_rec, r = (np.asarray(v, dtype=float) for v in (n_once, n_rec, r))
        return float(np.mean(np.log10(n_once + r * n_rec)))
    return None


def law_loss(
    coef: dict[str, float], n_once, n_rec, r, tokens, extension: str | None = None, ext_z=None
) -> np.ndarray:
    """L̂ in nats from coefficients {E, A, B, alpha, beta[, phi][, ext]}.

    Without phi it is the plain Chinchilla law with N = N_once + N_rec (unique parameters). With an
    ``extension``, ``ext_z`` is its covariate per point (``extension_covariate``).
    """
    n_once, n_rec, r, tokens = (np.asarray(v, dtype=float) for v in (n_once, n_rec, r, tokens))
    phi = coef.get("phi")
    floor = coef["E"]
    if extension is not None:
        target = EXTENSIONS[extension].target
        z = np.asarray(ext_z, dtype=float)
        if target == "phi":
            phi = phi + coef["ext"] * z
        else:
            floor = coef["E"] * np.exp2(coef["ext"] * z)
    n_eff = n_once + (n_rec if phi is None else r**phi * n_rec)
    return floor + coef["A"] * n_eff ** (-coef["alpha"]) + coef["B"] * tokens ** (-coef["beta"])
