"""An Idempotency-Key whose write had words erased since (POST .../erase) answers 409
``RequestConflictError`` alike for every body: the erased words and a wrong guess get the same status
and message, so replays with the tenant's key are no oracle of what was erased."""

from __future__ import annotations

import uuid
from typing import Any

from .conftest import Server


def body(pin: str) -> dict[str, Any]:
    turns = [
        {"speaker": "Ana", "text": "We walked by the river.", "id": "a1"},
        {"speaker": "Ana", "text": f"My door PIN is {pin}.", "id": "a2"},
    ]
    return {"turns": turns, "session_id": "s1", "date": "1 May 2023"}


def test_a_replay_of_an_erased_write_answers_409_alike_for_every_body(server: Server) -> None:
    h = "/v1/histories/erased" + uuid.uuid4().hex[:10]
    key = {"Idempotency-Key": "k1"}
    with server.client() as c:
        first = c.post(h + "/sessions", json=body("4821"), headers=key)
        assert first.status_code == 200
        again = c.post(h + "/sessions", json=body("4821"), headers=key)
        assert again.status_code == 200 and again.json() == first.json()  # nothing erased yet: a retry
        assert c.post(h + "/erase", json={"turn": "a2", "reason": "gdpr"}).status_code == 200
        answers = set()
        for pin in ("4821", "1111", "4820"):
            r = c.post(h + "/sessions", json=body(pin), headers=key)
            error = r.json()["error"]
            answers.add((r.status_code, error["type"], error["message"]))
        assert len(answers) == 1, answers
        status, kind, message = answers.pop()
        assert (status, kind) == (409, "RequestConflictError") and "had words erased" in message
        assert "4821" not in c.get(h + "/notes-full").text
