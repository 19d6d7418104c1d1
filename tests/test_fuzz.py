"""A fuzz of the public API: whatever a caller passes, only FlexaMemErrors escape, and a failed call
leaves the store exactly as it was (the reliability issue's error contract)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flexamem as fm

CASES = int(os.environ.get("FLEXAMEM_FUZZ_CASES", "600"))  # per test; CI runs the four: 2,000+ cases

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def shared(tmp_path_factory: Any) -> dict[str, Any]:
    """One store for every example (a failed call must leave it as it was; successes may grow it)."""
    path = tmp_path_factory.mktemp("fuzz") / "f.db"
    mem = fm.Memory(path)
    mem.add_session([{"speaker": "A", "text": "a first note about the zebra code 7919"}], session_id="seed")
    for i in range(8):
        mem.add_session([{"speaker": "A", "text": f"note {i} about parcels and depots " * 6}], session_id=f"n{i}")
    good = mem.agent(task="a good task", budget=1024, session_id="good")
    good.step(action="look", observation="fine")
    return {"path": path, "mem": mem, "good": good}


class Deep(list):  # type: ignore[type-arg]
    """A list nested ``depth`` deep (lists and dicts in turn), with a short repr for hypothesis' reports."""

    def __init__(self, depth: int) -> None:
        value: Any = "x"
        for i in range(depth - 1):
            value = [value] if i % 2 else {"text": value}
        super().__init__([value])
        self.depth = depth

    def __repr__(self) -> str:
        return f"Deep({self.depth})"


junk_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        ["", "   ", "a\x00b", "lone \ud800 surrogate", "\udfff", "ok text", "s1", "x" * 500, "u²", "u٣", "u1",
         "\U0001f600 emoji", "\U00010348\U0001d11e", "u0", "u99999999999999999999"]
    ),
    st.binary(max_size=12),
)  # fmt: skip
deep = st.sampled_from([40, 300, 900, 5000]).map(Deep)
junk = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True),
        junk_text,
        st.just(set()),
        st.just(object()),
        deep,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(["speaker", "text", "id", "role", "x"]), inner)
    ),
    max_leaves=8,
)
role = st.one_of(st.sampled_from(["user", "assistant", "tool", "system"]), junk_text, junk)
junk_call = st.one_of(
    junk,
    st.fixed_dictionaries(
        {"id": st.one_of(st.just("c1"), junk), "function": st.one_of(junk, st.fixed_dictionaries(
            {"name": st.one_of(st.just("f"), junk), "arguments": st.one_of(st.just("{}"), junk_text, junk)}))},
        optional={"type": st.one_of(st.just("function"), junk)},
    ),
)  # fmt: skip
junk_message = st.fixed_dictionaries(
    {"role": role, "content": st.one_of(junk_text, junk, st.lists(junk, max_size=2))},
    optional={
        "tool_calls": st.one_of(junk, st.lists(junk_call, max_size=2)),
        "tool_call_id": st.one_of(junk_text, junk),
        "name": st.one_of(junk_text, junk),
    },
)  # fmt: skip
maybe_turns = st.one_of(
    junk,
    st.lists(
        st.fixed_dictionaries(
            {"speaker": st.one_of(junk_text, junk), "text": st.one_of(junk_text, junk)},
            optional={"id": st.one_of(junk_text, junk), "role": st.one_of(junk_text, junk)},
        ),
        max_size=3,
    ),
)


def snapshot(path: Path) -> list[Any]:
    db = sqlite3.connect(path)
    try:
        out = []
        for table in ("histories", "notes", "pieces", "links", "merged", "steps", "piece_vectors"):
            out.append(sorted(db.execute(f"SELECT * FROM {table}").fetchall(), key=repr))
        return out
    finally:
        db.close()


def call(fn: Any, *args: Any, **kwargs: Any) -> bool:
    """Run one API call; True if it succeeded, False if it raised a FlexaMemError (anything else fails)."""
    try:
        fn(*args, **kwargs)
    except fm.FlexaMemError:
        return False
    return True


FUZZ = settings(
    max_examples=CASES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@FUZZ
@given(turns=maybe_turns, session_id=st.one_of(st.none(), junk_text, junk), date=st.one_of(st.none(), junk_text, junk))
def test_add_session_raises_only_flexamem_errors_and_keeps_the_store(
    shared: dict[str, Any], turns: Any, session_id: Any, date: Any
) -> None:
    path, mem = shared["path"], shared["mem"]
    before, count = snapshot(path), len(mem)
    if not call(mem.add_session, turns, session_id=session_id, date=date):
        assert snapshot(path) == before
        assert len(mem) == count
    r = mem.render("zebra code", budget=2048)  # the memory still works
    assert "7919" in r.text
    call(mem.note, session_id)  # any unit id: a note or an InvalidInputError


@FUZZ
@given(
    query=st.one_of(junk_text, junk),
    budget=st.one_of(st.integers(-5, 5000), junk),
    mode=st.one_of(st.sampled_from(["auto", "units", "pieces"]), junk),
    prompt=st.one_of(st.just(""), junk_text, junk),
    options=st.one_of(st.none(), junk),
    query_vector=st.one_of(st.none(), junk),
)
def test_render_raises_only_flexamem_errors_and_writes_nothing_when_it_fails(
    shared: dict[str, Any], query: Any, budget: Any, mode: Any, prompt: Any, options: Any, query_vector: Any
) -> None:
    path, mem = shared["path"], shared["mem"]
    before = snapshot(path)
    ok = call(mem.render, query, budget, mode=mode, prompt=prompt, options=options, query_vector=query_vector)
    if not ok:
        assert snapshot(path) == before


@FUZZ
@given(
    task=st.one_of(junk_text, junk),
    budget=st.one_of(st.integers(-5, 3000), junk),
    system=st.one_of(st.just(""), junk_text, junk),
    session_id=st.one_of(st.none(), junk_text, junk),
    action=st.one_of(junk_text, junk),
    observation=st.one_of(junk_text, junk),
    messages=st.one_of(st.none(), junk, st.lists(st.one_of(junk_message, junk), max_size=3)),
    step_id=st.one_of(st.none(), junk_text, junk),
)
def test_agent_calls_raise_only_flexamem_errors_and_keep_the_store(
    shared: dict[str, Any],
    task: Any,
    budget: Any,
    system: Any,
    session_id: Any,
    action: Any,
    observation: Any,
    messages: Any,
    step_id: Any,
) -> None:
    path, mem, good = shared["path"], shared["mem"], shared["good"]
    before = snapshot(path)
    try:
        agent = mem.agent(task=task, budget=budget, system=system, session_id=session_id)
    except fm.FlexaMemError:
        assert snapshot(path) == before
        agent = good
    before = snapshot(path)
    steps = len(agent.steps)
    if not call(agent.step, action, observation, messages=messages, step_id=step_id):
        assert snapshot(path) == before and len(agent.steps) == steps
    if call(agent.context):
        ctx = agent.context()
        assert ctx.tokens <= ctx.ceiling
    for mode in ("auto", "units", "pieces"):  # whatever was stored renders in every mode (or: no room)
        try:
            ctx = agent.context(mode=mode)
        except fm.BudgetError:
            continue
        assert ctx.tokens <= ctx.ceiling


@FUZZ
@given(
    sessions=st.one_of(junk, st.lists(st.one_of(junk, st.fixed_dictionaries({"turns": maybe_turns})), max_size=3)),
    messages=st.one_of(junk, st.lists(st.one_of(junk_message, junk), max_size=3)),
    unit=st.one_of(junk_text, junk),
    order=st.one_of(st.none(), junk, st.lists(st.one_of(junk_text, junk), max_size=3)),
    mode=st.one_of(st.sampled_from(["auto", "units", "pieces"]), junk),
    options=st.one_of(st.none(), junk, st.dictionaries(st.sampled_from(["timeline", "candidates", "dense"]), junk)),
)
def test_other_calls_raise_only_flexamem_errors(
    shared: dict[str, Any], sessions: Any, messages: Any, unit: Any, order: Any, mode: Any, options: Any
) -> None:
    path, mem, good = shared["path"], shared["mem"], shared["good"]
    before = snapshot(path)
    if not call(mem.add_sessions, sessions):
        assert snapshot(path) == before
    before = snapshot(path)
    if not call(mem.add_messages, messages):
        assert snapshot(path) == before
    try:
        note = mem.note(unit)
    except fm.FlexaMemError:
        pass
    else:  # a label resolves only as u<ASCII digits> or as a stored unit id
        assert note.unit_id == unit or (unit[1:].isascii() and note.seq == int(unit[1:]) - 1)
    if isinstance(options, dict):
        try:
            options = fm.RenderOptions(**options)
        except fm.FlexaMemError:
            options = None
    call(good.context, options=options, mode=mode, order=order)
    call(mem.render, "parcels", 2000, mode=mode, options=options, order=order)
    call(mem.drop_session, unit)


ODD_NAMES = ["x" * 300, "\udfff", "a\x00b", "\U0001f600.db", "dir/none/x.db", "", ".", "..", "sub", "sub/", "f.db/x",
             "x" * 250 + "/y.db", "ok.db"]  # fmt: skip


@settings(max_examples=max(CASES // 3, 20), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.one_of(st.none(), junk, st.sampled_from(ODD_NAMES)),
    history=st.one_of(junk_text, junk),
    settings_=st.one_of(st.none(), junk),
    writer=st.one_of(st.none(), junk),
    read_only=st.one_of(st.booleans(), junk),
)
def test_opening_a_memory_raises_only_flexamem_errors(
    tmp_path: Path, path: Any, history: Any, settings_: Any, writer: Any, read_only: Any
) -> None:
    cwd = os.getcwd()
    (tmp_path / "sub").mkdir(exist_ok=True)
    (tmp_path / "f.db").touch()
    if isinstance(path, str) and path != ":memory:":
        path = str(tmp_path / path) if path in ODD_NAMES else ":memory:"  # junk names only inside tmp_path
    elif isinstance(path, bytes):
        path = ":memory:"
    try:
        call(fm.Memory, path, history=history, settings=settings_, writer=writer, read_only=read_only)
    finally:
        assert os.getcwd() == cwd
    assert not Path("None").exists()
