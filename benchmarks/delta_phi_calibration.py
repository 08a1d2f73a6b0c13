"""Is ``loopscale compare``'s Δφ calibrated? Coverage, false "resolved" and power on the laptop case studies.

Tables are simulated on the actual design: the base arm's runs are the `laptop` preset's (its d = 80 column
included), the variant's looped runs are the case-study preset's (``laptop-truncated-bptt``: its tokens, or
``laptop-hyperconnections``: its N_rec), the r = 1 anchors are the base's. Truth: the paper's law fitted to
the real base table (``--base``), the variant with φ + Δφ. Errors are shaped like the real residuals: REML
variance components of that fit's log-loss residuals ((r, width) across budgets, (budget, r) cell, iid):

- ``independent``: each arm draws its own effects (the variant's misfit unrelated to the base's; the
  hardest case for Δφ);
- ``shared``: the (r, width) and cell effects drawn once and applied to both arms, the iid part per arm (a
  misfit of the law that the recipe change leaves alone).

Each table goes through ``delta_phi_shared`` (the shared-nuisance fit, its random-effects bootstrap and
F-test) exactly as ``loopscale compare`` runs it. Printed per scenario: how often the interval covers the true
Δφ, how often "resolved" is said (at Δφ = 0: false; else: power), the median interval width.
Goal: coverage ≥ 90% in every scenario and false "resolved" ≤ 5% at Δφ = 0.

    python benchmarks/delta_phi_calibration.py --tables 40 --out results/law-check/delta-phi-calibration.json

``--out`` is rewritten after every scenario ("complete": false until the last one), so a stopped run keeps
what it finished.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from loopscale.fit import load_table
from loopscale.fit.bootstrap import (
    EffectGroups,
    effect_groups,
    law_jacobian,
    simulate_tables,
    variance_components,
)
from loopscale.fit.fitter import fit_law
from loopscale.fit.table import RunTable
from loopscale.io import atomic_write_json
from loopscale.pairs.compare import delta_phi_shared, make_arms
from loopscale.sweep import plan_sweep, preset

SCENARIOS = (  # (variant preset, true Δφ, error structure)
    ("laptop-truncated-bptt", 0.0, "independent"),
    ("laptop-truncated-bptt", -0.08, "independent"),
    ("laptop-hyperconnections", 0.0, "independent"),
    ("laptop-hyperconnections", 0.19, "independent"),
    ("laptop-truncated-bptt", 0.0, "shared"),
    ("laptop-truncated-bptt", -0.08, "shared"),
)


def design_table(preset_name: str, looped_only: bool, prefix: str) -> RunTable:
    """The planned runs of a preset as a table (losses 1.0, replaced by the simulation)."""
    rows = [
        {**run.row(), "run": prefix + run.name, "loss": 1.0}
        for run in plan_sweep(preset(preset_name))
        if not looped_only or run.r > 1
    ]
    return load_table(rows)


def simulate(base: RunTable, variant: RunTable, fit, delta: float, components: dict, structure: str, rng):
    """One (base, variant) pair of tables: the law at ``fit`` (φ + ``delta`` on the variant's looped runs)
    plus random effects of ``components``, per arm or shared (``structure``)."""
    shifted = dataclasses.replace(fit, theta=fit.theta + np.eye(len(fit.theta))[5] * delta)
    log_pred = np.log(np.concatenate([fit.predict_table(base), shifted.predict_table(variant)]))
    arm = np.r_[np.zeros(len(base), int), np.ones(len(variant), int)] * (structure == "independent")
    r, width, budget = (
        np.concatenate([getattr(base, c), getattr(variant, c)]) for c in ("r", "width", "budget")
    )
    groups = EffectGroups.from_keys(
        [(a, int(k), float(w)) for a, k, w in zip(arm, r, width)],
        [(a, float(c), int(k)) for a, c, k in zip(arm, budget, r)],
    )
    loss = np.exp(simulate_tables(log_pred, groups, components, 1, rng)[0])
    n = len(base)
    return dataclasses.replace(base, loss=loss[:n]), dataclasses.replace(variant, loss=loss[n:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="results/laptop-factorial/results.csv", help="the real base table")
    p.add_argument("--tables", type=int, default=40, help="simulated tables per scenario")
    p.add_argument("--resamples", type=int, default=100, help="bootstrap resamples per table")
    p.add_argument("--restarts", type=int, default=50)
    p.add_argument("--bootstrap-restarts", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--scenarios", type=int, nargs="+", help="run only these scenarios (indices into SCENARIOS, from 0)"
    )
    p.add_argument("--out")
    args = p.parse_args()
    real = load_table(args.base)
    fit = fit_law(real, restarts=500, seed=0)
    resid = np.log(real.loss) - np.log(fit.predict_table(real))
    components = variance_components(resid, effect_groups(real), law_jacobian(fit, real))
    print(
        f"truth: the paper's law fitted to {args.base} ({len(real)} runs): phi {fit.phi:.3f}; error sd (log "
        "loss): " + ", ".join(f"{k} {v**0.5:.4f}" for k, v in components.items())
    )
    base = design_table("laptop", looped_only=False, prefix="b-")
    summary = []
    start = time.perf_counter()
    chosen = [SCENARIOS[i] for i in args.scenarios] if args.scenarios else SCENARIOS
    for preset_name, delta, structure in chosen:
        variant = design_table(preset_name, looped_only=True, prefix="v-")
        rows = []
        for k in range(args.tables):
            rng = np.random.default_rng([args.seed, k, SCENARIOS.index((preset_name, delta, structure))])
            b, v = simulate(base, variant, fit, delta, components, structure, rng)
            out = delta_phi_shared(
                make_arms(b, v),
                "paper",
                restarts=args.restarts,
                resamples=args.resamples,
                bootstrap_restarts=args.bootstrap_restarts,
                seed=k,
            )
            lo, hi = out.ci
            rows.append(
                {
                    "estimate": out.estimate,
                    "ci": [lo, hi],
                    "p": out.p,
                    "resolved": out.resolved,
                    "on_edge": not out.mc_settled,
                    "resamples": out.resamples,
                    "covers": lo <= delta <= hi,
                }
            )
        covered = sum(r["covers"] for r in rows) / len(rows)
        resolved = sum(r["resolved"] for r in rows) / len(rows)
        width = float(np.median([r["ci"][1] - r["ci"][0] for r in rows]))
        summary.append(
            {
                "variant": preset_name,
                "delta_phi": delta,
                "errors": structure,
                "tables": len(rows),
                "coverage": covered,
                "resolved": resolved,
                "median_width": width,
                "on_edge": sum(r["on_edge"] for r in rows) / len(rows),
                "mean_resamples": float(np.mean([r["resamples"] for r in rows])),
                "mean_estimate": float(np.mean([r["estimate"] for r in rows])),
                "per_table": rows,
            }
        )
        what = "false resolved" if delta == 0 else "power (resolved)"
        print(
            f"{preset_name:<26} delta {delta:+.2f} {structure:<11}: coverage {covered:.2f}, {what} "
            f"{resolved:.2f}, on the edge {summary[-1]['on_edge']:.2f}, median CI width {width:.3f}, "
            f"resamples {summary[-1]['mean_resamples']:.0f} (mean), mean estimate "
            f"{summary[-1]['mean_estimate']:+.3f} ({len(rows)} tables, {time.perf_counter() - start:.0f} s)",
            flush=True,
        )
        ok = goal_met(summary)
        if args.out:  # after every scenario: a stopped run keeps the scenarios it finished
            atomic_write_json(
                args.out,
                {
                    "settings": vars(args),
                    "truth": fit.to_dict(),
                    "components_sd": {k: v**0.5 for k, v in components.items()},
                    "scenarios": summary,
                    "complete": len(summary) == len(chosen),
                    "goal_met": ok,
                },
            )
    print(f"goal (coverage >= 0.90 everywhere, false resolved <= 0.05): {'met' if ok else 'MISSED'}")
    if args.out:
        print(f"wrote {args.out}")


def goal_met(summary: list[dict]) -> bool:
    """Coverage ≥ 0.90 in every scenario and false "resolved" ≤ 0.05 in those with Δφ = 0."""
    return all(s["coverage"] >= 0.9 for s in summary) and all(
        s["resolved"] <= 0.05 for s in summary if s["delta_phi"] == 0
    )


if __name__ == "__main__":
    main()
