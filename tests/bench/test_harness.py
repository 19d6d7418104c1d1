import json
import math
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.cli import main
from flexamem.write.records import RuleWriter
from flexamem_bench.datasets import locomo_histories, longmemeval_histories
from flexamem_bench.harness import close_context, load_rows, open_context, run, summarise
from flexamem_bench.methods import METHODS
from tests.helpers import tiny_history

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "longmemeval_mini.json"


def test_longmemeval_loader_maps_turns_labels_and_bad_items() -> None:
    histories = longmemeval_histories(FIXTURE)
    assert [h.history_id for h in histories] == ["q1", "q2_abs", "bad2"]
    q1 = histories[0]
    assert [s.session_id for s in q1.sessions] == ["sess_a", "sess_b", "sess_c"]
    assert q1.sessions[1].turns[0] == {
        "speaker": "user",
        "role": "user",
        "text": "My dog Biscuit is a beagle and he keeps chewing shoes.",
        "id": "sess_b:0",
    }
    assert q1.questions[0].evidence == ("sess_b:0",) and not q1.one_unit_per_session
    # no has_answer label: the answer session's turns are the evidence; abstention is named
    assert histories[1].questions[0].category == "temporal-reasoning/abstention"
    assert histories[1].questions[0].evidence == ("sess_d:0", "sess_d:1")
    assert histories[2].problems and "missing 'haystack_sessions'" in histories[2].problems[0]
    # the benchmark's retrieval evaluation: user turns ranked, labelled user turns gold, abstention unscored
    assert q1.retrieval_corpus == {"sess_a:0", "sess_b:0", "sess_b:2", "sess_c:0"}
    assert q1.questions[0].retrieval_gold == ("sess_b:0",) and histories[1].questions[0].retrieval_gold == ()
    with pytest.raises(fm.InvalidInputError):
        longmemeval_histories(FIXTURE.parent / "nope.json")


def test_a_haystack_holding_one_session_twice_keeps_both(tmp_path: Path) -> None:
    """LongMemEval haystacks can repeat a session (2 of the 60 dev questions): the repeat gets a name of
    its own instead of failing the whole question at ingest."""
    session = [{"role": "user", "content": "I moved to Porto in May."}, {"role": "assistant", "content": "Nice!"}]
    item = {
        "question_id": "dup", "question_type": "single-session-user", "question": "Where did I move?",
        "answer": "Porto", "question_date": "2024/06/01", "haystack_session_ids": ["a", "b", "a"],
        "haystack_dates": ["2024/05/01", "2024/05/02", "2024/05/03"],
        "haystack_sessions": [session, [{"role": "user", "content": "Hi", "has_answer": False}], session],
        "answer_session_ids": ["a"],
    }  # fmt: skip
    path = tmp_path / "dup.json"
    path.write_text(json.dumps([item]))
    (h,) = longmemeval_histories(path)
    assert [s.session_id for s in h.sessions] == ["a", "b", "a#2"]
    assert h.questions[0].evidence == ("a:0", "a:1", "a#2:0", "a#2:1") and h.questions[0].date == "2024/06/01"
    run([h], ["auto"], [512], tmp_path / "out", progress=False)
    assert load_rows(tmp_path / "out")[0]["session_recall"] == 1.0


def test_every_method_stays_in_budget_and_measures_make_sense(tmp_path: Path) -> None:
    h = tiny_history()
    run([h], list(METHODS), [256, 1024], tmp_path, progress=False)
    rows = {(r["method"], r["budget"]): r for r in load_rows(tmp_path)}
    assert len(rows) == len(METHODS) * 2
    assert all(r["within_budget"] for r in rows.values())
    assert rows[("full", 256)]["evidence_verbatim"] == 1.0 and rows[("full", 256)]["answer_contained"] == 1.0
    assert rows[("piece-retrieval", 256)]["evidence_verbatim"] == 1.0  # BM25 finds "passport"
    timeline = rows[("timeline-only", 256)]  # records and merged records only: no raw text, no excerpts
    assert timeline["composition"]["raw"] == timeline["composition"]["excerpts"] == 0
    assert timeline["composition"]["records"] + timeline["composition"]["merged"] == timeline["tokens"] > 0
    assert timeline["evidence_verbatim"] == 0.0
    assert rows[("truncation", 256)]["evidence_verbatim"] == 0.0  # the evidence is old
    results = summarise(tmp_path, resamples=200)
    names = {r["measure"] for r in results}
    assert {
        "evidence_verbatim",
        "evidence_partial",
        "all_evidence",
        "answer_contained",
        "tokens",
        "latency_ms",
    } <= names
    assert (tmp_path / "results.md").read_text().startswith("### evidence_verbatim")
    assert json.loads((tmp_path / "comparisons.json").read_text())


def test_runs_resume_without_redoing_items(tmp_path: Path) -> None:
    h = tiny_history()
    run([h], ["truncation"], [512], tmp_path, progress=False)
    first = (tmp_path / "per_question.jsonl").read_text()
    run([h], ["truncation", "piece-retrieval"], [512], tmp_path, progress=False)
    rows = load_rows(tmp_path)
    assert (tmp_path / "per_question.jsonl").read_text().startswith(first)
    assert sorted(r["method"] for r in rows) == ["piece-retrieval", "truncation"]
    with pytest.raises(fm.InvalidInputError, match="unknown method"):
        run([h], ["magic"], [512], tmp_path, progress=False)


def test_a_results_folder_keeps_the_embedder_its_rows_were_computed_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = tiny_history()
    monkeypatch.setenv("FLEXAMEM_EMBEDDER", "onnx")
    run([h], ["dense-turns"], [512], tmp_path, progress=False)
    assert json.loads((tmp_path / "run.json").read_text()) == {"embedder": "all-MiniLM-L6-v2"}
    rows = (tmp_path / "per_question.jsonl").read_text()
    monkeypatch.setenv("FLEXAMEM_EMBEDDER", "onnx-int8")  # resuming with int8 would mix the two
    with pytest.raises(fm.InvalidInputError, match="all-MiniLM-L6-v2-int8-v3"):
        run([h], ["dense-turns", "auto"], [512], tmp_path, progress=False)
    assert (tmp_path / "per_question.jsonl").read_text() == rows  # nothing added
    monkeypatch.setenv("FLEXAMEM_EMBEDDER", "numpy")  # the same vectors under the same name: resumes
    run([h], ["dense-turns", "auto"], [512], tmp_path, progress=False)
    assert sorted({r["method"] for r in load_rows(tmp_path)}) == ["auto", "dense-turns"]


def test_cli_eval_longmemeval_fixture_writes_every_output(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    code = main(
        [
            "eval",
            "longmemeval",
            "--data",
            str(FIXTURE),
            "--budgets",
            "256,512",
            "--methods",
            "piece-recovery,piece-retrieval,truncation",
            "--out",
            str(tmp_path),
            "--resamples",
            "100",
            "--quiet",
        ]
    )
    assert code == 0
    for name in (
        "results.json",
        "per_question.jsonl",
        "results.md",
        "comparisons.json",
        "evidence_verbatim.png",
        "composition.png",
    ):
        assert (tmp_path / name).exists(), name
    assert "missing 'haystack_sessions'" in capsys.readouterr().err
    rows = json.loads((tmp_path / "results.json").read_text())
    assert {r["method"] for r in rows} == {"piece-recovery", "piece-retrieval", "truncation"}
    assert all(set(r) == {"method", "budget", "measure", "value", "n", "ci_low", "ci_high"} for r in rows)
    ranked = {r["method"] for r in rows if r["measure"] == "session_recall_any@5"}
    assert ranked == {"piece-recovery", "piece-retrieval"}  # truncation ranks no turns
    scored = {r["item"] for r in load_rows(tmp_path) if "turn_recall_any@5" in r}
    assert scored == {"q1"}  # as the benchmark, no retrieval measure for an abstention question
    assert "### retrieval (LongMemEval's measures" in (tmp_path / "results.md").read_text()


def test_locomo_categories_are_checked(tmp_path: Path) -> None:
    with pytest.raises(fm.InvalidInputError, match="categories"):
        locomo_histories(tmp_path / "x.json", (9,))


def test_an_llm_record_writer_is_billed_on_flexamem_rows(tmp_path: Path) -> None:
    from flexamem.llm import OpenAICompatible, RetryPolicy
    from flexamem.write.llm_writer import LLMWriter
    from tests.llm.fake_server import FakeOpenAI

    with FakeOpenAI() as server:
        llm = OpenAICompatible(server.url, "fake", retry=RetryPolicy(max_retries=1, base_delay=0.01), timeout=5)
        path = run(
            [tiny_history()], ["auto", "truncation"], [120, 2000], tmp_path / "o", writer=LLMWriter(llm), progress=False
        )
        asked = len(server.requests)
    rows = {(r["method"], r["budget"]): r for r in load_rows(tmp_path / "o")}
    assert path.exists() and asked >= 8  # one record per session at least
    build = {r["llm_tokens"]["build"] for (m, _), r in rows.items() if m == "auto"}
    assert len(build) == 1 and build.pop() > 0  # the same history's records, billed once per row
    # a tight budget has merged records written (once: then reused); a wide one needs none
    assert rows[("auto", 120)]["llm_tokens"]["read"] > 0 and rows[("auto", 2000)]["llm_tokens"]["read"] == 0
    assert "llm_tokens" not in rows[("truncation", 120)]  # a method that shows no record pays nothing
    plain = run([tiny_history()], ["auto"], [2000], tmp_path / "rule", progress=False)
    assert all("llm_tokens" not in r for r in load_rows(plain.parent))  # the rule writer costs nothing


def test_keep_stores_each_history_once_and_reruns_ingest_nothing(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    run([tiny_history()], ["auto", "dense-turns"], [256], tmp_path / "a", progress=False, keep=keep)
    (db,) = keep.glob("*.db")
    assert db.with_suffix(".done").read_text() == "8" and db.with_suffix(".turns.npy").exists()
    stamp = db.stat().st_mtime_ns
    run([tiny_history()], ["auto", "dense-turns", "hybrid-turns"], [256], tmp_path / "b", progress=False, keep=keep)
    assert db.stat().st_mtime_ns == stamp  # opened, not written: nothing ingested again
    first, second = load_rows(tmp_path / "a"), load_rows(tmp_path / "b")
    strip = lambda rows: [{k: v for k, v in r.items() if k != "latency_ms"} for r in rows]  # noqa: E731
    assert strip(second[:2]) == strip(first) and len(second) == 3
    # an ingest that did not finish (no .done) is thrown away and done again
    db.with_suffix(".done").unlink()
    run([tiny_history()], ["auto"], [512], tmp_path / "c", progress=False, keep=keep)
    assert db.with_suffix(".done").exists() and len(fm.Memory(db).notes()) == 8
    # `flexamem eval` passes the rule writer, the scripts no writer: the same records, the same kept store
    stamp = db.stat().st_mtime_ns
    ctx = open_context(tiny_history(), None, RuleWriter(), keep=keep)
    assert Path(ctx.mem.store.path) == db and db.stat().st_mtime_ns == stamp  # type: ignore[attr-defined]
    close_context(ctx)
    other = fm.Settings(kappa=32)  # other settings: another file
    run([tiny_history()], ["auto"], [256], tmp_path / "d", progress=False, keep=keep, settings=other)
    assert len(list(keep.glob("*.db"))) == 2


def test_retrieval_measures_follow_the_benchmarks_definitions() -> None:
    from flexamem_bench.measures import ranking_measures, retrieval_measures

    assert ranking_measures(["a", "b", "c"], {"b"}, 1) == (0.0, 0.0, 0.0)
    # the benchmark's DCG: ranks 1 and 2 both weigh 1, rank 3 1/log2(3)
    any_, all_, ndcg = ranking_measures(["a", "b", "c"], {"b", "c"}, 3)
    assert any_ == 1.0 and all_ == 1.0 and ndcg == pytest.approx((1 + 1 / math.log2(3)) / 2)
    any_, all_, ndcg = ranking_measures(["a", "c", "b"], {"b"}, 3)
    assert any_ == 1.0 and all_ == 1.0 and ndcg == pytest.approx(1 / math.log2(3))
    assert ranking_measures(["b", "c"], {"b", "c"}, 5) == (1.0, 1.0, pytest.approx(1.0))
    # session level: the turns read through their sessions up to the shortest prefix with k sessions
    session_of = {"s1:0": "s1", "s1:1": "s1", "s1:2": "s1", "s2:0": "s2", "s3:0": "s3", "s3:1": "s3"}
    out = retrieval_measures(["s1:0", "s1:1", "s3:0", "s2:0", "s3:1", "s1:2"], ["s2:0"], session_of)
    assert out["turn_recall_any@5"] == 1.0 and out["session_recall_any@5"] == 1.0
    assert out["turn_ndcg_any@5"] == pytest.approx(1 / math.log2(4))  # s2:0 is the fourth turn
    # at k=5 there are 3 sessions only: every ranked turn is read; s2's one turn is the fourth
    assert out["session_ndcg_any@5"] == pytest.approx(1 / math.log2(4))
    # only a gold turn stands for its session: another turn of it is a session of its own; a turn
    # outside the corpus (session_of) is dropped from the ranking
    other = retrieval_measures(["x:9", "s3:0", "s1:2", "s2:0"], ["s1:0"], session_of)
    assert other["session_recall_any@5"] == 0.0 and other["session_ndcg_any@5"] == 0.0
    found = retrieval_measures(["x:9", "s3:0", "s1:2", "s1:0"], ["s1:0"], session_of)
    assert found["turn_recall_any@5"] == 1.0 and found["turn_ndcg_any@5"] == pytest.approx(1 / math.log2(3))
    # k counts distinct sessions: a session's second turn lengthens the prefix read
    six = {f"s{i}:0": f"s{i}" for i in range(1, 7)} | {"s1:1": "s1"}
    spread = retrieval_measures(["s1:0", "s2:0", "s3:0", "s4:0", "s5:0", "s6:0"], ["s6:0"], six)
    assert spread["session_recall_any@5"] == 0.0 and spread["session_recall_any@10"] == 1.0
    again = retrieval_measures(["s1:0", "s1:1", "s2:0", "s3:0", "s4:0", "s6:0"], ["s6:0"], six)
    assert again["session_recall_any@5"] == 1.0 and again["turn_recall_any@5"] == 0.0  # sixth turn, fifth session
    assert again["session_ndcg_any@5"] == pytest.approx(1 / math.log2(6))
    # s1:1 is not gold: it counts as a session of its own, so five sessions end before s1:0
    late = ["s1:1", "s2:0", "s3:0", "s4:0", "s5:0", "s1:0"]
    assert retrieval_measures(late, ["s1:0"], six)["session_recall_all@5"] == 0.0
    assert retrieval_measures(late, ["s1:1"], six)["session_recall_all@5"] == 1.0
