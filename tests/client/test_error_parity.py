"""One call, one error, through every door: each bad call in the table below raises the same
``FlexaMemError`` subclass from a local ``Memory`` (SQLite) and from a ``Memory`` at the URL of a real
``flexamem serve``, with a similar message, and stores nothing either way; what a local memory answers
without an error (an empty history read, an empty batch) a remote one answers alike. The server names
an error by its class in ``flexamem.errors`` and the client raises that class back (one registry)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import flexamem as fm
from flexamem import errors
from flexamem.client.http import error_from
from flexamem.client.remote import RemoteAgentSession
from flexamem.errors import error_classes, error_name
from tests.server.conftest import Server

T = [{"speaker": "Ana", "text": "I moved to Lisbon in May; the hotel booking ref is QX-4471."}]
OTHER = [{"speaker": "Ana", "text": "The cat is called Miso."}]
MESSAGES = [{"role": "user", "content": "What was the booking ref?"}, {"role": "assistant", "content": "QX-4471"}]
Call = Callable[[fm.Memory], Any]


def written(m: fm.Memory) -> fm.Memory:
    m.add_session(T, session_id="s1")
    return m


def agent(m: fm.Memory) -> Any:
    return m.agent("Refund order #W4417", budget=900, session_id="a1")


def twice(first: Call, second: Call) -> Call:
    return lambda m: (first(m), second(m))


def step_reused(m: fm.Memory) -> Any:
    session = agent(m)
    session.step("ls", "a b", step_id="k")
    return session.step("cat a", "hi", step_id="k")


def batch(turns: list[dict[str, str]]) -> Call:
    return lambda m: m.add_sessions([{"turns": T}, {"turns": turns}], request_id="k")


def messages(msgs: list[dict[str, str]]) -> Call:
    return lambda m: m.add_messages(msgs, request_id="k")


def session(turns: list[dict[str, str]]) -> Call:
    return lambda m: m.add_session(turns, request_id="k")


def resumed(**kwargs: Any) -> Call:
    return twice(agent, lambda m: m.agent(session_id="a1", **kwargs))


# (case, the call, a pattern both messages match)
CASES: list[tuple[str, Call, str]] = [
    # budgets
    ("budget 0", lambda m: m.render("where?", 0), "budget"),
    ("budget -1", lambda m: m.render("where?", -1), "budget"),
    ("budget 10**12", lambda m: m.render("where?", 10**12), "budget"),
    ("budget 'x'", lambda m: m.render("where?", "x"), "budget"),
    ("budget 1.5", lambda m: m.render("where?", 1.5), "budget"),
    ("budget True", lambda m: m.render("where?", True), "budget"),
    ("budget with no room", lambda m: m.render("where?", 3, prompt="a long fixed prompt " * 5), "no room"),
    ("no room, history written", lambda m: written(m).render("where?", 3, prompt="a fixed prompt " * 5), "no room"),
    ("agent budget 0", lambda m: m.agent("task", budget=0), "budget"),
    ("agent budget 'x'", lambda m: m.agent("task", budget="x"), "budget"),
    ("agent budget 10**12", lambda m: m.agent("task", budget=10**12), "budget"),
    ("context with no room", lambda m: m.agent("the task " * 30, budget=20, session_id="a1").context(), "no room"),
    # modes, queries, limits, orders
    ("render mode", lambda m: m.render("where?", 500, mode="fast"), "mode"),
    ("render mode, history written", lambda m: written(m).render("where?", 500, mode="fast"), "mode"),
    ("search mode", lambda m: m.search("where?", mode="units"), "mode"),
    ("context mode", lambda m: agent(m).context(mode="fast"), "mode"),
    ("empty query", lambda m: m.render("", 500), "query"),
    ("blank query", lambda m: m.render("   ", 500), "query"),
    ("blank query, history written", lambda m: written(m).render("   ", 500), "query"),
    ("query not text", lambda m: m.render(5, 500), "query"),
    ("query with NUL", lambda m: m.render("a\x00b", 500), "NUL"),
    ("empty search query", lambda m: m.search(""), "query"),
    ("search limit 0", lambda m: m.search("where?", limit=0), "limit"),
    ("order not a list", lambda m: written(m).render("where?", 500, mode="units", order="u1"), "order"),
    ("order of an unknown unit", lambda m: written(m).render("where?", 500, mode="units", order=["zz"]), "zz"),
    # turns and sessions
    ("no turns", lambda m: m.add_session([]), "turn"),
    ("turns not a list", lambda m: m.add_session("hello"), "turns"),
    ("turn not a dict", lambda m: m.add_session(["hello"]), "turn"),
    ("turn without text", lambda m: m.add_session([{"speaker": "Ana"}]), "text"),
    ("empty text", lambda m: m.add_session([{"speaker": "Ana", "text": ""}]), "text"),
    ("blank text", lambda m: m.add_session([{"speaker": "Ana", "text": "   "}]), "text"),
    ("text not text", lambda m: m.add_session([{"speaker": "Ana", "text": 5}]), "text"),
    ("text with NUL", lambda m: m.add_session([{"speaker": "Ana", "text": "a\x00b"}]), "NUL"),
    ("text with a lone surrogate", lambda m: m.add_session([{"speaker": "Ana", "text": "a\ud800b"}]), "surrogate"),
    ("empty speaker", lambda m: m.add_session([{"speaker": "", "text": "hi"}]), "speaker"),
    ("speaker of two lines", lambda m: m.add_session([{"speaker": "Ana\nBo", "text": "hi"}]), "lines"),
    ("unknown turn field", lambda m: m.add_session([{"speaker": "Ana", "text": "hi", "mood": 1}]), "mood"),
    ("empty session id", lambda m: m.add_session(T, session_id=""), "session_id"),
    ("session id not text", lambda m: m.add_session(T, session_id=5), "session_id"),
    ("date not text", lambda m: m.add_session(T, date=5), "date"),
    ("empty request id", lambda m: m.add_session(T, request_id=""), "request_id"),
    ("request id too long", lambda m: m.add_session(T, request_id="k" * 201), "request_id"),
    ("duplicate unit id", lambda m: written(m).add_session(OTHER, session_id="s1"), "already"),
    ("duplicate in a batch", lambda m: m.add_sessions([{"turns": T, "session_id": "b"}] * 2), "already"),
    ("batch not a list", lambda m: m.add_sessions(None), "sessions"),
    ("batch session without turns", lambda m: m.add_sessions([{"text": "hi"}]), "turns"),
    ("no messages", lambda m: m.add_messages([]), "messages"),
    ("messages not a list", lambda m: m.add_messages("hello"), "messages"),
    ("message not a dict", lambda m: m.add_messages(["hello"]), "message"),
    ("message of no known role", lambda m: m.add_messages([{"role": "wizard", "content": "hi"}]), "role"),
    ("messages without content", lambda m: m.add_messages([{"role": "user", "content": ""}]), "content"),
    # reads of what is not there
    ("unknown unit", lambda m: written(m).note("u99"), "u99"),
    ("unknown unit id", lambda m: written(m).note("nope"), "nope"),
    ("empty unit id", lambda m: written(m).note(""), "no unit"),
    ("unit id not text", lambda m: written(m).note(5), "unit ids"),
    ("a note of a history that does not exist", lambda m: m.note("u1"), "no (unit|history)"),
    ("an order in a history that does not exist", lambda m: m.render("q", 500, mode="units", order=["u1"]), "no "),
    ("an unknown agent session", lambda m: written(m).agent(session_id="nope"), "nope"),
    ("an agent session of a history that does not exist", lambda m: m.agent(session_id="nope"), "no "),
    ("resume with a budget, no session", lambda m: written(m).agent(budget=900, session_id="nope"), "nope"),
    # agent sessions and steps
    ("agent without task or session", lambda m: m.agent(), "task="),
    ("agent without budget", lambda m: m.agent("task"), "budget="),
    ("empty task", lambda m: m.agent("", budget=900), "task"),
    ("resumed with another task", resumed(task="another", budget=900), "task"),
    ("resumed with another budget", resumed(task="Refund order #W4417", budget=901), "budget"),
    ("resumed with another task only", resumed(task="another"), "task"),
    ("resumed with another budget only", resumed(budget=901), "budget"),
    ("empty action", lambda m: agent(m).step(""), "action"),
    ("action not text", lambda m: agent(m).step(5), "action"),
    ("observation not text", lambda m: agent(m).step("ls", 5), "observation"),
    ("empty actor", lambda m: agent(m).step("ls", actor=""), "actor"),
    ("empty step id", lambda m: agent(m).step("ls", step_id=""), "step_id"),
    ("step messages not a list", lambda m: agent(m).step("ls", messages="hi"), "message"),
    ("step message of no known role", lambda m: agent(m).step("ls", messages=[{"role": "x", "content": "hi"}]), "role"),
    # a request id (or step id) reused with another body: RequestConflictError, as the library raises it
    ("a request id reused", twice(session(T), session(OTHER)), "k"),
    ("a batch id reused", twice(batch(T), batch(OTHER)), "k"),
    ("a messages id reused", twice(messages(MESSAGES), messages(MESSAGES[:1])), "k"),
    ("a step id reused", step_reused, "k"),
]  # fmt: skip


def remote(server: Server) -> fm.Memory:
    history = "parity" + uuid.uuid4().hex[:10]
    return fm.Memory(server.url, key=server.keys["acme"], history=history, client=fm.ClientSettings(retry_seconds=5))


def raised(call: Call, mem: fm.Memory) -> fm.FlexaMemError:
    with pytest.raises(fm.FlexaMemError) as info:  # never another type (a UnicodeEncodeError, a TypeError...)
        call(mem)
    return info.value


def stored(mem: fm.Memory) -> list[Any]:
    """What the memory holds: its notes' texts and its agent sessions with their step counts."""

    def steps(session: Any) -> int:
        return session.step_count if isinstance(session, RemoteAgentSession) else len(session.steps)

    return [[n.raw for n in mem.notes()], [(s, steps(mem.agent(session_id=s))) for s in mem.sessions()]]


@pytest.mark.parametrize(("call", "pattern"), [pytest.param(c, p, id=name) for name, c, p in CASES])
def test_a_bad_call_raises_the_same_error_locally_and_at_a_url(
    server: Server, tmp_path: Path, call: Call, pattern: str
) -> None:
    local, at_url = fm.Memory(str(tmp_path / "m.db")), remote(server)
    here, there = raised(call, local), raised(call, at_url)
    assert type(here) is type(there), f"local {type(here).__name__}: {here} | at a URL {type(there).__name__}: {there}"
    assert re.search(pattern, str(here)) and re.search(pattern, str(there)), (str(here), str(there))
    assert stored(local) == stored(at_url)  # what the refused call left: nothing, either way
    at_url.drop()


def test_what_a_local_memory_answers_without_error_a_remote_one_answers_alike(server: Server, tmp_path: Path) -> None:
    """A history that holds nothing yet is read as empty through both doors (an empty rendering, no hits,
    no notes); an empty batch writes nothing; numpy integers are budgets."""

    def script(mem: fm.Memory) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for mode in ("auto", "pieces", "units"):
            out[f"render {mode}"] = mem.render("Where did Ana move?", 300, mode=mode, prompt="Answer briefly.")
        out["render ordered"] = mem.render("Where?", 300, mode="units", order=[])
        out["search"] = mem.search("Lisbon")
        out["reads"] = (mem.notes(), len(mem), mem.verify(), mem.sessions(), mem.drop(), mem.drop_session("a1"))
        out["empty batch"] = mem.add_sessions([])
        out["written"] = mem.add_session(T, session_id="s1")
        out["numpy budget"] = mem.render("Where did Ana move?", np.int64(300))
        out["numpy agent budget"] = mem.agent("Refund", budget=np.int32(900), session_id="a1").budget
        out["resumed with its task"] = mem.agent("Refund", session_id="a1").budget
        return out

    local, at_url = script(fm.Memory(str(tmp_path / "m.db"))), script(remote(server))
    for name in local:
        assert at_url[name] == local[name], name


def test_every_error_class_is_named_by_the_server_and_raised_back_by_the_client() -> None:
    classes = error_classes()
    defined = {n for n, c in vars(errors).items() if isinstance(c, type) and issubclass(c, fm.FlexaMemError)}
    assert set(classes) == defined and "RequestConflictError" in classes  # the registry is the module, no list
    for name, cls in classes.items():
        assert error_name(cls("boom")) == name
        body = {"error": {"type": name, "message": "boom"}}
        answer = httpx.Response(400, json=body, request=httpx.Request("POST", "http://127.0.0.1/v1/x"))
        got = error_from(answer)
        assert type(got) is cls and "boom" in str(got)

    class Elsewhere(fm.StoreFullError):
        """A subclass defined outside flexamem.errors: named by the nearest class the client knows."""

    assert error_name(Elsewhere("disk")) == "StoreFullError"
    unnamed = httpx.Response(409, text="conflict", request=httpx.Request("POST", "http://127.0.0.1/v1/x"))
    assert type(error_from(unnamed)) is fm.ConcurrentWriteError  # no name (a proxy's answer): by its status


def test_the_server_answers_each_error_with_its_status() -> None:
    from flexamem.server.app import _status

    expected = {
        fm.RequestConflictError: 409,  # before its base InvalidInputError (400)
        fm.NotFoundError: 404,
        fm.BudgetError: 400,
        fm.InvalidInputError: 400,
        fm.DuplicateUnitError: 409,
        fm.ConcurrentWriteError: 409,
        fm.UnauthorizedError: 401,
        fm.StoreFullError: 507,
    }
    assert {cls: _status(cls("x")) for cls in expected} == expected
