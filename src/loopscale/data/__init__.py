"""Data pipeline (method §6): corpus assembly, byte-level BPE, best-fit packing, memory-mapped row shards.

Public API used by the other areas::

    PackedDataset(path)    # .seq_len, .vocab_size, .bos_id, .num_rows(split), .rows(split, start, count),
                           # .epochs_for(split, n_rows), .tokenizer(), .tokenizer_path, .meta
    load_tokenizer(path)   # tokenizers.Tokenizer; UserError if the file does not load
    prepare_default(out_root, vocab_size, seq_len, ...) -> Path  # idempotent default build

The names load their submodule on first use (PEP 562): reading a dataset's counts does not load the
``tokenizers`` library, and a command checks its arguments before it does.
"""

from loopscale.lazy import lazy_exports

# public name → the submodule that defines it (the function ``prepare`` is ``loopscale.data.prepare.prepare``:
# the package attribute ``prepare`` is its submodule)
_SOURCES = {
    "Document": "corpus",
    "assemble_default_corpus": "corpus",
    "read_corpus": "corpus",
    "text_folder_documents": "corpus",
    "write_corpus": "corpus",
    "PackedDataset": "dataset",
    "row_dtype": "dataset",
    "PackStats": "packing",
    "best_fit_rows": "packing",
    "import_packed_parquet": "prepare",
    "is_val": "prepare",
    "pack_corpus": "prepare",
    "prepare_default": "prepare",
    "prepare_text_folder": "prepare",
    "train_corpus_tokenizer": "prepare",
    "BOS_TOKEN": "tokenizer",
    "find_bos_id": "tokenizer",
    "load_tokenizer": "tokenizer",
    "train_bpe": "tokenizer",
}

__all__ = sorted(_SOURCES)
__getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
