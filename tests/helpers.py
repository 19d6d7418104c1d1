"""Small histories and paths the tests share (a helper module: no tests here, so no test file imports
another)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import flexamem as fm
from flexamem_bench.baselines import StandInModel
from flexamem_bench.conversation_data import Session
from flexamem_bench.datasets import QAHistory, QAItem
from flexamem_bench.methods import MethodContext
from flexamem_bench.reader import READER_PROMPT
from flexamem_bench.trajectories import Trajectory, from_messages


def data_root() -> Path:
    """Shared data: ``$FLEXAMEM_DATA``, else ``../shared/data`` beside the repository."""
    env = os.environ.get("FLEXAMEM_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"


DATA_REQUIRED = os.environ.get("FLEXAMEM_REQUIRE_DATA") == "1"  # CI: missing shared data is a failure


def shared_file(*parts: str) -> Path:
    """A file of the shared data (``data_root() / parts``)."""
    return data_root().joinpath(*parts)


def needs_data(path: Path) -> pytest.MarkDecorator:
    """Skip a test when ``path`` is absent, except where the data is required (CI sets
    ``FLEXAMEM_REQUIRE_DATA=1``): there the test runs, and fails on the missing file."""
    return pytest.mark.skipif(not path.exists() and not DATA_REQUIRED, reason=f"no shared data at {path}")


def tiny_history() -> QAHistory:
    sessions = []
    for i in range(8):
        turns = [
            {"speaker": "Ana", "text": f"Day {i}: the garden and the market, nothing else.", "id": f"D{i}:1"},
            {"speaker": "Ben", "text": f"Noted for day {i}, the weather was grey again.", "id": f"D{i}:2"},
        ]
        if i == 2:
            turns.append({"speaker": "Ana", "text": "My passport number ends in 7781, keep it safe.", "id": "D2:3"})
        sessions.append(Session(f"session_{i}", f"{i + 1} May 2024", turns))
    q = QAItem("h/q0", "What does my passport number end in?", "7781", ("D2:3",), "single-hop", "h")
    return QAHistory("h", sessions, [q], one_unit_per_session=True)


def trajectory(steps: int = 24) -> Trajectory:
    messages = [{"role": "system", "content": "You are a support agent."}, {"role": "user", "content": "Refund #W4417"}]
    for i in range(steps):
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "get_item", "arguments": json.dumps({"item": f"IT-{1000 + i}"})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"item IT-{1000 + i}: price {i * 7} " + "ok " * 60}
        )
    return from_messages("t1", messages)


SESSIONS = [
    ("s1", "1 May 2024", "Ana: I adopted a beagle named Biscuit from the Lisbon shelter."),
    ("s2", "3 May 2024", "Ana: Biscuit chewed my running shoes, the blue Asics ones."),
    ("s3", "9 May 2024", "Ana: The hotel refund of 212 euros goes to my Visa ending 4417."),
    ("s4", "12 May 2024", "Ana: Marathon training: 18 km on Sunday, my knee hurts a bit."),
    ("s5", "20 May 2024", "Ana: Biscuit passed puppy school, the trainer is called Marta."),
    ("s6", "2 June 2024", "Ana: Booked flight TP1351 to Porto for the 14th, seat 12C."),
]


def context() -> MethodContext:
    mem = fm.Memory(":memory:", settings=fm.Settings(one_unit_per_session=True))
    for sid, date, line in SESSIONS:
        speaker, text = line.split(": ", 1)
        turns = [{"speaker": speaker, "text": text}] + [
            {"speaker": "Bo", "text": f"Filler line {i} about the weather."} for i in range(12)
        ]
        mem.add_session(turns, session_id=sid, date=date)
    ctx = MethodContext(mem, READER_PROMPT)
    ctx.extra["baseline_model"] = StandInModel()
    return ctx


def locomo_file(path: Path) -> Path:
    import json

    from flexamem.cli.demo import DEMO_SESSIONS

    conv: dict[str, object] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    for n, (_, date, turns) in enumerate(DEMO_SESSIONS[:3], 1):
        conv[f"session_{n}"] = [dict(t, dia_id=f"D{n}:{i}") for i, t in enumerate(turns)]
        conv[f"session_{n}_date_time"] = date
    path.write_text(json.dumps([{"sample_id": "conv-x", "conversation": conv, "qa": []}]))
    return path
