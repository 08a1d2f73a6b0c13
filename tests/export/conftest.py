"""Fixtures of the export tests: a tiny packed dataset with its BPE tokenizer (vocab 320, T = 32), one tiny
trained run per injection mode (8 steps, seconds each) and each run exported by ``loopscale export``."""

from __future__ import annotations

import atexit
import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest

from loopscale.config import ModelConfig
from loopscale.data import pack_corpus, train_corpus_tokenizer, write_corpus
from loopscale.data.corpus import Document
from loopscale.train import DataConfig, OptimConfig, TrainConfig

# transformers copies remote code into HF_MODULES_CACHE (default: under the home folder) when it imports
if "HF_MODULES_CACHE" not in os.environ:
    os.environ["HF_MODULES_CACHE"] = tempfile.mkdtemp(prefix="loopscale-hf-modules-")
    atexit.register(shutil.rmtree, os.environ["HF_MODULES_CACHE"], ignore_errors=True)

SEQ_LEN = 32
VOCAB = 320
VAL_TOKENS = 10 * SEQ_LEN
WORDS = (
    "the river ran past a stone house where an old king kept his word to the queen while light fell "
    "on water and fire and every city of the land had a great hall with men at work"
).split()
# injection mode → (ModelConfig fields); "none" is the plain r = 1 model (injection auto: no prelude/coda)
OPTIM = dict(unembed_lr=0.2, matrix_lr=0.1)
MODES = {
    "linear": dict(r=2, injection="linear"),
    "additive": dict(r=2, injection="additive"),
    "hyperconnect": dict(r=2, injection="hyperconnect"),
    "none": dict(r=1, injection="auto", depth=4),
}


@pytest.fixture(autouse=True)
def one_torch_thread():
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("export-data")
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.choice([40, 120, 300]))) for _ in range(60)]
    docs = [Document(f"doc-{i:03d}", "fixture", text.capitalize() + ".\n") for i, text in enumerate(texts)]
    write_corpus(docs, root / "corpus", {"name": "fixture"})
    tok = train_corpus_tokenizer(root / "corpus", VOCAB, root / "tok" / "tokenizer.json", val_fraction=0.2)
    return pack_corpus(root / "corpus", tok, root / "packed", SEQ_LEN, val_fraction=0.2, rows_per_shard=64)


def tiny_config(dataset: Path, mode: str, steps: int = 8) -> TrainConfig:
    """d = 32, 2 heads; prelude 1 + 2 × 2 recurrent + coda 1 (depth 6) for the looped modes."""
    model = dict(width=32, head_dim=16, depth=6, prelude=1, coda=1, vocab_size=VOCAB, seq_len=SEQ_LEN)
    model.update(MODES[mode])
    return TrainConfig(
        model=ModelConfig(**model),
        data=DataConfig(path=str(dataset), val_tokens=VAL_TOKENS),
        optim=OptimConfig(d_ref=1e5, ref_width=32, ref_batch_tokens=8 * SEQ_LEN, **OPTIM),
        steps=steps, batch_tokens=8 * SEQ_LEN, micro_batch=8, checkpoint_every_s=None, progress=False,
        peak_flops=1e10, device="cpu",
    )


@pytest.fixture(scope="session")
def runs(dataset, tmp_path_factory) -> dict[str, Path]:
    """One finished run folder per injection mode."""
    from loopscale.train import train

    root = tmp_path_factory.mktemp("export-runs")
    out = {}
    for mode in MODES:
        result = train(tiny_config(dataset, mode), root / mode)
        assert result["status"] == "ok"
        out[mode] = root / mode
    return out


@pytest.fixture(scope="session")
def exported(runs, tmp_path_factory) -> dict[str, Path]:
    """Each run of ``runs`` exported with ``loopscale export RUN --out DIR``."""
    from loopscale.cli import main

    root = tmp_path_factory.mktemp("export-hf")
    out = {}
    for mode, run in runs.items():
        assert main(["export", str(run), "--out", str(root / mode)]) == 0
        out[mode] = root / mode
    return out
