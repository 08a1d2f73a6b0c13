"""The rule that names a recipe's effect, and its calibration by simulation (pairs.effects; issues 36, 43,
49).

**One inference per claim.** Every term of every effect model gets one studentised statistic,
|t| = |estimate| / SE₀. SE₀² = the pairs' variance (cluster-robust CR1 over the (r, width) clusters, or the
known-covariance sandwich) + the base law's variance **under the test's null**: the model's fitted change
(token part + the model at its estimates) and the (r, width) pattern it leaves (its residuals' cluster
means, ``cluster_means``), without the iid noise within clusters, refitted under each of the base law's
bootstrap draws, with the tested term's own part taken out (``base_law_parts``). Its critical value c is
simulated under the term's null (the model without the term, fitted to these pairs; where a Δφ remains, also
at each reference size of Δφ), every simulated table read through a base-law draw and given the same
statistic. The printed interval is the set of values δ the same test does not reject, {δ : |β̂ − δ| ≤
c·SE(δ)} with SE(δ)² = SE₀² + 2δ·cross + δ²·scale, the base law's variance with the term put at δ
(``inverted_interval``): estimate ± c·SE for a constant, whose column no draw changes; Fieller's interval for
Δφ, whose scale (how far a unit of φ moves the loss) each draw reads differently. So a term is named exactly
when its printed interval excludes 0; the two cannot disagree, and the calibration table checks coverage
under every simulated truth.

*Why (issue 49, measured on ``benchmarks/effect_attribution.py``).* Until then SE² was the CR1 variance + the
variance of the observed change refitted under each draw, at the estimate. Two things in it cost the power
to name a change of φ: (i) the refits re-read the pairs' noise through each draw's slightly different
∂L/∂φ column, noise the CR1 part already counts (the docstring said so: "counts the base law's error
twice"); (ii) at the estimate, the uncertainty of ∂L/∂φ's scale enters as Δφ̂²·var(scale), so |t| cannot
exceed about 1/sd(scale) (0.5–0.6 on the published base beside an offset: |t| ≤ 1.6–2.0 whatever the
pairs) while c was simulated under the null, where that part is 0. On arms with Δφ −0.15, the full model's
Δφ SE was 0.06–0.10 of which the pairs' 0.01–0.02; the Δφ-only model's t, 2.7. Replacing the SE by CR1 alone
(c re-simulated) named 8 of 8 such arms where the old rule named 2; simulating at the estimated rather than
the bounded cluster noise named 3 (the bound is not the cause). The base law's uncertainty is not dropped:
the part that is 0 under the null and grows with Δφ is in the interval, and the pattern the model leaves
across (r, width) clusters stays in the test: each draw reads a misfit differently, and without it an arm
whose truth lies outside the model (an offset with a width slope) had Δφ named on 37 of 60 arms, a data
multiplier on 27 of 60.

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
null is never simulated with less structure than the pairs may have. Issue 49 kept it: on arms with a
known Δφ it cost little power (above), and an arm whose truth lies outside the model (a width slope, a data
multiplier) leaves its misfit in the cluster means, which the bound keeps in the nulls. The calibration
table's truths are simulated with the same noise: its power is the power where the cluster noise is that
large, a lower bound. A known error covariance (the demo's few pairs) is used as given.
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


def cluster_means(resid: np.ndarray, cluster: np.ndarray) -> np.ndarray:
    """[..., n]: each pair's (r, width) cluster mean of the residuals [..., n] (nats): the pattern a model
    leaves across clusters, misfit and cluster noise, without the iid noise within them."""
    member = np.eye(int(cluster.max()) + 1)[cluster]  # [n, G]
    return (resid @ member / member.sum(axis=0)) @ member.T


def base_law_parts(coefs: np.ndarray, own: np.ndarray, beta: np.ndarray) -> tuple:
    """The base law's share of a coefficient's variance as a function of the value δ a test or an interval
    puts the term at. ``coefs`` [..., K, k]: the model's fitted change (the law's token part and the
    estimates ``beta`` [..., k], no noise) refitted under each of K base-law draws; ``own`` [..., K, k]: each
    term's own column refitted so (1 for a constant; for Δφ, how the draw's ∂L/∂φ reads the fit's). With the
    term's part taken out, u_k = coefs_k − β̂·own_k, the refit at δ is u_k + δ·own_k, whose variance is
    ``null`` + 2δ·``cross`` + δ²·``scale`` → (null, cross, scale) [..., k]: var u, cov(u, own), var own
    (nats² for constants; units of φ² for Δφ)."""
    u = coefs - beta[..., None, :] * own
    du, dv = u - u.mean(axis=-2, keepdims=True), own - own.mean(axis=-2, keepdims=True)
    k = coefs.shape[-2]
    return (du**2).sum(axis=-2) / (k - 1), (du * dv).sum(axis=-2) / (k - 1), (dv**2).sum(axis=-2) / (k - 1)


def inverted_interval(
    estimate: np.ndarray, se_null: np.ndarray, cross: np.ndarray, scale: np.ndarray, critical
) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) [...]: the values δ the term's test does not reject, {δ : (β̂ − δ)² ≤ c²·SE(δ)²} with
    SE(δ)² = ``se_null``² + 2δ·``cross`` + δ²·``scale`` (``base_law_parts``; Fieller's interval for a
    ratio, here of the excess to the base law's uncertain ∂L/∂φ). It holds 0 exactly when |β̂|/SE₀ ≤ c, and
    is estimate ± c·SE where the term's scale is known (``cross`` = ``scale`` = 0). Where the base law
    leaves the scale too uncertain (c²·scale ≥ 1) the set is unbounded: the side holding β̂ runs to ±inf."""
    b, c2 = np.asarray(estimate, float), np.asarray(critical, float) ** 2
    lead, half = 1.0 - c2 * scale, b + c2 * cross  # lead·δ² − 2·half·δ + (β̂² − c²SE₀²) ≤ 0
    raw = half**2 - lead * (b**2 - c2 * se_null**2)
    disc = np.maximum(raw, 0.0)
    safe = np.where(np.abs(lead) > 1e-12, lead, 1e-12)
    roots = np.sort(np.stack([(half - np.sqrt(disc)) / safe, (half + np.sqrt(disc)) / safe]), axis=0)
    bounded = lead > 1e-12
    upper_ray = b >= roots[1]  # unbounded: the set is two rays; the one holding β̂
    lo = np.where(bounded, roots[0], np.where(upper_ray, roots[1], -np.inf))
    hi = np.where(bounded, roots[1], np.where(upper_ray, np.inf, roots[0]))
    everywhere = ~bounded & (raw < 0)  # the quadratic never rises above 0: no value is rejected
    lo, hi = np.where(everywhere, -np.inf, lo), np.where(everywhere, np.inf, hi)
    return lo, hi


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

    def estimates(self, terms, change: np.ndarray, pick: np.ndarray) -> tuple:
        """Coefficients [S, k], test SEs SE₀ [S, k] and how the SE moves with the value the term is put at,
        ``(cross, scale)`` [S, k] each (``base_law_parts``), of model ``terms`` on tables ``change``
        [S, n] read through base-law draws ``pick`` [S]: SE₀² = the pairs' (CR1 or known) variance + the
        base law's, with the term at 0 (the test's null; ``base_variance``)."""
        designs = self.columns(terms, self.slope_draws)  # [K, n, k]: one design per draw, (X'X)⁻¹ per draw
        bread = np.linalg.pinv(np.einsum("kni,knj->kij", designs, designs))  # looked up per table
        x, y = designs[pick], change - self.token_draws[pick]
        beta = np.einsum("sij,sj->si", bread[pick], np.einsum("sni,sn->si", x, y))
        resid = y - np.einsum("sni,si->sn", x, beta)
        if self.known is None:
            cov = cluster_robust(x, resid, self.cluster)
        else:
            cov = known_sandwich(designs, self.known)[pick]
        null, cross, scale = self.base_variance(terms, beta, x, pick, cluster_means(resid, self.cluster))
        return beta, np.sqrt(np.maximum(np.einsum("sii->si", cov) + null, 1e-300)), (cross, scale)

    def base_variance(
        self, terms, beta: np.ndarray, x: np.ndarray, pick: np.ndarray, left: np.ndarray
    ) -> tuple:
        """``base_law_parts`` [S, k] each of model ``terms`` whose coefficients ``beta`` [S, k] were read on
        columns ``x`` [S, n, k] through draws ``pick`` [S]: each table's fitted change and the (r, width)
        pattern it leaves, ``left`` [S, n] (``cluster_means``; not the iid noise, which the pairs' variance
        holds), refitted under every base-law draw."""
        if len(self.token_draws) < 2:
            return tuple(np.zeros(beta.shape) for _ in range(3))
        xd = self.columns(terms, self.slope_draws)  # [K, n, k]
        proj = np.einsum("kij,knj->kin", np.linalg.pinv(np.einsum("kni,knj->kij", xd, xd)), xd)  # [K, k, n]
        draws, k, n = proj.shape
        flat = proj.reshape(draws * k, n)  # one matrix product each (einsum over [S, K, k, k] is slow)
        tokens = (flat @ (self.token_draws[pick] + left).T).T.reshape(-1, draws, k)
        tokens -= np.einsum("kin,kn->ki", proj, self.token_draws)[None]
        refit = (flat @ x.transpose(1, 0, 2).reshape(n, -1)).reshape(draws, k, -1, k).transpose(2, 0, 1, 3)
        coefs = tokens + (refit * beta[:, None, None, :]).sum(-1)  # [S, K, k]
        return base_law_parts(coefs, np.einsum("skjj->skj", refit), beta)

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
                beta, se, _ = sim.estimates(m, change, pick)
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
    """The rule on ``S`` simulated tables (``run_rule``): the chosen model name per table [S], every
    submodel's fit {terms: (coefficients [S, k], test SEs SE₀ [S, k])} and how each SE moves with the
    hypothesised value {terms: (cross [S, k], scale [S, k])} (``base_law_parts``; for ``interval``)."""

    chosen: np.ndarray
    fits: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]]
    scales: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]]

    def interval(self, rule: Rule, terms: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) [S, k]: model ``terms``' printed intervals on every table (``inverted_interval``)."""
        beta, se = self.fits[terms]
        crit = np.array([rule.term[terms][t] for t in terms])
        return inverted_interval(beta, se, *self.scales[terms], crit)


def run_rule(sim: Simulator, rule: Rule, change: np.ndarray, pick: np.ndarray) -> RuleRun:
    """The rule on simulated tables ``change`` [S, n] read through base-law draws ``pick`` [S]."""
    out = {m: sim.estimates(m, change, pick) for m in submodels(rule.available)}
    fits = {m: (beta, se) for m, (beta, se, _) in out.items()}
    f_ratio = sim.any_excess(rule.available, change - sim.token_draws[pick], sim.slope_draws[pick])
    return RuleRun(rule.decide(f_ratio, fits), fits, {m: parts for m, (_, _, parts) in out.items()})


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
    truth does not have), disagreement (a named term whose printed interval, ``RuleRun.interval``, holds
    0: the rule and its interval at odds), power (the true model named), each true term's power (named,
    alone or with others) and coverage (the true model's interval holding the true value, per term)."""
    names = [TOKENS_ONLY, *(model_name(m) for m in submodels(rule.available)), UNATTRIBUTED]
    terms_of = {model_name(m): m for m in submodels(rule.available)}
    out = []
    for row in truths(rule.available, fitted):
        change, pick = sim.tables(row.truth, count, rng)
        run = run_rule(sim, rule, change, pick)
        chosen = run.chosen
        wrong = np.zeros(count, bool)
        disagree = np.zeros(count, bool)
        named = {t: np.zeros(count, bool) for t in rule.available}
        for name, m in terms_of.items():
            rows = chosen == name
            lo, hi = run.interval(rule, m)
            for j, t in enumerate(m):
                named[t] |= rows
                if t not in row.truth:
                    wrong |= rows
                disagree |= rows & (lo[:, j] <= 0) & (hi[:, j] >= 0)
        true_terms = tuple(t for t in rule.available if t in row.truth)
        coverage = {}
        if true_terms and len(true_terms) == len(row.truth):
            lo, hi = run.interval(rule, true_terms)
            for j, t in enumerate(true_terms):
                coverage[t] = float(np.mean((lo[:, j] <= row.truth[t]) & (row.truth[t] <= hi[:, j])))
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
    t_obs = np.abs(beta) / np.sqrt(np.maximum(np.diag(cluster_robust(x, resid, cluster)), 1e-300))
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
