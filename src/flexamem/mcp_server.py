"""An MCP server over stdio (the official ``mcp`` SDK, 2.x; the ``mcp`` extra): ``flexamem mcp``.

Tools:

* ``remember``: write text (one turn) or OpenAI-format messages as one session of the history.
* ``recall``: the memory rendered for a query within ``max_tokens`` (the text, never longer).
* ``notes``: the history's records, one line per unit (what is stored, in time order).

An MCP client (Claude Desktop, an IDE, an agent framework) starts it as a subprocess::

    {"command": "flexamem", "args": ["mcp", "--db", "/path/memory.db", "--history", "me"]}
"""

from __future__ import annotations

import functools
from typing import Any

from flexamem.errors import FlexaMemError, InvalidInputError
from flexamem.memory import Memory
from flexamem.render.renderer import MODES

INSTRUCTIONS = (
    "FlexA-Mem is a long-term memory. Call `remember` with what should be kept (verbatim), and `recall` "
    "with a question to get what the memory holds about it within max_tokens."
)


def recall_budget(max_tokens: int, query_tokens: int) -> int:
    """The render budget whose allowance (0.95 x budget less the query) is at most ``max_tokens``."""
    return max(1, ((max_tokens + query_tokens) * 100) // 95)


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
    def recall(query: str, max_tokens: int = 2000, mode: str = "auto") -> str:
        """What the memory holds about `query`, within `max_tokens` tokens (mode: auto, pieces or units)."""
        if mode not in MODES:
            raise InvalidInputError(f"mode must be one of {', '.join(MODES)}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidInputError("max_tokens must be a positive whole number")
        if len(mem) == 0:
            return "(the memory is empty)"
        budget = recall_budget(max_tokens, mem.counter.count(query) if isinstance(query, str) else 0)
        r = mem.render(query, budget, mode=mode)
        return r.text

    @server.tool()
    def notes() -> list[str]:
        """The stored units, oldest first: `label · date: record`."""
        return [f"{n.label} · {n.date or n.kind}: {n.record}" for n in mem.notes()]

    return server


def run_stdio(db: str, history: str = "default") -> None:
    """Serve ``db``'s ``history`` over stdin/stdout until the client closes it."""
    with Memory(db, history=history) as mem:
        build_server(mem).run("stdio")
