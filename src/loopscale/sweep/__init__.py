"""Sweeps: spec (YAML → dataclasses), presets, planner, executors (local, SLURM) and collect."""

from loopscale.sweep.plan import PlannedRun, plan_sweep, run_train_config
from loopscale.sweep.presets import PRESETS, preset
from loopscale.sweep.spec import BudgetWidths, RunGroup, SweepSpec, load_spec

__all__ = [
    "PRESETS",
    "BudgetWidths",
    "PlannedRun",
    "RunGroup",
    "SweepSpec",
    "load_spec",
    "plan_sweep",
    "preset",
    "run_train_config",
]
