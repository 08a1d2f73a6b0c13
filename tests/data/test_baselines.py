"""Count-model baselines: equal to a direct dictionary computation, cached, and ordered as theory says."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest

from loopscale.data.baselines import CACHE_FILE, compute_baselines, dataset_baselines
from loopscale.data.dataset import PackedDataset, SplitWriter, finish_build, row_dtype, start_build
from loopscale.errors import UserError

V, T = 12, 8


def _markov_rows(rng: np.random.Generator, nxt: np.ndarray, n_rows: int) -> np.ndarray:
    """Rows from a sparse first-order Markov chain (so a bigram beats a unigram by a clear margin)."""
    rows = np.empty((n_rows, T + 1), dtype=np.int64)
    for i in range(n_rows):
        tok = int(rng.integers(0, V))
        for j in range(T + 1):
            rows[i, j] = tok
            tok = int(nxt[tok, rng.integers(0, 2)]) if rng.random() < 0.9 else int(rng.integers(0, V))
    return rows


@pytest.fixture()
def dataset(tmp_path) -> PackedDataset:
    rng = np.random.default_rng(0)
    folder = start_build(tmp_path / "ds")
    splits = {}
    nxt = rng.integers(0, V, size=(V, 2))  # one chain for both splits
    for split, n in (("train", 300), ("val", 40)):
        writer = SplitWriter(folder, split, T + 1, row_dtype(V), rows_per_shard=128)
        writer.extend(_markov_rows(rng, nxt, n))
        splits[split] = writer.close()
    meta = {"seq_len": T, "row_len": T + 1, "vocab_size": V, "dtype": "uint16", "splits": splits}
    finish_build(folder, meta)
    return PackedDataset(folder)


def _reference(ds: PackedDataset, val_tokens: int) -> tuple[float, float]:
    """Unigram (add-one) and Witten–Bell bigram cross-entropy, written out with Counters."""
    train = ds.rows("train", 0, ds.num_rows("train"))
    uni, bi = Counter(), Counter()
    for row in train:
        for u, w in zip(row[:-1].tolist(), row[1:].tolist()):
            uni[w] += 1
            bi[(u, w)] += 1
    total = sum(uni.values())
    c_u = Counter()
    t_u = Counter()
    for (u, _), c in bi.items():
        c_u[u] += c
        t_u[u] += 1
    val = ds.rows("val", 0, math.ceil(val_tokens / T))
    pairs = [(u, w) for row in val for u, w in zip(row[:-1].tolist(), row[1:].tolist())][:val_tokens]
    nll_u = nll_b = 0.0
    for u, w in pairs:
        p_u = (uni[w] + 1) / (total + V)
        lam = c_u[u] / (c_u[u] + t_u[u]) if c_u[u] else 0.0
        p_b = lam * (bi[(u, w)] / c_u[u] if c_u[u] else 0.0) + (1 - lam) * p_u
        nll_u -= math.log(p_u)
        nll_b -= math.log(p_b)
    return nll_u / len(pairs), nll_b / len(pairs)


@pytest.mark.parametrize("val_tokens", [1, 37, 40 * T])
def test_equals_direct_count(dataset, val_tokens):
    got = compute_baselines(dataset, val_tokens)
    uni, bi = _reference(dataset, val_tokens)
    assert got.unigram == pytest.approx(uni, rel=1e-12)
    assert got.bigram == pytest.approx(bi, rel=1e-12)
    assert got.val_tokens == val_tokens and got.train_tokens == 300 * T


def test_bigram_beats_unigram_beats_uniform(dataset):
    got = compute_baselines(dataset, 40 * T)
    assert got.bigram < got.unigram <= math.log(V) + 0.05


def test_cached_and_rejects_bad_sizes(dataset):
    first = dataset_baselines(dataset.path, 64)
    assert (dataset.path / CACHE_FILE).is_file()
    assert dataset_baselines(dataset.path, 64) == first
    with pytest.raises(UserError, match="val_tokens"):
        compute_baselines(dataset, 0)
    with pytest.raises(UserError, match="val_tokens"):
        compute_baselines(dataset, 40 * T + 1)


def test_cli(dataset, capsys):
    from loopscale.cli import main

    assert main(["data", "baselines", str(dataset.path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == compute_baselines(dataset, 40 * T).to_dict()
    assert main(["data", "baselines", str(dataset.path), "--val-tokens", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "val_tokens" in err[0]
