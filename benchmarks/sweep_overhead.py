"""Per-run fixed overhead of a sweep on `cpu`-preset-sized runs (issue 4 benchmark; target <= 10%).

Every run of a sweep is its own process: interpreter start and imports, dataset open, model build (and
compilation when enabled), the final validation pass and the result/checkpoint writes are paid once per
run on top of the training steps. This script runs real runs of a preset exactly as `loopscale sweep` does
(``execute_run``: one ``loopscale train`` process each) in a scratch sweep folder and reports, per run,

    process wall time (measured around the process) − training-loop time (result.json ``train_time_s``,
    the sum of the optimiser-step times) = fixed overhead, and overhead / process wall time.

The default selection is the worst case: the smallest budget of the preset (shortest runs) at its
narrowest and widest width for r = 1 and r = 4, plus the widest r = 4 run of the largest budget.

    .venv/bin/python benchmarks/sweep_overhead.py                       # cpu preset, default runs
    .venv/bin/python benchmarks/sweep_overhead.py --runs main_C1e12_d32_r2 --workers 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def default_selection(runs) -> list:
    budgets = sorted({run.budget for run in runs})
    low = [run for run in runs if run.budget == budgets[0] and run.r in (1, 4)]
    widths = sorted({run.width for run in low})
    chosen = [run for run in low if run.width in (widths[0], widths[-1])]
    top = [run for run in runs if run.budget == budgets[-1] and run.r == 4]
    return chosen + [max(top, key=lambda run: run.width)] if top else chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--data", help="packed dataset (default: the preset's)")
    parser.add_argument("--runs", nargs="*", help="run names of the preset (default: worst-case selection)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per run (the preset runs 2 × 1)")
    args = parser.parse_args()

    from loopscale.sweep import plan_sweep, preset
    from loopscale.sweep.executors import execute_run
    from loopscale.sweep.rundir import init_sweep

    spec = preset(args.preset)
    if args.data:
        spec.train = {**spec.train, "data": {**spec.train.get("data", {}), "path": args.data}}
    planned = {run.name: run for run in plan_sweep(spec)}
    if args.runs:
        selection = [planned[name] for name in args.runs]
    else:
        selection = default_selection(list(planned.values()))
    for group in spec.groups:  # restrict the scratch sweep to the selected runs' cells
        group.grid = [cell for cell in group.grid if any(r.budget == cell.budget for r in selection)]
    print(f"{'run':<28}{'steps':>7}{'process s':>11}{'training s':>12}{'overhead s':>12}{'overhead':>10}")
    total_wall = total_overhead = 0.0
    with tempfile.TemporaryDirectory(prefix="sweep-overhead-") as tmp:
        root = Path(tmp)
        init_sweep(spec, root)
        for run in selection:
            start = time.perf_counter()
            status = execute_run(root, run.name, spec.nproc, args.threads)
            wall = time.perf_counter() - start
            if status != "ok":
                print(f"{run.name}: {status}; see {root / 'runs' / run.name / 'train.log'}", file=sys.stderr)
                return 1
            result = json.loads((root / "runs" / run.name / "result.json").read_text())
            overhead = wall - result["train_time_s"]
            total_wall += wall
            total_overhead += overhead
            print(f"{run.name:<28}{result['steps']:>7}{wall:>11.2f}{result['train_time_s']:>12.2f}"
                  f"{overhead:>12.2f}{overhead / wall:>10.1%}")
    print(f"{'all measured runs':<28}{'':>7}{total_wall:>11.2f}{total_wall - total_overhead:>12.2f}"
          f"{total_overhead:>12.2f}{total_overhead / total_wall:>10.1%}   (target <= 10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
