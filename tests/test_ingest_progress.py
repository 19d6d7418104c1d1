"""``flexamem ingest`` of a large import: progress and the time left on stderr (on a terminal, or with
``--progress``; quiet otherwise), and an embeddings endpoint given by its flags."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import flexamem as fm
from flexamem.cli import main
from flexamem.cli.progress import Progress, duration
from flexamem.server.embeddings import EmbeddingServer
from flexamem.write.default_embed import default_embedder
from tests.helpers import locomo_file


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def big_locomo(path: Path, conversations: int = 3, sessions: int = 4) -> Path:
    """A LoCoMo file of several conversations of several sessions each."""
    data = []
    for c in range(conversations):
        conv: dict[str, object] = {"speaker_a": "Ana", "speaker_b": "Ben"}
        for n in range(1, sessions + 1):
            conv[f"session_{n}"] = [
                {"speaker": "Ana", "dia_id": f"D{n}:1", "text": f"Conversation {c}, day {n}: I paid INV-{c}{n}."},
                {"speaker": "Ben", "dia_id": f"D{n}:2", "text": f"Noted, invoice INV-{c}{n} for the trip."},
            ]
            conv[f"session_{n}_date_time"] = f"{n} May 2023"
        data.append({"sample_id": f"conv-{c}", "conversation": conv, "qa": []})
    path.write_text(json.dumps(data))
    return path


def test_durations_read_as_a_person_says_them() -> None:
    assert [duration(s) for s in (0.4, 42, 65, 3599, 7620)] == [
        "0 s",
        "42 s",
        "1 min 05 s",
        "59 min 59 s",
        "2 h 07 min",
    ]


def test_the_time_left_scales_the_time_taken_by_the_work_left() -> None:
    clock, out = Clock(), io.StringIO()
    meter = Progress("ingest", 4, 400.0, unit="sessions", stream=out, clock=clock)
    meter.update(0, 0)
    clock.now += 10
    meter.update(1, 100)  # a quarter of the text in 10 s: 30 s left
    clock.now += 50
    meter.update(2, 300)  # three quarters in 60 s: 20 s left (weighted by text, not by sessions)
    clock.now += 5
    meter.update(4, 400)
    lines = out.getvalue().splitlines()
    assert lines == [
        "ingest: 0/4 sessions (0%), 0 s elapsed, estimating the time left",
        "ingest: 1/4 sessions (25%), 10 s elapsed, ~30 s left",
        "ingest: 2/4 sessions (75%), 1 min 00 s elapsed, ~20 s left",
        "ingest: 4/4 sessions (100%), done in 1 min 05 s",
    ]


def test_a_log_gets_a_line_a_tenth_and_a_terminal_one_line_redrawn() -> None:
    clock, log = Clock(), io.StringIO()
    meter = Progress("ingest", 1000, 1000.0, stream=log, clock=clock, every=30.0)
    for done in range(1, 1001):
        clock.now += 0.01
        meter.update(done, float(done))
    assert len(log.getvalue().splitlines()) == 11  # the first, then one a tenth, the last one "done"
    meter = Progress("ingest", 1000, 1000.0, stream=log, clock=clock, every=30.0)
    meter.update(1, 1.0)
    clock.now += 31  # slow work: a line at least every 30 s
    meter.update(2, 2.0)
    assert log.getvalue().splitlines()[-1].startswith("ingest: 2/1000")

    clock, tty = Clock(), Terminal()
    meter = Progress("ingest", 100, 100.0, stream=tty, clock=clock, redraw=0.2)
    for done in range(1, 101):
        clock.now += 0.05
        meter.update(done, float(done))
    drawn = tty.getvalue()
    assert drawn.count("\n") == 1 and drawn.endswith("\n")  # one line, redrawn in place (padded over the last)
    assert drawn.rstrip().endswith("ingest: 100/100 items (100%), done in 5 s")
    assert 20 <= drawn.count("\r") <= 30  # at most every 0.2 s, not 100 times
    meter = Progress("ingest", 2, 2.0, stream=tty, clock=clock)
    meter.update(1, 1.0)
    meter.clear()
    assert tty.getvalue().endswith("\r")  # the line taken off before other output


def test_ingest_shows_progress_with_the_flag_and_is_quiet_without(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    data = big_locomo(tmp_path / "big.json")
    assert main(["ingest", "--data", str(data), "--db", str(tmp_path / "a.db"), "--progress"]) == 0
    out = capsys.readouterr()
    progress = [line for line in out.err.splitlines() if line.startswith("ingest:")]
    assert progress[0] == "ingest: 0/12 sessions of 3 conversations (0%), 0 s elapsed, estimating the time left"
    assert any(line.endswith(" left") and "~" in line for line in progress)
    assert progress[-1].startswith("ingest: 12/12 sessions of 3 conversations (100%), done in")
    assert len([line for line in progress if "done in" in line]) == 1
    assert [line.split(":")[0] for line in out.out.splitlines()] == ["conv-0", "conv-1", "conv-2"]

    assert main(["ingest", "--data", str(data), "--db", str(tmp_path / "b.db")]) == 0
    out = capsys.readouterr()
    assert "ingest:" not in out.err and "conv-2: 4 notes" in out.out  # not a terminal: quiet

    # a rerun resumes: only the sessions not yet written count
    assert main(["ingest", "--data", str(data), "--db", str(tmp_path / "a.db"), "--progress"]) == 0
    assert "ingest: 0/0 sessions" in capsys.readouterr().err


@pytest.mark.slow
def test_ingest_on_a_terminal_redraws_its_line(tmp_path: Path) -> None:
    data = big_locomo(tmp_path / "big.json", conversations=2, sessions=3)
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "flexamem", "ingest", "--data", str(data), "--db", str(tmp_path / "t.db")],
        stdout=subprocess.PIPE,
        stderr=secondary,
        env={**os.environ, "FLEXAMEM_THREADS": "1"},
    )
    os.close(secondary)
    seen = b""
    while True:
        ready, _, _ = select.select([primary], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the process closed its end
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=120) == 0
    os.close(primary)
    text = seen.decode()
    assert text.count("\r") >= 2 and "\ringest: 6/6 sessions of 2 conversations (100%), done in" in text
    assert proc.stdout is not None and b"conv-1: 3 notes" in proc.stdout.read()


@pytest.fixture()
def endpoint_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The variables ``--embeddings-*`` set in this process, put back as they were afterwards; the local
    embedder fp32 on every processor (an endpoint serves fp32 MiniLM, never one of the int8 recipes)."""
    for name in ("FLEXAMEM_EMBEDDINGS_URL", "FLEXAMEM_EMBEDDINGS_MODEL", "FLEXAMEM_EMBEDDINGS_NAME"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("FLEXAMEM_EMBEDDER", "fp32")
    yield


def test_ingest_through_an_endpoint_gives_the_local_vectors(tmp_path: Path, capsys, endpoint_env: None) -> None:  # type: ignore[no-untyped-def]
    data = locomo_file(tmp_path / "locomo.json")
    assert main(["ingest", "--data", str(data), "--db", str(tmp_path / "near.db")]) == 0
    with EmbeddingServer(default_embedder()) as server:
        args = ["--embeddings-url", server.url, "--embeddings-model", "all-MiniLM-L6-v2"]
        assert main(["ingest", "--data", str(data), "--db", str(tmp_path / "far.db"), *args]) == 0
        assert server.texts > 8  # the probes, then the units' and pieces' texts
    err = capsys.readouterr().err
    assert "embeddings by EndpointEmbedder(" in err and "key=<none>" in err
    with sqlite3.connect(tmp_path / "far.db") as db:
        assert json.loads(db.execute("SELECT meta FROM histories").fetchone()[0])["embedder"] == "all-MiniLM-L6-v2"
    os.environ.pop("FLEXAMEM_EMBEDDER")  # read both back locally, by the processor's default: each goes on
    # with the embedder it recorded (fp32), whatever that default is
    far, near = fm.Memory(tmp_path / "far.db", history="conv-x"), fm.Memory(tmp_path / "near.db", history="conv-x")
    with far, near:
        assert np.allclose(far.history.embeddings, near.history.embeddings, atol=1e-5)
        assert far.render("the hotel refund card?", 300).text == near.render("the hotel refund card?", 300).text
    assert main(["ingest", "--data", str(data), "--db", str(tmp_path / "x.db"), "--embeddings-url", server.url]) == 2
    assert "go together" in capsys.readouterr().err
