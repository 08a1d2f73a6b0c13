"""The device check of issue 2, prepared to run in one call on a lent GPU (or, tiny, on CPU as a smoke test).

On a CUDA machine it prints, as Markdown rows for benchmarks/RESULTS.md:
  1. the bf16 and TF32 matmul peaks measured here (8192³ products) next to the datasheet figure;
  2. bf16 training throughput of the paper's model at s = 10 (d = 640, head_dim 128), r = 4, depth 20
     (2 + 4·4 + 2), T = 2048, V = 32,064: eager and torch.compile, tokens/s, achieved FLOP/s from the
     analytic count (loopscale.accounting) and MFU against the measured bf16 peak (target >= 50%);
  3. correctness of the fast paths: the first training losses of bf16 eager, bf16 compiled and fp32 agree
     (same seed and rows), and the r = 4 loop at r_eval = 8 stays finite;
  4. data parallelism with NCCL when 2+ GPUs are visible (2 ranks vs 1 rank on the same global batch);
     with one GPU it says so and skips.

Runs without installing anything: ``PYTHONPATH=src python3 benchmarks/gpu_check.py`` (the machine's own
torch is used; loopscale's modules need only torch, numpy and pyyaml). Budget: ≈ 4 minutes on an H200
(two cold compiles of ≈ 60 s each dominate).

    PYTHONPATH=src python3 benchmarks/gpu_check.py                  # CUDA: the full check
    .venv/bin/python benchmarks/gpu_check.py --device cpu --tiny    # CPU smoke test of this script
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch

from loopscale.accounting import flops_per_token
from loopscale.config import ModelConfig
from loopscale.model import LoopedGPT
from loopscale.train.config import OptimConfig
from loopscale.train.loop import Runtime, accumulate_gradients
from loopscale.train.optim import build_optimizers, peak_learning_rates
from loopscale.train.perf import measure_matmul_peak

H200_BF16_DENSE = 989e12  # datasheet, dense bf16 (SXM)


def model_config(args: argparse.Namespace, r: int) -> ModelConfig:
    if args.tiny:
        return ModelConfig(width=64, head_dim=32, depth=6, prelude=1, coda=1, r=r, vocab_size=512, seq_len=64)
    return ModelConfig(width=640, head_dim=128, depth=20, prelude=2, coda=2, r=r, vocab_size=32001,
                       seq_len=2048)


def seeded_model(cfg: ModelConfig, device: torch.device, batch_rows: int) -> tuple[LoopedGPT, list]:
    """The seed-0 model on ``device`` and its MuonH + AdamW optimisers (the recipe's LRs for this batch)."""
    torch.manual_seed(0)
    model = LoopedGPT(cfg).to(device)
    lrs = peak_learning_rates(OptimConfig(), cfg, batch_rows * cfg.seq_len, 1e10)
    return model, build_optimizers(model, OptimConfig(), lrs, device.type)


def optimizer_step(model: LoopedGPT, optimizers: list) -> None:
    for opt in optimizers:
        opt.step()
    model.zero_grad(set_to_none=True)


def timed_steps(args, cfg: ModelConfig, rt: Runtime, compiled: bool, rows: torch.Tensor) -> dict:
    """Seconds of forward + backward per step, fastest of ``args.steps`` after warm-up (the optimiser step
    runs between them, untimed)."""
    model, optimizers = seeded_model(cfg, rt.device, rows.size(0))
    step_fn = torch.compile(model) if compiled else model
    sync = torch.cuda.synchronize if rt.device.type == "cuda" else (lambda: None)
    losses, best, t_warm = [], float("inf"), time.perf_counter()
    for i in range(args.warmup + args.steps):
        sync()
        t0 = time.perf_counter()
        losses.append(accumulate_gradients(step_fn, model, rows, args.micro_batch, rt))
        sync()
        t1 = time.perf_counter()
        optimizer_step(model, optimizers)
        if i == args.warmup - 1:
            t_warm = time.perf_counter() - t_warm
        if i >= args.warmup:
            best = min(best, t1 - t0)
    with torch.no_grad(), rt.autocast():
        deeper = model(rows[: args.micro_batch, :-1], rows[: args.micro_batch, 1:], r=2 * cfg.layout().r)
    return {"step_s": best, "warmup_s": t_warm, "losses": losses, "loss_at_2r": float(deeper)}


def ddp_check(args) -> str:
    """2 NCCL ranks vs 1 rank, same global batch: the loss curves must agree (bf16 tolerance)."""
    if torch.cuda.device_count() < 2:
        return f"skipped: {torch.cuda.device_count()} GPU visible (NCCL needs one GPU per rank)"
    curves = {}
    for world in (1, 2):
        out = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
             __file__, "--ddp-child", *(["--tiny"] if args.tiny else [])],
            capture_output=True, text=True, env={**os.environ}, timeout=600,
        )
        if out.returncode:
            return f"failed (world {world}): {out.stderr[-500:]}"
        curves[world] = json.loads(out.stdout.strip().splitlines()[-1])
    diff = max(abs(a - b) for a, b in zip(curves[1], curves[2]))
    return f"max |loss(2 ranks) − loss(1 rank)| over {len(curves[1])} steps = {diff:.2e} (bf16)"


def ddp_child(args) -> None:
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    rt = Runtime(rank=rank, world=world, device=device, autocast_dtype=torch.bfloat16)
    cfg = model_config(args, 4)
    rows = torch.randint(0, cfg.vocab_size, (8, cfg.seq_len + 1), generator=torch.Generator().manual_seed(1))
    model, optimizers = seeded_model(cfg, device, rows.size(0))
    mine = rows[rank::world].to(device)  # the training loop's strided split of the global batch
    curve = []
    for _ in range(4):
        curve.append(accumulate_gradients(model, model, mine, 2, rt))
        optimizer_step(model, optimizers)
    if rank == 0:
        print(json.dumps(curve), flush=True)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="a tiny model (CPU smoke test of the script)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step (16 × 2048 = 32,768 tokens)")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--ddp-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.ddp_child:
        ddp_child(args)
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device visible; use --device cpu --tiny for a smoke test")
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        print(f"device: {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
        bf16_peak = measure_matmul_peak("cuda", "bfloat16")
        tf32_peak = measure_matmul_peak("cuda", "float32")
        print(f"bf16 matmul peak (8192³): {bf16_peak / 1e12:.0f} TFLOP/s "
              f"({bf16_peak / H200_BF16_DENSE:.0%} of the H200 datasheet 989); TF32: {tf32_peak / 1e12:.0f}")
    else:
        bf16_peak = measure_matmul_peak("cpu", "float32")
        print(f"cpu smoke test: fp32 matmul peak {bf16_peak / 1e9:.0f} GFLOP/s")
    cfg = model_config(args, 4)
    rows = torch.randint(0, cfg.vocab_size, (args.batch, cfg.seq_len + 1),
                         generator=torch.Generator().manual_seed(0)).to(device)
    f = flops_per_token(cfg)
    low = torch.bfloat16 if cuda else None
    fast = "bf16" if cuda else "fp32"  # the CPU smoke test has no fast bf16
    variants = {
        f"{fast} eager": (Runtime(0, 1, device, low), False),
        f"{fast} compiled": (Runtime(0, 1, device, low), True),
        "fp32 eager": (Runtime(0, 1, device, None), False),
    }
    print(f"model: d={cfg.width} r={cfg.r} depth={cfg.depth} T={cfg.seq_len} V={cfg.vocab_size}, "
          f"{f:,} FLOPs/token, batch {args.batch}×{cfg.seq_len} tokens, micro-batch {args.micro_batch}")
    print("| variant | step s | tokens/s | achieved TFLOP/s | MFU (measured peak) | warm-up s | first losses "
          "|")
    print("|---|---|---|---|---|---|---|")
    results = {}
    for name, (rt, compiled) in variants.items():
        res = results[name] = timed_steps(args, cfg, rt, compiled, rows)
        tokens_per_s = rows.size(0) * cfg.seq_len / res["step_s"]
        print(f"| {name} | {res['step_s']:.3f} | {tokens_per_s:,.0f} | {f * tokens_per_s / 1e12:.1f} | "
              f"{f * tokens_per_s / bf16_peak:.1%} | {res['warmup_s']:.0f} | "
              f"{', '.join(f'{x:.4f}' for x in res['losses'][:3])} |", flush=True)
    ref = results["fp32 eager"]["losses"]
    for name in (f"{fast} eager", f"{fast} compiled"):
        gap = max(abs(a - b) for a, b in zip(results[name]["losses"], ref))
        print(f"{name} vs fp32: max |Δ loss| over {len(ref)} steps = {gap:.4f} nats")
    deeper = results[f"{fast} compiled"]["loss_at_2r"]
    print(f"loss at r_eval = 2·r ({fast} compiled weights): {deeper:.4f} (finite: {math.isfinite(deeper)})")
    print("DDP:", ddp_check(args) if cuda else "skipped on CPU (tests/train/test_resume_ddp.py covers gloo)")


if __name__ == "__main__":
    main()
