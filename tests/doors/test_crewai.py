"""The CrewAI memory against the real ``crewai`` package: crews of a scripted ``BaseLLM`` (CrewAI ships no
fake model) run by ``kickoff`` with ``memory=FlexaMemCrewMemory(...)``, on a local memory and on one served
by ``flexamem serve``. CrewAI's pins (``mcp<2``, ``pydantic<2.13``, ``openai<3``) keep it out of the main
virtualenv, so each crew runs as its own process in ``make crewai-setup``'s (``FLEXAMEM_CREWAI_PYTHON``);
this suite's server and store check what the crews did. Offline: no telemetry, no LLM, no embedder."""

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

import flexamem as fm
from tests.doors.test_langchain import FILLER

ROOT = Path(__file__).resolve().parents[2]
# relative to the checkout (make passes .venv-crewai/bin/python); not resolved: the venv's python is a symlink
PYTHON = str(ROOT / (os.environ.get("FLEXAMEM_CREWAI_PYTHON") or ".venv-crewai/bin/python"))
REQUIRED = os.environ.get("FLEXAMEM_REQUIRE_CREWAI") == "1"

CREW = """
import json, os, sys
import flexamem as fm
from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from flexamem.adapters.crewai import FlexaMemCrewMemory

seen = []

class Scripted(BaseLLM):  # CrewAI ships no fake model: this one answers from a script, and keeps its prompts
    def call(self, messages, *args, **kwargs):
        seen.append(messages if isinstance(messages, str) else "\\n".join(str(m["content"]) for m in messages))
        return "Thought: I can answer now.\\nFinal Answer: " + os.environ["ANSWER"]

spec = json.loads(os.environ["MEMORY"])
mem = fm.Memory(spec.pop("path"), **spec)
memory = FlexaMemCrewMemory(mem, budget=int(os.environ["BUDGET"]))
clerk = Agent(role="clerk", goal="Answer about bookings.", backstory="A travel clerk.", llm=Scripted(model="scripted"))
task = Task(description=os.environ["TASK"], expected_output="One sentence.", agent=clerk)
out = Crew(agents=[clerk], tasks=[task], memory=memory).kickoff()
memory.close()
print(json.dumps({"output": str(out), "prompts": seen}))
"""


def kickoff(spec: dict[str, Any], task: str, answer: str, budget: int, cwd: Path) -> dict[str, Any]:
    if not Path(PYTHON).exists():
        if REQUIRED:
            pytest.fail(f"FLEXAMEM_REQUIRE_CREWAI=1 but {PYTHON} is missing (make crewai-setup)")
        pytest.skip(f"no CrewAI virtualenv at {PYTHON} (make crewai-setup)")
    env = {
        **os.environ,
        "MEMORY": json.dumps(spec), "TASK": task, "ANSWER": answer, "BUDGET": str(budget), "HOME": str(cwd),
        "CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false", "OTEL_SDK_DISABLED": "true",
    }  # fmt: skip
    done = subprocess.run([PYTHON, "-c", CREW], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(params=["local", "remote"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """How the crews and this test open the same memory: a SQLite file, or a history of the test server."""
    if request.param == "local":
        return {"path": str(tmp_path / "crew.db")}
    srv = request.getfixturevalue("server")
    return {"path": srv.url, "key": srv.keys["acme"], "history": "c" + uuid.uuid4().hex[:10]}


@pytest.mark.slow
def test_crews_remember_and_recall_through_flexamem(spec: dict[str, Any], tmp_path: Path) -> None:
    def memory() -> fm.Memory:
        s = dict(spec)
        return fm.Memory(s.pop("path"), **s)

    for i in range(12):  # what earlier work left: far more than the recall budget
        memory().add_session([{"speaker": "clerk", "text": FILLER.format(i=i)}])
    first = kickoff(spec, "Note the customer's booking: reference CR-88412, window seat 14A.",
                    "Booking CR-88412 noted, window seat 14A.", 600, tmp_path)  # fmt: skip
    assert first["output"] == "Booking CR-88412 noted, window seat 14A."
    mem = memory()
    assert len(mem) == 13  # the task and its result, remembered verbatim (no LLM extraction) as one turn
    (last,) = mem.notes(12, 13)
    assert last.raw.startswith("clerk: Task: Note the customer's booking") and "Booking CR-88412 noted" in last.raw

    # another crew, in another process, with no context from the first: the memory alone brings the booking
    second = kickoff(
        spec, "Which seat did the customer with booking CR-88412 choose?", "Window seat 14A.", 600, tmp_path
    )
    prompt = second["prompts"][0]
    assert "Relevant memories" in prompt and "window seat 14A" in prompt
    recalled = prompt.split("Relevant memories:\n- (score=1.00) ")[1].split("\n  tokens: ")[0]  # one match
    counter = fm.counter()
    assert counter.count(recalled) <= 570 - counter.count("Which seat did the customer with booking CR-88412 choose?")
    assert sum(counter.count(n.raw) for n in memory().notes()) > 1600
    assert len(memory()) == 14  # the second crew's task remembered too

    # a search instead of a render, and what a write-once memory refuses
    check = """
import json, os
import flexamem as fm
from flexamem.adapters.crewai import FlexaMemCrewMemory
spec = json.loads(os.environ["MEMORY"])
memory = FlexaMemCrewMemory(fm.Memory(spec.pop("path"), **spec), limit=3)
hits = memory.recall("booking CR-88412 seat", limit=10)
out = {"hits": [h.record.content for h in hits], "records": [r.id for r in memory.list_records(limit=2)]}
for verb in ("forget", "update"):
    try:
        memory.forget() if verb == "forget" else memory._storage.update(hits[0].record)
    except fm.WriteOnceError as e:
        out[verb] = str(e)
memory.reset()
out["after_reset"] = len(memory.recall("booking", limit=5))
print(json.dumps(out))
"""
    env = {**os.environ, "MEMORY": json.dumps(spec), "HOME": str(tmp_path), "OTEL_SDK_DISABLED": "true"}
    done = subprocess.run([PYTHON, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(out["hits"]) == 3 and "CR-88412" in out["hits"][0]
    assert out["records"][1] == last.unit_id  # newest first: the second crew's, then the first's
    assert "write-once" in out["forget"] and "write-once" in out["update"]
    assert out["after_reset"] == 0 and len(memory()) == 0


@pytest.mark.slow
def test_crewai_page(tmp_path: Path) -> None:
    from tests.doors.docs_blocks import blocks

    (code,) = blocks("crewai.md", "python")
    if not Path(PYTHON).exists():
        if REQUIRED:
            pytest.fail(f"FLEXAMEM_REQUIRE_CREWAI=1 but {PYTHON} is missing (make crewai-setup)")
        pytest.skip(f"no CrewAI virtualenv at {PYTHON} (make crewai-setup)")
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run([PYTHON, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Note the customer's booking reference: CR-88412. -> Noted." in done.stdout
    assert "What is the customer's booking reference? -> The reference is CR-88412." in done.stdout
