"""Okapi BM25 over pieces, incremental, numpy only (SPEC section 6).

``k1 = 1.2``, ``b = 0.75``, IDF ``ln(1 + (N - df + 0.5) / (df + 0.5))`` over every document in the
index (the whole store of one history). Documents are lists of content words (see
:func:`flexamem.text.content_words`); a query is a set of content words. Adding a document updates
postings in place: nothing is rebuilt, and a query only touches the postings of its own terms, so
its cost grows with the matches, not with the number of documents.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np


class _Postings:
    """Doc ids and term frequencies of one term, with a lazily refreshed numpy view."""

    __slots__ = ("_arrays", "docs", "tfs")

    def __init__(self) -> None:
        self.docs: list[int] = []
        self.tfs: list[int] = []
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, doc: int, tf: int) -> None:
        self.docs.append(doc)
        self.tfs.append(tf)
        self._arrays = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._arrays is None:
            self._arrays = (np.asarray(self.docs, dtype=np.int64), np.asarray(self.tfs, dtype=np.float64))
        return self._arrays


class BM25Index:
    """An append-only BM25 index; document ids are 0, 1, 2, ... in the order added."""

    def __init__(self, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self._postings: dict[str, _Postings] = {}
        self._lengths: list[int] = []
        self._length_array: np.ndarray | None = None
        self._terms: list[Counter[str]] = []
        self._total = 0

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, terms: Sequence[str]) -> int:
        """Index one document (its content words, repeats kept); returns its id."""
        doc = len(self._lengths)
        counts = Counter(terms)
        for term, tf in counts.items():
            postings = self._postings.get(term)
            if postings is None:
                postings = self._postings[term] = _Postings()
            postings.add(doc, tf)
        self._terms.append(counts)
        self._lengths.append(len(terms))
        self._total += len(terms)
        self._length_array = None
        return doc

    def add_many(self, docs: Iterable[Sequence[str]]) -> None:
        for terms in docs:
            self.add(terms)

    def idf(self, term: str) -> float:
        postings = self._postings.get(term)
        df = len(postings.docs) if postings else 0
        n = len(self._lengths)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def _lengths_np(self) -> np.ndarray:
        if self._length_array is None:
            self._length_array = np.asarray(self._lengths, dtype=np.float64)
        return self._length_array

    def _avgdl(self) -> float:
        return self._total / len(self._lengths) if self._lengths else 0.0

    def search(self, query: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Documents matching any query term and their scores (unsorted), via postings only."""
        query = list(dict.fromkeys(query))
        avgdl = self._avgdl() or 1.0
        lengths = self._lengths_np()
        all_docs, all_scores = [], []
        for term in query:
            postings = self._postings.get(term)
            if postings is None:
                continue
            docs, tfs = postings.arrays()
            norm = self.k1 * (1.0 - self.b + self.b * lengths[docs] / avgdl)
            all_docs.append(docs)
            all_scores.append(self.idf(term) * tfs * (self.k1 + 1.0) / (tfs + norm))
        if not all_docs:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        docs = np.concatenate(all_docs)
        scores = np.concatenate(all_scores)
        unique, inverse = np.unique(docs, return_inverse=True)
        return unique, np.bincount(inverse, weights=scores, minlength=len(unique))

    def score_docs(self, query: Sequence[str], docs: Sequence[int]) -> np.ndarray:
        """Scores of the given documents only (used to rank the pieces of one unit)."""
        query = list(dict.fromkeys(query))
        avgdl = self._avgdl() or 1.0
        idfs = {t: self.idf(t) for t in query if t in self._postings}
        out = np.zeros(len(docs), dtype=np.float64)
        for i, doc in enumerate(docs):
            counts, length = self._terms[doc], self._lengths[doc]
            norm = self.k1 * (1.0 - self.b + self.b * length / avgdl)
            for term, idf in idfs.items():
                tf = counts.get(term, 0)
                if tf:
                    out[i] += idf * tf * (self.k1 + 1.0) / (tf + norm)
        return out
