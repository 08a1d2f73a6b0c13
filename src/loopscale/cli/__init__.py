"""The ``loopscale`` command: one entry point, one subcommand per pipeline step.

Each pipeline area registers its subcommands from its own module (``cli/<area>.py``) so the command
line mirrors the package: describe → data → train → plan/sweep/collect → fit → report → eval.
Every handler raises ``UserError`` for bad input; ``main`` turns it into one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
import warnings
from pathlib import Path

from loopscale import __version__
from loopscale.errors import UserError

# Modules under loopscale.cli, each with register(subparsers); their order is the --help order.
AREAS = ("describe", "data", "train", "sweep", "fit", "design", "price", "eval", "export")


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit code 2 (no usage block).

    Subparsers inherit the class (argparse creates them with ``type(parent)``)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="loopscale",
        description="How much is one recurrence worth? Train looped LMs, run iso-depth sweeps, fit phi.",
    )
    parser.add_argument("--version", action="version", version=f"loopscale {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for area in AREAS:
        importlib.import_module(f"loopscale.cli.{area}").register(sub)
    return parser


# Two-word spellings of subcommands: `loopscale eval prepare` is `loopscale eval-prepare` (`eval` itself
# takes a checkpoint path; write ./prepare for a run folder of that name).
ALIASES = {("eval", "prepare"): "eval-prepare"}
# Commands that an interrupt leaves resumable by running them again as they were typed (each skips what is
# done); `train` and `sweep` print their own resume command.
RESUMED_BY_RERUN = ("lr-sweep", "eval-sweep", "demo", "price", "eval-depth")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if tuple(argv[:2]) in ALIASES:
        argv = [ALIASES[tuple(argv[:2])], *argv[2:]]
    args = parser.parse_args(argv)
    name = f"loopscale {args.command}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default", UserWarning)
        code, error = _run(args)
    if code == 130 and error is not None and args.command in RESUMED_BY_RERUN:
        # without --force ("evaluate again"): a rerun keeps what the interrupted one finished
        again = [arg for arg in argv if arg != "--force"]
        error += f"; resume with `{shlex.join(['loopscale', *again])}`"
    ours = [_one_line(str(w.message)) for w in caught if w.category.__module__.startswith("loopscale")]
    for w in caught:  # other libraries' warnings, as Python shows them
        if not w.category.__module__.startswith("loopscale"):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
    if error is not None:
        # loopscale's own warnings (e.g. the runs a fit skipped) explain the error: same line, no source path
        extra = f" ({'; '.join(ours)})" if ours and code == 2 else ""
        print(f"{name}: {error}{extra}", file=sys.stderr)
    else:
        for note in ours:
            print(f"{name}: note: {note}", file=sys.stderr)
    return code


def _run(args: argparse.Namespace) -> tuple[int, str | None]:
    """(exit code, the one-line error or None) of the subcommand."""
    from loopscale.io import shown

    try:
        return int(args.func(args) or 0), None
    except UserError as exc:
        return 2, f"error: {_one_line(str(exc))}"
    except OSError as exc:
        # The file system refused a read or write that the checks before the work could not foresee (disk
        # full, a folder made read-only meanwhile): one line naming the path, like other bad input.
        where = f": {shown(exc.filename)}" if exc.filename else ""
        return 2, f"error: {exc.strerror or exc}{where}"
    except KeyboardInterrupt:
        return 130, "interrupted"


def _one_line(message: str) -> str:
    return " ".join(message.split()) if "\n" in message else message


def require_input(path: Path, what: str, *, folder: bool | None) -> Path:
    """Refuse an input that is missing or of the wrong kind (``folder``; None: either) with a one-line
    ``UserError`` naming ``what``.

    Commands call it first, before they load torch, SciPy or tokenizers, so a mistyped path is answered at
    once; the loaders still check the contents."""
    if not path.exists():
        raise UserError(f"{what} not found: {path}")
    if folder is True and not path.is_dir():
        raise UserError(f"{what} {path} is a file; give a folder")
    if folder is False and path.is_dir():
        raise UserError(f"{what} {path} is a folder; give a file")
    return path
