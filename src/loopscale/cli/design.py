"""``loopscale design``: choose the runs that measure φ to a target precision for the least compute.

Prints the chosen design beside the reference grid (runs, training FLOPs, estimated wall time, predicted
and, with ``--simulate``, realised 95% CI widths), the Pareto path of the search (by FLOPs, or ``--cost wall``
by the planner's wall-time estimate), every design simulated by the bracketing search, and a Δφ power table
(``--simulate-power``: a search on simulated power); writes the design as a sweep spec (``--out``) that
``loopscale sweep`` runs as it is. ``--from SWEEP_DIR`` refits a partial sweep and writes its spec extended by
the runs that shrink φ's CI most per unit cost.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from loopscale.errors import UserError
from loopscale.recipes import PRESETS, resolve_recipe


def register(sub: argparse._SubParsersAction) -> None:
    from loopscale.cli.sweep import _add_spec_args, add_estimate_args

    p = sub.add_parser(
        "design",
        help="choose the sweep runs that measure phi to a target CI width for the least FLOPs or wall time "
        "(docs/design.md)",
    )
    _add_spec_args(p, required=False)
    p.add_argument(
        "--group", help="the reference group to draw runs from (default: the first with several r)"
    )
    p.add_argument(
        "--prior",
        default="paper",
        help="prior law: 'paper' (published joint fit, default), a `loopscale fit --json` file, or a pilot "
        "results table (.csv/.jsonl/.parquet) fitted first",
    )
    p.add_argument(
        "--hold",
        nargs="+",
        metavar="NAME",
        help="parameters (E, A, B, alpha, beta) the fit will hold at the prior's values, as `fit --fix` or "
        "`fit --prior` does: the design measures phi given them (e.g. a size ladder: --hold alpha beta E)",
    )
    p.add_argument(
        "--sigma",
        type=float,
        help="noise of a run's final loss in nats (default: from the fit, or 0.01 for the paper prior)",
    )
    g = p.add_argument_group("candidate space and constraints")
    g.add_argument(
        "--budgets",
        type=float,
        nargs="+",
        help="these budgets (FLOPs): the reference's, or new ones (widths from --widths, or the union of "
        "the enclosing reference budgets' widths)",
    )
    g.add_argument("--rs", type=int, nargs="+", help="restrict to these loop counts")
    g.add_argument(
        "--widths",
        type=int,
        nargs="+",
        help="candidate widths (d_model) at every budget (default: the reference grid's widths per budget)",
    )
    g.add_argument(
        "--replicates",
        type=int,
        nargs="+",
        default=[1],
        help="seeds per run to consider (the spec's seeds apply to every run; default 1)",
    )
    g.add_argument("--min-widths", type=int, default=3, help="widths per included (budget, r) cell (>= 3)")
    g.add_argument(
        "--per-budget",
        choices=["ends", "all", "min"],
        default="ends",
        help="loop counts every included budget must hold: ends (r_min and r_max; default), all, or min "
        "(r_min only); other r are added where they pay",
    )
    g.add_argument(
        "--max-budget-ratio",
        type=float,
        help="no two neighbouring included budgets further apart than this factor (default: only the end "
        "budgets are required)",
    )
    g.add_argument(
        "--cost",
        choices=["flops", "wall"],
        default="flops",
        help="what the search minimises: training FLOPs (default) or the planner's estimated wall time on "
        "this machine (its throughput probe and worker layout, as `loopscale plan` prints, or --timings; "
        "not with --no-probe alone)",
    )
    t = p.add_argument_group(
        "target (one of; default: the reference grid's phi CI width, realised on the same seeds with "
        "--simulate, else predicted)"
    )
    t.add_argument("--target-ci", type=float, help="95%% CI width of phi to reach")
    t.add_argument("--flop-cap", type=float, help="training FLOPs the design may spend")
    t.add_argument("--flop-fraction", type=float, help="FLOP cap as a fraction of the reference grid's")
    t.add_argument(
        "--wall-cap",
        type=float,
        metavar="SECONDS",
        help="estimated wall time the design may take (--cost wall)",
    )
    t.add_argument(
        "--wall-fraction",
        type=float,
        help="wall-time cap as a fraction of the reference grid's (--cost wall)",
    )
    s = p.add_argument_group("validation by simulation")
    s.add_argument(
        "--simulate",
        type=int,
        default=0,
        metavar="K",
        help="fit K noisy tables drawn from the prior on the design and the reference (0: none)",
    )
    s.add_argument(
        "--sim-restarts", type=int, default=40, help="random starts per simulated fit (default 40)"
    )
    s.add_argument("--sim-bootstrap", type=int, default=100, help="bootstrap resamples per simulated fit")
    s.add_argument("--sim-bootstrap-restarts", type=int, default=3, help="random starts per bootstrap refit")
    s.add_argument(
        "--sim-rounds",
        type=int,
        default=6,
        help="designs simulated at most (default 6): with a CI target (and for --simulate-power), a "
        "bracketing search along the Pareto front for the cheapest design that realises the target in "
        "simulation; with a FLOP cap, the best under the cap of each search path",
    )
    s.add_argument(
        "--no-reference-sim",
        dest="reference_sim",
        action="store_false",
        help="do not simulate the reference grid",
    )
    p.add_argument(
        "--delta-phi", type=float, default=0.1, help="effect size of the power table (default 0.1)"
    )
    p.add_argument(
        "--target-power", type=float, default=0.8, help="power the delta-phi search aims at (default 0.8)"
    )
    p.add_argument(
        "--simulate-power",
        type=int,
        default=0,
        metavar="K",
        help="search for the cheapest design whose power, simulated by running `compare` on K base/variant "
        "pairs, reaches --target-power (at most --sim-rounds designs simulated)",
    )
    p.add_argument(
        "--from",
        dest="from_dir",
        type=Path,
        metavar="SWEEP_DIR",
        help="sequential mode: refit this partial sweep and extend it",
    )
    p.add_argument(
        "--apply",
        action="store_true",
        help="with --from: write the extended spec over "
        "SWEEP_DIR/sweep.yaml so that `loopscale sweep --out SWEEP_DIR` runs the new runs",
    )
    p.add_argument(
        "--reuse",
        type=Path,
        metavar="BASE_DIR",
        help="paired mode: pick the cells of this published base sweep (results.csv + sweep.yaml) at which "
        "a variant's seed-matched reruns reach --delta-phi as the 95%% half-width of delta phi beyond an "
        "offset, for the least cost (the base's measured run times); --out writes the variant's sweep spec",
    )
    p.add_argument(
        "--recipe",
        choices=sorted(PRESETS),
        default="hyperconnections",
        help="with --reuse: the recipe of the variant spec --out writes (default hyperconnections)",
    )
    p.add_argument(
        "--plan", choices=("delta_phi", "separate"), default="delta_phi",
        help="with --reuse: the cells for --delta-phi's precision of delta phi beyond an offset (delta_phi, "
        "default), or those `price --plan separate` trains first within --max-hours, chosen for the power "
        "to name each term (every model, offset, delta phi beyond an offset, width slope) per hour",
    )  # fmt: skip
    p.add_argument(
        "--max-hours", type=float, default=None,
        help="with --reuse --plan separate: wall hours of the variant's runs on 2 single-thread workers",
    )  # fmt: skip
    p.add_argument("--out", type=Path, help="write the design's sweep spec (YAML) here")
    p.add_argument("--json", dest="json_out", type=Path, help="write the full design document here")
    add_estimate_args(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the prior fit and the simulations")
    p.set_defaults(func=run_design)


def _check(args: argparse.Namespace, settings) -> None:
    """Refuse bad flags (one line) before anything is loaded: the settings' ranges, then what only the
    command line has (the wall-time source, --apply, the output files)."""
    from loopscale.io import check_output

    settings.validate()
    if args.cost == "wall" and args.no_probe and args.timings is None:
        raise UserError(
            "--cost wall minimises the planner's wall-time estimate, which needs its throughput probe or "
            "--timings: drop --no-probe (or use --cost flops)"
        )
    if args.apply and args.from_dir is None:
        raise UserError("--apply extends a partial sweep: give --from SWEEP_DIR")
    for path, flag in ((args.out, "--out"), (args.json_out, "--json")):
        if path is not None:
            check_output(path, flag, folder=False)


def _reference(args: argparse.Namespace):
    """(reference spec, its label, the partial sweep of --from or None)."""
    from loopscale.cli.sweep import _load
    from loopscale.design import PartialSweep

    spec = _load(args)
    if args.from_dir is None:
        if spec is None:
            raise UserError("give the reference grid and template: a SPEC file or --preset NAME")
        return spec, args.preset or str(args.spec), None
    from loopscale.sweep.rundir import open_sweep

    sweep_spec, _ = open_sweep(args.from_dir)
    return spec or sweep_spec, str(args.from_dir), PartialSweep(args.from_dir, sweep_spec)


def run_paired_design(args: argparse.Namespace) -> int:
    """``--reuse BASE``: the variant's cells for a target precision of Δφ beyond an offset
    (``design.paired``)."""
    from loopscale.cli import require_input

    require_input(args.reuse, "--reuse base sweep", folder=True)
    if args.from_dir is not None:
        raise UserError("--reuse picks a variant's cells against a finished base; it does not take --from")
    from loopscale.config import dump_yaml, to_dict
    from loopscale.design.paired import plan_lines, plan_pairs, power_beyond_offset, variant_spec
    from loopscale.io import atomic_write_json, atomic_write_text

    name = f"{args.reuse.name}-{args.recipe}-paired"
    if args.plan == "separate":
        if args.json_out is not None:
            raise UserError(
                "--json documents the delta_phi plan's precision search: drop it with --plan separate"
            )
        spec = _separating_cells(args, name)
    else:
        if args.max_hours is not None:
            raise UserError("--max-hours caps the separating plan: give --plan separate, or drop it")
        plan = plan_pairs(args.reuse, target_half_width=args.delta_phi, seed=args.seed)
        print(f"paired design against {args.reuse}: delta phi beyond an offset to +-{args.delta_phi:g} (95%)")
        for line in plan_lines(plan):
            print(f"  {line}")
        spec = variant_spec(plan, resolve_recipe(args.recipe), name)
    if args.out is not None:
        atomic_write_text(args.out, dump_yaml(spec))
        print(f"wrote {args.out} (run it with `loopscale sweep {args.out} --out SWEEP_DIR`)")
    if args.json_out is not None:
        t, picked = plan.table, plan.picked
        cells = [
            {
                "budget": float(t.budget[i]),
                "width": float(t.width[i]),
                "r": int(t.r[i]),
                "seed": int(t.seed[i]),
            }
            for i in picked.runs
        ]
        doc = {
            "base": str(args.reuse),
            "target_half_width": args.delta_phi,
            "cells": cells,
            **{k: v for k, v in picked.to_dict().items() if k != "runs"},
            "cost_unit": plan.cost_unit,
            "sigma_pair": plan.sigma_pair,
            "power_beyond_offset": {f"{d:+.2f}": power_beyond_offset(d, picked.se) for d in (-0.08, 0.19)},
            "spec": to_dict(spec),
        }
        atomic_write_json(args.json_out, doc)
        print(f"wrote {args.json_out}")
    return 0


def _separating_cells(args: argparse.Namespace, name: str):
    """``--reuse --plan separate``: the cells ``price --plan separate`` would train first within
    ``--max-hours`` (``analysis.price.plan_order``, the same greedy order), printed with what they separate
    → the variant's sweep spec at them."""
    from pathlib import Path

    from loopscale.analysis.price import PriceSettings, pairs_within, plan_order
    from loopscale.design.paired import variant_spec
    from loopscale.design.separate import CRITERION, separation
    from loopscale.present.price_text import separation_text

    if args.max_hours is None:
        raise UserError("--plan separate picks cells per hour: give --max-hours (wall hours on 2 workers)")
    recipe = resolve_recipe(args.recipe)
    settings = PriceSettings(
        recipe=recipe, base=args.reuse, out=Path("unused"), max_hours=args.max_hours, seed=args.seed,
        plan="separate",
    )  # fmt: skip
    plan, cells, order, hours = plan_order(settings)
    most = pairs_within(hours, args.max_hours, settings.workers)
    rows = list(order[:most])
    t = cells.table
    print(f"paired design against {args.reuse}: {most} cells within {args.max_hours:g} h on "
          f"{settings.workers} workers, chosen for the power to name each term per hour")  # fmt: skip
    print(f"  {separation_text(separation(cells, rows, plan.sigma_pair, plan.cluster_sd, CRITERION))}")
    print("  cells: " + ", ".join(
        f"C = {t.budget[i]:.3g} d = {t.width[i]:.0f} r = {t.r[i]} seed {t.seed[i]:.0f}" for i in rows
    ))  # fmt: skip
    return variant_spec(plan, recipe, name, runs=rows)


def run_design(args: argparse.Namespace) -> int:
    if args.reuse is not None:
        return run_paired_design(args)
    if args.from_dir is not None:  # answer a mistyped --from before the design search (SciPy) loads
        from loopscale.sweep.rundir import open_sweep

        open_sweep(args.from_dir)
    from loopscale.cli.sweep import wall_estimate
    from loopscale.design import DesignSettings, WallModel, make_design
    from loopscale.io import atomic_write_json, atomic_write_text
    from loopscale.present.design_text import format_design

    settings = DesignSettings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(DesignSettings)})
    _check(args, settings)
    reference, ref_label, partial = _reference(args)
    source = "the throughput probe" if args.timings is None else f"the measured run times of {args.timings}"
    wall = WallModel(lambda runs, workers: wall_estimate(args, reference, runs, workers), source)
    doc = make_design(settings, reference, ref_label, partial=partial, wall=wall)
    print(format_design(doc))
    if args.out is not None:
        atomic_write_text(args.out, doc.spec)
        print(f"wrote {args.out} (run it with `loopscale sweep {args.out} --out SWEEP_DIR`)")
    if args.apply:
        from loopscale.sweep.rundir import SPEC_FILE

        atomic_write_text(args.from_dir / SPEC_FILE, doc.spec)
        print(f"extended {args.from_dir / SPEC_FILE}: run the new runs with ", end="")
        print(f"`loopscale sweep --out {args.from_dir}`")
    if args.json_out is not None:
        atomic_write_json(args.json_out, doc.to_dict())
        print(f"wrote {args.json_out}")
    return 0
