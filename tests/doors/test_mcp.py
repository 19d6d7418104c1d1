"""The MCP server, driven by the official SDK's own stdio client."""

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import flexamem as fm


def text_of(result) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def session_run(db: Path) -> dict[str, object]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "flexamem", "mcp", "--db", str(db), "--history", "me"]
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
    out = asyncio.run(session_run(db))
    assert out["tools"] == ["notes", "recall", "remember"]
    recalled = str(out["recall"])
    assert "12C" in recalled and "TP1351" in recalled
    assert fm.count(recalled) <= 120
    assert "u1 · 2024-05-08" in str(out["notes"])
    assert out["bad"][0] is True and "max_tokens" in out["bad"][1]  # type: ignore[index]
    assert len(fm.Memory(db, history="me")) == 32  # the same store, readable by the library
