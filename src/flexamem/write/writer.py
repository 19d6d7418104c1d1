"""From unit drafts and their records to notes: embeddings, pieces, token counts, links (SPEC section 2).

Everything a note holds is computed here, before the store is touched, so the store write that
follows is one short transaction and a failure anywhere leaves the store unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from flexamem.config import Settings
from flexamem.digests import new_salt, note_digest
from flexamem.notes import LLMCall, Note, Piece, Record, UnitDraft
from flexamem.recover.signals import AgentRanking
from flexamem.tokens import TokenCounter
from flexamem.write.embed import Embedder, embed_unique
from flexamem.write.pieces import cut_pieces
from flexamem.write.units import is_marker


def embedding_text(record: str, fields_text: str) -> str:
    """What is embedded for a note: the record followed by its fields (``s_i || f_i``)."""
    return f"{record}\n{fields_text}" if fields_text else record


def link_targets(vector: np.ndarray, earlier: np.ndarray, k: int) -> list[int]:
    """The ``k`` earlier notes of highest cosine (vectors are unit length), best first."""
    if earlier.shape[0] == 0:
        return []
    sims = earlier @ vector
    order = np.argsort(-sims, kind="stable")
    return [int(i) for i in order[:k]]


@dataclass(frozen=True)
class Prepared:
    """Notes-to-be of a batch of units, all but their place: ``NoteWriter.prepare`` -> ``assign``."""

    drafts: tuple[UnitDraft, ...]
    records: tuple[Record, ...]
    vectors: np.ndarray  # one embedding per unit
    counts: tuple[int, ...]  # raw, record and fields tokens of every unit, in three runs
    pieces: tuple[tuple[Piece, ...], ...]
    piece_vectors: tuple[np.ndarray | None, ...]

    def relabel(self, drafts: Sequence[UnitDraft]) -> Prepared:
        """The same units under new ids (a library-chosen session id taken meanwhile by another writer)."""
        if [d.raw for d in drafts] != [d.raw for d in self.drafts]:
            raise ValueError("relabelled drafts must hold the same text")
        return dataclasses.replace(self, drafts=tuple(drafts))


class NoteWriter:
    """Writes notes for a batch of units that follow ``start_seq`` earlier notes."""

    def __init__(
        self,
        embedder: Embedder,
        counter: TokenCounter,
        settings: Settings,
        known: Callable[[str], np.ndarray | None] | None = None,
    ) -> None:
        self.embedder = embedder
        self.counter = counter
        self.settings = settings
        self.known = known  # the vector of a piece text the history already embedded (never embedded twice)

    def write(
        self,
        drafts: Sequence[UnitDraft],
        start_seq: int,
        earlier: np.ndarray,
        records: Sequence[Record],
    ) -> tuple[list[Note], list[tuple[int, int]], list[LLMCall]]:
        """Notes for ``drafts`` from their ``records`` (written beforehand by a record writer), the new
        link edges (both directions) and the model calls that wrote them."""
        return self.assign(self.prepare(drafts, records), start_seq, earlier)  # digests chained from ""

    def prepare(self, drafts: Sequence[UnitDraft], records: Sequence[Record]) -> Prepared:
        """Everything costly about the notes (embeddings, pieces, token counts), before their place in
        the history is known: a writer that lost a race re-assigns without redoing any of it."""
        if len(records) != len(drafts):
            raise RuntimeError(f"the record writer returned {len(records)} records for {len(drafts)} units")
        if not drafts:
            return Prepared((), (), np.zeros((0, self.embedder.dim), dtype=np.float32), (), (), ())
        field_texts = [r.fields.as_text() for r in records]
        counts = self.counter.count_many([d.raw for d in drafts] + [r.text for r in records] + field_texts)
        pieces = [cut_pieces(d, self.settings.kappa, self.counter) for d in drafts]
        wanted: list[int] = []
        if self.settings.piece_vectors:  # agent units only when agent ``auto`` gives the cosine a weight
            wanted = [
                i
                for i, ps in enumerate(pieces)
                if len(ps) <= self.settings.piece_vector_limit
                and (drafts[i].kind != "agent" or self.settings.rankers[AgentRanking].agent_auto_alpha < 1)
            ]
        unit_texts = [embedding_text(r.text, f) for r, f in zip(records, field_texts, strict=True)]
        # one call for the units' and the pieces' texts: a server embeds them in one job, so a write waits
        # once for an embedding process, not twice (a text the history holds a vector of is not embedded)
        flat = embed_unique(self.embedder, unit_texts + [p.text for i in wanted for p in pieces[i]], self.known)
        vectors, start = flat[: len(unit_texts)], len(unit_texts)
        piece_vectors: list[np.ndarray | None] = [None] * len(drafts)
        for i in wanted:
            piece_vectors[i] = flat[start : start + len(pieces[i])]
            start += len(pieces[i])
        return Prepared(tuple(drafts), tuple(records), vectors, tuple(counts), tuple(pieces), tuple(piece_vectors))

    def rewrite(self, note: Note, draft: UnitDraft, record: Record) -> Note:
        """``note`` as an erasure leaves it: ``draft``'s words and ``record`` in its place (seq, unit id,
        links and chain digest kept), its pieces, vectors and counts computed again, salted anew. A
        draft with no words left leaves an empty note: no pieces, a zero embedding (never retrieved by
        its vector), only markers and ``record`` (a marker, or nothing)."""
        if all(is_marker(b) for b in draft.blocks):
            sizes = self.counter.count_many([draft.raw, record.text])
            return dataclasses.replace(
                note, raw=draft.raw, raw_tokens=sizes[0], record=record.text, record_tokens=sizes[1],
                fields=record.fields, fields_tokens=0, embedding=np.zeros(self.embedder.dim, dtype=np.float32),
                pieces=(), blocks=draft.blocks,
                writer=record.writer, flagged=False, flag_reason=None, piece_vectors=None, salt=new_salt(),
            )  # fmt: skip
        prepared = self.prepare([draft], [record])
        counts = prepared.counts
        return dataclasses.replace(
            note, raw=draft.raw, raw_tokens=counts[0], record=record.text, record_tokens=counts[1],
            fields=record.fields, fields_tokens=counts[2], embedding=prepared.vectors[0], pieces=prepared.pieces[0],
            blocks=draft.blocks, writer=record.writer, flagged=record.flagged, flag_reason=record.flag_reason,
            piece_vectors=prepared.piece_vectors[0], salt=new_salt(),
        )  # fmt: skip

    def assign(
        self, prepared: Prepared, start_seq: int, earlier: np.ndarray, previous_digest: str = ""
    ) -> tuple[list[Note], list[tuple[int, int]], list[LLMCall]]:
        """The notes at ``start_seq..`` with their links to the ``earlier`` notes' embeddings, their
        digests chained after ``previous_digest`` (the last stored note's)."""
        drafts, records, vectors, counts = prepared.drafts, prepared.records, prepared.vectors, prepared.counts
        n = len(drafts)
        notes: list[Note] = []
        links: list[tuple[int, int]] = []
        calls: list[LLMCall] = []
        matrix = earlier
        for i, (draft, record) in enumerate(zip(drafts, records, strict=True)):
            seq = start_seq + i
            targets = link_targets(vectors[i], matrix, self.settings.links)
            links += [(seq, t) for t in targets] + [(t, seq) for t in targets]
            notes.append(
                Note(
                    seq=seq,
                    unit_id=draft.unit_id,
                    kind=draft.kind,
                    raw=draft.raw,
                    raw_tokens=counts[i],
                    record=record.text,
                    record_tokens=counts[n + i],
                    fields=record.fields,
                    fields_tokens=counts[2 * n + i],
                    embedding=vectors[i],
                    pieces=prepared.pieces[i],
                    blocks=draft.blocks,
                    links=tuple(targets),
                    session_id=draft.session_id,
                    date=draft.date,
                    steps=draft.steps,
                    writer=record.writer,
                    flagged=record.flagged,
                    flag_reason=record.flag_reason,
                    piece_vectors=prepared.piece_vectors[i],
                    salt=new_salt(),
                )
            )
            previous_digest = note_digest(notes[-1], previous_digest)
            notes[-1] = dataclasses.replace(notes[-1], digest=previous_digest)
            calls += [dataclasses.replace(c, seq=seq) for c in record.calls]
            matrix = np.vstack([matrix, vectors[i : i + 1]])
        return notes, links, calls
