"""Best-fit packing of tokenised documents into rows of T + 1 tokens (method §6).

The rule, exactly as the paper's loader:

1. keep a buffer of ``buffer_docs`` (1000) tokenised documents, refilled from the stream before each pick;
2. fill a row by repeatedly taking the longest buffered document that fits into the remaining space;
3. when nothing fits, crop the shortest buffered document to fill the row exactly.

Every document arrives with its BOS already prepended, so every row starts at a document start with BOS, and
no row contains padding. Ties (equal lengths) go to the document that entered the buffer first, so the output
is a deterministic function of the input order.

Choices where the method is silent (also in docs/data.md):

- **Cropped tails are discarded**, as in the authors' loader: the remainder of a cropped document never
  reappears (a tail without its BOS and its beginning is not a document start). ``PackStats.cropped_tokens``
  counts them.
- **Long documents** (more than T + 1 tokens) would otherwise never fit and be cropped to one row, which at a
  small T throws away most of a book. With ``split_long=True`` (the default) such a document is first cut into
  consecutive pieces of at most T + 1 tokens, each re-starting with BOS (the piece boundary becomes a document
  start); the pieces then enter the buffer like any other document. ``split_long=False`` is the paper's rule
  verbatim.
- When the stream and the buffer run dry, the last, partly filled row is **dropped** (no padding);
  ``PackStats.dropped_tokens`` counts its tokens.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

BUFFER_DOCS = 1000  # method §6


@dataclass
class PackStats:
    """Token accounting of one packing pass (all counts in tokens, BOS included)."""

    documents: int = 0  # documents read from the stream (before long-document splitting)
    pieces: int = 0  # buffer entries: documents, or pieces of split long documents
    input_tokens: int = 0  # tokens entering the packer (BOS of every piece included)
    rows: int = 0
    cropped_tokens: int = 0  # tails of cropped documents, discarded
    dropped_tokens: int = 0  # tokens of the final, incomplete row, discarded

    @property
    def packed_tokens(self) -> int:
        return self.input_tokens - self.cropped_tokens - self.dropped_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "documents": self.documents,
            "pieces": self.pieces,
            "input_tokens": self.input_tokens,
            "rows": self.rows,
            "cropped_tokens": self.cropped_tokens,
            "dropped_tokens": self.dropped_tokens,
        }


def split_document(doc: np.ndarray, row_len: int, bos_id: int) -> list[np.ndarray]:
    """Cut a BOS-prefixed document into pieces of at most ``row_len`` tokens, each starting with BOS.

    A document that already fits is returned unchanged (one piece). Body tokens (everything after the first
    BOS) are conserved: the pieces' bodies concatenate back to the original body.
    """
    if len(doc) <= row_len:
        return [doc]
    body = doc[1:]
    step = row_len - 1
    bos = np.array([bos_id], dtype=doc.dtype)
    return [np.concatenate([bos, body[i : i + step]]) for i in range(0, len(body), step)]


class _Buffer:
    """Documents kept sorted by (length, arrival) so best fit and shortest are binary searches."""

    def __init__(self) -> None:
        self._keys: list[tuple[int, int]] = []  # (length, arrival number), sorted
        self._docs: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, arrival: int, doc: np.ndarray) -> None:
        bisect.insort(self._keys, (len(doc), arrival))
        self._docs[arrival] = doc

    def pop_longest_fitting(self, space: int) -> np.ndarray | None:
        """Longest document with length ≤ space; among equal lengths the earliest arrival."""
        i = bisect.bisect_right(self._keys, (space, float("inf"))) - 1
        if i < 0:
            return None
        length = self._keys[i][0]
        first = bisect.bisect_left(self._keys, (length, -1))  # earliest arrival of that length
        _, arrival = self._keys.pop(first)
        return self._docs.pop(arrival)

    def pop_shortest(self) -> np.ndarray:
        _, arrival = self._keys.pop(0)
        return self._docs.pop(arrival)


def best_fit_rows(
    docs: Iterable[np.ndarray],
    row_len: int,
    *,
    bos_id: int,
    buffer_docs: int = BUFFER_DOCS,
    split_long: bool = True,
    stats: PackStats | None = None,
) -> Iterator[np.ndarray]:
    """Yield packed rows (1-D arrays of exactly ``row_len`` tokens) from BOS-prefixed documents.

    ``docs`` yields 1-D integer arrays, each starting with ``bos_id``; ``row_len`` is T + 1. Pass a
    ``PackStats`` to receive the token accounting once the iterator is exhausted.
    """
    if row_len < 2:
        raise ValueError(f"row_len must be >= 2 (T + 1 with T >= 1), got {row_len}")
    if buffer_docs < 1:
        raise ValueError(f"buffer_docs must be >= 1, got {buffer_docs}")
    stats = stats if stats is not None else PackStats()

    def pieces() -> Iterator[np.ndarray]:
        for doc in docs:
            doc = np.asarray(doc)
            if doc.ndim != 1 or len(doc) == 0 or doc[0] != bos_id:
                raise ValueError("every document must be a non-empty 1-D array starting with BOS")
            stats.documents += 1
            for piece in split_document(doc, row_len, bos_id) if split_long else [doc]:
                stats.pieces += 1
                stats.input_tokens += len(piece)
                yield piece

    stream = pieces()
    arrivals = itertools.count()
    buffer = _Buffer()
    exhausted = False

    def refill() -> None:
        nonlocal exhausted
        while not exhausted and len(buffer) < buffer_docs:
            piece = next(stream, None)
            if piece is None:
                exhausted = True
            else:
                buffer.add(next(arrivals), piece)

    while True:
        row: list[np.ndarray] = []
        space = row_len
        while space > 0:
            refill()
            if not len(buffer):
                break
            doc = buffer.pop_longest_fitting(space)
            if doc is None:
                doc = buffer.pop_shortest()
                stats.cropped_tokens += len(doc) - space
                doc = doc[:space]
            row.append(doc)
            space -= len(doc)
        if space > 0:  # stream and buffer are empty: the last row cannot be filled without padding
            stats.dropped_tokens += row_len - space
            return
        stats.rows += 1
        yield np.concatenate(row)
