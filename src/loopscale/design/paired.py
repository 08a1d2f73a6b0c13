"""Which variant runs to train against a published base (``loopscale design --reuse BASE``, the demo).

A recipe's effect is read off seed-matched pairs (``fit.effects``): the variant rerun at a (budget, width, r,
seed) the base already ran. What decides whether the pairs can tell a change of φ from a constant offset is
the spread of ∂L/∂φ across the chosen cells (a change of φ moves r = 8 more than r = 2; an offset moves both
alike): with iid pair errors of sd σ, the Δφ of ``offset + delta phi`` has

    SE = σ / √Σ (g_i − ḡ)²,    g_i = ∂L̂/∂φ at cell i under the base law (nats per unit of φ).

``pick_pairs`` adds cells greedily, each time the one that adds most of Σ(g − ḡ)² per unit of cost (the
base run's measured wall time at that cell, else its FLOPs), until a count or a target precision is
reached. σ² = 2·(the base's seed noise)² (``fit.lawcheck.replicate_noise``; both runs of a pair are noisy)
+ the base law's (r, width) misfit variance (REML, in nats): a recipe effect that differs between (r, width)
groups as much as the law's misfit does (on the published hyperconnections arm it did: 0.022 nats).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy.stats import norm

from loopscale.errors import UserError
from loopscale.fit.effects import TEST_LEVEL
from loopscale.fit.table import RunTable

Z95 = float(norm.ppf(0.975))


def _spread(g: np.ndarray) -> float:
    return float(np.sum((g - g.mean()) ** 2)) if len(g) > 1 else 0.0


def pick_pairs(
    base: RunTable,
    slope: np.ndarray,
    cost: np.ndarray,
    sigma_pair: float,
    *,
    count: int | None = None,
    target_half_width: float | None = None,
) -> dict:
    """Greedy choice among the base's looped runs (``slope``: ∂L̂/∂φ per run, ``cost`` per run) → {"runs"
    (row indices), "se" (Δφ beyond an offset), "se_alone" (Δφ of the Δφ-only model), "half_width" (95%,
    z), "cost", "flops"}. Stops at ``count`` runs or when the half-width reaches ``target_half_width``."""
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
    # the first two: the pair with the most spread per cost
    best, first = -1.0, (candidates[0], candidates[1])
    for a in candidates:
        for b in candidates:
            if a < b and (g[a] - g[b]) ** 2 / 2 / (c[a] + c[b]) > best:
                best, first = (g[a] - g[b]) ** 2 / 2 / (c[a] + c[b]), (a, b)
    chosen = list(first)

    def half_width(rows: list[int]) -> float:
        spread = _spread(g[rows])
        return math.inf if spread <= 0 else Z95 * sigma_pair / math.sqrt(spread)

    while True:
        if count is not None and len(chosen) >= count:
            break
        if count is None and half_width(chosen) <= target_half_width:
            break
        rest = [i for i in candidates if i not in chosen]
        if not rest:
            if count is None:
                raise UserError(
                    f"all {len(candidates)} looped runs of the base reach a delta phi half-width of "
                    f"{half_width(chosen):.3f} at best (target {target_half_width}): ask for less, or add "
                    "base runs"
                )
            break
        now = _spread(g[chosen])
        gains = [(_spread(g[[*chosen, i]]) - now) / c[i] for i in rest]
        chosen.append(rest[int(np.argmax(gains))])
    rows = sorted(chosen, key=lambda i: (base.budget[i], base.r[i], base.width[i], base.seed[i]))
    spread = _spread(g[rows])
    se = math.inf if spread <= 0 else sigma_pair / math.sqrt(spread)
    return {
        "runs": rows,
        "se": se,
        "se_alone": sigma_pair / math.sqrt(float(np.sum(g[rows] ** 2))),
        "half_width": Z95 * se,
        "cost": float(c[rows].sum()),
        "flops": float(base.budget[rows].sum()),
    }


def power_beyond_offset(delta_phi: float, se: float) -> float:
    """Power of the test of Δφ beyond an offset (two-sided, at the rule's ``TEST_LEVEL``) for a true Δφ."""
    if not math.isfinite(se) or se <= 0:
        return 0.0
    z = float(norm.ppf(1 - TEST_LEVEL / 2))
    return float(norm.cdf(abs(delta_phi) / se - z) + norm.cdf(-abs(delta_phi) / se - z))


# The recipes of the paper's two case studies, as the sweep-group keys that make a variant (method §9.11).
RECIPES = {
    "hyperconnections": {"model": {"injection": "hyperconnect"}},
    "truncated-bptt": {"bptt": "ceil_half"},
}


def read_base(folder: Path) -> tuple[RunTable, np.ndarray, dict]:
    """A published base sweep folder → (its results table, each run's cost: measured wall seconds where the
    table has them, else its FLOPs, and its sweep spec as a mapping)."""
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
    return table, cost, load_yaml(spec_path)


def plan_pairs(
    folder: Path, *, count: int | None = None, target_half_width: float | None = None, restarts: int = 200,
    seed: int = 0,
) -> dict:  # fmt: skip
    """The base's law (paper form), its seed noise and the pairs ``pick_pairs`` chooses → a plan dict:
    {"table", "fit", "noise" (replicate_noise), "sigma_pair", "picked", "spec", "cost_unit"}."""
    from loopscale.fit.bootstrap import effect_groups, law_jacobian, variance_components
    from loopscale.fit.effects import phi_slope_at
    from loopscale.fit.fitter import fit_law
    from loopscale.fit.lawcheck import replicate_noise

    table, cost, spec = read_base(folder)
    noise = replicate_noise(table)
    if noise is None:
        raise UserError(f"the base {folder} has no replicate seeds: the pairs' noise cannot be estimated")
    fit = fit_law(table, restarts=restarts, seed=seed)
    sigma_pair = math.sqrt(2.0) * noise["sigma"]
    # an effect of the recipe that differs between (r, width) groups: as large as the base law's own misfit
    # per (r, width) (REML, log loss → nats at the looped runs' mean loss); on the published hyperconnections
    # arm the pairs' (r, width) sd was 0.022 nats, this gives 0.022 for laptop-factorial
    resid = np.log(table.loss) - np.log(fit.predict_table(table))
    components = variance_components(resid, effect_groups(table), law_jacobian(fit, table))
    cluster_sd = math.sqrt(components["r_width"]) * float(np.mean(table.loss[table.r > 1]))
    picked = pick_pairs(
        table, phi_slope_at(fit, table), cost, math.hypot(sigma_pair, cluster_sd), count=count,
        target_half_width=target_half_width,
    )  # fmt: skip
    unit = "s" if not np.array_equal(cost, table.budget) else "FLOPs"
    return {"table": table, "fit": fit, "noise": noise, "sigma_pair": sigma_pair, "cluster_sd": cluster_sd,
            "picked": picked, "spec": spec, "cost_unit": unit}  # fmt: skip


def variant_spec(plan: dict, recipe: str, name: str) -> dict:
    """A sweep spec (mapping) of the variant runs at the picked cells: the base's template, recipe and data,
    one group per pair so each run keeps the base run's seed."""
    if recipe not in RECIPES:
        raise UserError(f"unknown recipe {recipe!r}; choose one of {', '.join(RECIPES)}")
    t, base = plan["table"], plan["spec"]
    groups = [
        {
            "name": f"pair{k}-s{int(t.seed[i])}",
            "rs": [int(t.r[i])],
            "seeds": [int(t.seed[i])],
            "grid": [{"budget": float(t.budget[i]), "widths": [int(t.width[i])]}],
            **RECIPES[recipe],
        }
        for k, i in enumerate(plan["picked"]["runs"])
    ]
    keys = ("batch_tokens", "model", "train", "nproc")
    return {"name": name, **{k: base[k] for k in keys if k in base}, "groups": groups}


def plan_lines(plan: dict) -> list[str]:
    """The picked cells and what they can tell, as text."""
    t, p = plan["table"], plan["picked"]
    cells = ", ".join(
        f"C = {t.budget[i]:.3g} d = {t.width[i]:.0f} r = {t.r[i]} seed {t.seed[i]:.0f}" for i in p["runs"]
    )
    cost = (
        f"{p['cost'] / 3600:.2f} h of single-thread runs (the base's measured wall time at these cells; "
        f"≈ {p['cost'] / 2 / 3600:.2f} h on 2 cores as 2 workers × 1 thread)"
        if plan["cost_unit"] == "s"
        else f"{p['cost']:.3g} FLOPs"
    )
    return [
        f"{len(p['runs'])} variant runs paired with the base's: {cells}",
        f"training FLOPs {p['flops']:.3g}; cost {cost}",
        f"predicted SE of delta phi beyond an offset {p['se']:.3f} (95% half-width {p['half_width']:.3f}); "
        f"delta phi alone {p['se_alone']:.3f}; pair noise sd {plan['sigma_pair']:.4f} nats (sqrt 2 x the "
        f"base's seed noise {plan['noise']['sigma']:.4f} on {plan['noise']['df']} df) and an (r, width) sd "
        f"{plan['cluster_sd']:.4f} nats (the base law's own misfit per (r, width))",
        "power to tell delta phi from an offset (4% test): "
        + ", ".join(f"{d:+.2f}: {power_beyond_offset(d, p['se']):.2f}" for d in (-0.08, 0.19)),
    ]
