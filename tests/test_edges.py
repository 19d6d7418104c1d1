"""The edges a new user met (issue 14), each reproduced: OpenAI messages in, clear errors for bad input."""

import datetime
from pathlib import Path

import numpy as np
import pytest

import flexamem as fm
from flexamem.chat import message_turn

CALL = {"id": "call_9", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "#W4417"}'}}
CHAT = [
    {"role": "system", "content": "You are a shop assistant."},
    {"role": "user", "content": "Where is order #W4417?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_9", "content": '{"status": "shipped", "tracking": "1Z999AA10123456784"}'},
    {"role": "assistant", "content": "It shipped; tracking 1Z999AA10123456784."},
    {"role": "assistant", "content": ""},  # empty: skipped
]


def test_add_messages_keeps_tool_calls_and_results_verbatim() -> None:
    mem = fm.Memory(":memory:")
    ids = mem.add_messages(CHAT, session_id="chat-1", date=datetime.date(2024, 5, 8))
    note = mem.note(ids[0])
    assert note.date == "2024-05-08"
    assert '[tool call call_9] get_order({"order_id": "#W4417"})' in note.raw
    assert '{"status": "shipped", "tracking": "1Z999AA10123456784"}' in note.raw
    r = mem.render("tracking number of order #W4417", 4096)
    assert "1Z999AA10123456784" in r.text
    assert {p.source_id for p in note.pieces} >= {"call_9"}  # the tool reply keeps its call id


def test_add_session_takes_openai_turns_too() -> None:
    mem = fm.Memory(":memory:")
    mem.add_session([{"role": "user", "content": "hi, I am Ana"}, {"role": "assistant", "content": "hello Ana"}])
    assert "user: hi, I am Ana" in mem.notes()[0].raw


def test_message_turn_refuses_what_is_not_a_message() -> None:
    for bad in ({"role": "robot", "content": "x"}, {"role": "user", "content": 5}, {"role": "user"}):
        with pytest.raises(fm.InvalidInputError):
            message_turn(bad)
    with pytest.raises(fm.InvalidInputError, match="no message with content"):
        fm.Memory(":memory:").add_messages([{"role": "assistant", "content": ""}])


def test_queries_budgets_and_paths_give_clear_errors(tmp_path: Path) -> None:
    mem = fm.Memory(":memory:")
    mem.add_session([{"speaker": "A", "text": "the seat is 12C"}])
    for query in (["a"], None, 5):
        with pytest.raises(fm.InvalidInputError, match="query must be a string"):
            mem.render(query, 4096)  # type: ignore[arg-type]
    assert mem.render("seat", np.int64(4096)).tokens > 0
    for budget in (0, -5, 10**9, 10**30, 2.5, True):
        with pytest.raises(fm.BudgetError):
            mem.render("seat", budget)  # type: ignore[arg-type]
    with pytest.raises(fm.InvalidInputError, match="file path"):
        fm.Memory(5)  # type: ignore[arg-type]
    with pytest.raises(fm.InvalidInputError, match="does not exist"):
        fm.Memory(tmp_path / "missing" / "m.db")
    with pytest.raises(fm.InvalidInputError, match="is a directory"):
        fm.Memory(tmp_path)
    assert not (tmp_path / "missing").exists()


def test_settings_errors_are_flexamem_errors() -> None:
    for bad in ({"k": 2.5}, {"k": -1}, {"nope": 1}, {"rho": "0.2"}, {"piece_vectors": 1}, {"lam": float("nan")}):
        with pytest.raises(fm.FlexaMemError):
            fm.Settings(**bad)  # type: ignore[arg-type]
    assert fm.Settings(rho=0.3, k=3).k == 3


def test_resuming_a_session_with_another_budget_is_refused() -> None:
    mem = fm.Memory(":memory:")
    agent = mem.agent(task="book a seat", budget=5000, session_id="old")
    agent.step(action="search", observation="12C free")
    assert mem.agent(session_id="old", budget=5000).budget == 5000
    with pytest.raises(fm.InvalidInputError, match="budget 5000"):
        mem.agent(task="book a seat", budget=999, session_id="old")


def test_closed_memory_refuses_reads(tmp_path: Path) -> None:
    mem = fm.Memory(tmp_path / "m.db")
    mem.add_session([{"speaker": "A", "text": "x y z"}])
    mem.close()
    with pytest.raises(fm.StoreClosedError):
        mem.render("x", 4096)
    with pytest.raises(fm.StoreClosedError):
        mem.notes()


def test_render_reports_the_mode_asked_and_labels_name_units() -> None:
    mem = fm.Memory(":memory:")
    mem.add_session([{"speaker": "A", "text": "the seat is 12C"}])
    r = mem.render("seat", 4096, mode="pieces")
    assert r.mode == "pieces" and r.pass_through
    note = mem.notes()[0]
    assert note.unit_id == "s1" and note.label == "u1" and f"[{note.label} ·" in r.text
    assert mem.note("u1") == mem.note("s1")
    with pytest.raises(fm.InvalidInputError):
        mem.note("u2")


def test_an_order_names_units_by_id_or_label_in_memory_and_agent_sessions() -> None:
    mem = fm.Memory(":memory:", settings=fm.Settings(one_unit_per_session=True))
    for i in range(8):
        fact = "The locker code is 5521." if i == 1 else f"Day {i}: nothing to note, grey weather."
        mem.add_session([{"speaker": "Ana", "text": fact + " Filler text here." * 20}], session_id=f"s{i}")
    query = "What is the weather like?"  # by itself unit recovery would not lead with the locker
    by_id = mem.render(query, 400, mode="units", order=["s1", "s0"])
    assert "[u2 · s1 · raw]" in by_id.text  # the unit ranked first is shown raw
    assert by_id.text == mem.render(query, 400, mode="units", order=["u2", "u1"]).text
    assert "[u2 · s1 · raw]" not in mem.render(query, 400, mode="units").text
    for bad in ("s1", ["s1", 3], ["nope"]):
        with pytest.raises(fm.InvalidInputError, match=r"unit|order"):
            mem.render(query, 400, mode="units", order=bad)  # type: ignore[arg-type]
    agent = fm.Memory(":memory:").agent(task="Open the locker.", budget=900)
    for i in range(30):
        agent.step(action=f"look({i})", observation=("code 5521 " if i == 2 else "") + f"shelf {i} is empty " * 12)
    plain = agent.context(mode="units")
    ordered = agent.context(mode="units", order=["u1"])  # the oldest unit: where the code is
    shown = ["\n".join(str(m["content"]) for m in c.messages) for c in (plain, ordered)]
    assert "[u1 · steps 1-" not in shown[0] and "[u1 · steps 1-" in shown[1]  # ranked first: recovered
    with pytest.raises(fm.InvalidInputError, match="no unit"):
        agent.context(mode="units", order=["u999"])
