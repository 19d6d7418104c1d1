"""Named profiles (issue 50, part 2): versioned names for a mode and every setting, accepted by the
library, the CLI and the MCP server (the server and the remote client in tests/server); a Rendering
names the profile and the overrides that produced it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.config import setting_names
from flexamem.profiles import ALIASES, DEFAULT, PROFILES, profile


def written(mem: fm.Memory) -> fm.Memory:
    for i in range(12):
        mem.add_session(
            [
                {"speaker": "Ana", "text": f"Day {i}: parcel {i} went to depot {i % 4} by the red van."},
                {"speaker": "Bob", "text": f"Noted, depot {i % 4} signed for parcel {i} at {i + 8} o'clock."},
            ],
            session_id=f"s{i}",
        )
    return mem


def test_the_newest_auto_profile_is_the_defaults_and_every_profile_names_every_setting() -> None:
    assert profile("auto").settings == fm.Settings() and profile("default").name == DEFAULT == "auto-v1"
    names = set(setting_names())
    for p in PROFILES.values():
        assert set(p.values) == names, p.name  # written out in full: a later default cannot move it
    assert set(ALIASES.values()) <= set(PROFILES)
    with pytest.raises(fm.InvalidInputError, match="no profile 'paper'"):
        profile("paper")
    with pytest.raises(fm.InvalidInputError, match="unknown setting"):
        fm.Memory(":memory:", profile="auto", settings={"kapa": 3})
    with pytest.raises(fm.InvalidInputError):
        fm.Memory(":memory:", settings=3)  # type: ignore[arg-type]


def test_a_profile_sets_the_mode_and_a_rendering_names_it(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    written(fm.Memory(db))
    plain = fm.Memory(db)
    for name, mode in (("paper-units", "units"), ("paper-pieces-v1", "pieces"), ("auto", "auto")):
        mem = fm.Memory(db, profile=name)
        r = mem.render("which depot signed for parcel 7?", 400)
        assert (r.mode, r.profile, r.overrides) == (mode, profile(name).name, {})
        assert r.text == plain.render("which depot signed for parcel 7?", 400, mode=mode).text  # the same modes
    tuned = fm.Memory(db, profile="paper-units", settings={"k": 2, "rho": 0.5})
    r = tuned.render("which depot signed for parcel 7?", 400)
    assert r.profile == "paper-units-v1" and r.overrides == {"k": 2, "rho": 0.5}
    assert (tuned.settings.k, tuned.settings.rho, tuned.settings.lam) == (2, 0.5, 0.7)
    legacy = fm.Memory(db, settings=fm.Settings(rho=0.5))  # a Settings: its differing fields are the overrides
    assert legacy.render("parcel 7", 400).overrides == {"rho": 0.5}
    legacy.settings = fm.Settings(k=3)
    assert legacy.render("parcel 7", 400).overrides == {"k": 3}


def test_an_agent_session_renders_in_its_profiles_mode(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    agent = fm.Memory(db, profile="paper-units").agent(task="find parcel 7", budget=600, session_id="a")
    for i in range(10):
        agent.step(action=f"list_parcels(page={i})", observation=f"page {i}: " + f"parcel {i} depot {i % 4}, " * 20)
    again = fm.Memory(db).agent(session_id="a")
    assert agent.context().messages == again.context(mode="units").messages
    assert agent.context().messages != again.context().messages  # auto renders another memory


def test_the_cli_takes_a_profile(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    written(fm.Memory(db))
    run = subprocess.run(
        [sys.executable, "-m", "flexamem", "render", "parcel 7", "--db", str(db), "--profile", "paper-pieces"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "mode pieces" in run.stderr and "profile paper-pieces-v1" in run.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "flexamem", "render", "parcel 7", "--db", str(db), "--profile", "nope"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "no profile 'nope'" in bad.stderr
