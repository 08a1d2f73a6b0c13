"""The README's DDP command works verbatim with the config it names: that config's batch splits over the
command's process count (and over one process), checked by the same validation ``loopscale train`` runs
before anything is written, on a dataset with the default corpus's sequence length."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from conftest import VOCAB, documents

from loopscale.data import PackedDataset, pack_corpus, train_corpus_tokenizer, write_corpus
from loopscale.errors import UserError
from loopscale.train import load_train_config
from loopscale.train.loop import plan_run

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SEQ_LEN = 256  # `loopscale data prepare` without flags: data/packed/default-bpe4096-T256


def readme_torchrun() -> tuple[int, Path]:
    """(process count, config path) of the one torchrun line in the README's code blocks."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    lines = [line for block in blocks for line in block.splitlines() if line.startswith("torchrun ")]
    assert len(lines) == 1, lines
    words = shlex.split(lines[0].split("#")[0])
    nproc = int(words[words.index("--nproc_per_node") + 1])
    assert words[words.index("-m") + 1 : words.index("-m") + 3] == ["loopscale", "train"]
    return nproc, ROOT / words[words.index("--config") + 1]


@pytest.fixture(scope="module")
def default_length_dataset(tmp_path_factory) -> Path:
    """A tiny packed dataset with the default corpus's T = 256 (the README config's batch is 16 such rows)."""
    root = tmp_path_factory.mktemp("t256")
    write_corpus(documents(n_docs=80), root / "corpus", {"name": "fixture"})
    tok = train_corpus_tokenizer(root / "corpus", VOCAB, root / "tok" / "tokenizer.json", val_fraction=0.2)
    return pack_corpus(root / "corpus", tok, root / "packed", DEFAULT_SEQ_LEN, val_fraction=0.2)


def _plan(config: Path, dataset: Path, world: int, **overrides):
    data = {"path": str(dataset), "val_tokens": DEFAULT_SEQ_LEN}
    cfg = load_train_config(config, {"data": data, **overrides})
    assert cfg.model.seq_len == DEFAULT_SEQ_LEN
    return cfg, plan_run(cfg, PackedDataset(dataset), world)


def test_the_readme_ddp_config_passes_the_batch_validation(default_length_dataset):
    nproc, config = readme_torchrun()
    assert nproc == 2 and config.is_file()
    cfg, plan = _plan(config, default_length_dataset, nproc)
    assert plan.rows_per_rank * nproc == cfg.batch_rows == 16
    assert plan.rows_per_rank % plan.micro_batch == 0
    _, single = _plan(config, default_length_dataset, 1)  # the README's one-process line, same file
    assert single.rows_per_rank == 16 and single.steps == plan.steps


def test_the_validation_refuses_a_micro_batch_larger_than_a_ranks_share(default_length_dataset):
    """What the shipped config used to say (micro_batch 16 over 2 ranks of 8 sequences) is refused."""
    _, config = readme_torchrun()
    with pytest.raises(UserError, match="micro_batch 16 does not divide the 8 sequences per rank"):
        _plan(config, default_length_dataset, 2, micro_batch=16)
