"""Sculptor (Li et al., 2026): the model manages its own context through tools.

Every unit is a *fragment* shown in one of three forms: ``full`` (its raw block), ``summary`` (a short
summary the model had written; written once per unit and kept) or ``folded`` (a one-line stub: label,
time, size and first words). Before each use of the memory (a question, or an agent call) the model
is shown the fragments with four tools (:data:`TOOLS`: restore, fold, summarize, search) and may call
them for up to :data:`ROUNDS` rounds; what it leaves is the memory. The tool schemas are counted
against the budget (they sit in the model's context in Sculptor), and the view never exceeds what is
left: a restore that cannot fit folds the oldest other fragments first and is refused when the
fragment alone is too big; new fragments arrive full and the oldest are folded to make room.

Each round is one fresh model call (the view as it now is, what was done so far, the goal), so every
call the method makes stays within the budget too. All of it is read-time cost (``ledger`` phase
``read``); nothing is built ahead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from flexamem import Note
from flexamem.llm.client import ToolCall
from flexamem.render import format as fmt
from flexamem.text import content_words
from flexamem.tokens import TokenCounter
from flexamem_bench.baselines import prompts
from flexamem_bench.baselines.ledger import Ledger

ROUNDS = 3  # model calls per use of the memory (guess)
MAX_CALLS = 4  # tool calls taken from one answer (small models repeat themselves)
SUMMARY_WORDS = 60
STUB_WORDS = 8
SEARCH_HITS = 3


def _tool(name: str, description: str, arg: str, arg_description: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string", "description": arg_description}},
                "required": [arg],
            },
        },
    }


_ID = "the fragment's id, e.g. u3"
TOOLS: list[dict[str, Any]] = [
    _tool("restore_fragment", "Show a folded or summarized fragment in full again.", "fragment_id", _ID),
    _tool("fold_fragment", "Fold a fragment you do not need: only a one-line stub stays.", "fragment_id", _ID),
    _tool("summarize_fragment", "Replace a fragment by a short summary of it.", "fragment_id", _ID),
    _tool(
        "search_context",
        "Find the fragments (folded ones too) whose text contains these words; gives their ids and a matching line.",
        "query",
        "words to look for",
    ),
]


def schema_tokens(counter: TokenCounter) -> int:
    """What the tool schemas cost in the model's context (counted against the budget)."""
    return counter.count(json.dumps(TOOLS, ensure_ascii=False))


def with_tools(allowance: int, counter: TokenCounter) -> tuple[int, int]:
    """``(room for the fragments, tokens of the schemas)``: the schemas are taken out of the allowance,
    unless they would take more than half of it; then Sculptor runs without tools (schemas 0: the
    default view, no model call)."""
    schemas = schema_tokens(counter)
    return (allowance - schemas, schemas) if schemas <= allowance // 2 else (allowance, 0)


@dataclass
class Fragment:
    note: Note
    state: str = "full"  # full | summary | folded


class Fragments:
    """The fragments of one history in time order; ``summaries`` (unit position -> text) may be shared
    by several views of the same history, so a summary is written once."""

    def __init__(self, counter: TokenCounter, summaries: dict[int, str] | None = None) -> None:
        self.counter = counter
        self.summaries = summaries if summaries is not None else {}
        self.items: list[Fragment] = []
        self.by_seq: dict[int, Fragment] = {}
        self._cost: dict[tuple[int, str], int] = {}

    def add(self, notes: Iterable[Note]) -> None:
        for note in notes:
            self.items.append(Fragment(note))
            self.by_seq[note.seq] = self.items[-1]

    def line(self, f: Fragment) -> str:
        n = f.note
        if f.state == "full":
            return fmt.raw_block(n)
        if f.state == "summary":
            return f"[{n.label} · {fmt.when(n)} · summary] {self.summaries[n.seq]}"
        first = " ".join(n.raw.split()[:STUB_WORDS])
        return f"[{n.label} · {fmt.when(n)} · folded, {n.raw_tokens} tokens] {first} …"

    def cost(self, f: Fragment) -> int:
        key = (f.note.seq, f.state)
        if key not in self._cost:
            self._cost[key] = self.counter.count(self.line(f)) + 1
        return self._cost[key]

    def fit(self, allowance: int, keep: int | None = None) -> list[tuple[int, str]]:
        """Fold the oldest full or summarized fragments (never ``keep``) until the view fits in
        ``allowance``; when even the stubs do not, the oldest lines are left out. ``(seq, line)`` pairs."""
        used = sum(self.cost(f) for f in self.items)
        for f in self.items:
            if used <= allowance:
                break
            if f.state != "folded" and f.note.seq != keep:
                before = self.cost(f)
                f.state = "folded"
                used += self.cost(f) - before
        return self.view(allowance)

    def view(self, allowance: int) -> list[tuple[int, str]]:
        """The fragments as they are (nothing folded), the oldest lines left out while over ``allowance``."""
        shown = [(f.note.seq, self.line(f)) for f in self.items]
        while shown and self.counter.count("\n".join(line for _, line in shown)) > allowance:
            shown = shown[1:]
        return shown

    def find(self, fragment_id: object) -> Fragment | None:
        m = re.fullmatch(r"\s*[uUfF]?(\d+)\s*", str(fragment_id))
        return self.by_seq.get(int(m.group(1)) - 1) if m else None

    def apply(self, call: ToolCall, ledger: Ledger, allowance: int) -> str:
        """Carry out one tool call; the result the model is told."""
        if call.name == "search_context":
            query = call.arguments.get("query", "")  # small models also send a list of phrases
            return self.search(" ".join(map(str, query)) if isinstance(query, list) else str(query))
        f = self.find(call.arguments.get("fragment_id"))
        if f is None:
            return f"no fragment {call.arguments.get('fragment_id')!r}"
        label = f.note.label
        if call.name == "fold_fragment":
            f.state = "folded"
            return f"{label} folded"
        if call.name == "summarize_fragment":
            if f.note.seq not in self.summaries:
                text = ledger.ask(prompts.FRAGMENT_SUMMARY.format(words=SUMMARY_WORDS, raw=f.note.raw), "read")
                if not text:
                    return f"{label}: no summary was written"
                ids = self.counter.encode(" ".join(text.split()))[: 2 * SUMMARY_WORDS]
                self.summaries[f.note.seq] = self.counter.decode(ids).rstrip("\ufffd")
            f.state = "summary"
            return f"{label} summarized"
        if call.name == "restore_fragment":
            before = f.state
            f.state = "full"
            others = {g.note.seq: g.state for g in self.items}
            shown = {seq for seq, _ in self.fit(allowance, keep=f.note.seq)}
            if f.note.seq not in shown or self.cost(f) > allowance:
                for g in self.items:  # undo: the fragment does not fit even alone
                    g.state = others[g.note.seq]
                f.state = before
                return f"{label} does not fit ({f.note.raw_tokens} tokens; the memory holds {allowance})"
            folded = [g.note.label for g in self.items if others[g.note.seq] != "folded" and g.state == "folded"]
            return f"{label} restored" + (f" (folded {', '.join(folded)} to make room)" if folded else "")
        return f"no tool {call.name!r}"

    def search(self, query: str) -> str:
        """Exact word search over every fragment's raw text: the best few, each with its best line."""
        words = set(content_words(query))
        if not words:
            return "nothing to search for"
        hits = []
        for f in self.items:
            lines = [line for line in f.note.raw.splitlines() if line.strip()]
            scored = [(len(words & set(content_words(line))), line) for line in lines]
            best = max(scored, key=lambda x: x[0], default=(0, ""))
            total = len(words & set(content_words(f.note.raw)))
            if total:
                hits.append((total, best[0], f.note.seq, " ".join(best[1].split()[:25])))
        hits.sort(key=lambda h: (-h[0], -h[1], -h[2]))
        if not hits:
            return f"no fragment mentions {query!r}"
        return " | ".join(f"{self.by_seq[seq].note.label}: {line}" for _, _, seq, line in hits[:SEARCH_HITS])


def manage(fragments: Fragments, ledger: Ledger, goal: str, allowance: int, rounds: int = ROUNDS) -> None:
    """Up to ``rounds`` model calls, each offered :data:`TOOLS` and shown the fragments (fitted to
    ``allowance``), what was done so far and the goal; the calls it asks for are carried out. Stops
    when it asks for none. Each call stays within ``allowance`` too: when the instructions and the
    record of what was done take room, the oldest lines of the view are left out of that call."""
    fragments.fit(allowance)
    done: list[str] = []
    for _ in range(rounds):
        so_far = "\n".join(done[-6:]) or "nothing yet"
        frame = prompts.SCULPT.format(budget=allowance, view="", done=so_far, goal=goal)
        view = "\n".join(line for _, line in fragments.view(allowance - fragments.counter.count(frame)))
        calls = ledger.ask_tools(prompts.SCULPT.format(budget=allowance, view=view, done=so_far, goal=goal), TOOLS)
        if not calls:
            return
        for call in calls[:MAX_CALLS]:
            result = fragments.apply(call, ledger, allowance)
            args = json.dumps(call.arguments, ensure_ascii=False)
            done.append(" ".join(f"{call.name}({args}) -> {result}".split()[:40]))
