"""Deterministic pseudo-English documents for the data-pipeline tests (no network, no large corpora)."""

from __future__ import annotations

import random

from loopscale.data.corpus import Document

WORDS = (
    "the of and to in is was he for it with as his on be at by had are but from or have an they which "
    "one you were all we when there can been has more if no out so said what up its about into than "
    "them only other time new some could these two may first then do any like my now over such our "
    "man me even most made after also did many before must through back years where much your way "
    "well down should because each just those people how too little state good very make world still "
    "own see men work long get here between both life being under never day same another know while "
    "last might us great old year off come since against go came right used take three king queen "
    "river stone light house water night word hand city land fire sea"
).split()


def marker(i: int) -> str:
    """A word that occurs in document ``i`` only (used to trace documents into packed rows)."""
    return f"zq{i:04d}x"


def make_documents(n_docs: int = 48, seed: int = 0) -> list[Document]:
    """Pseudo-English documents of varied length (about 20 to 900 words), each opening with its marker."""
    rng = random.Random(seed)
    docs = []
    for i in range(n_docs):
        n_words = rng.choice([20, 60, 150, 400, 900])
        sentences, words = [marker(i)], []
        for _ in range(n_words):
            words.append(rng.choice(WORDS))
            if len(words) > 6 and rng.random() < 0.15:
                sentences.append(" ".join(words).capitalize() + ".")
                words = []
        sentences.append(" ".join(words + ["end"]) + ".")
        docs.append(Document(f"doc-{i:04d}", "fixture", " ".join(sentences) + "\n"))
    return docs
