"""``loopscale describe``: parameter counts and FLOPs per token for any model config."""

from __future__ import annotations

import argparse
import json

from loopscale.accounting import count_params, flops_per_token
from loopscale.config import INJECTIONS, ModelConfig, from_dict, load_yaml


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """Flags that map onto ModelConfig fields (unset flags keep the YAML/default value)."""
    g = p.add_argument_group("model (defaults: the paper's iso-depth template)")
    g.add_argument("--width", type=int, help="d_model (paper: 64·s)")
    g.add_argument("--r", type=int, help="loop count")
    g.add_argument("--depth", type=int, help="effective depth ℓ_p + r·ℓ_rec + ℓ_c")
    g.add_argument("--prelude", type=int)
    g.add_argument("--coda", type=int)
    g.add_argument("--head-dim", type=int)
    g.add_argument("--injection", choices=INJECTIONS)
    g.add_argument("--hc-lanes", type=int)
    g.add_argument("--bptt-k", type=int, help="truncated BPTT window (default: full, k = r)")
    g.add_argument("--vocab", dest="vocab_size", type=int, help="true vocabulary size")
    g.add_argument("--seq-len", type=int, help="context length T")


MODEL_FLAG_FIELDS = (
    "width", "r", "depth", "prelude", "coda", "head_dim", "injection", "hc_lanes", "bptt_k", "vocab_size",
    "seq_len",
)


def model_overrides(args: argparse.Namespace) -> dict:
    return {k: getattr(args, k) for k in MODEL_FLAG_FIELDS if getattr(args, k, None) is not None}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("describe", help="parameters (N, N_once, N_rec) and FLOPs/token of a model config")
    p.add_argument("--config", help="YAML file with model keys (flags override it)")
    add_model_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    data = load_yaml(args.config) if args.config else {}
    data.update(model_overrides(args))
    cfg = from_dict(ModelConfig, data, "model")
    lay = cfg.layout()
    counts = count_params(cfg)
    out = {
        **counts.as_dict(),
        "flops_per_token": flops_per_token(cfg),
        "flops_per_token_forward": flops_per_token(cfg, training=False),
        "width": cfg.width,
        "r": cfg.r,
        "prelude": lay.prelude,
        "rec_layers": lay.rec_layers,
        "coda": lay.coda,
        "injection": lay.injection,
        "bptt_k": cfg.effective_bptt_k,
        "n_head": cfg.n_head,
        "padded_vocab": cfg.padded_vocab,
        "seq_len": cfg.seq_len,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"layout     prelude {lay.prelude} → {lay.rec_layers} layers × r={lay.r} → coda {lay.coda} "
          f"(effective depth {lay.effective_depth}, injection {lay.injection}, "
          f"bptt_k {cfg.effective_bptt_k})")
    print(f"width      d={cfg.width}, {cfg.n_head} heads × {cfg.head_dim}, vocab {cfg.vocab_size} "
          f"(padded {cfg.padded_vocab}), T={cfg.seq_len}")
    for key, label in [("n", "N"), ("n_once", "N_once"), ("n_rec", "N_rec"), ("n_embed", "N_embed")]:
        print(f"{label:<10} {out[key]:>16,} parameters")
    print(f"{'train':<10} {out['flops_per_token']:>16,} FLOPs/token ({out['flops_per_token']:.4e})")
    print(f"{'forward':<10} {out['flops_per_token_forward']:>16,} FLOPs/token")
    return 0
