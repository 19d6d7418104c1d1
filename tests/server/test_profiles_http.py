"""Profiles over HTTP (issue 50, part 2): a render request names a profile (or takes the server's), the
answer names the profile that produced it; the remote Memory sends its own; an unknown name is a 400."""

from __future__ import annotations

import uuid

import flexamem as fm

from .conftest import Server


def test_a_render_request_names_its_profile(server: Server) -> None:
    history = "p" + uuid.uuid4().hex[:10]
    local = fm.Memory(":memory:")
    for mem in (fm.Memory(server.url, key=server.keys["acme"], history=history), local):
        for i in range(8):
            mem.add_session([{"speaker": "Ana", "text": f"Day {i}: parcel {i} went to depot {i % 3}."}])
    with server.client() as c:
        plain = c.post(f"/v1/histories/{history}/render", json={"query": "parcel 5", "budget": 300}).json()
        assert (plain["mode"], plain["profile"], plain["overrides"]) == ("auto", "auto-v1", {})
        named = c.post(
            f"/v1/histories/{history}/render", json={"query": "parcel 5", "budget": 300, "profile": "paper-pieces"}
        ).json()
        assert (named["mode"], named["profile"]) == ("pieces", "paper-pieces-v1")
        assert named["text"] == local.render("parcel 5", 300, mode="pieces").text
        bad = c.post(f"/v1/histories/{history}/render", json={"query": "parcel 5", "budget": 300, "profile": "x"})
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "InvalidInputError"
        assert "no profile 'x'" in bad.text
    remote = fm.Memory(server.url, key=server.keys["acme"], history=history, profile="paper-units")
    r = remote.render("parcel 5", 300)
    assert (r.mode, r.profile) == ("units", "paper-units-v1")
    assert r.text == local.render("parcel 5", 300, mode="units").text
