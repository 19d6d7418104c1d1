"""One history held in memory for fast rendering: notes, their embedding matrix, links and BM25.

Built once from the store when a :class:`~flexamem.memory.Memory` opens (a rebuild of the BM25 index
from the stored pieces takes milliseconds) and extended in place as notes are added, so rendering
never reads more than this. Piece ``p`` of note ``seq`` is BM25 document ``doc_of[seq] + p``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flexamem.notes import Block, Note, Piece
from flexamem.recover.bm25 import BM25Index
from flexamem.recover.load_cache import LoadedWords, count_words
from flexamem.text import code_terms, content_words, is_identifier, stemmed

BULK = 256  # pieces from which a load indexes in bulk
TURN_HEAD = 256  # tokens: a turn's head, what its turn vector is made of (MiniLM reads 256 word pieces)
HEAD_CHUNK = 4096  # turns (or notes) whose vectors are summed at a time (a bounded copy of the piece matrix)


class History:
    """In-memory view of one history (read-mostly; extended only by ``extend``)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.notes: list[Note] = []
        self.raw_upto: list[int] = [0]  # raw tokens of notes 0..n-1, for every n
        self._embeddings = np.zeros((16, dim), dtype=np.float32)  # grown by doubling
        self.links: list[list[int]] = []
        self.index = BM25Index()
        self.doc_of: list[int] = []  # first BM25 doc id of each note
        self.piece_of: list[tuple[int, int]] = []  # BM25 doc id -> (seq, piece index)
        self.unit_ids: dict[str, int] = {}
        self.token_cache: dict[object, int] = {}
        # auto's hybrid ranking: piece vectors (a note's embedding stands in for pieces written without
        # them), the turn each piece belongs to, and a BM25 index over stemmed words
        self._piece_matrix = np.zeros((16, dim), dtype=np.float32)
        self.piece_vector_ready: list[bool] = []
        self.first_piece_vector: int | None = None  # the first doc written with a vector of its own
        self.turn_start: list[bool] = []  # doc begins a new turn (or block) of its note
        self.stem_index = BM25Index()  # same docs as ``index``, over Snowball stems
        self._code_index = BM25Index()  # same docs, over names of code (built when first asked for)
        self.identifiers: list[int] = []  # identifier words (codes, ids, numbers) in each doc
        self.loaded_words: LoadedWords | None = None  # the first load's counting, when it was in bulk
        self._doc_arrays = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), np.zeros(0))  # see doc_arrays
        self._turn_starts = np.zeros(0, dtype=np.int64)  # doc ids that begin a turn, as doc_arrays last saw them
        self._turns: dict[object, dict[str, frozenset[int]]] = {}  # piece indexes of each turn, per note
        self._floors: dict[int, list[int]] = {}  # per omission-mark size: each piece's least cost
        self._doc_tokens = np.zeros(0)  # per doc: its piece's tokens
        self._head_weights = np.zeros(0)  # per doc: its weight in its turn's head vector
        self._head_norms = np.zeros(0)  # per turn: the norm of its head vector
        self._unit_weights = np.zeros(0)  # per doc: its weight in its note's whole-text vector
        self._unit_norms = np.zeros(0)  # per note: the norm of its whole-text vector
        self._turn_tokens = np.zeros(0)  # per turn: its pieces' tokens
        self._turn_tokens_docs = 0  # docs the turn sizes cover
        self._assistant_turns = np.zeros(0, dtype=bool)  # per turn: whether the assistant said it
        self._doc_of_text: dict[int, int] | None = None  # hash of a piece's text -> a doc with its vector

    def __len__(self) -> int:
        return len(self.notes)

    @property
    def pieces_count(self) -> int:
        return len(self.piece_of)

    def extend(
        self,
        notes: Sequence[Note],
        links: Sequence[tuple[int, int]] = (),
        *,
        words: LoadedWords | None = None,
        keep_count: bool = False,
    ) -> None:
        """Append written notes (in seq order) and any new link edges. ``words``: the notes' pieces
        counted before (a kept load, :mod:`flexamem.recover.load_cache`; only into an empty history),
        used instead of counting them again. ``keep_count``: a first load counted in bulk leaves its
        count in :attr:`loaded_words` for the caller to keep."""
        if not notes and not links:
            return
        if words is not None and (self.notes or len(words.pairs.lengths) != sum(len(n.pieces) for n in notes)):
            raise ValueError("a kept load fits only the first notes of an empty history")
        docs: list[list[str]] = []
        for note in notes:
            if note.seq != len(self.notes):
                raise ValueError(f"note seq {note.seq} out of order (expected {len(self.notes)})")
            self.notes.append(note)
            self.raw_upto.append(self.raw_upto[-1] + note.raw_tokens)
            self.links.append([])
            self.unit_ids[note.unit_id] = note.seq
            self.doc_of.append(len(self.piece_of))
            self._add_piece_vectors(note)
            previous: object = None
            for piece in note.pieces:
                if words is None:
                    docs.append(content_words(piece.text))
                self.piece_of.append((note.seq, piece.index))
                turn = piece.source_id if piece.source_id is not None else ("block", piece.block)
                self.turn_start.append(piece.index == 0 or turn != previous)
                previous = turn
        if words is not None:
            self._index_counted(words)
        else:
            self._index(docs, keep_count)
        if notes:
            start = len(self.notes) - len(notes)
            self._embeddings = _ensure_rows(self._embeddings, len(self.notes))
            self._embeddings[start : len(self.notes)] = np.stack([n.embedding for n in notes])
        for a, b in links:
            if b not in self.links[a]:
                self.links[a].append(b)

    def _index(self, docs: list[list[str]], keep_count: bool = False) -> None:
        """Add the new pieces' words to the BM25 indexes and count their identifier words: one by one
        for a few (a write), in bulk with numpy for many (a history's load)."""
        if len(docs) < BULK:
            for words in docs:
                self.index.add(words)
                self.stem_index.add(stemmed(words))
                self.identifiers.append(sum(1 for w in set(words) if is_identifier(w)))
            return
        counted = count_words(docs)
        if keep_count and not len(self.index):  # a first load: what a later open may read instead
            self.loaded_words = counted
        self._index_counted(counted)

    def _index_counted(self, words: LoadedWords) -> None:
        self.index.add_pairs(words.pairs)
        self.stem_index.add_pairs(words.pairs, mapping=words.stems)
        self.identifiers.extend(words.identifiers.tolist())

    @property
    def code_index(self) -> BM25Index:
        """BM25 over the names of code in each piece (:func:`flexamem.text.code_terms`), same doc ids.
        Only agent ``auto``'s pieces path asks for it, so it is built then (and extended with the
        pieces added since), never for a reader's history."""
        start = len(self._code_index)
        if start < len(self.piece_of):
            self._code_index.add_many([code_terms(self.piece(d)[1].text) for d in range(start, len(self.piece_of))])
        return self._code_index

    def _add_piece_vectors(self, note: Note) -> None:
        start, count = len(self.piece_vector_ready), len(note.pieces)
        self._piece_matrix = _ensure_rows(self._piece_matrix, start + count)
        ready = note.piece_vectors is not None and len(note.piece_vectors) == count
        self._piece_matrix[start : start + count] = note.piece_vectors if ready else note.embedding
        self.piece_vector_ready.extend([ready] * count)
        if ready and self.first_piece_vector is None:
            self.first_piece_vector = start
        if ready and self._doc_of_text is not None:
            for i, piece in enumerate(note.pieces):
                self._doc_of_text.setdefault(hash(piece.text), start + i)

    def piece_vector(self, text: str) -> np.ndarray | None:
        """The vector of a piece of this history with exactly this text (None: none was embedded), so a
        text embedded once is never embedded again for the same history."""
        if self._doc_of_text is None:
            self._doc_of_text = {}
            for d, ready in enumerate(self.piece_vector_ready):
                if ready:
                    self._doc_of_text.setdefault(hash(self.piece(d)[1].text), d)
        doc = self._doc_of_text.get(hash(text))
        if doc is None or self.piece(doc)[1].text != text:  # a hash collision is not a match
            return None
        vector: np.ndarray = self._piece_matrix[doc]
        return vector

    @property
    def embeddings(self) -> np.ndarray:
        """One row per note: its embedding."""
        return self._embeddings[: len(self.notes)]

    @property
    def piece_matrix(self) -> np.ndarray:
        """One row per BM25 doc: the piece's vector, or its note's embedding when it has none."""
        return self._piece_matrix[: len(self.piece_vector_ready)]

    def doc_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(note seq of each doc, whether each doc begins a turn, identifier words in each doc)`` as
        numpy arrays (cached, extended with the docs: a doc's values never change)."""
        seqs, starts, ids = self._doc_arrays
        done = len(seqs)
        if done < len(self.piece_of):
            new_starts = np.asarray(self.turn_start[done:], dtype=bool)
            self._doc_arrays = (
                np.concatenate([seqs, np.fromiter((s for s, _ in self.piece_of[done:]), dtype=np.int64)]),
                np.concatenate([starts, new_starts]),
                np.concatenate([ids, np.asarray(self.identifiers[done:], dtype=np.float64)]),
            )
            self._turn_starts = np.concatenate([self._turn_starts, done + np.flatnonzero(new_starts)])
        return self._doc_arrays

    def turn_starts(self, limit: int) -> np.ndarray:
        """The doc ids below ``limit`` that begin a turn (or block): ``flatnonzero(turn_start[:limit])``,
        found once per change of the docs (a readers' render ranks and cuts by turns twice)."""
        self.doc_arrays()
        starts = self._turn_starts
        return starts[: int(np.searchsorted(starts, limit))]

    def doc_tokens(self) -> np.ndarray:
        """Per doc, its piece's tokens (cached, extended with the docs)."""
        done = len(self._doc_tokens)
        if done < len(self.piece_of):
            new = np.fromiter((self.piece(d)[1].tokens for d in range(done, len(self.piece_of))), dtype=np.float64)
            self._doc_tokens = np.concatenate([self._doc_tokens, new])
        return self._doc_tokens

    def turn_tokens(self) -> np.ndarray:
        """Per turn (or block), the tokens of its pieces (cached, extended with the docs; a turn never
        spans two notes, so the turns of the first docs never change)."""
        done = self._turn_tokens_docs
        if done < len(self.piece_of):  # ``done`` is a note's first doc, so a turn's first doc
            starts = np.flatnonzero(np.asarray(self.turn_start[done:], dtype=bool))
            sums = np.add.reduceat(self.doc_tokens()[done:], starts)
            self._turn_tokens = np.concatenate([self._turn_tokens, sums])
            self._turn_tokens_docs = len(self.piece_of)
        return self._turn_tokens

    def assistant_turns(self) -> np.ndarray:
        """Per turn (or block), whether its speaker is ``assistant`` (any case): the other party of a
        chat whose messages name no speaker (chat messages and LongMemEval's sessions are written so).
        Cached, extended with the turns (a note's turns never change)."""
        starts = self.turn_starts(len(self.piece_of))
        done = len(self._assistant_turns)
        if done < len(starts):
            new = np.fromiter(
                (self._block_of(int(d)).label.lower() == "assistant" for d in starts[done:]),
                dtype=bool,
                count=len(starts) - done,
            )
            self._assistant_turns = np.concatenate([self._assistant_turns, new])
        return self._assistant_turns

    def _block_of(self, doc: int) -> Block:
        note, piece = self.piece(doc)
        return note.blocks[piece.block]

    def turn_heads(self) -> tuple[np.ndarray, np.ndarray]:
        """``auto``'s turn vectors, as what a cosine needs: per doc, its weight in its turn's vector
        (its tokens while the turn's first ``TURN_HEAD`` tokens last, else 0), and per turn, the norm
        of the weighted sum of its piece vectors. A turn's cosine to a unit query is then the weighted
        sum of its pieces' cosines over that norm. Extended with the docs (rows never change)."""
        done = len(self._head_weights)
        if done < len(self.piece_of):  # ``done`` is a note's first doc, so a turn's first doc
            sizes = self._weights(done)
            starts = np.flatnonzero(np.asarray(self.turn_start[done:], dtype=bool))
            ends = np.cumsum(sizes)  # tokens up to each doc's end, from ``done``
            turn_begins = (ends - sizes)[starts]  # ... up to each turn's first doc
            before = ends - sizes - np.repeat(turn_begins, np.diff(np.append(starts, len(sizes))))
            w = np.where(before < TURN_HEAD, sizes, 0.0)  # the doc's tokens while its turn's head lasts
            norms = _sum_norms(self._piece_matrix[done:], w, starts, len(w))
            self._head_weights = np.concatenate([self._head_weights, w])
            self._head_norms = np.concatenate([self._head_norms, norms])
        return self._head_weights, self._head_norms

    def unit_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """Each note's whole-text vector (``auto_session_vector``), as what a cosine needs: per doc, its
        weight (its tokens), and per note, the norm of the weighted sum of its piece vectors (0 for a
        note without pieces). A note's cosine to a unit query is then the weighted sum of its pieces'
        cosines over that norm. Extended with the notes (rows never change)."""
        done = len(self._unit_norms)
        if done < len(self.notes):
            first = self.doc_of[done]
            w = self._weights(first)
            seqs = self.doc_arrays()[0][first:] - done
            norms = np.zeros(len(self.notes) - done)
            if len(seqs):  # docs come in note order: one sum per run of a note's docs
                firsts = np.flatnonzero(np.r_[True, seqs[1:] != seqs[:-1]])
                norms[seqs[firsts]] = _sum_norms(self._piece_matrix[first:], w, firsts, len(w))
            self._unit_weights = np.concatenate([self._unit_weights, w])
            self._unit_norms = np.concatenate([self._unit_norms, norms])
        return self._unit_weights, self._unit_norms

    def _weights(self, start: int) -> np.ndarray:
        """The weight of each doc from ``start`` in a vector summed over several pieces: its tokens
        (at least 1, so an empty piece still counts)."""
        weights: np.ndarray = np.maximum(self.doc_tokens()[start:], 1.0)
        return weights

    def piece_cost_floor(self, mark: int) -> list[int]:
        """Per BM25 doc, the least a piece can add to a pieces section: its line, label and newline,
        less one omission mark (adding a piece removes at most one). Cached and extended with the docs."""
        floor = self._floors.setdefault(mark, [])
        for doc in range(len(floor), len(self.piece_of)):
            piece = self.piece(doc)[1]
            floor.append(piece.tokens + piece.label_tokens + 1 - mark)
        return floor

    def turn_pieces(self, seq: int) -> dict[str, frozenset[int]]:
        """Piece indexes of each turn (by source id) of note ``seq`` (computed once)."""
        key = ("turns", seq)
        cached = self._turns.get(key)
        if cached is None:
            groups: dict[str, set[int]] = {}
            for p in self.notes[seq].pieces:
                if p.source_id is not None:
                    groups.setdefault(p.source_id, set()).add(p.index)
            cached = self._turns[key] = {t: frozenset(ps) for t, ps in groups.items()}
        return cached

    def piece(self, doc: int) -> tuple[Note, Piece]:
        seq, idx = self.piece_of[doc]
        note = self.notes[seq]
        return note, note.pieces[idx]

    @classmethod
    def from_notes(cls, notes: Sequence[Note], dim: int) -> History:
        history = cls(dim)
        history.extend(notes, [(n.seq, b) for n in notes for b in n.links])
        return history


def _ensure_rows(matrix: np.ndarray, rows: int) -> np.ndarray:
    """``matrix`` with room for ``rows`` rows: the same array, or a copy of twice the size (amortised
    O(1) per appended row, where stacking on every write made building a long history quadratic)."""
    if rows <= len(matrix):
        return matrix
    grown = np.zeros((max(rows, 2 * len(matrix)), matrix.shape[1]), dtype=matrix.dtype)
    grown[: len(matrix)] = matrix
    return grown


def _sum_norms(matrix: np.ndarray, weights: np.ndarray, starts: np.ndarray, end: int) -> np.ndarray:
    """The norm of each group's weighted sum of ``matrix`` rows (group ``i``: rows ``starts[i]`` up to
    the next start, the last up to ``end``), ``HEAD_CHUNK`` groups at a time (a bounded copy)."""
    norms = [np.zeros(0)]
    for first in range(0, len(starts), HEAD_CHUNK):
        chunk = starts[first : first + HEAD_CHUNK]
        after = first + HEAD_CHUNK
        a, b = int(chunk[0]), int(starts[after]) if after < len(starts) else end
        rows = matrix[a:b] * weights[a:b, None].astype(np.float32)
        norms.append(np.linalg.norm(np.add.reduceat(rows, chunk - a, axis=0), axis=1))
    return np.concatenate(norms)
