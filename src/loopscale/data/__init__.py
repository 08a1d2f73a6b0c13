"""Data pipeline (method §6): corpus assembly, byte-level BPE, best-fit packing, memory-mapped row shards.

Public API used by the other areas::

    PackedDataset(path)    # .seq_len, .vocab_size, .bos_id, .num_rows(split), .rows(split, start, count),
                           # .epochs_for(split, n_rows), .tokenizer(), .tokenizer_path, .meta
    load_tokenizer(path)   # tokenizers.Tokenizer; UserError if the file does not load
    prepare_default(out_root, vocab_size, seq_len, ...) -> Path  # idempotent default build
"""

from loopscale.data.corpus import (
    Document,
    assemble_default_corpus,
    read_corpus,
    text_folder_documents,
    write_corpus,
)
from loopscale.data.dataset import PackedDataset, row_dtype
from loopscale.data.packing import PackStats, best_fit_rows
from loopscale.data.prepare import (
    import_packed_parquet,
    is_val,
    pack_corpus,
    prepare,
    prepare_default,
    prepare_text_folder,
    train_corpus_tokenizer,
)
from loopscale.data.tokenizer import BOS_TOKEN, find_bos_id, load_tokenizer, train_bpe

__all__ = [
    "BOS_TOKEN",
    "Document",
    "PackStats",
    "PackedDataset",
    "assemble_default_corpus",
    "best_fit_rows",
    "find_bos_id",
    "import_packed_parquet",
    "is_val",
    "load_tokenizer",
    "pack_corpus",
    "prepare",
    "prepare_default",
    "prepare_text_folder",
    "read_corpus",
    "row_dtype",
    "text_folder_documents",
    "train_bpe",
    "train_corpus_tokenizer",
    "write_corpus",
]
