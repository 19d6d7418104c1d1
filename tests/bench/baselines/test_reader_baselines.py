"""The LLM-built baselines with the deterministic stand-in model: the logic of each, its budget, its bill."""

import pytest

import flexamem as fm
from flexamem_bench.baselines import Ledger, StandInModel
from flexamem_bench.baselines.memories import AMem
from flexamem_bench.baselines.reader import BASELINE_METHODS, afm
from tests.helpers import SESSIONS, context


@pytest.mark.parametrize("name", sorted(BASELINE_METHODS))
def test_every_baseline_fits_its_budget_and_reports_its_tokens(name: str) -> None:
    ctx = context()
    method = BASELINE_METHODS[name]
    for budget in (250, 600, 4000):
        question = "Which card gets the hotel refund?"
        out = method(ctx, question, budget)
        allowance = ctx.allowance(budget, question)
        schemas = out.composition.get("tool schemas", 0)  # Sculptor's tools sit in the context too
        assert out.tokens == ctx.mem.counter.count(out.text) + schemas <= allowance
        if name != "sculptor":  # it builds nothing: all its model calls are at read time
            assert out.llm_tokens["build"] > 0
    out = method(ctx, "Which card gets the hotel refund?", 4000)
    assert "4417" in out.text
    assert out.llm_tokens["read"] > 0 if name == "sculptor" else out.llm_tokens["build"] > 0


def test_a_mem_links_evolves_and_searches() -> None:
    ctx = context()
    ledger = Ledger(StandInModel())
    amem = AMem(ctx.mem.embedder).build(ctx.mem.notes(), ledger)
    assert any(amem.links) and ledger.calls["build"] > len(SESSIONS)  # notes, links and evolution calls
    order = amem.order(ctx.mem.embedder.embed(["What is the name of Ana's beagle?"])[0], ctx.spans())
    assert order[0] in (0, 1, 4) and sorted(order) == list(range(len(SESSIONS)))


def test_a_mem_fod_degrades_where_a_mem_drops() -> None:
    ctx = context()
    question = "Which card gets the hotel refund?"
    plain, fod = BASELINE_METHODS["a-mem"](ctx, question, 400), BASELINE_METHODS["a-mem-fod"](ctx, question, 400)
    assert "4417" in fod.text and fod.composition["records"] + fod.composition["merged"] > 0  # with a timeline
    assert plain.composition.get("records", 0) == 0 and plain.composition["raw"] > 0  # raw notes only
    assert fod.llm_tokens["build"] == plain.llm_tokens["build"]  # one A-Mem, built once


def test_summary_a_mem_and_readagent_show_their_own_forms() -> None:
    ctx = context()
    assert BASELINE_METHODS["summary-a-mem"](ctx, "Which flight?", 600).text.startswith("[summary of the history]")
    out = BASELINE_METHODS["readagent"](ctx, "Which flight did Ana book to Porto?", 600)
    assert "· gist]" in out.text and "TP1351 to Porto" in out.text and out.llm_tokens["read"] > 0


def test_afm_thresholds_pick_the_forms() -> None:
    ctx = context()
    question = "Which card gets the hotel refund?"
    assert afm(ctx, question, 8000, thresholds=(9.0, 9.0)).text.count("· placeholder]") == len(SESSIONS)
    assert afm(ctx, question, 8000, thresholds=(9.0, -1.0)).text.count("· compressed]") == len(SESSIONS)
    assert "· raw]" in afm(ctx, question, 8000, thresholds=(-1.0, -1.0)).text


def test_without_a_model_the_baselines_say_what_is_missing() -> None:
    ctx = context()
    del ctx.extra["baseline_model"]
    with pytest.raises(fm.FlexaMemError, match="need a model"):
        BASELINE_METHODS["a-mem"](ctx, "q", 500)


def test_memgas_links_by_a_gaussian_mixture_and_ranks_by_pagerank() -> None:
    import numpy as np

    from flexamem_bench.baselines.memories import MemGAS, gmm_threshold

    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(0.2, 0.05, 200), rng.normal(0.8, 0.05, 20)])
    assert 0.3 < gmm_threshold(values) < 0.7
    assert gmm_threshold(np.full(10, 0.5)) == float("inf")  # nothing to separate: no links
    ctx = context()
    ledger = Ledger(StandInModel())
    memory = MemGAS(ctx.mem.embedder).build(ctx.mem.notes(), ledger)
    order = memory.rank(ctx.mem.embedder.embed(["the beagle Biscuit and puppy school"])[0], ctx.spans())
    assert sorted(order) == list(range(len(SESSIONS))) and order[0] in (0, 1, 4)
    kept = memory.filter(order, "Which flight to Porto?", ledger)
    assert kept[0] == 5 and ledger.tokens["read"] > 0
