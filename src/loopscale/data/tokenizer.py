"""Byte-level BPE tokenizers: trained offline with HF ``tokenizers``, or any ``tokenizer.json`` by path.

A trained tokenizer reserves one special token, ``<|bos|>``, with id 0; it is prepended to every document
(method §6: BOS per document). A tokenizer brought by the user names its BOS token explicitly or through the
usual spellings (``<|bos|>``, ``<s>``, ``<|begin_of_text|>``, ``<|endoftext|>``, ``<bos>``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from loopscale.errors import UserError
from loopscale.io import atomic_write_text

BOS_TOKEN = "<|bos|>"
BOS_CANDIDATES = (BOS_TOKEN, "<s>", "<|begin_of_text|>", "<|endoftext|>", "<bos>")
MIN_VOCAB = 256 + 1  # every byte plus BOS


def train_bpe(texts: Iterable[str], vocab_size: int, out_path: str | Path) -> Tokenizer:
    """Train a byte-level BPE tokenizer of exactly ``vocab_size`` ids (BOS included); save it atomically.

    Deterministic for a given text stream. ``vocab_size`` counts all ids, so the model's vocabulary is
    ``vocab_size`` (padded to a multiple of 64 inside the model).
    """
    if vocab_size < MIN_VOCAB:
        raise UserError(f"vocab size {vocab_size} is too small: byte-level BPE needs at least {MIN_VOCAB}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() < vocab_size:
        raise UserError(
            f"the corpus is too small to learn {vocab_size} tokens (got {tok.get_vocab_size()}); "
            "use a smaller --vocab or a larger corpus"
        )
    atomic_write_text(out_path, tok.to_str())
    return tok


def tokenizer_file(path: str | Path) -> Path:
    """The tokenizer.json that ``path`` names: the file itself, or ``tokenizer.json`` inside a folder."""
    path = Path(path)
    return path / "tokenizer.json" if path.is_dir() else path


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load a ``tokenizer.json`` (or a folder holding one); a missing or unreadable file is a UserError."""
    path = tokenizer_file(path)
    if not path.is_file():
        raise UserError(f"tokenizer file not found: {path}")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for malformed files
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path} is not a loadable tokenizer.json ({first_line})") from None


def find_bos_id(tok: Tokenizer, bos_token: str | None = None) -> int:
    """Id of the BOS token: ``bos_token`` if given, else the first of BOS_CANDIDATES the vocabulary has."""
    names = (bos_token,) if bos_token else BOS_CANDIDATES
    for name in names:
        token_id = tok.token_to_id(name)
        if token_id is not None:
            return token_id
    raise UserError(
        f"tokenizer has no BOS token {bos_token!r}; pass --bos-token" if bos_token
        else f"tokenizer has none of the BOS tokens {', '.join(BOS_CANDIDATES)}; pass --bos-token NAME"
    )
