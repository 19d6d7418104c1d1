"""``Memory`` at a URL: the library's API over ``flexamem serve``, sync and async.

    mem = fm.Memory("https://memory.example.com", key=os.environ["FLEXAMEM_API_KEY"], history="ada")
    mem.add_session(turns, session_id="s1", date="8 May 2023")
    r = mem.render("When did Ada move?", budget=4096)          # the same Rendering a local Memory gives
    agent = mem.agent(task="...", budget=8000)
    agent.step(action, observation); agent.messages()

Several servers of one PostgreSQL store may be named, comma-separated: calls go to the first that
answers and move on when one cannot be reached. What is computed stays on the server (embeddings,
rankings, records); answers come back as the library's own types (:class:`Rendering`, :class:`Note`,
:class:`Hit`, :class:`AgentContext`) and errors as its own exceptions. Each method is one
:class:`Call`, sent by the sync or the async side of the transport: the twins share everything else.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from flexamem.agent import AgentContext, check_resumed
from flexamem.chat import Message
from flexamem.client.http import Call, Transport
from flexamem.config import ClientSettings, Settings
from flexamem.digests import Head
from flexamem.errors import InvalidInputError, NotFoundError
from flexamem.memory import Memory, check_request_id
from flexamem.notes import Note, Turn, note_from_json
from flexamem.profiles import DEFAULT, Profile
from flexamem.profiles import profile as named_profile
from flexamem.render.renderer import RenderOptions
from flexamem.render.result import Hit, Rendering, rendering_from_json
from flexamem.store.base import Erasure, Store
from flexamem.text import clean_field, clean_text
from flexamem.tokens import TokenCounter, counter
from flexamem.write.embed import Embedder
from flexamem.write.records import Progress, RecordWriter
from flexamem.write.units import parse_turns

T = TypeVar("T")
NOTES_PAGE = 500  # notes per request when all of them are read
KEY_ENV = "FLEXAMEM_API_KEY"


def _turn(t: Mapping[str, Any] | Turn) -> dict[str, Any]:
    if isinstance(t, Turn):
        return {k: v for k, v in (("speaker", t.speaker), ("text", t.text), ("id", t.id), ("role", t.role)) if v}
    if not isinstance(t, Mapping):
        raise InvalidInputError(f"a turn must be a dict with 'speaker' and 'text', got {type(t).__name__}")
    return dict(t)


def _turns(turns: Iterable[Mapping[str, Any] | Turn]) -> list[dict[str, Any]]:
    if isinstance(turns, str | bytes | Mapping) or not isinstance(turns, Iterable):
        raise InvalidInputError("turns must be a list of {'speaker', 'text'} dicts")
    return [_turn(t) for t in turns]


def _date(date: Any) -> Any:
    return date.isoformat() if hasattr(date, "isoformat") else date


def _written(request_id: str | None) -> dict[str, str]:
    """The Idempotency-Key header of a write: the caller's request id, else a new one."""
    return {"Idempotency-Key": check_request_id(request_id) or uuid.uuid4().hex}


class RemoteMemory(Memory):
    """A :class:`Memory` whose store is a FlexA-Mem server (``fm.Memory("https://...", key=...)``).

    Args:
        path: the server's URL, or several servers of one store, comma-separated.
        history: the history of the key's tenant this object reads and writes.
        profile: a profile name (:mod:`flexamem.profiles`) sent with every render: the server renders
            with it (its mode when none is given); without it, the server's profile.
        key: the API key (default: ``FLEXAMEM_API_KEY``).
        client: timeouts and retries (:class:`~flexamem.config.ClientSettings`).

    The server holds the settings, the record writer and the embedder: passing them here is refused.
    """

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        history: str = "default",
        settings: Settings | None = None,
        profile: str | None = None,
        writer: RecordWriter | None = None,
        embedder: Embedder | None = None,
        store: Store | None = None,
        read_only: bool = False,
        key: str | None = None,
        client: ClientSettings | None = None,
    ) -> None:
        self.profile: Profile = named_profile(DEFAULT if profile is None else profile)
        self._send_profile = profile is not None  # a named profile is sent with every render
        self.overrides: dict[str, Any] = {}
        given = {"settings": settings, "writer": writer, "embedder": embedder, "store": store}
        for name, value in given.items():
            if value is not None:
                raise InvalidInputError(f"{name}= is the server's to choose: a memory at a URL takes none")
        if read_only:
            raise InvalidInputError("read_only= is not offered for a memory at a URL (give the key a read-only tenant)")
        if client is not None and not isinstance(client, ClientSettings):
            raise InvalidInputError(f"client must be a ClientSettings, got {type(client).__name__}")
        urls = [u.strip().rstrip("/") for u in str(path).split(",") if u.strip()]
        if not urls or not all(u.startswith(("http://", "https://")) for u in urls):
            raise InvalidInputError(f"{path!r} is not a server URL (http:// or https://, comma-separated)")
        key = key if key is not None else os.environ.get(KEY_ENV)
        if not isinstance(key, str) or not key.strip():
            raise InvalidInputError(f"a memory at a URL needs an API key: key=... or {KEY_ENV}")
        if not isinstance(history, str) or not history.strip():
            raise InvalidInputError(f"history must be a non-empty string, got {history!r}")
        self.history_id = history.strip()
        self.counter: TokenCounter = counter()  # counting is local and exact (o200k), as on the server
        self.urls = urls
        self.http = Transport(urls, key.strip(), client or ClientSettings())
        self._base = f"/v1/histories/{quote(self.history_id, safe='')}"

    # -- what only a local memory has ------------------------------------------------------------------
    def _local_only(self, what: str) -> InvalidInputError:
        return InvalidInputError(f"{what} is not available for a memory at a URL (it lives on the server)")

    @property
    def settings(self) -> Settings:
        raise self._local_only("settings")

    @settings.setter
    def settings(self, value: Settings) -> None:
        raise self._local_only("settings")

    @property
    def embedder(self) -> Embedder:
        raise self._local_only("the embedder")

    @property
    def history(self) -> Any:
        raise self._local_only("the in-memory history view")

    @property
    def renderer(self) -> Any:
        raise self._local_only("the renderer")

    def llm_usage(self) -> dict[str, int]:
        raise self._local_only("llm_usage() (the server's /metrics counts model tokens per tenant)")

    def export(self, out: Any) -> int:
        raise self._local_only("export() (export where the store is: flexamem export --db)")

    def __getattr__(self, name: str) -> Any:
        """What a local Memory holds as attributes (its store, history core, record writer): refused
        by name, as the properties above are, instead of an AttributeError about a missing attribute."""
        if name in ("store", "core", "writer"):
            raise self._local_only(f"mem.{name}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- lifecycle ---------------------------------------------------------------------------------------
    def sync(self) -> int:
        """Nothing to catch up with: every call reads the server's store. Returns 0."""
        return 0

    def close(self) -> None:
        self.http.close()

    async def aclose(self) -> None:
        await self.http.aclose()

    def __enter__(self) -> RemoteMemory:
        return self

    def __len__(self) -> int:
        return self.http.run(Call("GET", self._base, lambda d: int(d["notes"]), missing=lambda: 0))

    def histories(self) -> list[dict[str, Any]]:
        """The key's tenant's histories on the server: ``{"history", "kind", "notes"}`` each."""
        return self.http.run(Call("GET", "/v1/histories", lambda d: [dict(h) for h in d]))

    # -- writing -----------------------------------------------------------------------------------------
    def _session_call(
        self, turns: Iterable[Mapping[str, Any] | Turn], session_id: str | None, date: Any, request_id: str | None
    ) -> Call[list[str]]:
        body = {"turns": _turns(turns), "session_id": session_id, "date": _date(date)}
        return Call("POST", self._base + "/sessions", lambda d: list(d["units"]), body, headers=_written(request_id))

    def add_session(
        self,
        turns: Iterable[Mapping[str, Any] | Turn],
        *,
        session_id: str | None = None,
        date: Any = None,
        request_id: str | None = None,
    ) -> list[str]:
        return self.http.run(self._session_call(turns, session_id, date, request_id))

    async def aadd_session(
        self,
        turns: Iterable[Mapping[str, Any] | Turn],
        *,
        session_id: str | None = None,
        date: Any = None,
        request_id: str | None = None,
    ) -> list[str]:
        return await self.http.arun(self._session_call(turns, session_id, date, request_id))

    def add_messages(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        session_id: str | None = None,
        date: Any = None,
        request_id: str | None = None,
    ) -> list[str]:
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Iterable):
            raise InvalidInputError("messages must be a list of chat messages ({'role': ..., 'content': ...})")
        body = {"messages": list(messages), "session_id": session_id, "date": _date(date)}
        call = Call("POST", self._base + "/messages", lambda d: list(d["units"]), body, headers=_written(request_id))
        return self.http.run(call)

    def add_sessions(
        self,
        sessions: Iterable[Mapping[str, Any]],
        *,
        progress: Progress | None = None,
        request_id: str | None = None,
    ) -> list[list[str]]:
        if isinstance(sessions, str | bytes | Mapping) or not isinstance(sessions, Iterable):
            raise InvalidInputError("sessions must be a list of sessions")
        body = []
        for i, s in enumerate(sessions):
            if not isinstance(s, Mapping) or "turns" not in s:
                raise InvalidInputError(f"session {i}: expected a mapping with 'turns'")
            body.append({"turns": _turns(s["turns"]), "session_id": s.get("session_id"), "date": _date(s.get("date"))})
        headers = _written(request_id)
        if not body:  # nothing to write, as locally (the server takes no empty batch)
            return []
        read = lambda d: [list(u) for u in d["sessions"]]  # noqa: E731
        out = self.http.run(Call("POST", self._base + "/batch", read, {"sessions": body}, headers=headers))
        if progress is not None:  # one request: the whole batch is done at once
            total = 2 * sum(len(u) for u in out)
            progress(total, total)
        return out

    def drop(self) -> bool:
        return self.http.run(Call("DELETE", self._base, lambda d: bool(d["dropped"]), missing=lambda: False))

    def drop_session(self, session_id: str) -> bool:
        path = f"{self._base}/agents/{quote(str(session_id), safe='')}"
        return self.http.run(Call("DELETE", path, lambda d: bool(d["dropped"]), missing=lambda: False))

    def erase(
        self, *, turn: str | None = None, session: str | None = None, reason: str = "", marker: bool = True
    ) -> Erasure:
        if (turn is None) == (session is None):
            raise InvalidInputError("erase takes one of turn= or session=")
        body = {"turn": turn, "session": session, "reason": reason, "marker": marker}
        return self.http.run(Call("POST", self._base + "/erase", erasure_from_json, body))

    def _check_session(self, turns: Sequence[Mapping[str, Any] | Turn], session_id: Any, date: Any) -> None:
        """Refuse here what the server would refuse of the session, before anything is sent."""
        parse_turns(_turns(turns))
        for name, value in (("session_id", session_id), ("date", _date(date))):
            if value is not None:
                clean_field(value, name)

    def write_settings(self) -> dict[str, Any]:
        raise self._local_only("write_settings (flexamem histories on the server's store shows them)")

    def erasures(self) -> list[Erasure]:
        read = lambda d: [erasure_from_json(e) for e in d]  # noqa: E731
        return self.http.run(Call("GET", self._base + "/erasures", read, missing=list))

    # -- reading -----------------------------------------------------------------------------------------
    def verify(self, head: Head | Mapping[str, Any] | Sequence[Head | Mapping[str, Any]] | None = None) -> list[str]:
        if head is None:
            return self.http.run(Call("GET", self._base + "/verify", lambda d: list(d["problems"]), missing=list))
        heads = [h.as_json() for h in self._kept_heads(head).values()]  # checked here as locally
        return self.http.run(Call("POST", self._base + "/verify", lambda d: list(d["problems"]), {"heads": heads}))

    def head(self) -> Head:
        return self.http.run(Call("GET", self._base + "/head", Head.from_json))

    def sessions(self) -> list[str]:
        return self.http.run(Call("GET", self._base + "/agents", lambda d: [str(s) for s in d], missing=list))

    def notes(self, start: int = 0, stop: int | None = None) -> list[Note]:
        out: list[Note] = []

        def read(d: list[dict[str, Any]]) -> list[Note]:
            return [note_from_json(n["exact"], n["raw"]) for n in d]

        def none() -> list[Note]:
            return []

        while True:
            first = start + len(out)
            size = NOTES_PAGE if stop is None else min(NOTES_PAGE, stop - first)
            if size <= 0:
                return out
            params = {"start": first, "limit": size}
            page = self.http.run(Call("GET", self._base + "/notes-full", read, params=params, missing=none))
            out += page
            if len(page) < size:
                return out

    def note(self, unit_id: str) -> Note:
        if not isinstance(unit_id, str):
            raise InvalidInputError(f"unit ids must be strings, got {type(unit_id).__name__}")
        if not unit_id:  # no path names it: the answer a local memory gives
            raise NotFoundError(f"no unit {unit_id!r} in history {self.history_id!r}")
        path = f"{self._base}/notes/{quote(unit_id, safe='')}"
        return self.http.run(Call("GET", path, lambda d: note_from_json(d["exact"], d["raw"])))

    def _render_call(
        self,
        query: str,
        budget: int,
        mode: str | None,
        prompt: str,
        options: RenderOptions | None,
        query_vector: Any,
        order: Sequence[str] | None,
    ) -> Call[Rendering]:
        mode = mode if mode is not None else self.profile.mode
        if options is not None or query_vector is not None:
            raise InvalidInputError("options= and query_vector= are not sent to a server (render with its settings)")
        if order is not None and (isinstance(order, str | bytes) or not isinstance(order, Sequence)):
            raise InvalidInputError("order must be a list of unit ids or labels")
        _, _, allowance = self._render_args(query, budget, mode, prompt, None, None)  # refused here as locally
        body = {"query": query, "budget": int(budget), "mode": mode, "prompt": prompt}
        body["order"] = list(order) if order is not None else None
        if self._send_profile:
            body["profile"] = self.profile.name

        def empty() -> Rendering:  # a history that holds nothing yet: an empty memory, as a local one renders
            return Rendering(text="", tokens=0, allowance=allowance, mode=mode, profile=self.profile.name)

        # a 404 is the history's when the order names no unit (else maybe a unit's: raised, as locally)
        return Call("POST", self._base + "/render", rendering_from_json, body, missing=None if order else empty)

    def render(
        self,
        query: str,
        budget: int,
        *,
        mode: str | None = None,
        prompt: str = "",
        options: RenderOptions | None = None,
        query_vector: Any = None,
        order: Sequence[str] | None = None,
    ) -> Rendering:
        return self.http.run(self._render_call(query, budget, mode, prompt, options, query_vector, order))

    async def arender(self, query: str, budget: int, **kwargs: Any) -> Rendering:
        call = self._render_call(
            query,
            budget,
            kwargs.pop("mode", None),
            kwargs.pop("prompt", ""),
            kwargs.pop("options", None),
            kwargs.pop("query_vector", None),
            kwargs.pop("order", None),
        )
        if kwargs:
            raise InvalidInputError(f"render takes no {', '.join(sorted(kwargs))}")
        return await self.http.arun(call)

    def search(self, query: str, *, mode: str = "auto", limit: int = 10, query_vector: Any = None) -> list[Hit]:
        if query_vector is not None:
            raise InvalidInputError("query_vector= is not sent to a server")
        self._search_query(query, mode, limit, None)  # refused here as locally, whether the history exists or not
        read = lambda d: [Hit(h["seq"], h["unit_id"], h["block"], h["turn_id"], h["text"]) for h in d]  # noqa: E731
        body = {"query": query, "mode": mode, "limit": limit}
        return self.http.run(Call("POST", self._base + "/search", read, body, missing=list))  # no history: no hits

    # -- agents ------------------------------------------------------------------------------------------
    def agent(  # type: ignore[override]
        self,
        task: str | None = None,
        *,
        budget: int | None = None,
        system: str = "",
        session_id: str | None = None,
    ) -> RemoteAgentSession:
        if task is None or budget is None:
            if session_id is None:
                raise InvalidInputError(
                    "give task= and budget= to start an agent session, or session_id= to resume one"
                )
            path = f"{self._base}/agents/{quote(clean_text(session_id, 'session_id').strip(), safe='')}"
            session = self.http.run(Call("GET", path, lambda d: RemoteAgentSession(self, d)))
            check_resumed(session.session_id, task, budget, session.task, session.budget)  # as a local resume
            return session
        sid = session_id if session_id is not None else uuid.uuid4().hex[:12]  # a retried start resumes it
        body = {"task": task, "budget": budget, "system": system, "session_id": sid}
        return self.http.run(Call("POST", self._base + "/agents", lambda d: RemoteAgentSession(self, d), body))


class RemoteAgentSession:
    """An agent session on a server: :class:`~flexamem.agent.AgentSession`'s calls, over HTTP.

    Every step carries a step id (the caller's, or a new one), so a retried step is recorded once."""

    def __init__(self, mem: RemoteMemory, data: Mapping[str, Any]) -> None:
        self.mem = mem
        self.session_id: str = data["session_id"]
        self.task: str = data["task"]
        self.system: str = data["system"]
        self.budget: int = int(data["budget"])
        self.step_count: int = int(data["steps"])
        self.message_count: int = int(data["messages"])
        self._path = f"{mem._base}/agents/{quote(self.session_id, safe='')}"

    def _seen(self, data: Mapping[str, Any]) -> int:
        self.step_count = max(self.step_count, int(data["step"]))
        self.message_count = int(data.get("messages", self.message_count))
        return int(data["step"])

    def _step_call(
        self,
        action: str,
        observation: str,
        actor: str,
        messages: Sequence[Message] | None,
        step_id: str | None,
    ) -> Call[int]:
        body = {
            "action": action,
            "observation": observation,
            "actor": actor,
            "messages": list(messages) if messages is not None else None,
            "step_id": step_id if step_id is not None else uuid.uuid4().hex,
        }
        return Call("POST", self._path + "/steps", self._seen, body)

    def step(
        self,
        action: str,
        observation: str = "",
        *,
        actor: str = "assistant",
        messages: Sequence[Message] | None = None,
        step_id: str | None = None,
    ) -> int:
        return self.mem.http.run(self._step_call(action, observation, actor, messages, step_id))

    async def astep(
        self,
        action: str,
        observation: str = "",
        *,
        actor: str = "assistant",
        messages: Sequence[Message] | None = None,
        step_id: str | None = None,
    ) -> int:
        return await self.mem.http.arun(self._step_call(action, observation, actor, messages, step_id))

    def _context_call(
        self, options: RenderOptions | None, mode: str, order: Sequence[str] | None
    ) -> Call[AgentContext]:
        if options is not None or order is not None:
            raise InvalidInputError("options= and order= are not sent to a server (contexts use its settings)")

        def read(d: Mapping[str, Any]) -> AgentContext:
            return AgentContext(
                messages=list(d["messages"]),
                tokens=int(d["tokens"]),
                ceiling=int(d["ceiling"]),
                pass_through=not d["memory_active"],
                cut=bool(d.get("cut", False)),
                notes=int(d.get("notes", 0)),
            )

        return Call("GET", self._path + "/context", read, params={"mode": mode})

    def erase(self, step: int, *, reason: str = "", marker: bool = True) -> Erasure:
        """Erase step ``step`` (as :meth:`flexamem.AgentSession.erase`)."""
        body = {"agent": self.session_id, "step": step, "reason": reason, "marker": marker}
        return self.mem.http.run(Call("POST", self.mem._base + "/erase", erasure_from_json, body))

    def head(self) -> Head:
        """This session's head (as :meth:`flexamem.AgentSession.head`)."""
        return self.mem.http.run(Call("GET", self._path + "/head", Head.from_json))

    def context(
        self, options: RenderOptions | None = None, mode: str = "auto", order: Sequence[str] | None = None
    ) -> AgentContext:
        return self.mem.http.run(self._context_call(options, mode, order))

    async def acontext(
        self, options: RenderOptions | None = None, mode: str = "auto", order: Sequence[str] | None = None
    ) -> AgentContext:
        return await self.mem.http.arun(self._context_call(options, mode, order))

    def messages(self, options: RenderOptions | None = None, mode: str = "auto") -> list[Message]:
        return self.context(options, mode).messages


def erasure_from_json(data: Mapping[str, Any]) -> Erasure:
    """An :class:`Erasure` from its JSON (``Erasure.as_json``, as a server answers it)."""
    return Erasure(
        n=int(data["n"]), kind=str(data["kind"]), ids=tuple(str(i) for i in data["ids"]), reason=str(data["reason"]),
        at=float(data["at"]), notes=tuple(int(str(u)[1:]) - 1 for u in data["units"]),
        steps=tuple(int(x) for x in data["steps"]), digest=str(data["digest"]),
    )  # fmt: skip
