"""Block bootstrap over (budget, r) cells (method §8.4) and the random-effects parametric bootstrap.

A resample draws as many cells as the table has, with replacement, and pools their runs (duplicates
allowed); it is represented as a weight vector over runs (how often each run was drawn), which is exactly
the summed objective on the pooled runs. All resamples of one bootstrap are fitted in one batch.

Each refit starts from the full-data optimum (the warm start method §8.8 recommends), ``SEEDS_PER_REFIT``
variable-projection start points of its own resample (``fit.varpro``) and ``restarts`` fresh uniform start
points; ``benchmarks/fit_speed.py`` checks on a sample of resamples that this reaches the optimum of a
cold multi-start of uniform random starts. Resamples that cannot identify the law (one r for the joint law,
one budget) are redrawn. CIs are percentile intervals (2.5th–97.5th by default); ``end_ranges`` says how
far each end could move with another draw of the same number of resamples (its Monte Carlo error).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from loopscale.errors import UserError
from loopscale.fit.fitter import LawFit, design_for, fit_many
from loopscale.fit.law import PARAM_LABELS, PARAMS, Design, log_prediction, theta_to_coefficients
from loopscale.fit.protocol_results import CellBootstrap, RandomEffectsBootstrap, as_samples
from loopscale.fit.table import RunTable
from loopscale.fit.varpro import SEEDS_PER_REFIT

CI_LEVEL = 0.95
BOOTSTRAP_RESTARTS = 2  # fresh random starts per refit, on top of the warm start and the VarPro starts
MAX_REDRAWS = 1000
MC_CONFIDENCE = 0.95  # confidence of ``end_ranges``' Monte Carlo range of each CI end
SD_MC_Z = 2.576  # ``sd_end_ranges``' normal quantile: 99% nominal, ≥ 94% measured on heavy-tailed draws


def _draw_cells(rng: np.random.Generator, n_cells: int, valid, count: int) -> np.ndarray:
    """``count`` multisets of cell indices [count, n_cells] for which ``valid(cells)`` holds."""
    draws = np.empty((count, n_cells), dtype=int)
    for i in range(count):
        for _ in range(MAX_REDRAWS):
            cells = rng.integers(0, n_cells, n_cells)
            if valid(cells):
                draws[i] = cells
                break
        else:
            raise UserError(
                f"could not draw an identifiable bootstrap resample in {MAX_REDRAWS} tries; "
                "the table has too few (budget, r) cells"
            )
    return draws


def _validator(keys: list[tuple[float, int]], joint: bool):
    budgets = np.array([k[0] for k in keys])
    rs = np.array([k[1] for k in keys])
    has_budget = bool(np.all(np.isfinite(budgets)))

    def valid(cells: np.ndarray) -> bool:
        if joint and len(set(rs[cells].tolist())) < 2:
            return False
        return not has_budget or len(set(budgets[cells].tolist())) >= 2

    return valid


def cell_weights(cell_of_row: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Run weights [R, n]: how often each run's cell was drawn in each resample."""
    counts = np.stack([np.bincount(d, minlength=cell_of_row.max() + 1) for d in draws])
    return counts[:, cell_of_row].astype(float)


def resample_weights(table: RunTable, resamples: int, seed: int, joint: bool = True) -> np.ndarray:
    """The run weights [resamples, n] of ``bootstrap_fit``'s cell resamples for this ``seed``."""
    cell_of_row, keys = table.cells()
    draws = _draw_cells(np.random.default_rng(seed), len(keys), _validator(keys, joint), resamples)
    return cell_weights(cell_of_row, draws)


def percentile_ci(values: np.ndarray, level: float = CI_LEVEL) -> list[float]:
    tail = 50 * (1 - level)
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return [float(lo), float(hi)]


def end_ranges(values: np.ndarray, level: float = CI_LEVEL) -> list[list[float | None]]:
    """The Monte Carlo range of each end of ``percentile_ci(values, level)``: [[lo_a, lo_b], [hi_a, hi_b]].

    Each end estimates a quantile q of the bootstrap distribution from R draws; the order statistics
    x(l) ≤ x(u) with l, u the ``MC_CONFIDENCE`` binomial limits of R·q cover that quantile with (at least)
    that confidence whatever the distribution's shape (the distribution-free quantile interval). A limit
    beyond the sample (l = 0 or u = R + 1: too few draws in that tail, e.g. the 2.5% end at R = 100) is
    None: the range is open on that side. A long, thin tail of refits — a few resamples in which the law
    fits very differently — makes the range of its end wide: another seed or resample count could put that
    end anywhere in it, so no conclusion may rest on where inside it the end fell (e.g. whether the CI
    holds 0). Units: those of ``values``.
    """
    x = np.sort(np.asarray(values, float))
    n = x.size
    out = []
    for q in ((1 - level) / 2, (1 + level) / 2):
        lo_rank = int(binom.ppf((1 - MC_CONFIDENCE) / 2, n, q))  # 1-based ranks
        hi_rank = int(binom.ppf((1 + MC_CONFIDENCE) / 2, n, q)) + 1
        out.append(
            [float(x[lo_rank - 1]) if lo_rank >= 1 else None, float(x[hi_rank - 1]) if hi_rank <= n else None]
        )
    return out


def sd_end_ranges(values: np.ndarray, estimate: float, factor: float) -> list[list[float]]:
    """The Monte Carlo range of each end of ``estimate ∓ factor·sd(values)`` (an interval estimate ± t·SE
    with SE the bootstrap's standard deviation): [[lo_a, lo_b], [hi_a, hi_b]], meant to hold the end at the
    infinite-resample SD at ≥ 95%.

    The log of the sample SD of R draws has Monte Carlo SD ≈ √((κ − 1)/(4R)), κ the draws' kurtosis (the
    delta method on the variance of a sample variance, σ⁴(κ − 1)/R). A heavy tail of refits (κ ≈ 10 on the
    hyperconnections arm: a few simulated tables in which the law degenerates) makes it three times the
    normal-theory value, so at 200 draws an end can move by ±0.05 between seeds. With such a tail, few
    draws underestimate κ itself, so the range is drawn at ``SD_MC_Z`` (99% nominal), which held the true
    end in 94.5% of draws at R = 200 and 98.5% at R = 1,600 (95% nominal: 88% and 94%;
    tests/fit/test_bootstrap_ends.py). Units: those of ``values``.
    """
    x = np.asarray(values, float)
    sd = float(np.std(x, ddof=1))
    scaled = (x - x.mean()) / sd if sd > 0 else np.zeros_like(x)  # scaled: tiny spreads do not underflow
    m2 = float(np.mean(scaled**2))
    kurtosis = float(np.mean(scaled**4)) / m2**2 if m2 > 0 else 3.0
    spread = math.exp(SD_MC_Z * math.sqrt(max(kurtosis - 1.0, 0.0) / (4 * x.size)))
    sds = (sd / spread, sd * spread)
    lower = [estimate - factor * sds[1], estimate - factor * sds[0]]
    return [lower, [estimate + factor * sds[0], estimate + factor * sds[1]]]


REFIT_BATCH = 25  # resamples refitted per batch (one progress step each; the results do not depend on it)


def held_rows(theta: np.ndarray, held_draws: dict[str, np.ndarray] | None, count: int) -> np.ndarray | None:
    """``fit_many(fixed_rows=...)`` of ``count`` refits: ``theta`` with each parameter of ``held_draws``
    {θ name: [count]} at refit i's draw; None without draws (the box's values are held)."""
    if not held_draws:
        return None
    rows = np.tile(theta, (count, 1))
    for name, values in held_draws.items():
        rows[:, PARAMS.index(name)] = values
    return rows


def refit_weighted(
    fit: LawFit,
    table: RunTable,
    weights: np.ndarray | None,
    restarts: int,
    seed: int,
    targets: np.ndarray | None = None,
    advance=None,
    held_draws: dict[str, np.ndarray] | None = None,
) -> np.ndarray:
    """Refit ``fit``'s form (and extension) on each weight row [R, n] of ``table``, or on each table of log
    losses ``targets`` [R, n] → θ [R, P], warm-started at ``fit``, with ``SEEDS_PER_REFIT`` VarPro starts
    and ``restarts`` uniform random starts per refit; ``advance(k)`` after each batch.

    Parameters ``fit`` holds stay at its values, or with ``held_draws`` {θ name: [R]} at refit i's draw
    (a prior resampled per refit, ``fit.priors``)."""
    plain = fit.form == "chinchilla"
    box = fit.box
    rows = weights if weights is not None else targets
    fixed_rows = held_rows(fit.theta, held_draws, len(rows))
    design = design_for(table, plain, fit.extension, fit.ext_ref)
    rng = np.random.default_rng(seed)
    thetas = []
    # One generator across batches draws the same start points as one call over all rows would.
    for lo in range(0, len(rows), REFIT_BATCH):
        part = slice(lo, lo + REFIT_BATCH)
        optima = fit_many(
            design,
            box,
            None if weights is None else weights[part],
            restarts,
            rng,
            extra_starts=fit.theta,
            polish_top=3,
            scipy_polish=False,
            targets=None if targets is None else targets[part],
            fixed_rows=None if fixed_rows is None else fixed_rows[part],
            seeded=SEEDS_PER_REFIT,
        )
        thetas += [o.theta for o in optima]
        if advance is not None:
            advance(len(optima))
    return np.stack(thetas)


def _coefficient_table(thetas: np.ndarray, plain: bool) -> dict[str, np.ndarray]:
    """θ rows → {E, A, B, alpha, beta[, phi], a, b, e[, ext]}: one array of bootstrap values each."""
    rows = [theta_to_coefficients(t) for t in thetas]
    keys = [k for k in rows[0] if not (plain and k == "phi")]
    return {k: np.array([row[k] for row in rows]) for k in keys}


def held_keys(fit: LawFit) -> set[str]:
    """Coefficient keys of the parameters ``fit`` holds (e.g. "e" and "E"): they get no CI of their own."""
    return {k for name in fit.held for k in (name, PARAM_LABELS[PARAMS.index(name)])}


def _interval_table(
    samples: dict[str, np.ndarray], fit: LawFit, level: float
) -> dict[str, tuple[float, float]]:
    """Percentile CIs of the bootstrap ``samples``, except for the parameters ``fit`` holds."""
    held = held_keys(fit)
    return {k: tuple(percentile_ci(v, level)) for k, v in samples.items() if k not in held}


def bootstrap_fit(
    fit: LawFit,
    table: RunTable,
    resamples: int = 200,
    restarts: int = BOOTSTRAP_RESTARTS,
    seed: int = 0,
    level: float = CI_LEVEL,
    advance=None,
    held_draws: dict[str, np.ndarray] | None = None,
) -> CellBootstrap:
    """Cell block bootstrap of ``fit`` on ``table``; ``advance(k)``: progress callback (k refits done);
    ``held_draws`` {θ name: [resamples]}: what each refit holds a held parameter at (``refit_weighted``).
    """
    if resamples < 2:
        raise UserError(f"bootstrap needs at least 2 resamples, got {resamples}")
    weights = resample_weights(table, resamples, seed, joint=fit.form == "joint")
    thetas = refit_weighted(fit, table, weights, restarts, seed + 1, advance=advance, held_draws=held_draws)
    samples = _coefficient_table(thetas, fit.form == "chinchilla")
    return CellBootstrap(
        resamples=resamples,
        cells=len(table.cells()[1]),
        restarts_per_refit=restarts,
        warm_start=True,
        level=level,
        held_resampled=tuple(sorted(held_draws or {})),
        ci=_interval_table(samples, fit, level),
        samples=as_samples(samples),
    )


# ---------------------------------------------------------------------------------------------------------
# The random-effects parametric bootstrap: the interval ``ci.phi`` reports (docs/fitting.md).
#
# The cell bootstrap resamples (budget, r) cells. It cannot see an error that every cell of one r shares
# across budgets (one per (r, width): a width at which one loop count trains better than the law says), and
# under such an error it under-covers (15/20 in simulation). This bootstrap models the residuals of the fit
# as crossed random effects, estimates their variances by REML, simulates tables from the fitted law plus
# errors of that structure, and refits each one.


def _group_index(keys: list[tuple]) -> np.ndarray:
    """Indicator matrix [n, G] of the distinct ``keys`` (one column per group)."""
    levels = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    z = np.zeros((len(keys), len(levels)))
    z[np.arange(len(keys)), [levels[k] for k in keys]] = 1.0
    return z


@dataclass(frozen=True)
class EffectGroups:
    """The error groups the random-effects model allows for, as 0/1 indicator matrices [runs, groups].

    ``r_width``: runs of one loop count and one width across budgets; ``cell``: runs of one (budget, r) cell
    (None where the table has no budgets). fit.compare keys both by arm as well.
    """

    r_width: np.ndarray
    cell: np.ndarray | None = None

    @classmethod
    def from_keys(cls, r_width: list[tuple], cell: list[tuple] | None = None) -> EffectGroups:
        """The groups of runs that share a key: one key per run for each kind of group."""
        return cls(_group_index(r_width), None if cell is None else _group_index(cell))

    def items(self) -> list[tuple[str, np.ndarray]]:
        """(name, indicator matrix) of each group present, (r, width) first (REML's and the draws' order)."""
        return [(name, z) for name, z in (("r_width", self.r_width), ("cell", self.cell)) if z is not None]


def run_widths(table: RunTable) -> np.ndarray:
    """Each run's width, or where the table has none the non-looped twin's size N_once + r·N_rec, which
    labels the width just as well (it is the same for every r at one width of an iso-depth grid)."""
    if np.all(np.isfinite(table.width)):
        return table.width
    return np.round(table.n_once + table.r * table.n_rec)


def effect_groups(table: RunTable) -> EffectGroups:
    """The error groups of ``table``'s runs: (r, width) across budgets, the width being the non-looped
    twin's size N_once + r·N_rec where the table has no width column, and (budget, r) cells."""
    width = run_widths(table)
    cells = [(float(b), int(r)) for b, r in zip(table.budget, table.r)] if table.has_budget else None
    return EffectGroups.from_keys([(int(r), float(w)) for r, w in zip(table.r, width)], cells)


def law_jacobian(fit: LawFit, table: RunTable) -> np.ndarray:
    """∂ log L̂ / ∂θ at the fit for its free parameters [n, p]."""
    design = design_for(table, fit.form == "chinchilla", fit.extension, fit.ext_ref)
    return design_jacobian(fit.theta, design, fit.free)


def design_jacobian(theta: np.ndarray, design: Design, free: np.ndarray) -> np.ndarray:
    """∂ log L̂ / ∂θ_i at ``theta`` for the ``free`` parameters [n, p] (central differences)."""
    cols = []
    for i in np.flatnonzero(free):
        step = 1e-6 * max(1.0, abs(theta[i]))
        shifted = np.repeat(theta[None], 2, axis=0)
        shifted[0, i] += step
        shifted[1, i] -= step
        up, down = log_prediction(shifted, design)
        cols.append((up - down) / (2 * step))
    return np.column_stack(cols)


def variance_components(resid: np.ndarray, groups: EffectGroups, jacobian: np.ndarray) -> dict[str, float]:
    """REML estimates of the error variances: one random effect per group of ``groups`` plus an iid term.

    ``resid`` [n] are log-loss residuals of a fit whose linearisation is ``jacobian`` [n, p]; REML takes the
    p fitted directions out of the likelihood (only the column space of the Jacobian matters). Returns
    {name: variance} in squared log-loss units, one per group present and "iid": a leaf table keyed by the
    ``EffectGroups`` field names.
    """
    from scipy.linalg import cho_factor, cho_solve
    from scipy.optimize import minimize as scipy_minimize

    n = len(resid)
    basis, _ = np.linalg.qr(jacobian)
    present = groups.items()
    names = [name for name, _ in present] + ["iid"]
    kernels = [z @ z.T for _, z in present] + [np.eye(n)]
    scale = max(float(np.mean(resid**2)), 1e-30)

    def neg_reml(log_var: np.ndarray) -> float:
        cov = sum(math.exp(v) * scale * k for v, k in zip(log_var, kernels))
        try:
            factor = cho_factor(cov, lower=True)
        except np.linalg.LinAlgError:
            return math.inf
        si_x, si_e = cho_solve(factor, basis), cho_solve(factor, resid)
        xsx = basis.T @ si_x
        xse = basis.T @ si_e
        sign, logdet_xsx = np.linalg.slogdet(xsx)
        if sign <= 0:
            return math.inf
        quad = resid @ si_e - xse @ np.linalg.solve(xsx, xse)
        return 0.5 * (2 * np.log(np.diag(factor[0])).sum() + logdet_xsx + quad)

    floor = math.log(1e-8)
    start = np.full(len(names), math.log(1.0 / len(names)))
    best = scipy_minimize(neg_reml, start, method="L-BFGS-B", bounds=[(floor, math.log(10.0))] * len(names))
    variances = np.exp(best.x) * scale
    variances[best.x <= floor + 1e-6] = 0.0  # a component at the floor is absent
    return {name: float(v) for name, v in zip(names, variances)}


def simulate_tables(
    log_pred: np.ndarray,
    groups: EffectGroups,
    components: dict,
    count: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """``count`` tables of log losses [count, n]: ``log_pred`` plus fresh random effects, one per group of
    ``groups`` with the variances ``components`` (squared log loss, "iid" included)."""
    sims = np.tile(log_pred, (count, 1))
    for name, z in groups.items():
        sims += rng.normal(0.0, math.sqrt(components[name]), (count, z.shape[1])) @ z.T
    sims += rng.normal(0.0, math.sqrt(components["iid"]), sims.shape)
    return sims


def random_effects_bootstrap(
    fit: LawFit,
    table: RunTable,
    resamples: int = 200,
    restarts: int = BOOTSTRAP_RESTARTS,
    seed: int = 0,
    level: float = CI_LEVEL,
    advance=None,
    held_draws: dict[str, np.ndarray] | None = None,
) -> RandomEffectsBootstrap:
    """Parametric bootstrap of ``fit`` under crossed random effects estimated from its own residuals.

    The log-loss residuals are split by REML into a shared effect per (r, width), one per (budget, r) cell
    and an iid term (``variance_components``); each resample is the fitted law plus fresh effects of those
    variances, refitted from the fit (warm start) plus ``restarts`` random starts. Its ``components`` are
    standard deviations in log loss; samples and CIs as ``bootstrap_fit``'s (every coefficient but the held
    ones; ``held_draws`` as there).
    """
    if resamples < 2:
        raise UserError(f"bootstrap needs at least 2 resamples, got {resamples}")
    plain = fit.form == "chinchilla"
    log_pred = np.log(fit.predict_table(table))
    resid = np.log(table.loss) - log_pred
    groups = effect_groups(table)
    components = variance_components(resid, groups, law_jacobian(fit, table))
    sims = simulate_tables(log_pred, groups, components, resamples, np.random.default_rng(seed))
    thetas = refit_weighted(
        fit, table, None, restarts, seed + 1, targets=sims, advance=advance, held_draws=held_draws
    )
    samples = _coefficient_table(thetas, plain)
    return RandomEffectsBootstrap(
        components={name: math.sqrt(v) for name, v in components.items()},
        resamples=resamples,
        restarts_per_refit=restarts,
        level=level,
        held_resampled=tuple(sorted(held_draws or {})),
        ci=_interval_table(samples, fit, level),
        samples=as_samples(samples),
    )
