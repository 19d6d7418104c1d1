"""The environment failing under a SQLite store, for real: a full disk (a 3 MB tmpfs mounted by the
test; root needed, as in CI), a read-only file, and bytes flipped at random in a store file. Every
failure is a typed ``StoreError`` naming its cause, the transaction is left cleanly, and nothing
acknowledged is lost."""

from __future__ import annotations

import random
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import flexamem as fm
from tests.conftest import NEEDS_ROOT
from tests.faults.test_faults import report

pytestmark = [pytest.mark.slow, pytest.mark.faults]


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs, mounted for the test (its tests are marked NEEDS_ROOT; CI runs as root)."""
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs as root: {done.stderr.decode()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def session(i: int) -> list[dict[str, str]]:
    return [{"speaker": "Ana", "text": f"Session {i}: parcel {i} went to depot {i % 7}. " + uuid.uuid4().hex * 40}]


@NEEDS_ROOT
def test_a_full_disk_is_a_typed_error_and_reads_go_on(small_disk: Path) -> None:
    path = small_disk / "full.db"
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * 600_000)
    mem = fm.Memory(path, history="h")
    agent = mem.agent(task="find parcel 3", budget=900, session_id="a")
    acknowledged, steps, errors = [], 0, []
    for i in range(400):
        try:
            acknowledged += mem.add_session(session(i), session_id=f"x{i}")
            agent.step(action=f"look {i}", observation=f"depot {i % 7} " * 30)
            steps += 1
        except fm.FlexaMemError as exc:
            errors.append(exc)
            if len(errors) >= 3:  # the disk stays full: each later write fails the same way
                break
    assert errors, "the 3 MB disk never filled"
    assert all(isinstance(e, fm.StoreFullError) and "disk is full" in str(e) for e in errors), errors
    # what was acknowledged is all there, the store is sound, and reads work in this process and a new one
    assert [n.unit_id for n in mem.notes()] == acknowledged
    r = mem.render("parcel 3", budget=300, mode="units")
    assert r.tokens <= r.allowance
    ctx = agent.context()
    assert ctx.tokens <= ctx.ceiling
    again = fm.Memory(path, history="h")
    assert [n.unit_id for n in again.notes()] == acknowledged and again.verify() == []
    assert len(again.agent(session_id="a").steps) == steps
    assert again.render("parcel 3", budget=300).tokens <= 300
    # room again (another file on the disk removed): writing goes on where it stopped
    ballast.unlink()
    assert again.add_session(session(999), session_id="after") == ["after"]
    assert [n.unit_id for n in fm.Memory(path, history="h").notes()] == [*acknowledged, "after"]


@NEEDS_ROOT
def test_a_file_system_gone_read_only_is_a_typed_error(small_disk: Path) -> None:
    path = small_disk / "ro.db"
    with fm.Memory(path) as mem:
        mem.add_session(session(0), session_id="a")
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    with pytest.raises(fm.ReadOnlyStoreError, match="read-only"):
        fm.Memory(path).add_session(session(1), session_id="b")


def test_flipped_bytes_are_typed_errors_or_verify_problems(tmp_path: Path) -> None:
    """Random bytes flipped in a real store file (one to four at a time, fresh copy each trial): every
    call either works or raises a FlexaMemError, never a raw JSONDecodeError, ValueError, UnicodeDecodeError
    or sqlite3 error; verify() reports instead of raising."""
    source = tmp_path / "source.db"
    mem = fm.Memory(source, history="h")
    for i in range(12):
        mem.add_session(session(i), session_id=f"x{i}")
    agent = mem.agent(task="find parcel 3", budget=600, session_id="a")
    for i in range(8):
        agent.step(action=f"look {i}", observation=f"depot {i % 7} " * 20)
    mem.render("parcel 3", budget=200, mode="units")  # merged records too
    mem.close()
    data = source.read_bytes()
    rng = random.Random(29)
    outcomes = {"ok": 0, "typed": 0, "reported": 0}
    for trial in range(120):
        path = tmp_path / f"t{trial}.db"
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(100, len(flipped))  # past the header: a damaged header is refused at open
            flipped[at] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(flipped))
        for call in (
            lambda p=path: fm.Memory(p, history="h").notes(),
            lambda p=path: fm.Memory(p, history="h").render("parcel 3", budget=300),
            lambda p=path: fm.Memory(p, history="h").render("parcel 3", budget=150, mode="units"),
            lambda p=path: fm.Memory(p, history="h").agent(session_id="a").context(),
        ):
            try:
                call()
                outcomes["ok"] += 1
            except fm.FlexaMemError:
                outcomes["typed"] += 1
        problems = fm.Memory(path, history="h", read_only=True).verify() if _opens(path) else ["cannot open"]
        outcomes["reported"] += bool(problems)
        path.unlink()
    report("byte flips", {"trials": 120, **outcomes})  # the counts docs/RELIABILITY.md gives
    assert outcomes["typed"] > 0 and outcomes["ok"] > 0 and outcomes["reported"] > 0, outcomes


def _opens(path: Path) -> bool:
    try:
        fm.Memory(path, history="h", read_only=True).store.histories()
    except fm.FlexaMemError:
        return False
    return True
