"""What the routes of one app share: the open histories (an LRU over one store), the key file, the
metrics, the record writer, and the admission of writes. ``create_app`` makes one ``ServerState`` and
hands it to each router, so two apps in one process share nothing."""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from flexamem.agent import AgentSession
from flexamem.errors import InvalidInputError, NotFoundError, ServerBusyError
from flexamem.memory import Memory, open_store
from flexamem.profiles import DEFAULT
from flexamem.profiles import profile as named_profile
from flexamem.server.admission import Admission, text_chars
from flexamem.server.ingest import OffloadedEmbedder
from flexamem.server.keys import AuthThrottle, KeyFile
from flexamem.server.metrics import Metrics, timed
from flexamem.server.settings import DEFAULT_MAX_OPEN, ServerConfig
from flexamem.write.default_embed import default_embedder, endpoint_chosen
from flexamem.write.embed import Embedder
from flexamem.write.records import RecordWriter

T = TypeVar("T")


class Memories:
    """One store, and the ``Memory`` of each (tenant, history) a request used, kept open for the next
    request: at most ``max_open`` of them, the least recently used dropped first (it is only a cache of
    the store: reopening reads the history back)."""

    def __init__(
        self,
        db: str,
        max_open: int = DEFAULT_MAX_OPEN,
        embedder: Embedder | None = None,
        writer: RecordWriter | None = None,
        profile: str | None = None,
    ) -> None:
        if max_open < 1:
            raise InvalidInputError("max_open must be at least 1")
        self.profile = named_profile(DEFAULT if profile is None else profile).name
        self.store = open_store(db)
        self.max_open = max_open
        self.embedder = embedder
        self.writer = writer
        self._open: OrderedDict[str, Memory] = OrderedDict()
        self._lock = threading.Lock()
        self.evicted = 0

    def _key(self, tenant: str, history: str, profile: str | None) -> tuple[str, str, str]:
        """The history's id, its profile's name and its key among the open ones."""
        hid = f"{tenant}/{history}"
        name = self.profile if profile is None else named_profile(profile).name
        return hid, name, hid if name == self.profile else f"{hid}#{name}"

    def get(self, tenant: str, history: str, profile: str | None = None) -> Memory:
        """The tenant's history rendered with ``profile`` (None: the server's), opened once per profile."""
        hid, name, key = self._key(tenant, history, profile)
        with self._lock:
            mem = self._open.get(key)
            if mem is not None:
                self._open.move_to_end(key)
                return mem
        mem = Memory(store=self.store, history=hid, embedder=self.embedder, writer=self.writer, profile=name)
        with self._lock:  # opened outside the lock
            mem = self._open.setdefault(key, mem)  # a racing request may have opened it first
            self._open.move_to_end(key)
            while len(self._open) > self.max_open:
                self._open.popitem(last=False)
                self.evicted += 1
            return mem

    @property
    def open_count(self) -> int:
        return len(self._open)

    def existing(self, tenant: str, history: str, profile: str | None = None) -> Memory:
        """The tenant's history, which exists when it holds notes or agent sessions (404 otherwise)."""
        self._check(tenant, history)  # a probe of a missing name keeps no Memory open
        return self.get(tenant, history, profile)

    def read(self, tenant: str, history: str, profile: str | None, use: Callable[[Memory], T]) -> T:
        """``use(memory)`` on the tenant's existing history (404 otherwise), for a use that catches the
        view up with the store first (a render, a search). A history this worker holds open, and found
        stored when it last read it, is not looked up before: the use's own catch-up (one read of the
        history's head) finds it gone when it was deleted meanwhile, through any worker, and the answer
        is 404 all the same. One read a warm render instead of two."""
        key = self._key(tenant, history, profile)[2]
        with self._lock:
            held = self._open.get(key)
            if held is not None:
                self._open.move_to_end(key)  # the most recently used
        if held is None or held.core.epoch is None:
            return use(self.existing(tenant, history, profile))
        out = use(held)
        if held.core.epoch is None:  # gone since this worker last read it: what it rendered is not shown
            self._check(tenant, history)
        return out

    def _check(self, tenant: str, history: str) -> None:
        hid = f"{tenant}/{history}"
        if self.store.history_kind(hid) is None and not self.store.sessions(hid):
            raise NotFoundError(f"no history {history!r}")

    def histories(self, tenant: str) -> list[dict[str, Any]]:
        prefix = f"{tenant}/"
        return [
            {"history": h[len(prefix) :], "kind": kind, "notes": self.store.note_count(h)}
            for h, kind in self.store.histories()
            if h.startswith(prefix)
        ]

    def forget(self, tenant: str, history: str) -> None:
        hid = f"{tenant}/{history}"
        with self._lock:
            for key in [k for k in self._open if k == hid or k.startswith(hid + "#")]:
                del self._open[key]


@dataclass
class ServerState:
    """One app's shared state (``ServerState.open(config)``), and what several routes do with it."""

    config: ServerConfig
    keys: KeyFile
    throttle: AuthThrottle
    memories: Memories
    metrics: Metrics
    writer: RecordWriter | None = None
    """The record writer (``records='llm'``), or None for the store's own rule writer."""
    offloaded: OffloadedEmbedder | None = None
    """The embedding process of writes (``offload_writes``), warmed and closed with the app."""
    admission: Admission = field(init=False)
    """Which writes this worker takes (``max_pending_writes``, ``write_target``: server/admission.py)."""

    def __post_init__(self) -> None:
        c = self.config
        self.admission = Admission(c.max_pending_writes, c.write_target, self.offloaded, c.write_wait)

    @classmethod
    def open(cls, config: ServerConfig) -> ServerState:
        """The state serving ``config.db`` to the tenants of ``config.keys`` (checked first)."""
        keys = KeyFile(config.keys)
        throttle = AuthThrottle(config.auth_burst, config.auth_rate)
        if config.body_timeout <= 0:
            raise InvalidInputError("body_timeout must be more than 0 seconds")
        if config.keep_alive_requests < 0:
            raise InvalidInputError("keep_alive_requests must be 0 (never closed) or more")
        writer = None
        if config.records == "llm":
            from flexamem.llm.config import load_config
            from flexamem.write.llm_writer import LLMWriter

            endpoint = load_config()
            if endpoint is None:
                raise InvalidInputError("records='llm' needs an endpoint: FLEXAMEM_LLM_BASE_URL and FLEXAMEM_LLM_MODEL")
            writer = LLMWriter(endpoint.client())
        if endpoint_chosen():  # an embeddings endpoint: the forward runs there, nothing to move off the worker
            default_embedder()  # its configuration checked at start, not at the first request
        offload = config.offload_writes and not endpoint_chosen()
        offloaded = OffloadedEmbedder(nice=config.write_nice, processes=config.embed_processes) if offload else None
        memories = Memories(config.db, config.max_open, offloaded, writer, config.profile)
        memories.store.head_key = keys.head_secret()  # heads signed outside the database's reach
        return cls(config, keys, throttle, memories, Metrics(), writer, offloaded)

    def opened(self, t: str, history: str, must_exist: bool = False) -> Memory:
        """The tenant's history, kept open (``must_exist``: 404 when it holds nothing, as for a name another
        tenant holds)."""
        memories, metrics = self.memories, self.metrics
        before = memories.evicted
        mem = memories.existing(t, history) if must_exist else memories.get(t, history)
        metrics.open.set(memories.open_count)
        if memories.evicted > before:
            metrics.evicted.inc(memories.evicted - before)
        return mem

    def session(self, t: str, history: str, sid: str) -> AgentSession:
        """Agent session ``sid`` of the tenant's history (404 when either does not exist)."""
        mem = self.opened(t, history, must_exist=True)
        if sid not in mem.sessions():
            raise NotFoundError(f"no agent session {sid!r} in history {history!r}")
        return mem.agent(session_id=sid)

    def count_llm_tokens(self, t: str, mem: Memory, units: list[str]) -> None:
        """The model tokens the record writer spent on the notes this write stored (calls answered from
        the cache cost none); read from the store's call log, so no worker counts another's."""
        if self.writer is None or not units:
            return
        seqs = {mem.core.history.unit_ids[u] for u in units}
        tokens = sum(  # one indexed read of this write's calls, not the history's whole call log
            c.prompt_tokens + c.completion_tokens
            for c in mem.store.llm_calls(mem.history_id, start=min(seqs))
            if c.seq in seqs and not c.cached
        )
        if tokens:
            self.metrics.llm_tokens.labels(t).inc(tokens)

    @contextlib.contextmanager
    def a_write(self, body: Any = None) -> Iterator[None]:
        """One write admitted (or refused at once with ``ServerBusyError``: no write waits unbounded),
        timed, and bounded by ``write_wait``; ``body``: the request's JSON, whose text predicts the
        write's embedding work."""
        metrics = self.metrics
        try:
            with self.admission.admitted(text_chars(body)):
                metrics.backlog.inc()
                try:
                    with timed(metrics.write_seconds):
                        yield
                finally:
                    metrics.backlog.dec()
        except ServerBusyError:  # refused at once, or its vectors were not back within its wait: nothing stored
            metrics.refused_writes.inc()
            raise
