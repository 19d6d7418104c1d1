"""The LLM-built baselines in the agent harness (trajectory replay) with the stand-in model."""

import json
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.chat import chat_problems
from flexamem_bench.agent_harness import replay, run_trajectories
from flexamem_bench.baselines import StandInModel
from flexamem_bench.baselines.agent import AGENT_BASELINES
from tests.helpers import trajectory


@pytest.mark.parametrize("name", sorted(AGENT_BASELINES))
def test_agent_baselines_stay_within_the_ceiling(name: str) -> None:
    traj = trajectory()
    model = StandInModel()
    active = 0
    for _, ctx, m, _ in replay(traj, name, 1500, model):
        if ctx is None:
            continue
        active += 1
        assert ctx.tokens <= m.session.core.ceiling(1500)
        assert chat_problems(ctx.messages) == []
    assert active > 5
    phase = "read" if name == "sculptor" else "build"  # Sculptor builds nothing: its calls are at read time
    assert m.ledger.tokens[phase] > 0  # type: ignore[attr-defined]


def test_agent_harness_rows_carry_the_bill(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_trajectories([trajectory()], ["readagent", "auto"], [1500], out, progress=False, baseline_model=StandInModel())
    rows = [json.loads(x) for x in (out / "per_question.jsonl").read_text().splitlines()]
    read = [r for r in rows if r["method"] == "readagent"]
    assert read and all(r["llm_tokens"]["read"] > 0 for r in read)
    assert all("llm_tokens" not in r for r in rows if r["method"] == "auto")
    with pytest.raises(fm.FlexaMemError, match="needs a model"):
        next(iter(replay(trajectory(), "a-mem", 1500)))
