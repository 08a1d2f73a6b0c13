"""The planner: a sweep spec → one row per run with the exact accounting (method §3–§4).

Counts, FLOPs/token and steps come from ``loopscale.paper.grid_runs`` (which uses ``loopscale.accounting``),
so the plan is the same arithmetic the training run uses to set its step count. The wall-time column is an
*estimate*: training FLOPs divided by a throughput measured on this machine by a short probe, plus each run's
measured start cost and final evaluation.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import statistics
import time
from dataclasses import dataclass, field

from loopscale.config import ModelConfig, to_dict
from loopscale.errors import UserError
from loopscale.paper import grid_runs
from loopscale.progress import progress_bar
from loopscale.sweep.results import PLAN_COLUMNS, read_results
from loopscale.sweep.spec import RunGroup, SweepSpec
from loopscale.train.perf import MachineLoad, machine_load


@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep. FLOPs are training FLOPs (method §4.2); tokens = steps × batch_tokens."""

    name: str
    group: str
    budget: float  # C, FLOPs
    width: int  # d_model
    r: int
    seed: int
    n: int
    n_once: int
    n_rec: int
    flops_per_token: int
    steps: int
    tokens: int
    model: ModelConfig

    @property
    def total_flops(self) -> int:
        """F·B·steps: the FLOPs this run actually spends (within ~0.1% of C on the paper grid)."""
        return self.flops_per_token * self.tokens

    def row(self) -> dict:
        return {
            "run": self.name,
            "group": self.group,
            "budget": self.budget,
            "width": self.width,
            "r": self.r,
            "bptt_k": self.model.effective_bptt_k,
            "seed": self.seed,
            "n": self.n,
            "n_once": self.n_once,
            "n_rec": self.n_rec,
            "flops_per_token": self.flops_per_token,
            "steps": self.steps,
            "tokens": self.tokens,
            "total_flops": self.total_flops,
        }


def run_name(group: RunGroup, budget: float, width: int, r: int, seed: int, n_seeds: int) -> str:
    """Folder-safe run name, e.g. ``main_C4.64e17_d384_r2`` (``_s<seed>`` only with several seeds)."""
    mantissa, exponent = f"{budget:.3e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    name = f"{group.name}_C{mantissa}e{int(exponent)}_d{width}_r{r}"
    return f"{name}_s{seed}" if n_seeds > 1 else name


def plan_sweep(spec: SweepSpec) -> list[PlannedRun]:
    """Every run of ``spec`` in execution order (budget, width, r, group, seed), with exact accounting.

    A width the template cannot take (e.g. not a multiple of head_dim) or a budget too small for one
    step is a UserError naming the run.
    """
    runs: list[PlannedRun] = []
    for group in spec.groups:
        for cell in group.grid:
            for width in cell.widths:
                for r in group.rs:
                    seeds = spec.seeds if group.seeds is None else group.seeds
                    for seed in seeds:
                        name = run_name(group, cell.budget, width, r, seed, len(seeds))
                        try:
                            model = spec.model_config(group, width, r)
                            (row,) = grid_runs(
                                {cell.budget: (width,)},
                                rs=(r,),
                                template=model,
                                batch_tokens=spec.batch_tokens,
                                width_unit=1,
                            )
                        except UserError as exc:
                            raise UserError(f"run {name}: {exc}") from None
                        runs.append(
                            PlannedRun(
                                name=name,
                                group=group.name,
                                budget=cell.budget,
                                width=width,
                                r=r,
                                seed=seed,
                                n=row["n"],
                                n_once=row["n_once"],
                                n_rec=row["n_rec"],
                                flops_per_token=row["flops_per_token"],
                                steps=row["steps"],
                                tokens=row["tokens"],
                                model=model,
                            )
                        )
    names = [run.name for run in runs]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})[0]
        raise UserError(f"sweep {spec.name!r}: run {dup} is planned twice (two groups share a cell and r)")
    runs.sort(key=lambda run: (run.budget, run.width, run.r, run.group, run.seed))
    return runs


def run_train_config(spec: SweepSpec, run: PlannedRun) -> dict:
    """The TrainConfig mapping of one run: the sweep's recipe (with its group's overrides deep-merged) plus
    the run's model, budget, batch and seed."""
    from loopscale.train.config import merge

    group = next(g for g in spec.groups if g.name == run.group)
    train = merge(spec.train, group.train)
    if train.get("tracker", "none") != "none":
        train.setdefault("tracker_group", spec.name)  # tracker runs grouped by sweep, named by run folder
    return {
        **train,
        "model": to_dict(run.model),
        "budget": run.budget,
        "batch_tokens": spec.batch_tokens,
        "seed": run.seed,
    }


def check_runnable(spec: SweepSpec, runs: list[PlannedRun], *, data: bool = True) -> dict[str, dict]:
    """Check every run as the training run will (config, dataset, batch split, LR transfer) so bad input
    fails with one line before anything runs, not as a column of failed runs. Imports torch. Returns each
    checked run's peak learning rates by parameter group (empty with ``data=False``).

    ``data=False`` (``plan``): each run's config only (unknown keys, bad values), refused exactly as a
    sweep refuses it, without the dataset (which need not exist yet) and without torch."""
    from loopscale.config import from_dict
    from loopscale.train.config import TrainConfig

    if data:
        from loopscale.data import PackedDataset
        from loopscale.train import plan_run, tracking
        from loopscale.train.optim import peak_learning_rates

    datasets: dict[str, PackedDataset] = {}
    rates: dict[str, dict] = {}
    for run in runs:
        try:
            cfg = from_dict(TrainConfig, run_train_config(spec, run), "train")
            if not data:
                continue
            tracking.require(cfg.tracker)
            if cfg.data.path not in datasets:
                datasets[cfg.data.path] = PackedDataset(cfg.data.path)
            plan = plan_run(cfg, datasets[cfg.data.path], world=spec.nproc)
            rates[run.name] = peak_learning_rates(cfg.optim, cfg.model, cfg.batch_tokens, plan.lr_tokens)
        except UserError as exc:
            raise UserError(f"run {run.name}: {exc}") from None
    return rates


# Measured on a 2-core CPU (docs/sweeps.md, "Using the machine"): at widths 16–96, one single-threaded run per
# core trains 12–46 % more FLOPs per second in total than one run using every core, because small matmuls
# scale poorly across threads. Above the widths measured, one run with all threads stays the default.
ONE_THREAD_MAX_WIDTH = 128


@dataclass(frozen=True)
class Layout:
    """How a local sweep uses the machine: concurrent runs and CPU threads per run (None: torch's default)."""

    workers: int
    threads: int | None
    why: str


def default_layout(spec: SweepSpec, runs: list[PlannedRun]) -> Layout:
    """The worker × thread layout a local sweep uses when the user gives neither ``--workers`` nor
    ``--threads``: one single-threaded run per core for CPU sweeps of small models, else one run."""
    return local_layout(str(spec.train.get("device", "auto")), [run.width for run in runs], spec.nproc)


def local_layout(device: str | None, widths: list[int], nproc: int = 1) -> Layout:
    """One single-threaded job per core when every job is a small model (width ≤ ONE_THREAD_MAX_WIDTH) on
    the CPU, else one job with torch's threads. Measured on 2 cores: two 1-thread runs beat one 2-thread
    run by 12–35% at small widths (docs/sweeps.md). Shared by ``sweep``, ``plan``, ``design`` and
    ``eval-sweep``; ``device`` None or "auto" means cuda when available."""
    cores = os.cpu_count() or 1
    if device in (None, "auto"):
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    widest = max(widths, default=0)
    if device != "cpu" or nproc > 1 or cores == 1:
        return Layout(1, None, f"one run at a time ({device}, {nproc} process(es) per run)")
    if widest > ONE_THREAD_MAX_WIDTH:
        return Layout(1, None, f"one run, {cores} threads (widths up to {widest} > {ONE_THREAD_MAX_WIDTH})")
    workers = max(1, min(cores, len(widths)))
    return Layout(workers, 1, f"{workers} one-thread runs at once (CPU, widths ≤ {ONE_THREAD_MAX_WIDTH})")


# ---------------------------------------------------------------------------------------------- throughput

WARMUP_STEPS = 2  # untimed steps per model before the timed ones


def _interpolate(table: dict[int, float], width: int) -> float:
    """``table[width]``: log-linear interpolation between the measured widths, clamped outside them."""
    widths = sorted(table)
    if width <= widths[0]:
        return table[widths[0]]
    if width >= widths[-1]:
        return table[widths[-1]]
    for lo, hi in zip(widths, widths[1:]):
        if lo <= width <= hi:
            t = (math.log(width) - math.log(lo)) / (math.log(hi) - math.log(lo))
            return math.exp((1 - t) * math.log(table[lo]) + t * math.log(table[hi]))
    raise AssertionError("unreachable: width lies between measured widths")


class WallEstimate:
    """A wall-time model of runs on this machine: ``seconds(run)`` of one run, ``workers`` concurrent runs.
    Subclasses: ``ThroughputProbe`` (measured now) and ``MeasuredTimes`` (measured by a finished sweep)."""

    workers: int

    def seconds(self, run: PlannedRun) -> float:
        """Wall seconds of one run."""
        raise NotImplementedError

    def summary(self) -> dict:
        """What the estimate rests on, for the JSON plan."""
        raise NotImplementedError

    def describe(self) -> str:
        """The layout and what the estimate rests on, for the plan's estimate line."""
        raise NotImplementedError

    def busy_note(self) -> str | None:
        """``MachineLoad.note`` when the estimate is pessimistic because other work shared the cores while it
        was measured, else None."""
        return None

    def sweep_seconds(self, runs: list[PlannedRun]) -> float:
        """Estimated wall time of ``runs`` spread over ``workers`` concurrent runs (seconds)."""
        return sum(self.wall_shares(runs))

    def wall_shares(self, runs: list[PlannedRun]) -> list[float]:
        """Each run's share of the sweep's estimated wall time (seconds): its own time over ``workers``, the
        packing ``sweep_seconds`` assumes (runs spread evenly over the concurrent workers)."""
        return [self.seconds(run) / self.workers for run in runs]


@dataclass(frozen=True)
class ThroughputProbe(WallEstimate):
    """Throughput measured on this machine: training in accounting FLOPs per second and the final
    evaluation in validation tokens per second, per probed width, plus the start cost of one run process."""

    flops_per_s: dict[int, float]  # width → FLOPs/s of one run (method §4.2 training FLOPs)
    device: str
    threads: int  # CPU threads per run during the probe
    workers: int  # concurrent runs the estimate assumes
    eval_tokens_per_s: dict[int, float] = field(default_factory=dict)  # width → forward-only tokens/s
    val_tokens: int = 0  # tokens of each run's final evaluation
    start_seconds: float = 0.0  # one run process: interpreter, torch import, model build
    load: MachineLoad | None = None  # the machine's load just before the probe

    def busy_note(self) -> str | None:
        """The shared busy-machine hint when other work shared the cores during the probe (its rates read
        low), else None."""
        if self.load is None:
            return None
        return self.load.note("the probe's rates read low, so the estimate is pessimistic; plan again on an "
                              "idle machine")

    def summary(self) -> dict:
        """What the estimate rests on, for the JSON plan."""
        return {
            "workers": self.workers,
            "probe_flops_per_s": self.flops_per_s,
            "device": self.device,
            "threads": self.threads,
            "probe_eval_tokens_per_s": self.eval_tokens_per_s,
            "start_seconds": round(self.start_seconds, 2),
            "load_per_core": None if self.load is None else self.load.per_core,
            "note": "estimate from a throughput probe: training, start and final evaluation; no compile",
        }

    def describe(self) -> str:
        """The layout and what the estimate rests on, for the plan's estimate line."""
        rates = ", ".join(f"d={w}: {f / 1e9:.1f}" for w, f in sorted(self.flops_per_s.items()))
        return (
            f"{self.workers} worker(s) × {self.threads} thread(s) (probe on {self.device}, GFLOP/s per run "
            f"{rates}; includes {self.start_seconds:.1f} s start and the final evaluation per run, excludes "
            "compile)"
        )

    def rate(self, width: int) -> float:
        """Training FLOPs/s at ``width``."""
        return _interpolate(self.flops_per_s, width)

    def overhead_seconds(self, run: PlannedRun) -> float:
        """Process start plus the final evaluation of one run (seconds)."""
        if not self.val_tokens:
            return self.start_seconds
        return self.start_seconds + self.val_tokens / _interpolate(self.eval_tokens_per_s, run.width)

    def seconds(self, run: PlannedRun) -> float:
        """Estimated wall seconds of one run: training, start and final evaluation (no compile)."""
        return run.total_flops / self.rate(run.width) + self.overhead_seconds(run)


@dataclass(frozen=True)
class MeasuredTimes(WallEstimate):
    """Run times a finished sweep measured on this kind of machine, as a cost model with the probe's
    interface: a run costs its steps × the median seconds per training step of that sweep's runs at the same
    (width, r), plus their median overhead (wall − training time: start, evaluation, checkpoint). Unlike the
    probe it does not move with the load at the moment it is read; it holds for the layout (workers ×
    threads) the sweep ran with."""

    step_seconds: dict[tuple[int, int], float]  # (width, r) → median s per training step
    overhead_seconds: float
    workers: int  # concurrent runs the estimate assumes
    source: str

    @classmethod
    def from_table(cls, path, workers: int) -> MeasuredTimes:
        """From a ``results.csv`` that ``loopscale collect`` wrote (finished runs with ``train_time_s``)."""
        per_step: dict[tuple[int, int], list[float]] = {}
        overheads = []
        for row in read_results(path):
            train, wall, steps = row.get("train_time_s", math.nan), row["wall_time_s"], row["steps"]
            if row["status"] != "ok" or not (math.isfinite(train) and math.isfinite(wall) and steps):
                continue
            per_step.setdefault((int(row["width"]), int(row["r"])), []).append(train / steps)
            overheads.append(wall - train)
        if not per_step:
            raise UserError(f"{path}: no finished run with measured train and wall times")
        step_seconds = {key: statistics.median(v) for key, v in per_step.items()}
        return cls(step_seconds, statistics.median(overheads), workers, str(path))

    def seconds(self, run: PlannedRun) -> float:
        """Wall seconds of one run (its steps at the measured s/step of its width and r, plus overhead)."""
        key = (run.width, run.r)
        if key not in self.step_seconds:
            widths = sorted({w for w, _ in self.step_seconds})
            rs = sorted({r for _, r in self.step_seconds})
            raise UserError(
                f"{self.source} measured no run at width {run.width}, r = {run.r} to cost {run.name} from "
                f"(its widths {widths}, its r {rs}); drop --timings to use the probe, or give a sweep that "
                "ran these widths and r"
            )
        return run.steps * self.step_seconds[key] + self.overhead_seconds

    def summary(self) -> dict:
        """What the estimate rests on, for the JSON plan."""
        return {
            "workers": self.workers,
            "measured_step_seconds": {f"d{w}_r{r}": v for (w, r), v in sorted(self.step_seconds.items())},
            "overhead_seconds": round(self.overhead_seconds, 2),
            "note": f"estimate from the measured run times of {self.source}: training and overhead per run",
        }

    def describe(self) -> str:
        """The layout and what the estimate rests on, for the plan's estimate line."""
        return (
            f"{self.workers} worker(s) (the measured run times of {self.source}: median s/step at each width "
            f"and r over {len(self.step_seconds)} (width, r), plus {self.overhead_seconds:.1f} s per run)"
        )


def measure_start_seconds() -> float:
    """Seconds to start one run process here: a fresh interpreter that imports torch and the trainer."""
    import subprocess
    import sys

    begin = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import loopscale.train.loop"], check=True, capture_output=True, timeout=600
    )
    return time.perf_counter() - begin


def measure_throughput(
    spec: SweepSpec,
    runs: list[PlannedRun],
    *,
    workers: int = 1,
    steps: int = 20,
    min_seconds: float = 2.0,
    max_probe_flops: float = 3e11,
) -> ThroughputProbe | None:
    """Time real training steps (forward, backward, MuonH/AdamW step; two warm-up steps, then up to
    ``steps`` timed ones, stopping after 3 once ``min_seconds`` have been timed) of the planned models on
    random tokens, with the run's recipe, batch (capped so one probe step costs at most ``max_probe_flops``)
    and device.

    Probes up to three widths (smallest, middle, largest affordable); wider models are estimated at the
    widest probed width's rate (the printed probe widths show it). Returns None when even the narrowest
    model is too expensive to probe here (e.g. the paper grid on a CPU). Units: accounting FLOPs (method §4.2)
    per second; excludes process start, compilation and the final evaluation.
    """
    by_width: dict[int, PlannedRun] = {}
    for run in runs:
        by_width.setdefault(run.width, run)
    affordable = [
        w
        for w in sorted(by_width)
        if by_width[w].flops_per_token * by_width[w].model.seq_len <= max_probe_flops
    ]
    if not affordable:
        return None
    chosen = sorted({affordable[0], affordable[len(affordable) // 2], affordable[-1]})
    # one unit per probed model (two passes) and one for the process start; the bar covers torch's import
    with progress_bar(2 * len(chosen) + 1, "throughput probe", "model") as advance:
        import torch

        from loopscale.config import from_dict
        from loopscale.model import LoopedGPT
        from loopscale.train.config import TrainConfig
        from loopscale.train.optim import build_optimizers, lr_data_tokens, peak_learning_rates

        rates, eval_rates, device, val_tokens = {}, {}, "cpu", 0
        load = machine_load()
        torch.manual_seed(0)
        threads_before = torch.get_num_threads()
        threads = max(1, (os.cpu_count() or 1) // workers)  # what each of ``workers`` CPU runs gets
        torch.set_num_threads(threads)
        # Two passes over the widths, the second one kept: the first pass in a fresh process reads up to 40%
        # low (the demo's d = 16: 10–12 GFLOP/s against 15–18 in the second pass and 17–18 in its real runs).
        for width in [*chosen, *chosen]:
            run = by_width[width]
            cfg = from_dict(TrainConfig, run_train_config(spec, run), "train")
            device = (
                "cuda"
                if cfg.device == "auto" and torch.cuda.is_available()
                else cfg.device.replace("auto", "cpu")
            )
            row_flops = run.flops_per_token * run.model.seq_len
            rows = max(1, min(cfg.batch_rows, int(max_probe_flops // row_flops)))
            model = LoopedGPT(run.model).to(device)
            tokens = lr_data_tokens(cfg, run.flops_per_token)
            lrs = peak_learning_rates(cfg.optim, run.model, cfg.batch_tokens, tokens)
            optimizers = build_optimizers(model, cfg.optim, lrs, torch.device(device).type)
            idx = torch.randint(0, run.model.vocab_size, (rows, run.model.seq_len + 1), device=device)
            # Small models need many steps (3 read the demo's d = 16 26% low); large ones stop after 3 steps
            # once min_seconds are timed.
            elapsed, timed = 0.0, 0
            for step in range(steps + WARMUP_STEPS):
                start = time.perf_counter()
                model(idx[:, :-1], idx[:, 1:]).backward()
                for opt in optimizers:
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                if step >= WARMUP_STEPS:
                    elapsed += time.perf_counter() - start
                    timed += 1
                    if timed >= 3 and elapsed >= min_seconds:
                        break
            rates[width] = run.flops_per_token * rows * run.model.seq_len * timed / elapsed
            # the final evaluation: forward passes of the same rows without gradients (train/loop.py)
            model.eval()
            with torch.no_grad():
                model(idx[:, :-1], idx[:, 1:], reduction="none")
                start = time.perf_counter()
                model(idx[:, :-1], idx[:, 1:], reduction="none")
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                eval_rates[width] = rows * run.model.seq_len / (time.perf_counter() - start)
            val_tokens = cfg.data.val_tokens or 0
            del model, optimizers
            advance(1)
        torch.set_num_threads(threads_before)
        start_seconds = measure_start_seconds()
        advance(1)
    return ThroughputProbe(
        flops_per_s=rates,
        device=device,
        threads=threads,
        workers=workers,
        eval_tokens_per_s=eval_rates,
        val_tokens=val_tokens,
        start_seconds=start_seconds,
        load=load,
    )


# ---------------------------------------------------------------------------------------------- formatting


def plan_rows(runs: list[PlannedRun], probe: WallEstimate | None = None) -> list[dict]:
    rows = []
    for run in runs:
        row = run.row()
        if probe is not None:
            row["est_seconds"] = round(probe.seconds(run), 1)
        rows.append(row)
    return rows


def format_plan(spec: SweepSpec, runs: list[PlannedRun], fmt: str, probe: WallEstimate | None) -> str:
    """The plan as ``table`` (human), ``csv`` or ``json``; the wall time is labelled as an estimate, from the
    throughput probe or a finished sweep's measured run times."""
    rows = plan_rows(runs, probe)
    if fmt == "json":
        doc = {
            "sweep": spec.name,
            "batch_tokens": spec.batch_tokens,
            "runs": rows,
            "total_flops": sum(r.total_flops for r in runs),
        }
        if probe is not None:
            doc["estimate"] = {"seconds": round(probe.sweep_seconds(runs), 1), **probe.summary()}
        return json.dumps(doc, indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(
            buf, fieldnames=list(rows[0]) if rows else list(PLAN_COLUMNS), lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue()
    if fmt != "table":
        raise UserError(f"unknown plan format {fmt!r}; use table, csv or json")
    header = (
        f"{'run':<34} {'width':>5} {'r':>2} {'k':>2} {'N_once':>13} {'N_rec':>13} {'FLOPs/token':>11} "
        f"{'steps':>7} {'tokens':>15} {'total FLOPs':>11}"
    )
    if probe is not None:
        header += f" {'est. time':>10}"
    lines = [header, "-" * len(header)]
    for run in runs:
        line = (
            f"{run.name:<34} {run.width:>5} {run.r:>2} {run.model.effective_bptt_k:>2} {run.n_once:>13,} "
            f"{run.n_rec:>13,} {run.flops_per_token:>11.4e} {run.steps:>7,} {run.tokens:>15,} "
            f"{run.total_flops:>11.3e}"
        )
        if probe is not None:
            line += f" {format_seconds(probe.seconds(run)):>10}"
        lines.append(line)
    total = sum(r.total_flops for r in runs)
    lines.append(
        f"{len(runs)} runs, {total:.3e} training FLOPs in total, B = {spec.batch_tokens:,} tokens/step"
    )
    if probe is None:
        lines.append(
            "no wall-time estimate (probe skipped, or the narrowest model is too large to probe here)"
        )
    else:
        lines.append(
            f"ESTIMATE of wall time on this machine: {format_seconds(probe.sweep_seconds(runs))} with "
            f"{probe.describe()}"
        )
        busy = probe.busy_note()
        if busy:
            lines.append(busy)
    return "\n".join(lines) + "\n"


def format_seconds(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
