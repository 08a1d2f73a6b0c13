"""Packed-row datasets on disk: ``meta.json`` plus memory-mapped ``.npy`` row shards per split.

Folder layout::

    DATASET/
      .loopscale           # marker: a folder loopscale created (loopscale.io.claim_folder)
      meta.json            # written last: a folder without it is an incomplete build
      tokenizer.json       # copy of the tokenizer (absent for imported rows without one)
      train/shard_00000.npy  # [rows, T + 1] uint16 (uint32 when the vocabulary needs it)
      val/shard_00000.npy

Every run reads the same rows in the same order: split rows are numbered shard by shard, and
``PackedDataset.rows(split, start, count)`` returns rows ``start .. start + count - 1`` of that fixed
sequence, wrapping past the end into the next epoch.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from loopscale.errors import UserError
from loopscale.io import atomic_write, atomic_write_json, claim_folder, claimed_folder

FORMAT = "loopscale-packed-v1"
SPLITS = ("train", "val")
ROWS_PER_SHARD = 15_000  # method §6
DTYPES = ("auto", "uint16", "uint32")
STAGING = ".build"  # a build in progress (dataset_build), installed over the folder's files when complete


def row_dtype(vocab_size: int, dtype: str = "auto") -> np.dtype:
    """Storage dtype for token ids below ``vocab_size``: uint16 when it fits (``auto``), else uint32."""
    if dtype not in DTYPES:
        raise UserError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if vocab_size < 1:
        raise UserError(f"vocab size must be positive, got {vocab_size}")
    if dtype == "auto":
        dtype = "uint16" if vocab_size <= 2**16 else "uint32"
    np_dtype = np.dtype(dtype)
    limit = np.iinfo(np_dtype).max + 1
    if vocab_size > limit:
        raise UserError(f"vocab size {vocab_size} does not fit in {dtype} (at most {limit} ids); use uint32")
    return np_dtype


@dataclass
class SplitWriter:
    """Collects rows of one split and writes them as shuffled shards of ``rows_per_shard`` rows.

    Rows inside each shard are permuted with a generator seeded by (seed, split, shard index), so the
    order is fixed for a given input. ``shuffle=False`` keeps the input order (for pre-shuffled rows).
    """

    folder: Path
    split: str
    row_len: int
    dtype: np.dtype
    seed: int = 0
    rows_per_shard: int = ROWS_PER_SHARD
    shuffle: bool = True
    shards: list[dict[str, Any]] = field(default_factory=list, init=False)  # meta.json entries so far
    _pending: list[np.ndarray] = field(default_factory=list, init=False, repr=False)

    def add(self, row: np.ndarray) -> None:
        self._pending.append(row)
        if len(self._pending) == self.rows_per_shard:
            self._flush()

    def extend(self, rows: Iterable[np.ndarray]) -> None:
        for row in rows:
            self.add(row)

    def close(self) -> dict[str, Any]:
        """Write the last partial shard; return this split's entry for meta.json."""
        if self._pending:
            self._flush()
        n_rows = sum(s["rows"] for s in self.shards)
        return {"rows": n_rows, "tokens": n_rows * self.row_len, "shards": self.shards}

    def _flush(self) -> None:
        block = np.stack(self._pending).astype(self.dtype, copy=False)
        self._pending = []
        index = len(self.shards)
        if self.shuffle:
            split_code = SPLITS.index(self.split) if self.split in SPLITS else len(SPLITS)
            rng = np.random.default_rng([self.seed, split_code, index])
            block = block[rng.permutation(len(block))]
        name = f"{self.split}/shard_{index:05d}.npy"

        def write(tmp: str) -> None:
            with open(tmp, "wb") as fh:
                np.save(fh, block)

        atomic_write(self.folder / name, write)
        self.shards.append({"file": name, "rows": len(block)})


def start_build(folder: str | Path) -> Path:
    """Ready ``folder`` for a build in place: claim it as a loopscale dataset folder (a folder loopscale
    did not create is refused), then remove an earlier build's files, meta.json first (so it reads
    incomplete)."""
    folder = claim_folder(folder, "dataset")
    _clear(folder)
    return folder


@contextmanager
def dataset_build(folder: str | Path) -> Iterator[Path]:
    """Build a dataset into a staging folder inside ``folder`` (claimed as a loopscale dataset folder)
    and install it over an earlier build only once complete (``finish_build`` wrote its meta.json).

    Until then an earlier build in ``folder`` is untouched, so input found bad while building (a parquet
    row, a tokenizer) costs nothing; a failed build removes only the staging folder, and ``folder`` when
    this build created it."""
    with claimed_folder(folder, "dataset") as folder:
        staging = folder / STAGING
        shutil.rmtree(staging, ignore_errors=True)  # left by a build that was killed
        staging.mkdir()
        try:
            yield staging
            if not (staging / "meta.json").is_file():
                raise RuntimeError("dataset_build: the build did not call finish_build")
            _clear(folder)
            for name in (*SPLITS, "tokenizer.json"):
                if (staging / name).exists():
                    os.replace(staging / name, folder / name)
            os.replace(staging / "meta.json", folder / "meta.json")  # last: now the folder is complete
            staging.rmdir()
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _clear(folder: Path) -> None:
    """Remove a build's files from ``folder``, meta.json first; anything else in the folder is left alone."""
    (folder / "meta.json").unlink(missing_ok=True)
    (folder / "tokenizer.json").unlink(missing_ok=True)
    for split in SPLITS:
        shutil.rmtree(folder / split, ignore_errors=True)


def finish_build(folder: Path, meta: dict[str, Any]) -> Path:
    """Write meta.json last; from now on the folder is a complete PackedDataset."""
    atomic_write_json(folder / "meta.json", {"format": FORMAT, **meta})
    return folder


class PackedDataset:
    """Read-only view of a packed dataset folder (see module docstring); shards are memory-mapped lazily."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        meta_path = self.path / "meta.json"
        if not meta_path.is_file():
            what = ("does not exist" if not self.path.exists()
                    else "has no meta.json (not built, or the build did not finish)")
            raise UserError(f"dataset folder {self.path} {what}; build it with `loopscale data prepare`")
        try:
            self.meta: dict[str, Any] = json.loads(meta_path.read_text())
            self.seq_len: int = int(self.meta["seq_len"])
            self.row_len: int = int(self.meta["row_len"])
            self.vocab_size: int = int(self.meta["vocab_size"])
            self.bos_id: int | None = self.meta.get("bos_id")
            self.dtype = np.dtype(self.meta["dtype"])
            self._splits: dict[str, dict[str, Any]] = self.meta["splits"]
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(f"{meta_path} is not a loopscale dataset description ({exc!r})") from None
        if self.row_len != self.seq_len + 1:
            raise UserError(f"{meta_path}: row_len {self.row_len} is not seq_len + 1 = {self.seq_len + 1}")
        self._shards: dict[str, list[np.ndarray]] = {}

    @property
    def tokenizer_path(self) -> Path | None:
        """Path of the dataset's tokenizer.json, or None when the rows were imported without one."""
        name = self.meta.get("tokenizer")
        return self.path / name if name else None

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self._splits)

    def num_rows(self, split: str) -> int:
        return int(self._split(split)["rows"])

    def num_tokens(self, split: str) -> int:
        """Tokens stored in ``split`` (rows × (T + 1)); each row yields T target tokens."""
        return self.num_rows(split) * self.row_len

    def epochs_for(self, split: str, n_rows: int) -> int:
        """Passes over ``split`` that reading ``n_rows`` rows from row 0 takes (1 when they fit in one)."""
        return max(1, math.ceil(n_rows / self.num_rows(split)))

    def rows(self, split: str, start: int, count: int) -> np.ndarray:
        """Rows ``start .. start + count - 1`` (modulo the split size) as an int64 array [count, T + 1]."""
        if start < 0 or count < 0:
            raise ValueError(f"start ({start}) and count ({count}) must be >= 0")
        shards = self._load(split)
        total = self.num_rows(split)
        offsets = np.cumsum([0] + [len(s) for s in shards])
        out = np.empty((count, self.row_len), dtype=np.int64)
        done = 0
        pos = start % total
        while done < count:
            k = int(np.searchsorted(offsets, pos, side="right")) - 1
            local = pos - int(offsets[k])
            take = min(count - done, len(shards[k]) - local)
            out[done : done + take] = shards[k][local : local + take]
            done += take
            pos = (pos + take) % total
        return out

    def check(self, split: str) -> None:
        """Open every shard of ``split`` (UserError when one is missing, truncated or of the wrong shape)."""
        self._load(split)

    def tokenizer(self):
        """The dataset's ``tokenizers.Tokenizer`` (UserError if the rows came without one)."""
        from loopscale.data.tokenizer import load_tokenizer

        if self.tokenizer_path is None:
            raise UserError(f"dataset {self.path} has no tokenizer (imported rows); pass a tokenizer.json")
        return load_tokenizer(self.tokenizer_path)

    def _split(self, split: str) -> dict[str, Any]:
        if split not in self._splits:
            raise UserError(f"dataset {self.path} has no split {split!r}; it has {', '.join(self._splits)}")
        entry = self._splits[split]
        if not entry.get("rows"):
            raise UserError(f"dataset {self.path}: split {split!r} is empty")
        return entry

    def _load(self, split: str) -> list[np.ndarray]:
        if split not in self._shards:
            arrays = []
            for shard in self._split(split)["shards"]:
                file = self.path / shard["file"]
                try:
                    arr = np.load(file, mmap_mode="r")
                except (OSError, ValueError) as exc:
                    raise UserError(f"cannot read shard {file} ({exc}); rebuild the dataset") from None
                if arr.ndim != 2 or arr.shape != (shard["rows"], self.row_len):
                    raise UserError(f"shard {file} has shape {arr.shape}, meta.json says "
                                    f"({shard['rows']}, {self.row_len}); rebuild the dataset")
                arrays.append(arr)
            self._shards[split] = arrays
        return self._shards[split]

    def __repr__(self) -> str:
        counts = ", ".join(f"{s}={self._splits[s].get('rows', 0)} rows" for s in self._splits)
        return f"PackedDataset({str(self.path)!r}, T={self.seq_len}, vocab={self.vocab_size}, {counts})"
