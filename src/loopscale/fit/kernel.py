"""The fitter's compiled inner loops (Numba): the summed Huber objective with its gradient, and batched
projected BFGS.

Why compiled: a protocol fit is hundreds of thousands of objective evaluations on ~100 runs each. As NumPy
passes over [starts, runs] arrays, 40% of the protocol's time was Python and array bookkeeping around the
arithmetic (per-step masks, fancy indexing, 6×6 updates), and the arithmetic itself made a temporary array
per operation. Here one evaluation is a single loop over runs, and one BFGS step of one start is scalar code.

``law.objective_and_gradient`` and ``fitter.minimise_batch`` are the Python entry points (they validate and
shape the arguments); the formulas are documented there. Layout of the arrays every function here takes:

- ``theta`` [K, P] (P = 6 + m): (a, b, e, α, β, φ, extra₁ … extraₘ);
- ``runs`` [4, n]: rows N_once, N_rec, log r, log D;
- ``targets`` [1 or K, n] log losses, ``weights`` [1 or K, n] run weights (one row: shared by every θ);
- ``ext_z`` [m, n] covariates of the extra parameters, ``ext_is_e`` [m]: 1 if extraⱼ acts on E
  (E·2^(extraⱼ·z)), 0 if on φ (φ + extraⱼ·z);
- ``delta``: the Huber δ, or inf for least squares.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

LN2 = math.log(2.0)
LINE_SEARCH_TRIES = 40
ARMIJO_C = 1e-4
BACKTRACK = 0.2


@njit(cache=True)
def objective_one(theta, runs, target, weight, delta, ext_z, ext_is_e, grad):
    """Summed Huber objective of one θ [P] over the runs; writes ∂f/∂θ into ``grad`` [P]; returns f.

    Runs with weight 0 (not drawn in a bootstrap resample) are skipped: they add nothing to f or ∂f.
    """
    p = theta.shape[0]
    a, b, e, alpha, beta, phi = theta[0], theta[1], theta[2], theta[3], theta[4], theta[5]
    least_squares = math.isinf(delta)
    for j in range(p):
        grad[j] = 0.0
    floor_varies = False  # an extra parameter acting on E makes the floor differ between runs
    for j in range(p - 6):
        floor_varies = floor_varies or ext_is_e[j] != 0
    term_e = math.exp(e)
    f = 0.0
    for i in range(runs.shape[1]):
        w = weight[i]
        if w == 0.0:
            continue
        n_once, n_rec, log_r, log_tokens = runs[0, i], runs[1, i], runs[2, i], runs[3, i]
        phi_i = phi
        log_e = e
        for j in range(p - 6):
            if ext_is_e[j]:
                log_e += theta[6 + j] * ext_z[j, i] * LN2
            else:
                phi_i += theta[6 + j] * ext_z[j, i]
        r_phi = math.exp(phi_i * log_r) if log_r != 0.0 else 1.0
        n_eff = n_once + r_phi * n_rec
        log_n = math.log(n_eff)
        term_n = math.exp(a - alpha * log_n)
        term_d = math.exp(b - beta * log_tokens)
        if floor_varies:
            term_e = math.exp(log_e)
        total = term_n + term_d + term_e
        resid = math.log(total) - target[i]
        if least_squares:
            f += w * 0.5 * resid * resid
            clipped = resid
        elif abs(resid) <= delta:
            f += w * 0.5 * resid * resid
            clipped = resid
        else:
            f += w * delta * (abs(resid) - 0.5 * delta)
            clipped = delta if resid > 0 else -delta
        slope = w * clipped / total  # ∂(w·Huber)/∂L̂
        u_n, u_d, u_e = slope * term_n, slope * term_d, slope * term_e
        grad[0] += u_n
        grad[1] += u_d
        grad[2] += u_e
        grad[3] -= u_n * log_n
        grad[4] -= u_d * log_tokens
        u_phi = -alpha * u_n * (r_phi * n_rec * log_r) / n_eff  # ∂/∂φ through log N_eff
        grad[5] += u_phi
        for j in range(p - 6):
            if ext_is_e[j]:
                grad[6 + j] += u_e * ext_z[j, i] * LN2
            else:
                grad[6 + j] += u_phi * ext_z[j, i]
    return f


@njit(cache=True)
def objective_rows(theta, runs, targets, weights, delta, ext_z, ext_is_e, f, grad):
    """``objective_one`` for every row of θ [K, P] into f [K] and grad [K, P]."""
    for k in range(theta.shape[0]):
        t = targets[0] if targets.shape[0] == 1 else targets[k]
        w = weights[0] if weights.shape[0] == 1 else weights[k]
        f[k] = objective_one(theta[k], runs, t, w, delta, ext_z, ext_is_e, grad[k])


@njit(cache=True)
def _held(x, g, free, lower, upper, keep):
    """keep[j] = parameter j may move: free, and not at a bound with an outward descent direction."""
    for j in range(x.shape[0]):
        keep[j] = free[j] and not ((x[j] <= lower[j] and g[j] > 0) or (x[j] >= upper[j] and g[j] < 0))


@njit(cache=True)
def _bfgs_step(xi, fi, gi, hi, fresh, free, lower, upper, runs, t, w, delta, ext_z, ext_is_e, scratch, keep):
    """One projected BFGS step of one start, in place on xi, gi and hi (its inverse Hessian) → (f after
    the step, fresh: H still a scaled identity, accepted: the line search found a decrease).
    ``scratch`` [5, P] and ``keep`` [P] are work space."""
    p = xi.shape[0]
    d, cand, g_cand, s, y = scratch[0], scratch[1], scratch[2], scratch[3], scratch[4]
    _held(xi, gi, free, lower, upper, keep)
    slope = 0.0
    for r in range(p):
        acc = 0.0
        if keep[r]:
            for c in range(p):
                if keep[c]:
                    acc -= hi[r, c] * gi[c]
        d[r] = acc
        slope += acc * gi[r]
    if slope >= 0:  # not a descent direction: restart from steepest descent
        for r in range(p):
            d[r] = -gi[r] if keep[r] else 0.0
            for c in range(p):
                hi[r, c] = 1.0 if r == c else 0.0
        fresh = True
    if fresh:  # steepest-descent step: move at most one unit in any parameter
        scale = 1e-300
        for r in range(p):
            scale = max(scale, abs(d[r]))
        for r in range(p):
            d[r] /= scale
    # Backtracking Armijo line search on the projected path.
    step = 1.0
    for _try in range(LINE_SEARCH_TRIES):
        decrease = 0.0
        for r in range(p):
            cand[r] = min(max(xi[r] + step * d[r], lower[r]), upper[r])
            decrease += gi[r] * (cand[r] - xi[r])
        f_new = objective_one(cand, runs, t, w, delta, ext_z, ext_is_e, g_cand)
        if f_new <= fi + ARMIJO_C * decrease and f_new < fi:
            break
        step *= BACKTRACK
    else:
        return fi, fresh, False
    sy, ss, yy = 0.0, 0.0, 0.0
    for r in range(p):
        s[r] = cand[r] - xi[r]
        y[r] = g_cand[r] - gi[r]
        sy += s[r] * y[r]
        ss += s[r] * s[r]
        yy += y[r] * y[r]
    if sy > 1e-12 * math.sqrt(ss * yy):
        if fresh:  # first update: scale the identity by sᵀy / yᵀy
            for r in range(p):
                for c in range(p):
                    hi[r, c] = sy / yy if r == c else 0.0
            fresh = False
        # H ← (I − ρ s yᵀ) H (I − ρ y sᵀ) + ρ s sᵀ with ρ = 1 / sᵀy (H symmetric); d is free now: H·y
        rho = 1.0 / sy
        yhy = 0.0
        for r in range(p):
            acc = 0.0
            for c in range(p):
                acc += hi[r, c] * y[c]
            d[r] = acc
            yhy += y[r] * acc
        for r in range(p):
            for c in range(p):
                hi[r, c] += -rho * (s[r] * d[c] + d[r] * s[c]) + (rho * rho * yhy + rho) * s[r] * s[c]
    for r in range(p):
        xi[r] = cand[r]
        gi[r] = g_cand[r]
    return f_new, fresh, True


@njit(cache=True)
def _descend_unit(
    members, x, f, g, free, lower, upper, runs, targets, weights, delta, ext_z, ext_is_e,
    max_iter, ftol, f_scale, gtol, prune, prune_rel, prune_after,
):  # fmt: skip
    """Descend the starts ``members`` (indices into x) in lockstep, one step each per iteration, until each
    stops; with ``prune``, from iteration ``prune_after`` on a start stops once its objective exceeds
    (1 + ``prune_rel``) × the lowest objective among the members."""
    p = x.shape[1]
    m = members.shape[0]
    inv_hess = np.zeros((m, p, p))
    for a in range(m):
        for j in range(p):
            inv_hess[a, j, j] = 1.0
    fresh = np.ones(m, dtype=np.bool_)  # inverse Hessian still the identity
    small_steps = np.zeros(m, dtype=np.int64)
    active = np.ones(m, dtype=np.bool_)
    scratch = np.empty((5, p))
    keep = np.empty(p, dtype=np.bool_)
    for iteration in range(max_iter):
        moving = 0
        for a in range(m):
            if not active[a]:
                continue
            moving += 1
            i = members[a]
            t = targets[0] if targets.shape[0] == 1 else targets[i]
            w = weights[0] if weights.shape[0] == 1 else weights[i]
            f_new, fresh[a], accepted = _bfgs_step(
                x[i], f[i], g[i], inv_hess[a], fresh[a], free, lower, upper, runs, t, w, delta, ext_z,
                ext_is_e, scratch, keep,
            )  # fmt: skip
            if accepted:
                small = (f[i] - f_new) <= ftol * max(abs(f_new), f_scale)
                small_steps[a] = small_steps[a] + 1 if small else 0
                f[i] = f_new
            _held(x[i], g[i], free, lower, upper, keep)
            pg_norm = 0.0
            for r in range(p):
                if keep[r]:
                    pg_norm = max(pg_norm, abs(g[i, r]))
            if not accepted or small_steps[a] >= 2 or pg_norm <= gtol:
                active[a] = False
        if moving == 0:
            break
        if prune and iteration >= prune_after:
            best = np.inf
            for a in range(m):
                best = min(best, f[members[a]])
            for a in range(m):
                if active[a] and f[members[a]] > best * (1 + prune_rel):
                    active[a] = False


@njit(cache=True, parallel=True)
def minimise(
    x, free, lower, upper, runs, targets, weights, delta, ext_z, ext_is_e,
    max_iter, ftol, f_scale, gtol, groups, prune_rel, prune_after,
):  # fmt: skip
    """Projected BFGS from every row of ``x`` [K, P] in place; returns the objectives [K].

    Every start keeps its own inverse-Hessian approximation and stops on its own (see
    ``fitter.minimise_batch``). With ``groups`` [K] (non-empty) the starts of one group advance in lockstep
    and a start is dropped once its objective exceeds (1 + ``prune_rel``) × the lowest objective of its
    group, from iteration ``prune_after`` on; without groups every start is its own unit. Units run in
    parallel threads, one whole unit per task: a unit's path does not depend on the others', so the result
    does not depend on the thread count, and one parallel region per call keeps threads from waiting on
    each other at every step (fine-grained regions ran 13× slower with two processes on two cores).
    """
    k = x.shape[0]
    f = np.empty(k)
    g = np.empty_like(x)
    objective_rows(x, runs, targets, weights, delta, ext_z, ext_is_e, f, g)
    grouped = groups.shape[0] > 0
    order = np.argsort(groups, kind="mergesort") if grouped else np.arange(k)
    bounds = [0]  # unit u holds order[bounds[u]:bounds[u + 1]]
    for a in range(1, k):
        if not grouped or groups[order[a]] != groups[order[a - 1]]:
            bounds.append(a)
    bounds.append(k)
    for u in prange(len(bounds) - 1):
        _descend_unit(
            order[bounds[u] : bounds[u + 1]], x, f, g, free, lower, upper, runs, targets, weights, delta,
            ext_z, ext_is_e, max_iter, ftol, f_scale, gtol, grouped, prune_rel, prune_after,
        )  # fmt: skip
    return f
