"""Every copy-paste example of the door pages runs (the HTTP page's runs in tests/server, the
model-backed ones against the local llama.cpp model in the integration suite)."""

import os
from pathlib import Path

import pytest

from flexamem.llm.local import LocalServer, local_model_path, local_server_available

from .docs_blocks import blocks, run_block


def test_library_page(tmp_path: Path) -> None:
    first, second = blocks("library.md", "python")
    assert "Visa ending 4417" in run_block(first, "python", tmp_path)
    assert "memory on: True" in run_block(second, "python", tmp_path)


@pytest.mark.slow
def test_cli_page(tmp_path: Path) -> None:
    (script,) = blocks("cli.md", "bash")
    out = run_block(script, "bash", tmp_path)
    assert "ana/agent:a1" in out and "Visa ending 4417" in out and "dropped" in out


def test_mcp_page(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    (code,) = blocks("mcp.md", "python")
    assert "4417" in run_block(code, "python", tmp_path)


@pytest.mark.slow
def test_langgraph_and_miniswe_examples(tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    pytest.importorskip("minisweagent")
    _, _, langgraph, miniswe = blocks("adapters.md", "python")
    assert "in transit" in run_block(langgraph, "python", tmp_path)
    assert "Submitted" in run_block(miniswe, "python", tmp_path)


WHY_NOT = local_server_available()
REQUIRED = os.environ.get("FLEXAMEM_REQUIRE_LOCAL_LLM") == "1"


@pytest.mark.integration
@pytest.mark.skipif(WHY_NOT is not None and not REQUIRED, reason=str(WHY_NOT))
def test_model_backed_adapter_examples_with_the_local_model(tmp_path: Path) -> None:
    pytest.importorskip("agents")
    if WHY_NOT is not None:  # required (CI) but missing: a failure, not a skip
        pytest.fail(WHY_NOT)
    chat, agents, _, _ = blocks("adapters.md", "python")
    with LocalServer(local_model_path()) as server:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "local", "FLEXAMEM_EXAMPLE_MODEL": "local"}
        assert "Which order number did I give you? ->" in run_block(chat, "python", tmp_path, env)
        run_block(agents, "python", tmp_path, env)


@pytest.mark.slow
def test_langchain_page(tmp_path: Path) -> None:
    pytest.importorskip("langchain")
    chain, agent = blocks("langchain.md", "python")
    out = run_block(chain, "python", tmp_path)
    assert "What is my booking reference? -> Your reference is CR-88412." in out
    assert "['user: I prefer window seats.']" in out  # the retriever's first hit, verbatim
    assert "in transit" in run_block(agent, "python", tmp_path)


def test_pydantic_ai_page(tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai")
    (code,) = blocks("pydantic-ai.md", "python")
    out = run_block(code, "python", tmp_path)
    assert "the model got: ['system', 'user', 'assistant', 'tool']" in out and "It is in transit." in out


def test_autogen_page(tmp_path: Path) -> None:
    pytest.importorskip("autogen_agentchat")
    pytest.importorskip("autogen_ext")
    (code,) = blocks("autogen.md", "python")
    out = run_block(code, "python", tmp_path)
    assert "MemoryQueryEvent -> [MemoryContent(content='[u1 · 2026-12-01 · raw]" in out
    assert "TextMessage -> Your reference is CR-88412." in out
    assert "['user: My booking reference is CR-88412.']" in out


def test_llamaindex_page(tmp_path: Path) -> None:
    pytest.importorskip("llama_index.core")
    (code,) = blocks("llamaindex.md", "python")
    out = run_block(code, "python", tmp_path)
    assert out.startswith("<flexamem>\n[u1 · s1 · raw]\nuser: My booking reference is CR-88412.")
