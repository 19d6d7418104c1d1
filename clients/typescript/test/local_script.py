"""Run test/script.json on a local SQLite ``fm.Memory`` and print every answer as JSON, in the shapes the
server sends (the TypeScript test runs the same script over HTTP and compares the two, byte for byte).

    python test/local_script.py DB < test/script.json
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import flexamem as fm
from flexamem.agent import AgentSession
from flexamem.notes import note_exact
from flexamem.render.result import rendering_json


def unsalted(exact: dict[str, Any]) -> dict[str, Any]:
    """A note without its digest: each store salts its own digests, every other field is the same."""
    return {k: v for k, v in exact.items() if k != "digest"}


def erasure(e: fm.Erasure) -> dict[str, Any]:
    """An erasure without its time and (salted) digest."""
    return {k: v for k, v in e.as_json().items() if k not in ("at", "digest")}


def context(agent: AgentSession, mode: str) -> dict[str, Any]:
    c = agent.context(mode=mode)
    return {"messages": c.messages, "tokens": c.tokens, "ceiling": c.ceiling, "pass_through": c.pass_through,
            "cut": c.cut, "notes": c.notes}  # fmt: skip


def agent_json(agent: AgentSession) -> dict[str, Any]:
    return {"session_id": agent.session_id, "task": agent.task, "system": agent.system, "budget": agent.budget,
            "steps": len(agent.steps)}  # fmt: skip


def run(mem: fm.Memory, script: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    agent: AgentSession | None = None
    for s in script:
        op = s["op"]
        if op == "addSession":
            value: Any = mem.add_session(s["turns"], session_id=s.get("session_id"), date=s.get("date"))
        elif op == "addMessages":
            value = mem.add_messages(s["messages"], session_id=s.get("session_id"), date=s.get("date"))
        elif op == "addSessions":
            value = mem.add_sessions(s["sessions"])
        elif op == "render":
            prompt, order = s.get("prompt", ""), s.get("order")
            value = rendering_json(mem.render(s["query"], s["budget"], mode=s.get("mode"), prompt=prompt, order=order))
        elif op == "search":
            hits = mem.search(s["query"], mode=s.get("mode", "auto"), limit=s["limit"])
            value = [dataclasses.asdict(h) for h in hits]
        elif op == "notes":
            notes = mem.notes(s.get("start", 0), s.get("stop"))
            value = [{"exact": unsalted(note_exact(n, raw=False)), "raw": n.raw} for n in notes]
        elif op == "note":
            n = mem.note(s["unit"])
            value = {"exact": unsalted(note_exact(n, raw=False)), "raw": n.raw}
        elif op == "agent":
            agent = mem.agent(s["task"], budget=s["budget"], system=s["system"], session_id=s["session_id"])
            value = agent_json(agent)
        elif op == "resume":
            agent = mem.agent(session_id=s["session_id"])
            value = agent_json(agent)
        elif op == "step":
            assert agent is not None
            value = agent.step(s["action"], s["observation"])
        elif op == "context":
            assert agent is not None
            value = context(agent, s.get("mode", "auto"))
        elif op == "sessions":
            value = mem.sessions()
        elif op == "count":
            value = len(mem)
        elif op == "verify":
            value = mem.verify()
        elif op == "erase":
            value = erasure(mem.erase(turn=s["turn"], reason=s["reason"]))
        elif op == "erasures":
            value = [erasure(e) for e in mem.erasures()]
        elif op == "dropSession":
            value = mem.drop_session(s["session_id"])
        else:
            raise ValueError(f"unknown op {op!r}")
        out[s["name"]] = value
    return out


if __name__ == "__main__":
    memory = fm.Memory(sys.argv[1])
    print(json.dumps(run(memory, json.load(sys.stdin)), ensure_ascii=False))
    memory.close()
