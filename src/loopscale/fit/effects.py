"""Is it φ? Effect models of a recipe change on matched pairs (issue 36; method §5.3).

A recipe change can lower the loss of a looped model in three ways the joint law tells apart: by buying
tokens or parameters (the variant trains on more tokens at the same FLOPs, or has other N), by making a loop
worth more (a change of φ, whose effect grows with r), or by something the law does not describe (here: a
constant offset on every looped model). A Δφ fitted to two arms reads all three as Δφ. This module asks
the runs which it is, from seed-matched pairs: the variant's looped run and the base's run at the same
(budget, width, r, seed).

For every pair, the loss change (variant − base, nats) is split into the part the **base law** predicts
from the two runs' own N and D (``token_part``) and the **excess**. The excess is fitted under nested
effect models:

- ``tokens only``: no excess;
- ``delta phi``: excess = L̂(φ + Δφ) − L̂(φ) at the variant's run (∝ ∂L/∂φ for small Δφ: it grows with r);
- ``offset``: excess = c, the same for every looped run;
- ``offset + delta phi``: both.

Estimates: Gauss–Newton least squares on the pairs. Intervals: estimate ± t(G − 1)·SE with G the pairs'
(r, width) clusters, SE² = a cluster-robust variance (CR1: an error the variant shares within an (r, width)
group across budgets is allowed for) + the variance across the base law's random-effects bootstrap draws
(the token part and ∂L/∂φ rest on the base's fit). Tests, calibrated by simulation: the excess is simulated
under each null (truth = the null model fitted to these pairs, a cluster effect and an iid error with the
variances estimated from the full model's residuals, the analysis run with a base-bootstrap draw of the
law), and an observed statistic is compared with the simulated ones (Monte Carlo p-value). The rule:

1. no excess beyond tokens (F ratio of c and Δφ jointly not rejected) → ``tokens only``;
2. otherwise the t statistics of c and Δφ in ``offset + delta phi``: one rejected → that model alone; both
   → ``offset + delta phi``; neither (the two are confounded on this design) → ``excess not attributed``.

``calibrate`` then simulates each of the four models as the truth on this design and counts what the rule
says: wrong attribution (an effect named that the truth does not have) and power (the true model named).
Δφ is a recipe's price only where the rule chose ``delta phi`` (or ``tokens only``, Δφ ≈ 0).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as t_dist

from loopscale.errors import UserError
from loopscale.fit.bootstrap import CI_LEVEL, random_effects_bootstrap
from loopscale.fit.fitter import LawFit, design_for
from loopscale.fit.law import PARAMS, PHI, log_prediction
from loopscale.fit.table import RunTable

MODELS = ("tokens only", "delta phi", "offset", "offset + delta phi")
UNATTRIBUTED = "excess not attributed"
# Size of each test of the rule: 4%, so that wrong attribution (which can take the union of two tests) stays
# at or below 5% beyond the Monte Carlo error of the simulated critical values.
TEST_LEVEL = 0.04
STEP = 1e-4  # central-difference step in φ for ∂L/∂φ
GN_ITER = 12  # Gauss–Newton steps (the Δφ effect is mildly convex in Δφ)
BASE_RESAMPLES = 200  # base-law bootstrap draws (token part and ∂L/∂φ under each)
SIMULATIONS = 2000  # simulated tables per truth (null distributions and the attribution table)


@dataclass(frozen=True)
class Pairs:
    """Seed-matched looped runs of the two arms. Losses in nats; ``base`` and ``variant``: the runs as
    one-row-per-pair tables (same order)."""

    base: RunTable
    variant: RunTable
    cluster: np.ndarray  # int: index of the pair's (r, width) group
    cluster_keys: list[tuple[int, float]]

    def __len__(self) -> int:
        return len(self.base)

    @property
    def change(self) -> np.ndarray:
        """Variant − base final loss per pair (nats)."""
        return self.variant.loss - self.base.loss


def match_pairs(base: RunTable, variant: RunTable) -> Pairs:
    """Every looped variant run with the base run at the same (budget, width, r, seed); unmatched runs are
    left out. A key held twice in one arm (replicates without a seed column) cannot be paired: UserError."""
    keys = {}
    for name, t in (("base", base), ("variant", variant)):
        if not (np.all(np.isfinite(t.width)) and t.has_budget):
            raise UserError(f"pairing runs needs 'budget' and 'width' columns; the {name} table lacks one")
        index: dict[tuple, int] = {}
        for i in np.flatnonzero(t.r > 1):
            seed = -1.0 if math.isnan(t.seed[i]) else float(t.seed[i])
            key = (float(t.budget[i]), float(t.width[i]), int(t.r[i]), seed)
            if key in index:
                raise UserError(
                    f"the {name} table holds two looped runs at budget {key[0]:.3g}, width {key[1]:.0f}, "
                    f"r = {key[2]} with the same seed ({t.run[index[key]]}, {t.run[i]}): give a 'seed' column"
                )
            index[key] = int(i)
        keys[name] = index
    common = sorted(set(keys["base"]) & set(keys["variant"]))
    if len(common) < 4:
        raise UserError(
            f"only {len(common)} looped runs of the variant have a base run at the same (budget, width, r, "
            "seed): at least 4 matched pairs are needed to split a loss change into tokens and effects"
        )
    b = base.subset(np.array([keys["base"][k] for k in common]))
    v = variant.subset(np.array([keys["variant"][k] for k in common]))
    groups = sorted({(int(k[2]), k[1]) for k in common})
    cluster = np.array([groups.index((int(k[2]), k[1])) for k in common])
    return Pairs(b, v, cluster, groups)


# ---------------------------------------------------------------------------------------------------------
# The base law at the pairs: token part and the Δφ effect, under the fit and under each bootstrap draw


@dataclass(frozen=True)
class BaseLaw:
    """The base arm's fit and its bootstrap draws, evaluated at the pairs' runs."""

    theta: np.ndarray  # [P]
    draws: np.ndarray  # [K, P] random-effects bootstrap refits of the base arm
    base_design: object
    variant_design: object
    form: str

    def _loss(self, thetas: np.ndarray, variant: bool, shift: float = 0.0) -> np.ndarray:
        thetas = np.array(np.atleast_2d(thetas), dtype=float)
        thetas[:, PHI] += shift
        return np.exp(log_prediction(thetas, self.variant_design if variant else self.base_design))

    def token_part(self, thetas: np.ndarray) -> np.ndarray:
        """L̂(variant run) − L̂(base run) per pair [K, n] (nats): what N and D alone change."""
        return self._loss(thetas, True) - self._loss(thetas, False)

    def phi_effect(self, thetas: np.ndarray, delta: float) -> np.ndarray:
        """L̂(φ + Δφ) − L̂(φ) at the variant's runs [K, n] (nats)."""
        return self._loss(thetas, True, delta) - self._loss(thetas, True)

    def phi_slope(self, thetas: np.ndarray, delta: float = 0.0) -> np.ndarray:
        """∂L̂/∂φ at φ + Δφ at the variant's runs [K, n] (nats per unit of φ; negative for r > 1)."""
        up, down = self._loss(thetas, True, delta + STEP), self._loss(thetas, True, delta - STEP)
        return (up - down) / (2 * STEP)


def phi_slope_at(fit: LawFit, table: RunTable) -> np.ndarray:
    """∂L̂/∂φ at each run of ``table`` under ``fit`` (nats per unit of φ): what a change of φ does there."""
    design = design_for(table, False, fit.extension, fit.ext_ref)
    return BaseLaw(fit.theta, fit.theta[None], design, design, fit.law_form).phi_slope(fit.theta)[0]


def base_law(fit: LawFit, table: RunTable, pairs: Pairs, resamples: int, seed: int) -> BaseLaw:
    """``fit`` (the base arm's) at the pairs, with ``resamples`` random-effects bootstrap draws of it."""
    draws = fit.theta[None]
    if resamples >= 2:
        boot = random_effects_bootstrap(fit, table, resamples=resamples, seed=seed)
        samples = boot["samples"]
        cols = [samples[k] for k in PARAMS]
        if fit.extension is not None:
            cols.append(samples["ext"])
        draws = np.column_stack(cols)
    designs = [design_for(t, False, fit.extension, fit.ext_ref) for t in (pairs.base, pairs.variant)]
    return BaseLaw(fit.theta, draws, designs[0], designs[1], fit.law_form)


# ---------------------------------------------------------------------------------------------------------
# Fitting the effect models


def _columns(model: str, slope: np.ndarray) -> np.ndarray:
    """Design columns [n, k] of a linear(ised) model: offset (1), Δφ (∂L/∂φ)."""
    cols = []
    if "offset" in model:
        cols.append(np.ones(len(slope)))
    if "delta phi" in model:
        cols.append(slope)
    return np.column_stack(cols) if cols else np.zeros((len(slope), 0))


def fit_effect(model: str, excess: np.ndarray, law: BaseLaw, theta: np.ndarray) -> dict:
    """Gauss–Newton least squares of ``model`` on the pairs' excess under base-law θ → {"offset",
    "delta_phi", "fitted", "jacobian"} (absent coefficients 0)."""
    c, delta = 0.0, 0.0
    jac = _columns(model, law.phi_slope(theta, 0.0)[0])
    if model == "tokens only":
        return {"offset": 0.0, "delta_phi": 0.0, "fitted": np.zeros(len(excess)), "jacobian": jac}
    for _ in range(GN_ITER if "delta phi" in model else 1):
        fitted = c + (law.phi_effect(theta, delta)[0] if "delta phi" in model else np.zeros(len(excess)))
        jac = _columns(model, law.phi_slope(theta, delta)[0])
        step, *_ = np.linalg.lstsq(jac, excess - fitted, rcond=None)
        if "offset" in model:
            c += float(step[0])
        if "delta phi" in model:  # inside Δφ's box (compare.DELTA_BOUNDS): a flat direction cannot run off
            delta = float(np.clip(delta + step[-1], -3.0, 3.0))
    fitted = c + (law.phi_effect(theta, delta)[0] if "delta phi" in model else np.zeros(len(excess)))
    return {"offset": c, "delta_phi": delta, "fitted": fitted, "jacobian": jac}


def cluster_robust(jac: np.ndarray, resid: np.ndarray, cluster: np.ndarray) -> np.ndarray:
    """CR1 covariance of linear(ised) least-squares coefficients [k, k]: (X'X)⁻¹ Σ_g s_g s_g' (X'X)⁻¹ with
    s_g = X_g' e_g, scaled by G/(G − 1)·(n − 1)/(n − k)."""
    n, k = jac.shape
    groups = int(cluster.max()) + 1
    bread = np.linalg.pinv(jac.T @ jac)
    scores = np.zeros((groups, k))
    np.add.at(scores, cluster, jac * resid[:, None])
    scale = groups / max(groups - 1, 1) * (n - 1) / max(n - k, 1)
    return scale * bread @ (scores.T @ scores) @ bread


def noise_components(resid: np.ndarray, cluster: np.ndarray, k: int) -> dict[str, float]:
    """Method-of-moments variances of the residuals (nats²): an iid term from the spread within (r, width)
    clusters and a cluster term from the spread of the cluster means beyond it."""
    groups = int(cluster.max()) + 1
    counts = np.bincount(cluster, minlength=groups).astype(float)
    means = np.bincount(cluster, weights=resid, minlength=groups) / np.maximum(counts, 1)
    within = float(np.sum((resid - means[cluster]) ** 2))
    df_within = len(resid) - groups
    iid = within / df_within if df_within > 0 else float(np.sum(resid**2)) / max(len(resid) - k, 1)
    between = float(np.sum(counts * (means - np.average(means, weights=counts)) ** 2)) / max(groups - 1, 1)
    n_bar = (len(resid) - np.sum(counts**2) / len(resid)) / max(groups - 1, 1)
    return {"iid": iid, "cluster": max(0.0, (between - iid) / max(n_bar, 1e-12))}


# ---------------------------------------------------------------------------------------------------------
# Test statistics of the rule, vectorised over simulated tables (linear in ∂L/∂φ at Δφ = 0)


def _ols_t(y: np.ndarray, x: np.ndarray, cluster: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For tables y [S, n] on columns x [S, n, k] (one design per table): coefficients [S, k], their CR1 t
    statistics [S, k] and the residuals [S, n]."""
    s, n, k = x.shape
    groups = int(cluster.max()) + 1
    bread = np.linalg.pinv(np.einsum("sni,snj->sij", x, x))
    beta = np.einsum("sij,sj->si", bread, np.einsum("sni,sn->si", x, y))
    resid = y - np.einsum("sni,si->sn", x, beta)
    scores = np.zeros((s, groups, k))
    np.add.at(scores, (slice(None), cluster), x * resid[:, :, None])
    scale = groups / max(groups - 1, 1) * (n - 1) / max(n - k, 1)
    cov = scale * bread @ np.einsum("sgi,sgj->sij", scores, scores) @ bread
    return beta, beta / np.sqrt(np.maximum(np.einsum("sii->si", cov), 1e-300)), resid


def known_covariance(cluster: np.ndarray, sd: float, cluster_sd: float) -> np.ndarray:
    """Σ [n, n] of pair errors with a known iid sd and a known (r, width) cluster sd (nats)."""
    same = (cluster[:, None] == cluster[None, :]).astype(float)
    return sd**2 * np.eye(len(cluster)) + cluster_sd**2 * same


def known_sandwich(x: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Covariance (X'X)⁻¹X'ΣX(X'X)⁻¹ [..., k, k] of least-squares coefficients on columns ``x`` [..., n, k]
    (one design, or one per simulated table) when the errors' Σ [n, n] is known."""
    bread = np.linalg.pinv(np.einsum("...ni,...nj->...ij", x, x))
    return bread @ np.einsum("...ni,nm,...mj->...ij", x, known, x) @ bread


def statistics(
    excess: np.ndarray, slope: np.ndarray, cluster: np.ndarray, known: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """The rule's statistics for tables [S, n] with ∂L/∂φ [S, n]: the F ratio of ``offset + delta phi``
    against no excess ((RSS₀ − RSS)/2 over RSS/(n − 2); a cluster-robust Wald of two nearly collinear
    columns is erratic on a dozen clusters), and |t| (CR1) of c and of Δφ in ``offset + delta phi``.
    ``known``: the pairs' error covariance Σ taken as known (``known_covariance``; a few pairs, the demo):
    the F ratio's denominator is its mean variance and the t's SE (X'X)⁻¹X'ΣX(X'X)⁻¹ instead of CR1."""
    x = np.stack([np.ones_like(slope), slope], axis=2)
    beta, t, resid = _ols_t(excess, x, cluster)
    rss = np.sum(resid**2, axis=1)
    n = excess.shape[1]
    scale = np.maximum(rss / (n - 2), 1e-300) if known is None else float(np.trace(known)) / n
    ratio = (np.sum(excess**2, axis=1) - rss) / 2 / scale
    if known is not None:
        cov = known_sandwich(x, known)
        t = beta / np.sqrt(np.maximum(np.einsum("sii->si", cov), 1e-300))
    return {"any": ratio, "offset": np.abs(t[:, 0]), "delta_phi": np.abs(t[:, 1])}


def decide(stats: dict[str, np.ndarray], critical: dict[str, float]) -> np.ndarray:
    """The rule (module docstring) → model name per table [S]."""
    any_ = stats["any"] > critical["any"]
    off, phi = stats["offset"] > critical["offset"], stats["delta_phi"] > critical["delta_phi"]
    out = np.full(len(any_), UNATTRIBUTED, dtype=object)
    out[~any_] = "tokens only"
    out[any_ & off & ~phi] = "offset"
    out[any_ & ~off & phi] = "delta phi"
    out[any_ & off & phi] = "offset + delta phi"
    return out


@dataclass(frozen=True)
class Simulator:
    """Simulated pair tables: the truth's excess at the fit's θ plus a cluster and an iid error, analysed
    with a base-law bootstrap draw (so the base law's uncertainty enters every simulated statistic)."""

    token_fit: np.ndarray  # [n] token part under the fit's θ
    slope_fit: np.ndarray  # [n] ∂L/∂φ under the fit's θ
    token_draws: np.ndarray  # [K, n]
    slope_draws: np.ndarray  # [K, n]
    cluster: np.ndarray
    noise: dict[str, float]
    known: np.ndarray | None = None  # statistics with a known error covariance (``statistics``)

    def statistics(self, excess: np.ndarray, slope: np.ndarray) -> dict[str, np.ndarray]:
        return statistics(excess, slope, self.cluster, self.known)

    def tables(self, offset: float, delta_phi: float, count: int, rng: np.random.Generator):
        """(excess [S, n], slope [S, n]) of ``count`` simulated tables with this truth."""
        n, groups = len(self.cluster), int(self.cluster.max()) + 1
        errors = rng.normal(0.0, math.sqrt(self.noise["iid"]), (count, n))
        errors += rng.normal(0.0, math.sqrt(self.noise["cluster"]), (count, groups))[:, self.cluster]
        change = self.token_fit + offset + delta_phi * self.slope_fit + errors
        pick = rng.integers(0, len(self.token_draws), count)
        return change - self.token_draws[pick], self.slope_draws[pick]


REFERENCE_EFFECTS = (-0.08, 0.19)  # Δφ of the paper's two case studies, rounded (method §9.11): power at each


def truths(models: dict[str, dict], reference=REFERENCE_EFFECTS) -> list[dict]:
    """The truths simulated: each model at its fit to these pairs, and Δφ alone at each ``reference``
    value (the power to name a Δφ of that size on this design)."""
    rows = [
        {
            "label": name,
            "model": name,
            "offset": models[name]["offset"],
            "delta_phi": models[name]["delta_phi"],
        }
        for name in MODELS
    ]
    rows += [
        {"label": f"delta phi = {d:+.2f}", "model": "delta phi", "offset": 0.0, "delta_phi": float(d)}
        for d in reference
    ]
    return rows


def calibrate(sim: Simulator, truth: list[dict], critical: dict[str, float], count: int, seed: int) -> dict:
    """What the rule says when each row of ``truth`` is the truth: the share of ``count`` simulated tables
    per chosen model, wrong attribution (an offset named when the truth has none, a Δφ named when it has
    none, any effect named under ``tokens only``) and power (the true model named)."""
    rng = np.random.default_rng(seed)
    out = {}
    for row in truth:
        excess, slope = sim.tables(row["offset"], row["delta_phi"], count, rng)
        chosen = decide(sim.statistics(excess, slope), critical)
        shares = {m: float(np.mean(chosen == m)) for m in (*MODELS, UNATTRIBUTED)}
        has_off, has_phi = "offset" in row["model"], "delta phi" in row["model"]
        wrong = np.zeros(count, bool)
        for m in MODELS:
            if ("offset" in m and not has_off) or ("delta phi" in m and not has_phi):
                wrong |= chosen == m
        out[row["label"]] = {
            "model": row["model"],
            "truth": {"offset": row["offset"], "delta_phi": row["delta_phi"]},
            "chosen": shares,
            "wrong_attribution": float(wrong.mean()),
            "power": shares[row["model"]],
        }
    return out


def critical_values(sim: Simulator, truth: list[dict], count: int, seed: int) -> dict:
    """Each statistic's level-``TEST_LEVEL`` critical value from ``count`` tables simulated under its
    null: no excess for the joint test, the fitted offset model for Δφ, and for the offset every Δφ-only
    truth (the fitted and the reference sizes; the largest quantile): a large Δφ read through a base-law
    draw leaves a misfit an offset absorbs, and the test must not call that an offset."""
    rng = np.random.default_rng(seed)
    nulls = {
        "any": [row for row in truth if row["model"] == "tokens only"],
        "delta_phi": [row for row in truth if row["label"] == "offset"],
        "offset": [row for row in truth if row["model"] == "delta phi"],
    }
    crit, null_stats = {}, {}
    for stat, rows in nulls.items():
        for row in rows:
            excess, slope = sim.tables(row["offset"], row["delta_phi"], count, rng)
            values = sim.statistics(excess, slope)[stat]
            if float(np.quantile(values, 1 - TEST_LEVEL)) >= crit.get(stat, -math.inf):
                crit[stat], null_stats[stat] = float(np.quantile(values, 1 - TEST_LEVEL)), values
    return {"critical": crit, "null": null_stats}


# ---------------------------------------------------------------------------------------------------------
# The whole analysis


def analyse_pairs(
    base_table: RunTable,
    variant_table: RunTable,
    fit: LawFit,
    *,
    base_resamples: int = BASE_RESAMPLES,
    simulations: int = SIMULATIONS,
    seed: int = 0,
    seed_noise: dict | None = None,
) -> dict:
    """Effect models of the variant's loss change (module docstring) → a JSON-ready document:
    pairs, per-r means, the four models' fits and intervals, the tests, the chosen model, its calibration
    and the paired Δφ (the ``delta phi`` model's) with its interval. ``fit``: the base arm's law.

    ``seed_noise`` {"sd": a pair's iid error sd, "cluster_sd": an (r, width) cluster sd (nats), "df": the
    degrees of freedom of sd} (a few pairs, too few clusters for a cluster-robust variance: the demo):
    errors are taken to have that known covariance in the intervals (t on ``df``), the tests and the
    simulations, and the document says so (``errors``)."""
    pairs = match_pairs(base_table, variant_table)
    law = base_law(fit, base_table, pairs, base_resamples, seed)
    change = pairs.change
    token_fit = law.token_part(law.theta)[0]
    excess = change - token_fit
    groups = len(pairs.cluster_keys)
    t_df = max(groups - 1, 1) if seed_noise is None else int(seed_noise["df"])
    t_factor = float(t_dist.ppf(0.5 + CI_LEVEL / 2, t_df))
    models = {name: fit_effect(name, excess, law, law.theta) for name in MODELS}
    token_draws = law.token_part(law.draws)
    # base-law spread of each model's coefficients: refit on the same changes under each bootstrap draw
    for name, m in models.items():
        resid = excess - m["fitted"]
        m["rss"] = float(np.sum(resid**2))
        k = m["jacobian"].shape[1]
        m["parameters"] = k
        m["aic"] = float(len(excess) * math.log(max(m["rss"], 1e-300) / len(excess)) + 2 * k)
        if k == 0:
            m["ci"], m["se"] = {}, {}
            continue
        if seed_noise is None:
            cov = cluster_robust(m["jacobian"], resid, pairs.cluster)
        else:
            known = known_covariance(pairs.cluster, seed_noise["sd"], seed_noise["cluster_sd"])
            cov = known_sandwich(m["jacobian"], known)
        coefs = (["offset"] if "offset" in name else []) + (["delta_phi"] if "delta phi" in name else [])
        spread = np.array(
            [[fit_effect(name, change - token_draws[j], law, law.draws[j])[c] for c in coefs]
             for j in range(len(law.draws))]
        )  # fmt: skip
        base_var = spread.var(axis=0, ddof=1) if len(spread) > 1 else np.zeros(len(coefs))
        m["se"], m["se_pairs"], m["se_base_law"], m["ci"] = {}, {}, {}, {}
        for j, c in enumerate(coefs):
            se = math.sqrt(cov[j, j] + base_var[j])
            m["se"][c], m["se_pairs"][c], m["se_base_law"][c] = (
                se,
                math.sqrt(cov[j, j]),
                math.sqrt(base_var[j]),
            )
            m["ci"][c] = [m[c] - t_factor * se, m[c] + t_factor * se]
    full = models["offset + delta phi"]
    if seed_noise is None:
        noise, known = noise_components(excess - full["fitted"], pairs.cluster, 2), None
    else:
        noise = {"iid": seed_noise["sd"] ** 2, "cluster": seed_noise["cluster_sd"] ** 2}
        known = known_covariance(pairs.cluster, seed_noise["sd"], seed_noise["cluster_sd"])
    slopes = (law.phi_slope(law.theta)[0], token_draws, law.phi_slope(law.draws))
    sim = Simulator(token_fit, slopes[0], slopes[1], slopes[2], pairs.cluster, noise, known)
    truth = truths(models)
    nulls = critical_values(sim, truth, simulations, seed + 11)
    observed = {k: float(v[0]) for k, v in sim.statistics(excess[None], sim.slope_fit[None]).items()}
    p_values = {k: float((1 + np.sum(nulls["null"][k] >= observed[k])) / (1 + simulations)) for k in observed}
    chosen = str(decide({k: np.array([v]) for k, v in observed.items()}, nulls["critical"])[0])
    return {
        "pairs": _pair_rows(pairs, change, token_fit, excess, models),
        "n_pairs": len(pairs),
        "clusters": groups,
        "per_r": _per_r(pairs, change, token_fit, excess, models),
        "base_form": law.form,
        "base_resamples": len(law.draws) if len(law.draws) > 1 else 0,
        "models": {name: _public(m) for name, m in models.items()},
        "tests": {
            k: {"statistic": observed[k], "critical": nulls["critical"][k], "p": p_values[k]}
            for k in ("any", "offset", "delta_phi")
        },
        "chosen": chosen,
        "noise": {k: math.sqrt(v) for k, v in noise.items()},
        "errors": "cluster-robust over (r, width) clusters"
        if seed_noise is None
        else f"taken as known: pair sd {seed_noise['sd']:.4f} nats (the base's seed noise, {t_df} df) and an "
        f"(r, width) sd {seed_noise['cluster_sd']:.4f} nats (the base law's own misfit per (r, width)), too "
        "few pairs to estimate them",
        "calibration": calibrate(sim, truth, nulls["critical"], simulations, seed + 23),
        "predicted_shift": predicted_shifts(pairs, law, models),
        "simulations": simulations,
        "t_df": t_df,
        "method": "seed-matched pairs (budget, width, r, seed); token part from the base law; effect models "
        "by Gauss-Newton least squares; CI estimate +- t(G-1)*SE, SE^2 = CR1 cluster-robust over (r, width) "
        "clusters + variance across base-law random-effects bootstrap draws; tests: Monte Carlo p-values "
        "against tables simulated under each null (cluster + iid errors, base-law draw per table)",
    }


def predicted_shifts(pairs: Pairs, law: BaseLaw, models: dict[str, dict]) -> list[dict]:
    """Per (budget, r): N*(variant) / N*(base) of the iso-FLOP parabolas through what each effect model
    predicts at the pairs' runs (base law at the base's runs; base law + the model's excess at the
    variant's), where both vertices are bracketed: the optimum shift each model implies, to set beside the
    observed one."""
    from loopscale.fit.analyses import parabola_minima

    def minima(t: RunTable) -> dict:
        return {(m["budget"], m["r"]): m["n_star"] for m in parabola_minima(t) if m["bracketed"]}

    base = minima(dataclasses.replace(pairs.base, loss=law._loss(law.theta, False)[0]))
    variant_law = law._loss(law.theta, True)[0]
    per_model = {
        name: minima(dataclasses.replace(pairs.variant, loss=variant_law + m["fitted"]))
        for name, m in models.items()
    }
    rows = []
    for key in sorted(base):
        ratios = {name: v[key] / base[key] for name, v in per_model.items() if key in v}
        rows.append({"budget": key[0], "r": key[1], "ratio": ratios})
    return rows


def _public(m: dict) -> dict:
    return {k: v for k, v in m.items() if k not in ("fitted", "jacobian")}


def _pair_rows(pairs: Pairs, change, token, excess, models) -> list[dict]:
    rows = []
    for i in range(len(pairs)):
        rows.append(
            {
                "budget": float(pairs.base.budget[i]),
                "width": float(pairs.base.width[i]),
                "r": int(pairs.base.r[i]),
                "seed": None if math.isnan(pairs.base.seed[i]) else int(pairs.base.seed[i]),
                "base_loss": float(pairs.base.loss[i]),
                "variant_loss": float(pairs.variant.loss[i]),
                "token_ratio": float(pairs.variant.tokens[i] / pairs.base.tokens[i]),
                "change": float(change[i]),
                "token_part": float(token[i]),
                "excess": float(excess[i]),
                "predicted": {name: float(token[i] + m["fitted"][i]) for name, m in models.items()},
            }
        )
    return rows


def _per_r(pairs: Pairs, change, token, excess, models) -> dict[str, dict]:
    out = {}
    for r in sorted(set(pairs.base.r.tolist())):
        mask = pairs.base.r == r
        out[str(r)] = {
            "pairs": int(mask.sum()),
            "change": float(change[mask].mean()),
            "change_sd": float(change[mask].std(ddof=1)) if mask.sum() > 1 else None,
            "token_part": float(token[mask].mean()),
            "excess": float(excess[mask].mean()),
            "token_ratio": float(np.mean(pairs.variant.tokens[mask] / pairs.base.tokens[mask])),
            "predicted": {
                name: float(np.mean(token[mask] + m["fitted"][mask])) for name, m in models.items()
            },
        }
    return out


def with_base_fit(base_table: RunTable, form: str, restarts: int, seed: int) -> LawFit:
    """The base arm's own fit under ``form`` (the law the token part and ∂L/∂φ come from)."""
    from loopscale.fit.fitter import fit_law

    return fit_law(base_table, restarts=restarts, seed=seed, extension=None if form == "paper" else form)
