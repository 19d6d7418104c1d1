"""Each LLM-built baseline end to end with the real local model (llama.cpp, Qwen2.5-Coder 0.5B) on a short
history: it builds, stays within the budget on every rendering, and reports its model tokens."""

from __future__ import annotations

from pathlib import Path

import flexamem as fm
from flexamem import budget as fm_budget
from flexamem.llm.local import LocalServer
from flexamem_bench.baselines.reader import BASELINE_METHODS
from flexamem_bench.methods import MethodContext
from flexamem_bench.reader import READER_PROMPT
from tests.integration.conftest import NEEDS_LOCAL_LLM

pytestmark = NEEDS_LOCAL_LLM


def test_every_baseline_with_the_local_model(server: LocalServer, tmp_path: Path) -> None:
    mem = fm.Memory(":memory:", settings=fm.Settings(one_unit_per_session=True))
    mem.add_session([{"speaker": "Ana", "text": "I adopted a beagle named Biscuit in Lisbon."}], session_id="s1")
    mem.add_session([{"speaker": "Ana", "text": "The hotel refund of 212 euros goes to my Visa ending 4417."}])
    mem.add_session([{"speaker": "Ana", "text": "I booked flight TP1351 to Porto, seat 12C."}])
    ctx = MethodContext(mem, READER_PROMPT)
    ctx.extra["baseline_model"] = server.client("local", cache=tmp_path / "cache.db", concurrency=1, timeout=300)
    question = "Which card gets the hotel refund?"
    for name, method in BASELINE_METHODS.items():
        for budget in (300, 1200):
            out = method(ctx, question, budget)
            allowance = fm_budget.allowance(budget, mem.counter.count(READER_PROMPT) + mem.counter.count(question))
            schemas = out.composition.get("tool schemas", 0)  # Sculptor's tools sit in the context too
            assert out.tokens == mem.counter.count(out.text) + schemas <= allowance, name
        billed = out.llm_tokens["read"] if name == "sculptor" else out.llm_tokens["build"]  # Sculptor builds nothing
        assert billed > 0, name
    assert BASELINE_METHODS["readagent"](ctx, "Where does Ana fly?", 1200).llm_tokens["read"] > 0
