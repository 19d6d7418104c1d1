import subprocess
import sys
from pathlib import Path

from flexamem.cli import main
from tests.helpers import locomo_file


def test_demo_prints_notes(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["demo", "--db", str(tmp_path / "d.db")]) == 0
    out = capsys.readouterr().out
    assert "3 notes" in out and "TP1351" in out and "[s2 · 9 March 2024]" in out
    assert main(["notes", "--db", str(tmp_path / "d.db")]) == 0
    assert "CR-88412" in capsys.readouterr().out


def test_the_demo_answers_its_own_question(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "d.db"
    assert main(["demo", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    render = out.split("--- render(", 1)[1].split("--- what it shows", 1)[0]
    assert "mode 'auto'" in render
    assert "I asked them to refund it to my Visa ending 4417." in render  # the answer line, verbatim
    explained = out.split("--- what it shows, and why ---", 1)[1].split("---", 1)[0]
    assert "from s3" in explained and "tokens by part" in explained
    assert f"Database: {db}" in out and "flexamem render --db" in out
    # the printed CLI line works and shows the answer
    assert main(["render", "--db", str(db), "Which card should the hotel refund go to?", "--budget", "260"]) == 0
    rendered = capsys.readouterr()
    assert "Visa ending 4417" in rendered.out and "mode auto" in rendered.err


def test_render_command_refuses_bad_input(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "d.db"
    assert main(["demo", "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["render", "--db", str(db), "q", "--history", "nope"]) == 2
    assert "has no notes" in capsys.readouterr().err
    assert main(["render", "--db", str(db), "   ", "--budget", "400"]) == 2
    assert "query is empty" in capsys.readouterr().err
    missing = tmp_path / "typo.db"
    assert main(["render", "--db", str(missing), "q"]) == 2
    assert "no database" in capsys.readouterr().err and not missing.exists()


def test_errors_are_reported_not_raised(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["ingest", "--data", str(tmp_path / "bad.json"), "--db", str(tmp_path / "x.db")]) == 2
    assert "cannot read LoCoMo file" in capsys.readouterr().err


def test_module_entry_point(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "flexamem", "demo", "--db", str(tmp_path / "d.db")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "FlexA-Mem demo" in done.stdout


def test_ingest_with_a_model_then_flagged_and_usage(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tests.llm.fake_server import FakeOpenAI

    data, db = locomo_file(tmp_path / "locomo.json"), tmp_path / "m.db"
    with FakeOpenAI() as server:
        monkeypatch.setenv("FLEXAMEM_LLM_BASE_URL", server.url)
        monkeypatch.setenv("FLEXAMEM_LLM_MODEL", "fake")
        monkeypatch.setenv("FLEXAMEM_LLM_API_KEY", "sk-do-not-print")
        monkeypatch.setenv("FLEXAMEM_LLM_CACHE", "off")
        server.faults.extend(["401"])  # the first unit's call is refused: rule-written and flagged
        assert main(["ingest", "--data", str(data), "--db", str(db), "--writer", "llm", "--progress"]) == 0
    out = capsys.readouterr()
    assert "conv-x: 3 notes" in out.out and "ingest: 3/3 sessions" in out.err  # records written, then units stored
    assert "sk-do-not-print" not in out.out + out.err and "api_key=<set>" in out.err
    assert main(["flagged", "--db", str(db)]) == 0
    flagged = capsys.readouterr().out.strip().splitlines()
    assert len(flagged) == 1 and "HTTP 401" in flagged[0] and "writer=rule" in flagged[0]
    assert main(["usage", "--db", str(db), "--units"]) == 0
    usage = capsys.readouterr().out
    assert "conv-x\trecord\t2\t" in usage and "conv-x\tall\t2\t" in usage
    monkeypatch.delenv("FLEXAMEM_LLM_MODEL")
    assert main(["ingest", "--data", str(data), "--db", str(tmp_path / "r.db"), "--writer", "llm"]) == 2
    assert "needs both" in capsys.readouterr().err


def test_ingest_of_an_unknown_sample_is_an_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    data = locomo_file(tmp_path / "locomo.json")
    assert main(["ingest", "--data", str(data), "--db", str(tmp_path / "m.db"), "--sample", "nope"]) == 2
    assert "no conversation nope" in capsys.readouterr().err


def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Issue 29's reproducers: a path too long for the file system, a file that is not UTF-8, JSON nested
    deeper than Python parses; each one line on stderr and exit code 2, nothing created."""
    db = str(tmp_path / "c.db")
    assert main(["init", "--db", db]) == 0
    capsys.readouterr()
    long_path = str(tmp_path / ("a" * 5000))
    (tmp_path / "turns.json").write_text('[{"speaker": "A", "text": "hi"}]')
    latin = tmp_path / "latin.json"
    latin.write_bytes('[{"speaker": "Zoë", "text": "café"}]'.encode("latin-1"))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    for argv, says in (
        (["add", "--db", long_path, str(tmp_path / "turns.json")], "File name too long"),
        (["render", "--db", long_path, "q"], "File name too long"),
        (["add", "--db", db, str(latin)], "not UTF-8"),
        (["add", "--db", db, str(deep)], "nested too deeply"),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1 and len(err) < 400, err
    assert main(["histories", "--db", db]) == 0 and "no histories" in capsys.readouterr().out


def test_the_demo_agent_gets_back_the_step_its_task_needs(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from flexamem.cli.demo import DEMO_REFERENCE

    assert main(["demo", "--db", str(tmp_path / "d.db")]) == 0
    agent = capsys.readouterr().out.split("--- agent:", 1)[1]
    memory = agent.split("Memory of earlier steps", 1)[1].split("\n[assistant]", 1)[0]
    assert f"booking reference {DEMO_REFERENCE}" in memory  # the old observation, verbatim, in the memory message
    why = next(line for line in agent.splitlines() if line.startswith("why step 2 is there"))
    assert "left the recent window" in why and "'lisbon'" in why and why.endswith(f"verbatim: {DEMO_REFERENCE}")
