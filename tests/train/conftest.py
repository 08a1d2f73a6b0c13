"""Fixtures of the training tests: a tiny packed dataset (pseudo-English, 320-token BPE, T = 32) and
helpers to build tiny TrainConfigs and to run ``loopscale train`` in a subprocess."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from loopscale.config import ModelConfig
from loopscale.data import pack_corpus, train_corpus_tokenizer, write_corpus
from loopscale.data.corpus import Document
from loopscale.train import DataConfig, OptimConfig, TrainConfig


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every training test starts at one torch thread: an in-process run elsewhere in the suite (``train``
    sets torch's threads to its config's) must not leak its thread count into a test that records it."""
    import torch

    torch.set_num_threads(1)


SEQ_LEN = 32
VOCAB = 320
WORDS = (
    "the river ran past a stone house where an old king kept his word to the queen while light fell "
    "on water and fire and every city of the land had a great hall with men at work and a new day came "
    "after the long night so that people could see how much was made by hand"
).split()


def documents(n_docs: int = 60, seed: int = 0) -> list[Document]:
    rng = random.Random(seed)
    docs = []
    for i in range(n_docs):
        words = [rng.choice(WORDS) for _ in range(rng.choice([40, 120, 300]))]
        docs.append(Document(f"doc-{i:03d}", "fixture", " ".join(words).capitalize() + ".\n"))
    return docs


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("train-data")
    write_corpus(documents(), root / "corpus", {"name": "fixture"})
    tok = train_corpus_tokenizer(root / "corpus", VOCAB, root / "tok" / "tokenizer.json", val_fraction=0.2)
    return pack_corpus(root / "corpus", tok, root / "packed", SEQ_LEN, val_fraction=0.2, rows_per_shard=64)


def tiny_config(dataset: Path, **changes) -> TrainConfig:
    """A 2-block looped model (prelude 1, 1 shared layer × r=2, coda 1... depth 4), d = 32, 8-row batches."""
    model = dict(width=32, head_dim=16, depth=4, prelude=1, coda=1, r=2, vocab_size=VOCAB, seq_len=SEQ_LEN)
    model.update(changes.pop("model", {}))
    optim = dict(d_ref=1e5, ref_width=32, ref_batch_tokens=8 * SEQ_LEN)
    optim.update(changes.pop("optim", {}))
    fields = dict(
        steps=6,
        batch_tokens=8 * SEQ_LEN,
        micro_batch=4,
        checkpoint_every_s=None,
        progress=False,
        peak_flops=1e10,
    )
    fields.update(changes)
    return TrainConfig(
        model=ModelConfig(**model),
        data=DataConfig(path=str(dataset), val_tokens=16 * SEQ_LEN),
        optim=OptimConfig(**optim),
        **fields,
    )


def run_cli(
    args: list[str], *, env: dict | None = None, launcher: list[str] | None = None
) -> subprocess.CompletedProcess:
    """``loopscale ARGS`` (or ``LAUNCHER -m loopscale ARGS``) in a subprocess, one CPU thread per process."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "LOOPSCALE_NO_TCMALLOC": "1", **(env or {})}
    cmd = (launcher or [sys.executable, "-m", "loopscale"]) + args
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env)
