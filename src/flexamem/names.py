"""How agent sessions are named in a store: one home for the rule.

An agent session of history ``h`` is stored as history ``h/agent:<session_id>`` (``agent:<session_id>``
under the default history), with ``h`` recorded as its parent, so a drop of ``h`` deletes exactly its
own sessions. No conversation history may take a name of that form: a name starting with ``agent:`` or
holding ``/agent:`` is refused for a new history (one an earlier version stored under such a name
still opens).
"""

from __future__ import annotations

MARK = "agent:"


def session_prefix(parent: str) -> str:
    """What the store names of ``parent``'s agent sessions start with."""
    return MARK if parent == "default" else f"{parent}/{MARK}"


def session_history(parent: str, session_id: str) -> str:
    """The store name of agent session ``session_id`` of history ``parent``."""
    return session_prefix(parent) + session_id


def reserved(name: str) -> bool:
    """Whether ``name`` has the form of an agent session's store name."""
    return name.startswith(MARK) or f"/{MARK}" in name
