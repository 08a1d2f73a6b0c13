"""Profile-likelihood interval for φ: a second interval, independent of the cell bootstrap (method §8.9).

φ is fixed at each point of a grid across the box [−3, 3], the other five parameters are refitted, and the
refitted objective becomes a deviance. The calibration is a **Gaussian likelihood on log loss with the
residual variance profiled out**:

    deviance(φ) = n·log(RSS(φ) / RSS(φ̂)),   RSS = Σ(log L̂ − log L)² of the least-squares refit at φ,

which is asymptotically χ²₁ under independent Gaussian errors in log loss; the 95% interval is where
deviance ≤ χ²₁(0.95) = 3.841. The summed Huber objective of the point fit (δ = 1e-3) is not used for the
deviance: at realistic residuals (0.01 nats ≈ 0.004 in log loss) almost every run sits in Huber's linear
part, where the objective is an absolute-error sum whose χ² calibration needs an estimate of the error
density at zero from the few runs inside the kink; the least-squares profile needs only the RSS. Its
minimum φ̂ (the least-squares φ) can differ slightly from the Huber φ̂; both are reported.

An end of the interval that never crosses the threshold before the box edge is *open* (``None``): the data
cannot rule out φ at the edge of the box, so φ is not identified. The interval is the hull of the grid
points under the threshold (conservative when the profile has more than one dip; ``disjoint`` says so).

Refits are batched like the point fit (``fitter.minimise_batch``): every grid point starts from the free
fits' optima with φ replaced, plus a few uniform random starts; then passes warm-start each point from its
neighbours' optima until no point improves (a profile is continuous, so a better basin found at one φ
propagates); a denser grid covers the region where deviance ≤ 4 × threshold; each crossing is bisected.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy.stats import chi2

from loopscale.fit.fitter import (
    Box,
    LawFit,
    _distinct_best,
    design_for,
    fit_many,
    minimise_batch,
    single_blas_thread,
)
from loopscale.fit.identification_results import IntervalDisagreement, ProfileResult
from loopscale.fit.law import BOUND_TOL, LOWER, PARAMS, PHI, UPPER, Design
from loopscale.fit.table import RunTable

PROFILE_LEVEL = 0.95
COARSE_POINTS = 61  # uniform over the box: a step of 0.1 in φ
FINE_POINTS = 30  # uniform over the region where deviance ≤ FINE_REGION × threshold
FINE_REGION = 4.0
PROFILE_RESTARTS = 4  # fresh uniform starts per grid point, on top of the warm starts
LS_RESTARTS = 50  # fresh starts of the free least-squares fit (plus the Huber fits as warm starts)
NEIGHBOUR_PASSES = 30
BISECT_STEPS = 8  # each halves a bracket of ≤ 0.1 → end points to ≤ 4e-4 before interpolation
# Refinement of each refit: stop at a relative decrease ≤ 1e-12 (the deviance n·log(RSS/RSS_min) then
# moves by ≤ ~1e-10·n) or after 2,000 steps; ill-posed tables have flat valleys where the point fit's
# absolute 1e-15 rule would crawl for thousands of steps without changing the deviance.
REFINE_FTOL = 1e-12
REFINE_MAX_ITER = 2000
IMPROVE_REL = 1e-8  # a neighbour warm start must lower the objective by this much (relative) to count
RESID_FLOOR = 1e-12  # RSS floor per run (log-loss residual 1e-12): keeps noise-free data finite
AGREE_FRACTION = 0.25  # bootstrap and profile disagree when an end differs by more than this × width
AGREE_FLOOR = 0.01  # … and by more than this in φ (noise-free data give intervals of width ~0)


def _refit_at(
    design: Design,
    phis: np.ndarray,
    warm: list[np.ndarray],
    rng: np.random.Generator,
    restarts: int,
    box: Box,
) -> tuple[np.ndarray, np.ndarray]:
    """Refit the other free parameters of ``box`` at each fixed φ → (θ [K, 6], objective [K]).

    ``warm[k]`` [m, 6] are start points for φ = phis[k] (their φ is replaced); ``restarts`` uniform ones
    are added; parameters the box holds (``--fix``, ``--prior``) stay at its values. All starts of all
    points descend together; the best two distinct end points of each point are then refined
    (``REFINE_FTOL``).
    """
    free = box.fixing(PHI, 0.0).free
    starts, owner = [], []
    for k, phi in enumerate(phis):
        w = np.atleast_2d(np.asarray(warm[k], dtype=float)).copy()
        rnd = LOWER + (UPPER - LOWER) * rng.random((restarts, len(PARAMS)))
        s = np.clip(np.concatenate([w, rnd]), LOWER, UPPER)
        s[:, ~box.free] = box.fixed_values[~box.free]
        s[:, PHI] = phi
        starts.append(s)
        owner += [k] * len(s)
    owner_arr = np.array(owner)
    ends, values = minimise_batch(design, np.concatenate(starts), free, groups=owner_arr)
    cand, cand_owner = [], []
    for k in range(len(phis)):
        mine = owner_arr == k
        for x in _distinct_best(ends[mine], values[mine], 2):
            cand.append(x)
            cand_owner.append(k)
    cand_owner_arr = np.array(cand_owner)
    px, pf = minimise_batch(
        design,
        np.array(cand),
        free,
        max_iter=REFINE_MAX_ITER,
        ftol=REFINE_FTOL,
        groups=cand_owner_arr,
    )
    thetas = np.empty((len(phis), len(PARAMS)))
    objective = np.empty(len(phis))
    for k in range(len(phis)):
        mine = np.flatnonzero(cand_owner_arr == k)
        best = mine[np.argmin(pf[mine])]
        thetas[k], objective[k] = px[best], pf[best]
    return thetas, objective


class _Profile:
    """The grid points refitted so far (kept sorted by φ)."""

    def __init__(self, design: Design, rng: np.random.Generator, restarts: int, warm: np.ndarray, box: Box):
        self.design, self.rng, self.restarts, self.warm, self.box = design, rng, restarts, warm, box
        self.phi = np.empty(0)
        self.theta = np.empty((0, len(PARAMS)))
        self.objective = np.empty(0)

    def add(self, phis: np.ndarray, extra_warm: list[np.ndarray] | None = None) -> None:
        """Refit at the new φ values (those not already on the grid) and merge them in."""
        phis = np.unique(np.clip(np.asarray(phis, dtype=float), LOWER[PHI], UPPER[PHI]))
        if self.phi.size:
            near = np.abs(phis[:, None] - self.phi[None, :]).min(axis=1) <= 1e-9
            phis = phis[~near]
        if phis.size == 0:
            return
        warm = []
        for k, phi in enumerate(phis):
            w = [self.warm]
            if self.phi.size:  # the two nearest grid points already fitted
                w.append(self.theta[np.argsort(np.abs(self.phi - phi))[:2]])
            if extra_warm is not None:
                w.append(extra_warm[k])
            warm.append(np.concatenate(w))
        thetas, objective = _refit_at(self.design, phis, warm, self.rng, self.restarts, self.box)
        order = np.argsort(np.concatenate([self.phi, phis]))
        self.phi = np.concatenate([self.phi, phis])[order]
        self.theta = np.concatenate([self.theta, thetas])[order]
        self.objective = np.concatenate([self.objective, objective])[order]

    def smooth(self) -> None:
        """Warm-start every point from its neighbours' optima until no point improves."""
        active = np.ones(self.phi.size, dtype=bool)
        for _ in range(NEIGHBOUR_PASSES):
            idx = np.flatnonzero(active)
            if idx.size == 0:
                break
            warm = [self.theta[[j for j in (i - 1, i + 1) if 0 <= j < self.phi.size]] for i in idx]
            thetas, objective = _refit_at(self.design, self.phi[idx], warm, self.rng, 0, self.box)
            better = objective < self.objective[idx] * (1 - IMPROVE_REL)
            won = idx[better]
            self.theta[won], self.objective[won] = thetas[better], objective[better]
            active[:] = False
            for i in won:
                active[max(0, i - 1) : i + 2] = True

    def deviance(self, rss_min: float) -> np.ndarray:
        floor = len(self.design) * RESID_FLOOR**2
        rss = np.maximum(2 * self.objective, floor)
        return len(self.design) * np.log(rss / max(rss_min, floor))


def _free_ls_fit(
    design: Design, warm: np.ndarray, rng: np.random.Generator, box: Box
) -> tuple[np.ndarray, float]:
    opt = fit_many(design, box, None, LS_RESTARTS, rng, extra_starts=warm, scipy_polish=False)
    return opt[0].theta, opt[0].objective


def profile_phi(
    table: RunTable,
    fits: list[LawFit],
    *,
    bootstrap_ci: list[float] | None = None,
    restarts: int = PROFILE_RESTARTS,
    points: int = COARSE_POINTS,
    seed: int = 0,
    level: float = PROFILE_LEVEL,
) -> ProfileResult:
    """The profile-likelihood interval for φ of the joint law on ``table`` (see the module docstring).

    ``fits`` are joint-law fits of the same table (the φ-free one first; φ = 0, φ = 1 …) used as warm
    starts (parameters the φ-free fit holds, ``LawFit.held``, stay held at its values in every refit);
    ``bootstrap_ci`` is the bootstrap's φ CI to compare with (``present.identification.profile_method``
    says how the interval was made).
    """
    with single_blas_thread():
        return _profile_phi(table, fits, bootstrap_ci, restarts, points, seed, level)


def _profile_phi(table, fits, bootstrap_ci, restarts, points, seed, level) -> ProfileResult:
    design = dataclasses.replace(design_for(table, plain=False), delta=math.inf)
    rng = np.random.default_rng(seed + 7919)
    warm = np.stack([f.theta for f in fits])
    free = fits[0].free.copy()
    free[PHI] = True  # the free least-squares fit's box; the grid refits fix φ in it
    box = Box(free=free, fixed_values=fits[0].theta.copy())
    theta_ls, f_ls = _free_ls_fit(design, warm, rng, box)
    prof = _Profile(design, rng, restarts, np.concatenate([theta_ls[None, :], warm]), box)
    grid = np.linspace(LOWER[PHI], UPPER[PHI], points)
    prof.add(np.concatenate([grid, [theta_ls[PHI]], [f.theta[PHI] for f in fits]]))
    prof.smooth()
    threshold = float(chi2.ppf(level, 1))
    rss_min = 2 * min(f_ls, float(prof.objective.min()))
    dev = prof.deviance(rss_min)
    inside = np.flatnonzero(dev <= FINE_REGION * threshold)
    lo_i, hi_i = max(inside.min() - 1, 0), min(inside.max() + 1, prof.phi.size - 1)
    prof.add(np.linspace(prof.phi[lo_i], prof.phi[hi_i], FINE_POINTS))
    prof.smooth()
    rss_min = 2 * min(f_ls, float(prof.objective.min()))

    ends: list[float | None] = [None, None]
    brackets = _brackets(prof.phi, prof.deviance(rss_min), threshold)
    for _ in range(BISECT_STEPS):
        todo = [(side, a, b) for side, (a, b) in brackets.items() if b - a > 1e-9]
        if not todo:
            break
        prof.add(np.array([(a + b) / 2 for _, a, b in todo]))
        dev = prof.deviance(rss_min)
        for side, a, b in todo:
            mid = (a + b) / 2
            below = dev[np.argmin(np.abs(prof.phi - mid))] <= threshold
            # lower end: the bracket is (above, below); upper end: (below, above)
            brackets[side] = (mid, b) if below == (side == 1) else (a, mid)
    prof.smooth()
    rss_min = 2 * min(f_ls, float(prof.objective.min()))
    dev = prof.deviance(rss_min)
    for side, (a, b) in _brackets(prof.phi, dev, threshold).items():
        da, db = (dev[np.argmin(np.abs(prof.phi - x))] for x in (a, b))
        ends[side] = float(a + (b - a) * (threshold - da) / (db - da)) if db != da else float(a)
    below = dev <= threshold
    hull = np.flatnonzero(below)
    disjoint = bool(hull.size and not below[hull.min() : hull.max() + 1].all())
    best = int(np.argmin(prof.objective))
    phi_hat = float(theta_ls[PHI]) if f_ls <= prof.objective[best] else float(prof.phi[best])
    agrees, disagreement = compare_intervals(ends, bootstrap_ci, level)
    return ProfileResult(
        phi=tuple(prof.phi.tolist()),
        objective=tuple(prof.objective.tolist()),
        deviance=tuple(dev.tolist()),
        threshold=threshold,
        level=level,
        interval=(ends[0], ends[1]),
        open=(ends[0] is None, ends[1] is None),
        phi_hat=phi_hat,
        rss_min=rss_min,
        n_runs=len(table),
        disjoint=disjoint,
        agrees_with_bootstrap=agrees,
        disagreement=disagreement,
    )


def _brackets(phi: np.ndarray, dev: np.ndarray, threshold: float) -> dict[int, tuple[float, float]]:
    """Grid intervals where the hull of {deviance ≤ threshold} ends: {0: (above, below), 1: (below, above)};
    an end that reaches the box edge has no bracket (the interval is open there)."""
    below = np.flatnonzero(dev <= threshold)
    out: dict[int, tuple[float, float]] = {}
    if below.size == 0:  # cannot happen (the minimum has deviance 0); keep the interval open
        return out
    if below.min() > 0:
        out[0] = (float(phi[below.min() - 1]), float(phi[below.min()]))
    if below.max() < phi.size - 1:
        out[1] = (float(phi[below.max()]), float(phi[below.max() + 1]))
    return out


def compare_intervals(
    profile, bootstrap, level: float = PROFILE_LEVEL
) -> tuple[bool | None, IntervalDisagreement | None]:
    """Do the profile interval [lo, hi] (an end None: open) and the bootstrap CI [lo, hi] agree? →
    (agrees, how they disagree when they do not).

    A bootstrap CI end within 1e-6 of the box edge counts as open. They disagree when one is open at an
    end where the other is closed, or when a closed end differs by more than a quarter of the wider
    interval's width (open ends taken at the box edge) and by more than 0.01. None when there is no
    bootstrap CI.
    """
    if bootstrap is None:
        return None, None
    edges = (float(LOWER[PHI]), float(UPPER[PHI]))
    b_open = [bootstrap[0] - edges[0] <= BOUND_TOL, edges[1] - bootstrap[1] <= BOUND_TOL]
    p = [edges[0] if profile[0] is None else profile[0], edges[1] if profile[1] is None else profile[1]]
    p_open = [profile[0] is None, profile[1] is None]
    intervals = dict(bootstrap=(bootstrap[0], bootstrap[1]), profile=(profile[0], profile[1]), level=level)
    for side, name in ((0, "lower"), (1, "upper")):
        if b_open[side] != p_open[side]:
            which = "profile" if p_open[side] else "bootstrap"
            return False, IntervalDisagreement("open_end", (name,), open_one=which, **intervals)
    width = max(p[1] - p[0], bootstrap[1] - bootstrap[0])
    off = tuple(
        name
        for side, name in ((0, "lower"), (1, "upper"))
        if not p_open[side] and abs(p[side] - bootstrap[side]) > max(AGREE_FRACTION * width, AGREE_FLOOR)
    )
    if not off:
        return True, None
    return False, IntervalDisagreement("ends_differ", off, **intervals)
