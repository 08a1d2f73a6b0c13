"""``loopscale plan | sweep | collect | report | demo``: plan a grid, run it, tabulate it, report φ.

Exit codes: 0 success; 2 bad input (one-line error); 3 some runs failed or did not finish (rows with status
``failed`` or ``pending`` and a reason in the results table; the fit names the runs it leaves out).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loopscale.errors import UserError
from loopscale.recipes import PRESETS
from loopscale.sweep.runner import check_counts, exit_code, run_sweep, with_data, with_trainer

DEFAULT_DEMO_OUT = Path("runs/demo")
FIT_RESTARTS, FIT_BOOTSTRAP = 500, 200  # the fit effort of `loopscale report`
# The demo's fit effort (base law restarts, base bootstrap resamples): the report's 500 / 200 would add
# minutes to a 2-core demo; the intervals it prints carry the base law's spread over these 50 resamples.
DEMO_RESTARTS, DEMO_BOOTSTRAP = 100, 50


def _add_spec_args(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("spec", nargs=None if required else "?", metavar="SPEC", help="sweep YAML file")
    from loopscale.sweep.presets import PRESETS

    p.add_argument("--preset", help=f"a named sweep instead of SPEC: {', '.join(PRESETS)}")


def _add_fit_args(
    p: argparse.ArgumentParser, restarts: int = FIT_RESTARTS, bootstrap: int = FIT_BOOTSTRAP
) -> None:
    p.add_argument(
        "--restarts",
        type=int,
        default=restarts,
        help=f"L-BFGS-B random restarts per fit (method §8.3; default {restarts})",
    )
    p.add_argument(
        "--bootstrap",
        type=int,
        default=bootstrap,
        help=f"cell-bootstrap resamples for the φ CI (method §8.4; default {bootstrap})",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the fit's restarts and bootstrap")


def add_estimate_args(p: argparse.ArgumentParser) -> None:
    """``--workers`` / ``--no-probe`` / ``--timings``: the wall-time estimate of ``plan`` and ``design``."""
    p.add_argument(
        "--workers",
        type=int,
        help="concurrent runs the wall-time estimate assumes (default: the layout `loopscale sweep` picks)",
    )
    p.add_argument(
        "--no-probe", action="store_true", help="skip the throughput probe (no wall-time estimate)"
    )
    p.add_argument(
        "--timings",
        type=Path,
        metavar="RESULTS_CSV",
        help="estimate wall time from a finished sweep's measured run times instead of the probe: a run "
        "costs its steps x the median seconds per step that sweep took at its width and r, plus the median "
        "per-run overhead (stable from call to call; valid for the layout that sweep ran with)",
    )


def wall_estimate(args: argparse.Namespace, spec, runs: list, workers: int):
    """The wall-time model ``add_estimate_args`` selects: a finished sweep's measured run times
    (``--timings``), else the throughput probe on ``runs`` (None with ``--no-probe``, or when even the
    narrowest model is too large to probe here)."""
    from loopscale.sweep.plan import MeasuredTimes, measure_throughput

    if args.timings is not None:
        return MeasuredTimes.from_table(args.timings, workers)
    return None if args.no_probe else measure_throughput(spec, runs, workers=workers)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan", help="list every run of a sweep: N_once, N_rec, FLOPs/token, steps, tokens, est. time"
    )
    _add_spec_args(p, required=False)
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    add_estimate_args(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("sweep", help="run a sweep (new or resumed) locally or on SLURM")
    _add_spec_args(p, required=False)
    p.add_argument("--out", required=True, type=Path, help="sweep folder (rerun the same command to resume)")
    p.add_argument("--data", help="packed dataset folder for every run (sets train.data.path)")
    p.add_argument("--executor", choices=["local", "slurm"], default="local")
    p.add_argument(
        "--trainer",
        metavar="CMD",
        help="train each run with this command instead of loopscale's own, through the run contract "
        "(docs/contract.md): {run_dir}, {run_json}, {config}, {run_id} are filled in",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="local: concurrent runs (default: one single-threaded run per core for CPU sweeps of widths "
        "<= 128, else 1; a resumed sweep: the count it started with); slurm: max concurrent tasks "
        "(default 1)",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="CPU threads per run (default: cores / workers; a resumed sweep: the count it started with, "
        "since another count is not bit-identical)",
    )
    g = p.add_argument_group("slurm")
    g.add_argument("--partition")
    g.add_argument(
        "--timeout-min", type=int, default=60, help="per task; a timed-out task is requeued and resumes"
    )
    g.add_argument("--cpus-per-task", type=int, default=1)
    g.add_argument("--gpus-per-task", type=int, default=0)
    g.add_argument("--mem-gb", type=float)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("collect", help="write the results table (CSV + parquet) of a sweep folder")
    p.add_argument("sweep_dir", type=Path, metavar="SWEEP_DIR")
    p.add_argument("--out", type=Path, help="folder for results.csv/.parquet (default: SWEEP_DIR)")
    p.set_defaults(func=cmd_collect)

    p = sub.add_parser(
        "report",
        help="collect + fit + report.md/report.html for a sweep folder; --from re-renders a saved analysis",
    )
    p.add_argument("sweep_dir", type=Path, metavar="SWEEP_DIR", nargs="?")
    p.add_argument("--out", type=Path, help="report folder (default: SWEEP_DIR/report)")
    p.add_argument(
        "--from",
        dest="from_analysis",
        type=Path,
        metavar="ANALYSIS",
        help="render the report of a saved analysis (a report folder's analysis.json) without recomputing it",
    )
    _add_fit_args(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "lr-sweep",
        help="calibrate the LR at a new scale: re-anchor the transfer rules, sweep one multiplier on every "
        "base LR, record the shared optimum",
    )
    _add_spec_args(p, required=False)
    p.add_argument("--out", required=True, type=Path, help="calibration sweep folder (rerun to resume)")
    p.add_argument("--data", help="packed dataset folder for every run (sets train.data.path)")
    p.add_argument("--budget", type=float, required=True, help="training FLOPs of every calibration run")
    p.add_argument("--widths", type=int, nargs="+", required=True, help="widths (d_model) to calibrate at")
    p.add_argument("--rs", type=int, nargs="+", default=[1, 4], help="loop counts (default: 1 4)")
    p.add_argument(
        "--multipliers",
        type=float,
        nargs="+",
        default=[0.5, 1.0, 2.0, 4.0],
        help="factors on every base LR (default: 0.5 1 2 4)",
    )
    p.add_argument("--ref-width", type=int, help="re-anchor the LR transfer rules at this width")
    p.add_argument("--ref-batch-tokens", type=int, help="re-anchor the batch rule at this batch (tokens)")
    p.add_argument("--workers", type=int, help="concurrent runs (default 1; resumed: as started)")
    p.add_argument("--threads", type=int, help="CPU threads per run (default: cores / workers)")
    p.set_defaults(func=cmd_lr_sweep)

    p = sub.add_parser(
        "demo",
        help="measure a recipe's effect on 2 CPU cores (the README's demo section gives its measured time): "
        "`loopscale price` against the published laptop-factorial base, capped to minutes",
    )
    p.add_argument(
        "--base",
        type=Path,
        default=Path("results/laptop-factorial"),
        help="published base sweep folder (results.csv + sweep.yaml; default results/laptop-factorial)",
    )
    p.add_argument(
        "--recipe",
        choices=sorted(PRESETS),
        default="hyperconnections",
        help="the recipe change to measure (default hyperconnections)",
    )
    p.add_argument(
        "--max-hours", type=float, default=0.1, help="wall hours of training at most (default 0.1: 4 pairs)"
    )
    p.add_argument(
        "--out", type=Path, default=DEFAULT_DEMO_OUT, help=f"sweep folder (default {DEFAULT_DEMO_OUT})"
    )
    p.add_argument("--data-root", type=Path, default=Path("data"), help="where the default corpus is built")
    p.add_argument(
        "--workers", type=int, help="concurrent runs (default: one single-threaded run per CPU core)"
    )
    _add_fit_args(p, restarts=DEMO_RESTARTS, bootstrap=DEMO_BOOTSTRAP)
    p.set_defaults(func=cmd_demo)


def _load(args: argparse.Namespace):
    from loopscale.sweep import load_spec, preset

    if args.spec and args.preset:
        raise UserError("give either a SPEC file or --preset, not both")
    if args.preset:
        return preset(args.preset)
    if args.spec:
        return load_spec(args.spec)
    return None


def cmd_plan(args: argparse.Namespace) -> int:
    from loopscale.sweep.plan import check_runnable, default_layout, format_plan, plan_sweep

    spec = _load(args)
    if spec is None:
        raise UserError("give a SPEC file or --preset NAME")
    check_counts(args.workers, None)
    runs = plan_sweep(spec)
    check_runnable(spec, runs, data=False)
    workers = args.workers or default_layout(spec, runs).workers
    sys.stdout.write(format_plan(spec, runs, args.format, wall_estimate(args, spec, runs, workers)))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from loopscale.sweep.collect import collect
    from loopscale.sweep.executors import SlurmOptions

    spec = with_data(_load(args), args.data) if (args.spec or args.preset) else None
    if spec is None and args.data:
        raise UserError("--data applies to a new sweep; a resumed sweep keeps the data of its sweep.yaml")
    if args.trainer is not None:
        if spec is None:
            raise UserError(
                "--trainer applies to a sweep given by SPEC or --preset; a resumed sweep keeps the trainer "
                "of its sweep.yaml"
            )
        spec = with_trainer(spec, args.trainer)
    slurm = SlurmOptions(
        partition=args.partition,
        timeout_min=args.timeout_min,
        cpus_per_task=args.cpus_per_task,
        gpus_per_task=args.gpus_per_task,
        mem_gb=args.mem_gb,
        parallelism=args.workers or 1,
    )
    try:
        statuses = run_sweep(
            spec, args.out, executor=args.executor, workers=args.workers, threads=args.threads, slurm=slurm
        )
    except KeyboardInterrupt:
        if args.executor == "slurm":  # the array job is the scheduler's: it runs on without this process
            what = (
                "the submitted SLURM tasks keep running (scancel stops them; a stopped run resumes from its "
                "last checkpoint): rerun the same command to resume"
            )
        else:
            what = f"every run keeps its last checkpoint: resume with `loopscale sweep --out {args.out}`"
        print(f"loopscale sweep: interrupted; {what}", file=sys.stderr)
        return 130
    rows, csv_path, _ = collect(args.out)
    print(f"results: {csv_path}")
    print(_machine_line(rows))
    return exit_code(statuses)


def _machine_line(rows: list[dict]) -> str:
    """One line on how the sweep used the machine (analysis/machine.py ``machine_use``)."""
    from loopscale.analysis.machine import machine_use
    from loopscale.report.machine import throughput_text

    use = machine_use(rows)
    throughput = throughput_text(use)
    if throughput is None:
        return f"machine use: {use.runs} finished runs, {use.flops:.3g} training FLOPs (no run timings)"
    share = use.overhead_share
    overhead = "" if share is None else f"; per-run overhead {100 * share:.1f}%"
    return (
        f"machine use: {use.flops:.3g} training FLOPs in {use.busy_wall_s / 3600:.2f} h busy wall = "
        f"{throughput}{overhead}"
    )


def cmd_lr_sweep(args: argparse.Namespace) -> int:
    from loopscale.io import atomic_write_json, check_output
    from loopscale.sweep.collect import collect
    from loopscale.sweep.lr import CALIBRATION_FILE, base_optim, calibrate, format_calibration, lr_sweep_spec
    from loopscale.sweep.rundir import SPEC_FILE

    check_counts(args.workers, args.threads)
    check_output(args.out, "--out", folder=True, kind="sweep")
    base = with_data(_load(args), args.data)
    if base is None:
        raise UserError("give the base sweep: a SPEC file or --preset NAME")
    spec = lr_sweep_spec(
        base,
        budget=args.budget,
        widths=args.widths,
        rs=args.rs,
        multipliers=args.multipliers,
        ref_width=args.ref_width,
        ref_batch_tokens=args.ref_batch_tokens,
    )
    statuses = run_sweep(spec, args.out, workers=args.workers, threads=args.threads)
    rows, _, _ = collect(args.out)
    result = calibrate(rows, base_optim(spec))
    result["sweep"] = str(args.out / SPEC_FILE)
    result["budget"] = args.budget
    atomic_write_json(args.out / CALIBRATION_FILE, result)
    print(format_calibration(result))
    print(f"wrote {args.out / CALIBRATION_FILE}")
    return exit_code(statuses)


def cmd_collect(args: argparse.Namespace) -> int:
    from loopscale.io import check_output, claimed_folder
    from loopscale.sweep.collect import collect

    check_output(args.out or args.sweep_dir, "--out", folder=True, kind="results")
    with claimed_folder(args.out or args.sweep_dir, "results"):
        rows, csv_path, parquet_path = collect(args.sweep_dir, args.out)
    counts = {status: sum(1 for r in rows if r["status"] == status) for status in ("ok", "failed", "pending")}
    print(
        f"{len(rows)} runs: {counts['ok']} ok, {counts['failed']} failed, {counts['pending']} pending → "
        f"{csv_path}, {parquet_path}"
    )
    for row in rows:
        if row["status"] != "ok":
            print(f"  {row['status']:<8} {row['run']}: {row['reason']}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from loopscale.errors import UserError
    from loopscale.io import check_output

    if args.from_analysis is not None:
        if args.sweep_dir is not None or args.out is not None:
            raise UserError("--from re-renders a saved analysis in its folder: give no SWEEP_DIR or --out")
        from loopscale.analysis.sweep import read_analysis
        from loopscale.report import render_report

        source = args.from_analysis
        folder = source if source.is_dir() else source.parent
        check_output(folder, "--from", folder=True, kind="report")  # it rewrites report.md/html there
        analysis, folder = read_analysis(source)
        report = render_report(analysis, folder)
        print(f"{report.summary_line} → {report.html}")
        return 0
    if args.sweep_dir is None:
        raise UserError("give a SWEEP_DIR to analyse, or --from ANALYSIS to re-render a saved analysis")
    check_output(args.sweep_dir, "SWEEP_DIR", folder=True, kind="sweep")
    out = args.sweep_dir / "report" if args.out is None else args.out
    check_output(out, "--out", folder=True, kind="report")
    from loopscale.sweep.rundir import open_sweep

    open_sweep(args.sweep_dir)  # not a sweep folder: say so before the fit's SciPy and matplotlib load
    report = _write_report(args.sweep_dir, out, args)
    print(f"{report.summary_line} → {report.html}")
    return 0


def _write_report(sweep_dir: Path, out: Path, args: argparse.Namespace):
    """``analysis.sweep.report_sweep`` into report folder ``out``, claimed as a loopscale report folder (or
    its sweep's)."""
    from loopscale.analysis.sweep import report_sweep
    from loopscale.io import claimed_folder

    with claimed_folder(out, "report"):
        return report_sweep(sweep_dir, out, restarts=args.restarts, bootstrap=args.bootstrap, seed=args.seed)


def cmd_demo(args: argparse.Namespace) -> int:
    """``loopscale price`` on one recipe against the published base, capped to minutes (the README's demo):
    writes the variant's sweep, price.json, the loss-change figure and report.md into ``--out``."""
    from loopscale.analysis.price import PriceSettings, price
    from loopscale.cli import require_input
    from loopscale.io import check_output

    check_counts(args.workers, None)
    check_output(args.out, "--out", folder=True, kind="sweep")  # refused before anything else is read
    check_output(args.data_root, "--data-root", folder=True, kind="data")
    require_input(args.base, "--base sweep (run the demo from the repository root)", folder=True)
    from loopscale.recipes import resolve_recipe

    settings = PriceSettings(
        recipe=resolve_recipe(args.recipe), base=args.base, out=args.out, max_hours=args.max_hours,
        workers=args.workers or 2, bootstrap=args.bootstrap, restarts=args.restarts, seed=args.seed,
        data_root=args.data_root,
    )  # fmt: skip
    price(settings)
    return 0
