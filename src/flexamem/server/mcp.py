"""An MCP server over stdio (the official ``mcp`` SDK, 2.x; the ``mcp`` extra): ``flexamem mcp``.

Tools:

* ``remember``: write text (one turn) or OpenAI-format messages as one session of the history.
* ``recall``: the memory rendered for a query within ``max_tokens`` (the text, never longer).
* ``notes``: the history's records, one line per unit (what is stored, in time order).
* ``erase``: erase one turn or one session from every stored copy (``Memory.erase``); returns the erasure.

An MCP client (Claude Desktop, an IDE, an agent framework) starts it as a subprocess::

    {"command": "flexamem", "args": ["mcp", "--db", "/path/memory.db", "--history", "me"]}

or, for a memory on a FlexA-Mem server, ``["mcp", "--url", "https://...", "--history", "me"]`` with the
key in ``FLEXAMEM_API_KEY``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import select
import threading
from collections.abc import Iterator
from typing import Any

from flexamem.budget import budget_for
from flexamem.chat import json_problem
from flexamem.errors import FlexaMemError, InvalidInputError
from flexamem.memory import Memory

INSTRUCTIONS = (
    "FlexA-Mem is a long-term memory. Call `remember` with what should be kept (verbatim), and `recall` "
    "with a question to get what the memory holds about it within max_tokens."
)


EMPTY = "(the memory is empty)"
MAX_DEPTH = 64  # nesting a request may have (tool arguments included)
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,18})')


def recall_budget(max_tokens: int, query_tokens: int) -> int:
    """The render budget whose allowance (0.95 x budget less the query) is ``max_tokens``."""
    return budget_for(max_tokens, query_tokens)


def build_server(mem: Memory) -> Any:
    """The MCP server exposing ``mem`` (one history of a store)."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(name="flexamem", instructions=INSTRUCTIONS)

    def clear(fn: Any) -> Any:
        """FlexaMemErrors reach the client as the tool's error message (not a generic crash)."""

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except FlexaMemError as exc:
                raise ToolError(str(exc)) from None

        return wrapped

    @server.tool()
    @clear
    def remember(
        text: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        speaker: str = "user",
        session_id: str | None = None,
        date: str | None = None,
    ) -> dict[str, Any]:
        """Store `text` (said by `speaker`) or OpenAI-format `messages` as one session; returns the unit ids."""
        if (text is None) == (messages is None):
            raise InvalidInputError("give either text or messages")
        if messages is not None:
            units = mem.add_messages(messages, session_id=session_id, date=date)
        else:
            units = mem.add_session([{"speaker": speaker, "text": text}], session_id=session_id, date=date)
        return {"units": units, "notes": len(mem)}

    @server.tool()
    @clear
    def recall(query: str, max_tokens: int = 2000, mode: str | None = None) -> str:
        """What the memory holds about `query`, within `max_tokens` tokens (mode: auto, pieces or units;
        default: the server's profile's)."""
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidInputError("max_tokens must be a positive whole number")
        if len(mem) == 0:
            return EMPTY if mem.counter.count(EMPTY) <= max_tokens else ""
        budget = recall_budget(max_tokens, mem.counter.count(query) if isinstance(query, str) else 0)
        r = mem.render(query, budget, mode=mode)
        return r.text

    @server.tool()
    def notes() -> list[str]:
        """The stored units, oldest first: `label · date: record`."""
        return [f"{n.label} · {n.date or n.kind}: {n.record}" for n in mem.notes()]

    @server.tool()
    @clear
    def erase(
        turn: str | None = None, session: str | None = None, reason: str = "", marker: bool = True
    ) -> dict[str, Any]:
        """Erase one `turn` (its id, or `u<n>#<k>`: unit n's k-th turn) or a whole `session` (its id) from
        every stored copy; `marker` shows `(erased)` where the words were. Returns the erasure (never the words)."""
        return mem.erase(turn=turn, session=session, reason=reason, marker=marker).as_json()

    return server


def _error(mid: Any, code: int, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": code, "message": message}}).encode() + b"\n"


def screen(line: bytes) -> tuple[bytes | None, bool]:
    """One line from the client: ``(reply, forward)``. Lines the SDK would drop without an answer get a
    JSON-RPC error here instead (a parse error for what is not one JSON object; invalid request or
    params, with the request's id, for the rest); a notification (no id) that is malformed is dropped,
    as JSON-RPC says. Everything else goes on to the SDK unchanged."""
    if not line.strip():
        return None, False
    try:
        msg = json.loads(line.decode("utf-8"))
    except RecursionError:  # too deep for the parser: answer the id, if one can be seen
        found = _ID.search(line)
        mid = json.loads(found.group(1)) if found else None
        return _error(mid, INVALID_REQUEST, f"nested deeper than {MAX_DEPTH} levels"), False
    except ValueError:  # not JSON, or not UTF-8
        return _error(None, PARSE_ERROR, "parse error: a line must be one JSON-RPC message"), False
    if isinstance(msg, list):
        return _error(None, INVALID_REQUEST, "batches are not supported: send one message per line"), False
    if not isinstance(msg, dict):
        return _error(None, INVALID_REQUEST, "a JSON-RPC message must be an object"), False
    mid = msg.get("id")
    if mid is not None and (isinstance(mid, bool) or not isinstance(mid, str | int)):
        return _error(None, INVALID_REQUEST, "id must be a string or a number"), False
    problem, code = None, INVALID_REQUEST
    if msg.get("jsonrpc") != "2.0":
        problem = 'jsonrpc must be "2.0"'
    elif "method" in msg and not isinstance(msg["method"], str):
        problem = "method must be a string"
    elif "method" not in msg and "result" not in msg and "error" not in msg:
        problem = "a message needs a method (or a result or error)"
    elif "params" in msg and not isinstance(msg["params"], dict):
        problem, code = "params must be an object", INVALID_PARAMS
    else:
        problem = json_problem(msg, MAX_DEPTH)
        code = INVALID_PARAMS
    if problem is None:
        return None, True
    if "id" in msg and mid is not None:
        return _error(mid, code, problem), False
    return None, False  # a notification: never answered


@contextlib.contextmanager
def screened_stdio() -> Iterator[None]:
    """Put :func:`screen` between the process's stdin and the SDK's stdio transport: fd 0 and fd 1 become
    pipes; one thread reads the client's lines, answers the malformed ones and passes the rest on,
    another copies the SDK's replies out. Both write whole lines under one lock, so they never
    interleave. (Only the SDK's public ``run("stdio")`` is used.)"""
    client_in, client_out = os.dup(0), os.dup(1)
    sdk_in, to_sdk = os.pipe()
    from_sdk, sdk_out = os.pipe()
    os.dup2(sdk_in, 0)
    os.dup2(sdk_out, 1)
    os.close(sdk_in)
    os.close(sdk_out)
    lock, done = threading.Lock(), threading.Event()

    def emit(data: bytes) -> None:
        with lock:
            view = memoryview(data)
            while view:
                view = view[os.write(client_out, view) :]

    def pump_in() -> None:
        with os.fdopen(client_in, "rb") as source, os.fdopen(to_sdk, "wb") as sink:
            for line in source:
                reply, forward = screen(line)
                if reply is not None:
                    emit(reply)
                if forward:
                    sink.write(line if line.endswith(b"\n") else line + b"\n")
                    sink.flush()

    def pump_out() -> None:
        pending = b""
        while True:
            ready, _, _ = select.select([from_sdk], [], [], 0.05)
            if not ready:
                if done.is_set():
                    break
                continue
            chunk = os.read(from_sdk, 65536)
            if not chunk:
                break
            pending += chunk
            if b"\n" in pending:
                lines, pending = pending.rsplit(b"\n", 1)
                emit(lines + b"\n")
        if pending:
            emit(pending)

    threads = [threading.Thread(target=pump_in, daemon=True), threading.Thread(target=pump_out, daemon=True)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        done.set()  # the SDK flushed every reply before returning: copy what is left, then stop
        threads[1].join(10)


def run_stdio(mem: Memory) -> None:
    """Serve ``mem`` (a local memory, or one at a server's URL) over stdin/stdout until the client
    closes it."""
    with mem, screened_stdio():
        build_server(mem).run("stdio")
