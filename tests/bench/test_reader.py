"""The optional LLM reader and judge: parsing, and a harness run through a real local HTTP server."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import flexamem as fm
from flexamem_bench.harness import run, summarise
from flexamem_bench.reader import LLMReader, final_answer, verdict
from tests.helpers import tiny_history
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


def test_longmemeval_protocol_gives_the_date_and_the_judge_of_each_type(tmp_path: Path) -> None:
    """LongMemEval's protocol: the question date reaches the reader, each question type its own judge,
    which reads the whole response and answers yes or no."""
    from flexamem_bench.reader import LME_JUDGES

    h = tiny_history()
    temporal = dataclasses.replace(h.questions[0], category="temporal-reasoning", date="2024/05/20 (Mon) 10:00")
    abstain = dataclasses.replace(h.questions[0], item_id="h/q1_abs", category="temporal-reasoning/abstention")
    h = dataclasses.replace(h, questions=[temporal, abstain])
    with FakeOpenAI() as server:
        reader = LLMReader(fm.OpenAICompatible(server.url, "fake"), protocol="longmemeval")
        run([h], ["truncation"], [2048], tmp_path / "lme", progress=False, reader=reader)
        bodies = [r["body"]["messages"] for r in server.requests]
    reads = [m for m in bodies if m[-1]["content"].startswith("Memory:")]
    judges = [m for m in bodies if "Correct answer:" in m[-1]["content"]]
    assert len(reads) == 2
    assert "Current date: 2024/05/20 (Mon) 10:00" in reads[0][-1]["content"]
    assert "Current date: unknown" in reads[1][-1]["content"]  # the item has no date
    assert {m[0]["content"] for m in judges} == {LME_JUDGES["temporal-reasoning"], LME_JUDGES["abstention"]}
    assert all("Notes:" in m[-1]["content"] for m in judges)  # the whole response is judged
    rows = [json.loads(x) for x in (tmp_path / "lme" / "per_question.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["accuracy"] == float("7781" in r["reader_answer"]) for r in rows)
    assert verdict("yes") and not verdict("No.")
    with pytest.raises(fm.InvalidInputError):
        LLMReader(fm.OpenAICompatible(server.url, "fake"), protocol="nope")
