"""``loopscale train``: one training run to a FLOPs budget (or a number of steps) into a run folder.

Exit codes: 0 ok, 2 bad input (one line on stderr, nothing written), 3 the run failed (non-finite loss;
result.json records status "failed" and the reason). On CPU the command re-executes itself once with
tcmalloc preloaded when /usr/lib/*/libtcmalloc_minimal.so.4 exists (set LOOPSCALE_NO_TCMALLOC=1 to keep glibc
malloc): the allocator changes CPU training throughput by tens of percent (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from loopscale.cli.describe import add_model_flags, model_overrides

REEXEC_MARK = "LOOPSCALE_TCMALLOC_REEXEC"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train one looped (or plain) model to a FLOPs budget; resumable",
        description="Train one model. YAML (--config) and flags are merged into one TrainConfig "
        "(flags win); the resolved config is written to OUT/config.yaml.",
    )
    p.add_argument(
        "--config", help="YAML TrainConfig (keys: model, data, optim, budget, steps, batch_tokens, ...)"
    )
    p.add_argument(
        "--out", required=True, type=Path, help="run folder (config, metrics, checkpoints, result)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in OUT from its latest checkpoint (its config.yaml is the config: no "
        "--config needed)",
    )
    add_model_flags(p)
    g = p.add_argument_group("run")
    g.add_argument("--data", dest="data_path", help="packed dataset folder (loopscale data prepare)")
    g.add_argument(
        "--val-tokens", type=int, help="target tokens of the final validation loss (default: whole split)"
    )
    g.add_argument("--budget", type=float, help="training FLOPs C; steps = round(C / (F·B))")
    g.add_argument("--steps", type=int, help="optimiser steps (instead of --budget)")
    g.add_argument("--batch-tokens", type=int, help="global batch B in tokens (paper: 262144)")
    g.add_argument(
        "--micro-batch", type=int, help="sequences per forward pass per rank (gradient accumulation)"
    )
    g.add_argument("--seed", type=int)
    g.add_argument("--depth-sampling", help="loop count drawn per micro-batch: poisson-lognormal (E[T] = r)")
    g.add_argument("--depth-sigma", type=float, help="σ of the depth sampler's log-normal (default 0.5)")
    g.add_argument("--loop-curriculum", help="linear:F: loops ramp 1 → r over the first F of the steps")
    g.add_argument(
        "--threads",
        type=int,
        help="CPU threads (default: OMP_NUM_THREADS or all cores; on --resume the count the run started "
        "with, since another count is not bit-identical)",
    )
    g.add_argument("--device", help="auto | cpu | cuda | cuda:N")
    g.add_argument("--precision", choices=["auto", "fp32", "bf16"])
    g.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=None,
        help="torch.compile the model (default: the config's, false; compile: auto in a config compiles a "
        "run long enough to pay for it)",
    )
    g.add_argument("--checkpoint-every-steps", type=int)
    g.add_argument("--checkpoint-every-s", type=float)
    g.add_argument("--log-every", type=int, help="metrics.jsonl line every N steps")
    g.add_argument("--peak-flops", type=float, help="FLOP/s per device for MFU (default: measured, cached)")
    g.add_argument(
        "--no-progress", dest="progress", action="store_false", default=None, help="no progress bar"
    )
    g.add_argument("--tracker", help="experiment tracker: none (default) | wandb | trackio")
    g.add_argument("--tracker-mode", help="wandb: offline (default, into OUT/wandb) | online")
    o = p.add_argument_group("optimiser")
    o.add_argument("--recipe", choices=["muonh", "adamw"])
    o.add_argument("--matrix-lr", type=float, help="MuonH base LR (paper 0.014)")
    o.add_argument(
        "--d-ref", type=float, help="LR data reference D_ref in tokens (default: 10 × reference params)"
    )
    p.set_defaults(func=run)


RUN_FLAGS = (
    "budget",
    "steps",
    "batch_tokens",
    "micro_batch",
    "seed",
    "depth_sampling",
    "depth_sigma",
    "loop_curriculum",
    "device",
    "precision",
    "compile",
    "checkpoint_every_steps",
    "checkpoint_every_s",
    "log_every",
    "peak_flops",
    "progress",
    "threads",
    "tracker",
    "tracker_mode",
)
OPTIM_FLAGS = ("recipe", "matrix_lr", "d_ref")


def overrides_from_args(args: argparse.Namespace) -> dict:
    """Flags that were given → a nested TrainConfig override mapping."""
    out: dict = {k: getattr(args, k) for k in RUN_FLAGS if getattr(args, k) is not None}
    # --steps and --budget are alternatives: a flag for one replaces the other from the YAML.
    if args.steps is not None and args.budget is None:
        out["budget"] = None
    if args.budget is not None and args.steps is None:
        out["steps"] = None
    model = model_overrides(args)
    if model:
        out["model"] = model
    data = {"path": args.data_path, "val_tokens": args.val_tokens}
    data = {k: v for k, v in data.items() if v is not None}
    if data:
        out["data"] = data
    optim = {k: getattr(args, k) for k in OPTIM_FLAGS if getattr(args, k) is not None}
    if optim:
        out["optim"] = optim
    return out


def maybe_reexec_with_tcmalloc(device: str | None) -> None:
    """Replace this process by itself with tcmalloc in LD_PRELOAD (CPU runs from the command line only)."""
    from loopscale.train.perf import tcmalloc_active, tcmalloc_library

    if device and device.startswith("cuda"):
        return
    # Only when this process is `loopscale train …` or `python -m loopscale train …` (not a caller of main()).
    own_main = Path(__file__).resolve().parent.parent / "__main__.py"
    program = Path(sys.argv[0])
    is_loopscale = program.name == "loopscale" or program.resolve() == own_main
    launched_as_command = is_loopscale and sys.argv[1:2] == ["train"]
    library = tcmalloc_library()
    if not launched_as_command or library is None or tcmalloc_active() or os.environ.get(REEXEC_MARK):
        return
    env = {
        **os.environ,
        REEXEC_MARK: "1",
        "LD_PRELOAD": f"{library} {os.environ.get('LD_PRELOAD', '')}".strip(),
    }
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "loopscale", *sys.argv[1:]], env)


def _config_source(args: argparse.Namespace) -> str | Path | None:
    """The YAML the run's config starts from: --config, else (with --resume) the run folder's config.yaml.

    A run folder is self-describing, so ``--resume`` alone continues it; ``--resume`` of a folder that holds
    no run is an error, never a silent fresh start."""
    from loopscale.errors import UserError

    stored = args.out / "config.yaml"
    if args.resume and not stored.is_file():
        raise UserError(
            f"--resume: {args.out} holds no run to resume (no config.yaml); start it without --resume"
        )
    if args.config is not None:
        return args.config
    return stored if args.resume else None


def _die_with_torchrun() -> None:
    """In a rank started by torchrun (Linux): get SIGKILL when torchrun dies. torchrun starts each rank in
    a session of its own and a killed torchrun (kill -9, or the sweep executor's death signal) cannot stop
    them, so without this the ranks of a killed sweep train on as orphans beside its rerun."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG; kept across exec


def run(args: argparse.Namespace) -> int:
    from loopscale.errors import UserError

    try:
        return _run(args)
    except UserError:
        # Under torchrun every rank checks the same input and would print the same line: local rank 0 says
        # it (one line, exit 2), the others only exit 2.
        if int(os.environ.get("LOCAL_RANK", "0")) != 0:
            return 2
        raise


def _run(args: argparse.Namespace) -> int:
    from loopscale.io import check_output

    _die_with_torchrun()
    check_output(args.out, "--out", folder=True, kind="run", deep=True)
    from loopscale.train.config import load_train_config

    # the whole config is checked before the re-exec and before torch loads
    cfg = load_train_config(_config_source(args), overrides_from_args(args))
    maybe_reexec_with_tcmalloc(args.device)
    from loopscale.train.loop import train

    try:
        result = train(cfg, args.out, resume=args.resume)
    except KeyboardInterrupt:
        print(
            f"loopscale train: interrupted; resume with `loopscale train --out {args.out} --resume`",
            file=sys.stderr,
        )
        return 130
    if result["status"] != "ok":
        print(
            f"loopscale train: run failed: {result['reason']} (see {args.out / 'result.json'})",
            file=sys.stderr,
        )
        return 3
    if int(os.environ.get("RANK", "0")) == 0:
        speed = f"{result['tokens_per_s']:,.0f} tokens/s" if result["tokens_per_s"] else "resumed at the end"
        print(
            f"val_loss {result['val_loss']:.4f} nats after {result['steps']} steps, "
            f"{result['tokens']:,} tokens ({speed}) → {args.out / 'result.json'}"
        )
    return 0
