"""The AutoGen memory against the real ``autogen-core`` protocol and an ``AssistantAgent`` of
``autogen-agentchat`` driven by ``autogen-ext``'s ``ReplayChatCompletionClient``, on a local memory and on
one served by ``flexamem serve``."""

import asyncio
from typing import Any

import pytest

pytest.importorskip("autogen_agentchat")
pytest.importorskip("autogen_ext")

import flexamem as fm
from tests.doors.conftest import Opener
from tests.doors.test_langchain import FILLER


def test_assistant_agent_gets_the_rendered_memory(opener: Opener) -> None:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.messages import MemoryQueryEvent
    from autogen_core.memory import MemoryContent, MemoryMimeType
    from autogen_core.models import LLMMessage, SystemMessage
    from autogen_ext.models.replay import ReplayChatCompletionClient

    from flexamem.adapters.autogen import FlexaMemMemory

    seen: list[list[LLMMessage]] = []

    class Client(ReplayChatCompletionClient):  # the package's replay client, showing what it was sent
        async def create(self, messages, **kwargs: Any):  # type: ignore[no-untyped-def,override]
            seen.append(list(messages))
            return await super().create(messages, **kwargs)

    async def main() -> None:
        memory = FlexaMemMemory(opener(), budget=600)
        fact = "The user's booking reference is CR-88412."
        await memory.add(MemoryContent(content=fact, mime_type=MemoryMimeType.TEXT, metadata={"speaker": "user"}))
        for i in range(12):
            await memory.add(MemoryContent(content=FILLER.format(i=i), mime_type=MemoryMimeType.MARKDOWN))
        await memory.add(MemoryContent(content={"seat": "14A", "meal": "vegetarian"}, mime_type="application/json"))
        with pytest.raises(fm.InvalidInputError, match="image"):
            await memory.add(MemoryContent(content=b"\x89PNG", mime_type=MemoryMimeType.IMAGE))

        agent = AssistantAgent(
            "clerk",
            model_client=Client(["Your booking reference is CR-88412."]),
            memory=[memory],
            system_message="You are a travel clerk.",
        )
        result = await agent.run(task="What is my booking reference?")
        assert result.messages[-1].content == "Your booking reference is CR-88412."
        (event,) = [m for m in result.messages if isinstance(m, MemoryQueryEvent)]
        assert "CR-88412" in str(event.content[0].content) and event.content[0].metadata["tokens"] <= 570

        (sent,) = seen
        memories = [m for m in sent if isinstance(m, SystemMessage) and m.content.startswith("Memory")]
        assert len(memories) == 1 and "CR-88412" in memories[0].content  # an old turn, recovered verbatim
        assert fm.counter().count(memories[0].content) <= 570  # though the memory holds far more
        assert sum(fm.counter().count(n.raw) for n in opener().notes()) > 1600

        hits = await memory.query("booking reference")
        assert len(hits.results) == 5 and "CR-88412" in str(hits.results[0].content)
        assert hits.results[0].metadata is not None and hits.results[0].metadata["label"] == "u1"
        json_hits = await memory.query(MemoryContent(content="vegetarian meal", mime_type=MemoryMimeType.TEXT))
        assert '"seat": "14A"' in str(json_hits.results[0].content)
        assert (await memory.query("")).results == []

        again = FlexaMemMemory(opener(), budget=600)  # another process sees the same memory
        assert "CR-88412" in str((await again.query("booking reference")).results[0].content)
        await again.clear()
        assert (await memory.query("booking reference")).results == []
        await memory.close()
        await again.close()

    asyncio.run(main())
