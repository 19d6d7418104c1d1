"""The Pydantic AI history processor against the real ``pydantic-ai`` agent loop and its ``FunctionModel``
(which shows the test every message the model received), on a local memory and on one served by
``flexamem serve``."""

import json

import pytest

pytest.importorskip("pydantic_ai")

import flexamem as fm
from flexamem.chat import chat_problems
from flexamem.render.messages import messages_tokens
from tests.doors.conftest import Opener
from tests.doors.test_adapters import ORDER_LINE


def test_agent_model_sees_flexamem_context(opener: Opener) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from flexamem.adapters.pydantic_ai import FlexaMemHistory, to_chat

    seen: list[list[ModelMessage]] = []

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        last = messages[-1].parts[-1]
        if (isinstance(last, UserPromptPart) and "Thanks" in str(last.content)) or len(seen) > 24:
            return ModelResponse(parts=[TextPart(content=f"All items shipped ({len(seen)}).")])
        return ModelResponse(parts=[ToolCallPart("get_item", {"i": len(seen) - 1})])  # one item per call

    history = FlexaMemHistory(opener(), budget=1500, session_id="ticket-42")
    agent = Agent(FunctionModel(scripted), system_prompt="You track orders.", capabilities=[ProcessHistory(history)])

    @agent.tool_plain
    def get_item(i: int) -> str:
        """Look up one order item."""
        return ORDER_LINE.format(i=i)

    result = agent.run_sync("Track every item of #W4417")
    assert result.output == "All items shipped (25)."
    counter = fm.counter()
    for sent in seen:
        chat = to_chat(sent)
        assert chat_problems(chat) == [] and messages_tokens(chat, counter) <= 1425
        assert chat[:2] == [
            {"role": "system", "content": "You track orders."},
            {"role": "user", "content": "Track every item of #W4417"},
        ]
    assert "Memory of earlier steps" in json.dumps(to_chat(seen[-1]))
    assert "1Z999AA10000000" not in json.dumps(to_chat(seen[-1]))  # the first output left the window...
    assert opener().agent(session_id="ticket-42").message_count == 48  # ...but every call and return is stored
    assert history.last_context is not None and history.last_context.tokens <= 1425
    history.record(result.all_messages())  # and the run's final answer
    assert opener().agent(session_id="ticket-42").message_count == 49

    # the next run goes on with the history it returned (result.all_messages()), in the same session
    again = agent.run_sync("Thanks. Which carrier?", message_history=result.all_messages())
    assert again.output == "All items shipped (26)."
    chat = to_chat(seen[-1])
    assert chat[-1] == {"role": "user", "content": "Thanks. Which carrier?"} and chat_problems(chat) == []
    assert opener().agent(session_id="ticket-42").message_count == 50  # the question; the answer: below
    history.record(again.all_messages())
    history.record(again.all_messages())  # nothing twice
    assert opener().agent(session_id="ticket-42").message_count == 51

    # a restarted process resumes the session by its id; the capability records each run's answer itself
    later = FlexaMemHistory(opener(), budget=1500, session_id="ticket-42")
    third = Agent(FunctionModel(scripted), capabilities=[later.capability()]).run_sync("Thanks again.")
    assert third.output == "All items shipped (27)."
    assert to_chat(seen[-1])[:2] == chat[:2] and to_chat(seen[-1])[-1]["content"] == "Thanks again."
    assert opener().agent(session_id="ticket-42").message_count == 53  # the question and the answer
