"""The LlamaIndex memory block against the real ``llama-index-core``: its ``Memory`` (short-term queue,
flush to memory blocks) in a ``SimpleChatEngine`` and in a ``FunctionAgent``, driven by LlamaIndex's own
``MockLLM``, on a local memory and on one served by ``flexamem serve``."""

import asyncio
import uuid
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

import flexamem as fm
from tests.doors.conftest import Opener
from tests.doors.test_langchain import FILLER


def _model(seen: list[list[Any]]) -> Any:
    from llama_index.core.llms import MockLLM

    class Model(MockLLM):  # the package's mock: answers "text text text", and shows what it was sent
        def chat(self, messages, **kwargs):  # type: ignore[no-untyped-def]
            seen.append(list(messages))
            return super().chat(messages, **kwargs)

    return Model(max_tokens=3)


def test_chat_engine_recalls_flushed_turns(opener: Opener) -> None:
    from llama_index.core.chat_engine import SimpleChatEngine
    from llama_index.core.memory import Memory

    from flexamem.adapters.llama_index import FlexaMemBlock

    seen: list[list[Any]] = []
    block = FlexaMemBlock(mem=opener(), budget=500)
    memory = Memory.from_defaults(
        session_id=uuid.uuid4().hex, token_limit=1000, chat_history_token_ratio=0.5, token_flush_size=300,
        memory_blocks=[block],
    )  # fmt: skip
    engine = SimpleChatEngine.from_defaults(llm=_model(seen), memory=memory)
    engine.chat("My booking reference is CR-88412.")
    for i in range(10):
        engine.chat(FILLER.format(i=i))
    engine.chat("What is my booking reference?")

    last = seen[-1]
    recent = " ".join(str(m.content) for m in last[1:])
    assert "CR-88412" not in recent  # the first turn has left LlamaIndex's short-term queue...
    system = str(last[0].content)
    assert last[0].role.value == "system" and "<flexamem>" in system
    assert "user: My booking reference is CR-88412." in system  # ...and FlexA-Mem renders it back, verbatim
    counter = fm.counter()
    rendered = system.split("<flexamem>")[1].split("</flexamem>")[0].strip()
    assert counter.count(rendered) + counter.count("What is my booking reference?") <= 475

    stored = opener()  # every flushed message, written once (question and answer sessions)
    assert len(stored) >= 2 and "CR-88412" in stored.search("booking reference", limit=1)[0].text
    assert sum(counter.count(n.raw) for n in stored.notes()) > 800


def test_function_agent_with_the_block(opener: Opener) -> None:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.llms.mock import MockFunctionCallingLLMWithChatMemoryOfLastCall
    from llama_index.core.memory import Memory

    from flexamem.adapters.llama_index import FlexaMemBlock

    mem = opener()
    mem.add_messages([{"role": "user", "content": "My booking reference is CR-88412."}])
    for i in range(10):
        mem.add_messages([{"role": "user", "content": FILLER.format(i=i)}])
    llm = MockFunctionCallingLLMWithChatMemoryOfLastCall()  # LlamaIndex's mock, which keeps what it was sent
    memory = Memory.from_defaults(session_id="user-7", memory_blocks=[FlexaMemBlock(mem=opener(), budget=500)])
    agent = FunctionAgent(llm=llm, tools=[], system_prompt="You are a travel clerk.")

    async def main() -> Any:
        return await agent.run("What is my booking reference?", memory=memory)

    asyncio.run(main())
    assert llm.last_chat_messages is not None
    system = " ".join(str(m.content) for m in llm.last_chat_messages if m.role.value == "system")
    assert "You are a travel clerk." in system and "user: My booking reference is CR-88412." in system
    assert fm.counter().count(system) < 600  # the memory holds ~1,500 tokens
    assert sum(fm.counter().count(n.raw) for n in opener().notes()) > 1400
