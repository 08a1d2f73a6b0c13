"""One training run to a FLOPs budget (method §4.4, §6, §7): ``train(cfg, out_dir)`` → result.json contents.

What a run does, in order (nothing is written before every input has been checked):
1. check the dataset (rows, tokenizer), the model/dataset match, the batch split and the validation size;
2. steps = round(C / (F·B)) with the exact F of ``accounting`` (or ``cfg.steps``), D = steps·B tokens
   (the LR data rule uses int(C / F), as the authors' script does); a loop-count recipe (sampled depth, a
   curriculum) fixes the loop count of every micro-batch up front and the steps its executed FLOPs take
   to the budget (``loopscale.train.plan``);
3. build the model (seeded), MuonH + AdamW with the transferred LRs, resume from the latest checkpoint;
4. for each step: read the step's B/T rows in the fixed sequential order (strided across data-parallel
   ranks), accumulate gradients over micro-batches, average them across ranks, schedule the LR (no warmup,
   linear decay to 10%), step; log step/loss/lr/tokens/tokens_per_s/mfu to metrics.jsonl (with a recipe
   also each micro-batch's loop count and the executed FLOPs so far);
5. checkpoint every N steps and/or seconds (atomically); a non-finite loss stops the run (status "failed");
6. final validation loss in nats: token-weighted mean cross-entropy over the first ``val_tokens`` target
   tokens of the "val" split (the same tokens for every run); final weights + result.json.

Precision: fp32 on CPU, bf16 autocast (TF32 matmuls) on CUDA. Data parallelism: launch with
``torchrun --nproc_per_node N loopscale train ...`` (gloo on CPU, NCCL on CUDA); every rank holds the full
model, gradients are all-reduced (averaged) once per step, rank 0 writes the run folder.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from loopscale.accounting import count_params
from loopscale.config import dump_yaml, from_dict, load_yaml, to_dict
from loopscale.data import PackedDataset
from loopscale.errors import UserError
from loopscale.io import atomic_write_json, atomic_write_text, claim_folder
from loopscale.model import LoopedGPT
from loopscale.train import checkpoint as ckpt
from loopscale.train import tracking
from loopscale.train.config import TrainConfig
from loopscale.train.optim import (
    build_optimizers,
    lr_multiplier,
    peak_learning_rates,
    reference_tokens,
    set_lr,
)
from loopscale.train.perf import compile_pays, peak_measurement, tcmalloc_active
from loopscale.train.plan import Plan, plan_run

# Fields that may change between an interrupted run and its resumption (they do not change what is
# computed, only how fast or how it is reported).
RESUMABLE_CHANGES = (
    "device",
    "precision",
    "compile",
    "micro_batch",
    "checkpoint_every_steps",
    "checkpoint_every_s",
    "log_every",
    "peak_flops",
    "progress",
    "threads",
    "tracker",
    "tracker_mode",
    "tracker_project",
    "tracker_group",
    "tracker_name",
)


@dataclass(frozen=True)
class Runtime:
    """Where this process runs: data-parallel rank/world size, torch device and autocast dtype."""

    rank: int
    world: int
    device: torch.device
    autocast_dtype: torch.dtype | None  # None = plain fp32

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)


def _runtime(cfg: TrainConfig) -> Runtime:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    kind = cfg.device.split(":")[0]
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        raise UserError("device cuda requested but no CUDA device is available; use --device cpu")
    if kind == "cuda":
        index = int(os.environ.get("LOCAL_RANK", cfg.device.split(":")[1] if ":" in cfg.device else "0"))
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        device = torch.device("cpu")
    precision = cfg.precision if cfg.precision != "auto" else ("bf16" if kind == "cuda" else "fp32")
    autocast_dtype = torch.bfloat16 if precision == "bf16" else None
    return Runtime(rank=rank, world=world, device=device, autocast_dtype=autocast_dtype)


def _check_loop_draws(state: dict[str, Any], plan: Plan, step: int, checkpoint: Path | None) -> None:
    """A resumed depth-sampled run must continue the checkpoint's draws: the draws per step follow the
    micro-batches per step (micro_batch and the number of processes), which may not change under it."""
    stored = state.get("loop_draws", 0)
    if stored != plan.schedule.draws_before(step):
        raise UserError(
            f"checkpoint {checkpoint} used {stored} depth draws in {step} steps, but this run draws "
            f"{plan.schedule.micro_batches} per step (one per micro-batch); resume with the micro_batch and "
            "number of processes the run started with"
        )


def _check_resumable(run_dir: Path, cfg: TrainConfig, resume: bool) -> dict[str, Any] | None:
    """Refuse to mix runs in one folder; return the stored result when the run already finished."""
    config_path = run_dir / "config.yaml"
    if not config_path.exists():
        return None
    if not resume:
        raise UserError(
            f"{run_dir} already holds a run; pass --resume to continue it or choose another --out"
        )
    # read as a config, so that a field added since the run started compares at its default
    stored = to_dict(from_dict(TrainConfig, load_yaml(config_path), str(config_path)))
    new = to_dict(cfg)
    stored_flat, new_flat = _flatten(stored), _flatten(new)
    differing = [
        k
        for k in sorted(set(stored_flat) | set(new_flat))
        if k not in RESUMABLE_CHANGES and stored_flat.get(k) != new_flat.get(k)
    ]
    if differing:
        raise UserError(
            f"{run_dir} holds a run with a different config (differs in: {', '.join(differing)}); "
            "use the same config to resume or choose another --out"
        )
    result_path = run_dir / "result.json"
    if result_path.is_file():
        try:
            return json.loads(result_path.read_text())
        except ValueError:
            raise UserError(f"{result_path} is corrupt; delete it to finish the run again") from None
    return None


def _resolve_threads(cfg: TrainConfig, run_dir: Path, rt: Runtime) -> TrainConfig:
    """Fix the run's CPU thread count: the configured one, else the one recorded in OUT/config.yaml (a
    resumed run), else this process's default; set it and return the config that records it."""
    from dataclasses import replace

    config_path = run_dir / "config.yaml"
    stored = load_yaml(config_path).get("threads") if config_path.is_file() else None
    threads = cfg.threads or stored or torch.get_num_threads()
    if stored is not None and threads != stored and rt.is_main:
        print(
            f"loopscale train: note: {threads} CPU thread(s) instead of the {stored} this run started with; "
            "its losses will not be bit-identical to an uninterrupted run",
            file=sys.stderr,
        )
    torch.set_num_threads(threads)
    return replace(cfg, threads=threads)


def _resolve_compile(cfg: TrainConfig, run_dir: Path, rt: Runtime, plan: Plan, peak: float | None
                     ) -> TrainConfig:
    """Fix ``compile: auto``: the value recorded in OUT/config.yaml (a resumed run: compiled and eager
    steps round differently, so a resume keeps what the run started with), else whether compiling pays for
    this run's training FLOPs at rank 0's peak (``compile_pays``; None, a peak probed under load: no), the
    same on every rank. A loop-count recipe stays eager: every loop count it draws is a graph of its own,
    compiled anew."""
    from dataclasses import replace

    if cfg.compile != "auto":
        return cfg
    config_path = run_dir / "config.yaml"
    stored = load_yaml(config_path).get("compile") if config_path.is_file() else None
    if isinstance(stored, bool):
        return replace(cfg, compile=stored)
    pays = (rt.is_main and peak is not None and cfg.loop_recipe is None
            and compile_pays(plan.schedule.executed_flops(), peak))
    decision = [pays]
    if rt.world > 1:
        dist.broadcast_object_list(decision, src=0)
    return replace(cfg, compile=bool(decision[0]))


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested config mapping → {"model.width": 640, ...} with JSON-normalised leaves (tuples → lists)."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: json.loads(json.dumps(tree))}


def _rewind_metrics(path: Path, before_step: int) -> None:
    """Keep the complete metrics lines of steps <= ``before_step`` (steps after a checkpoint are redone)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by kill -9
        if isinstance(record, dict) and record.get("step", math.inf) <= before_step:
            kept.append(line)
    atomic_write_text(path, "".join(k + "\n" for k in kept))


def _all_reduce_mean(tensors: list[torch.Tensor], world: int) -> None:
    if world == 1 or not tensors:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for t in tensors:
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()


def accumulate_gradients(
    step_fn, model: torch.nn.Module, rows: torch.Tensor, micro_batch: int, rt: Runtime,
    loops: list[int] | None = None,
) -> float:
    """Forward + backward of this rank's ``rows`` [n, T + 1] in micro-batches, gradients averaged over the
    micro-batches and the data-parallel ranks; returns the mean training loss of the global batch (nats).
    ``loops``: the loop count of each micro-batch (default: the model's r for every one)."""
    n_micro = rows.size(0) // micro_batch
    loss_sum = torch.zeros((), device=rt.device)
    for i in range(n_micro):
        chunk = rows[i * micro_batch : (i + 1) * micro_batch]
        with rt.autocast():
            loss = step_fn(chunk[:, :-1], chunk[:, 1:], r=None if loops is None else loops[i])
        (loss / n_micro).backward()
        loss_sum += loss.detach().float()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    _all_reduce_mean([*grads, loss_sum.view(1)], rt.world)
    return loss_sum.item() / n_micro


@torch.no_grad()
def validation_loss(
    model: torch.nn.Module, ds: PackedDataset, plan: Plan, rt: Runtime, r: int | None = None
) -> float:
    """Token-weighted mean cross-entropy (nats) over the first ``plan.val_tokens`` val-split targets, at
    ``r`` loops (None: the trained loop count)."""
    model.eval()
    t = ds.seq_len
    total = torch.zeros(2, dtype=torch.float64, device=rt.device)  # [sum of losses, tokens]
    mine = list(range(rt.rank, plan.val_rows, rt.world))
    for start in range(0, len(mine), plan.micro_batch):
        index = mine[start : start + plan.micro_batch]
        rows = torch.from_numpy(ds.rows("val", index[0], index[-1] - index[0] + 1)[:: rt.world])
        x, y = rows[:, :-1], rows[:, 1:].clone()
        target_index = torch.tensor(index).view(-1, 1) * t + torch.arange(t).view(1, -1)
        y[target_index >= plan.val_tokens] = -1
        x, y = x.to(rt.device), y.to(rt.device)
        with rt.autocast():
            losses = model(x, y, r=r, reduction="none")
        total[0] += losses.double().sum()
        total[1] += (y != -1).sum()
    if rt.world > 1:
        dist.all_reduce(total)
    model.train()
    return float(total[0] / total[1])


def train(cfg: TrainConfig, out_dir: str | Path, resume: bool = True) -> dict[str, Any]:
    """Run (or resume, or return the finished result of) one training run into ``out_dir``.

    Returns the result.json contents: status "ok" | "failed" (non-finite loss; ``reason`` says why).
    Bad input (config, dataset, checkpoint) raises UserError before anything is written.
    """
    cfg.validate()
    run_dir = Path(out_dir)
    rt = _runtime(cfg)
    own_group = rt.world > 1 and not dist.is_initialized()
    if own_group:
        dist.init_process_group("nccl" if rt.device.type == "cuda" else "gloo")
    try:
        return _train(cfg, run_dir, resume, rt)
    finally:
        if own_group:
            dist.destroy_process_group()


def _train(cfg: TrainConfig, run_dir: Path, resume: bool, rt: Runtime) -> dict[str, Any]:
    started = time.perf_counter()
    started_at = time.time()  # wall clock (unix seconds) of this process's start: sweep-level utilisation
    ds = PackedDataset(cfg.data.path)
    plan = plan_run(cfg, ds, rt.world)
    if plan.train_epochs > 1 and rt.is_main:
        print(
            f"loopscale train: note: {plan.steps} steps read the train split {plan.train_epochs} times "
            "(rows repeat)",
            file=sys.stderr,
        )
    tracking.require(cfg.tracker)  # a missing tracker package is refused before anything is written
    finished = _check_resumable(run_dir, cfg, resume)
    if finished is not None:
        return finished
    cfg = _resolve_threads(cfg, run_dir, rt)
    latest = ckpt.latest_checkpoint(run_dir) if resume else None
    if latest is not None:
        ckpt.read_state(latest)  # a corrupt checkpoint is refused before anything is written
    counts = count_params(cfg.model)
    peak_lrs = peak_learning_rates(cfg.optim, cfg.model, cfg.batch_tokens, plan.lr_tokens)

    torch.manual_seed(cfg.seed)
    model = LoopedGPT(cfg.model).to(rt.device)
    optimizers = build_optimizers(model, cfg.optim, peak_lrs, rt.device.type)
    state: dict[str, Any] = {"step": 0, "train_time_s": 0.0, "wall_time_s": 0.0}
    if latest is not None:
        state = ckpt.load_checkpoint(latest, model, optimizers)
    start_step = int(state["step"])
    _check_loop_draws(state, plan, start_step, latest)
    metrics_path = run_dir / "metrics.jsonl"
    dtype_name = "bfloat16" if rt.autocast_dtype is torch.bfloat16 else "float32"
    # MFU is reported by rank 0 only (other ranks skip the matmul probe so it is not disturbed).
    peak = compile_peak = cfg.peak_flops
    if peak is None and rt.is_main:
        measured = peak_measurement(str(rt.device), dtype_name)
        peak = measured.flops
        # a probe taken under load reads low, and would call runs long that are too short to pay for a
        # compile slowed by the same load: compile: auto then stays eager
        compile_peak = None if measured.busy else peak
        busy = measured.load.note("the peak FLOP/s probe reads low, so MFU reads high")
        if busy:
            print(f"loopscale train: note: {busy}", file=sys.stderr)
    cfg = _resolve_compile(cfg, run_dir, rt, plan, compile_peak)
    if rt.is_main:
        claim_folder(run_dir, "run")  # a folder loopscale did not create is refused, its files kept
        atomic_write_text(run_dir / "config.yaml", dump_yaml(cfg))
        _rewind_metrics(metrics_path, start_step)
    tracker = tracking.start(cfg, run_dir, main=rt.is_main)
    step_fn = torch.compile(model) if cfg.compile else model
    base = {
        "config": to_dict(cfg),
        **counts.as_dict(),
        "flops_per_token": plan.flops_per_token,
        "budget": cfg.budget,
        "tokens": plan.tokens,
        "steps": plan.steps,
        # training FLOPs of the whole run as executed (a loop-count recipe's loops), and what its tokens cost
        # at r; equal without a recipe. mean_loops: the loop count per micro-batch, averaged over the run.
        "executed_flops": plan.schedule.executed_flops(),
        "nominal_flops": plan.schedule.nominal_flops(),
        "mean_loops": float(plan.schedule.loops.mean()),
        "batch_tokens": cfg.batch_tokens,
        "d_ref": reference_tokens(cfg.model, cfg.optim),
        "lr_tokens": plan.lr_tokens,
        "peak_lrs": peak_lrs,
        "val_tokens": plan.val_tokens,
        "train_epochs": plan.train_epochs,
        "world_size": rt.world,
        "device": str(rt.device),
        "precision": dtype_name,
        "tcmalloc": tcmalloc_active(),
    }

    def finish(status: str, reason: str | None, steps_done: int, train_loss: float, val_loss: float | None):
        wall = state["wall_time_s"] + time.perf_counter() - started
        tokens_done = steps_done * cfg.batch_tokens
        tokens_per_s = tokens_done / state["train_time_s"] if state["train_time_s"] > 0 else None
        executed = plan.schedule.executed_flops(steps_done)
        flops_per_s = executed / state["train_time_s"] if tokens_per_s else None
        result = {
            "status": status,
            "reason": reason,
            **base,
            "steps_done": steps_done,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "val_loss_unit": "nats_per_token",  # the run contract's unit (sweep.contract)
            "wall_time_s": wall,
            "train_time_s": state["train_time_s"],
            "tokens_per_s": tokens_per_s,
            "mfu": flops_per_s / (peak * rt.world) if flops_per_s and peak else None,
            "peak_flops": peak,
            # this process's span in unix seconds (a resumed run: the last process only); the sweep report
            # takes the union of its runs' spans as the sweep's busy wall time
            "started_at": started_at,
            "finished_at": time.time(),
        }
        if rt.is_main:
            atomic_write_json(run_dir / "result.json", result)
        tracker.finish(result)
        return result

    from tqdm import tqdm

    from loopscale.progress import progress_enabled

    bar = tqdm(
        total=plan.steps,
        initial=start_step,
        disable=not (rt.is_main and cfg.progress and progress_enabled()),  # LOOPSCALE_PROGRESS=0: none
        file=sys.stderr,
        dynamic_ncols=True,
        unit="step",
    )
    metrics = open(metrics_path, "a") if rt.is_main else None  # noqa: SIM115 (closed in finally)
    last_checkpoint = time.perf_counter()
    stored_loss = state.get("train_loss")
    train_loss = math.nan if stored_loss is None else float(stored_loss)
    stop = _StopRequest(run_dir if rt.is_main else None)
    try:
        for step in range(start_step, plan.steps):
            t0 = time.perf_counter()
            lr_mult = lr_multiplier(step, plan.steps, cfg.optim.final_lr_fraction)
            set_lr(optimizers, lr_mult)
            block = ds.rows("train", step * cfg.batch_rows, cfg.batch_rows)[rt.rank :: rt.world]
            rows = torch.from_numpy(block).to(rt.device)
            loops = plan.rank_loops(step, rt.rank)
            train_loss = accumulate_gradients(step_fn, model, rows, plan.micro_batch, rt, loops)
            if not math.isfinite(train_loss):
                bar.close()
                return finish(
                    "failed",
                    f"non-finite training loss ({train_loss}) at step {step + 1}",
                    step,
                    train_loss,
                    None,
                )
            for opt in optimizers:
                opt.step()
            model.zero_grad(set_to_none=True)
            if rt.device.type == "cuda":
                torch.cuda.synchronize(rt.device)
            dt = time.perf_counter() - t0
            state["train_time_s"] += dt
            done = step + 1
            tokens_per_s = cfg.batch_tokens / dt
            mfu = plan.schedule.step_flops(step) / dt / (peak * rt.world) if peak else math.nan
            if metrics is not None and (done % cfg.log_every == 0 or done == plan.steps):
                record = {
                    "step": done,
                    "loss": train_loss,
                    "lr": lr_mult * peak_lrs["matrix"],
                    "lr_multiplier": lr_mult,
                    "tokens": done * cfg.batch_tokens,
                    "tokens_per_s": tokens_per_s,
                    "mfu": mfu,
                }
                if plan.schedule.varies:  # every micro-batch's loop count (all ranks), executed FLOPs so far
                    record.update(loops=plan.schedule.loops_at(step),
                                  flops=plan.schedule.executed_flops(done))
                metrics.write(json.dumps(record) + "\n")
                metrics.flush()
                tracker.log(record, done)
            bar.update(1)
            bar.set_postfix(loss=f"{train_loss:.4f}", tok_s=f"{tokens_per_s:,.0f}", mfu=f"{mfu:.1%}")
            due, stopping = _checkpoint_or_stop(cfg, done, plan.steps, last_checkpoint, stop, rt)
            if due or stopping:
                if rt.is_main:
                    now = time.perf_counter()
                    ckpt.save_checkpoint(
                        run_dir,
                        done,
                        model,
                        optimizers,
                        {
                            "train_loss": train_loss,
                            "next_row": done * cfg.batch_rows,
                            "loop_draws": plan.schedule.draws_before(done),
                            "train_time_s": state["train_time_s"],
                            "wall_time_s": state["wall_time_s"] + now - started,
                            "config": to_dict(cfg),
                        },
                    )
                if rt.world > 1:
                    dist.barrier()
                last_checkpoint = time.perf_counter()
                if stopping:
                    raise KeyboardInterrupt  # checkpointed at this step: --resume continues bit-exactly
    except BaseException:
        tracker.finish(None)  # interrupted: the tracker run ends unfinished (a resume continues it)
        raise
    finally:
        stop.restore()
        bar.close()
        if metrics is not None:
            metrics.close()
    try:
        val_loss = validation_loss(model, ds, plan, rt)
        if rt.is_main:
            ckpt.save_tensors(run_dir / ckpt.WEIGHTS, model.state_dict())
    except BaseException:
        tracker.finish(None)
        raise
    result = finish("ok", None, plan.steps, train_loss, val_loss)
    if rt.is_main:  # the run's own checkpoints: run_dir was claimed as a loopscale run folder above
        shutil.rmtree(run_dir / ckpt.CHECKPOINT_DIR, ignore_errors=True)
    return result


class _StopRequest:
    """SIGINT/SIGTERM during the training steps: finish the current step, write a checkpoint, then stop
    (KeyboardInterrupt), so an interrupted run (Ctrl-C, a sweep driver forwarding the signal, torchrun
    forwarding it to every rank) loses no work. A second signal stops at once.

    The first signal is acknowledged at once on stderr with the resume command of ``run_dir`` (rank 0
    passes its run folder, the other ranks None: one line per run, not per rank)."""

    def __init__(self, run_dir: Path | None = None):
        import signal
        import threading

        self.requested = False
        self._acknowledgement = (
            None
            if run_dir is None
            else "\ninterrupt received: saving a checkpoint at the end of this step; resume with: "
            f"loopscale train --out {run_dir} --resume (interrupt again to stop at once)\n"
        )
        self._previous: dict = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.requested:  # a second signal: stop at once
            raise KeyboardInterrupt
        self.requested = True
        if self._acknowledgement is not None:
            # os.write to fd 2, not print: the handler may run inside a write of the progress bar to
            # sys.stderr, and a buffered stream refuses a reentrant write
            os.write(2, self._acknowledgement.encode())

    def restore(self) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


def _checkpoint_or_stop(
    cfg: TrainConfig, done: int, steps: int, last_checkpoint: float, stop: _StopRequest, rt: Runtime
) -> tuple[bool, bool]:
    """(write a checkpoint, then stop?) after step ``done`` of ``steps``, the same answer on every rank.

    A checkpoint is due every ``checkpoint_every_steps`` steps, or once ``checkpoint_every_s`` seconds
    passed on rank 0's clock (``last_checkpoint``: perf_counter seconds), and before a requested stop;
    never after the last step. Under data parallelism the ranks agree through one all-reduce (max) per
    step: rank 0's clock decides the time-based checkpoint, and a stop signal that reached any rank stops
    every rank after the same step (torchrun forwards it to each rank at a slightly different moment)."""
    if done >= steps:
        return False, False
    due = cfg.checkpoint_every_steps is not None and done % cfg.checkpoint_every_steps == 0
    if cfg.checkpoint_every_s is not None and time.perf_counter() - last_checkpoint >= cfg.checkpoint_every_s:
        due = True
    stopping = stop.requested
    if rt.world > 1:
        flags = torch.tensor([float(due and rt.is_main), float(stopping)], device=rt.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        due, stopping = (value > 0 for value in flags.tolist())
    return due, stopping


def load_checkpoint_model(path: str | Path) -> tuple[LoopedGPT, TrainConfig]:
    """The model (CPU, eval mode) and config of a run folder (final weights, else its latest checkpoint)
    or of a checkpoint folder."""
    path = Path(path)
    if (path / ckpt.STATE).is_file():  # a checkpoint folder
        cfg = from_dict(TrainConfig, ckpt.read_state(path).get("config"), "checkpoint config")
        weights = path / ckpt.WEIGHTS
    elif (path / "config.yaml").is_file():
        cfg = from_dict(TrainConfig, load_yaml(path / "config.yaml"), "train")
        weights = path / ckpt.WEIGHTS
        if not weights.is_file():
            latest = ckpt.latest_checkpoint(path)
            if latest is None:
                raise UserError(f"{path} has neither final weights nor a checkpoint yet")
            weights = latest / ckpt.WEIGHTS
    else:
        raise UserError(f"{path} is neither a run folder (config.yaml) nor a checkpoint folder (state.json)")
    model = LoopedGPT(cfg.model)
    ckpt.load_weights(model, weights)
    return model.eval(), cfg
