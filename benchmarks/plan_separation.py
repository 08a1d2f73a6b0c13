"""What the plan's pairs tell apart, old plan against new (issue 51): for ``price``'s plan at 1, 2 and 4 h
against ``results/laptop-factorial``, the cosine of the offset and ∂L/∂φ columns over its looped pairs, their
condition number and the design SEs (Δφ beyond an offset, the offset, every model, the width slope; the
pairs' known errors, no base-law uncertainty), for

- **old**: the base's looped cells ranked by Δφ's SE beyond an offset per hour (``--plan delta_phi``);
- **new**: ``design.separate``'s criterion over the base's cells (``--plan separate``);
- **new + extension**: the same with the base-extension cells among the candidates (``--extend``), each
  costed with its base run;
- **deeper template** (what it would buy, not built): a second base of depth 18 (16 core layers, so
  r ∈ {1, 2, 4, 8, 16}) on the laptop grid, its ∂L/∂φ from the laptop law (an extrapolation to another
  template and to r = 16), its runs costed at the laptop base's measured FLOPs per second at each width;
  printed with what the second base itself would cost.

The dry run's powers come from ``loopscale price RECIPE --reuse results/laptop-factorial --dry-run
--max-hours H --plan delta_phi|separate [--extend SPEC]`` (docs/fitting.md, "Plans that separate"). This
script simulates nothing (≈ 1 min on 2 cores):

    nice python benchmarks/plan_separation.py [--recipe parcae]
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

import numpy as np

from loopscale.analysis.price import PriceSettings, plan_order
from loopscale.design.separate import Candidates, _table, order_cells, separation
from loopscale.recipes import resolve_recipe

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "results" / "laptop-factorial"
HOURS = (1.0, 2.0, 4.0)


def _row(name: str, hours: float, cells: Candidates, order, cum, sd: float, tau: float) -> str:
    most = int(np.searchsorted(cum, hours, side="right"))
    s = separation(cells, order[:most], sd, tau)

    def se(v):
        return "–" if v is None else f"{v:.4f}"

    return (
        f"| {name} | {hours:g} | {most} ({s.plain} r = 1, {s.extension} ext) | {s.cosine:.3f} | "
        f"{s.condition:.2f} | {s.se_delta_phi:.4f} | {se(s.se_offset)} | {se(s.se_every)} | "
        f"{se(s.se_width)} |"
    )


def _deeper(plan, rows: list[dict], workers: int) -> tuple[Candidates, float]:
    """The deeper template's cells (``Candidates``, variant runs costed alone) and the second base's own
    wall hours on ``workers`` workers."""
    from loopscale.config import from_dict
    from loopscale.pairs.effects import phi_slope_at
    from loopscale.sweep.plan import plan_sweep
    from loopscale.sweep.spec import SweepSpec

    spec = {k: plan.spec[k] for k in ("batch_tokens", "train", "nproc") if k in plan.spec}
    spec["model"] = {**plan.spec["model"], "depth": 18}
    t = plan.table
    grid = sorted({(float(b), int(w)) for b, w in zip(t.budget, t.width)})
    groups = [
        {"name": f"deep-d{w}-C{b / 1e9:.0f}G", "rs": [1, 2, 4, 8, 16], "grid": [{"budget": b, "widths": [w]}]}
        for b, w in grid
    ]
    runs = plan_sweep(from_dict(SweepSpec, {"name": "deep", **spec, "groups": groups}, "deep"))
    rate: dict[int, list[float]] = {}
    for row in rows:
        flops = row["flops_per_token"] * row["tokens"]
        rate.setdefault(int(row["width"]), []).append(flops / row["train_time_s"])
    overhead = statistics.median(row["wall_time_s"] - row["train_time_s"] for row in rows)
    cost = np.array([u.total_flops / statistics.median(rate[u.width]) + overhead for u in runs])
    table = _table(runs)
    keys = sorted({(int(r), float(w)) for r, w in zip(table.r, table.width)})
    cluster = np.array([keys.index((int(r), float(w))) for r, w in zip(table.r, table.width)])
    ref = float(np.exp(np.mean(np.log(t.width))))
    cells = Candidates(table, phi_slope_at(plan.fit, table), cost, np.ones(len(runs), bool), cluster, ref)
    return cells, float(cost.sum() / workers / 3600)


def main() -> None:
    from loopscale.sweep.results import read_results

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default="parcae")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    recipe = resolve_recipe(args.recipe)
    print(f"{args.recipe} against {BASE.name}, {args.workers} workers")
    print("| plan | hours | pairs | cosine | condition | SE dphi | SE offset | SE every | SE width |")
    print("|---|---|---|---|---|---|---|---|---|")
    settings = PriceSettings(recipe=recipe, base=BASE, out=Path("unused"), workers=args.workers)
    plans = {}
    for name, which, extend in [("old", "delta_phi", False), ("new", "separate", False),
                                ("new + extension", "separate", True)]:  # fmt: skip
        plan, cells, order, cum = plan_order(PriceSettings(**{**vars(settings), "plan": which}), extend)
        plans[name] = plan
        for h in HOURS:
            print(_row(name, h, cells, order, cum, plan.sigma_pair, plan.cluster_sd))
    plan = plans["old"]
    deep, base_hours = _deeper(plan, read_results(BASE / "results.csv"), args.workers)
    looped = np.flatnonzero(deep.table.r > 1)
    order = order_cells(deep, looped, plan.sigma_pair, plan.cluster_sd, len(looped))
    cum = np.cumsum(deep.cost[list(order)]) / args.workers / 3600
    for h in HOURS:
        print(_row("deeper template (r ≤ 16), variant runs only", h, deep, order, cum, plan.sigma_pair,
                   plan.cluster_sd))  # fmt: skip
    r16 = sum(1 for i in order[: int(np.searchsorted(cum, 1.0, side="right"))] if deep.table.r[i] == 16)
    print(f"the deeper base itself: {len(deep.table)} runs, ≈ {base_hours:.1f} h on {args.workers} workers "
          f"(≈ {math.ceil(base_hours)} h); r = 16 pairs in its 1 h plan: {r16}")  # fmt: skip


if __name__ == "__main__":
    main()
