"""The shape of a recipe's excess beyond the chosen effect model (issue 41): along width, per scope (plain,
looped), and which one-parameter shapes the pairs allow at all.

Each shape is a column the law gives a meaning to, fitted alone to the pairs' excess (nats):

- ``offset``: flat, the same on every looped model;
- ``delta phi``: ∂L̂/∂φ, growing with r (a change of the worth of a loop, φ);
- ``N multiplier``: ∂L̂/∂ln N_eff, the effect of N_eff → m·N_eff (a parameter or compute multiplier: A moves
  by m^−α), shrinking with N;
- ``D multiplier``: ∂L̂/∂ln D, the effect of D → m·D (a data multiplier: B moves by m^−β), shrinking with D;
- ``width slope``: an offset plus a slope in log₁₀ width, an effect that grows (or shrinks) with size that
  none of the law's parameters makes.

For each: the estimate with its interval (± t(G − 1)'s two-sided 4% quantile × SE, the SE with the base
law's draws as the effect models' is), and a lack-of-fit test of the shape beyond the (r, width)
heterogeneity (``lack_of_fit``): a shape is "consistent" with the pairs where it is not rejected at 1%.
The rule models the spread of the (r, width) cluster means beyond iid noise as a random effect; a test that
reads any cluster pattern as lack of fit (an F of the shape's between-cluster mean square against the
within-cluster one, before issue 49) rejects true shapes wherever that heterogeneity exists (87% of them at
1% on arms with no effect and an (r, width) sd of 0.015; docs/fitting.md). So the alternative is
structured: the shape against the span of every shape of the table (the law's directions, and a constant on
every model where there are r = 1 pairs), both fitted to the cluster means, whose own spread around that
span is the denominator.
These are descriptions, not the rule's named effects: the rule (``pairs.rule``) names offset and Δφ; this
table says which law parameter an effect could move, if any.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy.stats import f as f_dist
from scipy.stats import t as t_dist

from loopscale.pairs.results import ScopeTrends, ShapeFit, SlopeDifference, WidthTrend
from loopscale.pairs.rule import cluster_robust, least_squares, noise_components, t_critical

SHAPE_LEVEL = 0.01  # lack of fit below this: the shape does not describe the pairs
RANK_TOL = 1e-6  # singular value of unit-length columns below which a direction adds nothing


def width_trend(
    pairs,
    values: np.ndarray,
    token_fit: np.ndarray,
    token_draws: np.ndarray,
    looped: bool | None = None,
) -> WidthTrend | None:
    """Slope of ``values``' (r, width) cluster means on log₁₀ width (nats per decade of width), over every
    cluster or only the looped (``looped`` True) or plain (False) ones: OLS on the cluster means, SE² =
    their residual variance's + the variance of the slope across the base law's draws (the token part's
    error at each width); interval ± ``t_critical``(G − 2)·SE. None with fewer than 3 widths."""
    keys = pairs.cluster_keys
    keep = np.array([looped is None or (k[0] > 1) == looped for k in keys])
    widths = np.array([k[1] for k in keys])[keep]
    groups = len(widths)
    if len(set(widths.tolist())) < 3 or groups < 3:
        return None
    x = np.log10(widths) - np.log10(widths).mean()
    member = np.eye(len(keys))[pairs.cluster][:, keep]
    counts = member.sum(axis=0)

    def slopes(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # [..., n] → slope [...], cluster means
        means = np.einsum("...n,ng->...g", v, member) / counts
        return means @ x / float(x @ x), means

    slope, means = slopes(values)
    left = means - means.mean() - slope * x
    df = groups - 2
    se_ls = math.sqrt(float(left @ left) / max(df, 1) / float(x @ x))
    base = slopes(token_fit - token_draws)[0] if len(token_draws) > 1 else np.zeros(1)
    se = math.sqrt(se_ls**2 + float(np.var(base, ddof=1) if len(base) > 1 else 0.0))
    c = t_critical(df)
    return WidthTrend(
        slope=float(slope),
        se=se,
        se_base_law=float(np.std(base, ddof=1)) if len(base) > 1 else 0.0,
        df=df,
        ci=(float(slope - c * se), float(slope + c * se)),
        p=float(2 * t_dist.sf(abs(slope) / max(se, 1e-300), max(df, 1))),
        varies=bool(abs(slope) > c * se),
        explained=float(1 - (left @ left) / max(float(np.sum((means - means.mean()) ** 2)), 1e-300)),
    )


def scope_trends(pairs, excess: np.ndarray, token_fit: np.ndarray, token_draws: np.ndarray) -> ScopeTrends:
    """With r = 1 pairs: the excess's slope along width for plain and for looped models, and the difference
    (plain − looped; SE² the sum, t on the smaller df): whether the recipe changes plain models with size,
    and whether more than looped ones. Empty without r = 1 pairs."""
    if pairs.looped.all():
        return ScopeTrends()
    plain = width_trend(pairs, excess, token_fit, token_draws, False)
    looped = width_trend(pairs, excess, token_fit, token_draws, True)
    difference = None
    if plain and looped:
        diff, se, df = plain.slope - looped.slope, math.hypot(plain.se, looped.se), min(plain.df, looped.df)
        c = t_critical(df)
        difference = SlopeDifference(slope=diff, se=se, df=df, ci=(diff - c * se, diff + c * se),
                                     varies=bool(abs(diff) > c * se))  # fmt: skip
    return ScopeTrends(plain=plain, looped=looped, difference=difference)


def shape_table(
    pairs, excess: np.ndarray, excess_draws: np.ndarray, draw_columns: dict, columns: dict[str, np.ndarray]
) -> list[ShapeFit]:
    """Each one-parameter shape of ``columns`` {name: column [n] under the base law's fit} (and ``width
    slope``) fitted alone to the pairs' excess (module docstring). SE² = the CR1 variance + the variance
    of the estimate refitted under each base-law draw (``excess_draws`` [K, n], ``draw_columns`` {name:
    [K, n]}), as the effect models'."""
    width = np.log10(pairs.base.width)
    looped = pairs.looped.astype(float)
    slope = looped * (width - width[pairs.looped].mean())
    designs = {name: col[:, None] for name, col in columns.items()}
    designs["width slope"] = np.column_stack([looped, slope])
    draws = {name: col[:, :, None] for name, col in draw_columns.items()}
    draws["width slope"] = np.broadcast_to(
        designs["width slope"], (len(excess_draws), *designs["width slope"].shape)
    )
    groups = int(pairs.cluster.max()) + 1
    c = t_critical(groups - 1)
    spanned = [*designs.values()] + ([] if pairs.looped.all() else [np.ones((len(excess), 1))])
    reference = np.column_stack(spanned)
    rows = []
    for name, x in designs.items():
        if np.allclose(x, 0.0):
            continue
        beta, resid = least_squares(excess, x)
        refits = least_squares(excess_draws, np.ascontiguousarray(draws[name]))[0][:, -1]
        base_var = float(np.var(refits, ddof=1)) if len(refits) > 1 else 0.0
        se = math.sqrt(max(float(cluster_robust(x, resid, pairs.cluster)[-1, -1]) + base_var, 1e-300))
        p = lack_of_fit(excess, x, reference, pairs.cluster, excess_draws, draws[name])
        ci = (float(beta[-1] - c * se), float(beta[-1] + c * se))
        consistent = None if p is None else bool(p >= SHAPE_LEVEL)
        rows.append(ShapeFit(shape=name, estimate=float(beta[-1]), se=se, ci=ci, lack_of_fit_p=p,
                             consistent=consistent))  # fmt: skip
    return rows


def lack_of_fit(
    excess: np.ndarray,
    x: np.ndarray,
    reference: np.ndarray,
    cluster: np.ndarray,
    excess_draws: np.ndarray,
    x_draws: np.ndarray,
) -> float | None:
    """p of the shape of columns ``x`` [n, k] against the span of ``reference`` [n, K] (which holds x), beyond
    the (r, width) heterogeneity, on the excess [n] (nats). Both are fitted to the cluster means, each
    weighted by 1 / (τ² + σ²/n_g), the variance the rule's random-effects model gives it (σ² iid, τ² cluster:
    moments of the reference's pair-level residuals); γ = the weighted means' coordinates along the q
    orthonormal directions the reference adds to the shape. Under the shape, γ has covariance s²·I (s² the
    reference's weighted residual mean square, G − rank df: the cluster means' own spread, heterogeneity
    included) plus the covariance of γ across the base law's draws (``excess_draws`` [K, n], ``x_draws``
    [K, n, k]: the shape's column and the excess are only known up to the base law's error, as its SE
    counts). F = γ'(s²·I + C)⁻¹γ / q on F(q, G − rank): exact where the clusters are of one size, the
    weights known and the base law exact. None where the reference adds nothing or leaves no df."""
    groups = int(cluster.max()) + 1
    counts = np.bincount(cluster, minlength=groups).astype(float)
    noise = noise_components(least_squares(excess, reference)[1], cluster, _rank(reference))
    weight = 1.0 / np.sqrt(np.maximum(noise.cluster + noise.iid / counts, 1e-300))
    member = np.eye(groups)[cluster] / counts * weight  # [n, G]: a pair's share of its weighted cluster mean
    y, ref = excess @ member, member.T @ reference
    basis = _basis(member.T @ x)
    rest = ref / np.maximum(np.linalg.norm(ref, axis=0), 1e-300)
    rest = rest - basis @ (basis.T @ rest)
    u, sv, _ = np.linalg.svd(rest, full_matrices=False)
    added = u[:, sv > RANK_TOL]  # [G, q]
    q = added.shape[1]
    df = groups - basis.shape[1] - q
    rss = float(y @ y - np.sum((basis.T @ y) ** 2) - np.sum((added.T @ y) ** 2))
    if q == 0 or df <= 0 or rss <= 1e-300:
        return None
    gamma = added.T @ y
    cov = rss / df * np.eye(q)
    if len(excess_draws) > 1:
        left = least_squares(excess_draws @ member, np.einsum("kni,ng->kgi", x_draws, member))[1]
        cov = cov + np.atleast_2d(np.cov(left @ added, rowvar=False))
    ratio = float(gamma @ np.linalg.solve(cov, gamma)) / q
    return float(f_dist.sf(ratio, q, df))


def _rank(x: np.ndarray) -> int:
    """Rank of columns ``x`` [n, k] each scaled to unit length (so a column's units do not decide it)."""
    return _basis(x).shape[1]


def _basis(x: np.ndarray) -> np.ndarray:
    """Orthonormal basis [n, rank] of the span of columns ``x`` [n, k], each scaled to unit length first."""
    scaled = x / np.maximum(np.linalg.norm(x, axis=0), 1e-300)
    u, sv, _ = np.linalg.svd(scaled, full_matrices=False)
    return u[:, sv > RANK_TOL]


def with_multipliers(shapes: list[ShapeFit], alpha: float, beta: float) -> list[ShapeFit]:
    """``shapes`` with the N and D multiplier rows' ``multiplier`` (m, lo, hi): the slope along ∂L̂/∂ln m
    (the row's estimate and interval ends) inverted exactly, with the base law's α and β."""
    exponents = {"N multiplier": alpha, "D multiplier": beta}
    return [
        dataclasses.replace(
            row, multiplier=tuple(_multiplier(v, exponents[row.shape]) for v in (row.estimate, *row.ci))
        )
        if row.shape in exponents
        else row
        for row in shapes
    ]


def _multiplier(slope: float, exponent: float) -> float | None:
    """m with (m^−k − 1)·X = −k·slope·X, X = A·N^−α (k = α) or B·D^−β (k = β): the multiplier whose exact
    effect equals a fitted slope along ∂L̂/∂ln m (None where no positive m gives it)."""
    base = 1.0 - exponent * slope
    return base ** (-1.0 / exponent) if base > 0 and exponent > 0 else None


def also_consistent(chosen_terms, shapes: list[ShapeFit]) -> list[str]:
    """The multipliers (N or D: a compute, parameter or data gain) that describe the pairs as well as the
    model the rule named: where it named any term, each multiplier shape whose lack of fit passes (p ≥
    ``SHAPE_LEVEL``) and whose interval excludes 0. The rule's terms hold no multiplier; a recipe that buys
    tokens moves the loss by B·D^−β·(m^−β − 1), nearly a constant over a design's narrow range of D, so
    the rule names an offset (with a Δφ at times) for it: the verdict names the multiplier beside it."""
    if not chosen_terms:
        return []
    return [
        row.shape
        for row in shapes
        if row.shape in ("N multiplier", "D multiplier")
        and row.consistent
        and not row.ci[0] <= 0.0 <= row.ci[1]
    ]
