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
import math
from pathlib import Path

from loopscale.errors import UserError


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
    p.add_argument("--out", type=Path, help="write the design's sweep spec (YAML) here")
    p.add_argument("--json", dest="json_out", type=Path, help="write the full design document here")
    add_estimate_args(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the prior fit and the simulations")
    p.set_defaults(func=run_design)


def _check(args: argparse.Namespace) -> None:
    from loopscale.io import check_output

    kinds = ("target_ci", "flop_cap", "flop_fraction", "wall_cap", "wall_fraction")
    if sum(getattr(args, name) is not None for name in kinds) > 1:
        raise UserError(
            "give one target: --target-ci, --flop-cap, --flop-fraction, --wall-cap or --wall-fraction"
        )
    if (args.wall_cap is not None or args.wall_fraction is not None) and args.cost != "wall":
        raise UserError("--wall-cap / --wall-fraction cap the estimated wall time: add --cost wall")
    for name in (*kinds, "sigma", "delta_phi"):
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UserError(f"--{name.replace('_', '-')} must be a positive number, got {value}")
    if args.max_budget_ratio is not None and not args.max_budget_ratio > 1:
        raise UserError(f"--max-budget-ratio must be > 1, got {args.max_budget_ratio}")
    if args.min_widths < 3:
        raise UserError(f"--min-widths must be >= 3 (a parabola needs three widths), got {args.min_widths}")
    if (
        any(k < 1 for k in args.replicates)
        or min(args.workers or 1, args.sim_rounds) < 1
        or args.simulate < 0
    ):
        raise UserError("--replicates, --workers and --sim-rounds must be >= 1 and --simulate >= 0")
    if not 0 < args.target_power < 1:
        raise UserError(f"--target-power must lie in (0, 1), got {args.target_power}")
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
    """(reference spec, its label, partial-sweep failed run names or None)."""
    from loopscale.cli.sweep import _load

    spec = _load(args)
    if args.from_dir is None:
        if spec is None:
            raise UserError("give the reference grid and template: a SPEC file or --preset NAME")
        return spec, args.preset or str(args.spec), None
    from loopscale.sweep.rundir import open_sweep

    sweep_spec, _ = open_sweep(args.from_dir)
    return spec or sweep_spec, str(args.from_dir), sweep_spec


def run_design(args: argparse.Namespace) -> int:
    import numpy as np

    from loopscale.config import dump_yaml
    from loopscale.fit import design as d
    from loopscale.io import atomic_write_json, atomic_write_text

    _check(args)
    reference, ref_label, sweep_spec = _reference(args)
    restrict = {"budgets": args.budgets, "rs": args.rs, "widths": args.widths}
    if sweep_spec is None:
        prior = d.load_prior(args.prior, args.sigma, seed=args.seed)
        cands = d.candidates_from_spec(reference, group=args.group, **restrict)
    else:
        prior, cands = _partial(args, reference, sweep_spec, restrict)
    ref_cands = d.candidates_from_spec(reference, group=args.group) if sweep_spec is None else cands
    wall, ref_wall = _wall_shares(args, reference, sweep_spec, cands, ref_cands)
    if args.cost == "wall":
        if wall is None:
            raise UserError(
                "--cost wall: no wall-time estimate on this machine (the narrowest model is too large to "
                "probe here); use --cost flops"
            )
        cands = cands.with_cost(wall)
        ref_cands = cands if sweep_spec is not None else ref_cands.with_cost(ref_wall)
    info = d.Information.build(prior, cands)
    ref_info = d.Information.build(prior, ref_cands) if ref_cands is not cands else info
    ref_design = (
        d.RunDesign(np.arange(len(ref_cands.runs)), len(reference.seeds), f"reference ({ref_label})")
        if sweep_spec is None
        else d.RunDesign(np.flatnonzero(cands.fixed), 1, f"the sweep so far ({ref_label})")
    )
    # the reference counts every run it holds (a partial sweep's fixed runs too): not RunDesign.cost
    ref_flops = float((ref_cands.flops[ref_design.idx]).sum() * ref_design.replicates)
    ref_cost = float(ref_cands.run_cost[ref_design.idx].sum() * ref_design.replicates)
    ref_point = d.PathPoint(
        ref_design,
        ref_flops,
        ref_info.ci_widths(ref_design.weights(len(ref_cands.runs))),
        "reference",
        ref_cost,
    )
    constraints = d.Constraints(args.min_widths, args.per_budget, args.max_budget_ratio)
    paths = [
        search(cands, info, constraints, replicates=k)
        for k in args.replicates
        for search in (d.greedy_path, d.pruning_path)
    ]
    front = d.pareto([p for path in paths for p in path])
    target_ci, cap, wall_cap = args.target_ci, args.flop_cap, args.wall_cap
    if args.flop_fraction is not None:
        cap = args.flop_fraction * ref_flops
    if args.wall_fraction is not None:
        wall_cap = args.wall_fraction * ref_cost  # --cost wall: the reference's estimated wall seconds
    sims: dict[str, d.Realisation] = {}
    rounds: list[dict] = []
    sim_kw = {
        "seed": args.seed,
        "restarts": args.sim_restarts,
        "bootstrap": args.sim_bootstrap,
        "bootstrap_restarts": args.sim_bootstrap_restarts,
    }
    if args.simulate and args.reference_sim:
        sims["reference"] = d.simulate(ref_cands, ref_info, prior, ref_design, args.simulate, **sim_kw)
    target_source = "given"
    if target_ci is None and cap is None and wall_cap is None:
        if sweep_spec is not None:
            raise UserError(
                "--from needs a target: --target-ci, --flop-cap, --flop-fraction, --wall-cap or "
                "--wall-fraction (of the sweep)"
            )
        # the reference's own precision: realised on the same seeds when simulated, else predicted
        if "reference" in sims:
            target_ci, target_source = sims["reference"].ci_width["phi"], "the reference's realised width"
        else:
            target_ci, target_source = ref_point.predicted["phi"], "the reference's predicted width"
    if args.simulate:
        chosen, sims["design"], rounds = d.simulate_in_loop(
            cands,
            info,
            prior,
            paths,
            args.simulate,
            target_ci=target_ci,
            flop_cap=cap,
            cost_cap=wall_cap,
            rounds=args.sim_rounds,
            **sim_kw,
        )
    else:
        chosen = d.choose(front, target_ci, cap, wall_cap)
    problems = d.check_design(cands, info, chosen.design, constraints)
    # the reference under the default r rule and the design's widths and budget ratio
    ref_rules = d.Constraints(args.min_widths, max_budget_ratio=args.max_budget_ratio)
    ref_problems = d.check_design(ref_cands, ref_info, ref_design, ref_rules)
    if sweep_spec is None:
        out_spec = d.design_spec(cands, chosen.design, f"{reference.name}-design")
    else:
        out_spec = d.extension_spec(cands, chosen.design)
    seconds = {}
    if wall is not None:
        seconds = {
            "design": chosen.design.cost(cands, wall),
            "reference": float(ref_wall[ref_design.idx].sum() * ref_design.replicates),
        }
        _attach_wall(rounds, cands, wall)
    inflation = 1.0
    if "design" in sims:
        inflation = max(1.0, sims["design"].ci_width["phi"] / chosen.predicted["phi"])
    step = max(1, len(front) // 8)
    power = [] if sweep_spec is not None else d.power_table(ref_cands, ref_info, [ref_point], args.delta_phi)
    power += d.power_table(cands, info, [*front[::step], chosen], args.delta_phi, inflation)
    reaching = d.cheapest_with_power(
        cands, info, front, args.delta_phi, target=args.target_power, inflation=inflation
    )
    if reaching is not None:
        label = f"cheapest with power >= {args.target_power:g}"
        power += d.power_table(cands, info, [reaching], args.delta_phi, inflation, label=label)
    realised_power = None
    if args.simulate_power:
        found, sim_power, power_log = d.simulate_power_in_loop(
            cands,
            info,
            prior,
            [p for path in paths for p in path],
            args.delta_phi,
            args.simulate_power,
            target=args.target_power,
            rounds=args.sim_rounds,
            **sim_kw,
        )
        if wall is not None:
            _attach_wall(power_log, cands, wall)
        realised_power = {
            "target_power": args.target_power,
            "k": args.simulate_power,
            "design": None if found is None else found.design.label,
            "power": None if sim_power is None else sim_power["power"],
            "median_ci_width": None if sim_power is None else sim_power["median_ci_width"],
            "flops": None if found is None else found.flops,
            "candidates": power_log,
        }
    doc = {
        "prior": prior.to_dict(),
        "reference": ref_label,
        # the candidate space as given (None: the reference's own), which the run indices point into
        "candidate_space": {"group": args.group, **restrict},
        "constraints": {**dataclasses.asdict(constraints), "problems": problems},
        "reference_constraint_problems": ref_problems,
        "target": {
            "ci_phi": target_ci,
            "flop_cap": cap,
            "wall_cap_seconds": wall_cap,
            "source": target_source,
        },
        "cost": args.cost,
        "wall_source": _wall_source(args) if wall is not None else None,
        "design": _summary(chosen, cands, seconds.get("design"), sims.get("design"), new_only=True),
        "reference_grid": _summary(
            ref_point, ref_cands, seconds.get("reference"), sims.get("reference"), new_only=False
        ),
        "simulation_rounds": rounds,
        "pareto": [
            {
                "design": p.design.label,
                "flops": p.flops,
                "cost": p.cost,
                "replicates": p.design.replicates,
                "runs": int(len(p.design.idx)),
                "predicted": p.predicted,
                "step": p.step,
            }
            for p in front
        ],
        "power": {
            "delta_phi": args.delta_phi,
            "optimism_factor": inflation,
            "rows": power,
            "simulated": realised_power,
        },
        "spec": dump_yaml(out_spec),
    }
    print(format_design(doc))
    if args.out is not None:
        atomic_write_text(args.out, doc["spec"])
        print(f"wrote {args.out} (run it with `loopscale sweep {args.out} --out SWEEP_DIR`)")
    if args.apply:
        from loopscale.sweep.rundir import SPEC_FILE

        atomic_write_text(args.from_dir / SPEC_FILE, doc["spec"])
        print(f"extended {args.from_dir / SPEC_FILE}: run the new runs with ", end="")
        print(f"`loopscale sweep --out {args.from_dir}`")
    if args.json_out is not None:
        atomic_write_json(args.json_out, doc)
        print(f"wrote {args.json_out}")
    return 0


def _partial(args, reference, sweep_spec, restrict):
    """Sequential mode: the prior refitted on the sweep's finished runs and the extension candidates."""
    from loopscale.fit import design as d
    from loopscale.fit.table import load_table
    from loopscale.sweep.collect import collect_rows

    rows = collect_rows(args.from_dir)
    failed = {row["run"] for row in rows if row["status"] == "failed"}
    finished = [row for row in rows if row["status"] == "ok"]
    if not finished:
        raise UserError(
            f"{args.from_dir}: no finished runs to refit yet; design the sweep from a prior instead"
        )
    if args.prior != "paper":
        prior = d.load_prior(args.prior, args.sigma, seed=args.seed)
    else:
        prior = d.prior_from_table(
            load_table(finished),
            args.sigma,
            f"joint fit of the {len(finished)} finished runs in {args.from_dir}",
            seed=args.seed,
        )
    if reference is sweep_spec and not restrict["widths"]:
        # the sweep's own grid is planned already: offer every width it uses at every budget
        group = d.pick_group(sweep_spec, args.group)
        restrict = {**restrict, "widths": sorted({w for cell in group.grid for w in cell.widths})}
    extra = d.candidates_from_spec(reference, group=args.group, **restrict)
    return prior, d.partial_sweep_candidates(sweep_spec, failed, extra)


def _attach_wall(rows: list[dict], cands, wall) -> None:
    """Add each simulated design's estimated wall seconds (``est_seconds``) to its log row."""
    import numpy as np

    from loopscale.fit.design import RunDesign

    for row in rows:
        row["est_seconds"] = RunDesign(np.array(row["idx"], int), row["replicates"]).cost(cands, wall)


def _wall_shares(args, reference, sweep_spec, cands, ref_cands):
    """Each candidate's and each reference run's share of the planner's estimated wall time on this machine
    (``ThroughputProbe.wall_shares``: a run's seconds over the workers ``loopscale sweep`` would use), or
    (None, None) with --no-probe or when the narrowest model is too large to probe here. With --timings the
    seconds come from a finished sweep's measured run times (``MeasuredTimes``) instead of the probe."""
    import numpy as np

    from loopscale.cli.sweep import wall_estimate
    from loopscale.sweep.plan import default_layout, plan_sweep

    ref_runs = plan_sweep(reference if sweep_spec is None else sweep_spec)
    workers = args.workers or default_layout(reference, ref_runs).workers
    probe = wall_estimate(args, reference, ref_cands.runs + cands.runs, workers)
    if probe is None:
        return None, None
    return np.array(probe.wall_shares(cands.runs)), np.array(probe.wall_shares(ref_cands.runs))


def _wall_source(args) -> str:
    return "the throughput probe" if args.timings is None else f"the measured run times of {args.timings}"


def _summary(point, cands, seconds, realised, *, new_only: bool) -> dict:
    """One row of the side-by-side table; ``new_only``: count only the runs not already in a partial sweep."""
    new = point.design.idx[~cands.fixed[point.design.idx]] if new_only else point.design.idx
    out = {
        "label": point.design.label or point.step,
        "runs": int(len(new) * point.design.replicates),
        "replicates": point.design.replicates,
        "flops": point.flops,
        "est_seconds": seconds,
        "predicted_ci": point.predicted,
        "cells": sorted(
            {(float(b), int(r)) for b, r in zip(cands.budget[point.design.idx], cands.r[point.design.idx])}
        ),
    }
    if realised is not None:
        out["realised"] = realised.to_dict()
        from loopscale.fit.design import agreement

        out["agreement_note"] = agreement(point.predicted["phi"], realised.ci_width["phi"])
    return out


def format_design(doc: dict) -> str:
    from loopscale.sweep.plan import format_seconds

    ref, des = doc["reference_grid"], doc["design"]
    prior = doc["prior"]
    lines = [
        f"prior: {prior['source']}: phi {prior['phi']:.4g}, alpha {prior['alpha']:.4g}, "
        f"beta {prior['beta']:.4g}, E {prior['E']:.4g}; sigma {prior['sigma']:.4g} nats",
        "",
        f"{'':<12}{'runs':>6}{'FLOPs':>11}{'share':>7}{'est. wall':>13}  predicted 95% CI width "
        f"{'phi':>7}{'alpha':>7}{'beta':>7}{'E':>7}   realised phi (coverage)",
    ]
    for name, row in (("design", des), ("reference", ref)):
        wall = "-" if row["est_seconds"] is None else format_seconds(row["est_seconds"])
        if row is des and row["est_seconds"] is not None and ref["est_seconds"]:
            wall += f" ({row['est_seconds'] / ref['est_seconds']:.0%})"
        pred = row["predicted_ci"]
        real = row.get("realised")
        real_text = (
            f"{real['ci_width']['phi']:.4f} ({100 * real['coverage']:.0f}% of {real['k']})" if real else "-"
        )
        lines.append(
            f"{name:<12}{row['runs']:>6}{row['flops']:>11.3e}{row['flops'] / ref['flops']:>7.1%}{wall:>13}"
            f"{'':>24}{pred['phi']:>7.4f}{pred['alpha']:>7.4f}{pred['beta']:>7.4f}{pred['E']:>7.4f}"
            f"   {real_text}"
        )
    lines.append(f"reference: {ref['label']}; design: {des['label']} ({len(des['cells'])} cells)")
    target = doc["target"]
    if target["flop_cap"] is not None:
        lines.append(f"target: the narrowest phi CI under {target['flop_cap']:.3e} FLOPs")
    elif target.get("wall_cap_seconds") is not None:
        cap = format_seconds(target["wall_cap_seconds"])
        lines.append(f"target: the narrowest phi CI under {cap} of estimated wall time; cost: {doc['cost']}")
    else:
        lines.append(f"target: phi CI width {target['ci_phi']:.4f} ({target['source']}); cost: {doc['cost']}")
    if doc.get("wall_source"):
        lines.append(f"est. wall from {doc['wall_source']}")
    if ref["est_seconds"] is None:
        lines.append(
            "no wall-time estimate (--no-probe, or the narrowest model is too large to probe on this "
            "machine); wall time is the planner's compute estimate (loopscale plan)"
        )
    for name, row in (("design", des), ("reference", ref)):
        if row.get("agreement_note"):
            lines.append(f"{name}: {row['agreement_note']}")
    if doc["constraints"]["problems"]:
        lines.append("design breaks: " + "; ".join(doc["constraints"]["problems"]))
    if doc["reference_constraint_problems"]:
        lines.append(
            f"reference breaks (under the prior): {len(doc['reference_constraint_problems'])} "
            f"constraint(s), e.g. {doc['reference_constraint_problems'][0]}"
        )
    if doc["pareto"]:
        wall = doc["cost"] == "wall"
        what = "estimated wall time" if wall else "FLOPs"
        lines += ["", f"Pareto path (predicted phi CI width vs {what}, the search's cost):"]
        step = max(1, len(doc["pareto"]) // 10)
        for p in doc["pareto"][::step]:
            cost = f"  wall {format_seconds(p['cost'])}" if wall else ""
            lines.append(
                f"  {p['flops']:.3e} ({p['flops'] / ref['flops']:6.1%}){cost}  "
                f"{p['runs'] * p['replicates']:>4} runs  phi {p['predicted']['phi']:.4f}  ({p['design']})"
            )
    if doc["simulation_rounds"]:
        lines += ["", "simulated designs, in the order simulated (realised = median phi CI width):"]
        lines.append(
            f"  {'design':<22}{'runs':>5}{'FLOPs':>8}{'wall':>8}{'predicted':>11}{'realised':>10}  coverage"
        )
        for row in doc["simulation_rounds"]:
            real = row["realised"]
            mark = {True: "  reaches target", False: "  misses target", None: ""}[row["reaches_target"]]
            lines.append(
                f"  {row['design']:<22}{row['runs']:>5}{row['flops'] / ref['flops']:>8.1%}"
                f"{_share(row.get('est_seconds'), ref['est_seconds']):>8}{row['predicted']['phi']:>11.4f}"
                f"{real['ci_width']['phi']:>10.4f}  {real['coverage'] * real['k']:.0f}/{real['k']}{mark}"
            )
    power = doc["power"]
    lines += [
        "",
        f"delta-phi power (detect {power['delta_phi']:g} at 5% two-sided; SE x "
        f"{power['optimism_factor']:.2f} measured optimism; r = 1 runs shared):",
        f"  {'design':<34}{'runs/arm':>10}{'FLOPs base':>12}{'FLOPs variant':>15}{'SE':>8}{'power':>7}",
    ]
    for row in power["rows"]:
        lines.append(
            f"  {row['label'][:34]:<34}{row['runs_base']:>5}/{row['runs_variant']:<4}"
            f"{row['flops_base']:>12.3e}{row['flops_variant']:>15.3e}{row['se_delta_phi']:>8.4f}{row['power']:>7.2f}"
        )
    sim = power.get("simulated")
    if sim:
        lines += [
            "",
            f"simulated `compare` ({sim['k']} base/variant pairs per design), searching for power >= "
            f"{sim['target_power']:g}:",
            f"  {'design':<22}{'runs base/variant':>18}{'FLOPs':>8}{'wall':>8}{'SE':>8}{'predicted':>10}"
            f"{'simulated':>10}  median CI of delta-phi",
        ]
        for row in sim["candidates"]:
            lines.append(
                f"  {row['design']:<22}{row['runs_base']:>13}/{row['runs_variant']:<4}"
                f"{row['flops'] / ref['flops']:>8.1%}"
                f"{_share(row.get('est_seconds'), ref['est_seconds']):>8}{row['se_delta_phi']:>8.4f}"
                f"{row['predicted_power']:>10.2f}{row['simulated']['power']:>10.2f}"
                f"  {row['simulated']['median_ci_width']:.3f}"
            )
        if sim["design"] is None:
            lines.append(f"  no simulated design reached power {sim['target_power']:g}")
        else:
            lines.append(
                f"  cheapest reaching it: {sim['design']} (simulated power {sim['power']:.2f}, "
                f"{sim['flops'] / ref['flops']:.1%} of the reference's FLOPs)"
            )
    return "\n".join(lines)


def _share(seconds, ref_seconds) -> str:
    return "-" if seconds is None or not ref_seconds else f"{seconds / ref_seconds:.1%}"
