"""Atomic file writes: write to a temporary file in the same folder, fsync, then rename.

A reader (or a rerun after kill -9) therefore sees either the old file or the complete new one, never a
half-written file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` to produce the file, then atomically move it onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    # mkstemp creates 0600; give the file the mode open() would (0666 minus the umask), so a sweep on a
    # shared cluster is readable by the group as the user's umask intends.
    os.chmod(tmp, 0o666 & ~_umask())
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def remove_partial_writes(path: str | os.PathLike) -> list[Path]:
    """Delete the temporary files an ``atomic_write`` of ``path`` left behind when its process was killed
    mid-write (``path`` itself is never touched); the paths removed. Call it only when no other process
    may be writing ``path``."""
    path = Path(path)
    removed = []
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def _umask() -> int:
    """The process umask. Linux shows it in /proc/self/status; elsewhere the only way to read it is to set
    it and restore it at once, which races with files that other threads (a sweep's workers) create."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    return atomic_write(path, write)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def sha256_file(path: str | os.PathLike, chunk_bytes: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in ``chunk_bytes`` chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Strict JSON: a non-finite float (a diverged loss) is written as null, never as a bare NaN/Infinity
    that strict readers reject; the document says why in its own fields (e.g. ``reason``)."""
    text = json.dumps(_finite(obj), indent=2, sort_keys=False, default=_json_default, allow_nan=False)
    return atomic_write_text(path, text + "\n")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: _finite(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(value) for value in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, str):
        return _finite(obj.tolist())
    return obj


def _json_default(obj: Any) -> Any:
    # NumPy scalars and arrays appear in results; JSON has no type for them.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def check_output(path: str | os.PathLike, flag: str, *, folder: bool, deep: bool = False) -> Path:
    """Refuse an output path that cannot be written, before any work is done (one-line ``UserError``).

    ``folder``: the path is (or will be) a folder that the command writes into; otherwise a file. Checks that
    the path has the right kind when it exists, that no ancestor is a regular file, and that the nearest
    existing folder (the path itself for an existing output folder) is writable; ``deep``: every folder
    inside an existing output folder too (a run or sweep folder whose files are rewritten on resume).
    """
    from loopscale.errors import UserError

    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path}: exists and is not a folder; give a folder")
    if not folder and path.is_dir():
        raise UserError(f"{flag} {path}: is a folder; give a file path")
    existing = path if folder and path.is_dir() else None
    if existing is None:
        for parent in path.absolute().parents:
            if parent.exists():
                if not parent.is_dir():
                    raise UserError(f"{flag} {path}: {parent} is a file, not a folder")
                existing = parent
                break
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: cannot write into {existing} (permission denied)")
    if deep and folder and path.is_dir():
        # Files already inside (a resumed run or sweep) are rewritten too: their folders must be writable.
        for sub in path.rglob("*"):
            if sub.is_dir() and not os.access(sub, os.W_OK | os.X_OK):
                raise UserError(f"{flag} {path}: cannot write into {sub} (permission denied)")
    return path
