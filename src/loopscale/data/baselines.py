"""Count-model baselines: the unigram and bigram cross-entropy (nats/token) of a dataset's validation targets.

A trained run that does not beat a bigram table has learned token statistics, not language; every report
prints these two numbers beside the runs' losses (method §8.6 asks for the scale of the loss differences; the
baselines give the scale of "learned anything").

Both models are estimated from the training split and scored on exactly the targets a run's final validation
loss averages over: the first ``val_tokens`` targets of the "val" split, row by row, each row's tokens
1 … T predicted from the token before them (train/loop.py ``validation_loss``).

- unigram: add-one (Laplace) smoothed token frequencies over the dataset's vocabulary;
- bigram: Witten–Bell interpolation of the bigram counts with that unigram,
  p(w | u) = λ_u·c(u, w)/c(u) + (1 − λ_u)·p_uni(w), λ_u = c(u)/(c(u) + T_u), T_u = distinct followers of u.
  Witten–Bell needs no tuned constant, so the baseline is a property of the data alone.

Results are cached per dataset in ``baselines.json`` (keyed by val_tokens and the number of training tokens
counted), since a sweep's runs all share one dataset.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from loopscale.data.dataset import PackedDataset
from loopscale.errors import UserError
from loopscale.io import atomic_write_json

CACHE_FILE = "baselines.json"
MAX_TRAIN_TOKENS = 200_000_000  # count at most this many training tokens (memory: 8 bytes per bigram key)
ROWS_PER_BLOCK = 4096


@dataclass(frozen=True)
class Baselines:
    """Count-model cross-entropies on one dataset's validation targets (nats/token)."""

    unigram: float
    bigram: float
    val_tokens: int  # targets scored
    train_tokens: int  # training target tokens counted
    vocab_size: int

    def to_dict(self) -> dict:
        return asdict(self)


def _pairs(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(context, target) pairs of every row: token t predicts token t + 1 within the row."""
    return rows[:, :-1].reshape(-1), rows[:, 1:].reshape(-1)


def _train_counts(ds: PackedDataset, max_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Unigram counts of the training targets, and the sorted unique bigram keys (u·V + w) with counts."""
    v = ds.vocab_size
    rows_wanted = min(ds.num_rows("train"), max(1, max_tokens // ds.seq_len))
    unigram = np.zeros(v, dtype=np.int64)
    keys: list[np.ndarray] = []
    for start in range(0, rows_wanted, ROWS_PER_BLOCK):
        block = ds.rows("train", start, min(ROWS_PER_BLOCK, rows_wanted - start))
        if int(block.max()) >= v:
            raise UserError(f"dataset {ds.path}: token id {int(block.max())} >= vocab size {v}; rebuild it")
        ctx, tgt = _pairs(block)
        unigram += np.bincount(tgt, minlength=v)
        keys.append(ctx * v + tgt)
    bigram_keys, bigram_counts = np.unique(np.concatenate(keys), return_counts=True)
    return unigram, bigram_keys, bigram_counts, rows_wanted * ds.seq_len


def compute_baselines(
    ds: PackedDataset, val_tokens: int, max_train_tokens: int = MAX_TRAIN_TOKENS
) -> Baselines:
    """Unigram and bigram cross-entropy (nats/token) on the first ``val_tokens`` validation targets."""
    available = ds.num_rows("val") * ds.seq_len
    if not 0 < val_tokens <= available:
        raise UserError(f"val_tokens must be in 1..{available:,} for {ds.path}, got {val_tokens:,}")
    v = ds.vocab_size
    unigram, keys, counts, train_tokens = _train_counts(ds, max_train_tokens)
    p_uni = (unigram + 1.0) / (unigram.sum() + v)

    ctx_of_key = keys // v
    ctx_total = np.bincount(ctx_of_key, weights=counts, minlength=v)  # c(u)
    followers = np.bincount(ctx_of_key, minlength=v).astype(np.float64)  # T_u
    with np.errstate(invalid="ignore", divide="ignore"):
        lam = np.where(ctx_total > 0, ctx_total / (ctx_total + followers), 0.0)

    val_rows = math.ceil(val_tokens / ds.seq_len)
    ctx, tgt = _pairs(ds.rows("val", 0, val_rows))
    ctx, tgt = ctx[:val_tokens], tgt[:val_tokens]
    if int(max(ctx.max(), tgt.max())) >= v:
        raise UserError(f"dataset {ds.path}: validation token id >= vocab size {v}; rebuild it")
    query = ctx * v + tgt
    pos = np.clip(np.searchsorted(keys, query), 0, len(keys) - 1)
    pair_count = np.where(keys[pos] == query, counts[pos], 0).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_bigram_ml = np.where(ctx_total[ctx] > 0, pair_count / ctx_total[ctx], 0.0)
    p_bi = lam[ctx] * p_bigram_ml + (1.0 - lam[ctx]) * p_uni[tgt]
    return Baselines(
        unigram=float(-np.log(p_uni[tgt]).mean()),
        bigram=float(-np.log(p_bi).mean()),
        val_tokens=int(val_tokens),
        train_tokens=int(train_tokens),
        vocab_size=v,
    )


def dataset_baselines(
    path: str | Path, val_tokens: int, max_train_tokens: int = MAX_TRAIN_TOKENS
) -> Baselines:
    """``compute_baselines`` for the dataset at ``path``, read from / written to its ``baselines.json``.

    A dataset folder that cannot be written (read-only) still gets its baselines, just not cached.
    """
    ds = PackedDataset(path)
    cache = ds.path / CACHE_FILE
    key = f"val{val_tokens}-train{max_train_tokens}"
    try:
        cached = json.loads(cache.read_text()) if cache.is_file() else {}
        if not isinstance(cached, dict):
            cached = {}
    except (OSError, ValueError):
        cached = {}
    if key in cached:
        try:
            return Baselines(**cached[key])
        except TypeError:
            pass  # an older layout: recompute
    result = compute_baselines(ds, val_tokens, max_train_tokens)
    try:
        atomic_write_json(cache, {**cached, key: result.to_dict()})
    except OSError:
        pass  # read-only dataset folder: the numbers are still returned
    return result


def train_baselines(train: dict) -> Baselines:
    """``dataset_baselines`` of a TrainConfig mapping's data (a sweep's ``train``): its dataset (the default
    one when unnamed) scored on its ``val_tokens`` (the whole val split when unnamed); a dataset that is not
    there is a one-line UserError."""
    from loopscale.train.config import DEFAULT_DATASET

    data = (train or {}).get("data") or {}
    path = data.get("path") or DEFAULT_DATASET
    ds = PackedDataset(path)
    val_tokens = data.get("val_tokens") or ds.num_rows("val") * ds.seq_len
    return dataset_baselines(path, int(val_tokens))
