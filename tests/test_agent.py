import itertools
import json
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.render.messages import messages_tokens


def observation(i: int, size: int = 8) -> str:
    return json.dumps({"users": [{"id": f"U{i}-{j}", "email": f"p{i}{j}@mail.com"} for j in range(size)]})


def test_pass_through_then_memory_with_window(tmp_path: Path) -> None:
    mem = fm.Memory(tmp_path / "a.db")
    agent = mem.agent(task="Find every Venmo user of my contacts", budget=2048, system="You are an agent.")
    contexts = []
    for i in range(30):
        agent.step(action=f"search_users(query='c{i}')", observation=observation(i))
        contexts.append(agent.context())
    first = contexts[0]
    assert first.pass_through and first.memory is None
    assert [m["role"] for m in first.messages] == ["system", "user", "assistant", "user"]
    started = next(i for i, c in enumerate(contexts) if not c.pass_through)
    assert all(not c.pass_through for c in contexts[started:])  # once on, memory stays on
    last = contexts[-1]
    assert last.memory is not None and last.memory.text
    assert last.messages[2]["content"].startswith("Memory of earlier steps")
    assert last.messages[-1]["content"] == observation(29)  # the newest step is shown unchanged
    assert last.tokens <= last.ceiling == (2048 * 95) // 100
    # every unit older than the window is a note; the window is not
    assert last.notes == len(mem.store.load_notes(agent.mem.history_id)) == min(last.window_units)


def test_window_is_longest_newest_run_within_a_quarter() -> None:
    mem = fm.Memory(":memory:")
    agent = mem.agent(task="t", budget=8000)
    for i in range(40):
        agent.step(action=f"a{i}", observation=observation(i, 3))
    units = agent.units()
    first = agent.window(units)
    sizes = [agent._unit_tokens(u) for u in units]
    assert sum(sizes[first:]) <= 8000 // 4
    assert first == 0 or sum(sizes[first - 1 :]) > 8000 // 4
    assert all(sum(agent._raw_tokens[i] for i in u) <= 1000 for u in units)


def test_session_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    agent = fm.Memory(path).agent(task="Reset friends on venmo", budget=1500)
    for i in range(20):
        agent.step(action=f"call {i}", observation=observation(i))
    before = agent.context()
    sid = agent.session_id
    again = fm.Memory(path).agent(session_id=sid)
    assert again.task == "Reset friends on venmo" and len(again.steps) == 20
    after = again.context()
    assert after.messages == before.messages
    again.step(action="call 20", observation="done")
    assert again.context().tokens <= (1500 * 95) // 100
    with pytest.raises(fm.InvalidInputError, match="another task"):
        fm.Memory(path).agent(task="something else", budget=1500, session_id=sid)
    with pytest.raises(fm.InvalidInputError, match="no stored agent session"):
        fm.Memory(path).agent(session_id="nope")


def test_merged_records_persist_for_the_episode() -> None:
    mem = fm.Memory(":memory:")
    agent = mem.agent(task="Collect user ids", budget=1024)
    seen: list[list[list[int]]] = []
    for i in range(60):
        agent.step(action=f"lookup({i})", observation=observation(i, 2))
        agent.context()
        seen.append(mem.store.get_state(agent.mem.history_id, "timeline") or [])
    grown = [s for s in seen if s]
    assert grown, "a 60-step episode at 1k must merge"
    for a, b in itertools.pairwise(grown):  # merges never undo: each span is kept or absorbed
        for first, last, _level in a:
            assert any(lo <= first and last <= hi for lo, hi, _ in b)


def test_newest_unit_too_big_is_cut_with_a_mark() -> None:
    mem = fm.Memory(":memory:")
    agent = mem.agent(task="Read the log", budget=512, system="Be brief.")
    agent.step(action="cat big.log", observation="line of log output\n" * 2000)
    ctx = agent.context()
    assert ctx.cut and ctx.tokens <= ctx.ceiling
    assert "tokens cut to fit the budget]" in ctx.messages[-1]["content"]
    with pytest.raises(fm.BudgetError):
        mem.agent(task="x " * 600, budget=512).context()


def test_tool_call_messages_are_kept_unchanged() -> None:
    mem = fm.Memory(":memory:")
    agent = mem.agent(task="t", budget=4096)
    msgs = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"id": 3}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
    ]
    agent.step(action="get(id=3)", observation='{"ok": true}', messages=msgs)
    ctx = agent.context()
    assert ctx.messages[-2:] == msgs
    assert ctx.tokens == messages_tokens(ctx.messages, mem.counter)
    with pytest.raises(fm.InvalidInputError):
        agent.step(action="  ", observation="x")
    with pytest.raises(fm.BudgetError):
        mem.agent(task="t", budget=0)
