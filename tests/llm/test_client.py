"""The OpenAI-compatible client against a real local HTTP server that misbehaves on cue."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from flexamem.errors import InvalidInputError, LLMError
from flexamem.llm import OpenAICompatible, ResponseCache, RetryPolicy, load_config
from flexamem.llm.client import ToolCall, ToolModel, tool_calls_in_text
from tests.llm.fake_server import FakeOpenAI

FAST = RetryPolicy(max_retries=3, base_delay=0.01, max_delay=0.05)
ASK = [{"role": "user", "content": "Say something about Lisbon."}]


@pytest.fixture()
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(slow_s=1.5) as s:
        yield s


def client(server: FakeOpenAI, **kw: object) -> OpenAICompatible:
    kw.setdefault("retry", FAST)
    return OpenAICompatible(server.url, "fake", **kw)  # type: ignore[arg-type]


def test_answer_and_usage(server: FakeOpenAI) -> None:
    c = client(server, api_key="sk-secret")
    out = c.complete(ASK, max_tokens=50)
    assert out.text.startswith("Say something") and out.attempts == 1 and not out.cached
    assert out.prompt_tokens > 0 and out.completion_tokens > 0
    assert server.requests[0]["auth"] == "Bearer sk-secret"
    assert server.requests[0]["body"]["max_tokens"] == 50 and server.requests[0]["body"]["temperature"] == 0.0
    assert "sk-secret" not in repr(c)


@pytest.mark.parametrize("fault", ["429", "500", "cut", "slow", "badbody"])
def test_transient_faults_are_retried(server: FakeOpenAI, fault: str) -> None:
    server.faults.extend([fault, fault])
    out = client(server, timeout=0.5).complete(ASK)
    assert out.attempts == 3
    assert out.text.startswith("Say something")


def test_gives_up_after_the_retries(server: FakeOpenAI) -> None:
    server.always = "500"
    with pytest.raises(LLMError, match="after 4 attempts: HTTP 500"):
        client(server).complete(ASK)
    assert len(server.requests) == 4


def test_refused_request_is_not_retried(server: FakeOpenAI) -> None:
    server.faults.append("401")
    with pytest.raises(LLMError, match="HTTP 401"):
        client(server).complete(ASK)
    assert len(server.requests) == 1


def test_no_server_is_a_clear_error() -> None:
    c = OpenAICompatible("http://127.0.0.1:9/v1", "fake", retry=RetryPolicy(1, 0.01, 0.01))
    with pytest.raises(LLMError, match="ConnectError"):
        c.complete(ASK)


def test_cache_makes_a_rerun_free(server: FakeOpenAI, tmp_path: Path) -> None:
    first = client(server, cache=tmp_path / "c.sqlite").complete(ASK)
    again = client(server, cache=tmp_path / "c.sqlite").complete(ASK)  # a new process would see the same
    assert len(server.requests) == 1
    assert again.cached and again.text == first.text and again.prompt_tokens == first.prompt_tokens
    client(server, cache=tmp_path / "c.sqlite").complete(ASK, max_tokens=7)  # another request: not a hit
    assert len(server.requests) == 2
    assert len(ResponseCache(tmp_path / "c.sqlite")) == 2


def test_failures_are_not_cached(server: FakeOpenAI) -> None:
    server.faults.extend(["500"] * 4)
    c = client(server, cache=":memory:")
    with pytest.raises(LLMError):
        c.complete(ASK)
    assert c.complete(ASK).text.startswith("Say")


def test_concurrency_limit_holds_across_threads(server: FakeOpenAI) -> None:
    server.delay_s = 0.15
    c = client(server, concurrency=2)
    threads = [threading.Thread(target=c.complete, args=([{"role": "user", "content": f"q{i}"}],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(server.requests) == 6
    assert server.max_in_flight == 2


def test_async_twin_matches_and_respects_the_limit(server: FakeOpenAI) -> None:
    server.delay_s = 0.1
    c = client(server, concurrency=3)
    sync = c.complete(ASK)

    async def run() -> list[str]:
        server.faults.extend(["429", "cut"])
        outs = await asyncio.gather(*(c.acomplete([{"role": "user", "content": f"q{i}"}]) for i in range(7)))
        same = await c.acomplete(ASK)
        assert same.text == sync.text
        await c.aclose()
        return [o.text for o in outs]

    texts = asyncio.run(run())
    assert texts == [f"q{i}" for i in range(7)]
    assert server.max_in_flight <= 3


def test_bad_arguments() -> None:
    with pytest.raises(InvalidInputError):
        OpenAICompatible("localhost:8080", "m")
    with pytest.raises(InvalidInputError):
        OpenAICompatible("http://x/v1", " ")
    with pytest.raises(InvalidInputError):
        OpenAICompatible("http://x/v1", "m").complete([])


def test_config_from_env_and_file(tmp_path: Path) -> None:
    assert load_config(env={}) is None
    cfg = load_config(
        env={"FLEXAMEM_LLM_BASE_URL": "http://h/v1", "FLEXAMEM_LLM_MODEL": "m", "FLEXAMEM_LLM_API_KEY": "k1"}
    )
    assert cfg is not None and cfg.api_key == "k1" and "k1" not in repr(cfg)
    file = tmp_path / "flexamem.toml"
    file.write_text('[llm]\nbase_url = "http://file/v1"\nmodel = "from-file"\ncache = "off"\nconcurrency = 2\n')
    cfg = load_config(env={"FLEXAMEM_CONFIG": str(file), "FLEXAMEM_LLM_MODEL": "from-env"})
    assert cfg is not None
    assert (cfg.base_url, cfg.model, cfg.cache, cfg.concurrency) == ("http://file/v1", "from-env", None, 2)
    with pytest.raises(InvalidInputError, match="both"):
        load_config(env={"FLEXAMEM_LLM_MODEL": "m"})
    file.write_text("[llm\n")
    with pytest.raises(InvalidInputError, match="cannot read config"):
        load_config(env={}, path=file)


SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the notes.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}


@pytest.mark.parametrize("fault", [None, "textcalls"])
def test_tool_calls_from_the_protocol_or_the_text(server: FakeOpenAI, fault: str | None) -> None:
    if fault:
        server.faults.append(fault)
    c = client(server)
    assert isinstance(c, ToolModel)
    out = c.complete_tools(ASK, [SEARCH], max_tokens=40)
    assert out.tool_calls == (ToolCall(out.tool_calls[0].id, "search", {"query": "Say something about"}),)
    assert server.requests[0]["body"]["tools"] == [SEARCH]
    # the call and its result go back on the wire (content "" where the call had none), then an answer
    turn = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                              "function": {"name": "search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Lisbon: 3 notes"},
    ]  # fmt: skip
    done = c.complete_tools(turn, [SEARCH])
    assert done.text == "done" and done.tool_calls == ()
    sent = server.requests[1]["body"]["messages"]
    assert sent[1]["content"] == "" and sent[1]["tool_calls"][0]["id"] == "c1" and sent[2]["tool_call_id"] == "c1"


def test_tool_answers_are_cached_with_their_calls(server: FakeOpenAI, tmp_path: Path) -> None:
    c = client(server, cache=tmp_path / "c.db")
    first = c.complete_tools(ASK, [SEARCH])
    again = c.complete_tools(ASK, [SEARCH])
    assert again.cached and again.tool_calls == first.tool_calls and len(server.requests) == 1
    plain = c.complete(ASK)  # the same messages without tools are another request
    assert not plain.cached and plain.tool_calls == () and len(server.requests) == 2


def test_async_tool_calls_match(server: FakeOpenAI) -> None:
    c = client(server)
    out = asyncio.run(c.acomplete_tools(ASK, [SEARCH]))
    assert [t.name for t in out.tool_calls] == ["search"] and out.tool_calls == c.complete_tools(
        ASK, [SEARCH]
    ).tool_calls
    with pytest.raises(InvalidInputError):
        c.complete_tools(ASK, [])


def test_tool_calls_in_text_skip_what_is_malformed_or_unknown() -> None:
    text = (
        '{"name": "search", "arguments": {"query": "a"}}\n'
        '{"name": "search", "arguments": "{\\"query\\": \\"b\\"}"}\n'
        '{"name": "delete_all", "arguments": {}}\n'
        '{"name": "search", "arguments": "{broken"}\n'
        '<tool_call>{"name": "search", "arguments": {"query": "c"}}</tool_call> and {"name": "search", "argu'
    )
    calls = tool_calls_in_text(text, {"search"})
    assert [c.arguments for c in calls] == [{"query": "a"}, {"query": "b"}, {"query": "c"}]
    assert len({c.id for c in calls}) == 3 and tool_calls_in_text("no calls here", {"search"}) == []
