"""The plan of one training run, decided before anything is written: steps, tokens, batch split, validation
size, and the loop count every micro-batch runs (method §4.4; issue 41's loop-count recipes).

Loop-count recipes (``TrainConfig.depth_sampling`` or ``loop_curriculum``, at most one). Each keeps the base
run's model and initialisation, data order, learning rates and full BPTT, and changes only how many loops T a
micro-batch runs, so a recipe run and the same config without the recipe are a matched pair:

  base               T = r in every micro-batch
  poisson-lognormal  T = Poisson(e^τ) + 1, τ ~ N(ln(r − 1) − σ²/2, σ), σ = ``depth_sigma``: one draw per
                     micro-batch, E[T] = r (not clamped: a clamp would move the mean). The draws come from a
                     NumPy generator of their own seeded by the run's seed (torch's generator is untouched);
                     the j-th draw does not depend on how many are drawn, so a resumed run replays them.
  linear:F           with S steps, the first R = ⌈F·S⌉ steps run T(s) = 1 + round((r − 1)·s/R) loops (round
                     half up: 1 at step 0, rising linearly towards r), every later step r.

Micro-batch j of a step (over all ranks, rank-major: rank k runs j = k·m … k·m + m − 1) costs F(T_j)·n·T_seq
executed training FLOPs, F(T) = ``accounting.flops_per_token(model, loops=T)`` and n its sequences. A budget
run takes the step count whose executed FLOPs come nearest the budget C: for the base recipe that is the
paper's round(C / (F·B)) (method §4.4, still computed that way), so both runs of a pair spend C to within
half a step. The nominal FLOPs are what the same tokens cost at r loops. The curriculum's cheaper early steps
buy it more tokens at the same C; sampled depth prices sampling, not truncation (executed ≈ nominal). The LR
data rule's D stays int(C / F(r)), the base run's, so a pair shares its peak LRs; each decays over its own
steps.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from itertools import accumulate

import numpy as np

from loopscale.accounting import flops_per_token, steps_for_budget
from loopscale.data import PackedDataset
from loopscale.errors import UserError
from loopscale.train.config import TrainConfig, curriculum_fraction
from loopscale.train.optim import lr_data_tokens

DEPTH_STREAM = 41  # the depth sampler's generators are seeded by (run seed, this tag), apart from torch's


@dataclass(frozen=True, eq=False)
class LoopSchedule:
    """The loop count of every micro-batch of a run and what each step costs (training FLOPs)."""

    loops: np.ndarray  # [steps, micro-batches per step over all ranks] loop counts, rank-major
    cumulative_flops: tuple[int, ...]  # executed FLOPs after 0, 1, …, steps steps
    nominal_step_flops: int  # F(r)·B: one step at the nominal r
    sampled: bool  # the loop counts are depth-sampler draws (a checkpoint records how many were used)
    varies: bool  # a loop-count recipe is on (metrics log the loops of every step)

    @property
    def steps(self) -> int:
        return len(self.loops)

    @property
    def micro_batches(self) -> int:
        """Micro-batches per optimiser step, over all ranks."""
        return self.loops.shape[1]

    def executed_flops(self, steps: int | None = None) -> int:
        """Executed training FLOPs of the first ``steps`` steps (default: the whole run)."""
        return self.cumulative_flops[self.steps if steps is None else steps]

    def step_flops(self, step: int) -> int:
        """Executed training FLOPs of step ``step`` (0-based)."""
        return self.cumulative_flops[step + 1] - self.cumulative_flops[step]

    def nominal_flops(self, steps: int | None = None) -> int:
        """What the tokens of the first ``steps`` steps (default: all) cost at the nominal r loops."""
        return self.nominal_step_flops * (self.steps if steps is None else steps)

    def loops_at(self, step: int) -> list[int]:
        """The loop count of each micro-batch of step ``step`` (0-based), over all ranks."""
        return self.loops[step].tolist()

    def draws_before(self, step: int) -> int:
        """Depth-sampler draws used by the steps before ``step`` (0 without depth sampling)."""
        return step * self.micro_batches if self.sampled else 0


def sample_loops(r: int, sigma: float, n: int, seed: int) -> np.ndarray:
    """The first ``n`` loop counts of a run's depth sampler: T = Poisson(e^τ) + 1, τ ~ N(ln(r − 1) − σ²/2, σ),
    so E[e^τ] = r − 1 and E[T] = r (r >= 2, σ > 0).

    Two generators seeded from ``seed`` (one for τ, one for the Poisson counts) each draw one number per loop
    count in order, so the first n counts are a prefix of any longer draw."""
    tau_seed, count_seed = np.random.SeedSequence([seed % 2**64, DEPTH_STREAM]).spawn(2)
    tau = np.random.default_rng(tau_seed).normal(math.log(r - 1) - sigma**2 / 2, sigma, size=n)
    return np.random.default_rng(count_seed).poisson(np.exp(tau)) + 1


def curriculum_loops(r: int, fraction: Fraction, steps: int) -> np.ndarray:
    """Loop count of each of ``steps`` steps under ``linear:fraction``: 1 + round((r − 1)·s/R) for the first
    R = ⌈fraction·steps⌉ steps s (round half up, exact integer arithmetic), r after them."""
    ramp = math.ceil(fraction * steps)
    s = np.arange(steps, dtype=np.int64)
    ramped = 1 + (2 * (r - 1) * s + ramp) // (2 * ramp)
    return np.where(s < ramp, ramped, r)


def loop_schedule(cfg: TrainConfig, micro_batches: int) -> LoopSchedule:
    """The run's loop schedule for ``micro_batches`` micro-batches per step (over all ranks): ``cfg.steps``
    steps, else the step count whose executed FLOPs come nearest ``cfg.budget`` (module docstring)."""
    model, batch = cfg.model, cfg.batch_tokens
    r = model.layout().r
    per_token = functools.cache(lambda loops: flops_per_token(model, loops=loops))
    micro_tokens = batch // micro_batches
    # the base rule, and its refusals (a budget below one step at r) for every recipe alike
    steps = cfg.steps if cfg.steps is not None else steps_for_budget(cfg.budget, per_token(r), batch)
    solve = cfg.budget is not None and cfg.loop_recipe is not None  # the recipe's own step count
    # every micro-batch runs at least one loop, so this many steps spend the budget whatever they run
    most = math.ceil(cfg.budget / (per_token(1) * batch)) + 1 if solve else steps
    if cfg.depth_sampling is not None:
        draws = sample_loops(r, cfg.depth_sigma, most * micro_batches, cfg.seed).reshape(most, micro_batches)

        def loops_for(n: int) -> np.ndarray:
            return draws[:n]
    elif cfg.loop_curriculum is not None:
        fraction = curriculum_fraction(cfg.loop_curriculum)

        def loops_for(n: int) -> np.ndarray:
            return np.repeat(curriculum_loops(r, fraction, n)[:, None], micro_batches, axis=1)
    else:

        def loops_for(n: int) -> np.ndarray:
            return np.full((n, micro_batches), r, dtype=np.int64)

    def executed(n: int) -> int:
        counts = np.bincount(loops_for(n).ravel())
        return sum(int(c) * per_token(t) * micro_tokens for t, c in enumerate(counts) if c)

    if solve:
        steps = _nearest_steps(executed, cfg.budget, most)
    loops = loops_for(steps)
    lookup = np.zeros(int(loops.max()) + 1, dtype=np.int64)
    for t in np.unique(loops).tolist():
        lookup[t] = per_token(t) * micro_tokens
    return LoopSchedule(
        loops=loops,
        cumulative_flops=tuple(accumulate(lookup[loops].sum(axis=1).tolist(), initial=0)),
        nominal_step_flops=per_token(r) * batch,
        sampled=cfg.depth_sampling is not None,
        varies=cfg.loop_recipe is not None,
    )


def _nearest_steps(executed: Callable[[int], int], budget: float, most: int) -> int:
    """The step count S in 1 … ``most`` whose executed FLOPs come nearest ``budget``: the first S whose FLOPs
    reach it (bisection; ``executed`` grows with S and ``executed(most)`` reaches the budget), or S − 1 when
    that falls short of the budget by less than S overshoots it."""
    lo, hi = 1, most
    while lo < hi:
        mid = (lo + hi) // 2
        if executed(mid) >= budget:
            hi = mid
        else:
            lo = mid + 1
    if lo > 1 and budget - executed(lo - 1) < executed(lo) - budget:
        return lo - 1
    return lo


@dataclass(frozen=True)
class Plan:
    """The run's sizes, all derived from the config and the dataset before anything is written."""

    steps: int
    tokens: int  # D = steps · B
    lr_tokens: int  # D of the MuonH data factor: int(C / F), or steps · B when steps are given
    flops_per_token: int  # F at the nominal r
    rows_per_rank: int  # sequences per step on each rank
    micro_batch: int  # sequences per forward pass
    val_tokens: int
    val_rows: int
    train_epochs: int
    schedule: LoopSchedule  # the loop count of every micro-batch, and the executed FLOPs

    def rank_loops(self, step: int, rank: int) -> list[int]:
        """The loop count of each of rank ``rank``'s micro-batches at step ``step`` (0-based)."""
        per_rank = self.rows_per_rank // self.micro_batch
        return self.schedule.loops_at(step)[rank * per_rank : (rank + 1) * per_rank]


def plan_run(cfg: TrainConfig, ds: PackedDataset, world: int = 1) -> Plan:
    """Check the config against the dataset and the data-parallel world; UserError on any mismatch."""
    m = cfg.model
    if ds.seq_len != m.seq_len:
        raise UserError(
            f"model.seq_len {m.seq_len} differs from the dataset's T={ds.seq_len} ({ds.path}); "
            f"set model.seq_len: {ds.seq_len}"
        )
    if m.vocab_size < ds.vocab_size:
        raise UserError(
            f"model.vocab_size {m.vocab_size} is smaller than the dataset's vocabulary "
            f"{ds.vocab_size}; set model.vocab_size: {ds.vocab_size}"
        )
    ds.num_rows("train")  # UserError when the split is missing or empty
    val_split_rows = ds.num_rows("val")
    for split in ("train", "val"):
        ds.check(split)  # UserError when a shard is missing or truncated, before anything is written
    if ds.tokenizer_path is not None:
        ds.tokenizer()  # UserError when tokenizer.json does not load
    f = flops_per_token(m)
    if cfg.batch_rows % world:
        raise UserError(
            f"batch of {cfg.batch_rows} sequences does not split over {world} data-parallel ranks; "
            f"make batch_tokens a multiple of {m.seq_len * world}"
        )
    rows_per_rank = cfg.batch_rows // world
    micro = cfg.micro_batch or rows_per_rank
    if rows_per_rank % micro:
        raise UserError(
            f"micro_batch {micro} does not divide the {rows_per_rank} sequences per rank and step"
        )
    val_available = val_split_rows * m.seq_len
    val_tokens = cfg.data.val_tokens or val_available
    if val_tokens > val_available:
        raise UserError(
            f"data.val_tokens {val_tokens:,} exceeds the {val_available:,} target tokens of the val "
            f"split of {ds.path}; lower data.val_tokens"
        )
    schedule = loop_schedule(cfg, cfg.batch_rows // micro)
    steps = schedule.steps
    return Plan(
        steps=steps,
        tokens=steps * cfg.batch_tokens,
        lr_tokens=lr_data_tokens(cfg, f),
        flops_per_token=f,
        rows_per_rank=rows_per_rank,
        micro_batch=micro,
        val_tokens=val_tokens,
        val_rows=math.ceil(val_tokens / m.seq_len),
        train_epochs=ds.epochs_for("train", steps * cfg.batch_rows),
        schedule=schedule,
    )
