"""The ``ChatModel`` seam and its one implementation: any OpenAI-compatible chat endpoint.

Why a thin ``httpx`` client and not the ``openai`` package: the writer needs its own retry policy
(exponential backoff with jitter, ``Retry-After`` honoured, no hidden second layer of retries), a
concurrency limit shared by threads, a response cache and token accounting around every call; with
``openai`` we would switch most of its machinery off and still carry its weight. ``/chat/completions``
is a small, stable protocol (hosted APIs, vLLM, llama.cpp's server, Ollama all speak it).

A call either returns a :class:`Completion` or raises :class:`~flexamem.errors.LLMError`; it never
returns a half answer. Retried: connection errors, timeouts, cut connections, 408/429/5xx and
bodies that are not the protocol's JSON. Not retried: other 4xx (a wrong key or model stays wrong).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from flexamem.errors import InvalidInputError, LLMError
from flexamem.llm.cache import ResponseCache, request_key
from flexamem.tokens import counter

if TYPE_CHECKING:
    import httpx

Message = dict[str, str]
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class ToolCall:
    """One function call a model asked for (arguments already decoded from their JSON)."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Completion:
    """One answer. Token counts come from the endpoint's ``usage`` (or are counted with o200k)."""

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool = False  # True when served from the response cache (nothing spent)
    attempts: int = 1
    tool_calls: tuple[ToolCall, ...] = ()  # only from ``complete_tools``


@runtime_checkable
class ChatModel(Protocol):
    """What the LLM writer and the evaluation reader/judge need from a model."""

    name: str  # how notes name their writer, e.g. "llm:qwen2.5"

    def complete(
        self, messages: Sequence[Message], *, max_tokens: int = 512, json_mode: bool = False
    ) -> Completion: ...

    async def acomplete(
        self, messages: Sequence[Message], *, max_tokens: int = 512, json_mode: bool = False
    ) -> Completion: ...


@runtime_checkable
class ToolModel(ChatModel, Protocol):
    """A chat model that can also be offered tools (OpenAI function schemas) and ask for calls."""

    def complete_tools(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], *, max_tokens: int = 512
    ) -> Completion: ...

    async def acomplete_tools(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], *, max_tokens: int = 512
    ) -> Completion: ...


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter: attempt ``k`` waits ``d/2 + uniform(0, d/2)`` with
    ``d = min(max_delay, base_delay * 2**k)``; a server's ``Retry-After`` is honoured up to ``max_delay``."""

    max_retries: int = 4
    base_delay: float = 0.5
    max_delay: float = 20.0
    time_limit: float | None = None
    """Seconds from the first attempt after which no retry is started (None: ``max_retries`` alone
    bounds them); the last wait is cut short to end at the limit, so a server back in time is used."""

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay)
        d = min(self.max_delay, self.base_delay * (2.0**attempt))
        return d / 2 + random.uniform(0, d / 2)

    def next_wait(self, attempt: int, started: float, retry_after: float | None = None) -> float | None:
        """The wait before the next try after attempt ``attempt`` (from 0) failed, or None when the
        retries are spent (``max_retries`` made, or ``time_limit`` passed since ``started``, a
        ``time.monotonic()``)."""
        if attempt >= self.max_retries:
            return None
        wait = self.delay(attempt, retry_after)
        if self.time_limit is not None:
            left = started + self.time_limit - time.monotonic()
            if left <= 0:
                return None
            wait = min(wait, left)
        return wait


class TransientError(Exception):
    """A transient failure of one attempt (an answer worth asking again for: 429, 5xx, a malformed
    body); ``retry_after``: the server's ``Retry-After`` in seconds, if it sent one."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


T = TypeVar("T")


def retried(
    attempt: Callable[[int], T],
    policy: RetryPolicy,
    connection_failed: Callable[[Exception], str],
    give_up: Callable[[str, int], Exception],
) -> T:
    """``attempt(n)`` (n from 0) until it returns, under ``policy``: after a :class:`TransientError`
    or an ``httpx.HTTPError`` (connection refused, timeouts, cut connections; ``connection_failed``
    gives the reason, or raises to stop at once) it is tried again after the policy's wait; when the
    retries are spent, ``give_up(last reason, attempts made)`` is raised. Any other error passes
    through at once. One retry loop for every HTTP client of a model (chat and embeddings)."""
    import httpx

    started = time.monotonic()
    n = 0
    while True:
        try:
            return attempt(n)
        except TransientError as exc:
            reason, retry_after = str(exc), exc.retry_after
        except httpx.HTTPError as exc:
            reason, retry_after = connection_failed(exc), None
        wait = policy.next_wait(n, started, retry_after)
        if wait is None:
            raise give_up(reason, n + 1)
        time.sleep(wait)
        n += 1


class OpenAICompatible:
    """A chat model behind ``{base_url}/chat/completions``.

    Args:
        base_url: e.g. ``http://127.0.0.1:8080/v1`` (llama.cpp) or a hosted API's ``/v1``.
        model: the model name the endpoint expects.
        api_key: sent as a bearer token; never printed (``repr`` masks it).
        timeout: seconds to wait for an answer (connecting has its own 10 s).
        retry: the backoff policy for transient failures.
        concurrency: at most this many calls in flight, across threads (and per event loop).
        cache: a :class:`ResponseCache` or a path for one; ``None`` disables caching.
        temperature: 0 by default, so a cached answer is the answer.
        liveness: called after a connection-level failure; a string it returns (e.g. "the local
            server exited with code -11, see LOG") ends the call at once with that reason instead of
            retrying a server that is gone (:class:`~flexamem.llm.local.LocalServer` supplies one).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        concurrency: int = 4,
        cache: ResponseCache | str | Path | None = None,
        temperature: float = 0.0,
        liveness: Callable[[], str | None] | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidInputError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not isinstance(model, str) or not model.strip():
            raise InvalidInputError("model name is empty")
        if concurrency < 1:
            raise InvalidInputError(f"concurrency must be at least 1, got {concurrency}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"llm:{model}"
        self._api_key = api_key or None
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.concurrency = concurrency
        self.cache = ResponseCache(cache) if isinstance(cache, (str, Path)) else cache
        self.temperature = temperature
        self.liveness = liveness
        self._slots = threading.BoundedSemaphore(concurrency)
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, asyncio.Semaphore]]
        self._async = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"OpenAICompatible(base_url={self.base_url!r}, model={self.model!r}, api_key=<{key}>)"

    # -- the request ---------------------------------------------------------------------------------
    def _payload(
        self,
        messages: Sequence[Mapping[str, Any]],
        max_tokens: int,
        json_mode: bool = False,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> dict[str, Any]:
        if not messages:
            raise InvalidInputError("no messages to send")
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [_wire_message(m) for m in messages],
            "max_tokens": max_tokens,
            "temperature": self.temperature,
        }
        if json_mode:
            payload["response_format"] = {"type": "json_object"}
        if tools:
            payload["tools"] = [dict(t) for t in tools]
        return payload

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _timeout(self) -> httpx.Timeout:
        import httpx

        return httpx.Timeout(self.timeout, connect=min(10.0, self.timeout))

    def _from_cache(self, key: str, payload: dict[str, Any]) -> Completion | None:
        if self.cache is None:
            return None
        hit = self.cache.get(key)
        if hit is None:
            return None
        text = hit[0]
        calls: tuple[ToolCall, ...] = ()
        if "tools" in payload:  # a tool answer is kept as {"text": ..., "tool_calls": [...]}
            kept = json.loads(text)
            text = kept["text"]
            calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in kept["tool_calls"])
        return Completion(text, self.model, hit[1], hit[2], cached=True, attempts=0, tool_calls=calls)

    def _parse(self, response: httpx.Response, payload: dict[str, Any], attempts: int) -> Completion:
        """A completion from a 200 response; ``TransientError`` for retryable failures, ``LLMError`` otherwise."""
        status = response.status_code
        if status in RETRY_STATUS or status >= 500:
            raise TransientError(f"HTTP {status}", retry_after_seconds(response.headers.get("retry-after")))
        if status >= 400:
            raise LLMError(f"{self.base_url} refused the request: HTTP {status}: {short_text(response.text)}")
        try:
            body = response.json()
            message = body["choices"][0]["message"]
            text = message["content"]
            if text is None and "tools" in payload:  # a reply that is only tool calls
                text = ""
            if not isinstance(text, str):
                raise TypeError("content is not a string")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise TransientError(f"malformed response body ({exc}): {short_text(response.text)}") from None
        calls: tuple[ToolCall, ...] = ()
        if "tools" in payload:
            names = {t["function"]["name"] for t in payload["tools"] if "function" in t}
            calls = tuple(_protocol_calls(message.get("tool_calls"), names)) or tuple(tool_calls_in_text(text, names))
        usage = body.get("usage") or {}
        tok = counter()
        prompt_tokens = usage.get("prompt_tokens")
        if not isinstance(prompt_tokens, int):
            prompt_tokens = sum(tok.count(str(m.get("content") or "")) + 4 for m in payload["messages"]) + 3
        completion_tokens = usage.get("completion_tokens")
        if not isinstance(completion_tokens, int):
            completion_tokens = tok.count(text)
        return Completion(text, self.model, prompt_tokens, completion_tokens, attempts=attempts, tool_calls=calls)

    def _connection_failed(self, exc: Exception) -> str:
        """The reason to retry after a connection-level failure, or raise at once when the server is gone."""
        dead = self.liveness() if self.liveness is not None else None
        if dead:
            raise LLMError(f"model {self.model!r} at {self.base_url}: {dead}") from None
        return f"{type(exc).__name__}: {exc}"

    def _give_up(self, reason: str, attempts: int) -> LLMError:
        return LLMError(f"model {self.model!r} at {self.base_url} failed after {attempts} attempts: {reason}")

    # -- sync ----------------------------------------------------------------------------------------
    def _http(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                import httpx

                limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
                self._client = httpx.Client(timeout=self._timeout(), limits=limits)
            return self._client

    def complete(self, messages: Sequence[Message], *, max_tokens: int = 512, json_mode: bool = False) -> Completion:
        """One chat completion, retried on transient failures, served from the cache when it can."""
        return self._call(self._payload(messages, max_tokens, json_mode))

    def complete_tools(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], *, max_tokens: int = 512
    ) -> Completion:
        """A completion offered ``tools``: its ``tool_calls`` are the protocol's, or, from endpoints that
        leave them in the text (llama.cpp with a chat template but no tool parser), the JSON calls found
        there (see :func:`tool_calls_in_text`)."""
        if not tools:
            raise InvalidInputError("no tools offered")
        return self._call(self._payload(messages, max_tokens, tools=tools))

    def _call(self, payload: dict[str, Any]) -> Completion:
        key = request_key(payload)
        cached = self._from_cache(key, payload)
        if cached is not None:
            return cached

        def attempt(n: int) -> Completion:
            with self._slots:
                response = self._http().post(f"{self.base_url}/chat/completions", json=payload, headers=self._headers())
            return self._parse(response, payload, n + 1)

        result = retried(attempt, self.retry, self._connection_failed, self._give_up)
        self._store(key, result, payload)
        return result

    def _store(self, key: str, result: Completion, payload: dict[str, Any]) -> None:
        if self.cache is not None:
            text = result.text
            if "tools" in payload:
                calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in result.tool_calls]
                text = json.dumps({"text": result.text, "tool_calls": calls}, ensure_ascii=False)
            self.cache.put(key, self.model, text, result.prompt_tokens, result.completion_tokens)

    # -- async ---------------------------------------------------------------------------------------
    def _async_http(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        import httpx

        loop = asyncio.get_running_loop()
        pair = self._async.get(loop)
        if pair is None:
            limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
            pair = (httpx.AsyncClient(timeout=self._timeout(), limits=limits), asyncio.Semaphore(self.concurrency))
            self._async[loop] = pair
        return pair

    async def acomplete(
        self, messages: Sequence[Message], *, max_tokens: int = 512, json_mode: bool = False
    ) -> Completion:
        """The async twin of :meth:`complete` (same retries, cache and limit, per event loop)."""
        return await self._acall(self._payload(messages, max_tokens, json_mode))

    async def acomplete_tools(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], *, max_tokens: int = 512
    ) -> Completion:
        """The async twin of :meth:`complete_tools`."""
        if not tools:
            raise InvalidInputError("no tools offered")
        return await self._acall(self._payload(messages, max_tokens, tools=tools))

    async def _acall(self, payload: dict[str, Any]) -> Completion:
        import httpx

        key = request_key(payload)
        cached = self._from_cache(key, payload)
        if cached is not None:
            return cached
        client, slots = self._async_http()
        started, attempt = time.monotonic(), 0
        while True:  # :func:`retried`'s loop, awaiting
            try:
                async with slots:
                    response = await client.post(
                        f"{self.base_url}/chat/completions", json=payload, headers=self._headers()
                    )
                result = self._parse(response, payload, attempt + 1)
            except TransientError as exc:
                reason, retry_after = str(exc), exc.retry_after
            except httpx.HTTPError as exc:
                reason, retry_after = self._connection_failed(exc), None
            else:
                self._store(key, result, payload)
                return result
            wait = self.retry.next_wait(attempt, started, retry_after)
            if wait is None:
                raise self._give_up(reason, attempt + 1)
            await asyncio.sleep(wait)
            attempt += 1

    async def aclose(self) -> None:
        """Close this event loop's connections (sync connections close with :meth:`close`)."""
        pair = self._async.pop(asyncio.get_running_loop(), None)
        if pair is not None:
            await pair[0].aclose()

    def forget_responses(self) -> None:
        """Empty the response cache (an erasure: see :meth:`ResponseCache.clear`)."""
        if self.cache is not None:
            self.cache.clear()

    def close(self) -> None:
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None


_WIRE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def _wire_message(m: Mapping[str, Any]) -> dict[str, Any]:
    """The protocol's fields of a message; a missing content is sent as "" (some servers refuse null)."""
    out = {k: m[k] for k in _WIRE_KEYS if k in m}
    if out.get("content") is None:
        out["content"] = ""
    return out


def _arguments(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


def _protocol_calls(raw: Any, names: set[str]) -> list[ToolCall]:
    calls = []
    for i, call in enumerate(raw if isinstance(raw, list) else []):
        fn = call.get("function") if isinstance(call, dict) else None
        args = _arguments(fn.get("arguments", {})) if isinstance(fn, dict) else None
        if isinstance(fn, dict) and fn.get("name") in names and args is not None:
            calls.append(ToolCall(str(call.get("id") or f"call_{i}"), str(fn["name"]), args))
    return calls


def tool_calls_in_text(text: str, names: set[str]) -> list[ToolCall]:
    """Calls written as JSON in a reply's text (``{"name": ..., "arguments": {...}}``, bare or inside
    ``<tool_call>`` tags, as Qwen/Hermes chat templates make models write them). Only ``names`` count;
    arguments may be an object or a JSON string of one; anything malformed is skipped."""
    calls: list[ToolCall] = []
    decoder, at = json.JSONDecoder(), text.find("{")
    while at >= 0:
        try:
            value, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at = text.find("{", at + 1)
            continue
        args = _arguments(value.get("arguments", {})) if isinstance(value, dict) else None
        if isinstance(value, dict) and value.get("name") in names and args is not None:
            calls.append(ToolCall(f"call_{len(calls)}", str(value["name"]), args))
        at = text.find("{", end)
    return calls


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header's seconds (None when absent or not a number)."""
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def short_text(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters (a server's error body in a message)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " …"


def parse_json_object(text: str) -> dict[str, Any]:
    """Strict: the whole answer must be one JSON object (a Markdown code fence around it is allowed)."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    value = json.loads(body)
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value
