"""The words of a history's pieces as its first load counts them, kept so that the next open reads them.

Opening a history (a worker that has not held it, a process that starts) indexes every piece for BM25:
the content words of each piece, their (word, piece) pairs, the Snowball stem of each distinct word and
the identifier words of each piece. That is most of what a cold open costs beyond reading the rows
(docs/PERFORMANCE.md, "Many histories"). It is a function of the notes alone, so the first load of a
history stores it (``load_cache``, one row per history, replaced, never part of the history's rows,
digests or export) and a later open that finds it matching uses it for the notes it covers and
indexes only the notes written since.

What it may change is bounded: it holds counts of words, never text a render shows, nor a token count
the budget relies on; a forged or stale one can only reorder what BM25 ranks. It is used only while
the history has the same epoch, the same erasures and the same note (by digest) at the end of what it
covers; an erasure and a drop delete it in their own transaction; ``Memory.verify()`` rebuilds it
from the notes and reports one that differs.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexamem.recover.bm25 import Pairs, count_pairs, map_words
from flexamem.text import is_identifier, stem

VERSION = 1  # of the layout and of what made it (content_words, stem, is_identifier): a change bumps it
MIN_PIECES = 512  # smaller histories index faster than they read and decode a kept load
_ARRAYS = ("terms", "docs", "counts", "lengths", "stem_of", "identifiers")
_HEAD = struct.Struct("<I")


@dataclass(frozen=True)
class LoadedWords:
    """One load's counting: the (word, piece) ``pairs``, each word's stem as ``(term number of each
    word, the stems)``, and the identifier words of each piece."""

    pairs: Pairs
    stems: tuple[np.ndarray, list[str]]
    identifiers: np.ndarray


def count_words(docs: Sequence[Sequence[str]]) -> LoadedWords:
    """Count the content words of every piece (``docs``, in doc order) as a history's load does."""
    pairs = count_pairs(docs)
    is_id = np.fromiter((is_identifier(w) for w in pairs.words), dtype=bool, count=len(pairs.words))
    identifiers = np.bincount(pairs.docs[is_id[pairs.terms]], minlength=len(docs))
    return LoadedWords(pairs, map_words(pairs.words, stem), identifiers)


def encode(words: LoadedWords) -> bytes:
    """The bytes kept for ``words``: a JSON head (the words and stems) and six little-endian int32 arrays."""
    p = words.pairs
    arrays = (p.terms, p.docs, p.counts, p.lengths, words.stems[0], words.identifiers)
    head = json.dumps(
        {"version": VERSION, "m": p.m, "words": p.words, "stems": words.stems[1], "sizes": [len(a) for a in arrays]},
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode()
    body = b"".join(np.asarray(a, dtype="<i4").tobytes() for a in arrays)
    return _HEAD.pack(len(head)) + head + body


def decode(data: bytes, docs: int) -> LoadedWords:
    """``words`` back from :func:`encode`'s bytes, checked to describe ``docs`` pieces consistently
    (:class:`ValueError` otherwise: the caller then counts afresh)."""
    try:
        (size,) = _HEAD.unpack_from(data)
        head = json.loads(data[_HEAD.size : _HEAD.size + size])
        words, stems, m, sizes = head["words"], head["stems"], int(head["m"]), head["sizes"]
        if head["version"] != VERSION or len(sizes) != len(_ARRAYS):
            raise ValueError("another version")
        if not all(isinstance(w, str) for w in words) or not all(isinstance(s, str) for s in stems):
            raise ValueError("words are not strings")
        flat = np.frombuffer(data, dtype="<i4", offset=_HEAD.size + size).astype(np.int64)
        if any(not isinstance(n, int) or n < 0 for n in sizes) or len(flat) != sum(sizes):
            raise ValueError("truncated")
        terms, doc_ids, counts, lengths, stem_of, identifiers = np.split(flat, np.cumsum(sizes)[:-1])
    except (struct.error, KeyError, TypeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"unreadable: {exc}") from exc
    n_pairs = len(terms)
    checks = (
        m == max(docs, 1) and len(lengths) == docs and len(identifiers) == docs,
        len(doc_ids) == n_pairs and len(counts) == n_pairs and len(stem_of) == len(words),
        not n_pairs or (terms.min() >= 0 and terms.max() < len(words) and doc_ids.min() >= 0 and doc_ids.max() < docs),
        not n_pairs or (counts.min() >= 1 and bool(np.all(np.diff(terms * m + doc_ids) > 0))),
        not len(stem_of) or (stem_of.min() >= 0 and stem_of.max() < len(stems)),
        np.array_equal(np.bincount(doc_ids, weights=counts, minlength=docs), lengths),
        not docs or (identifiers.min() >= 0 and bool(np.all(identifiers <= lengths))),
    )
    if not all(checks):
        raise ValueError("inconsistent")
    return LoadedWords(Pairs(list(words), terms, doc_ids, counts, lengths, m), (stem_of, list(stems)), identifiers)
