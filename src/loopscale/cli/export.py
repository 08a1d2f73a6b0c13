"""``loopscale export``: a run as a self-contained Hugging Face folder (docs/export.md)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write a run's model as a Hugging Face folder (AutoModelForCausalLM with trust_remote_code)",
        description="Write RUN (a run folder, finished or with a checkpoint, or a checkpoint folder) as a "
                    "self-contained Hugging Face folder: config.json, the modelling code (torch + "
                    "transformers only), model.safetensors, the tokenizer, generation_config.json and a "
                    "model card README.md. The loop count is config.r (from_pretrained(DIR, "
                    "trust_remote_code=True, r=8) runs 8 loops). See docs/export.md.",
    )
    p.add_argument("run", type=Path, help="run folder (or checkpoint folder)")
    p.add_argument("--out", type=Path, required=True, help="new or empty folder to write")
    p.add_argument("--tokenizer", type=Path,
                   help="tokenizer.json (default: the one of the run's training data set)")
    p.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    from loopscale.cli import require_input
    from loopscale.export.hf import check_export

    if args.tokenizer is not None:
        require_input(args.tokenizer, "tokenizer", folder=None)
    check_export(args.run, args.out)  # before torch loads
    from loopscale.export.hf import export_run

    config = export_run(args.run, args.out, args.tokenizer)
    print(f"wrote {args.out}: {config['injection']} injection, r = {config['r']} "
          f"({config['prelude']} + {config['r']} x {config['rec_layers']} + {config['coda']} layers)")
    return 0
