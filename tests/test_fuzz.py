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


junk_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", "   ", "a\x00b", "lone \ud800 surrogate", "\udfff", "ok text", "s1", "x" * 500]),
    st.binary(max_size=12),
)
junk = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True),
        junk_text,
        st.just(set()),
        st.just(object()),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(["speaker", "text", "id", "role", "x"]), inner)
    ),
    max_leaves=8,
)
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
    messages=st.one_of(st.none(), junk, st.lists(st.fixed_dictionaries({"role": junk_text, "content": junk}))),
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


@settings(max_examples=max(CASES // 3, 20), deadline=None)
@given(path=st.one_of(st.none(), junk), history=st.one_of(junk_text, junk))
def test_opening_a_memory_raises_only_flexamem_errors(path: Any, history: Any) -> None:
    cwd = os.getcwd()
    if isinstance(path, str | bytes) and path not in (":memory:",):
        path = ":memory:"  # never create junk-named files in the working tree
    try:
        call(fm.Memory, path, history=history)
    finally:
        assert os.getcwd() == cwd
    assert not Path("None").exists()
