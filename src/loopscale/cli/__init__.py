"""The ``loopscale`` command: one entry point, one subcommand per pipeline step.

Each pipeline area registers its subcommands from its own module (``cli/<area>.py``) so the command
line mirrors the package: describe → data → train → plan/sweep/collect → fit → report → eval.
Every handler raises ``UserError`` for bad input; ``main`` turns it into one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from loopscale.errors import UserError

# Modules under loopscale.cli, each with register(subparsers); their order is the --help order.
AREAS = ("describe", "data", "train", "sweep", "fit", "eval")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopscale",
        description="How much is one recurrence worth? Train looped LMs, run iso-depth sweeps, fit phi.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for area in AREAS:
        importlib.import_module(f"loopscale.cli.{area}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except UserError as exc:
        print(f"loopscale {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"loopscale {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)
