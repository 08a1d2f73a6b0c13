"""Session fixtures of the data-pipeline tests: a small corpus folder and a 320-token BPE trained on it."""

from __future__ import annotations

from pathlib import Path

import pytest
from data_fixtures import make_documents

from loopscale.data.corpus import write_corpus
from loopscale.data.tokenizer import train_bpe


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus") / "fixture"
    write_corpus(make_documents(), out, {"name": "fixture"})
    return out


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train_bpe((d.text for d in make_documents()), 320, path)
    return path
