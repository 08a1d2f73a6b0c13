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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


# ---------------------------------------------------------------------------------------- output folders
#
# The one output-path policy of every command that writes a folder: loopscale writes into (and clears parts
# of) only folders it created. Each such folder holds a marker file, MARKER, naming its kind and the
# loopscale version that created it. An output folder is accepted when it does not exist yet, is empty, or
# is a loopscale folder of a compatible kind (marked, or recognised by the files an earlier loopscale
# version wrote there, and then marked); the file system root and the home folder never are.

MARKER = ".loopscale"
# Folder kinds, in the order an unmarked folder is recognised by its files: a report written into its
# sweep folder (``report SWEEP --out SWEEP``) leaves a sweep folder.
FOLDER_KINDS = ("sweep", "run", "dataset", "corpus", "data", "report", "results", "plots")
# Kinds an output of a kind may also be written into: a report or results table into its sweep folder.
WRITABLE_INTO = {"report": ("sweep",), "results": ("sweep",)}
# The subfolders `loopscale data prepare` and `eval prepare` create in a data root (--root, default data/).
DATA_ROOT_ENTRIES = ("sources", "corpus", "tokenizers", "packed", "tasks")
SHOWN_CHARS = 200


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr``-free text of a user-given value for an error line, cut to ``limit`` characters ("…" marks a
    cut), so that a 100 kB argument does not become a 100 kB error line."""
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_output(
    path: str | os.PathLike, flag: str, *, folder: bool, kind: str | None = None, deep: bool = False
) -> Path:
    """Refuse an output path that cannot or must not be written, before any work is done (one-line
    ``UserError``).

    ``folder``: the path is (or will be) a folder of ``kind`` (one of FOLDER_KINDS) that the command writes
    into; otherwise a file. Checks that the path has the right kind when it exists, that no ancestor is a
    regular file, and that the nearest existing folder (the path itself for an existing output folder) is
    writable; for a folder, the output-folder policy above (``claim_folder`` applies it again when writing
    starts); for a file, that it is not written into the file system root. ``deep``: every folder inside an
    existing output folder must be writable too (a run or sweep folder whose files are rewritten on resume).
    """
    from loopscale.errors import UserError

    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        raise UserError(f"{flag} {shown(path)}: exists and is not a folder; give a folder")
    if not folder and path.is_dir():
        raise UserError(f"{flag} {shown(path)}: is a folder; give a file path")
    if folder:
        if kind is None:
            raise TypeError("check_output of a folder needs its kind")
        _folder_kind(path, f"{flag} {shown(path)}", kind)
    elif path.absolute().parent == Path(path.absolute().anchor):
        raise UserError(
            f"{flag} {shown(path)}: writes into the file system root; give a path inside a folder"
        )
    existing = path if folder and path.is_dir() else None
    if existing is None:
        for parent in path.absolute().parents:
            if parent.exists():
                if not parent.is_dir():
                    raise UserError(f"{flag} {shown(path)}: {shown(parent)} is a file, not a folder")
                existing = parent
                break
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {shown(path)}: cannot write into {shown(existing)} (permission denied)")
    if deep and folder and path.is_dir():
        # Files already inside (a resumed run or sweep) are rewritten too: their folders must be writable.
        for sub in path.rglob("*"):
            if sub.is_dir() and not os.access(sub, os.W_OK | os.X_OK):
                raise UserError(f"{flag} {shown(path)}: cannot write into {shown(sub)} (permission denied)")
    return path


def claim_folder(path: str | os.PathLike, kind: str) -> Path:
    """Make ``path`` a loopscale folder of ``kind`` before writing into it: refuse it as ``check_output``
    does (library callers get the policy too), create it and write its marker (atomically) unless it has
    one. Call it once the inputs are validated, right before the first write."""
    path = Path(path)
    found = _folder_kind(path, shown(path), kind)
    path.mkdir(parents=True, exist_ok=True)
    if not (path / MARKER).is_file():
        from loopscale import __version__

        atomic_write_text(path / MARKER, json.dumps({"kind": found, "loopscale": __version__}) + "\n")
    return path


@contextmanager
def claimed_folder(path: str | os.PathLike, kind: str) -> Iterator[Path]:
    """``claim_folder`` for the writes of the block. When the block fails, a marker this call wrote is
    removed again where the folder does not need it: a folder an earlier version wrote (recognised by its
    files) or one left holding nothing else (removed too when this call created it), so a refused input
    leaves nothing behind."""
    path = Path(path)
    existed, marked = path.exists(), (path / MARKER).is_file()
    held_files = existed and any(path.iterdir())
    claim_folder(path, kind)
    try:
        yield path
    except BaseException:
        if not marked and (held_files or {entry.name for entry in path.iterdir()} <= {MARKER}):
            (path / MARKER).unlink(missing_ok=True)
            if not existed:
                path.rmdir()
        raise


def contained(root: str | os.PathLike, name: str, what: str) -> Path:
    """``root / name`` for a user-given folder ``name`` (one path component), refusing a name that would
    leave ``root`` (``..``, a path, a symlink out of it) or cannot name a folder."""
    from loopscale.errors import UserError

    root = Path(root)
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name or len(name) > 100:
        raise UserError(
            f"{what} {shown(name)!r} must be a folder name of 1-100 characters, not a path (no '/', "
            "'..' or '.')"
        )
    target = root / name
    if not target.resolve().is_relative_to(root.resolve()):
        raise UserError(f"{what} {shown(name)!r}: {shown(target)} leads outside {shown(root)}")
    return target


def folder_kind(path: str | os.PathLike) -> str | None:
    """The loopscale kind of an existing folder: its marker's, else the kind its files show (a folder an
    earlier loopscale version wrote), else None (not a loopscale folder)."""
    from loopscale.errors import UserError

    path = Path(path)
    marker = path / MARKER
    if marker.is_file():
        try:
            kind = json.loads(marker.read_text()).get("kind")
        except (ValueError, UnicodeDecodeError, AttributeError):
            kind = None
        if kind not in FOLDER_KINDS:
            raise UserError(f"{shown(marker)}: not a loopscale folder marker; give a new or empty folder")
        return kind
    return next((kind for kind in FOLDER_KINDS if kind in _LOOKS_LIKE and _LOOKS_LIKE[kind](path)), None)


def _folder_kind(path: Path, label: str, kind: str) -> str:
    """The kind to record for output folder ``path`` wanted as ``kind``: ``kind`` for a new or empty folder,
    the folder's own for a loopscale folder that can take it; else one-line UserError starting ``label``."""
    from loopscale.errors import UserError

    if kind not in FOLDER_KINDS:
        raise ValueError(f"unknown folder kind {kind!r}")
    resolved = path.resolve()
    if resolved == Path(resolved.anchor):
        raise UserError(f"{label}: is the file system root; give a new or empty folder")
    if resolved == Path.home().resolve():
        raise UserError(f"{label}: is your home folder; give a new or empty folder")
    if not path.is_dir() or not any(path.iterdir()):
        return kind
    found = folder_kind(path)
    if found is None:
        raise UserError(
            f"{label}: folder is not empty and was not created by loopscale (no {MARKER} "
            "file); give a new or empty folder"
        )
    if found != kind and found not in WRITABLE_INTO.get(kind, ()):
        raise UserError(
            f"{label}: holds a loopscale {found} folder, not a {kind} folder; give a new or "
            "empty folder"
        )
    return found


def _yaml_keys(file: Path) -> set[str]:
    """Top-level keys of a YAML mapping file (empty when it is missing or not a mapping)."""
    from loopscale.config import load_yaml
    from loopscale.errors import UserError

    if not file.is_file():
        return set()
    try:
        data = load_yaml(file)
    except (UserError, OSError):
        return set()
    return set(data) if isinstance(data, dict) else set()


def _json_object(file: Path) -> dict:
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text())
    except (ValueError, UnicodeDecodeError, OSError):
        return {}
    return data if isinstance(data, dict) else {}


def _first_line(file: Path) -> str:
    if not file.is_file():
        return ""
    with open(file, encoding="utf-8", errors="replace") as fh:
        return fh.readline()


def _only_folders(path: Path, names: tuple[str, ...]) -> bool:
    """Whether ``path`` holds at least one entry and nothing but folders named in ``names``."""
    entries = list(path.iterdir())
    return bool(entries) and all(entry.is_dir() and entry.name in names for entry in entries)


# How a folder that an earlier loopscale version wrote (before markers) shows its kind: by the file that
# version wrote first and its content, never by a file name alone.
_LOOKS_LIKE: dict[str, Callable[[Path], bool]] = {
    # sweep.yaml: the resolved SweepSpec (rundir.init_sweep)
    "sweep": lambda p: {"name", "groups", "batch_tokens"} <= _yaml_keys(p / "sweep.yaml"),
    # config.yaml (written by the run) or run.yaml (by its sweep, before the run starts): a TrainConfig
    "run": lambda p: any(
        {"model", "data", "optim", "batch_tokens"} <= _yaml_keys(p / name)
        for name in ("config.yaml", "run.yaml")
    ),
    # meta.json of a packed dataset (data.dataset.FORMAT)
    "dataset": lambda p: str(_json_object(p / "meta.json").get("format", "")).startswith("loopscale-packed-"),
    # meta.json + documents.jsonl of a corpus (data.corpus.write_corpus)
    "corpus": lambda p: (p / "documents.jsonl").is_file()
    and {"documents", "characters", "sources"} <= set(_json_object(p / "meta.json")),
    # a data root holding only folders that `data prepare` / `eval prepare` create (data/sources: the
    # set-up script's downloads)
    "data": lambda p: _only_folders(p, DATA_ROOT_ENTRIES),
    # report.md under its title (report.build; report.price for `price --against`, whose folder is a report
    # folder: a price's own folder is a sweep, recognised first)
    "report": lambda p: _first_line(p / "report.md").startswith(("# loopscale report", "# Price of")),
    # results tables (collect --out) and figure folders (fit --plots) were not recognisable before markers
}

