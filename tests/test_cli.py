import subprocess
import sys
from pathlib import Path

from flexamem.cli import main


def test_demo_prints_notes(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["demo", "--db", str(tmp_path / "d.db")]) == 0
    out = capsys.readouterr().out
    assert "3 notes" in out and "TP1351" in out and "[s2 · 9 March 2024]" in out
    assert main(["notes", "--db", str(tmp_path / "d.db")]) == 0
    assert "CR-88412" in capsys.readouterr().out


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
