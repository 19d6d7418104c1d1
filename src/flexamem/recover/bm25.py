"""Okapi BM25 over pieces, incremental, numpy only (SPEC section 6).

``k1 = 1.2``, ``b = 0.75``, IDF ``ln(1 + (N - df + 0.5) / (df + 0.5))`` over every document in the
index (the whole store of one history). Documents are lists of content words (see
:func:`flexamem.text.content_words`); a query is a set of content words. Adding a document updates
postings in place: nothing is rebuilt, and a query only touches the postings of its own terms, so
its cost grows with the matches, not with the number of documents.

A history's first load (an empty index filled in bulk) keeps its postings as one pair of arrays
sorted by term, with each term's row: a term's postings object is made the first time a query or a
later write touches it, so opening a history costs no Python work per distinct word.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Pairs:
    """Documents counted once: the distinct ``words``; for every distinct (word, document) pair its word
    number (``terms``), its document (``docs``, from 0) and count; each document's length."""

    words: list[str]
    terms: np.ndarray
    docs: np.ndarray
    counts: np.ndarray
    lengths: np.ndarray
    m: int  # the pair key's document radix


def count_pairs(docs: Sequence[Sequence[str]]) -> Pairs:
    """The (word, document) pairs of ``docs`` with numpy (dictionary work only per distinct word)."""
    flat = list(itertools.chain.from_iterable(docs))
    vocab = {w: i for i, w in enumerate(dict.fromkeys(flat))}
    ids = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
    lengths = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
    m = max(len(docs), 1)
    rel = np.repeat(np.arange(len(docs), dtype=np.int64), lengths)  # each word's document
    keys, counts = np.unique(ids * m + rel, return_counts=True)
    return Pairs(list(vocab), keys // m, keys % m, counts, lengths, m)


def map_words(words: Sequence[str], transform: Callable[[str], str]) -> tuple[np.ndarray, list[str]]:
    """Each word's new term number (``transform`` of it, numbered in order of first appearance) and the
    new terms."""
    mapped: dict[str, int] = {}
    term_of = np.fromiter((mapped.setdefault(transform(w), len(mapped)) for w in words), dtype=np.int64)
    return term_of, list(mapped)


_NO_DOCS = np.zeros(0, dtype=np.int64)
_NO_TFS = np.zeros(0, dtype=np.float64)


class _Postings:
    """Doc ids (ascending) and term frequencies of one term: numpy arrays, plus a tail of ids added
    one by one that is folded into the arrays when they are next read."""

    __slots__ = ("_docs", "_tfs", "tail_docs", "tail_tfs")

    def __init__(self, docs: np.ndarray = _NO_DOCS, tfs: np.ndarray = _NO_TFS) -> None:
        self._docs, self._tfs = docs, tfs  # never written in place: a new array replaces them
        self.tail_docs: list[int] = []
        self.tail_tfs: list[int] = []

    def df(self) -> int:
        return len(self._docs) + len(self.tail_docs)

    def extend(self, docs: np.ndarray, tfs: np.ndarray) -> None:
        self.arrays()
        self._docs = np.concatenate([self._docs, docs]) if len(self._docs) else docs
        self._tfs = np.concatenate([self._tfs, tfs]) if len(self._tfs) else tfs

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self.tail_docs:
            self._docs = np.concatenate([self._docs, np.asarray(self.tail_docs, dtype=np.int64)])
            self._tfs = np.concatenate([self._tfs, np.asarray(self.tail_tfs, dtype=np.float64)])
            self.tail_docs, self.tail_tfs = [], []
        return self._docs, self._tfs


class BM25Index:
    """An append-only BM25 index; document ids are 0, 1, 2, ... in the order added."""

    def __init__(self, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self._postings: dict[str, _Postings] = {}
        self._rows: dict[str, int] = {}  # each term of the first load: its row in ``_first``
        self._first = (_NO_DOCS, _NO_TFS, _NO_DOCS, _NO_DOCS)  # the first load's docs, tfs, row starts, row ends
        self._lengths: list[int] = []
        self._length_array: np.ndarray | None = None
        self._total = 0

    def __len__(self) -> int:
        return len(self._lengths)

    def _get(self, term: str) -> _Postings | None:
        """The postings of ``term`` (None: no document has it), made from the first load's arrays the
        first time they are asked for."""
        postings = self._postings.get(term)
        if postings is None and (row := self._rows.get(term)) is not None:
            docs, tfs, firsts, ends = self._first
            first, end = int(firsts[row]), int(ends[row])
            # setdefault: two threads making it at once get the same object (a render may run unlocked)
            postings = self._postings.setdefault(term, _Postings(docs[first:end], tfs[first:end]))
        return postings

    def add(self, terms: Sequence[str]) -> int:
        """Index one document (its content words, repeats kept); returns its id."""
        doc = len(self._lengths)
        index = self._postings
        for term, tf in Counter(terms).items():
            postings = self._get(term)
            if postings is None:
                postings = index[term] = _Postings()
            postings.tail_docs.append(doc)
            postings.tail_tfs.append(tf)
        self._lengths.append(len(terms))
        self._total += len(terms)
        self._length_array = None
        return doc

    def add_many(self, docs: Sequence[Sequence[str]], transform: Callable[[str], str] | None = None) -> Pairs:
        """Index many documents at once (a history's load): the same index as ``add`` one by one, built
        with numpy from (term, document) pairs. ``transform`` maps each distinct word first (a stemmer)."""
        pairs = count_pairs(docs)
        self.add_pairs(pairs, transform)
        return pairs

    def add_pairs(
        self,
        pairs: Pairs,
        transform: Callable[[str], str] | None = None,
        *,
        mapping: tuple[np.ndarray, list[str]] | None = None,
    ) -> None:
        """Index the documents counted in ``pairs`` (several indexes of one load share the counting).
        ``mapping`` is :func:`map_words` of ``transform`` over ``pairs.words``, when it was made before
        (a history's kept load, :mod:`flexamem.recover.load_cache`)."""
        m, counts, lengths = pairs.m, pairs.counts, pairs.lengths
        if transform is None and mapping is None:
            terms, keys, docs_of = pairs.words, pairs.terms, pairs.docs
            tfs = counts.astype(np.float64)
        else:  # map each distinct word, then merge the pairs that now share a term
            if mapping is None:
                assert transform is not None
                mapping = map_words(pairs.words, transform)
            term_of, terms = mapping
            merged, inverse = np.unique(term_of[pairs.terms] * m + pairs.docs, return_inverse=True)
            keys, docs_of = merged // m, merged % m
            tfs = np.bincount(inverse.ravel(), weights=counts.astype(np.float64), minlength=len(merged)).astype(
                np.float64
            )
        start = len(self._lengths)
        bounds = np.flatnonzero(np.diff(keys)) + 1
        firsts = np.concatenate([[0], bounds]).astype(np.int64) if len(keys) else bounds
        ends = np.append(bounds, len(keys)) if len(keys) else bounds
        all_docs, all_tfs = docs_of + start, np.asarray(tfs, dtype=np.float64)
        if not self._lengths and not self._postings:  # a first load: rows, postings made when asked for
            self._rows = dict(zip(map(terms.__getitem__, keys[firsts].tolist()), range(len(firsts)), strict=True))
            self._first = (all_docs, all_tfs, firsts, ends)
        else:
            index = self._postings
            for first, end, k in zip(firsts.tolist(), ends.tolist(), keys[firsts].tolist(), strict=True):
                term = terms[k]
                postings = self._get(term)
                if postings is None:  # a new term: its slices, not copies
                    index[term] = _Postings(all_docs[first:end], all_tfs[first:end])
                else:
                    postings.extend(all_docs[first:end], all_tfs[first:end])
        self._lengths.extend(lengths.tolist())
        self._total += int(lengths.sum())
        self._length_array = None

    def idf(self, term: str) -> float:
        postings = self._get(term)
        df = postings.df() if postings else 0
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
            postings = self._get(term)
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

    def score_all(self, query: Sequence[str]) -> np.ndarray:
        """Every document's score (0 where no term matches), from the query terms' postings at once:
        cheaper than :meth:`score_docs` once several groups of documents are scored against the same
        query. Summed term by term in query order, as :meth:`search` sums: the same floats."""
        found = [(term, postings) for term in dict.fromkeys(query) if (postings := self._get(term))]
        if not found:
            return np.zeros(len(self._lengths), dtype=np.float64)
        arrays = [postings.arrays() for _, postings in found]
        docs = np.concatenate([d for d, _ in arrays])  # a term's documents are distinct
        tfs = np.concatenate([t for _, t in arrays])
        idf = np.repeat(np.array([self.idf(term) for term, _ in found]), [len(d) for d, _ in arrays])
        norm = self.k1 * (1.0 - self.b + self.b * self._lengths_np()[docs] / (self._avgdl() or 1.0))
        return np.bincount(docs, weights=idf * tfs * (self.k1 + 1.0) / (tfs + norm), minlength=len(self._lengths))

    def score_docs(self, query: Sequence[str], docs: Sequence[int]) -> np.ndarray:
        """Scores of the given documents only (used to rank the pieces of one unit)."""
        wanted = np.asarray(docs, dtype=np.int64)
        out = np.zeros(len(wanted), dtype=np.float64)
        if not len(wanted):
            return out
        avgdl = self._avgdl() or 1.0
        norm = self.k1 * (1.0 - self.b + self.b * self._lengths_np()[wanted] / avgdl)
        for term in dict.fromkeys(query):
            postings = self._get(term)
            if postings is None:
                continue
            p_docs, p_tfs = postings.arrays()  # ascending doc ids
            at = np.minimum(np.searchsorted(p_docs, wanted), len(p_docs) - 1)
            tf = np.where(p_docs[at] == wanted, p_tfs[at], 0.0)
            out += self.idf(term) * tf * (self.k1 + 1.0) / (tf + norm)
        return out
