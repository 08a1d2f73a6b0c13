"""The rule that names a recipe's effect, and its calibration by simulation (pairs.effects; issues 36, 43).

**One inference per claim.** Every term of every effect model gets one studentised statistic,
|t| = |estimate| / SE, with the SE the report prints (cluster-robust CR1 over the pairs' (r, width) clusters,
or the known-covariance sandwich, plus the variance across the base law's bootstrap draws). Its critical
value c is simulated under the term's null (the model without the term, fitted to these pairs; where a Δφ
remains, also at each reference size of Δφ). The printed interval is estimate ± c·SE: the set of values the
same test does not reject (the statistic taken as pivotal), at level 1 − ``TEST_LEVEL`` (96%). So a term is
named exactly when its printed interval excludes 0; the two cannot disagree. c is not floored at a t
quantile: the SE counts the base law's error twice (once in the CR1 residuals, where a wrong token part
leaves an (r, width) pattern, once in the draws' variance), and the simulation, which reads every table
through a base-law draw, measures by how much (c ≈ 1.6–2.3 on the published arms, against t(11)'s 2.33).
Whether the inverted interval covers where the truth is not 0 is checked, not assumed: the calibration
table gives its coverage under every simulated truth.

**The rule**, on each table (observed or simulated):

1. no excess beyond tokens (the F ratio of every available term jointly, against its simulated null) →
   ``tokens only``;
2. the full model's terms whose intervals exclude 0 are kept; the model of the kept terms is refitted and
   again only the terms whose own intervals exclude 0 are kept, until every kept term's interval excludes 0
   (none kept: ``excess not attributed``).

**Noise in the simulations.** An iid pair error plus an (r, width) cluster error, their variances from the
full model's residuals by moments. The cluster variance rests on a dozen clusters and its estimate is often
exactly 0; the simulations take an upper bound of it instead (``noise_components``: the one-sided
``NOISE_UPPER`` bound of the between-cluster mean square, all of it read as cluster variance), so that a
null is never simulated with less structure than the pairs may have. The calibration table's truths are
simulated with the same noise: its power is the power where the cluster noise is that large, a lower bound.
A known error covariance (the demo's few pairs) is used as given.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import chi2, norm
from scipy.stats import t as t_dist

from loopscale.pairs.results import Calibration, TruthCalibration
from loopscale.pairs.rule_results import NoiseComponents, Truth

TERMS = ("every", "offset", "delta_phi")  # a constant on every pair, a constant on looped pairs, Δφ
TERM_LABELS = {"every": "every model", "offset": "offset", "delta_phi": "delta phi"}
TOKENS_ONLY = "tokens only"
UNATTRIBUTED = "excess not attributed"
# Size of each test of the rule: 4%, so that wrong attribution (which can take the union of two tests) stays
# at or below 5% beyond the Monte Carlo error of the simulated critical values.
TEST_LEVEL = 0.04
NOISE_UPPER = 0.90  # one-sided level of the upper bound on the (r, width) cluster variance in simulations
REFERENCE_EFFECTS = (-0.08, 0.19)  # Δφ of the paper's two case studies, rounded (method §9.11): power at each


def model_name(terms) -> str:
    """'tokens only', or the terms joined in ``TERMS`` order ('offset + delta phi')."""
    return " + ".join(TERM_LABELS[t] for t in TERMS if t in terms) or TOKENS_ONLY


def submodels(terms: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every non-empty subset of ``terms`` (in ``TERMS`` order), smallest first."""
    return [c for k in range(1, len(terms) + 1) for c in itertools.combinations(terms, k)]


def noise_components(resid: np.ndarray, cluster: np.ndarray, k: int) -> NoiseComponents:
    """Method-of-moments variances of the residuals (nats²): ``iid`` from the spread within (r, width)
    clusters, ``cluster`` from the spread of the cluster means beyond it, and ``cluster_upper``, an upper
    bound of the latter that is never 0: the one-sided ``NOISE_UPPER`` upper confidence bound of the
    between-cluster mean square (its χ² on G − 1 df) over the mean cluster size, as if none of the cluster
    means' spread were iid noise (subtracting the iid part would give 0 whenever the means happen to spread
    less than the iid noise predicts). With one pair per cluster the two errors are one: all of it is
    ``iid``. ``i2``: the share of the cluster means' spread beyond the iid noise's."""
    groups = int(cluster.max()) + 1
    counts = np.bincount(cluster, minlength=groups).astype(float)
    means = np.bincount(cluster, weights=resid, minlength=groups) / np.maximum(counts, 1)
    df_within = len(resid) - groups
    if df_within <= 0:
        iid = float(np.sum(resid**2)) / max(len(resid) - k, 1)
        return NoiseComponents(iid=iid, cluster=0.0, cluster_upper=0.0, i2=0.0)
    iid = float(np.sum((resid - means[cluster]) ** 2)) / df_within
    between = float(np.sum(counts * (means - np.average(means, weights=counts)) ** 2)) / max(groups - 1, 1)
    n_bar = max((len(resid) - np.sum(counts**2) / len(resid)) / max(groups - 1, 1), 1e-12)
    upper = between * (groups - 1) / float(chi2.ppf(1 - NOISE_UPPER, max(groups - 1, 1)))
    return NoiseComponents(
        iid=iid,
        cluster=max(0.0, (between - iid) / n_bar),
        cluster_upper=upper / n_bar,
        i2=max(0.0, 1 - iid / max(between, 1e-300)),
    )


def known_covariance(cluster: np.ndarray, sd: float, cluster_sd: float) -> np.ndarray:
    """Σ [n, n] of pair errors with a known iid sd and a known (r, width) cluster sd (nats)."""
    same = (cluster[:, None] == cluster[None, :]).astype(float)
    return sd**2 * np.eye(len(cluster)) + cluster_sd**2 * same


def known_sandwich(x: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Covariance (X'X)⁻¹X'ΣX(X'X)⁻¹ [..., k, k] of least-squares coefficients on columns ``x`` [..., n, k]
    (one design, or one per simulated table) when the errors' Σ [n, n] is known."""
    bread = np.linalg.pinv(np.einsum("...ni,...nj->...ij", x, x))
    xt = np.swapaxes(x, -1, -2)
    return bread @ (xt @ (known @ x)) @ bread  # matmuls, not a three-operand einsum (10× faster)


def cluster_robust(x: np.ndarray, resid: np.ndarray, cluster: np.ndarray) -> np.ndarray:
    """CR1 covariance [..., k, k] of least-squares coefficients on columns ``x`` [..., n, k] with residuals
    [..., n]: (X'X)⁻¹ Σ_g s_g s_g' (X'X)⁻¹ with s_g = X_g' e_g, scaled by G/(G − 1)·(n − 1)/(n − k)."""
    n, k = x.shape[-2:]
    groups = int(cluster.max()) + 1
    bread = np.linalg.pinv(np.einsum("...ni,...nj->...ij", x, x))
    member = np.eye(groups)[cluster]  # [n, G] one-hot
    scores = np.einsum("ng,...nk->...gk", member, x * resid[..., None])
    scale = groups / max(groups - 1, 1) * (n - 1) / max(n - k, 1)
    return scale * bread @ np.einsum("...gi,...gj->...ij", scores, scores) @ bread


def least_squares(y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients [..., k] and residuals [..., n] of y [..., n] on columns x [..., n, k]."""
    bread = np.linalg.pinv(np.einsum("...ni,...nj->...ij", x, x))
    beta = np.einsum("...ij,...j->...i", bread, np.einsum("...ni,...n->...i", x, y))
    return beta, y - np.einsum("...ni,...i->...n", x, beta)


def t_critical(df: int, level: float = TEST_LEVEL) -> float:
    """t(df)'s two-sided ``level`` quantile: the critical value of |t| where nothing is simulated."""
    return float(t_dist.ppf(1 - level / 2, max(df, 1)))


def term_p(statistic: float, null: np.ndarray) -> float:
    """Monte Carlo p-value of |t| = ``statistic`` against the simulated ``null`` (so p < ``TEST_LEVEL``
    exactly when the term's interval excludes 0, up to the simulation's discreteness)."""
    return float((1 + np.sum(null >= statistic)) / (1 + len(null)))


@dataclass(frozen=True)
class Simulator:
    """Simulated pair tables under a truth (the truth's excess at the fit's θ plus a cluster and an iid
    error), each analysed as the pairs are: excess and ∂L/∂φ under one base-law bootstrap draw, the SE with
    the variance across all draws. The Δφ effect is linear in ∂L/∂φ at Δφ = 0 here (the fit of the observed
    pairs is Gauss–Newton on the exact effect)."""

    token_fit: np.ndarray  # [n] token part under the fit's θ
    slope_fit: np.ndarray  # [n] ∂L/∂φ under the fit's θ
    token_draws: np.ndarray  # [K, n]
    slope_draws: np.ndarray  # [K, n]
    looped: np.ndarray  # bool [n]: the pair's r > 1
    cluster: np.ndarray
    noise: dict[str, float]  # "iid", "cluster" variances (nats²) the errors are drawn with
    t_df: int
    known: np.ndarray | None = None  # the pairs' error covariance taken as known (the demo)

    def columns(self, terms, slope: np.ndarray) -> np.ndarray:
        """Columns [..., n, k] of ``terms`` with ∂L/∂φ ``slope`` [..., n]."""
        cols = {
            "every": np.ones_like(slope),
            "offset": np.broadcast_to(self.looped.astype(float), slope.shape),
            "delta_phi": slope,
        }
        return np.stack([cols[t] for t in terms], axis=-1)

    def tables(self, truth: dict[str, float], count: int, rng: np.random.Generator) -> tuple:
        """(change [S, n], base-law draw index [S]) of ``count`` tables with ``truth`` {term: value}."""
        n, groups = len(self.cluster), int(self.cluster.max()) + 1
        errors = rng.normal(0.0, math.sqrt(self.noise["iid"]), (count, n))
        errors += rng.normal(0.0, math.sqrt(self.noise["cluster"]), (count, groups))[:, self.cluster]
        effect = sum(
            (value * self.columns((term,), self.slope_fit)[:, 0] for term, value in truth.items()),
            np.zeros(n),
        )
        change = self.token_fit + effect + errors
        return change, rng.integers(0, len(self.token_draws), count)

    def estimates(self, terms, change: np.ndarray, pick: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Coefficients [S, k] and SEs [S, k] of model ``terms`` on tables ``change`` [S, n] read through
        base-law draws ``pick`` [S]: SE² = the pairs' (CR1 or known) variance + the variance of the
        coefficients across every base-law draw. The design is one per draw: (X'X)⁻¹, and with known errors
        the whole sandwich, are computed per draw and looked up per table (no inverse per table)."""
        designs = self.columns(terms, self.slope_draws)  # [K, n, k]
        bread = np.linalg.pinv(np.einsum("kni,knj->kij", designs, designs))  # [K, k, k]
        x, y = designs[pick], change - self.token_draws[pick]
        beta = np.einsum("sij,sj->si", bread[pick], np.einsum("sni,sn->si", x, y))
        if self.known is None:
            cov = cluster_robust(x, y - np.einsum("sni,si->sn", x, beta), self.cluster)
        else:
            cov = known_sandwich(designs, self.known)[pick]
        return beta, np.sqrt(
            np.maximum(np.einsum("sii->si", cov) + self.base_variance(terms, change), 1e-300)
        )

    def base_variance(self, terms, change: np.ndarray) -> np.ndarray:
        """[S, k]: variance of model ``terms``' coefficients across the base-law draws, each table's change
        refitted under every draw. A refit is linear in the change, P_k·change − P_k·token_k, so the
        variance is a quadratic form in it, c'A c − 2c'g + h, summed over the draws once: n² per table
        instead of K·n (4× faster at 51 pairs and 200 draws)."""
        if len(self.token_draws) < 2:
            return np.zeros((len(change), len(terms)))
        x = self.columns(terms, self.slope_draws)  # [K, n, k]
        proj = np.einsum("kij,knj->kin", np.linalg.pinv(np.einsum("kni,knj->kij", x, x)), x)  # [K, k, n]
        shift = np.einsum("kin,kn->ki", proj, self.token_draws)  # [K, k]
        d, e, dof = proj - proj.mean(axis=0), shift - shift.mean(axis=0), len(proj) - 1
        a = np.einsum("kin,kim->inm", d, d) / dof  # [k, n, n]
        g = np.einsum("kin,ki->in", d, e) / dof  # [k, n]
        quad = np.sum((change @ a) * change, axis=-1).T  # [S, k]
        return np.maximum(quad - 2 * change @ g.T + np.sum(e**2, axis=0) / dof, 0.0)

    def any_excess(self, terms, excess: np.ndarray, slope: np.ndarray) -> np.ndarray:
        """F ratio [S] of model ``terms`` against no excess on tables ``excess`` [S, n] with ∂L/∂φ ``slope``
        [S, n]: (RSS₀ − RSS)/k over RSS/(n − k), or over the known errors' mean variance."""
        _, resid = least_squares(excess, self.columns(terms, slope))
        n, k = excess.shape[1], len(terms)
        rss = np.sum(resid**2, axis=1)
        scale = np.maximum(rss / max(n - k, 1), 1e-300) if self.known is None else np.trace(self.known) / n
        return (np.sum(excess**2, axis=1) - rss) / k / scale


@dataclass(frozen=True)
class Rule:
    """The rule's critical values: ``any`` for the F ratio, ``term`` {model terms: {term: c}} for |t|;
    ``null``: the simulated null statistics of the F ratio ("any") and of the full model's terms (for
    p-values)."""

    available: tuple[str, ...]  # the terms this design can tell apart
    level: float  # each test's size (``TEST_LEVEL``, or a look's share of it in a sequential plan)
    any: float
    term: dict[tuple[str, ...], dict[str, float]]
    null: dict[str, np.ndarray]

    def decide(self, f_ratio: np.ndarray, fits: dict[tuple[str, ...], tuple]) -> np.ndarray:
        """Chosen model name per table [S] from the F ratios [S] and every submodel's (coefficients [S, k],
        SEs [S, k]): the rule of the module docstring."""
        models = submodels(self.available)
        # a model is a bit mask over ``available``; step[i] maps each table's significant terms of model i
        # to the index of the model they make (-1: none), and the reading is stepped to its fixed point
        index = {sum(1 << self.available.index(t) for t in m): i for i, m in enumerate(models)}
        lookup = np.array([index.get(code, -1) for code in range(1 << len(self.available))])
        step = np.stack([
            lookup[np.sum(
                (np.abs(fits[m][0]) / fits[m][1] > np.array([self.term[m][t] for t in m]))
                * np.array([1 << self.available.index(t) for t in m]), axis=1,
            )]
            for m in models
        ])  # fmt: skip
        kept = np.full(len(f_ratio), len(models) - 1)  # index into ``models`` of the model being read
        rows = np.arange(len(f_ratio))
        for _ in range(len(self.available)):
            kept = np.where(kept >= 0, step[np.maximum(kept, 0), rows], -1)
        names = np.array([model_name(m) for m in models] + [UNATTRIBUTED], dtype=object)
        out = names[kept]
        out[f_ratio <= self.any] = TOKENS_ONLY
        return out


def null_truths(model: tuple[str, ...], term: str, fitted: dict[tuple[str, ...], dict[str, float]]) -> list:
    """The truths the null of ``term`` in ``model`` is simulated under: the model without the term at its
    fit to these pairs, and, where a Δφ remains, that model with Δφ at each reference size (a large Δφ read
    through a base-law draw leaves a misfit another term absorbs; the test must not call that an effect)."""
    rest = tuple(t for t in model if t != term)
    base = {t: fitted[rest][t] for t in rest} if rest else {}
    rows = [base]
    if "delta_phi" in rest:
        rows += [{**base, "delta_phi": float(d)} for d in REFERENCE_EFFECTS]
    return rows


# The truths a sequence of looks is held to α under (``sequence_nulls``): each term alone at these sizes,
# nats for a constant, φ for Δφ (the Δφ sizes are the paper's case studies, as the rule's own nulls).
SEQUENCE_NULL_SIZES = {"every": (-0.06, 0.06), "offset": (-0.06, 0.06), "delta_phi": REFERENCE_EFFECTS}


def sequence_nulls(available: tuple[str, ...]) -> list[dict[str, float]]:
    """The null truths of a sequential plan, fixed before any pair is trained: no effect, and each available
    term alone at each of its ``SEQUENCE_NULL_SIZES`` (naming any other term is then wrong; a large Δφ read
    through a base-law draw leaves a misfit an offset can absorb)."""
    return [{}, *({t: float(v)} for t in available for v in SEQUENCE_NULL_SIZES[t])]


def matching_gate(critical: float, terms: int) -> float:
    """The F-ratio gate that matches a critical value ``critical`` of |t|: the χ²(``terms``)/``terms``
    quantile at the two-sided normal tail of ``critical`` (for one term, F > c² exactly when |t| > c)."""
    return float(chi2.isf(2 * norm.sf(critical), terms)) / terms


def at_boundary(rule: Rule, critical: float) -> Rule:
    """``rule`` with every term's critical value ``critical`` (a look's boundary, ``pairs.sequential``)
    and the F-ratio gate that matches it; its simulated nulls stay for the p-values."""
    term = {m: dict.fromkeys(m, float(critical)) for m in rule.term}
    return replace(rule, any=matching_gate(critical, len(rule.available)), term=term)


def boundary_rule(available: tuple[str, ...], critical: float) -> Rule:
    """The rule at a look's boundary ``critical`` on simulated sequences (no nulls, no p-values)."""
    empty = Rule(available, 2 * float(norm.sf(critical)), 0.0, {m: {} for m in submodels(available)}, {})
    return at_boundary(empty, critical)


def calibrate_rule(
    sim: Simulator,
    available: tuple[str, ...],
    fitted: dict,
    count: int,
    rng: np.random.Generator,
    size: float = TEST_LEVEL,
) -> Rule:
    """Critical values (``Rule``) of tests of size ``size`` from ``count`` tables simulated under each null:
    no excess for the F ratio; for each term of each submodel of ``available``, every truth of
    ``null_truths`` (the largest quantile)."""
    level = 1 - size
    change, pick = sim.tables({}, count, rng)
    null = {"any": sim.any_excess(available, change - sim.token_draws[pick], sim.slope_draws[pick])}
    crit: dict[tuple[str, ...], dict[str, float]] = {}
    for m in submodels(available):
        crit[m] = {}
        for j, term in enumerate(m):
            best, values = -math.inf, None
            for truth in null_truths(m, term, fitted):
                change, pick = sim.tables(truth, count, rng)
                beta, se = sim.estimates(m, change, pick)
                stats = np.abs(beta[:, j]) / se[:, j]
                if values is None or float(np.quantile(stats, level)) > float(np.quantile(values, level)):
                    values = stats
                best = max(best, float(np.quantile(stats, level)))
            crit[m][term] = best
            if m == available:
                null[term] = values
    return Rule(available, size, float(np.quantile(null["any"], level)), crit, null)


@dataclass(frozen=True)
class RuleRun:
    """The rule on ``S`` simulated tables (``run_rule``): the chosen model name per table [S] and every
    submodel's fit {terms: (coefficients [S, k], SEs [S, k])}."""

    chosen: np.ndarray
    fits: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]]


def run_rule(sim: Simulator, rule: Rule, change: np.ndarray, pick: np.ndarray) -> RuleRun:
    """The rule on simulated tables ``change`` [S, n] read through base-law draws ``pick`` [S]."""
    fits = {m: sim.estimates(m, change, pick) for m in submodels(rule.available)}
    f_ratio = sim.any_excess(rule.available, change - sim.token_draws[pick], sim.slope_draws[pick])
    return RuleRun(rule.decide(f_ratio, fits), fits)


def truths(available: tuple[str, ...], fitted: dict) -> list[Truth]:
    """The truths of the calibration table: no effect, each submodel at its fit to these pairs, and Δφ alone
    at each reference size (the power to name a Δφ of that size on this design)."""
    rows = [Truth(TOKENS_ONLY, {})]
    rows += [Truth(model_name(m), {t: fitted[m][t] for t in m}) for m in submodels(available)]
    if "delta_phi" in available:
        rows += [Truth(f"delta phi = {d:+.2f}", {"delta_phi": float(d)}) for d in REFERENCE_EFFECTS]
    return rows


def calibrate(
    sim: Simulator, rule: Rule, fitted: dict, count: int, rng: np.random.Generator
) -> tuple[TruthCalibration, ...]:
    """What the rule says when each row of ``truths`` is the truth, on ``count`` simulated tables, one row
    per truth in ``truths``' order: the share per chosen model, wrong attribution (a term named that the
    truth does not have), disagreement (a named term whose printed interval, estimate ± c·SE, holds 0: the
    rule and its interval at odds), power (the true model named), each true term's power (named, alone or
    with others) and coverage (the true model's interval holding the true value, per term)."""
    names = [TOKENS_ONLY, *(model_name(m) for m in submodels(rule.available)), UNATTRIBUTED]
    terms_of = {model_name(m): m for m in submodels(rule.available)}
    out = []
    for row in truths(rule.available, fitted):
        change, pick = sim.tables(row.truth, count, rng)
        run = run_rule(sim, rule, change, pick)
        chosen, fits = run.chosen, run.fits
        wrong = np.zeros(count, bool)
        disagree = np.zeros(count, bool)
        named = {t: np.zeros(count, bool) for t in rule.available}
        for name, m in terms_of.items():
            rows = chosen == name
            beta, se = fits[m]
            for j, t in enumerate(m):
                named[t] |= rows
                if t not in row.truth:
                    wrong |= rows
                c = rule.term[m][t]
                disagree |= rows & (beta[:, j] - c * se[:, j] <= 0) & (beta[:, j] + c * se[:, j] >= 0)
        true_terms = tuple(t for t in rule.available if t in row.truth)
        coverage = {}
        if true_terms and len(true_terms) == len(row.truth):
            beta, se = fits[true_terms]
            for j, t in enumerate(true_terms):
                c = rule.term[true_terms][t]
                coverage[t] = float(np.mean(np.abs(beta[:, j] - row.truth[t]) <= c * se[:, j]))
        true_name = model_name(tuple(row.truth))
        calibration = Calibration(
            model=true_name,
            truth=dict(row.truth),
            chosen={name: float(np.mean(chosen == name)) for name in names},
            wrong_attribution=float(wrong.mean()),
            disagreement=float(disagree.mean()),
            power=float(np.mean(chosen == true_name)),
            term_power={t: float(named[t].mean()) for t in row.truth if t in named},
            coverage=coverage,
        )
        out.append(TruthCalibration(row.label, calibration))
    return tuple(out)


# Webb's six-point weights (±√1.5, ±1, ±√0.5, each 1/6): with a dozen clusters Rademacher weights give only
# 2^12 distinct draws and lumpy p-values; these give 6^12.
WEBB_WEIGHTS = np.array([-math.sqrt(1.5), -1.0, -math.sqrt(0.5), math.sqrt(0.5), 1.0, math.sqrt(1.5)])


def wild_cluster_p(
    y: np.ndarray, x: np.ndarray, cluster: np.ndarray, draws: int, rng: np.random.Generator
) -> list:
    """A second opinion on the CR1 t test of each column of ``x`` [n, k] for ``y`` [n]: the restricted wild
    cluster bootstrap-t (WCR; the null imposed, residuals flipped per cluster with Webb's weights, the CR1
    |t| recomputed on each of ``draws`` tables) → one p-value per column. It reads only the pairs' noise:
    the base law's uncertainty, which the rule's simulations carry, is not in it."""
    beta, resid = least_squares(y, x)
    t_obs = np.abs(beta) / np.sqrt(np.diag(cluster_robust(x, resid, cluster)))
    groups = int(cluster.max()) + 1
    out = []
    for j in range(x.shape[1]):
        rest = np.delete(x, j, axis=1)
        fitted = y - least_squares(y, rest)[1] if rest.shape[1] else np.zeros_like(y)
        w = WEBB_WEIGHTS[rng.integers(0, len(WEBB_WEIGHTS), (draws, groups))][:, cluster]
        stars = fitted + w * (y - fitted)
        xs = np.broadcast_to(x, (draws, *x.shape))
        b_star, r_star = least_squares(stars, xs)
        se = np.sqrt(np.maximum(np.einsum("sii->si", cluster_robust(xs, r_star, cluster))[:, j], 1e-300))
        out.append(float((1 + np.sum(np.abs(b_star[:, j]) / se >= t_obs[j])) / (1 + draws)))
    return out
