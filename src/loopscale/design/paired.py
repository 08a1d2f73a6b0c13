"""Which variant runs to train against a published base (``loopscale design --reuse BASE``, the demo).

A recipe's effect is read off seed-matched pairs (pairs.effects): the variant rerun at a (budget, width, r,
seed) the base already ran. What decides whether the pairs can tell a change of φ from a constant offset is
the spread of ∂L/∂φ across the chosen cells (a change of φ moves r = 8 more than r = 2; an offset moves both
alike). The pair errors are those pairs.effects takes as known for a few pairs: an iid sd σ per pair and an
sd τ shared by the pairs of one (r, width) group (a recipe effect that differs between groups), Σ = σ²I +
τ²ZZᵀ. The least-squares fit of ``offset + delta phi`` on columns X = [1, g] then has

    Var = (XᵀX)⁻¹ XᵀΣX (XᵀX)⁻¹,    g_i = ∂L̂/∂φ at cell i under the base law (nats per unit of φ),

which for τ = 0 is σ² / Σ(g_i − ḡ)²; a second run in a group already chosen (another budget or seed) does
not average that group's τ away, so spread across groups counts. ``pick_pairs`` adds cells greedily, each
time the one that adds most precision (1/Var of Δφ beyond an offset) per unit of cost (the base run's
measured wall time at that cell, else its FLOPs), until a count or a target precision is reached. σ² =
2·(the base's seed noise)² (``fit.lawcheck.replicate_noise``; both runs of a pair are noisy); τ = the base
law's (r, width) misfit sd (REML, in nats), as large as a group-dependent recipe effect was on the published
hyperconnections arm (0.022 nats). The base law's own uncertainty, which ``pairs.effects`` adds to the
analysed interval, is not in this design SE.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

from loopscale.config import from_dict
from loopscale.design.results import PairPick
from loopscale.errors import UserError
from loopscale.fit.bootstrap import effect_groups
from loopscale.fit.results import RunNoise
from loopscale.fit.table import RunTable
from loopscale.pairs.rule import TEST_LEVEL, known_covariance, known_sandwich
from loopscale.recipes import Recipe, check_recipe
from loopscale.sweep.spec import SweepSpec

if TYPE_CHECKING:
    from loopscale.fit.fitter import LawFit


@dataclass(frozen=True)
class BaseSweep:
    """A published base sweep (``read_base``): its results table, each run's cost (measured wall seconds
    where the table has them, else its FLOPs) and its sweep spec as the YAML mapping it was read from."""

    table: RunTable
    cost: np.ndarray
    spec: dict[str, Any]


@dataclass(frozen=True)
class PairPlan:
    """``plan_pairs``: the base's table, its law (paper form, a ``LawFit``), seed noise, the pair errors'
    iid sd and (r, width) sd (nats), the pairs picked, the base's spec mapping and the unit of the cost
    (``"s"``: measured wall seconds, else training FLOPs)."""

    table: RunTable
    fit: LawFit
    noise: RunNoise
    sigma_pair: float
    cluster_sd: float
    picked: PairPick
    spec: dict[str, Any]
    cost_unit: Literal["s", "FLOPs"]


def _variances(g: np.ndarray, cov: np.ndarray) -> tuple[float, float]:
    """Var of Δφ beyond an offset (columns [1, g]) and of Δφ alone (column g) under pair errors ``cov``;
    inf where the cells cannot separate the two (no spread of g)."""
    x = np.column_stack([np.ones_like(g), g])
    gram = x.T @ x
    if len(g) < 2 or np.linalg.det(gram) <= 1e-12 * np.trace(gram) ** 2:
        beyond = math.inf
    else:
        beyond = float(known_sandwich(x, cov)[1, 1])
    return beyond, float(g @ cov @ g) / float(g @ g) ** 2


def pick_pairs(
    base: RunTable,
    slope: np.ndarray,
    cost: np.ndarray,
    sigma_pair: float,
    *,
    cluster_sd: float = 0.0,
    df: int | None = None,
    count: int | None = None,
    target_half_width: float | None = None,
) -> PairPick:
    """Greedy choice among the base's looped runs (``slope``: ∂L̂/∂φ per run in nats, ``cost`` per run; pair
    errors: iid ``sigma_pair`` plus ``cluster_sd`` per (r, width) group, nats) → ``PairPick``: the rows, SE
    of Δφ beyond an offset and of the Δφ-only model, the 95% half-width (t on ``df`` degrees of freedom,
    normal if None), cost and FLOPs. Stops at ``count`` runs or when the half-width reaches
    ``target_half_width``."""
    if count is None and target_half_width is None:
        raise ValueError("give count or target_half_width")
    if target_half_width is not None and not target_half_width > 0:
        raise UserError(f"the target half-width of delta phi must be positive, got {target_half_width}")
    candidates = [int(i) for i in np.flatnonzero(base.r > 1)]
    if len(candidates) < 2 or len({int(base.r[i]) for i in candidates}) < 2:
        raise UserError(
            "the base needs looped runs at two loop counts at least to tell delta phi from an offset"
        )
    g, c = np.asarray(slope, float), np.asarray(cost, float)
    # the (r, width) groups the base law's misfit τ was estimated on
    cluster = effect_groups(base).r_width.argmax(axis=1)
    quantile = float(norm.ppf(0.975) if df is None else student_t.ppf(0.975, df))

    def variances(rows: list[int]) -> tuple[float, float]:
        return _variances(g[rows], known_covariance(cluster[rows], sigma_pair, cluster_sd))

    def precision(rows: list[int]) -> float:
        return 1.0 / variances(rows)[0]

    # the first two: the pair with the most precision per cost
    best, first = -1.0, (candidates[0], candidates[1])
    for a in candidates:
        for b in candidates:
            if a < b and (gain := precision([a, b]) / (c[a] + c[b])) > best:
                best, first = gain, (a, b)
    chosen = list(first)

    def half_width(rows: list[int]) -> float:
        return quantile * math.sqrt(variances(rows)[0])

    while True:
        if count is not None and len(chosen) >= count:
            break
        if count is None and half_width(chosen) <= target_half_width:
            break
        rest = [i for i in candidates if i not in chosen]
        if not rest:
            if count is None:
                groups = len(set(cluster[candidates]))
                bound = (
                    f"; its {groups} (r, width) groups bound it, since a group-level effect of sd "
                    f"{cluster_sd:.4f} nats does not average out over budgets or seeds"
                    if cluster_sd > 0
                    else ""
                )
                raise UserError(
                    f"all {len(candidates)} looped runs of the base reach a delta phi half-width of "
                    f"{half_width(chosen):.3f} at best (target {target_half_width}){bound}: ask for less, or "
                    "add base runs at other widths or loop counts"
                )
            break
        now = precision(chosen)
        gains = [(precision([*chosen, i]) - now) / c[i] for i in rest]
        chosen.append(rest[int(np.argmax(gains))])
    rows = sorted(chosen, key=lambda i: (base.budget[i], base.r[i], base.width[i], base.seed[i]))
    beyond, alone = variances(rows)
    return PairPick(
        runs=tuple(rows),
        order=tuple(chosen),  # greedy: each cell adds most precision per cost given those before
        se=math.sqrt(beyond),
        se_alone=math.sqrt(alone),
        half_width=quantile * math.sqrt(beyond),
        cost=float(c[rows].sum()),
        flops=float(base.budget[rows].sum()),
    )


def power_beyond_offset(delta_phi: float, se: float) -> float:
    """Power of the test of Δφ beyond an offset (two-sided, at the rule's ``TEST_LEVEL``) for a true Δφ."""
    if not math.isfinite(se) or se <= 0:
        return 0.0
    z = float(norm.ppf(1 - TEST_LEVEL / 2))
    return float(norm.cdf(abs(delta_phi) / se - z) + norm.cdf(-abs(delta_phi) / se - z))


def read_base(folder: Path) -> BaseSweep:
    """A published base sweep folder → its results table, each run's cost and its spec (``BaseSweep``)."""
    from loopscale.config import load_yaml
    from loopscale.fit.table import load_table
    from loopscale.sweep.results import read_results

    table_path, spec_path = folder / "results.csv", folder / "sweep.yaml"
    for path in (table_path, spec_path):
        if not path.is_file():
            raise UserError(
                f"the base {folder} has no {path.name}: give a sweep folder with results.csv and sweep.yaml"
            )
    rows = [row for row in read_results(table_path) if str(row.get("status") or "ok") == "ok"]
    table = load_table(rows)
    wall = np.array([float(row.get("wall_time_s") or math.nan) for row in rows])
    cost = wall if np.all(np.isfinite(wall) & (wall > 0)) else table.budget.copy()
    return BaseSweep(table, cost, load_yaml(spec_path))


def plan_pairs(
    folder: Path, *, count: int | None = None, target_half_width: float | None = None, restarts: int = 200,
    seed: int = 0,
) -> PairPlan:  # fmt: skip
    """The base's law (paper form), its seed noise and the pairs ``pick_pairs`` chooses (``PairPlan``)."""
    from loopscale.fit.bootstrap import law_jacobian, variance_components
    from loopscale.fit.fitter import fit_law
    from loopscale.fit.lawcheck import replicate_noise
    from loopscale.pairs.effects import phi_slope_at

    base = read_base(folder)
    table, cost = base.table, base.cost
    noise = replicate_noise(table)
    if noise is None:
        raise UserError(f"the base {folder} has no replicate seeds: the pairs' noise cannot be estimated")
    fit = fit_law(table, restarts=restarts, seed=seed)
    sigma_pair = math.sqrt(2.0) * noise.sigma
    # an effect of the recipe that differs between (r, width) groups: as large as the base law's own misfit
    # per (r, width) (REML, log loss → nats at the looped runs' mean loss); on the published hyperconnections
    # arm the pairs' (r, width) sd was 0.022 nats, this gives 0.022 for laptop-factorial
    resid = np.log(table.loss) - np.log(fit.predict_table(table))
    components = variance_components(resid, effect_groups(table), law_jacobian(fit, table))
    cluster_sd = math.sqrt(components["r_width"]) * float(np.mean(table.loss[table.r > 1]))
    picked = pick_pairs(
        table, phi_slope_at(fit, table), cost, sigma_pair, cluster_sd=cluster_sd, df=noise.df, count=count,
        target_half_width=target_half_width,
    )  # fmt: skip
    unit = "s" if not np.array_equal(cost, table.budget) else "FLOPs"
    return PairPlan(table, fit, noise, sigma_pair, cluster_sd, picked, base.spec, unit)


def variant_spec(plan: PairPlan, recipe: Recipe, name: str, runs: list[int] | None = None) -> SweepSpec:
    """The sweep of the variant runs at the picked cells (``runs``: these rows of the base table instead, in
    this order): the base's template, recipe and data changed by ``recipe``, one group per pair so each run
    keeps the base run's seed. An override the base's runs cannot take is a one-line UserError naming it."""
    t, base = plan.table, plan.spec
    rows = plan.picked.runs if runs is None else runs
    check_recipe(recipe, base, sorted({(int(t.width[i]), int(t.r[i])) for i in rows}))
    changes = recipe.changes()
    groups = [
        {
            "name": f"pair{k}-s{int(t.seed[i])}",
            "rs": [int(t.r[i])],
            "seeds": [int(t.seed[i])],
            "grid": [{"budget": float(t.budget[i]), "widths": [int(t.width[i])]}],
            **changes,
        }
        for k, i in enumerate(rows)
    ]
    keys = ("batch_tokens", "model", "train", "nproc")
    data = {"name": name, **{k: base[k] for k in keys if k in base}, "groups": groups}
    return from_dict(SweepSpec, data, name)


def plan_lines(plan: PairPlan) -> list[str]:
    """The picked cells and what they can tell, as text."""
    t, p = plan.table, plan.picked
    cells = ", ".join(
        f"C = {t.budget[i]:.3g} d = {t.width[i]:.0f} r = {t.r[i]} seed {t.seed[i]:.0f}" for i in p.runs
    )
    cost = (
        f"{p.cost / 3600:.2f} h of single-thread runs (the base's measured wall time at these cells; "
        f"≈ {p.cost / 2 / 3600:.2f} h on 2 cores as 2 workers × 1 thread)"
        if plan.cost_unit == "s"
        else f"{p.cost:.3g} FLOPs"
    )
    return [
        f"{len(p.runs)} variant runs paired with the base's: {cells}",
        f"training FLOPs {p.flops:.3g}; cost {cost}",
        f"predicted SE of delta phi beyond an offset {p.se:.3f} "
        f"(95% half-width {p.half_width:.3f}, t on {plan.noise.df} df; "
        "the base law's own uncertainty comes on top); "
        f"delta phi alone {p.se_alone:.3f}; pair noise sd {plan.sigma_pair:.4f} nats (sqrt 2 x the "
        f"base's seed noise {plan.noise.sigma:.4f} on {plan.noise.df} df) and an (r, width) sd "
        f"{plan.cluster_sd:.4f} nats (the base law's own misfit per (r, width))",
        "power to tell delta phi from an offset (4% test): "
        + ", ".join(f"{d:+.2f}: {power_beyond_offset(d, p.se):.2f}" for d in (-0.08, 0.19)),
    ]
