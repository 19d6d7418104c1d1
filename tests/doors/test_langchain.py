"""The LangChain adapter against the real ``langchain-core`` and ``langchain`` packages and LangChain's own
fake chat models, on a local memory and on one served by ``flexamem serve``: a chain whose history is
FlexA-Mem (the model gets a budgeted memory, not the transcript), the retriever feeding a prompt, and an
agent built by ``create_agent`` whose model calls go through the middleware."""

import json
import warnings
from typing import Any

import pytest

pytest.importorskip("langchain")

import flexamem as fm
from flexamem.chat import chat_problems
from flexamem.render.messages import messages_tokens
from tests.doors.conftest import Opener
from tests.doors.test_adapters import ORDER_LINE

FILLER = "Unrelated note {i}: the shelf in aisle {i} holds cartons of paper, toner and staples. " + "stock " * 120


def test_chat_history_under_runnable_with_message_history(opener: Opener) -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.messages import BaseMessage, SystemMessage
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables.history import RunnableWithMessageHistory

    from flexamem.adapters.langchain import FlexaMemChatHistory

    seen: list[list[BaseMessage]] = []

    class Model(FakeListChatModel):  # the package's fake: answers in turn, and shows what it was sent
        def _call(self, messages, *args, **kwargs):  # type: ignore[no-untyped-def]
            seen.append(list(messages))
            return super()._call(messages, *args, **kwargs)

    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are a travel clerk."), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    chain = prompt | Model(responses=[f"Noted ({i})." for i in range(13)])
    histories: list[FlexaMemChatHistory] = []

    def history(session_id: str) -> FlexaMemChatHistory:
        histories.append(FlexaMemChatHistory(opener(), budget=600))
        return histories[-1]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # both classes are deprecated since core 1.6.4
        with_history = RunnableWithMessageHistory(
            chain, history, input_messages_key="question", history_messages_key="history"
        )
    questions = ["My booking reference is CR-88412.", *(FILLER.format(i=i) for i in range(12))]
    for q in questions:
        with_history.invoke({"question": q}, config={"configurable": {"session_id": "user-7"}})

    counter = fm.counter()
    assert len(seen) == 13 and len(seen[0]) == 2  # nothing stored yet: system prompt and question only
    for sent in seen[1:]:  # then exactly one memory message between them, within the budget
        assert [type(m) for m in sent] == [SystemMessage, SystemMessage, type(sent[-1])]
        assert sent[1].content.startswith("Memory of the conversation so far")
        assert counter.count(sent[1].content) <= 570
    assert "CR-88412" in str(seen[1][1].content)  # the last exchange, verbatim
    transcript = sum(counter.count(q) for q in questions)
    assert transcript > 1600  # far above the budget: the model never got the whole transcript

    mem = opener()
    assert len(mem) == 13  # one session per exchange, question and answer
    hit = mem.search("booking reference", limit=1)[0]
    assert "CR-88412" in hit.text
    later = FlexaMemChatHistory(opener(), budget=600)  # a restarted process: renders for the last turn stored
    assert later.messages and "Noted (12)." in str(later.messages[0].content)
    later.query = "What is my booking reference?"
    assert "CR-88412" in str(later.messages[0].content)  # an old turn, recovered for the question
    later.clear()
    assert later.messages == [] and len(opener()) == 0


def test_retriever_feeds_a_chain(opener: Opener) -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.messages import BaseMessage
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough

    from flexamem.adapters.langchain import FlexaMemRetriever

    mem = opener()
    mem.add_messages(
        [{"role": "user", "content": "My booking reference is CR-88412."}, {"role": "assistant", "content": "Noted."}]
    )
    for i in range(12):
        mem.add_messages([{"role": "user", "content": FILLER.format(i=i)}, {"role": "assistant", "content": "Ok."}])
    seen: list[list[BaseMessage]] = []

    class Model(FakeListChatModel):
        def _call(self, messages, *args, **kwargs):  # type: ignore[no-untyped-def]
            seen.append(list(messages))
            return super()._call(messages, *args, **kwargs)

    rendered = FlexaMemRetriever(mem=opener(), budget=500)
    prompt = ChatPromptTemplate.from_messages([("system", "Memory:\n{memory}"), ("human", "{question}")])
    chain = (
        {"memory": rendered | (lambda docs: "\n".join(d.page_content for d in docs)), "question": RunnablePassthrough()}
        | prompt
        | Model(responses=["CR-88412"])
    )
    assert chain.invoke("What is my booking reference?").content == "CR-88412"
    system = str(seen[0][0].content)
    assert "CR-88412" in system and fm.counter().count(system) <= 500
    (doc,) = rendered.invoke("What is my booking reference?")
    assert doc.metadata["tokens"] <= doc.metadata["allowance"] <= 475

    hits = FlexaMemRetriever(mem=opener(), limit=3).invoke("booking reference")
    assert len(hits) == 3 and "CR-88412" in hits[0].page_content
    assert hits[0].metadata["unit_id"] == mem.notes(0, 1)[0].unit_id and hits[0].metadata["label"] == "u1"
    tool = FlexaMemRetriever(mem=opener(), budget=500).as_tool(name="memory", description="Search the memory.")
    assert "CR-88412" in str(tool.invoke("booking reference"))
    with pytest.raises(fm.InvalidInputError, match="mode"):
        FlexaMemRetriever(mem=opener(), mode="units").invoke("booking reference")


def test_create_agent_with_the_middleware(opener: Opener) -> None:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
    from langchain_core.tools import tool

    from flexamem.adapters.langchain import FlexaMemMiddleware

    seen: list[list[BaseMessage]] = []

    class Model(GenericFakeChatModel):  # the package's own fake, able to be bound to tools
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages, *args, **kwargs):  # type: ignore[no-untyped-def]
            seen.append(list(messages))
            return super()._generate(messages, *args, **kwargs)

    replies = [
        AIMessage(content="", tool_calls=[{"name": "get_item", "args": {"i": i}, "id": f"t{i}"}]) for i in range(24)
    ]
    replies.append(AIMessage(content="All items shipped."))

    @tool
    def get_item(i: int) -> str:
        """Look up one order item."""
        return ORDER_LINE.format(i=i)

    middleware = FlexaMemMiddleware(opener(), budget=1500, session_id="thread-1")
    agent = create_agent(
        Model(messages=iter(replies)), [get_item], system_prompt="You track orders.", middleware=[middleware]
    )
    state = agent.invoke({"messages": [{"role": "user", "content": "Track every item of #W4417"}]})
    assert state["messages"][-1].content == "All items shipped."
    assert len(state["messages"]) == 50  # the agent's state keeps every message
    last = convert_to_openai_messages(seen[-1])
    assert last[0] == {"role": "system", "content": "You track orders."}
    assert last[1] == {"role": "user", "content": "Track every item of #W4417"}
    assert chat_problems(last) == [] and messages_tokens(last, fm.counter()) <= 1425
    assert "Memory of earlier steps" in json.dumps(last)
    stored = opener().agent(session_id="thread-1")
    assert stored.message_count == 48  # every step recorded (the task and the system prompt are the session's)
