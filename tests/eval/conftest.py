"""Shared fixtures: a tiny byte-level BPE tokenizer and a tiny looped model whose loops matter."""

from __future__ import annotations

import pytest
import torch

from loopscale.config import ModelConfig, from_dict
from loopscale.data import BOS_TOKEN, prepare_text_folder, train_bpe
from loopscale.model import LoopedGPT

CORPUS = [
    "The looping model keeps looping over the same block.",
    "Question: What is the capital of France?\nAnswer: Paris",
    "Question: How many legs has a cat?\nAnswer: 4",
    "qnjp -> lgf\nkey -> val\nn=22\nm = n\nWhat is the value of x?\nAnswer: 25",
    "Complete the rest of the sequence ( [ { } ] ) < >",
] * 20
VOCAB = 320


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train_bpe(CORPUS, VOCAB, path)
    return path


@pytest.fixture(scope="session")
def tokenizer(tokenizer_path):
    from loopscale.data import load_tokenizer

    return load_tokenizer(tokenizer_path)


@pytest.fixture(scope="session")
def bos_id(tokenizer):
    return tokenizer.token_to_id(BOS_TOKEN)


def tiny_config(r: int = 2, seq_len: int = 96) -> ModelConfig:
    return ModelConfig(width=32, head_dim=16, depth=6, prelude=1, coda=1, r=r, injection="linear",
                       vocab_size=VOCAB, seq_len=seq_len)


def make_tiny_model(r: int = 2, seq_len: int = 96, seed: int = 0) -> LoopedGPT:
    """Random tiny model; W_inj and lm_head are re-drawn so that the state and the logits matter
    (the paper's init, W_inj = [I | 0] and lm_head std 0.001, makes every r identical at step 0)."""
    torch.manual_seed(seed)
    model = LoopedGPT(tiny_config(r, seq_len))
    with torch.no_grad():
        torch.nn.init.normal_(model.inject.weight, std=0.2)
        torch.nn.init.normal_(model.lm_head.weight, std=0.5)
    return model.eval()


@pytest.fixture(scope="session")
def tiny_model():
    return make_tiny_model()


@pytest.fixture(scope="session")
def model_factory():
    return make_tiny_model


TEXTS = ["The looping model keeps looping over the same block.",
         "Question: What is the capital of France?\nAnswer: Paris",
         "qnjp -> lgf\nkey -> val\nn=22\nm = n\nWhat is the value of x?\nAnswer: 25"]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, tokenizer_path):
    """A 3-step run of a tiny r = 2 model on a tiny corpus, trained by loopscale.train."""
    from loopscale.train import TrainConfig, train

    root = tmp_path_factory.mktemp("run")
    (root / "txt").mkdir()
    for i in range(6):
        (root / "txt" / f"d{i}.txt").write_text("\n".join(TEXTS * (4 + i)))
    dataset = prepare_text_folder(root / "txt", root / "data", seq_len=48, tokenizer=tokenizer_path,
                                  val_fraction=0.3)
    cfg = from_dict(TrainConfig, {
        "model": {"width": 32, "head_dim": 16, "depth": 6, "prelude": 1, "coda": 1, "r": 2, "vocab_size": 320,
                  "seq_len": 48},
        "data": {"path": str(dataset)}, "steps": 3, "batch_tokens": 96, "device": "cpu", "progress": False,
        "peak_flops": 1e12,
    })
    result = train(cfg, root / "run")
    assert result["status"] == "ok"
    return root / "run"
