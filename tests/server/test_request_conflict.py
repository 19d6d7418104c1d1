"""An ``Idempotency-Key`` (or step id) names one write: sent again with the same body it stores nothing more
and answers the first write's ids (200); sent with another body it is refused with 409
``RequestConflictError`` (the body names the error as every error answer does) and stores nothing."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Server

ANA = [{"speaker": "Ana", "text": "Refund the hotel to my Visa ending 4417."}]
BO = [{"speaker": "Bo", "text": "I only drink green tea."}]
MESSAGES = [{"role": "user", "content": "Where is order #W4417?"}, {"role": "assistant", "content": "It shipped."}]


def history() -> str:
    return "/v1/histories/conflict" + uuid.uuid4().hex[:10]


def post(c: httpx.Client, path: str, body: dict[str, Any], key: str) -> httpx.Response:
    return c.post(path, json=body, headers={"Idempotency-Key": key})


def refused(r: httpx.Response) -> bool:
    """A 409 naming RequestConflictError, in the body every error answer has."""
    if r.status_code != 409:
        return False
    error = r.json()["error"]
    return error["type"] == "RequestConflictError" and bool(error["message"])


def raws(c: httpx.Client, h: str) -> list[str]:
    return [n["raw"] for n in c.get(h + "/notes-full").json()]


def test_a_session_key_sent_again_with_another_body_is_409_and_stores_nothing(server: Server) -> None:
    h = history()
    with server.client() as c:
        body = {"turns": ANA, "session_id": "hotel", "date": "2024-05-08"}
        first = post(c, h + "/sessions", body, "key-1")
        assert first.status_code == 200 and first.json()["units"] == ["hotel"]
        again = post(c, h + "/sessions", body, "key-1")
        assert again.status_code == 200 and again.json() == first.json()  # the first write's ids
        for other in ({**body, "turns": BO}, {**body, "date": "2024-05-09"}, {"turns": ANA}):
            assert refused(post(c, h + "/sessions", other, "key-1")), other
        assert raws(c, h) == ["Ana: Refund the hotel to my Visa ending 4417."]
        unnamed = post(c, h + "/sessions", {"turns": BO}, "key-2")  # a session the library names
        assert post(c, h + "/sessions", {"turns": BO}, "key-2").json() == unnamed.json()
        assert refused(post(c, h + "/sessions", {"turns": ANA}, "key-2"))
        assert len(raws(c, h)) == 2


def test_a_batch_key_sent_again_with_another_body_is_409_and_stores_nothing(server: Server) -> None:
    h = history()
    with server.client() as c:
        body = {"sessions": [{"turns": ANA}, {"turns": BO, "session_id": "tea"}]}
        first = post(c, h + "/batch", body, "batch-1")
        assert first.status_code == 200 and len(first.json()["sessions"]) == 2
        again = post(c, h + "/batch", body, "batch-1")
        assert again.status_code == 200 and again.json() == first.json()
        coffee = [{"speaker": "Bo", "text": "Coffee, black."}]
        other = {"sessions": [{"turns": ANA}, {"turns": coffee, "session_id": "tea"}]}
        assert refused(post(c, h + "/batch", other, "batch-1"))
        assert refused(post(c, h + "/batch", {"sessions": [{"turns": BO}, {"turns": ANA}]}, "batch-1"))
        assert raws(c, h) == ["Ana: Refund the hotel to my Visa ending 4417.", "Bo: I only drink green tea."]


def test_a_messages_key_sent_again_with_another_body_is_409_and_stores_nothing(server: Server) -> None:
    h = history()
    with server.client() as c:
        body = {"messages": MESSAGES, "session_id": "shop"}
        first = post(c, h + "/messages", body, "msg-1")
        assert first.status_code == 200 and first.json()["units"] == ["shop"]
        assert post(c, h + "/messages", body, "msg-1").json() == first.json()
        other = {"messages": [*MESSAGES[:1], {"role": "assistant", "content": "It is lost."}], "session_id": "shop"}
        assert refused(post(c, h + "/messages", other, "msg-1"))
        assert len(raws(c, h)) == 1 and "It shipped." in raws(c, h)[0] and "lost" not in raws(c, h)[0]


def test_a_step_id_sent_again_with_another_step_is_409_and_stores_nothing(server: Server) -> None:
    h = history()
    with server.client() as c:
        started = c.post(h + "/agents", json={"task": "Refund #W4417", "budget": 900, "session_id": "a1"})
        assert started.status_code == 200
        step = {"action": "get_order W4417", "observation": "shipped", "step_id": "s1"}
        first = c.post(h + "/agents/a1/steps", json=step)
        assert first.status_code == 200 and first.json() == {"step": 1, "messages": 2}
        assert c.post(h + "/agents/a1/steps", json=step).json() == first.json()  # a retried step: a no-op
        assert refused(c.post(h + "/agents/a1/steps", json={**step, "action": "cancel_order W4417"}))
        assert c.get(h + "/agents/a1").json()["steps"] == 1


def test_a_step_id_sent_again_with_other_messages_or_actor_is_409_and_stores_nothing(server: Server) -> None:
    h = history()
    m1 = [{"role": "assistant", "content": "get_order W4417"}, {"role": "user", "content": "shipped"}]
    m2 = [{"role": "assistant", "content": "cancel_order W4417"}, {"role": "user", "content": "cancelled"}]
    with server.client() as c:
        assert (
            c.post(h + "/agents", json={"task": "Refund #W4417", "budget": 900, "session_id": "a1"}).status_code == 200
        )
        step = {"action": "act", "observation": "obs", "step_id": "s", "messages": m1}
        first = c.post(h + "/agents/a1/steps", json=step)
        assert first.status_code == 200 and first.json() == {"step": 1, "messages": 2}
        assert c.post(h + "/agents/a1/steps", json=step).json() == first.json()  # an exact replay: a no-op
        for other in (
            {**step, "messages": m2},
            {**step, "actor": "planner"},
            {k: v for k, v in step.items() if k != "messages"},
        ):
            r = c.post(h + "/agents/a1/steps", json=other)
            assert refused(r), (other, r.text)
            assert "already recorded (step 1) with" in r.json()["error"]["message"]
        assert c.get(h + "/agents/a1").json()["steps"] == 1
        shown = c.get(h + "/agents/a1/context").json()["messages"]
        assert "cancel" not in str(shown) and m1[0] in shown


def test_the_409_of_a_reused_key_is_in_the_openapi_document_of_every_write(server: Server) -> None:
    with server.client(None) as c:
        paths = c.get("/openapi.json").json()["paths"]
    for route in ("sessions", "batch", "messages", "agents", "agents/{session_id}/steps"):
        answer = paths[f"/v1/histories/{{history}}/{route}"]["post"]["responses"]["409"]
        assert "RequestConflictError" in answer["description"], route
    header = [p for p in paths["/v1/histories/{history}/sessions"]["post"]["parameters"] if p["in"] == "header"]
    assert "RequestConflictError" in header[0]["description"]


def test_the_server_answers_a_request_conflict_with_409_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's side alone (the app in process, the library's refusal stood in for): a
    RequestConflictError, an InvalidInputError, is answered 409 and named, not 400."""
    from starlette.testclient import TestClient

    from flexamem.errors import RequestConflictError
    from flexamem.memory import Memory
    from flexamem.server.app import ServerConfig, create_app
    from flexamem.server.keys import KeyFile

    key = KeyFile(str(tmp_path / "keys.json")).add_key("acme")
    app = create_app(ServerConfig(str(tmp_path / "m.db"), str(tmp_path / "keys.json"), offload_writes=False))
    client = TestClient(app, headers={"Authorization": f"Bearer {key}"})

    def conflict(self: Memory, *args: Any, **kwargs: Any) -> list[str]:
        raise RequestConflictError(f"request id {kwargs.get('request_id')!r} already names another write")

    for method in ("add_session", "add_sessions", "add_messages"):
        monkeypatch.setattr(Memory, method, conflict)
    for route, body in (("sessions", {"turns": ANA}), ("batch", {"sessions": [{"turns": ANA}]}),
                        ("messages", {"messages": MESSAGES})):  # fmt: skip
        r = client.post(f"/v1/histories/h/{route}", json=body, headers={"Idempotency-Key": "k9"})
        assert refused(r) and "'k9'" in r.json()["error"]["message"] and "retry-after" not in r.headers, route
