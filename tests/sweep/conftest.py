"""Shared fixtures of the sweep tests: a tiny packed dataset and tiny sweep specs that train in seconds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from loopscale.data.dataset import SplitWriter, finish_build, row_dtype, start_build

from .helpers import env_with, results, sweep_cmd, write_spec

VOCAB = 64
SEQ_LEN = 16


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    """A learnable packed dataset: rows of a noisy arithmetic sequence, vocab 64, T = 16."""
    folder = start_build(tmp_path_factory.mktemp("data") / "tiny")
    rng = np.random.default_rng(0)
    dtype = row_dtype(VOCAB)
    splits = {}
    for split, n_rows in (("train", 512), ("val", 32)):
        writer = SplitWriter(folder, split, SEQ_LEN + 1, dtype, seed=0)
        for _ in range(n_rows):
            start, step = rng.integers(1, VOCAB), rng.integers(1, 4)
            row = (start + step * np.arange(SEQ_LEN + 1)) % (VOCAB - 1) + 1
            row[0] = 0  # BOS
            noise = rng.random(SEQ_LEN + 1) < 0.1
            row[noise] = rng.integers(1, VOCAB, noise.sum())
            writer.add(row)
        splits[split] = writer.close()
    return finish_build(
        folder,
        {
            "vocab_size": VOCAB,
            "bos_id": 0,
            "seq_len": SEQ_LEN,
            "row_len": SEQ_LEN + 1,
            "dtype": dtype.name,
            "splits": splits,
        },
    )


@pytest.fixture(scope="session")
def reference(tiny_dataset, tmp_path_factory):
    """An uninterrupted local sweep of the crash spec: (spec path, {run: (status, loss repr)})."""
    tmp = tmp_path_factory.mktemp("reference")
    spec = write_spec(tmp, tiny_dataset)
    out = tmp / "sweep"
    proc = subprocess.run(sweep_cmd(out, spec), env=env_with(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    table = results(out)
    assert len(table) == 2 and all(status == "ok" for status, _ in table.values())
    return spec, table
