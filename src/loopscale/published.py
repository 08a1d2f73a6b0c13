"""Paths in published artefacts (eval.json, train.log, and what scripts/relativise_paths.py rewrites):
relative to the artefact's folder, never a machine's absolute path, so a published sweep does not carry
the home folder of the machine that ran it. Readers join a recorded relative path to the file's folder."""

from __future__ import annotations

import os
import re

# A machine's absolute path inside text: a "/" that starts a word (line start, space, quote, "=", "(", ":",
# ",", "[") followed by a name and another "/" (/home/user/..., "/work/x/..."), but not a URL's "//", a
# unit like tokens/s or a closing HTML tag.
_ABSOLUTE_PATH = re.compile(r"""(?:^|(?<=[\s"'=(:,\[]))/[\w.-]+/[^\s"',)\]]*""", re.MULTILINE)


def path_from(folder: str | os.PathLike, path: str | os.PathLike) -> str:
    """``path`` relative to ``folder`` (``..`` where it lies outside), for a file published from
    ``folder``."""
    return os.path.relpath(os.path.abspath(path), os.path.abspath(folder))


def relative_text(text: str, folder: str | os.PathLike) -> str:
    """``text`` (an error message, a note) with every absolute path in it written relative to ``folder``,
    for a document published from ``folder``."""
    return _ABSOLUTE_PATH.sub(lambda match: path_from(folder, match.group(0)), text)


def absolute_paths(text: str) -> list[str]:
    """The absolute file paths written in ``text`` (published artefacts must hold none)."""
    return _ABSOLUTE_PATH.findall(text)
