"""The MCP server answers every request that has an id, whatever the client sends (issue 21, item 6),
tried on the real ``flexamem mcp`` process over its stdio."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import flexamem as fm
from flexamem.server.mcp import screen

DEEP = b"[" * 5000 + b"]" * 5000
INIT = {
    "jsonrpc": "2.0", "id": 0, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}  # fmt: skip


class Client:
    """The server as a subprocess; its stdout lines are read by a thread into a queue."""

    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "flexamem", "mcp", "--db", str(db), "--history", "me"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def send(self, raw: bytes | dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(raw).encode() if isinstance(raw, dict) else raw) + b"\n")
        self.proc.stdin.flush()

    def reply(self, timeout: float = 30) -> dict[str, Any]:
        return self.lines.get(timeout=timeout)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


def call(i: int, name: str, arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def test_every_bad_request_with_an_id_gets_an_error_and_the_server_goes_on(tmp_path: Path) -> None:
    client = Client(tmp_path / "m.db")
    try:
        client.send(INIT)
        assert client.reply()["result"]["serverInfo"]["name"] == "flexamem"
        client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        bad: list[tuple[bytes | dict[str, Any], Any, int]] = [
            (b"{not json", None, -32700),
            (b'{"jsonrpc": "2.0", "id": 1, "method": 5}', 1, -32600),
            (b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": 5}', 2, -32602),
            (b'[{"jsonrpc": "2.0", "id": 3, "method": "tools/list"}]', None, -32600),
            (b"[]", None, -32600),
            (b'{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"a": ' + DEEP + b"}}", 4, -32600),
            (b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "remember", '
             b'"arguments": {"text": "x\\ud800"}}}', 5, -32602),
            (b'{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "\\udfff"}}', 6, -32602),
            (b'"just a string"', None, -32600),
            (b'{"jsonrpc": "1.0", "id": 7, "method": "tools/list"}', 7, -32600),
            (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}', None, -32600),
            (b"\xff\xfe not utf-8", None, -32700),
        ]  # fmt: skip
        for raw, mid, code in bad:
            client.send(raw)
            r = client.reply()
            assert r["id"] == mid and r["error"]["code"] == code, (raw[:80], r)
        client.send(b'{"jsonrpc": "2.0", "method": 5}')  # a malformed notification: no answer, by the rules
        client.send(call(10, "remember", {"text": "My Visa card ends in 4417."}))
        r = client.reply()
        assert r["id"] == 10 and not r["result"].get("isError"), r  # the server went on, nothing lost
        client.send(call(11, "recall", {"query": "which card?", "max_tokens": 50}))
        assert "4417" in json.dumps(client.reply()["result"])
    finally:
        client.close()
    assert len(fm.Memory(tmp_path / "m.db", history="me")) == 1


def test_recall_never_returns_more_than_max_tokens(tmp_path: Path) -> None:
    client = Client(tmp_path / "empty.db")
    try:
        client.send(INIT)
        client.reply()
        for n in range(1, 8):
            client.send(call(n, "recall", {"query": "anything?", "max_tokens": n}))
            r = client.reply()
            text = "".join(c.get("text", "") for c in r["result"]["content"])
            assert fm.count(text) <= n, (n, text)
    finally:
        client.close()


def test_screen_passes_good_messages_unchanged() -> None:
    good = json.dumps(call(1, "recall", {"query": "é 😀 ok", "max_tokens": 5})).encode()
    assert screen(good) == (None, True)
    assert screen(b'{"jsonrpc": "2.0", "id": 3, "result": {}}') == (None, True)  # a client's reply
    assert screen(b"   \n") == (None, False)
