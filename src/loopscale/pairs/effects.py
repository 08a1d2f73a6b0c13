"""Is it φ? Effect models of a recipe change on matched pairs (issues 36, 43, 44; method §5.3).

A recipe change can lower the loss of a looped model in several ways the joint law tells apart: by buying
tokens or parameters (the variant trains on more tokens at the same FLOPs, or has other N), by making a loop
worth more (a change of φ, whose effect grows with r), by something the law does not describe that every
looped model shares (an offset), or by changing every model, plain ones included. A Δφ fitted to two arms
reads all of these as Δφ. This module asks the runs which it is, from seed-matched pairs: the variant's run
and the base's run at the same (budget, width, r, seed). The variant's own r = 1 runs (another run name than
the base's) pair too; without them the base's r = 1 runs are shared anchors, which assumes the recipe leaves
plain models alone (the document says so).

For every pair, the loss change (variant − base, nats) is split into the part the **base law** predicts
from the two runs' own N and D (``token_part``) and the **excess**. The excess is fitted under the models
built from three terms (``pairs.rule.TERMS``):

- ``every``: a constant on every pair, r = 1 included (only with r = 1 pairs);
- ``offset``: a constant on the looped pairs (beyond ``every``: the loop-specific constant);
- ``delta_phi``: L̂(φ + Δφ) − L̂(φ) at the variant's run (∝ ∂L/∂φ for small Δφ: it grows with r, 0 at r = 1).

Estimates: Gauss–Newton least squares on the pairs. SE² = a cluster-robust variance over the pairs' (r, width)
clusters (CR1) + the variance of the model's fitted change and the (r, width) pattern it leaves, refitted
under each of the base law's random-effects bootstrap draws (the token part and ∂L/∂φ rest on the base's
fit); the test reads it with the term at 0. Intervals and the rule that names a model: ``pairs.rule`` (one
calibrated test per term; the interval is its inversion, so a named term's interval excludes 0).

**What the design can identify** comes first: the offset and Δφ are not separable with one looped r, or where
their columns are nearly collinear over the looped pairs (cosine above ``SEPARABLE_COS``); Δφ then leaves the
rule, and a loop-specific excess is reported as that, not as a constant or a Δφ. A chosen model whose terms
cancel each other (each term's largest contribution over ``CANCEL_RATIO`` times the largest observed cluster
mean excess) is flagged and not named. **Shape.** Beyond the chosen model, the excess left is regressed on
log₁₀ width over the (r, width) cluster means: where that slope's interval excludes 0 the effect is not one
constant, and the verdict gives its profile instead.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from loopscale.errors import UserError
from loopscale.fit.bootstrap import random_effects_bootstrap
from loopscale.fit.fitter import LawFit, design_for
from loopscale.fit.law import PARAMS, PHI, log_prediction
from loopscale.fit.table import RunTable
from loopscale.pairs.results import DELTA_BOX, PairedEffects, PooledClusterSd, Separability
from loopscale.pairs.rule import (
    TERMS,
    TEST_LEVEL,
    UNATTRIBUTED,
    Simulator,
    at_boundary,
    base_law_parts,
    calibrate,
    calibrate_rule,
    cluster_means,
    cluster_robust,
    inverted_interval,
    known_covariance,
    known_sandwich,
    model_name,
    noise_components,
    submodels,
    t_critical,
    term_p,
    wild_cluster_p,
)
from loopscale.pairs.rule_results import NoiseComponents
from loopscale.pairs.shapes import (
    also_consistent,
    scope_trends,
    shape_table,
    width_trend,
    with_multipliers,
)

STEP = 1e-4  # central-difference step in φ for ∂L/∂φ
GN_ITER = 12  # Gauss–Newton steps (the Δφ effect is mildly convex in Δφ)
BASE_RESAMPLES = 200  # base-law bootstrap draws (token part and ∂L/∂φ under each)
SIMULATIONS = 2000  # simulated tables per truth (null distributions and the attribution table)
# Offset and Δφ count as separable where the cosine of their columns over the looped pairs is at most this
# (a variance inflation of 1/(1 − 0.995²) ≈ 100: each estimate's SE ten times what it would be alone).
SEPARABLE_COS = 0.995
WILD_DRAWS = 1999  # wild cluster bootstrap tables (the CR1 tests' second opinion)
CANCEL_RATIO = 3.0  # a term this many times the largest observed cluster-mean excess: terms cancelling


@dataclass(frozen=True)
class Pairs:
    """Seed-matched runs of the two arms (looped, and the variant's own r = 1 runs). Losses in nats;
    ``base`` and ``variant``: the runs as one-row-per-pair tables (same order)."""

    base: RunTable
    variant: RunTable
    cluster: np.ndarray  # int: index of the pair's (r, width) group
    cluster_keys: list[tuple[int, float]]

    def __len__(self) -> int:
        return len(self.base)

    @property
    def looped(self) -> np.ndarray:
        """bool [n]: the pair's r > 1."""
        return self.base.r > 1

    @property
    def change(self) -> np.ndarray:
        """Variant − base final loss per pair (nats)."""
        return self.variant.loss - self.base.loss


def match_pairs(base: RunTable, variant: RunTable) -> Pairs:
    """Every variant run with the base run at the same (budget, width, r, seed): the looped runs, and the
    variant's own r = 1 runs (a run name the base does not give that run; the base's own r = 1 runs listed
    in the variant are the shared anchors, not pairs). Unmatched runs are left out. A key held twice in one
    arm (replicates without a seed column) cannot be paired: UserError."""
    keys = {}
    for name, t in (("base", base), ("variant", variant)):
        if not (np.all(np.isfinite(t.width)) and t.has_budget):
            raise UserError(f"pairing runs needs 'budget' and 'width' columns; the {name} table lacks one")
        index: dict[tuple, int] = {}
        for i in range(len(t)):
            seed = -1.0 if math.isnan(t.seed[i]) else float(t.seed[i])
            key = (float(t.budget[i]), float(t.width[i]), int(t.r[i]), seed)
            if key in index:
                raise UserError(
                    f"the {name} table holds two runs at budget {key[0]:.3g}, width {key[1]:.0f}, "
                    f"r = {key[2]} with the same seed ({t.run[index[key]]}, {t.run[i]}): give a 'seed' column"
                )
            index[key] = int(i)
        keys[name] = index
    common = sorted(
        k
        for k in set(keys["base"]) & set(keys["variant"])
        if k[2] > 1 or str(base.run[keys["base"][k]]) != str(variant.run[keys["variant"][k]])
    )
    if len(common) < 4:
        raise UserError(
            f"only {len(common)} runs of the variant have a base run at the same (budget, width, r, seed): "
            "at least 4 matched pairs are needed to split a loss change into tokens and effects"
        )
    if not any(k[2] > 1 for k in common):
        raise UserError("no looped run of the variant has a base run at the same (budget, width, r, seed)")
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

    def log_slope(self, thetas: np.ndarray, what: str) -> np.ndarray:
        """∂L̂/∂ln m at the variant's runs [K, n] (nats) when N_eff → m·N_eff (``what`` "n": both N_once and
        N_rec scaled) or D → m·D ("d"): what a parameter or data multiplier does there."""
        design = self.variant_design
        up, down = (
            dataclasses.replace(design, n_once=design.n_once * math.exp(s), n_rec=design.n_rec * math.exp(s))
            if what == "n"
            else dataclasses.replace(design, log_tokens=design.log_tokens + s)
            for s in (STEP, -STEP)
        )
        thetas = np.atleast_2d(thetas)
        return (np.exp(log_prediction(thetas, up)) - np.exp(log_prediction(thetas, down))) / (2 * STEP)

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
        samples = boot.samples
        cols = [samples[k] for k in PARAMS]
        if fit.extension is not None:
            cols.append(samples["ext"])
        draws = np.column_stack(cols)
    designs = [design_for(t, False, fit.extension, fit.ext_ref) for t in (pairs.base, pairs.variant)]
    return BaseLaw(fit.theta, draws, designs[0], designs[1], fit.law_form)


# ---------------------------------------------------------------------------------------------------------
# Fitting the effect models


def _gauss_newton(terms, excess: np.ndarray, law: BaseLaw, thetas: np.ndarray, looped: np.ndarray) -> tuple:
    """Gauss–Newton least squares of the model of ``terms`` on excesses [K, n], the k-th under base-law
    θ_k (``thetas`` [K, P]), all at once → (constants [K, L] in ``TERMS`` order, Δφ [K], jacobian
    [K, n, k], fitted excess [K, n])."""
    count, n = excess.shape
    linear = [t for t in TERMS if t in terms and t != "delta_phi"]
    x = np.column_stack(
        [np.ones(n) if t == "every" else looped.astype(float) for t in linear] or [np.zeros((n, 0))]
    )
    phi = "delta_phi" in terms
    coef, delta = np.zeros((count, len(linear))), np.zeros(count)
    jac = np.broadcast_to(x, (count, *x.shape))

    def effect() -> np.ndarray:
        return coef @ x.T + (law.phi_effect(thetas, delta) if phi else 0.0)

    for _ in range((GN_ITER if phi else 1) if terms else 0):
        if phi:
            jac = np.concatenate([jac[..., : len(linear)], law.phi_slope(thetas, delta)[..., None]], -1)
        step = np.einsum("kin,kn->ki", np.linalg.pinv(jac), excess - effect())
        coef = coef + step[:, : len(linear)]
        if phi:  # inside Δφ's box (compare.DELTA_BOUNDS): a flat direction cannot run off
            delta = np.clip(delta + step[:, -1], -DELTA_BOX, DELTA_BOX)
    return coef, delta, jac, effect() + np.zeros((count, n))


def _fit_effect(terms, excess: np.ndarray, law: BaseLaw, theta: np.ndarray, looped: np.ndarray) -> dict:
    """``_gauss_newton`` of the model of ``terms`` on the pairs' excess [n] under base-law θ →
    {"every", "offset", "delta_phi" (absent terms 0), "fitted" [n], "jacobian" [n, k] (columns in
    ``TERMS`` order)}."""
    coef, delta, jac, fitted = _gauss_newton(terms, excess[None], law, theta[None], looped)
    out = dict.fromkeys(TERMS, 0.0)
    out.update({t: float(c) for t, c in zip([t for t in TERMS if t in terms and t != "delta_phi"], coef[0])})
    out["delta_phi"] = float(delta[0])
    return {**out, "fitted": fitted[0], "jacobian": jac[0]}


def _refits(terms, excess: np.ndarray, law: BaseLaw, looped: np.ndarray) -> np.ndarray:
    """[K, k]: the model of ``terms`` (columns in ``terms``' order) refitted to excesses [K, n], the k-th
    under the k-th base-law draw."""
    coef, delta, _, _ = _gauss_newton(terms, excess, law, law.draws, looped)
    return np.column_stack([*coef.T, delta] if "delta_phi" in terms else coef.T)


def _contributions(m: dict, terms, law: BaseLaw, looped: np.ndarray) -> dict[str, np.ndarray]:
    """Each term's part of the model's fitted excess per pair (nats)."""
    parts = {"every": m["every"] * np.ones(len(looped)), "offset": m["offset"] * looped.astype(float)}
    if "delta_phi" in terms:
        parts["delta_phi"] = law.phi_effect(law.theta, m["delta_phi"])[0]
    return {t: parts[t] for t in terms}


def separability(pairs: Pairs, slope: np.ndarray) -> Separability:
    """Whether this design tells an offset from Δφ: the looped r it holds, the cosine of the two columns
    over the looped pairs and the condition number of the pair of unit columns."""
    looped = pairs.looped
    rs = sorted({int(r) for r in pairs.base.r[looped]})
    g = slope[looped]
    cosine = float(abs(g.sum()) / math.sqrt(max(len(g) * float(np.sum(g**2)), 1e-300)))
    condition = math.sqrt((1 + cosine) / max(1 - cosine, 1e-300))
    reason = "one looped r" if len(rs) < 2 else ("collinear" if cosine > SEPARABLE_COS else None)
    return Separability(
        separable=reason is None,
        reason=reason,
        looped_r=tuple(rs),
        cosine=cosine,
        condition=condition,
        bound=SEPARABLE_COS,
    )


def _public(m: dict) -> dict:
    return {k: v for k, v in m.items() if k not in ("fitted", "jacobian")}


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
    size: float = TEST_LEVEL,
    critical: float | None = None,
    reference: RunTable | None = None,
) -> PairedEffects:
    """Effect models of the variant's loss change (module docstring) → ``PairedEffects``: pairs, per-r
    and per-width means, what the design can separate, every model's fit and intervals, the tests, the
    chosen model, the shape left beyond it, its calibration. ``fit``: the base arm's law.

    ``seed_noise`` {"sd": a pair's iid error sd, "cluster_sd": an (r, width) cluster sd (nats), "df": the
    degrees of freedom of sd} (a few pairs, too few clusters for a cluster-robust variance: the demo):
    errors are taken to have that known covariance in the intervals (t on ``df``), the tests and the
    simulations, and the document says so (``errors``). ``size``: each test's size (the intervals are at
    1 − ``size``): ``TEST_LEVEL``, or a look's in a sequential plan, whose boundary ``critical`` (|t|,
    ``pairs.sequential``) then replaces the simulated critical values (``rule.at_boundary``). ``reference``:
    the runs the variant is paired with where they are not the base's own (another arm at the same cells
    and seeds); the law, its bootstrap and the token part stay the base's."""
    pairs = match_pairs(base_table if reference is None else reference, variant_table)
    law = base_law(fit, base_table, pairs, base_resamples, seed)
    change, looped = pairs.change, pairs.looped
    token_fit = law.token_part(law.theta)[0]
    excess = change - token_fit
    groups = len(pairs.cluster_keys)
    t_df = max(groups - 1, 1) if seed_noise is None else int(seed_noise["df"])
    known = (
        None
        if seed_noise is None
        else known_covariance(pairs.cluster, seed_noise["sd"], seed_noise["cluster_sd"])
    )
    slope_fit = law.phi_slope(law.theta)[0]
    split = separability(pairs, slope_fit)
    terms = (("every",) if np.any(~looped) else ()) + ("offset", "delta_phi")
    available = tuple(t for t in terms if t != "delta_phi" or split.separable)
    token_draws = law.token_part(law.draws)
    fits = {m: _fit_effect(m, excess, law, law.theta, looped) for m in [(), *submodels(terms)]}
    full = fits[terms]
    noise = (
        noise_components(excess - full["fitted"], pairs.cluster, len(terms))
        if seed_noise is None
        else NoiseComponents(
            iid=seed_noise["sd"] ** 2,
            cluster=seed_noise["cluster_sd"] ** 2,
            cluster_upper=seed_noise["cluster_sd"] ** 2,
        )
    )
    sim = Simulator(
        token_fit,
        slope_fit,
        token_draws,
        law.phi_slope(law.draws),
        looped,
        pairs.cluster,
        {"iid": noise.iid, "cluster": noise.cluster_upper},
        t_df,
        known,
    )
    rng = np.random.default_rng(seed + 11)
    coefs = {m: {t: fits[m][t] for t in m} for m in submodels(terms)}
    rule = calibrate_rule(sim, available, coefs, simulations, rng, size)
    if critical is not None:
        rule = at_boundary(rule, critical)
    cluster_excess = np.abs(np.bincount(pairs.cluster, weights=excess) / np.bincount(pairs.cluster)).max()
    for m, f in fits.items():
        _intervals(f, m, excess, change, law, pairs, known, rule, t_df, sim)
        parts = _contributions(f, m, law, looped)
        f["cancelling"] = len(m) >= 2 and all(
            np.abs(v).max() > CANCEL_RATIO * cluster_excess for v in parts.values()
        )
    observed = {
        m: (
            np.array([[fits[m]["estimate"][t] for t in m]]),
            np.array([[max(fits[m]["se_test"][t], 1e-300) for t in m]]),
        )
        for m in submodels(available)
    }
    f_ratio = sim.any_excess(available, excess[None], slope_fit[None])
    chosen = str(rule.decide(f_ratio, observed)[0])
    chosen_terms = next((m for m in submodels(terms) if model_name(m) == chosen), ())
    cancelling = bool(chosen_terms and fits[chosen_terms]["cancelling"])
    if cancelling:
        chosen, chosen_terms = UNATTRIBUTED, ()
    resid = excess - fits[chosen_terms]["fitted"] if chosen_terms else excess
    left = noise_components(resid, pairs.cluster, len(chosen_terms))
    tests = {
        "any": {
            "statistic": float(f_ratio[0]),
            "critical": rule.any,
            "p": float((1 + np.sum(rule.null["any"] >= f_ratio[0])) / (1 + simulations)),
        }
    }
    for t in available:
        stat = abs(fits[available]["estimate"][t]) / max(fits[available]["se_test"][t], 1e-300)
        tests[t] = {
            "statistic": stat,
            "critical": rule.term[available][t],
            "p": term_p(stat, rule.null[t]),
        }
    names = {model_name(m): m for m in fits}
    shapes = shape_table(
        pairs,
        excess,
        change - token_draws,
        {
            "offset": np.broadcast_to(looped.astype(float), token_draws.shape),
            "delta phi": law.phi_slope(law.draws),
            "N multiplier": law.log_slope(law.draws, "n"),
            "D multiplier": law.log_slope(law.draws, "d"),
        },
        {
            "offset": looped.astype(float),
            "delta phi": slope_fit,
            "N multiplier": law.log_slope(law.theta, "n")[0],
            "D multiplier": law.log_slope(law.theta, "d")[0],
        },
    )
    alpha, beta = (float(v) for v in np.ravel(law.theta)[3:5])
    shapes = with_multipliers(shapes, alpha, beta)
    wild = None
    if seed_noise is None:  # a second opinion on the rule's tests of the full model's terms (CR1 only)
        x = sim.columns(available, slope_fit)
        ps = wild_cluster_p(excess, x, pairs.cluster, WILD_DRAWS, np.random.default_rng(seed + 31))
        wild = {"p": dict(zip(available, ps)), "draws": WILD_DRAWS, "weights": "webb"}
    return PairedEffects.from_dict({
        "pairs": _pair_rows(pairs, change, token_fit, excess, fits),
        "n_pairs": len(pairs),
        "looped_pairs": int(looped.sum()),
        "plain_pairs": int((~looped).sum()),
        "anchors": "paired" if np.any(~looped) else "shared",
        "clusters": groups,
        "per_r": _per_r(pairs, change, token_fit, excess, fits),
        "per_width": _per_width(pairs, change, excess),
        "base_form": law.form,
        "base_resamples": len(law.draws) if len(law.draws) > 1 else 0,
        "terms": list(terms),
        "available": list(available),
        "separability": split,
        "models": {name: {**_public(fits[m]), "terms": list(m)} for name, m in names.items()},
        "tests": tests,
        "wild_cluster": wild,
        "chosen": chosen,
        "chosen_terms": list(chosen_terms),
        "cancelling": cancelling,
        "trend": width_trend(pairs, resid, token_fit, token_draws),
        "scope_trends": scope_trends(pairs, excess, token_fit, token_draws),
        "shapes": shapes,
        "also_consistent": also_consistent(chosen_terms, shapes),
        "heterogeneity": {
            "cluster_sd": math.sqrt(left.cluster),
            "iid_sd": math.sqrt(left.iid),
            "i2": left.i2,
        },
        "noise": {k: math.sqrt(getattr(noise, k)) for k in ("iid", "cluster", "cluster_upper")},
        "errors": {"kind": "cluster-robust"}
        if seed_noise is None
        else {"kind": "known", "sd": seed_noise["sd"], "cluster_sd": seed_noise["cluster_sd"], "df": t_df},
        "calibration": {
            row.label: row.calibration
            for row in calibrate(sim, rule, coefs, simulations, np.random.default_rng(seed + 23))
        },
        "predicted_shift": _predicted_shifts(pairs, law, {model_name(m): f for m, f in fits.items()}),
        "simulations": simulations,
        "t_df": t_df,
        "ci_level": 1 - size,
    })  # fmt: skip


def _intervals(
    f: dict, m, excess, change, law: BaseLaw, pairs: Pairs, known, rule, t_df: int, sim: Simulator
) -> None:
    """Adds to fit ``f`` of model ``m``: "estimate", "se" (SE² = the pairs' CR1 or known-covariance variance
    + the variance of the model's fitted change and its residuals' cluster means refitted under every
    base-law draw),
    "se_pairs", "se_base_law", "se_test" (SE₀: the same with the term at 0, the SE its test reads;
    ``pairs.rule.base_law_parts``),
    "critical" (the rule's c where the rule tests this model, else ``t_critical``), "ci" (the values the
    test does not reject, ``pairs.rule.inverted_interval``: estimate ± c·SE for a constant), "rss",
    "parameters"."""
    resid = excess - f["fitted"]
    f["rss"] = float(np.sum(resid**2))
    f["parameters"] = len(m)
    keys = ("estimate", "se", "se_pairs", "se_base_law", "se_test", "critical", "ci")
    f.update({k: {} for k in keys})
    if not m:
        return
    cov = (
        cluster_robust(f["jacobian"], resid, pairs.cluster)
        if known is None
        else known_sandwich(f["jacobian"], known)
    )
    # the model's change and the (r, width) pattern it leaves, without the iid noise (CR1 above holds that)
    fitted = change - resid + cluster_means(resid, pairs.cluster)
    spread = _refits(m, fitted - sim.token_draws, law, pairs.looped)
    beta = np.array([f[t] for t in m])
    if len(spread) > 1:
        # refits with a term at 0: a constant's moves by its estimate exactly; Δφ's is refitted (nonlinear)
        at_zero = spread - beta
        if "delta_phi" in m:
            j = m.index("delta_phi")
            without = fitted - law.phi_effect(law.theta, f["delta_phi"])[0]  # φ-effect at 0 is 0
            at_zero[:, j] = _refits(m, without - sim.token_draws, law, pairs.looped)[:, j]
        # own: the secant from the term at 0 to the term at its estimate, per draw
        own = np.where(beta != 0, (spread - at_zero) / np.where(beta != 0, beta, 1.0), 1.0)
        null, cross, scale = base_law_parts(spread, own, beta)
    else:
        null = cross = scale = np.zeros(len(m))
    crit = np.array([rule.term.get(m, {}).get(t, t_critical(t_df, rule.level)) for t in m])
    se_test = np.sqrt(np.diag(cov) + null)
    lo, hi = inverted_interval(beta, se_test, cross, scale, crit)
    for j, t in enumerate(m):
        base_var = max(float(null[j] + 2 * beta[j] * cross[j] + beta[j] ** 2 * scale[j]), 0.0)
        f["estimate"][t], f["se"][t], f["critical"][t] = f[t], math.sqrt(cov[j, j] + base_var), crit[j]
        f["se_pairs"][t], f["se_base_law"][t] = math.sqrt(cov[j, j]), math.sqrt(base_var)
        f["se_test"][t] = float(se_test[j])
        f["ci"][t] = [float(max(lo[j], -DELTA_BOX)), float(min(hi[j], DELTA_BOX))]


def _predicted_shifts(pairs: Pairs, law: BaseLaw, models: dict[str, dict]) -> list[dict]:
    """Per (budget, r): N*(variant) / N*(base) of the iso-FLOP parabolas through what each effect model
    predicts at the pairs' runs (base law at the base's runs; base law + the model's excess at the
    variant's), where both vertices are bracketed: the optimum shift each model implies, to set beside the
    observed one."""
    from loopscale.fit.analyses import parabola_minima

    def minima(t: RunTable) -> dict:
        return {(m.budget, m.r): m.n_star for m in parabola_minima(t) if m.bracketed}

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


def _pair_rows(pairs: Pairs, change, token, excess, fits: dict) -> list[dict]:
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
                "predicted": {model_name(m): float(token[i] + f["fitted"][i]) for m, f in fits.items()},
            }
        )
    return rows


def _per_r(pairs: Pairs, change, token, excess, fits: dict) -> dict[str, dict]:
    out = {}
    for r in sorted(set(pairs.base.r.tolist())):
        mask = pairs.base.r == r
        out[str(int(r))] = {
            "pairs": int(mask.sum()),
            "change": float(change[mask].mean()),
            "change_sd": float(change[mask].std(ddof=1)) if mask.sum() > 1 else None,
            "token_part": float(token[mask].mean()),
            "excess": float(excess[mask].mean()),
            "token_ratio": float(np.mean(pairs.variant.tokens[mask] / pairs.base.tokens[mask])),
            "predicted": {
                model_name(m): float(np.mean(token[mask] + f["fitted"][mask])) for m, f in fits.items()
            },
        }
    return out


def _per_width(pairs: Pairs, change, excess) -> list[dict]:
    """Mean loss change and excess per (width, plain or looped) (nats): the profile along size."""
    rows = []
    for w in sorted(set(pairs.base.width.tolist())):
        for looped in (False, True):
            mask = (pairs.base.width == w) & (pairs.looped == looped)
            if mask.any():
                rows.append(
                    {
                        "width": float(w),
                        "looped": looped,
                        "pairs": int(mask.sum()),
                        "change": float(change[mask].mean()),
                        "excess": float(excess[mask].mean()),
                    }
                )
    return rows


def pooled_cluster_sd(
    base_table: RunTable,
    variant_table: RunTable,
    fit: LawFit,
    prior_sd: float,
    prior_df: float,
    reference: RunTable | None = None,
) -> PooledClusterSd:
    """The pairs' (r, width) cluster sd (nats) learnt from the pairs run so far with ``prior_sd`` (the base
    law's own misfit per (r, width)) as a prior worth ``prior_df`` clusters: τ² = (ν₀τ₀² + ν·τ̂²)/(ν₀ + ν),
    τ̂² the moment estimate from the residuals of ``offset + delta phi`` (``offset`` with one looped r) and
    ν = G − 1 where the clusters hold replicate pairs to tell a cluster from an iid error (else 0: the prior
    alone). ``estimate`` is None where ν = 0. ``reference``: as in ``analyse_pairs``."""
    pairs = match_pairs(base_table if reference is None else reference, variant_table)
    law = base_law(fit, base_table, pairs, 0, 0)
    excess = pairs.change - law.token_part(law.theta)[0]
    slope = law.phi_slope(law.theta)[0]
    columns = [np.ones(len(excess))] + ([slope] if separability(pairs, slope).separable else [])
    x = np.column_stack(columns)
    resid = excess - x @ np.linalg.lstsq(x, excess, rcond=None)[0]
    groups = len(pairs.cluster_keys)
    df = groups - 1 if len(pairs) > groups else 0
    estimate = noise_components(resid, pairs.cluster, x.shape[1]).cluster if df else None
    pooled = (prior_df * prior_sd**2 + (df * estimate if df else 0.0)) / (prior_df + df)
    return PooledClusterSd(
        cluster_sd=math.sqrt(pooled),
        estimate=None if estimate is None else math.sqrt(estimate),
        df=df,
        prior_sd=prior_sd,
        prior_df=prior_df,
    )


def with_base_fit(base_table: RunTable, form: str, restarts: int, seed: int) -> LawFit:
    """The base arm's own fit under ``form`` (the law the token part and ∂L/∂φ come from)."""
    from loopscale.fit.fitter import fit_law

    return fit_law(base_table, restarts=restarts, seed=seed, extension=None if form == "paper" else form)
