"""The MCP server, driven by the official SDK's own stdio client."""

import asyncio
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import flexamem as fm
from tests.server.conftest import Server


def text_of(result) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def session_run(where: list[str], env: dict[str, str] | None = None) -> dict[str, object]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "flexamem", "mcp", *where, "--history", "me"], env=env
    )
    out: dict[str, object] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        out["tools"] = sorted(t.name for t in (await session.list_tools()).tools)
        await session.call_tool(
            "remember", {"text": "My Visa card ends in 4417.", "speaker": "Ana", "date": "2024-05-08"}
        )
        chat = [
            {"role": "user", "content": "Book the 09:40 flight TP1351 to Lisbon."},
            {"role": "assistant", "content": "Booked seat 12C on TP1351."},
        ]
        await session.call_tool("remember", {"messages": chat, "session_id": "trip"})
        for i in range(30):  # enough history that recall has to choose
            await session.call_tool("remember", {"text": f"Note {i}: the garden needs water and the dog a walk."})
        out["recall"] = text_of(
            await session.call_tool("recall", {"query": "Which seat on TP1351?", "max_tokens": 120})
        )
        out["notes"] = text_of(await session.call_tool("notes", {}))
        bad = await session.call_tool("recall", {"query": "x", "max_tokens": 0})
        out["bad"] = (bad.is_error, text_of(bad))
    return out


def test_remember_and_recall_over_stdio(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    out = asyncio.run(session_run(["--db", str(db)]))
    assert out["tools"] == ["erase", "notes", "recall", "remember"]
    recalled = str(out["recall"])
    assert "12C" in recalled and "TP1351" in recalled
    assert fm.count(recalled) <= 120
    assert "u1 · 2024-05-08" in str(out["notes"])
    assert out["bad"][0] is True and "max_tokens" in out["bad"][1]  # type: ignore[index]
    assert len(fm.Memory(db, history="me")) == 32  # the same store, readable by the library


async def erase_run(db: Path) -> dict[str, object]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "flexamem", "mcp", "--db", str(db)])
    out: dict[str, object] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("remember", {"text": "My seat is 12C on TP1351.", "session_id": "trip"})
        await session.call_tool("remember", {"text": "Refund to Visa ending 4417.", "session_id": "hotel"})
        missing = await session.call_tool("erase", {"turn": "nope"})
        out["missing"] = (missing.is_error, text_of(missing))
        done = await session.call_tool("erase", {"turn": "hotel#1", "reason": "asked to forget"})
        out["erased"] = (done.is_error, done.structured_content)
        out["recall"] = text_of(await session.call_tool("recall", {"query": "Which card?", "max_tokens": 200}))
        out["notes"] = text_of(await session.call_tool("notes", {}))
    return out


def test_erase_over_stdio(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    out = asyncio.run(erase_run(db))
    assert out["missing"][0] is True and "nope" in out["missing"][1]  # type: ignore[index]
    is_error, erasure = out["erased"]  # type: ignore[misc]
    assert is_error is False and erasure["kind"] == "turn" and erasure["reason"] == "asked to forget"
    assert erasure["ids"] == ["hotel#1"] and erasure["units"] == ["u2"]
    assert "4417" not in str(out["recall"]) and "4417" not in str(out["notes"]) and "12C" in str(out["recall"])
    mem = fm.Memory(db)
    assert "4417" not in mem.note("hotel").raw and [e.ids for e in mem.erasures()] == [("hotel#1",)]
    assert mem.verify() == []


def test_the_mcp_door_serves_a_memory_on_a_server(server: Server, tmp_path: Path) -> None:
    env = {**os.environ, "FLEXAMEM_API_KEY": server.keys["acme"]}
    out = asyncio.run(session_run(["--url", server.url], env))  # history "me" of the key's tenant
    assert "12C" in str(out["recall"]) and fm.count(str(out["recall"])) <= 120
    mem = fm.Memory(server.url, key=server.keys["acme"], history="me")
    assert len(mem) == 32 and "Booked seat 12C on TP1351." in mem.note("u2").raw
    mem.drop()
