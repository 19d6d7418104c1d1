"""The baselines through ``flexamem eval locomo``: listed in --help, run with the stand-in, billed per row."""

import json
import subprocess
import sys
from pathlib import Path

from flexamem.cli import main
from flexamem_bench.baselines.reader import BASELINE_METHODS
from tests.helpers import locomo_file


def locomo_with_questions(path: Path) -> Path:
    data = json.loads(locomo_file(path).read_text())
    turns = data[0]["conversation"]["session_1"]
    data[0]["qa"] = [
        {
            "question": f"What did {t['speaker']} say?",
            "answer": t["text"][:30],
            "evidence": [t["dia_id"]],
            "category": 4,
        }
        for t in turns[:2]
    ]
    path.write_text(json.dumps(data))
    return path


def test_eval_help_lists_the_baselines() -> None:
    done = subprocess.run([sys.executable, "-m", "flexamem", "eval", "--help"], capture_output=True, text=True)
    assert all(name in done.stdout for name in BASELINE_METHODS)


def test_eval_locomo_with_the_stand_in(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    data, out = locomo_with_questions(tmp_path / "locomo.json"), tmp_path / "out"
    methods = ",".join(BASELINE_METHODS) + ",auto"
    args = ["eval", "locomo", "--data", str(data), "--out", str(out), "--methods", methods, "--budgets", "300,800"]
    assert main([*args, "--stand-in", "--quiet", "--resamples", "200"]) == 0
    rows = [json.loads(line) for line in (out / "per_question.jsonl").read_text().splitlines()]
    assert {r["method"] for r in rows} == {*BASELINE_METHODS, "auto"}
    assert len(rows) == 2 * 2 * (len(BASELINE_METHODS) + 1)
    for r in rows:
        assert ("llm_tokens" in r) == (r["method"] != "auto")
    monkeypatch.delenv("FLEXAMEM_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("FLEXAMEM_LLM_MODEL", raising=False)
    capsys.readouterr()
    assert main([*args[:-4], "--methods", "a-mem", "--out", str(tmp_path / "o2")]) == 2
    assert "LLM-built baselines ['a-mem'] needs an endpoint" in capsys.readouterr().err
