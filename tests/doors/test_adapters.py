"""Each adapter against its real framework package, with a deterministic model double where a model is
needed (the frameworks' own where they ship one): the model must see FlexA-Mem's context, valid for the
chat API and within the budget, while everything is stored."""

import asyncio
import json
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.adapters import ChatMemory
from flexamem.agent import AgentSession
from flexamem.chat import chat_problems
from flexamem.client import RemoteMemory
from flexamem.render.messages import messages_tokens
from tests.doors.conftest import Opener

ORDER_LINE = "order #W4417 item {i}: status shipped, carrier UPS, tracking 1Z999AA1{i:07d} " + "detail " * 150


def tool_turn(i: int) -> list[dict]:  # type: ignore[type-arg]
    call = {"id": f"call_{i}", "type": "function", "function": {"name": "get_item", "arguments": json.dumps({"i": i})}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": ORDER_LINE.format(i=i)},
    ]


def test_plain_chat_loop_gets_a_budgeted_valid_context(opener: Opener) -> None:
    mem = opener()
    memory = ChatMemory(mem, budget=3000, session_id="ticket-42")
    messages = [{"role": "system", "content": "You are a support agent."}, {"role": "user", "content": "Track #W4417"}]
    counter = fm.counter()
    for i in range(30):
        ctx = memory.context(messages)
        assert chat_problems(ctx) == [] and messages_tokens(ctx, counter) <= 2850
        messages += tool_turn(i)
    final = memory.full_context(messages)
    assert "Memory of earlier steps" in json.dumps(final.messages)
    assert final.memory is not None or isinstance(mem, RemoteMemory)  # a server sends the messages only
    assert final.messages[:2] == messages[:2]
    # a restarted process picks the session up from the store and goes on
    again = ChatMemory(opener(), budget=3000, session_id="ticket-42")
    assert again.context(messages + tool_turn(30))[-1]["tool_call_id"] == "call_30"
    with pytest.raises(fm.InvalidInputError, match="shorter"):
        again.context(messages[:3])


def test_openai_agents_sdk_session(opener: Opener) -> None:
    pytest.importorskip("agents")
    from agents import Agent, Runner, function_tool
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.tracing import set_tracing_disabled
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from flexamem.adapters.openai_agents import FlexaMemSession, items_to_messages

    set_tracing_disabled(True)
    seen: list[list[dict]] = []  # type: ignore[type-arg]

    class Scripted(Model):  # the test double: call the tool once per run, then answer
        async def get_response(self, system_instructions, input, *args, **kwargs):  # type: ignore[no-untyped-def,override]
            items = [input] if isinstance(input, str) else list(input)
            seen.append([i if isinstance(i, dict) else i.model_dump() for i in items])
            last = seen[-1][-1]
            if last.get("type") != "function_call_output":
                call = ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"c{len(seen)}",
                    name="get_item",
                    arguments=json.dumps({"i": len(seen)}),
                )
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            text = ResponseOutputText(type="output_text", text=f"done {len(seen)}", annotations=[])
            msg = ResponseOutputMessage(id="m", type="message", role="assistant", status="completed", content=[text])
            return ModelResponse(output=[msg], usage=Usage(), response_id=None)

        def stream_response(self, *args, **kwargs):  # type: ignore[no-untyped-def,override]
            raise NotImplementedError

    @function_tool
    def get_item(i: int) -> str:
        """Look up one order item."""
        return ORDER_LINE.format(i=i)

    agent = Agent(name="clerk", instructions="Answer about orders.", model=Scripted(), tools=[get_item])
    session = FlexaMemSession("s1", opener(), budget=3000)

    async def main() -> None:
        for turn in range(14):
            await Runner.run(agent, f"Where is item {turn} of order #W4417?", session=session)

    asyncio.run(main())
    counter = fm.counter()
    later = seen[-2]  # the first call of the last run: session items + the new question
    assert chat_problems(items_to_messages(later)) == []
    assert messages_tokens(items_to_messages(later[:-1]), counter) <= 2850
    assert "Memory of earlier steps" in json.dumps(later)
    stored = opener().agent(session_id="s1")
    if isinstance(stored, AgentSession):
        assert any("1Z999AA10000001" in n.raw for n in stored.core.notes())  # the first tool output, verbatim
    assert stored.message_count > 40  # every run's items recorded
    with pytest.raises(fm.WriteOnceError):
        asyncio.run(session.pop_item())
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []


def test_langgraph_pre_model_hook(opener: Opener) -> None:
    """The hook in a graph built with ``StateGraph`` (``create_react_agent``, which took ``pre_model_hook=``,
    is deprecated since LangGraph 1.0; ``create_agent`` takes the LangChain middleware instead)."""
    pytest.importorskip("langgraph")
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, convert_to_openai_messages
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from flexamem.adapters.langgraph import pre_model_hook

    seen: list[list] = []  # type: ignore[type-arg]
    replies = []
    for i in range(24):
        replies.append(AIMessage(content="", tool_calls=[{"name": "get_item", "args": {"i": i}, "id": f"t{i}"}]))
    replies.append(AIMessage(content="All items shipped."))
    model = GenericFakeChatModel(messages=iter(replies))  # the package's own fake chat model

    @tool
    def get_item(i: int) -> str:
        """Look up one order item."""
        return ORDER_LINE.format(i=i)

    hook = pre_model_hook(opener(), budget=900, session_id="thread-1")

    def call_model(state: MessagesState) -> dict:  # type: ignore[type-arg]
        sent = hook(state)["llm_input_messages"]
        seen.append(sent)
        return {"messages": [model.invoke(sent)]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode([get_item]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    state = builder.compile().invoke({"messages": [{"role": "user", "content": "Track every item of #W4417"}]})
    assert state["messages"][-1].content == "All items shipped."
    assert len(state["messages"]) == 50  # the graph keeps every message
    last = convert_to_openai_messages(seen[-1])
    assert chat_problems(last) == [] and messages_tokens(last, fm.counter()) <= 855
    assert "Memory of earlier steps" in json.dumps(last)
    assert opener().agent(session_id="thread-1").message_count == 48  # every step stored


def test_mini_swe_agent_model_sees_flexamem_context(opener: Opener, tmp_path: Path) -> None:
    pytest.importorskip("minisweagent")
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.test_models import DeterministicModel, make_output

    from flexamem.adapters.miniswe import FlexaMemModel

    outputs = [make_output(f"look {i}", [{"command": f"seq 1 40 | sed 's/^/line {i} /'"}]) for i in range(30)]
    outputs.append(make_output("done", [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo ok"}]))
    inner = DeterministicModel(outputs=outputs)
    seen: list[list[dict]] = []  # type: ignore[type-arg]
    query = inner.query
    inner.query = lambda messages, **kw: (seen.append(messages), query(messages, **kw))[1]  # type: ignore[method-assign]
    mem = opener()
    model = FlexaMemModel(inner, mem, budget=3000, session_id="task-1")
    agent = DefaultAgent(
        model, LocalEnvironment(cwd=str(tmp_path)), system_template="You are a shell agent.",
        instance_template="Task: {{task}}", step_limit=40, cost_limit=100,
    )  # fmt: skip
    result = agent.run("count the lines")
    assert result.get("exit_status") == "Submitted", result
    assert len(agent.messages) > 15  # mini-swe-agent keeps its linear trajectory
    last = seen[-1]
    assert chat_problems(last) == [] and messages_tokens(last, fm.counter()) <= 2850
    assert "Memory of earlier steps" in json.dumps(last)
    assert model.last_context is not None
    assert model.last_context.memory is not None or isinstance(mem, RemoteMemory)
