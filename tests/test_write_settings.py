"""A history's write settings are kept with it (issue 50, part 3): recorded at its first write, used on
every later open whatever settings it is opened with (named by a warning at the first write, never a
silent mix), inferred for a history written before they were recorded (a v6 store) and recorded by its
next write, shown by ``flexamem histories`` and ``show``."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.config import write_setting_names, write_settings
from flexamem.core import inferred_write_settings

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "stores"
LONG = [{"speaker": "Ana", "text": "the ferry to Gaia leaves from the lower deck at nine " * 30}]


def stored(path: Path, history: str) -> object:
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT value FROM state WHERE history_id = ? AND key = 'write'", (history,)).fetchone()
    return json.loads(row[0]) if row else None


def test_the_first_write_records_them_and_every_later_open_writes_with_them(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    fm.Memory(path, settings=fm.Settings(kappa=32, links=2)).add_session(LONG, session_id="s1")
    recorded = stored(path, "default")
    assert isinstance(recorded, dict) and sorted(recorded) == sorted(write_setting_names())
    assert (recorded["kappa"], recorded["links"]) == (32, 2)
    other = fm.Memory(path, settings=fm.Settings(kappa=256, rho=0.5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reading is never warned about: a render reads what is stored
        other.render("ferry", 2000)
    with pytest.warns(fm.WriteSettingsWarning, match=r"kappa=32 \(given 256\)"):
        other.add_session(LONG, session_id="s2")
    assert max(p.tokens for p in other.note("s2").pieces) <= 32  # never a mix of 32- and 256-token pieces
    assert other.settings.rho == 0.5 and other.settings.kappa == 32  # rendering settings stay the given ones
    assert other.write_settings() == recorded and stored(path, "default") == recorded
    assert other.verify() == []


def test_an_agent_session_records_its_own(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    agent = fm.Memory(path, settings=fm.Settings(agent_unit_tokens=300)).agent(task="t", budget=900, session_id="a")
    agent.step(action="look", observation="shelf " * 50)
    assert stored(path, "agent:a") == {**write_settings(fm.Settings()), "agent_unit_tokens": 300}
    resumed = fm.Memory(path).agent(session_id="a")  # opened with the defaults
    assert resumed.core.settings.agent_unit_tokens == 300
    with pytest.warns(fm.WriteSettingsWarning, match=r"agent_unit_tokens=300 \(given 1000\)"):
        for i in range(8):
            resumed.step(action=f"look {i}", observation="shelf " * 60)
    assert all(n.raw_tokens <= 400 for n in resumed.core.history.notes)  # units of ~300 tokens, as recorded


def test_a_v6_store_infers_them_and_its_next_write_records_them(tmp_path: Path) -> None:
    path = tmp_path / "v6.db"
    shutil.copy(FIXTURES / "v6-a8d242b.db", path)
    mem = fm.Memory(path, history="conv")
    assert stored(path, "conv") is None  # written before they were recorded
    assert mem.write_settings() == write_settings(fm.Settings())  # its notes show today's defaults
    mem.add_session([{"speaker": "Ana", "text": "Carla found a flat by the river."}], session_id="s9")
    assert stored(path, "conv") == write_settings(fm.Settings())
    assert mem.verify() == []
    out = subprocess.run(
        [sys.executable, "-m", "flexamem", "histories", "--db", str(path)], capture_output=True, text=True, check=True
    ).stdout
    assert "conv\tconversation\t4 notes\twritten with kappa=128" in out
    assert "write settings not recorded" in out  # its agent sessions hold no write yet
    show = subprocess.run(
        [sys.executable, "-m", "flexamem", "show", "s9", "--db", str(path), "--history", "conv"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "history written with kappa=128" in show


def test_what_the_notes_of_an_unrecorded_history_show(tmp_path: Path) -> None:
    mem = fm.Memory(":memory:", settings=fm.Settings(kappa=300, links=4))
    for i in range(6):
        mem.add_session(LONG, session_id=f"s{i}")
    inferred = inferred_write_settings(mem.notes())
    assert inferred["kappa"] == max(p.tokens for n in mem.notes() for p in n.pieces) > 128
    assert inferred["links"] == 4
    assert inferred_write_settings([]) == write_settings(fm.Settings())
