"""Best-of-N-random-starts minimisation of the summed Huber objective (method §8.3, §8.8).

The protocol is the paper's: start points drawn uniformly inside the box, a quasi-Newton descent from each,
the best end point kept, converged to tight tolerances. Two stages make it fast without changing the answer:

1. **Batched projected BFGS** (compiled: ``fit.kernel``). All start points (of one fit, or of many
   bootstrap resamples at once) are descended in one call, in parallel threads: each start keeps its own
   6×6 inverse-Hessian approximation, bound constraints are handled by projection (variables at a bound
   with an outward gradient are frozen for that step), and a backtracking Armijo line search runs on the
   projected path. A start stops when its relative decrease stays below ``BATCH_FTOL`` for two steps, its
   projected gradient vanishes, or its line search fails; in a refit, also when it is still far above the
   refit's best after a few steps (``STAGE1_PRUNE_REL``).
2. **Polish.** The best few distinct end points of each fit are refined with SciPy's L-BFGS-B at
   ftol = 1e-15, gtol = 1e-12 (the tight tolerances method §8.8 calls for; the defaults stop early because the
   objective is O(1e-5)). The best polished point is the fit; its projected-gradient norm is reported.

``benchmarks/fit_speed.py`` and ``tests/fit/test_fitter.py`` check that the optimum equals the one a plain
loop of SciPy L-BFGS-B runs from the same start points reaches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from loopscale.errors import UserError
from loopscale.fit import kernel
from loopscale.fit.law import (
    EXTENSIONS,
    LOWER,
    PARAM_LABELS,
    PARAMS,
    PHI,
    UPPER,
    Design,
    bound_names,
    extension_bounds,
    extension_covariate,
    extension_reference,
    law_loss,
    objective_and_gradient,
    theta_to_coefficients,
)
from loopscale.fit.priors import MIN_RUNS, check_held, check_identifiable  # noqa: F401 - re-exported
from loopscale.fit.table import RunTable
from loopscale.fit.varpro import SEEDS_PER_REFIT, seed_starts

BATCH_FTOL = 1e-10  # relative decrease per step below which a batched start counts as converged
BATCH_MAX_ITER = 300  # first stage; unfinished starts are still ranked and may be refined
POLISH_FTOL = 1e-15
POLISH_GTOL = 1e-12
POLISH_MAX_ITER = 10_000  # method §8.3: at most 10,000 iterations per restart
PRUNE_REL = 1e-3  # second stage: drop a candidate this far (relative) above the best of its fit
# First stage of a refit (``fit_many(prune=...)``): after STAGE1_PRUNE_AFTER steps, a start whose objective
# is above (1 + STAGE1_PRUNE_REL) × the best of its fit stops descending (benchmarks/RESULTS.md: 2× at 10
# steps kept every checked refit on the cold optimum; 1.3× lost some). STAGE1_FTOL: the first stage's ftol.
STAGE1_PRUNE_REL = 1.0
STAGE1_PRUNE_AFTER = 10
STAGE1_FTOL = BATCH_FTOL
CHUNK_ELEMENTS = 2_000_000  # starts × runs per first-stage call (its per-start weight rows: ≤ 16 MB each)


@contextlib.contextmanager
def single_blas_thread() -> Iterator[None]:
    """Run the fitter with one BLAS thread.

    Every BLAS call here is on 6-vectors or 6×6 matrices. With a multi-threaded OpenBLAS on busy cores
    (2 cores shared with other jobs), SciPy's L-BFGS-B spent ~3 ms per iteration waking BLAS threads:
    one 9-run Chinchilla fit took 23.5 s instead of 0.4 s (SciPy 1.17, NumPy 2.4).
    """
    with threadpool_limits(limits=1, user_api="blas"):
        yield


@dataclass(frozen=True)
class Box:
    """Which parameters are free; fixed ones sit at ``fixed_values``; the box is [lower, upper].

    Six parameters for the paper's law, seven for a one-parameter extension (``law.EXTENSIONS``).
    """

    free: np.ndarray  # bool [P]
    fixed_values: np.ndarray  # [P], used where ~free
    lower: np.ndarray = dataclasses.field(default_factory=LOWER.copy)
    upper: np.ndarray = dataclasses.field(default_factory=UPPER.copy)

    @classmethod
    def for_form(
        cls,
        fix_phi: float | None,
        plain: bool = False,
        extension: str | None = None,
        held: dict[str, float] | None = None,
    ) -> Box:
        """The box of a form; ``held`` {θ name (``law.PARAMS``, not phi): θ value} holds more parameters."""
        lower, upper = extension_bounds(extension)
        free = np.ones(len(lower), dtype=bool)
        values = np.zeros(len(lower))
        if plain or fix_phi is not None:
            free[PHI] = False
            values[PHI] = 0.0 if fix_phi is None else fix_phi
        for name, value in (held or {}).items():
            free[PARAMS.index(name)], values[PARAMS.index(name)] = False, value
        return cls(free=free, fixed_values=values, lower=lower, upper=upper)

    def fixing(self, index: int, value: float) -> Box:
        """The same box with parameter ``index`` held at ``value``."""
        free, values = self.free.copy(), self.fixed_values.copy()
        free[index], values[index] = False, value
        return dataclasses.replace(self, free=free, fixed_values=values)

    def starts(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` start points uniform in the box (fixed parameters at their values) → [count, P]."""
        x = self.lower + (self.upper - self.lower) * rng.random((count, len(self.lower)))
        x[:, ~self.free] = self.fixed_values[~self.free]
        return x


def held_fixed(
    x: np.ndarray, grad: np.ndarray, free: np.ndarray, lower: np.ndarray = LOWER, upper: np.ndarray = UPPER
) -> np.ndarray:
    """Parameters that cannot move: fixed ones and those at a bound with an outward descent direction."""
    return ~free | ((x <= lower) & (grad > 0)) | ((x >= upper) & (grad < 0))


def projected_gradient(
    x: np.ndarray, grad: np.ndarray, free: np.ndarray, lower: np.ndarray = LOWER, upper: np.ndarray = UPPER
) -> np.ndarray:
    """Gradient with the parameters ``held_fixed`` set to 0."""
    return np.where(held_fixed(x, grad, free, lower, upper), 0.0, grad)


def minimise_batch(
    design: Design,
    x0: np.ndarray,
    free: np.ndarray,
    weights: np.ndarray | None = None,
    max_iter: int = BATCH_MAX_ITER,
    ftol: float = BATCH_FTOL,
    f_scale: float = 0.0,
    gtol: float = 0.0,
    groups: np.ndarray | None = None,
    lower: np.ndarray = LOWER,
    upper: np.ndarray = UPPER,
    targets: np.ndarray | None = None,
    prune_rel: float = PRUNE_REL,
    prune_after: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Run projected BFGS from every row of ``x0`` [K, P] at once → (end points [K, P], objectives [K]).

    Each start keeps its own P×P inverse-Hessian approximation; bound constraints are handled by
    projection (a parameter at a bound with an outward gradient is frozen for that step); a backtracking
    Armijo line search (factor 0.2, at most 40 tries) runs on the projected path; a start whose first step
    or whose BFGS direction is not a descent direction takes a steepest-descent step scaled to move at
    most one unit in any parameter.

    ``weights``: None, [n] shared, or [K, n] per start (bootstrap resamples); ``targets``: None or [K, n]
    log losses per start (simulated tables); [lower, upper]: the box. A start stops when its decrease
    is ≤ ``ftol``·max(|f|, ``f_scale``) on two consecutive steps (f_scale = 1 is L-BFGS-B's rule), the ∞-norm
    of its projected gradient is ≤ ``gtol``, its line search finds no strict decrease, or after ``max_iter``
    steps. With ``groups`` [K] (which fit each start belongs to), a start is also dropped once its objective
    exceeds the lowest one of its group by more than ``prune_rel`` (relative), from step ``prune_after``
    on: it sits in a worse basin. The loop is compiled (``fit.kernel.minimise``).
    """
    x = np.array(x0, dtype=float, order="C")
    k, p = x.shape
    group_ids = np.zeros(0, dtype=np.int64) if groups is None else np.asarray(groups, dtype=np.int64)
    f = kernel.minimise(
        x,
        np.asarray(free, dtype=np.bool_),
        np.asarray(lower, dtype=float),
        np.asarray(upper, dtype=float),
        *design.kernel_args(k, p, weights, targets),
        int(max_iter),
        float(ftol),
        float(f_scale),
        float(gtol),
        group_ids,
        float(prune_rel),
        int(prune_after),
    )
    return x, f


def polish(
    design: Design,
    x0: np.ndarray,
    free: np.ndarray,
    weights: np.ndarray | None = None,
    lower: np.ndarray = LOWER,
    upper: np.ndarray = UPPER,
    target: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """Refine one point with SciPy L-BFGS-B at ftol = 1e-15, gtol = 1e-12 → (θ [P], objective)."""
    base = x0.copy()
    w = None if weights is None else weights[None, :]
    t = None if target is None else target[None, :]

    def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
        base[free] = z
        f, g = objective_and_gradient(base[None, :], design, w, t)
        return float(f[0]), g[0, free]

    with single_blas_thread():
        res = _lbfgsb(fun, x0[free], lower[free], upper[free])
    theta = x0.copy()
    theta[free] = res.x
    f, _ = objective_and_gradient(theta[None, :], design, w, t)
    return theta, float(f[0])


def _lbfgsb(fun, z0: np.ndarray, lower: np.ndarray, upper: np.ndarray):
    return minimize(
        fun,
        z0,
        jac=True,
        method="L-BFGS-B",
        bounds=list(zip(lower, upper)),
        options={
            "ftol": POLISH_FTOL,
            "gtol": POLISH_GTOL,
            "maxiter": POLISH_MAX_ITER,
            "maxfun": 4 * POLISH_MAX_ITER,
        },
    )


@dataclass(frozen=True)
class Optimum:
    """The best point of one fit and how it was reached."""

    theta: np.ndarray  # [6] in PARAMS order
    objective: float  # summed Huber loss at theta
    grad_norm: float  # ∞-norm of the projected gradient at theta
    starts_at_optimum: int  # start points whose first-stage end point is within 1e-6 (relative) of it


@single_blas_thread()
def fit_many(
    design: Design,
    box: Box,
    weights: np.ndarray | None,
    restarts: int,
    rng: np.random.Generator,
    extra_starts: np.ndarray | None = None,
    polish_top: int = 3,
    scipy_polish: bool = True,
    targets: np.ndarray | None = None,
    fixed_rows: np.ndarray | None = None,
    seeded: int = 0,
    prune: bool | None = None,
) -> list[Optimum]:
    """Fit one weight vector per row of ``weights`` [R, n] (None: one unweighted fit) → R optima.

    ``fixed_rows`` [R, P]: per-fit values of the parameters the box holds (its non-free columns; the other
    columns are ignored), e.g. a fresh prior draw per bootstrap refit; None: ``box.fixed_values``.

    ``targets`` [R, n]: one table of log losses per fit (simulated tables on the same runs) instead of
    the design's own; with ``weights`` None each of them is fitted unweighted.

    Each fit starts from ``restarts`` fresh uniform start points, ``extra_starts`` [m, P] (e.g. the
    full-data optimum as a warm start for bootstrap refits) and ``seeded`` variable-projection start points
    of its own weights and targets (``fit.varpro``; columns it does not grid come from the first extra
    start, else the box's values). Stage 1 descends from all of them in batches; the best ``polish_top``
    distinct end points of each fit are then refined together by the same batched BFGS at a relative
    tolerance of 1e-15, and (``scipy_polish``) the best one again by SciPy L-BFGS-B at ftol = 1e-15,
    gtol = 1e-12, keeping whichever is lower.

    ``prune`` (default: only when ``extra_starts`` gives a warm start, i.e. a refit) stops a first-stage
    start that is still above (1 + ``STAGE1_PRUNE_REL``) × its fit's best after ``STAGE1_PRUNE_AFTER``
    steps. A cold fit follows every start to its end, so that ``starts_at_optimum`` counts all of them.
    """
    n_targets = 1 if targets is None else len(targets)
    w_rows = (
        np.ones((n_targets, len(design))) if weights is None else np.atleast_2d(np.asarray(weights, float))
    )
    t_rows = None if targets is None else np.atleast_2d(np.asarray(targets, float))
    n_fits = w_rows.shape[0]
    extra = np.empty((0, len(box.lower))) if extra_starts is None else np.atleast_2d(extra_starts)
    per_fit = restarts + len(extra) + seeded
    if restarts < 0 or per_fit < 1:
        raise UserError(f"a fit needs at least one start point (restarts = {restarts})")
    if prune is None:
        prune = extra_starts is not None
    fits_per_chunk = max(1, CHUNK_ELEMENTS // (per_fit * len(design)))
    cand_x, cand_owner, first_values = [], [], []
    for lo in range(0, n_fits, fits_per_chunk):
        chunk = w_rows[lo : lo + fits_per_chunk]
        part_targets = None if t_rows is None else t_rows[lo : lo + fits_per_chunk]
        base = np.repeat(extra[:1] if len(extra) else box.fixed_values[None], len(chunk), axis=0)
        held = ~box.free  # the optimiser never moves a held column: its start value is the fit's
        fixed = box.fixed_values[None] if fixed_rows is None else fixed_rows[lo : lo + len(chunk)]
        base[:, held] = fixed[:, held]
        seeds = np.empty((len(chunk), 0, len(box.lower)))  # [fits, seeded, P]
        if seeded:
            seeds = seed_starts(design, box.free, base, chunk, part_targets, seeded, box.lower, box.upper)
        starts = np.concatenate(
            [np.concatenate([box.starts(rng, restarts), extra, seeds[i]]) for i in range(len(chunk))]
        )
        if fixed_rows is not None:
            starts[:, held] = np.repeat(base, per_fit, axis=0)[:, held]
        ends, values = minimise_batch(
            design,
            starts,
            box.free,
            np.repeat(chunk, per_fit, axis=0),
            lower=box.lower,
            upper=box.upper,
            targets=None if part_targets is None else np.repeat(part_targets, per_fit, axis=0),
            ftol=STAGE1_FTOL,
            groups=np.repeat(np.arange(len(chunk)), per_fit) if prune else None,
            prune_rel=STAGE1_PRUNE_REL,
            prune_after=STAGE1_PRUNE_AFTER,
        )
        for i in range(len(chunk)):
            sl = slice(i * per_fit, (i + 1) * per_fit)
            first_values.append(values[sl])
            for x in _distinct_best(ends[sl], values[sl], polish_top):
                cand_x.append(x)
                cand_owner.append(lo + i)
    owner = np.array(cand_owner)
    px, pf = minimise_batch(
        design,
        np.array(cand_x),
        box.free,
        w_rows[owner],
        max_iter=POLISH_MAX_ITER,
        ftol=POLISH_FTOL,
        f_scale=1.0,
        gtol=POLISH_GTOL,
        groups=owner,
        lower=box.lower,
        upper=box.upper,
        targets=None if t_rows is None else t_rows[owner],
    )
    results = []
    for fit in range(n_fits):
        mine = np.flatnonzero(owner == fit)
        best = mine[np.argmin(pf[mine])]
        theta, objective = px[best], float(pf[best])
        target = None if t_rows is None else t_rows[fit]
        if scipy_polish:
            s_theta, s_objective = polish(design, theta, box.free, w_rows[fit], box.lower, box.upper, target)
            if s_objective <= objective:
                theta, objective = s_theta, s_objective
        _, g = objective_and_gradient(
            theta[None, :], design, w_rows[fit][None, :], None if target is None else target[None, :]
        )
        grad_norm = float(np.abs(projected_gradient(theta, g[0], box.free, box.lower, box.upper)).max())
        at_opt = int((first_values[fit] <= objective * (1 + 1e-6) + 1e-12).sum())
        results.append(
            Optimum(theta=theta, objective=objective, grad_norm=grad_norm, starts_at_optimum=at_opt)
        )
    return results


def _distinct_best(ends: np.ndarray, values: np.ndarray, count: int) -> list[np.ndarray]:
    """The ``count`` lowest end points that differ from each other by more than 1e-6 in some parameter."""
    chosen: list[np.ndarray] = []
    for idx in np.argsort(values):
        if all(np.abs(ends[idx] - c).max() > 1e-6 for c in chosen):
            chosen.append(ends[idx])
            if len(chosen) == count:
                break
    return chosen


@dataclass(frozen=True)
class LawFit:
    """One fitted law: coefficients, the objective it reached and how well it fits (losses in nats)."""

    form: str  # "joint" (φ free), "fixed_phi" or "chinchilla" (plain law, N = N_once + N_rec)
    theta: np.ndarray  # (a, b, e, alpha, beta, phi[, ext]); phi is meaningless for "chinchilla"
    objective: float  # summed Huber loss (δ = 1e-3) of log-loss residuals
    grad_norm: float  # ∞-norm of the projected gradient at the optimum
    r2: float  # on raw losses in nats
    n_runs: int
    restarts: int
    starts_at_optimum: int
    extension: str | None = None  # a one-parameter extension of the law (law.EXTENSIONS); None: the paper's
    ext_ref: float | None = None  # centre of the extension's covariate (log10 C_ref or log10 N_ref)
    held: tuple[str, ...] = ()  # θ names (law.PARAMS, not phi) held at their value in theta (--fix, --prior)

    @property
    def law_form(self) -> str:
        """The law's form as ``--form`` names it: "paper" or the extension's name."""
        return self.extension or "paper"

    @property
    def free(self) -> np.ndarray:
        """Which parameters this form fitted (φ only for the joint form, ext for an extension, not held)."""
        free = np.ones(len(self.theta), dtype=bool)
        free[PHI] = self.form == "joint"
        free[[PARAMS.index(name) for name in self.held]] = False
        return free

    @property
    def box(self) -> Box:
        """The box this fit was made in, its held parameters (φ of a fixed form too) at their values."""
        lower, upper = extension_bounds(self.extension)
        return Box(free=self.free, fixed_values=self.theta.copy(), lower=lower, upper=upper)

    @property
    def at_bound(self) -> list[str]:
        """Fitted parameters within 1e-6 of their box edge ("E" means e = log E at −3 or 2, etc.)."""
        return bound_names(self.theta, self.free, self.extension)

    @property
    def coefficients(self) -> dict[str, float]:
        """{E, A, B, alpha, beta[, phi], a, b, e[, ext]}; phi only for the joint forms."""
        coef = theta_to_coefficients(self.theta)
        if self.form == "chinchilla":
            del coef["phi"]
        return coef

    @property
    def E(self) -> float:  # noqa: N802 - the law's name for it
        return float(np.exp(self.theta[2]))

    @property
    def A(self) -> float:  # noqa: N802
        return float(np.exp(self.theta[0]))

    @property
    def B(self) -> float:  # noqa: N802
        return float(np.exp(self.theta[1]))

    @property
    def alpha(self) -> float:
        return float(self.theta[3])

    @property
    def beta(self) -> float:
        return float(self.theta[4])

    @property
    def phi(self) -> float | None:
        """φ, or None for the plain Chinchilla law."""
        return None if self.form == "chinchilla" else float(self.theta[PHI])

    def predict(self, n_once, n_rec, r, tokens, budget=None) -> np.ndarray:
        """Predicted loss in nats for runs with these sizes (parameters), loop counts and tokens (and
        training FLOPs ``budget``, which the phi-trend-c extension needs)."""
        z = None
        if self.extension is not None:
            z = extension_covariate(self.extension, n_once, n_rec, r, budget, self.ext_ref)
        return law_loss(self.coefficients, n_once, n_rec, r, tokens, self.extension, z)

    def predict_table(self, table: RunTable) -> np.ndarray:
        return self.predict(table.n_once, table.n_rec, table.r, table.tokens, table.budget)

    def to_dict(self) -> dict[str, Any]:
        extension = {}
        if self.extension is not None:
            extension = {
                "extension": self.extension,
                "ext_label": EXTENSIONS[self.extension].label,
                "ext_ref": self.ext_ref,
            }
        return {
            "form": self.form,
            "law_form": self.law_form,
            **extension,
            **self.coefficients,
            "objective": self.objective,
            "grad_norm": self.grad_norm,
            "r2": self.r2,
            "n_runs": self.n_runs,
            "restarts": self.restarts,
            "starts_at_optimum": self.starts_at_optimum,
            "at_bound": self.at_bound,
            "held": [PARAM_LABELS[PARAMS.index(name)] for name in self.held],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LawFit:
        """The fit ``to_dict`` wrote (fit.json), for rendering it again: θ from its log-space coefficients
        (a plain Chinchilla fit's φ, which it never had, reads 0)."""
        theta = [data["a"], data["b"], data["e"], data["alpha"], data["beta"], data.get("phi", 0.0)]
        if "ext" in data:
            theta.append(data["ext"])
        return cls(
            form=data["form"],
            theta=np.array(theta, dtype=float),
            objective=data["objective"],
            grad_norm=data["grad_norm"],
            r2=data["r2"],
            n_runs=data["n_runs"],
            restarts=data["restarts"],
            starts_at_optimum=data["starts_at_optimum"],
            extension=data.get("extension"),
            ext_ref=data.get("ext_ref"),
            held=tuple(PARAMS[PARAM_LABELS.index(label)] for label in data.get("held", ())),
        )


def design_for(
    table: RunTable, plain: bool, extension: str | None = None, ext_ref: float | None = None
) -> Design:
    """The objective's view of ``table``; ``plain`` folds N_rec into N (Chinchilla law, r ignored);
    ``extension`` adds its covariate (centred at ``ext_ref``, see ``law.extension_reference``)."""
    if plain:
        return Design.build(table.n, np.zeros(len(table)), np.ones(len(table)), table.tokens, table.loss)
    design = Design.build(table.n_once, table.n_rec, table.r, table.tokens, table.loss)
    if extension is None:
        return design
    z = extension_covariate(extension, table.n_once, table.n_rec, table.r, table.budget, ext_ref)
    return dataclasses.replace(design, ext_z=z[None, :], ext_target=(EXTENSIONS[extension].target,))


def r_squared(observed: np.ndarray, predicted: np.ndarray) -> float:
    """R² = 1 − Σ(L − L̂)²/Σ(L − L̄)² on raw losses (nats)."""
    ss_res = float(np.sum((observed - predicted) ** 2))
    ss_tot = float(np.sum((observed - observed.mean()) ** 2))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")


def fit_law(
    table: RunTable,
    *,
    form: str = "joint",
    fix_phi: float | None = None,
    restarts: int = 500,
    seed: int = 0,
    extension: str | None = None,
    ext_ref: float | None = None,
    warm: LawFit | None = None,
    held: dict[str, float] | None = None,
) -> LawFit:
    """Fit the joint law (φ free, or fixed at ``fix_phi``) or the plain law (``form="chinchilla"``).

    Best of ``restarts`` seeded uniform start points in the box of method §8.3, polished to tight tolerances.
    ``extension``: one of ``law.EXTENSIONS`` (joint law only), its covariate centred at ``ext_ref`` (default:
    the table's centre); ``warm``: a fit of the same table whose θ (ext = 0 appended) is one more start,
    with ``varpro.SEEDS_PER_REFIT`` variable-projection starts beside it (a warm-started refit);
    ``held``: {θ name: θ value} of parameters held fixed (a, b, e, alpha, beta; ``fit.priors`` parses them).
    """
    if extension is not None and extension not in EXTENSIONS:
        raise UserError(f"unknown law form {extension!r}; use one of: paper, {', '.join(EXTENSIONS)}")
    if extension is not None and form != "joint":
        raise UserError(f"the {extension} form extends the joint law; it has no plain-law version")
    if extension == "phi-trend-c" and not table.has_budget:
        raise UserError("the phi-trend-c form needs a 'budget' column (training FLOPs per run)")
    if form not in ("joint", "chinchilla"):
        raise UserError(f"unknown law {form!r}; use 'joint' or 'chinchilla'")
    if restarts < 1:
        raise UserError(f"restarts must be >= 1, got {restarts}")
    if form == "chinchilla" and fix_phi is not None:
        raise UserError("the plain Chinchilla law has no phi to fix; use the joint law with --fix-phi")
    if fix_phi is not None and not LOWER[PHI] <= fix_phi <= UPPER[PHI]:
        raise UserError(f"fixed phi must lie in [{LOWER[PHI]:g}, {UPPER[PHI]:g}], got {fix_phi}")
    held = check_held(held)
    check_identifiable(table, form, fix_phi, tuple(held))
    plain = form == "chinchilla"
    if extension is not None and ext_ref is None:
        ext_ref = extension_reference(extension, table.n_once, table.n_rec, table.r, table.budget)
    box = Box.for_form(fix_phi, plain=plain, extension=extension, held=held)
    extra = None
    if warm is not None:
        extra = np.zeros(len(box.lower))
        extra[: len(warm.theta)] = warm.theta[: len(box.lower)]
        extra[~box.free] = box.fixed_values[~box.free]
    design = design_for(table, plain, extension, ext_ref)
    rng, seeded = np.random.default_rng(seed), 0 if warm is None else SEEDS_PER_REFIT
    opt = fit_many(design, box, None, restarts, rng, extra_starts=extra, seeded=seeded)[0]
    name = "chinchilla" if plain else ("joint" if fix_phi is None else "fixed_phi")
    law_fit = LawFit(
        form=name,
        theta=opt.theta,
        objective=opt.objective,
        grad_norm=opt.grad_norm,
        r2=math.nan,
        n_runs=len(table),
        restarts=restarts,
        starts_at_optimum=opt.starts_at_optimum,
        extension=extension,
        ext_ref=ext_ref,
        held=tuple(name for name in PARAMS if name in held),
    )
    return dataclasses.replace(law_fit, r2=r_squared(table.loss, law_fit.predict_table(table)))
