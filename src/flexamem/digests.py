"""Every digest FlexA-Mem writes, and the checks that read them back: one home for the formulas.

Write-once is enforced by the database's triggers; digests make a change made past them (by someone
who can drop the triggers, or a flipped byte on disk) visible. Each stored row a render or an agent
context can show carries one, written in the same transaction as the row:

- a **note** (``notes.digest``): SHA-256 chained over the note before it. Version 1 (notes written
  before schema v6: 64 hex digits) covers the ids, raw text, record, fields, session, date and seq;
  version 2 (``"v2:"`` + hex) adds the token counts, blocks, pieces, writer flags, the embedding, the
  piece vectors and the links the note was written with, so every byte a render can draw on is covered;
  version 3 (``"v3:"``, schema v8) adds a random per-note salt, erased with the note's words, so the
  digest an erasure keeps in the chain gives nothing of them back (a short secret cannot be found by
  trying every value);
- a **merged record** (``merged.digest``): its span, text and writer, chained to the digest of the
  last note it merges (which covers every note before it);
- an **agent step** (``steps.digest``): chained over the step before it (salted from schema v8);
- an **erasure** (``erasures.digest``): what it named, why and when, and for each note and step it
  rewrote the digest the row keeps (its place in its chain) and the digest of what the row holds now;
  chained over the erasure before it, so the rest of every chain still verifies and the rewritten rows
  are bound to the erasure that rewrote them;
- a **history row** (``histories.digest``): its id, kind, meta (an agent session's task, system
  prompt and budget), epoch and parent.

- a **request** (``requests.digest``): a write's request id, the unit ids it stored and its body's
  digest, chained over the request before it and bound to the digest of the write's last note;
- a history's **head** (``heads``, :class:`Head`): the count and last digest of each chain (notes,
  steps, requests), the digest of its state and what it held before digests, and (version 2) the
  history row's digest and the digest of its merged records as a set: rewritten by every write (a
  render that keeps merged records included) and signed (HMAC-SHA256) when the store has a key, so
  cutting rows off the end, rewriting the chains, the history's meta or its merged records with the
  database alone, no longer matches it; a head a caller kept shows a rollback.

Rows written before their digest existed carry none; the store names them (``legacy``, by the upgrade
that added heads), and a digest missing from any later row is reported (docs/RELIABILITY.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from flexamem.errors import InvalidInputError
from flexamem.notes import Note, blocks_json

SEP = "\x1f"
V2 = "v2:"
V3 = "v3:"


def _sha(parts: Iterable[Any]) -> str:
    return hashlib.sha256(SEP.join(str(p) for p in parts).encode("utf-8", "surrogatepass")).hexdigest()


def _bytes_sha(arrays: Iterable[Any]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.asarray(a, dtype=np.float32).tobytes())
    return h.hexdigest()


def note_digest(note: Note, previous: str, *, version: int = 3) -> str:
    """The digest ``note`` must carry after a note whose digest is ``previous`` (``""`` for the first).
    ``version=1`` and ``2`` are the formulas of notes written before schema v6 and v8 (checked, never
    written); version 3 covers ``note.salt`` too."""
    parts: list[Any] = [previous, note.unit_id, note.kind, note.raw, note.record, note.fields.as_text()]
    parts += [note.session_id or "", note.date or "", note.seq]
    if version == 1:
        return _sha(parts)
    parts += [note.raw_tokens, note.record_tokens, note.fields_tokens, note.writer, int(note.flagged)]
    parts += [note.flag_reason or "", json.dumps(list(note.steps) if note.steps else None)]
    parts += [blocks_json(note.blocks)]
    parts += [json.dumps([[p.index, p.start, p.end, p.tokens, p.label, p.label_tokens, p.block, p.source_id]
                          for p in note.pieces])]  # fmt: skip
    parts += [json.dumps(sorted(d for d in note.links if d < note.seq))]
    parts += [_bytes_sha([note.embedding]), _bytes_sha(note.piece_vectors if note.piece_vectors is not None else [])]
    parts += [-1 if note.piece_vectors is None else len(note.piece_vectors)]
    if version == 2:
        return V2 + _sha(parts)
    return V3 + _sha([*parts, note.salt or ""])


def version_of(digest: str) -> int:
    """The formula a stored note digest was written with (1, 2 or 3)."""
    return 3 if digest.startswith(V3) else 2 if digest.startswith(V2) else 1


def rewritten_digest(note: Note, kept: str) -> str:
    """The digest of what an erasure left in a note whose chain digest ``kept`` stays in its row: the
    note as it is now (salted anew), bound to that place in the chain."""
    return note_digest(note, "erased" + SEP + kept)


def note_problem(note: Note, previous: str, rewritten: str | None = None) -> str | None:
    """What is wrong with a stored note read back after a note with digest ``previous`` (``None``:
    nothing, or a note written before digests). ``note.links`` must hold its stored outgoing links.
    ``rewritten``: the digest the last erasure that rewrote this note recorded for what it left (the
    note's own digest then only keeps its place in the chain, as the erasure recorded it)."""
    if rewritten is not None:
        if rewritten_digest(note, note.digest or "") != rewritten:
            return f"note {note.seq} ({note.unit_id!r}) does not match what the erasure that rewrote it left"
        return None
    if note.digest is None:
        return None
    if note_digest(note, previous, version=version_of(note.digest)) != note.digest:
        return f"note {note.seq} ({note.unit_id!r}) does not match its digest: changed after writing"
    return None


def merged_digest(first: int, last: int, level: int, text: str, tokens: int, writer: str, flagged: bool,
                  last_note_digest: str) -> str:  # fmt: skip
    """A merged record's digest: its span and content, chained to the last note it merges."""
    return _sha(["merged", first, last, level, text, tokens, writer, int(flagged), last_note_digest])


def step_digest(previous: str, n: int, step_id: str | None, data: str, salt: str | None = None) -> str:
    """An agent step's digest, chained over the step before it (``""`` for step 0); salted from schema
    v8 (``"v3:"``), unsalted before."""
    parts = ["step", previous, n, step_id if step_id is not None else "\x00", data]
    return _sha(parts) if salt is None else V3 + _sha([*parts, salt])


def rewritten_step_digest(n: int, step_id: str | None, data: str, salt: str | None, kept: str) -> str:
    """The digest of what an erasure left in step ``n``, whose chain digest ``kept`` stays in its row."""
    return step_digest("erased" + SEP + kept, n, step_id, data, salt or "")


def erasure_digest(previous: str, n: int, kind: str, ids: str, reason: str, at: float, notes: str, steps: str) -> str:
    """An erasure's digest, chained over the erasure before it (``""`` for the first); ``ids``,
    ``notes`` and ``steps`` as stored (JSON text: the rewritten notes as ``[seq, kept, now]``, steps
    as ``[n, kept, now]``)."""
    return _sha(["erasure", previous, n, kind, ids, reason, repr(float(at)), notes, steps])


def new_salt() -> str:
    """A random salt for one row's digest (128 bits)."""
    return secrets.token_hex(16)


def history_digest(history: str, kind: str, meta: str, epoch: str, parent: str | None) -> str:
    """A history row's digest (``meta`` as stored: its JSON text)."""
    return _sha(["history", history, kind, meta, epoch, parent if parent is not None else "\x00"])


def request_digest(previous: str, n: int, request_id: str, units: str, body: str, last_note: str) -> str:
    """A request row's digest: chained over the request before it (``""`` for the first) and bound to
    the digest of the last note the write stored (``units`` as stored: its JSON text)."""
    return _sha(["request", previous, n, request_id, units, body, last_note])


def body_digest(parts: Any) -> str:
    """The digest of a write's body (what a request id names): ``parts`` as canonical JSON."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


ERASED_SALT = "erased"  # a request row's salt once an erasure rewrote a note its write stored


def salted_body(body: str, salt: str | None) -> str:
    """What a request row keeps of its write's body (:func:`body_digest`): salted from schema v10
    (``"v3:"``, the row's random ``salt``: once an erasure replaces the salt by :data:`ERASED_SALT`, the
    kept digest cannot be tested against guesses of the erased words), the bare digest before."""
    return body if salt is None else V3 + _sha(["body", body, salt])


def state_digest(rows: Iterable[tuple[str, str]]) -> str:
    """The digest of a history's state rows (``(key, value)``, as stored)."""
    return _sha(["state", *(f"{k}={v}" for k, v in sorted(rows))])


HEAD_FIELDS = ("history", "epoch", "notes", "note", "steps", "step", "requests", "request", "state", "legacy")
ERASURE_FIELDS = ("erasures", "erasure")  # in a head's digest once its history has an erasure
V2_FIELDS = ("version", "row", "merges", "merge")  # in the digest of a head of version 2 (HEAD_VERSION)
HEAD_VERSION = 2  # the heads this library writes: version 1 left out the history row and the merged records


def merged_set_digest(rows: Iterable[Sequence[Any]]) -> str:
    """The digest of a history's merged records as a set: ``(first, last, level, digest)`` of each, in any
    order (a render may keep them in any order; an erasure takes some out)."""
    return _sha(["merges", *sorted(f"{int(a)}:{int(b)}:{int(lv)}:{d or ''}" for a, b, lv, d in rows)])


@dataclasses.dataclass(frozen=True)
class Head:
    """A history's head: how long each chain is and the digest it ends with, the digest of the
    history's state, and what it held before its rows carried digests (``legacy``: notes, steps,
    merged records, the history row, requests; None for a history begun with digests). Keep the head
    a call returned (``Memory.head()``) and pass it to ``Memory.verify(head=...)`` later: the history
    must still extend it (same epoch, at least as many notes, steps and requests, the same digest at
    the kept length), so rows cut off the end or a rollback to an older state are reported. A server
    signs its heads (``signature``: HMAC-SHA256 of :attr:`digest` under its key file's secret)."""

    history: str
    epoch: str
    notes: int
    note: str
    steps: int
    step: str
    requests: int
    request: str
    state: str
    legacy: tuple[int, ...] | None = None
    signature: str | None = None
    erasures: int = 0  # how many erasures the history holds, and the digest of the last (Memory.erase)
    erasure: str = ""
    version: int = 1  # 2 (HEAD_VERSION): the head covers the history's row and its merged records too
    row: str = ""  # the history row's digest (its kind, meta: an agent's task, system prompt, settings)
    merges: int = 0  # how many merged records the history holds, and the digest of them as a set
    merge: str = ""

    @property
    def digest(self) -> str:
        parts = [getattr(self, f) for f in HEAD_FIELDS[:-1]]
        more = [self.erasures, self.erasure] if self.erasures else []  # heads kept before erasures keep theirs
        if self.version >= 2:  # heads of version 1 (kept or stored before) keep theirs
            more += ["v2", self.row, self.merges, self.merge]
        return _sha(["head", *parts, json.dumps(list(self.legacy) if self.legacy is not None else None), *more])

    def at_version(self, version: int) -> Head:
        """This head as a head of ``version`` holds it (what a stored head of that version must match)."""
        if version >= 2:
            return dataclasses.replace(self, version=version, signature=None)
        return dataclasses.replace(self, version=version, signature=None, row="", merges=0, merge="")

    def signed(self, key: bytes | None) -> Head:
        """This head signed with ``key`` (unchanged, unsigned, without one)."""
        if key is None:
            return dataclasses.replace(self, signature=None)
        return dataclasses.replace(self, signature=hmac.new(key, self.digest.encode(), hashlib.sha256).hexdigest())

    def signed_by(self, key: bytes) -> bool:
        """Whether :attr:`signature` is this head's under ``key``."""
        expected = hmac.new(key, self.digest.encode(), hashlib.sha256).hexdigest()
        return self.signature is not None and hmac.compare_digest(expected, self.signature)

    def as_json(self) -> dict[str, Any]:
        fields = (*HEAD_FIELDS, *ERASURE_FIELDS, *(V2_FIELDS if self.version >= 2 else ()))
        out = {f: getattr(self, f) for f in fields}
        out["legacy"] = list(self.legacy) if self.legacy is not None else None
        return {**out, "digest": self.digest, "signature": self.signature}

    @classmethod
    def from_json(cls, data: object) -> Head:
        """A head from :meth:`as_json` (the digest, when given, must match), or :class:`InvalidInputError`."""
        if isinstance(data, Head):
            return data
        if not isinstance(data, Mapping):
            raise InvalidInputError("a head must be a JSON object as Memory.head() returns it")
        try:
            legacy = data.get("legacy")
            head = cls(
                history=str(data["history"]), epoch=str(data["epoch"]), notes=_count(data["notes"]),
                note=str(data["note"]), steps=_count(data["steps"]), step=str(data["step"]),
                requests=_count(data["requests"]), request=str(data["request"]), state=str(data["state"]),
                legacy=None if legacy is None else tuple(_count(x) for x in legacy),
                signature=None if data.get("signature") is None else str(data["signature"]),
                erasures=_count(data.get("erasures", 0)), erasure=str(data.get("erasure", "")),
                version=_count(data.get("version", 1)), row=str(data.get("row", "")),
                merges=_count(data.get("merges", 0)), merge=str(data.get("merge", "")),
            )  # fmt: skip
            if head.version not in (1, HEAD_VERSION):
                raise ValueError(f"version {head.version} is not a head version this library knows")
        except (KeyError, TypeError, ValueError) as exc:
            fields = ", ".join(HEAD_FIELDS)
            raise InvalidInputError(f"a head must hold {fields} as Memory.head() returns them ({exc})") from None
        if data.get("digest") not in (None, head.digest):
            raise InvalidInputError("the head's digest does not match its fields: it was changed after it was given")
        return head


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not a count")
    return value


def extends(head: Head, kept: Head, digest_at: Any) -> list[str]:
    """Why the history whose current head is ``head`` does not extend ``kept`` (``[]``: it does).
    ``digest_at(chain, n)`` is the stored digest of row ``n`` of ``"notes"``, ``"steps"``,
    ``"requests"`` or ``"erasures"`` (None when there is no such row). An erasure keeps the digests of
    the rows it rewrites, so a history erased in since still extends the head kept before."""
    name = repr(kept.history)
    if kept.epoch == "" and not (kept.notes or kept.steps or kept.requests):
        return []  # kept before anything was written: every history extends it
    if head.epoch != kept.epoch:
        return [f"history {name} is not the one the kept head names: it was dropped and begun again since (epoch)"]
    problems = []
    for chain, count, last in (("notes", kept.notes, kept.note), ("steps", kept.steps, kept.step),
                               ("requests", kept.requests, kept.request),
                               ("erasures", kept.erasures, kept.erasure)):  # fmt: skip
        now = getattr(head, chain)
        if now < count:
            problems.append(
                f"history {name} has {now} {chain} where the kept head had {count}: rows were cut off the end"
                " or rolled back"
            )
        elif count and (digest_at(chain, count - 1) or "") != last:
            problems.append(
                f"the {chain} of history {name} up to the kept head ({count}) are not the ones it named: rewritten"
            )
    if kept.legacy != head.legacy:
        problems.append(f"what history {name} held before digests is not what the kept head says")
    if kept.version >= 2 and head.version >= 2 and kept.row != head.row:  # a history's row is written once
        problems.append(
            f"the row of history {name} (its kind and meta: an agent's task, system prompt, settings) is not the"
            " one the kept head named: changed"
        )
    return problems


def chain_problems(
    notes: Sequence[Note],
    previous: str = "",
    first_seq: int = 0,
    *,
    legacy: int | None = None,
    erased: Mapping[int, tuple[str, str]] | None = None,
) -> list[str]:
    """Problems of notes read back in order (numbering gaps and digest mismatches); ``previous`` is the
    digest of the note before ``notes[0]``, ``first_seq`` the seq it must have. A note may lack a digest
    only below ``legacy`` (the notes written before digests; None: a store that does not say, where the
    chain starts again after such a note). ``erased``: for each note an erasure rewrote, the chain digest
    it kept and the digest of what it left (:func:`erased_notes`)."""
    erased = erased or {}
    problems: list[str] = []
    expected = first_seq
    for note in notes:
        if note.seq != expected:
            problems.append(f"note {note.seq} ({note.unit_id!r}) follows note {expected - 1}: seqs missing")
        expected = note.seq + 1
        if note.digest is None and legacy is not None and note.seq >= legacy:
            problems.append(
                f"note {note.seq} ({note.unit_id!r}) has no digest, though every note from {legacy} on was written"
                " with one: its digest was removed"
            )
        rewrite = erased.get(note.seq)
        if rewrite is not None and (note.digest or "") != rewrite[0]:
            problems.append(
                f"note {note.seq} ({note.unit_id!r}) does not keep the digest its erasure recorded: changed after it"
            )
        problem = note_problem(note, previous, rewrite[1] if rewrite is not None else None)
        if problem:
            problems.append(problem)
        previous = note.digest or ""
    return problems


def erased_rows(erasures: Iterable[Sequence[Any]], part: int) -> dict[int, tuple[str, str]]:
    """For each row the erasures rewrote (``part``: 6 notes, 7 steps, of rows as ``SELECT n, kind, ids,
    reason, at, digest, notes, steps`` reads them, oldest first): the digest its chain keeps and the digest
    of what the last erasure left in it."""
    out: dict[int, tuple[str, str]] = {}
    for row in erasures:
        for n, kept, now in json.loads(row[part]):
            out[int(n)] = (str(kept), str(now))
    return out
