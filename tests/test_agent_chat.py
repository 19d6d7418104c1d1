"""Every agent context is a message list the OpenAI chat API accepts (tool calls paired with their
replies), and never over the ceiling, however steps split calls from replies and however small the budget."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flexamem as fm
from flexamem.chat import chat_problems, chat_safe

WORDS = st.sampled_from(
    [
        "order",
        "4417",
        "refund",
        "seat",
        "12C",
        "Lisbon",
        "baggage",
        "the",
        "a",
        "flight",
        "status",
        "delayed",
        "cancel",
        "ok",
    ]
)
TEXT = st.lists(WORDS, min_size=0, max_size=400).map(" ".join)


def call(i: int, args: str) -> dict:  # type: ignore[type-arg]
    return {"id": f"call_{i}", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"q": args})}}


@st.composite
def episodes(draw):  # type: ignore[no-untyped-def]
    """Steps of chat messages: assistant calls, tool replies (sometimes in the next step, or missing),
    plain turns."""
    steps, n = [], 0
    for _ in range(draw(st.integers(1, 14))):
        msgs = []
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["call", "reply", "user", "assistant"]))
            if kind == "call":
                calls = [call(n + j, draw(TEXT)) for j in range(draw(st.integers(1, 2)))]
                n += len(calls)
                msgs.append({"role": "assistant", "content": draw(st.one_of(st.none(), TEXT)), "tool_calls": calls})
            elif kind == "reply" and n:
                msgs.append(
                    {"role": "tool", "tool_call_id": f"call_{draw(st.integers(0, n - 1))}", "content": draw(TEXT)}
                )
            else:
                msgs.append({"role": "user" if kind == "user" else "assistant", "content": draw(TEXT) or "ok"})
        steps.append(msgs)
    return steps


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(steps=episodes(), budget=st.integers(260, 3000), mode=st.sampled_from(["auto", "units", "pieces"]))
def test_every_context_is_valid_chat_and_within_the_ceiling(steps, budget, mode) -> None:  # type: ignore[no-untyped-def]
    agent = fm.Memory(":memory:").agent(task="Find order 4417 and refund it.", budget=budget, system="You are a clerk.")
    for msgs in steps:
        agent.step(action=json.dumps(msgs)[:200], observation="", messages=msgs)
        try:
            ctx = agent.context(mode=mode)
        except fm.BudgetError:
            continue
        assert chat_problems(ctx.messages) == [], ctx.messages
        assert ctx.tokens <= ctx.ceiling


def test_chat_safe_keeps_every_word_and_leaves_valid_lists_alone() -> None:
    a = {"role": "assistant", "content": None, "tool_calls": [call(1, "x")]}
    reply = {"role": "tool", "tool_call_id": "call_1", "content": "42 seats"}
    valid = [{"role": "user", "content": "hi"}, a, reply]
    assert chat_safe(valid) == valid and all(x is y for x, y in zip(chat_safe(valid), valid, strict=True))
    orphan = chat_safe([reply, {"role": "user", "content": "next"}])
    assert orphan[0] == {"role": "user", "content": "[tool result call_1]\n42 seats"}
    unanswered = chat_safe([a, {"role": "user", "content": "next"}])
    assert unanswered[0]["content"] == '[tool call call_1] lookup({"q": "x"})' and "tool_calls" not in unanswered[0]
    assert chat_problems(orphan) == chat_problems(unanswered) == []


def test_a_cut_never_keeps_a_reply_without_its_call() -> None:
    """The issue's reproducer: the newest step alone does not fit and holds a call with its reply."""
    big = " ".join(["flight 4417 delayed"] * 900)
    msgs = [
        {"role": "assistant", "content": "checking", "tool_calls": [call(7, big)]},
        {"role": "tool", "tool_call_id": "call_7", "content": big},
    ]
    agent = fm.Memory(":memory:").agent(task="status of 4417", budget=600)
    agent.step(action="lookup", messages=msgs)
    ctx = agent.context()
    assert ctx.cut and ctx.tokens <= ctx.ceiling
    assert chat_problems(ctx.messages) == []
    assert any("tokens cut to fit the budget]" in json.dumps(m) for m in ctx.messages)
