"""The timeline of records and its merges (SPEC section 3).

The timeline shows every past unit's record in time order. While it is longer than its target,
the oldest run of up to four entries of the lowest level is replaced by one merged record (level 1
merges records; level 2+ merges merged records, the SPEC's decision). Groups are aligned from the
oldest entry, so later calls meet the same spans and reuse the merged records, which are written
once (the only store write a render may make) and cached.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from flexamem.config import Settings
from flexamem.errors import ConcurrentWriteError, HistoryDroppedError, StoreFullError, StoreUnavailableError
from flexamem.history import History
from flexamem.notes import LLMCall
from flexamem.render import format as fmt
from flexamem.store.base import MergedRecord, Store
from flexamem.tokens import TokenCounter
from flexamem.write.records import RecordWriter, RuleWriter

GROUP = 4


class MergeNeeded(Exception):
    """A render needs a merged record that nobody stored yet, and the writer is a model: the caller
    writes it outside the history's lock (:meth:`Timeline.write_merge`) and renders again, so no lock
    is held while a model thinks. Never reaches users (``HistoryCore.render`` handles it)."""

    def __init__(self, group: Sequence[Entry]) -> None:
        super().__init__(f"a merged record of {group[0].first}..{group[-1].last} is needed")
        self.group = tuple(group)


@dataclass(frozen=True)
class Entry:
    """One timeline line: a note's record (level 0) or a merged record over ``first..last``."""

    first: int
    last: int
    level: int
    line: str
    tokens: int  # tokens of ``line`` (a newline separator adds one more when joined)

    @property
    def merged(self) -> bool:
        return self.level > 0

    def covers(self, seq: int) -> bool:
        return self.first <= seq <= self.last


def total_tokens(entries: Sequence[Entry]) -> int:
    """||T||: the entries' tokens plus one newline between lines."""
    return sum(e.tokens for e in entries) + max(len(entries) - 1, 0)


class Timeline:
    """Record lines and merged records of one history, cached across calls."""

    def __init__(
        self,
        history: History,
        store: Store,
        history_id: str,
        writer: RecordWriter,
        counter: TokenCounter,
        *,
        epoch: Callable[[], str | None] = lambda: None,
        erasures: Callable[[], int | None] = lambda: None,
        merged_words: int = Settings.merged_words,
    ):
        self.merged_words = merged_words  # the rule-written fallback's length (a reader that may not write)
        self.history = history
        self.epoch = epoch  # the history's epoch as its view last read it: merges are stored only under it
        self.erasures = erasures  # and its erasures: none stored once another erasure landed (its words)
        self.store = store
        self.history_id = history_id
        self.writer = writer
        self.counter = counter
        self._records: list[Entry] = []
        self._merged: dict[tuple[int, int, int], Entry] = {}
        self._stored: dict[tuple[int, int, int], MergedRecord] | None = None
        self._plans: dict[object, MergePlan] = {}
        self._base: list[Entry] | None = None  # records(n) of the last n
        self._pending: list[MergedRecord] = []  # merged by rule and shown, not stored yet (see flush)
        self.merges_written = 0

    def record(self, seq: int) -> Entry:
        """The level-0 entry of note ``seq`` (line and tokens computed once)."""
        while len(self._records) <= seq:
            note = self.history.notes[len(self._records)]
            line = fmt.record_line(note)
            self._records.append(Entry(note.seq, note.seq, 0, line, self.counter.count(line)))
        return self._records[seq]

    def records(self, n: int) -> list[Entry]:
        """The level-0 entries of notes ``0..n-1``: one shared list per ``n`` (callers copy, never mutate)."""
        if self._base is None or len(self._base) != n:
            self._base = [self.record(i) for i in range(n)]
        return self._base

    def merge(self, group: Sequence[Entry]) -> Entry:
        """The merged entry for consecutive entries of one level (from cache, store or writer)."""
        first, last, level = group[0].first, group[-1].last, group[0].level + 1
        key = (first, last, level)
        entry = self._merged.get(key)
        if entry is not None:
            return entry
        if self._stored is None:
            self._stored = {(m.first, m.last, m.level): m for m in self.store.load_merged(self.history_id)}
        stored = self._stored.get(key)
        if stored is None and not isinstance(self.writer, RuleWriter) and not self.store.read_only:
            stored = self.store.get_merged(self.history_id, first, last, level)  # another process paid for it?
            if stored is None:
                raise MergeNeeded(group)  # a model call: made by the caller, outside the history's lock
        if stored is None:  # by rule, kept for :meth:`flush` (a reader that may not write keeps it in memory)
            stored, _ = self._merge_of(group)
            if not self.store.read_only:
                self._pending.append(stored)
        self._stored[key] = stored
        notes = self.history.notes
        line = fmt.merged_line(notes[first], notes[last], stored.text)
        entry = Entry(first, last, level, line, self.counter.count(line))
        self._merged[key] = entry
        return entry

    def write_merge(self, group: Sequence[Entry]) -> None:
        """Write (and store) the merged record a :class:`MergeNeeded` asked for; called without the
        history's lock, so renders and writes of the history go on while the model writes it."""
        if self._stored is None:
            self._stored = {(m.first, m.last, m.level): m for m in self.store.load_merged(self.history_id)}
        self._stored[(group[0].first, group[-1].last, group[0].level + 1)] = self._write_merge(group)

    def _merge_of(self, group: Sequence[Entry]) -> tuple[MergedRecord, list[LLMCall]]:
        """A merged record of ``group`` by the writer (by rule for a reader that may not write) and the
        model calls that wrote it."""
        first, last, level = group[0].first, group[-1].last, group[0].level + 1
        texts = [self._text_of(e) for e in group]
        fallback = RuleWriter(merged_words=self.merged_words)
        writer = fallback if self.store.read_only and not isinstance(self.writer, RuleWriter) else self.writer
        written = writer.merge_records(texts)
        merged = MergedRecord(
            first, last, level, written.text, self.counter.count(written.text), written.writer, written.flagged
        )
        return merged, [dataclasses.replace(c, seq=last) for c in written.calls]

    def _write_merge(self, group: Sequence[Entry]) -> MergedRecord:
        """A merged record of ``group`` by the writer, stored once (another process may have stored the
        same span first: theirs is kept and returned)."""
        stored, calls = self._merge_of(group)
        if not self.store.read_only:  # a reader that may not write keeps its rule-written merge in memory
            kept = self._store_merges([stored], calls)
            stored = kept[0] if kept else stored
        return stored

    def _store_merges(self, merged: list[MergedRecord], calls: Sequence[LLMCall] = ()) -> list[MergedRecord] | None:
        """Store ``merged`` in one transaction (:meth:`Store.put_merged_many`): what is stored for each span,
        or None when nothing could be (the history dropped or erased in meanwhile: shown once by a render
        that began before, never stored; a full disk or a lost database: the cache is lost, not the render)."""
        try:
            kept = self.store.put_merged_many(
                self.history_id, merged, calls, epoch=self.epoch(), erasures=self.erasures()
            )
        except (HistoryDroppedError, ConcurrentWriteError, StoreFullError, StoreUnavailableError):
            return None
        self.merges_written += len(kept)
        return kept

    def flush(self) -> bool:
        """Store the merged records written by rule since the last flush (a render's: one transaction,
        not one per merge). False when another writer had stored a different record for one of their
        spans: this timeline's merges are forgotten, to be read again from the store by a new render."""
        if not self._pending:
            return True
        pending, self._pending = self._pending, []
        kept = self._store_merges(pending)
        if kept is None or kept == pending:
            return True
        self._stored, self._base = None, None
        self._merged.clear()
        self._plans.clear()
        return False

    def restore(self, spans: Sequence[Sequence[int]], n: int) -> list[Entry]:
        """Entries for persisted merged spans ``(first, last, level)``, then records up to ``n``."""
        entries: list[Entry] = []
        for first, last, level in spans:
            if level == 0:
                entries.append(self.record(first))
                continue
            if self._stored is None:
                self._stored = {(m.first, m.last, m.level): m for m in self.store.load_merged(self.history_id)}
            stored = self._stored.get((first, last, level))
            if stored is None:  # its merged record was never stored (a full disk kept it in memory only):
                entries += [self.record(i) for i in range(first, last + 1)]  # its records; merged again when fit
                continue
            entry = self._merged.get((first, last, level))
            if entry is None:  # counted once: the line of a stored merge never changes
                notes = self.history.notes
                line = fmt.merged_line(notes[first], notes[last], stored.text)
                entry = self._merged[(first, last, level)] = Entry(first, last, level, line, self.counter.count(line))
            entries.append(entry)
        start = entries[-1].last + 1 if entries else 0
        return entries + [self.record(i) for i in range(start, n)]

    def _text_of(self, entry: Entry) -> str:
        if entry.level == 0:
            return self.history.notes[entry.first].record
        assert self._stored is not None
        return self._stored[(entry.first, entry.last, entry.level)].text

    def fit(self, entries: list[Entry], target: float) -> list[Entry]:
        """Merge oldest-first until ``||T|| <= target`` or nothing is left to merge.

        The sequence of merges from a given timeline does not depend on the target, so it is planned
        once per timeline (and extended on demand); a call replays the prefix its target needs.
        """
        key: object = (
            ("records", len(entries)) if entries is self._base else tuple((e.first, e.last, e.level) for e in entries)
        )
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) > 64:
                self._plans.clear()
            plan = self._plans[key] = MergePlan(list(entries), [total_tokens(entries)], [], level_counts(entries))
        while plan.totals[-1] > target and not plan.exhausted:
            group = plan.next_group()
            if group is None:
                plan.exhausted = True
                break
            start, stop = group
            merged = self.merge(plan.state[start:stop])
            saved = sum(e.tokens for e in plan.state[start:stop]) + (stop - start - 1) - merged.tokens
            plan.replace(start, stop, merged)
            plan.ops.append((start, stop, merged))
            plan.totals.append(plan.totals[-1] - saved)
        steps = next((k for k, t in enumerate(plan.totals) if t <= target), len(plan.totals) - 1)
        done = plan.results.get(steps)
        if done is None:
            done = list(entries)
            for start, stop, merged in plan.ops[:steps]:
                done[start:stop] = [merged]
            plan.results[steps] = done
        return list(done)


@dataclass
class MergePlan:
    """The merges planned from one timeline: state after all of them, totals after each."""

    state: list[Entry]
    totals: list[int]
    ops: list[tuple[int, int, Entry]]
    counts: dict[int, int] | None  # entries per level while no level rises from oldest to newest
    exhausted: bool = False
    results: dict[int, list[Entry]] = field(default_factory=dict)  # the timeline after k merges

    def next_group(self) -> tuple[int, int] | None:
        """:func:`next_group` of the state. A timeline whose levels never rise from oldest to newest (every
        timeline merged oldest-first is one) holds each level in one run, after the higher ones, so
        the group is found from the count per level, not by reading every entry: after a write to a
        history of a million tokens, its ~460 merges are planned again in a few ms, not ~40 ms."""
        if self.counts is None:
            return next_group(self.state)
        for level in sorted(self.counts):
            if self.counts[level] >= 2:
                start = sum(n for higher, n in self.counts.items() if higher > level)
                return start, start + min(GROUP, self.counts[level])
        return None

    def replace(self, start: int, stop: int, merged: Entry) -> None:
        """Put ``merged`` in place of the state's entries ``start:stop`` (one level below it). The levels
        still never rise: the entries before ``start`` are all of a higher level than those merged."""
        if self.counts is not None:
            level = self.state[start].level
            self.counts[level] -= stop - start
            if not self.counts[level]:
                del self.counts[level]
            self.counts[merged.level] = self.counts.get(merged.level, 0) + 1
        self.state[start:stop] = [merged]


def level_counts(entries: Sequence[Entry]) -> dict[int, int] | None:
    """Entries per level, when no level rises from the oldest entry to the newest; else None (an agent's
    timeline restored with a merged record that was never stored holds that span's records in its
    place, :meth:`Timeline.restore`: such a plan reads its entries one by one, by :func:`next_group`)."""
    counts: dict[int, int] = {}
    for i, entry in enumerate(entries):
        if i and entry.level > entries[i - 1].level:
            return None
        counts[entry.level] = counts.get(entry.level, 0) + 1
    return counts


def next_group(entries: Sequence[Entry]) -> tuple[int, int] | None:
    """Slice of the oldest run (up to four) of the lowest level holding two or more entries."""
    levels: dict[int, list[int]] = {}
    for i, e in enumerate(entries):
        levels.setdefault(e.level, []).append(i)
    for level in sorted(levels):
        idx = levels[level]
        if len(idx) < 2:
            continue
        start = idx[0]
        stop = start
        while stop < len(entries) and stop - start < GROUP and entries[stop].level == level:
            stop += 1
        if stop - start >= 2:
            return start, stop
    return None


def hide_oldest(entries: list[Entry], target: float) -> tuple[list[Entry], list[Entry]]:
    """Drop the oldest entries (for this call only) until ``||T|| <= target``; returns (kept, hidden)."""
    total, drop = total_tokens(entries), 0
    while drop < len(entries) and total > target:
        total -= entries[drop].tokens + (1 if drop < len(entries) - 1 else 0)
        drop += 1
    return list(entries[drop:]), list(entries[:drop])
