"""LongMemEval on real data: the harness over 3 development questions (their ~115k-token haystacks),
through the command a user runs, every method within its budget and every measure in range."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flexamem.cli import main
from tests.helpers import needs_data, shared_file

pytestmark = pytest.mark.integration

DATA = shared_file("longmemeval", "longmemeval-s-dev.json")


@needs_data(DATA)
def test_the_harness_runs_three_real_questions(tmp_path: Path) -> None:
    out = tmp_path / "lme"
    methods = "auto,auto-part-turns,dense-turns,hybrid-turns,piece-retrieval"
    code = main(["eval", "longmemeval", "--data", str(DATA), "--limit", "3", "--methods", methods,
                 "--budgets", "4096,16384", "--out", str(out), "--quiet", "--resamples", "200"])  # fmt: skip
    assert code == 0
    rows = [json.loads(line) for line in (out / "per_question.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 5 * 2 and all(r["within_budget"] for r in rows)
    for r in rows:
        for name in ("evidence_verbatim", "evidence_partial", "all_evidence", "session_recall", "answer_contained"):
            assert 0.0 <= r[name] <= 1.0
        assert r["evidence_verbatim"] <= r["evidence_partial"]
    by = {(r["item"], r["method"], r["budget"]): r for r in rows}
    for (item, method, budget), r in by.items():  # a larger budget never shows less of the evidence
        if budget == 4096 and method in ("dense-turns", "hybrid-turns"):
            assert by[(item, method, 16384)]["evidence_verbatim"] >= r["evidence_verbatim"]
    results = (out / "results.md").read_text()
    assert "session_recall" in results and "auto" in results
