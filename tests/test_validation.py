"""Validate before storing: a step or message that could not be rendered again is refused whole, and one
an older version stored anyway renders with its bad parts shown as text (issue 21, item 2)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import flexamem as fm
from flexamem.chat import MAX_DEPTH, chat_problems
from flexamem.digests import step_digest


def nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


BAD_MESSAGES: list[Any] = [
    {"role": "assistant", "content": "x", "tool_calls": 5},
    {"role": "assistant", "content": "x", "tool_calls": 1.5},
    {"role": "assistant", "content": "x", "tool_calls": True},
    {"role": "assistant", "content": "x", "tool_calls": [5]},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": 1.5}]},
    {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": 3, "arguments": "{}"}}]},
    {"role": "assistant", "tool_calls": [{"id": 7, "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": 12}}]},
    {"role": "tool", "content": "r", "tool_call_id": 5},
    {"role": [], "content": "x"},
    {"role": {"a": 1}, "content": "x"},
    {"role": "user", "content": [nested(300)]},
    {"role": "user", "content": [{"type": "text", "text": nested(900)}]},
    {"role": "user", "content": [{"type": "text", "text": "x"}, 5]},
    {"role": "user", "content": "x", "name": 4},
    {"role": "user", "content": "\ud800 lone surrogate"},
    {"role": "user", "content": [{"type": "text", "text": "\udfff"}]},
    {"role": "user", "content": "x", "extra": float("nan")},
    {"role": "user", "content": "x", "extra": {1: "int key"}},
]


@pytest.mark.parametrize("bad", BAD_MESSAGES, ids=range(len(BAD_MESSAGES)))
def test_a_malformed_step_is_refused_and_the_session_keeps_working(tmp_path: Path, bad: Any) -> None:
    mem = fm.Memory(tmp_path / "v.db")
    agent = mem.agent(task="t", budget=800, session_id="s")
    for i in range(6):
        agent.step(action=f"call {i}", observation=f"result {i} " * 30)
    with pytest.raises(fm.InvalidInputError, match="message 0"):
        agent.step(action="a", observation="o", messages=[bad])
    assert len(mem.store.load_steps(agent.core.history_id)) == 6  # nothing of it stored
    for mode in ("auto", "units", "pieces"):
        ctx = agent.context(mode=mode)
        assert ctx.tokens <= ctx.ceiling and chat_problems(ctx.messages) == []
    again = fm.Memory(tmp_path / "v.db").agent(session_id="s")  # after a restart too
    assert again.context().tokens <= again.context().ceiling


def test_well_formed_tool_calls_are_kept(tmp_path: Path) -> None:
    agent = fm.Memory(tmp_path / "ok.db").agent(task="t", budget=2000, session_id="s")
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"id": 4417}'}}
    msgs = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "card 4417 found"},
        {"role": "user", "content": [{"type": "text", "text": "ok"}, {"type": "image_url", "image_url": {"url": "x"}}]},
    ]
    agent.step(action="lookup(4417)", observation="card 4417 found", messages=msgs)
    assert agent.context().messages[-3:] == msgs
    nested_ok = [{"role": "user", "content": [{"type": "text", "text": "x", "meta": nested(MAX_DEPTH - 4)}]}]
    agent.step(action="b", observation="c", messages=nested_ok)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 500, 5000])
def test_messages_nested_too_deep_are_refused_by_add_messages_and_steps(tmp_path: Path, depth: int) -> None:
    """Deep JSON in any field of a message (one the library ignores too) is InvalidInputError, never a
    RecursionError, and nothing is stored."""
    mem = fm.Memory(tmp_path / "deep.db", history="h")
    agent = mem.agent(task="t", budget=900, session_id="s")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": nested(depth)}}}
    for bad in (
        {"role": "user", "content": "hi", "meta": nested(depth)},
        {"role": "user", "content": [nested(depth)]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ):
        with pytest.raises(fm.InvalidInputError, match=f"nested deeper than {MAX_DEPTH} levels"):
            mem.add_messages([{"role": "user", "content": "ok"}, bad])
        with pytest.raises(fm.InvalidInputError, match=f"nested deeper than {MAX_DEPTH} levels"):
            agent.step(action="a", observation="o", messages=[bad])
    assert len(mem) == 0 and len(agent.steps) == 0
    ok = {"role": "user", "content": "hi", "meta": nested(MAX_DEPTH - 1)}  # within the limit: stored
    assert len(mem.add_messages([ok])) == 1
    assert agent.step(action="a", observation="o", messages=[ok]) == 1


def test_a_session_stored_with_bad_messages_renders_them_as_text(tmp_path: Path) -> None:
    """What an older version stored without these checks: the session opens and renders, in every mode."""
    path = tmp_path / "old.db"
    mem = fm.Memory(path)
    agent = mem.agent(task="t", budget=700, session_id="s")
    for i in range(4):
        agent.step(action=f"call {i}", observation=f"result {i} " * 20)
    db = sqlite3.connect(path)  # steps as an older version wrote them: unchecked, digests chained as it did
    hid = agent.core.history_id
    previous = db.execute("SELECT digest FROM steps WHERE history_id = ? AND n = 3", (hid,)).fetchone()[0]
    for n, msgs in enumerate([*BAD_MESSAGES[:3], BAD_MESSAGES[11]], start=4):
        data = {"action": f"bad {n}", "observation": "o " * 40, "actor": "assistant", "messages": [msgs]}
        text = json.dumps(data, ensure_ascii=False)
        previous = step_digest(previous, n, None, text)
        db.execute("INSERT INTO steps (history_id, n, step_id, data, digest) VALUES (?, ?, NULL, ?, ?)",
                   (hid, n, text, previous))  # fmt: skip
    deep = '{"action": "deep", "observation": "", "actor": "assistant", "messages": [{"role": "user", "content": '
    deep += "[" * 3000 + '"x"' + "]" * 3000 + "}]}"  # too deep for json itself to read back
    db.execute("INSERT INTO steps (history_id, n, data, digest) VALUES (?, 8, ?, ?)",
               (hid, deep, step_digest(previous, 8, None, deep)))  # fmt: skip
    db.commit()
    db.close()
    reopened = fm.Memory(path).agent(session_id="s")
    assert len(reopened.steps) == 9
    for mode in ("auto", "units", "pieces"):
        ctx = reopened.context(mode=mode)
        assert ctx.tokens <= ctx.ceiling and chat_problems(ctx.messages) == []
        assert all(isinstance(m.get("content"), str | None | list) for m in ctx.messages)
    text = json.dumps(reopened.context().messages)
    assert "shown as text" in text
    reopened.step(action="after", observation="it works")  # the session goes on


def test_the_error_contract_reproducers(tmp_path: Path) -> None:
    """Issue 21's fuzz findings, one by one: each is a FlexaMemError now, and stores nothing."""
    bad_opens: list[dict[str, Any]] = [
        {"path": tmp_path / "a.db", "settings": object()},
        {"path": str(tmp_path / ("x" * 300))},
        {"path": "\udfff"},
        {"path": str(tmp_path / "a\x00b.db")},
        {"path": tmp_path / "a.db", "writer": "rule"},
        {"path": tmp_path / "a.db", "read_only": "yes"},
    ]
    for kwargs in bad_opens:
        with pytest.raises(fm.FlexaMemError):
            fm.Memory(**kwargs)
    mem = fm.Memory(tmp_path / "m.db")
    for i in range(3):
        mem.add_session([{"speaker": "A", "text": f"note {i}"}], session_id=f"s{i}")
    with pytest.raises(fm.InvalidInputError):
        mem.add_sessions(None)  # type: ignore[arg-type]
    for label in ("u²", "u٣", "u0", "u4", "u" + "9" * 30):
        with pytest.raises(fm.InvalidInputError):
            mem.note(label)
    assert mem.note("u3").unit_id == "s2"
    for kwargs in ({"timeline": "no"}, {"candidates": ["random"]}, {"nonsense": True}):
        with pytest.raises(fm.InvalidInputError):
            fm.RenderOptions(**kwargs)
    agent = mem.agent(task="t", budget=500, session_id="a")
    agent.step(action="a", observation="b")
    for order in (1.5, "u1", [1.5], ["nope"]):
        with pytest.raises(fm.InvalidInputError):
            agent.context(order=order)  # type: ignore[arg-type]
    for mode in ([], "fast", 3):  # None: the profile's mode
        with pytest.raises(fm.InvalidInputError):
            mem.render("note", 500, mode=mode)  # type: ignore[arg-type]
    assert len(mem) == 3 and mem.verify() == []
