"""Training throughput of looped models on this machine: tokens/s, achieved FLOP/s, fraction of matmul peak.

For every width × r (effective depth fixed, so FLOPs/token are nearly equal across r) × mode (eager,
compiled) the script times real training steps (the code path of ``loopscale train``:
forward + backward via ``accumulate_gradients``, then the MuonH/AdamW step) and reports, for forward +
backward,
  tokens/s, achieved FLOP/s = analytic training FLOPs/token (loopscale.accounting) × tokens/s, and the ratio
  to the fp32 matmul peak measured in the same run (a 2048² matmul, best of 5, probed once per round; the
  best probe of the run is the peak),
and the optimiser step's seconds separately (its cost scales with unique parameters, not tokens: at the
paper's 262,144-token batch it is small; at a benchmark batch of 512 tokens it would dominate r = 1).
The machine is shared and its speed drifts by tens of percent within minutes, so every config is built
first and the timed steps are interleaved: round k times one step of every config (the order flipping each
round) and probes the peak; each config reports its fastest step. Ratios between configs (r = 4 vs r = 1,
compiled vs eager) therefore compare the same minutes of the machine. Each
allocator (tcmalloc preloaded vs glibc malloc) runs in its own child process, one after the other.

    .venv/bin/python benchmarks/train_throughput.py --threads 2                 # eager, both allocators
    .venv/bin/python benchmarks/train_throughput.py --threads 2 --compile --widths 256 --steps 12 \
        --allocators tcmalloc --injections linear additive                        # + compiled (cold compiles)

Targets (issue 2): compiled >= 65% of peak at d >= 256; looped r = 4 >= 95% of r = 1 tokens/s. The r > 1
models use the paper's linear injection, whose W_inj adds ~4% FLOPs/token over the plain r = 1 model;
``--injections additive`` adds a control with the FLOPs of r = 1. Figures: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def child(args: argparse.Namespace) -> None:
    import torch

    from loopscale.accounting import flops_per_token
    from loopscale.config import ModelConfig
    from loopscale.model import LoopedGPT
    from loopscale.train.config import OptimConfig
    from loopscale.train.loop import Runtime, accumulate_gradients
    from loopscale.train.optim import build_optimizers, peak_learning_rates
    from loopscale.train.perf import measure_matmul_peak, tcmalloc_active

    if args.threads:
        torch.set_num_threads(args.threads)
    modes = ["eager", "compiled"] if args.compile else ["eager"]
    rt = Runtime(rank=0, world=1, device=torch.device("cpu"), autocast_dtype=None)
    template = TEMPLATES[args.template]
    seq_len, vocab = args.seq_len or template["seq_len"], args.vocab or template["vocab_size"]
    batch = args.batch or template["batch"]
    rows = torch.randint(0, vocab, (batch, seq_len + 1))
    variants = []
    # r = 1 is the plain model (no injection); every r > 1 runs once per --injections entry.
    shapes = [(width, r, injection) for width in args.widths for r in args.rs
              for injection in (["none"] if r == 1 else args.injections)]
    template = TEMPLATES[args.template]
    for width, r, injection in shapes:
        for mode in modes:
            cfg = ModelConfig(width=width, r=r, depth=args.depth or template["depth"],
                              prelude=template["prelude"], coda=template["coda"],
                              head_dim=template["head_dim"], vocab_size=args.vocab or template["vocab_size"],
                              seq_len=args.seq_len or template["seq_len"],
                              injection="auto" if r == 1 else injection)
            torch.manual_seed(0)
            model = LoopedGPT(cfg)
            optim = OptimConfig(d_ref=1e9)  # LR values do not change the step time
            lrs = peak_learning_rates(optim, cfg, batch * seq_len, 1e9)
            variants.append(dict(
                key=dict(mode=mode, width=width, r=r, injection=injection),
                flops_per_token=flops_per_token(cfg), model=model,
                step_fn=torch.compile(model) if mode == "compiled" else model,
                optimizers=build_optimizers(model, optim, lrs, "cpu"),
                model_s=[], optimizer_s=[], warmup_s=0.0,
            ))

    def step(v: dict) -> tuple[float, float]:
        t0 = time.perf_counter()
        accumulate_gradients(v["step_fn"], v["model"], rows, batch, rt)
        t1 = time.perf_counter()
        for opt in v["optimizers"]:
            opt.step()
        v["model"].zero_grad(set_to_none=True)
        return t1 - t0, time.perf_counter() - t1

    for v in variants:  # warm-up (the compiled variants compile here)
        t0 = time.perf_counter()
        for _ in range(args.warmup):
            step(v)
        v["warmup_s"] = time.perf_counter() - t0
    # Timed rounds: one step of every variant per round, the order flipping each round, and a matmul peak
    # probe per round, so that every variant and the peak sample the same (shared, noisy) machine.
    peaks = []
    for round_index in range(args.steps):
        peaks.append(measure_matmul_peak("cpu", "float32"))
        for v in variants if round_index % 2 == 0 else reversed(variants):
            model_s, optimizer_s = step(v)
            v["model_s"].append(model_s)
            v["optimizer_s"].append(optimizer_s)
    eager = {tuple(v["key"][k] for k in ("width", "r", "injection")): v for v in variants
             if v["key"]["mode"] == "eager"}
    for v in variants:
        # The least-disturbed step. Forward + backward only: the optimiser step costs per unique
        # parameter, not per token, and is reported on its own.
        tokens_per_s = batch * seq_len / min(v["model_s"])
        full_s = [m + o for m, o in zip(v["model_s"], v["optimizer_s"], strict=True)]
        # the same shape's eager step of the same round: the ratio of two steps timed seconds apart
        base = eager[tuple(v["key"][k] for k in ("width", "r", "injection"))]
        base_full = [m + o for m, o in zip(base["model_s"], base["optimizer_s"], strict=True)]
        print(json.dumps({
            "median_full_step_s": statistics.median(full_s),
            "median_speedup_vs_eager": statistics.median(
                b / f for b, f in zip(base_full, full_s, strict=True)
            ),
            "median_peak_flops": statistics.median(peaks),
            "batch_tokens": batch * seq_len,
            "allocator": "tcmalloc" if tcmalloc_active() else "glibc",
            **v["key"],
            "flops_per_token": v["flops_per_token"],
            "tokens_per_s": tokens_per_s,
            "achieved_flops": v["flops_per_token"] * tokens_per_s,
            "peak_flops": max(peaks),
            "optimizer_s": min(v["optimizer_s"]),
            "warmup_s": v["warmup_s"],
            "threads": torch.get_num_threads(),
        }), flush=True)


# Model templates: "paper" is the paper's layout at CPU scale (depth 12 = 2 + 8 + 2, head_dim 64, T 256,
# vocabulary 4,096, 4 sequences); "laptop" is the laptop sweep's (sweep/presets.py: depth 10 = 1 + 8 + 1,
# head_dim 16, T 128, vocabulary 1,024, 2,048-token batches of 16 sequences), which the sweeps run with one
# thread per worker and two workers on two cores.
TEMPLATES = {
    "paper": dict(depth=12, prelude=2, coda=2, head_dim=64, vocab_size=4096, seq_len=256, batch=4),
    "laptop": dict(depth=10, prelude=1, coda=1, head_dim=16, vocab_size=1024, seq_len=128, batch=16),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--widths", type=int, nargs="+", default=[256, 384])
    p.add_argument("--rs", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--template", choices=sorted(TEMPLATES), default="paper",
                   help="model layout, vocabulary, T and batch (see TEMPLATES); the flags below override it")
    p.add_argument("--depth", type=int, default=0, help="effective depth (0 = the template's)")
    p.add_argument("--injections", nargs="+", default=["linear"], choices=["linear", "additive", "none"],
                   help="injection of the r > 1 models (the paper's is linear; additive and none have no "
                   "injection matmul, which separates the cost of looping from the cost of W_inj)")
    p.add_argument("--seq-len", type=int, default=0, help="T (0 = the template's)")
    p.add_argument("--vocab", type=int, default=0, help="vocabulary (0 = the template's)")
    p.add_argument("--batch", type=int, default=0, help="sequences per step (0 = the template's)")
    p.add_argument("--steps", type=int, default=6,
                   help="timed rounds: one step of every config per round (the fastest step is reported)")
    p.add_argument("--repeats", type=int, default=1, help="runs of every allocator, alternating (best kept)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per config (compiles)")
    p.add_argument("--compile", action="store_true", help="also time torch.compile (cold compile per config)")
    p.add_argument("--allocators", nargs="+", default=["tcmalloc", "glibc"], choices=["tcmalloc", "glibc"])
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    from loopscale.train.perf import tcmalloc_library

    load_before = os.getloadavg()[0]
    runs = []
    for _ in range(args.repeats):  # allocators alternate: both see similar load
        for allocator in args.allocators:
            env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
            if allocator == "tcmalloc":
                if tcmalloc_library() is None:
                    print("tcmalloc not installed; skipping", file=sys.stderr)
                    continue
                env["LD_PRELOAD"] = tcmalloc_library()
            child_argv = [sys.executable, __file__, *sys.argv[1:], "--child"]
            done = subprocess.run(child_argv, env=env, capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"benchmark child ({allocator}) failed:\n{done.stderr[-3000:]}")
            runs += [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    best: dict[tuple, dict] = {}
    for run in runs:  # best tokens/s and best peak over the repeats (the least-disturbed measurements)
        key = (run["allocator"], run["mode"], run["width"], run["r"], run["injection"])
        if key not in best:
            best[key] = dict(run)
        best[key]["tokens_per_s"] = max(best[key]["tokens_per_s"], run["tokens_per_s"])
        best[key]["peak_flops"] = max(best[key]["peak_flops"], run["peak_flops"])
        best[key]["optimizer_s"] = min(best[key]["optimizer_s"], run["optimizer_s"])
    peak = max(row["peak_flops"] for row in best.values())  # "% of peak" is against the best probe
    print(
        f"fp32 matmul peak (best probe): {peak / 1e9:.1f} GFLOP/s, {runs[0]['threads']} threads, "
        f"{args.repeats} repeat(s), load average before: {load_before:.2f}, after: {os.getloadavg()[0]:.2f}"
    )
    # tokens/s .. vs glibc: the fastest forward + backward; "full step": forward + backward + optimiser, the
    # median over the rounds, against the best probe; "vs eager": the median over rounds of the same
    # shape's eager full step / this one (steps of one round are seconds apart); warm-up: the untimed
    # steps, compile included
    columns = ("allocator mode d r injection FLOPs/token tokens/s GFLOP/s %_of_peak vs_r=1 vs_glibc "
               "optimizer_s full_step_s full_step_%_of_peak vs_eager warm-up_s")
    print("| " + " | ".join(c.replace("_", " ") for c in columns.split()) + " |")
    print("|---" * len(columns.split()) + "|")
    for (allocator, mode, width, r, injection), row in best.items():
        achieved = row["flops_per_token"] * row["tokens_per_s"]
        base = best.get((allocator, mode, width, 1, "none"))
        glibc = best.get(("glibc", mode, width, r, injection))
        cells = [
            allocator,
            mode,
            width,
            r,
            injection,
            f"{row['flops_per_token']:.3e}",
            f"{row['tokens_per_s']:,.0f}",
            f"{achieved / 1e9:.1f}",
            f"{achieved / peak:.1%}",
            f"{row['tokens_per_s'] / base['tokens_per_s']:.1%}" if base else "-",
            f"{row['tokens_per_s'] / glibc['tokens_per_s']:.2f}x" if glibc else "-",
            f"{row['optimizer_s']:.2f}",
            f"{row['median_full_step_s']:.3f}",
            f"{row['flops_per_token'] * row['batch_tokens'] / row['median_full_step_s'] / peak:.1%}",
            f"{row['median_speedup_vs_eager']:.2f}x",
            f"{row['warmup_s']:.0f}",
        ]
        print("| " + " | ".join(map(str, cells)) + " |")


if __name__ == "__main__":
    main()
