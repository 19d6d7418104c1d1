"""The checks of stored rows a read and ``verify()`` share (merged records, steps, erasures, requests):
each says what is wrong with a row as read back, against the digests it was written with. Every SQL
store and the importer use them; none of them reads or writes the database itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from flexamem.digests import (
    erasure_digest,
    merged_digest,
    request_digest,
    rewritten_step_digest,
    step_digest,
    version_of,
)
from flexamem.errors import StoreCorruptError
from flexamem.store.base import Erasure, MergedRecord


def merged_problem(history: str, r: Sequence[Any]) -> str | None:
    """What is wrong with a ``MERGED_COLUMNS`` row (None: nothing, or a row written before digests)."""
    if r[7] is None:
        return None
    try:
        ok = merged_digest(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]), r[8] or "") == r[7]
    except (TypeError, ValueError):
        ok = False
    if ok:
        return None
    return f"merged record of notes {r[0]}..{r[1]} (level {r[2]}) of {history!r} does not match its digest"


def read_merged(history: str, r: Sequence[Any], legacy: int = 0) -> MergedRecord:
    """A ``MERGED_COLUMNS`` row read back; one without a digest in a history that held no merged record
    before digests (``legacy``: how many it held) is refused like a damaged one."""
    if r[7] is None and not legacy:
        raise StoreCorruptError(
            f"merged record of notes {r[0]}..{r[1]} of {history!r} has no digest, though every merged record"
            " of it was written with one (Memory.verify() lists every damaged row)"
        )
    problem = merged_problem(history, r)
    if problem:
        raise StoreCorruptError(f"{problem}: changed after writing (Memory.verify() lists every damaged row)")
    return MergedRecord(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]))


def step_problem(
    history: str, row: Sequence[Any], previous: str, erased: Mapping[int, tuple[str, str]] | None = None
) -> str | None:
    """What is wrong with one ``(n, step_id, data, digest, salt)`` row after a step whose digest is
    ``previous`` (None: nothing, or a step written before digests); ``erased`` as :func:`steps_problems`."""
    n, step_id, data, digest, salt = row
    rewrite = (erased or {}).get(n)
    if rewrite is not None:
        if (digest or "") != rewrite[0] or rewritten_step_digest(n, step_id, data, salt, rewrite[0]) != rewrite[1]:
            return f"step {n} of {history!r} does not match what the erasure that rewrote it left"
        return None
    if digest is not None and step_digest(previous, n, step_id, data, salt if version_of(digest) == 3 else None) != (
        digest
    ):
        return f"step {n} of {history!r} does not match its digest: changed after writing"
    return None


def steps_problems(
    history: str,
    rows: Sequence[Sequence[Any]],
    legacy: int | None = None,
    erased: Mapping[int, tuple[str, str]] | None = None,
) -> list[str]:
    """Problems of ``(n, step_id, data, digest, salt)`` rows in order: a gap, a step that does not match
    its digest (chained; it starts again after a step written before digests), or a step from ``legacy``
    on (the steps written before digests) without one. ``erased``: for each step an erasure rewrote, the
    digest its chain keeps and the digest of what it left."""
    problems, previous = [], ""
    for i, row in enumerate(rows):
        n, digest = row[0], row[3]
        if n != i:
            problems.append(f"step {n} of {history!r} follows step {i - 1}: steps missing")
        if digest is None and legacy is not None and n >= legacy and n not in (erased or {}):
            problems.append(f"step {n} of {history!r} has no digest, though every step from {legacy} on has one")
        problem = step_problem(history, row, previous, erased)
        if problem:
            problems.append(problem)
        previous = digest or ""
    return problems


def erasures_problems(history: str, rows: Sequence[Sequence[Any]]) -> list[str]:
    """Problems of erasure rows (``ERASURE_COLUMNS``) in order: a gap, or a row that does not match its
    digest (chained over the erasure before it)."""
    problems, previous = [], ""
    for i, (n, kind, ids, reason, at, digest, notes, steps) in enumerate(rows):
        if n != i:
            problems.append(f"erasure {n} of {history!r} follows erasure {i - 1}: erasures missing")
        if erasure_digest(previous, n, kind, ids, reason, at, notes, steps) != digest:
            problems.append(f"erasure {n} of {history!r} does not match its digest: changed after writing")
        previous = digest or ""
    return problems


def erasure_from(row: Sequence[Any]) -> Erasure:
    n, kind, ids, reason, at, digest, notes, steps = row
    return Erasure(int(n), str(kind), tuple(json.loads(ids)), str(reason), float(at),
                   tuple(int(r[0]) for r in json.loads(notes)), tuple(int(r[0]) + 1 for r in json.loads(steps)),
                   str(digest))  # fmt: skip


def requests_problems(
    history: str, rows: Sequence[Sequence[Any]], last_digest: Mapping[str, str], legacy: int | None
) -> list[str]:
    """Problems of ``(n, request_id, units, body, digest)`` rows in order: a gap, a row without a digest
    from ``legacy`` on, a row that does not match its digest, or one naming notes the history lacks.
    ``last_digest`` maps each unit id to its note's digest."""
    problems, previous = [], ""
    for i, (n, rid, units, body, digest) in enumerate(rows):
        where = f"request {rid!r} of {history!r}"
        if n != i:
            problems.append(f"{where} follows request {i - 1}: requests missing")
        try:
            names = [str(u) for u in json.loads(units)]
        except (TypeError, ValueError):
            names = None
        if names is None or any(u not in last_digest for u in names):
            problems.append(f"{where} names notes the history does not hold: the idempotency map was changed")
        elif digest is None:
            if legacy is None or n >= legacy:
                problems.append(f"{where} has no digest, though it was written with one: its digest was removed")
        elif request_digest(previous, n, rid, units, body or "", last_digest[names[-1]] if names else "") != digest:
            problems.append(f"{where} does not match its digest: the idempotency map was changed after writing")
        previous = digest or ""
    return problems
