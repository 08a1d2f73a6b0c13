"""Rewrite the machine paths in published sweep folders written before loopscale recorded paths relative
to their folder (issue 20): no number changes, only paths, and running it again changes nothing.

- ``train.log``: the interpreter of each ``=== DATE COMMAND`` line (``/home/u/.venv/bin/python3``)
  becomes its name (``python3``).
- ``eval.json``: a document whose tokenizer is an absolute path (every one written before) gets its
  ``tokenizer`` and ``checkpoint`` relative to the eval.json's folder, as ``loopscale eval`` writes them
  now (``eval.suite.published``). Its ``checkpoint`` was recorded relative to the folder the evaluation
  ran in: ``--origin``.

Usage (from the repository the results were produced in)::

    python scripts/relativise_paths.py [FOLDER ...] [--origin DIR]

FOLDER defaults to ``results``. ``--origin`` is the folder the runs and evaluations ran in, as an absolute
path on the machine that wrote them (default: the current folder); a recorded path under it is taken as
the same path under the current folder. Exits 1, naming them, if absolute paths remain afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from loopscale.io import atomic_write_text
from loopscale.published import absolute_paths, path_from

TEXT_SUFFIXES = (".json", ".yaml", ".csv", ".md", ".html", ".log", ".txt")
# the interpreter of a train.log command line: "=== 2026-12-01 20:44:37 /x/.venv/bin/python3 -m ..."
_LOG_INTERPRETER = re.compile(r"^(=== \S+ \S+ )/\S*/(python[\d.]*)(?= )", re.MULTILINE)


def relativise_log(text: str) -> str:
    """train.log with each command line's interpreter by its name."""
    return _LOG_INTERPRETER.sub(r"\1\2", text)


def relativise_eval(text: str, folder: Path, origin: Path, here: Path) -> str:
    """eval.json ``text`` (in ``folder``) with checkpoint and tokenizer relative to ``folder``; unchanged
    when its tokenizer is not absolute (written by a loopscale that records relative paths)."""
    document = json.loads(text)
    if not os.path.isabs(document.get("tokenizer") or ""):
        return text
    for key in ("checkpoint", "tokenizer"):
        recorded = Path(document[key])
        if recorded.is_absolute():
            recorded = recorded.relative_to(origin) if recorded.is_relative_to(origin) else recorded
        local = recorded if recorded.is_absolute() else here / recorded
        # the value is replaced where it stands: the rest of the file, numbers included, keeps its bytes
        old = f'"{key}": {json.dumps(document[key])}'
        assert text.count(old) == 1, f"{folder}: {key} not found once"
        text = text.replace(old, f'"{key}": {json.dumps(path_from(folder, local))}')
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, default=[Path("results")])
    parser.add_argument("--origin", type=Path, default=Path.cwd(), help="the folder the runs ran in")
    args = parser.parse_args(argv)
    here = Path.cwd()
    changed, remaining = 0, []
    for root in args.folders:
        for path in sorted(root.rglob("*")):
            if path.name == "train.log":
                new = relativise_log(text := path.read_text())
            elif path.name == "eval.json":
                new = relativise_eval(text := path.read_text(), path.parent.absolute(), args.origin, here)
            else:
                if path.is_file() and path.suffix in TEXT_SUFFIXES:
                    remaining += [f"{path}: {p}" for p in absolute_paths(path.read_text())]
                continue
            if new != text:
                atomic_write_text(path, new)
                changed += 1
            remaining += [f"{path}: {p}" for p in absolute_paths(new)]
    print(f"relativise_paths: {changed} file(s) rewritten")
    for line in remaining:
        print(f"absolute path left: {line}", file=sys.stderr)
    return 1 if remaining else 0


if __name__ == "__main__":
    sys.exit(main())
