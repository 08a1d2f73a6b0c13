"""``loopscale data``: the steps one by one, exit code 2 with one line for bad input."""

from __future__ import annotations

import json

import pytest
from data_fixtures import make_documents

from loopscale.cli import main
from loopscale.data import PackedDataset


@pytest.fixture()
def text_folder(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    with open(folder / "docs.jsonl", "w") as fh:
        for d in make_documents(24, seed=5):
            fh.write(json.dumps({"text": d.text}) + "\n")
    return folder


def test_corpus_tokenizer_pack_info(tmp_path, text_folder, capsys):
    corpus, tok, ds = tmp_path / "corpus", tmp_path / "tok.json", tmp_path / "ds"
    assert main(["data", "corpus", "--from", str(text_folder), "--out", str(corpus)]) == 0
    assert main(["data", "tokenizer", "--corpus", str(corpus), "--vocab", "300", "--out", str(tok)]) == 0
    assert main(["data", "pack", "--corpus", str(corpus), "--tokenizer", str(tok), "--out", str(ds),
                 "--seq-len", "20", "--val-fraction", "0.3", "--dtype", "uint32"]) == 0
    dataset = PackedDataset(ds)
    assert dataset.seq_len == 20 and dataset.dtype.name == "uint32" and dataset.vocab_size == 300
    capsys.readouterr()
    assert main(["data", "info", str(ds), "--show", "1"]) == 0
    out = capsys.readouterr().out
    assert "T=20 (rows of 21)" in out and "--- val row 0 ---\n<|bos|>" in out
    assert main(["data", "info", str(corpus), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == 24


def test_prepare_from_folder(tmp_path, text_folder, capsys):
    args = ["data", "prepare", "--from", str(text_folder), "--root", str(tmp_path / "root"), "--vocab", "300",
            "--seq-len", "16", "--val-fraction", "0.3"]
    assert main(args) == 0
    assert "ready in" in capsys.readouterr().out
    assert PackedDataset(tmp_path / "root" / "packed" / "texts-bpe300-T16").num_rows("val") > 0


@pytest.mark.parametrize("argv, message", [
    (["data", "info", "{tmp}/missing"], "does not exist"),
    (["data", "prepare", "--root", "{tmp}/r", "--from", "{tmp}/nothing"], "text folder not found"),
    (["data", "prepare", "--root", "{tmp}/r", "--tokenizer", "{tmp}/t.json"], "need --from FOLDER"),
    (["data", "tokenizer", "--corpus", "{tmp}/c", "--out", "{tmp}/t.json"], "no corpus at"),
    (["data", "pack", "--corpus", "{tmp}/c", "--tokenizer", "{tmp}/bad.json", "--out", "{tmp}/d"],
     "not a loadable tokenizer.json"),
    (["data", "import-parquet", "--train", "{tmp}/a.parquet", "--val", "{tmp}/b.parquet", "--out", "{tmp}/d"],
     "pass --tokenizer or --vocab"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, argv, message):
    (tmp_path / "bad.json").write_text("{}")
    (tmp_path / "c").mkdir()
    if "pack" in argv:  # a real corpus, so the failure is the tokenizer's
        main(["data", "corpus", "--from", str(_write_text(tmp_path)), "--out", str(tmp_path / "c")])
        capsys.readouterr()
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("loopscale data: error: ")


def _write_text(tmp_path):
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "a.txt").write_text("some text\n")
    return folder


def test_import_parquet_refuses_a_vocab_that_contradicts_its_tokenizer(tmp_path, tokenizer_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"tokens": [[0, 5, 7, 9], [0, 3, 2, 1]]}), rows)
    argv = ["data", "import-parquet", "--train", str(rows), "--val", str(rows), "--out", str(tmp_path / "d"),
            "--tokenizer", str(tokenizer_path)]
    assert main([*argv, "--vocab", "64"]) == 2
    err = capsys.readouterr().err
    assert "--vocab 64 contradicts the tokenizer's 320 tokens" in err and err.count("\n") == 1
    assert not (tmp_path / "d").exists()
    assert main([*argv, "--vocab", "320"]) == 0  # the same size is no contradiction
    assert PackedDataset(tmp_path / "d").vocab_size == 320
