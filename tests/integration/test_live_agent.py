"""A live coding-agent loop: mini-swe-agent (its text-action model and shipped prompts) driven by the
local model through :class:`flexamem.adapters.miniswe.FlexaMemModel`, on a tiny repository with a
failing test written here. Solving is not asked of a 0.5B model; the plumbing of a real loop is: the
run completes, memory turns on under a budget smaller than the trajectory, and every context the
model received is within the ceiling and a valid chat message list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import flexamem as fm
from flexamem.agent import AgentContext
from flexamem.chat import chat_problems
from flexamem.llm.local import LocalServer
from flexamem.render.messages import messages_tokens
from tests.integration.conftest import NEEDS_LOCAL_LLM

pytestmark = NEEDS_LOCAL_LLM


def test_mini_swe_agent_runs_with_memory_on_the_local_model(
    server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network for litellm's price list
    monkeypatch.setenv("MSWEA_COST_TRACKING", "ignore_errors")  # a local model has no price
    yaml = pytest.importorskip("yaml")
    minisweagent = pytest.importorskip("minisweagent")
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

    from flexamem.adapters.miniswe import FlexaMemModel

    repo = tmp_path / "repo"
    repo.mkdir()
    helpers = "".join(f"\n\ndef helper_{i}(x):\n    return x + {i}\n" for i in range(40))
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n" + helpers)
    (repo / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    config = yaml.safe_load((Path(minisweagent.__file__).parent / "config" / "mini_textbased.yaml").read_text())
    inner = LitellmTextbasedModel(
        model_name="openai/qwen2.5-coder-0.5b-instruct",
        model_kwargs={"api_base": server.base_url, "api_key": "local", "max_tokens": 120, "temperature": 0.0},
        cost_tracking="ignore_errors",
        observation_template=config["model"]["observation_template"],
        format_error_template=config["model"]["format_error_template"],
    )
    mem = fm.Memory(tmp_path / "swe.db", settings=fm.Settings(agent_unit_tokens=150))  # small units: memory soon
    model = FlexaMemModel(inner, mem, budget=1400, session_id="calc-1")
    contexts: list[AgentContext] = []
    query = model.query

    def recording(messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        out = query(messages, **kwargs)
        assert model.last_context is not None
        contexts.append(model.last_context)
        return out

    model.query = recording  # type: ignore[method-assign]
    agent_config = {k: v for k, v in config["agent"].items() if k != "mode"} | {"step_limit": 6, "cost_limit": 0}
    agent = DefaultAgent(model, LocalEnvironment(cwd=str(repo), **config["environment"]), **agent_config)
    result = agent.run("The test in test_calc.py fails: add(2, 3) returns -1. Fix calc.py.")

    assert result.get("exit_status") in ("Submitted", "LimitsExceeded"), result  # the loop ran to its end
    assert len(contexts) >= 4
    for ctx in contexts:
        assert ctx.tokens == messages_tokens(ctx.messages, mem.counter) <= ctx.ceiling
        assert chat_problems(ctx.messages) == []
    chat = [m for m in agent.messages if m.get("role") in ("system", "user", "assistant", "tool")]
    assert messages_tokens(chat, mem.counter) > contexts[-1].ceiling  # the trajectory outgrew the budget
    assert any(ctx.memory is not None for ctx in contexts)  # and memory was on
