"""Best-fit packing (method §6): invariants with hypothesis, and equality with a naive reference packer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopscale.data.packing import PackStats, best_fit_rows, split_document

BOS = 0


def make_docs(lengths: list[int]) -> list[np.ndarray]:
    """Documents [BOS, unique ids...]: every non-BOS token id occurs once across all documents."""
    docs, next_id = [], 1
    for n in lengths:
        docs.append(np.array([BOS, *range(next_id, next_id + n - 1)], dtype=np.int64))
        next_id += n - 1
    return docs


def reference_split(doc: list[int], row_len: int) -> list[list[int]]:
    """Long-document splitting restated: BOS + consecutive chunks of row_len - 1 body tokens."""
    if len(doc) <= row_len:
        return [doc]
    body = doc[1:]
    out = []
    while body:
        out.append([BOS] + body[: row_len - 1])
        body = body[row_len - 1 :]
    return out


def reference_pack(docs: list[list[int]], row_len: int, buffer_docs: int) -> tuple[list[list[int]], int, int]:
    """Naive best fit straight from the wording of method §6; the buffer is a plain list in arrival order."""
    pending = list(docs)
    buffer: list[list[int]] = []
    rows: list[list[int]] = []
    cropped = 0
    while True:
        row: list[int] = []
        space = row_len
        while space > 0:
            while len(buffer) < buffer_docs and pending:
                buffer.append(pending.pop(0))
            if not buffer:
                return rows, cropped, len(row)
            fitting = [i for i, d in enumerate(buffer) if len(d) <= space]
            if fitting:  # longest that fits; the earliest arrival among equals
                best = max(fitting, key=lambda i: (len(buffer[i]), -i))
                doc = buffer.pop(best)
            else:  # nothing fits: crop the shortest (earliest among equals) to fill the row exactly
                shortest = min(range(len(buffer)), key=lambda i: (len(buffer[i]), i))
                doc = buffer.pop(shortest)
                cropped += len(doc) - space
                doc = doc[:space]
            row.extend(doc)
            space -= len(doc)
        rows.append(row)


pack_cases = st.tuples(
    st.integers(2, 40),  # row_len = T + 1
    st.lists(st.integers(1, 120), min_size=0, max_size=60),  # document lengths, BOS included
    st.integers(1, 12),  # buffer size
    st.booleans(),  # split long documents
)


@settings(max_examples=150, deadline=None)
@given(pack_cases)
def test_best_fit_matches_reference_and_keeps_invariants(case):
    row_len, lengths, buffer_docs, split_long = case
    docs = make_docs(lengths)
    stats = PackStats()
    rows = list(best_fit_rows(docs, row_len, bos_id=BOS, buffer_docs=buffer_docs, split_long=split_long,
                              stats=stats))

    pieces = [p for d in docs for p in (reference_split(d.tolist(), row_len) if split_long else [d.tolist()])]
    ref_rows, ref_cropped, ref_dropped = reference_pack(pieces, row_len, buffer_docs)
    assert [r.tolist() for r in rows] == ref_rows
    assert stats.cropped_tokens == ref_cropped and stats.dropped_tokens == ref_dropped

    input_tokens = sum(len(p) for p in pieces)
    assert stats.input_tokens == input_tokens and stats.rows == len(rows) and stats.pieces == len(pieces)
    for row in rows:
        assert len(row) == row_len  # exact length: no padding, no short rows
        assert row[0] == BOS  # every row starts at a document start
    # conservation: packed + cropped + dropped = input, and no body token is duplicated
    assert stats.packed_tokens == len(rows) * row_len
    assert len(rows) * row_len + stats.cropped_tokens + stats.dropped_tokens == input_tokens
    body = np.concatenate(rows)[np.concatenate(rows) != BOS] if rows else np.array([])
    assert len(np.unique(body)) == len(body)
    # within a row, each document segment is a contiguous run of one document's ids starting after its BOS
    for row in rows:
        for segment in np.split(row, np.flatnonzero(row == BOS)[1:]):
            ids = segment[1:]
            assert (np.diff(ids) == 1).all()


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 30), st.lists(st.integers(1, 50), min_size=1, max_size=30))
def test_no_crop_when_every_row_can_be_filled_from_whole_documents(row_len, lengths):
    """Documents of length 1 (bare BOS) always fit, so with enough of them nothing is ever cropped."""
    docs = make_docs([min(n, row_len) for n in lengths] + [1] * (row_len * len(lengths)))
    stats = PackStats()
    rows = list(best_fit_rows(docs, row_len, bos_id=BOS, buffer_docs=10_000, stats=stats))
    assert stats.cropped_tokens == 0
    assert len(rows) * row_len + stats.dropped_tokens == stats.input_tokens


def test_hand_worked_example():
    # row_len 10, docs of lengths 6, 5, 4, 3 (buffer holds all):
    # row 1: longest fitting 6 (space 4) → 4 (space 0)
    # row 2: 5 (space 5) → 3 (space 2) → nothing fits, buffer empty → the row is dropped (8 tokens)
    docs = make_docs([6, 5, 4, 3])
    stats = PackStats()
    rows = list(best_fit_rows(docs, 10, bos_id=BOS, stats=stats))
    assert [r.tolist() for r in rows] == [docs[0].tolist() + docs[2].tolist()]
    assert stats.dropped_tokens == 8 and stats.cropped_tokens == 0


def test_crop_takes_the_shortest_document():
    # row_len 5; docs 4 and 3: row 1 = doc(4) + crop of the shortest remaining (3 → 1 token, 2 cropped)
    docs = make_docs([4, 3, 5])
    stats = PackStats()
    rows = list(best_fit_rows(docs, 5, bos_id=BOS, buffer_docs=3, stats=stats))
    assert rows[0].tolist() == docs[2].tolist()  # the 5-token doc fills row 1 exactly
    assert rows[1].tolist() == docs[0].tolist() + docs[1].tolist()[:1]
    assert stats.cropped_tokens == 2


def test_paper_rule_crops_long_documents_to_one_row():
    docs = make_docs([25])
    stats = PackStats()
    rows = list(best_fit_rows(docs, 10, bos_id=BOS, split_long=False, stats=stats))
    assert [r.tolist() for r in rows] == [docs[0][:10].tolist()]
    assert stats.cropped_tokens == 15


@given(st.integers(2, 50), st.integers(1, 300))
def test_split_document_conserves_body_and_restarts_with_bos(row_len, length):
    doc = make_docs([length])[0]
    pieces = split_document(doc, row_len, BOS)
    assert all(len(p) <= row_len and p[0] == BOS for p in pieces)
    assert np.concatenate([p[1:] for p in pieces]).tolist() == doc[1:].tolist()
    expected = 1 if length <= row_len else -(-(length - 1) // (row_len - 1))
    assert len(pieces) == expected


def test_rejects_documents_without_bos_and_bad_sizes():
    with pytest.raises(ValueError, match="BOS"):
        list(best_fit_rows([np.array([5, 6])], 4, bos_id=BOS))
    with pytest.raises(ValueError, match="row_len"):
        list(best_fit_rows([], 1, bos_id=BOS))
