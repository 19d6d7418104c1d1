"""The optional LLM reader and judge: parsing, and a harness run through a real local HTTP server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.eval.harness import run, summarise
from flexamem.eval.reader import LLMReader, final_answer, verdict
from tests.eval.test_harness import tiny_history
from tests.llm.fake_server import FakeOpenAI


def test_final_answer_and_verdict_parsing() -> None:
    assert final_answer("Notes: the memory says 7781.\nAnswer: 7781") == "7781"
    assert final_answer("notes\n**Answer:** ends in 7781\n") == "ends in 7781"
    assert final_answer("just this") == "just this"
    assert verdict("CORRECT") and verdict("correct.") and not verdict("WRONG: it says 12")
    with pytest.raises(fm.LLMOutputError):
        verdict("I think so")


def test_harness_reader_adds_accuracy_per_category_and_reruns_for_free(tmp_path: Path) -> None:
    with FakeOpenAI() as server:
        reader = LLMReader(fm.OpenAICompatible(server.url, "fake", cache=tmp_path / "cache.sqlite"))
        run(
            [tiny_history()],
            ["piece-recovery", "truncation"],
            [256, 2048],
            tmp_path / "a",
            progress=False,
            reader=reader,
        )
        rows = [json.loads(x) for x in (tmp_path / "a" / "per_question.jsonl").read_text().splitlines()]
        assert len(rows) == 4 and all(r["accuracy"] in (0.0, 1.0) and "reader_answer" in r for r in rows)
        # the fake reader answers with the memory's last line; the judge checks the gold string in it
        for r in rows:
            assert r["accuracy"] == float("7781" in r["reader_answer"])
        first = len(server.requests)  # a reader and a judge call per distinct rendering (same text: cached)
        assert 4 <= first <= 8
        results = summarise(tmp_path / "a", resamples=200)
        names = {r["measure"] for r in results}
        assert {"accuracy", "accuracy:single-hop"} <= names
        assert "### accuracy:single-hop" in (tmp_path / "a" / "results.md").read_text()
        run(
            [tiny_history()],
            ["piece-recovery", "truncation"],
            [256, 2048],
            tmp_path / "b",
            progress=False,
            reader=reader,
        )
        assert len(server.requests) == first  # a rerun elsewhere comes from the response cache
