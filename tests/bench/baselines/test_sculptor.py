"""Sculptor: the fragments and their tools, and the method in both harnesses with the stand-in model."""

import pytest

import flexamem as fm
from flexamem.llm.client import Completion, ToolCall
from flexamem_bench.agent_harness import replay
from flexamem_bench.baselines import Ledger, StandInModel
from flexamem_bench.baselines.reader import sculptor
from flexamem_bench.baselines.sculptor import Fragments, schema_tokens, with_tools
from tests.helpers import SESSIONS, context, trajectory

REFUND = "Which card gets the hotel refund?"


def fragments() -> tuple[Fragments, Ledger]:
    ctx = context()
    frags = Fragments(ctx.mem.counter)
    frags.add(ctx.mem.notes())
    return frags, Ledger(StandInModel())


def call(name: str, **arguments: str) -> ToolCall:
    return ToolCall("c", name, arguments)


def states(frags: Fragments) -> list[str]:
    return [f.state for f in frags.items]


def test_fit_folds_the_oldest_first_and_never_exceeds() -> None:
    frags, _ = fragments()
    one = frags.cost(frags.items[0])
    for allowance in (10_000, 4 * one, 2 * one, 120, 5):
        shown = frags.fit(allowance)
        assert frags.counter.count("\n".join(line for _, line in shown)) <= allowance
        s = states(frags)
        assert s == sorted(s, key=lambda x: x != "folded")  # folded ones are the oldest
    assert states(frags) == ["folded"] * len(SESSIONS)


def test_restore_makes_room_or_is_refused() -> None:
    frags, ledger = fragments()
    one = frags.cost(frags.items[0])
    room = 3 * one
    frags.fit(room)
    assert states(frags)[2] == "folded"
    said = frags.apply(call("restore_fragment", fragment_id="u3"), ledger, room)
    assert said.startswith("u3 restored") and states(frags)[2] == "full"
    assert frags.counter.count("\n".join(line for _, line in frags.fit(room))) <= room
    before = states(frags)
    said = frags.apply(call("restore_fragment", fragment_id="u1"), ledger, 50)  # cannot fit even alone
    assert "does not fit" in said and states(frags) == before
    assert "no fragment" in frags.apply(call("fold_fragment", fragment_id="u99"), ledger, room)
    assert "no tool" in frags.apply(call("delete_everything", fragment_id="u1"), ledger, room)


def test_fold_and_summarize_and_the_summary_is_written_once() -> None:
    frags, ledger = fragments()
    assert frags.apply(call("fold_fragment", fragment_id="u2"), ledger, 10_000) == "u2 folded"
    assert "· folded, " in frags.line(frags.items[1])
    assert frags.apply(call("summarize_fragment", fragment_id="3"), ledger, 10_000) == "u3 summarized"
    assert "· summary] Ana: The hotel refund of 212 euros" in frags.line(frags.items[2])
    calls = ledger.calls["read"]
    frags.apply(call("restore_fragment", fragment_id="u3"), ledger, 10_000)
    frags.apply(call("summarize_fragment", fragment_id="u3"), ledger, 10_000)
    assert ledger.calls["read"] == calls and ledger.tokens["read"] > 0  # kept from the first time


def test_search_reaches_folded_fragments() -> None:
    frags, ledger = fragments()
    frags.fit(0)
    found = frags.apply(call("search_context", query="Visa refund"), ledger, 10_000)
    assert found.startswith("u3: Ana: The hotel refund of 212 euros goes to my Visa ending 4417.")
    listed = frags.apply(ToolCall("c", "search_context", {"query": ["Visa", "refund"]}), ledger, 10_000)
    assert listed == found  # a list of phrases is searched as their words
    assert "no fragment mentions" in frags.search("zeppelin")
    assert frags.search("the and of") == "nothing to search for"


def test_the_model_restores_what_the_question_needs() -> None:
    ctx = context()
    counter = ctx.mem.counter
    budget = 900  # two sessions fit in full beside the schemas: the refund (u3) is folded at first
    out = sculptor(ctx, REFUND, budget)
    assert "4417" in out.text and out.llm_tokens["read"] > 0
    assert out.composition["tool schemas"] == schema_tokens(counter)
    assert "· summary]" in out.text or "· folded, " in out.text
    # the same view without the model's tool calls does not hold the answer
    frags = Fragments(counter)
    frags.add(ctx.mem.notes())
    allowance = ctx.allowance(budget, REFUND)
    room, _ = with_tools(allowance, counter)
    assert "4417" not in "\n".join(line for _, line in frags.fit(room))


def test_a_model_without_tools_is_refused() -> None:
    class Words:
        name = "words-only"

        def complete(self, messages: object, *, max_tokens: int = 512, json_mode: bool = False) -> Completion:
            return Completion("DONE", self.name, 1, 1)

        async def acomplete(self, messages: object, *, max_tokens: int = 512, json_mode: bool = False) -> Completion:
            return self.complete(messages)

    ctx = context()
    ctx.extra["baseline_model"] = Words()
    with pytest.raises(fm.FlexaMemError, match="takes tools; words-only"):
        sculptor(ctx, REFUND, 2000)


def test_agent_fragments_are_the_units_that_left_the_window() -> None:
    shown_forms: set[str] = set()
    last = None
    for _, ctx, m, _ in replay(trajectory(), "sculptor", 2500, StandInModel()):
        if ctx is None:
            continue
        text = "\n".join(str(x.get("content") or "") for x in ctx.messages)
        shown_forms |= {form for form in ("· summary]", "· folded, ", "· raw]") if form in text}
        assert ctx.tokens <= m.session.core.ceiling(2500)
        last = m
    assert last is not None and {"· folded, ", "· raw]"} <= shown_forms
    frags = last.fragments  # type: ignore[attr-defined]
    assert [f.note.seq for f in frags.items] == list(range(last.window()[1]))  # every unit that left the window
    assert last.ledger.tokens["read"] > 0 and last.ledger.tokens["build"] == 0  # type: ignore[attr-defined]
