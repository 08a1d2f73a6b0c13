"""Tokenizer training, corpus packing, the validation split, idempotent prepare, the parquet importer."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_fixtures import make_documents, marker

from loopscale.data import (
    BOS_TOKEN,
    PackedDataset,
    import_packed_parquet,
    is_val,
    load_tokenizer,
    pack_corpus,
    prepare_text_folder,
    train_bpe,
)
from loopscale.data.corpus import read_corpus
from loopscale.data.packing import split_document
from loopscale.data.prepare import tokenize_documents
from loopscale.errors import UserError

VAL = 0.25


@pytest.fixture(scope="module")
def packed(corpus_dir, tokenizer_path, tmp_path_factory):
    return PackedDataset(pack_corpus(corpus_dir, tokenizer_path, tmp_path_factory.mktemp("ds") / "ds", 31,
                                     val_fraction=VAL, rows_per_shard=16))


def decoded_split(ds: PackedDataset, split: str) -> str:
    tok = ds.tokenizer()
    return "\n".join(tok.decode(r.tolist()) for r in ds.rows(split, 0, ds.num_rows(split)))


def test_tokenizer_has_the_requested_size_bos_first_and_round_trips(tokenizer_path):
    tok = load_tokenizer(tokenizer_path)
    assert tok.get_vocab_size() == 320 and tok.token_to_id(BOS_TOKEN) == 0
    text = "Unseen wörds, digits 12345 and emoji ✓ survive byte-level BPE.\n  Indented."
    assert tok.decode(tok.encode(text).ids) == text


def test_bad_tokenizer_inputs_are_user_errors(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="not a loadable tokenizer.json"):
        load_tokenizer(bad)
    with pytest.raises(UserError, match="not found"):
        load_tokenizer(tmp_path / "missing.json")
    with pytest.raises(UserError, match="too small"):
        train_bpe(["abc"], 100, tmp_path / "t.json")
    with pytest.raises(UserError, match="corpus is too small"):
        train_bpe(["tiny text"], 5000, tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


def test_documents_round_trip_through_tokens_and_pieces(corpus_dir, tokenizer_path):
    tok = load_tokenizer(tokenizer_path)
    docs = list(read_corpus(corpus_dir))
    for doc, tokens in zip(docs, tokenize_documents(tok, docs, bos_id=0)):
        pieces = split_document(tokens, 32, bos_id=0)
        assert all(len(p) <= 32 and p[0] == 0 for p in pieces)
        assert tok.decode(np.concatenate([p[1:] for p in pieces]).tolist()) == doc.text


def test_rows_have_the_shape_bos_and_dtype_of_the_contract(packed):
    assert packed.seq_len == 31 and packed.row_len == 32 and packed.vocab_size == 320 and packed.bos_id == 0
    for split in ("train", "val"):
        rows = packed.rows(split, 0, packed.num_rows(split))
        assert rows.shape == (packed.num_rows(split), 32) and (rows[:, 0] == 0).all()
        assert rows.max() < 320
        entry = packed.meta["splits"][split]
        assert entry["rows"] * 32 + entry["cropped_tokens"] + entry["dropped_tokens"] == entry["input_tokens"]
    assert np.load(packed.path / "train" / "shard_00000.npy", mmap_mode="r").dtype == np.uint16


def test_token_counts_match_an_independent_tokenisation(packed, corpus_dir, tokenizer_path):
    tok = load_tokenizer(tokenizer_path)
    for split in ("train", "val"):
        docs = [d for d in read_corpus(corpus_dir) if is_val(d.id, VAL) == (split == "val")]
        n_tokens = sum(len(tok.encode(d.text, add_special_tokens=False).ids) for d in docs)
        entry = packed.meta["splits"][split]
        body_tokens = entry["input_tokens"] - entry["pieces"]  # every piece carries one BOS
        assert entry["documents"] == len(docs) and body_tokens == n_tokens


def test_validation_documents_never_reach_training_rows(packed):
    docs = make_documents()
    val_ids = {i for i, d in enumerate(docs) if is_val(d.id, VAL)}
    assert 0 < len(val_ids) < len(docs)
    train_text, val_text = decoded_split(packed, "train"), decoded_split(packed, "val")
    for i in range(len(docs)):
        assert marker(i) not in (train_text if i in val_ids else val_text)
    # positive control: most markers do show up in their own split (a few sit in cropped tails)
    found = sum(marker(i) in (val_text if i in val_ids else train_text) for i in range(len(docs)))
    assert found >= 0.8 * len(docs)


def test_is_val_depends_on_the_id_only_and_hits_the_fraction():
    ids = [f"doc/{i}" for i in range(20_000)]
    share = np.mean([is_val(i, 0.1) for i in ids])
    assert abs(share - 0.1) < 0.01
    assert [is_val(i, 0.1) for i in ids[:50]] == [is_val(i, 0.1) for i in ids[:50]]
    assert all(is_val(i, 0.2) for i in ids[:2000] if is_val(i, 0.1))  # nested: growing the fraction adds docs


def test_packing_is_deterministic(corpus_dir, tokenizer_path, tmp_path, packed):
    again = PackedDataset(pack_corpus(corpus_dir, tokenizer_path, tmp_path / "again", 31, val_fraction=VAL,
                                      rows_per_shard=16))
    for split in ("train", "val"):
        n = packed.num_rows(split)
        assert (again.rows(split, 0, n) == packed.rows(split, 0, n)).all()


def test_documents_are_packed_in_a_seeded_shuffled_order(corpus_dir, tokenizer_path, tmp_path):
    """A corpus is stored source by source; packing must shuffle documents so that every prefix of the
    row stream (every short run) sees the corpus mix. buffer_docs=1 and one row per shard expose the
    document order directly: without the shuffle the markers would appear in corpus order."""
    def first_seen_order(seed: int) -> list[int]:
        out = tmp_path / f"s{seed}"
        ds = PackedDataset(pack_corpus(corpus_dir, tokenizer_path, out, 31, val_fraction=VAL, seed=seed,
                                       buffer_docs=1, rows_per_shard=1))
        text = decoded_split(ds, "train")
        seen = [i for i in range(len(make_documents())) if marker(i) in text]
        return sorted(seen, key=lambda i: text.index(marker(i)))

    order = first_seen_order(0)
    assert len(order) > 10
    assert order != sorted(order)
    assert order == first_seen_order(0) and order != first_seen_order(1)


def test_prepare_text_folder_is_idempotent_and_resumes(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    for d in make_documents(30, seed=3):
        (folder / f"{d.id}.txt").write_text(d.text)
    root = tmp_path / "root"
    path = prepare_text_folder(folder, root, vocab_size=300, seq_len=15, val_fraction=0.3)
    assert path == root / "packed" / "texts-bpe300-T15"
    meta_mtime = os.stat(path / "meta.json").st_mtime_ns
    assert prepare_text_folder(folder, root, vocab_size=300, seq_len=15, val_fraction=0.3) == path
    assert os.stat(path / "meta.json").st_mtime_ns == meta_mtime  # nothing rebuilt
    first = PackedDataset(path).rows("train", 0, 10)
    (path / "meta.json").unlink()  # as if killed before the dataset finished
    (path / "train" / "shard_00000.npy").write_bytes(b"partial")
    assert prepare_text_folder(folder, root, vocab_size=300, seq_len=15, val_fraction=0.3) == path
    assert (PackedDataset(path).rows("train", 0, 10) == first).all()
    with pytest.raises(UserError, match="was built with"):
        prepare_text_folder(folder, root, vocab_size=300, seq_len=15, val_fraction=0.2)


def test_prepare_with_a_given_tokenizer_checks_it_on_reuse(tmp_path, corpus_dir, tokenizer_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    for d in make_documents(30, seed=4):
        (folder / f"{d.id}.txt").write_text(d.text)
    (tmp_path / "llama").mkdir()
    given = tmp_path / "llama" / "tokenizer.json"
    given.write_bytes(tokenizer_path.read_bytes())
    kwargs = dict(name="mine", seq_len=15, tokenizer=given, val_fraction=0.5)
    path = prepare_text_folder(folder, tmp_path / "root", **kwargs)
    assert path.name == "mine-llama-T15" and PackedDataset(path).vocab_size == 320
    assert not (tmp_path / "root" / "tokenizers").exists()  # nothing trained
    train_bpe([d.text for d in make_documents(10, seed=9)], 290, given)
    with pytest.raises(UserError, match="another tokenizer"):
        prepare_text_folder(folder, tmp_path / "root", **kwargs)


def test_pack_refuses_a_corpus_too_small_for_the_row(corpus_dir, tokenizer_path, tmp_path):
    with pytest.raises(UserError, match="fills no row"):
        pack_corpus(corpus_dir, tokenizer_path, tmp_path / "ds", 100_000, val_fraction=VAL, split_long=False)
    assert not (tmp_path / "ds").exists()
    with pytest.raises(UserError, match="no corpus"):
        pack_corpus(tmp_path / "none", tokenizer_path, tmp_path / "ds", 32)
    with pytest.raises(UserError, match="val fraction"):
        pack_corpus(corpus_dir, tokenizer_path, tmp_path / "ds", 32, val_fraction=1.0)


def write_rows(path, rows: list[list[int]]) -> None:
    table = pa.table({"tokens": pa.array(rows, type=pa.list_(pa.int32())), "n": list(range(len(rows)))})
    pq.write_table(table, path, row_group_size=3)


def test_parquet_rows_import_in_order(tmp_path, tokenizer_path):
    rng = np.random.default_rng(0)
    train = rng.integers(1, 320, size=(10, 9))
    train[:, 0] = 0
    val = rng.integers(1, 320, size=(4, 9))
    write_rows(tmp_path / "a.parquet", train[:7].tolist())
    write_rows(tmp_path / "b.parquet", train[7:].tolist())
    write_rows(tmp_path / "v.parquet", val.tolist())
    ds = PackedDataset(import_packed_parquet([tmp_path / "a.parquet", tmp_path / "b.parquet"],
                                             [tmp_path / "v.parquet"], tmp_path / "ds",
                                             tokenizer=tokenizer_path, rows_per_shard=4))
    assert ds.seq_len == 8 and ds.vocab_size == 320 and ds.bos_id == 0
    assert (ds.rows("train", 0, 10) == train).all() and (ds.rows("val", 0, 4) == val).all()
    meta = json.loads((ds.path / "meta.json").read_text())
    assert meta["splits"]["train"]["rows_starting_with_bos"] == 10
    assert meta["splits"]["val"]["rows_starting_with_bos"] == int((val[:, 0] == 0).sum())
    assert ds.tokenizer().get_vocab_size() == 320


def test_parquet_import_bad_inputs(tmp_path):
    write_rows(tmp_path / "ok.parquet", [[1, 2, 3], [4, 5, 6]])
    write_rows(tmp_path / "mixed.parquet", [[1, 2, 3], [4, 5]])
    write_rows(tmp_path / "big.parquet", [[1, 2, 70000]])
    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "text.parquet")
    (tmp_path / "junk.parquet").write_text("not parquet")
    ok = [tmp_path / "ok.parquet"]
    cases = [
        (ok, ok, {}, "pass --tokenizer or --vocab"),
        ([tmp_path / "mixed.parquet"], ok, {"vocab_size": 10}, "different lengths"),
        ([tmp_path / "big.parquet"], ok, {"vocab_size": 32064}, "outside the vocabulary"),
        ([tmp_path / "text.parquet"], ok, {"vocab_size": 10}, "no 'tokens' column"),
        ([tmp_path / "junk.parquet"], ok, {"vocab_size": 10}, "not a readable parquet"),
        ([tmp_path / "nope.parquet"], ok, {"vocab_size": 10}, "not found"),
        ([], ok, {"vocab_size": 10}, "at least one parquet file"),
    ]
    for train, val, kwargs, message in cases:
        with pytest.raises(UserError, match=message):
            import_packed_parquet(train, val, tmp_path / "ds", **kwargs)
        assert not (tmp_path / "ds").exists()  # a failed build leaves nothing behind
