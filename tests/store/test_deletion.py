"""A deleted history stays deleted: every view of it, in any object or process, finds out at its next
call (issue 21's reproducers), on SQLite and on a real PostgreSQL server (``store_path``)."""

from __future__ import annotations

import threading

import pytest

import flexamem as fm


def say(text: str) -> list[dict[str, str]]:
    return [{"speaker": "A", "text": text}]


def test_a_dropped_history_is_gone_from_every_open_view(store_path: str, tenant: str) -> None:
    m1, m2 = fm.Memory(store_path, history=tenant), fm.Memory(store_path, history=tenant)
    m1.add_session(say("My PIN is 9876"), session_id="a")
    m1.add_session(say("I like tea"), session_id="b")
    assert len(m2.notes()) == 2  # m2 holds the history in memory
    assert m1.drop() is True
    assert "9876" not in m2.render("What is the PIN?", 500).text  # deleted data is never shown again
    assert m2.notes() == [] and len(m2) == 0
    m2.add_session(say("new"), session_id="c")  # a fresh history, numbered from 0
    notes = fm.Memory(store_path, history=tenant).notes()
    assert [(n.seq, n.unit_id) for n in notes] == [(0, "c")]
    assert fm.Memory(store_path, history=tenant).verify() == []
    assert [n.unit_id for n in m1.notes()] == ["c"]  # the dropper sees the new history too


def test_a_stale_view_writes_into_the_new_history_not_after_the_old_one(store_path: str, tenant: str) -> None:
    stale = fm.Memory(store_path, history=tenant)
    stale.add_session(say("one"), session_id="a")
    stale.add_session(say("two"), session_id="b")
    other = fm.Memory(store_path, history=tenant)
    other.drop()
    other.add_session(say("after the drop"), session_id="x")
    stale.add_session(say("written by the stale view"), session_id="c")  # never at seq 2: no gap
    notes = fm.Memory(store_path, history=tenant).notes()
    assert [(n.seq, n.unit_id) for n in notes] == [(0, "x"), (1, "c")]
    assert not any(n.raw.split(": ", 1)[-1] == "one" for n in notes)


def test_merged_records_of_a_dropped_history_never_reach_the_next(store_path: str, tenant: str) -> None:
    old = fm.Memory(store_path, history=tenant)
    for i in range(40):
        old.add_session(say(f"Old secret {i}: the vault code is {1000 + i}."), session_id=f"o{i}")
    assert old.render("vault code", budget=1024, mode="units").merges_written > 0
    stale = fm.Memory(store_path, history=tenant)
    stale.render("vault code", budget=1024, mode="units")
    fm.Memory(store_path, history=tenant).drop()
    new = fm.Memory(store_path, history=tenant)
    for i in range(40):
        new.add_session(say(f"New note {i}: the garden needs water."), session_id=f"n{i}")
    for view in (stale, old, new, fm.Memory(store_path, history=tenant)):
        text = view.render("vault code", budget=1024, mode="units").text
        assert "vault" not in text and "Old secret" not in text


def test_an_agent_session_of_a_dropped_history_refuses_to_go_on(store_path: str, tenant: str) -> None:
    mem = fm.Memory(store_path, history=tenant)
    agent = mem.agent(task="t", budget=600, session_id="s1")
    for i in range(8):
        agent.step(action=f"look {i}", observation=f"the token is {7000 + i} " * 10)
    assert agent.context().tokens <= agent.context().ceiling
    other = fm.Memory(store_path, history=tenant)
    assert other.sessions() == ["s1"]
    assert other.drop() is True  # an agent-only history is deletable
    with pytest.raises(fm.HistoryDroppedError, match="deleted"):
        agent.context()
    with pytest.raises(fm.HistoryDroppedError):
        agent.step(action="more", observation="x")
    with pytest.raises(fm.InvalidInputError, match="no stored agent session"):
        mem.agent(session_id="s1")
    assert mem.sessions() == []
    assert not any(h.startswith(tenant) for h, _ in mem.store.histories())
    fresh = mem.agent(task="t2", budget=600, session_id="s1")  # the name can be used again, empty
    assert fresh.steps == [] and fresh.task == "t2"


def test_drop_session_stops_its_open_driver(store_path: str, tenant: str) -> None:
    mem = fm.Memory(store_path, history=tenant)
    agent = mem.agent(task="t", budget=600, session_id="s")
    agent.step(action="a", observation="b")
    assert fm.Memory(store_path, history=tenant).drop_session("s") is True
    with pytest.raises(fm.HistoryDroppedError):
        agent.step(action="c", observation="d")
    assert mem.store.load_steps(agent.core.history_id) == []


def test_a_session_dropped_while_it_is_resumed_is_refused_and_not_left_half_made(
    store_path: str, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The soak's finding: a drop between resume's "is it stored?" and its read of the session made an
    empty session row (no task) that every later resume failed on with KeyError('task')."""
    mem = fm.Memory(store_path, history=tenant)
    mem.agent(task="t", budget=600, session_id="s").step(action="a", observation="b")
    store, dropper = mem.store, fm.Memory(store_path, history=tenant)
    kind = store.history_kind

    def kind_then_drop(history: str) -> str | None:
        found = kind(history)
        dropper.drop_session("s")  # another process deletes the session right after the check
        return found

    monkeypatch.setattr(store, "history_kind", kind_then_drop)
    with pytest.raises(fm.HistoryDroppedError, match="deleted"):
        mem.agent(session_id="s")
    monkeypatch.undo()
    assert not any(h.startswith(tenant) for h, _ in store.histories())  # nothing half-made
    again = mem.agent(task="t3", budget=600, session_id="s")  # the name starts afresh
    assert again.task == "t3" and again.steps == []


def test_a_session_row_left_without_its_task_is_named_and_can_be_dropped(store_path: str, tenant: str) -> None:
    """What the resume race left in stores written before the fix (a session row with no task) is a
    clear error naming the way out, not KeyError('task'); dropping it frees the name."""
    mem = fm.Memory(store_path, history=tenant)
    mem.store.ensure_history(f"{tenant}/agent:old", "agent", parent=tenant)  # the row the old resume wrote
    with pytest.raises(fm.InvalidInputError, match="without its task: drop it"):
        mem.agent(session_id="old")
    assert mem.drop_session("old") is True
    assert mem.agent(task="t", budget=600, session_id="old").task == "t"


def test_a_history_dropped_while_it_is_created_is_created_again(
    store_path: str, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ensure_history read the row it had just inserted in a second statement: a drop in between made
    it fail with IndexError. It now creates the history again and returns its meta."""
    store = fm.Memory(store_path, history=tenant).store
    hid = f"{tenant}/agent:x"
    reads = []
    meta = store.history_meta

    def meta_after_a_drop(history: str) -> tuple[str, dict[str, object]] | None:
        reads.append(history)
        if len(reads) == 2:  # just after ensure_history's insert
            store.drop_history(history)
        return meta(history)

    monkeypatch.setattr(store, "history_meta", meta_after_a_drop)
    assert store.ensure_history(hid, "agent", {"task": "t"}) == {"task": "t"}
    assert len(reads) == 3
    monkeypatch.undo()
    assert store.history_meta(hid) == ("agent", {"task": "t"})


def test_writes_racing_drops_land_wholly_before_or_after(store_path: str, tenant: str) -> None:
    """Threads write (each its own Memory) while another drops the history again and again: every
    history left is numbered 0, 1, 2, ... with every digest intact, and renders."""
    stop = threading.Event()
    errors: list[BaseException] = []
    written: list[str] = []

    def writer(k: int) -> None:
        mem = fm.Memory(store_path, history=tenant)
        i = 0
        while not stop.is_set():
            try:
                mem.add_session(say(f"writer {k} note {i}"), session_id=f"w{k}-{i}")
                written.append(f"w{k}-{i}")
                mem.render("note", budget=300)
            except fm.FlexaMemError as exc:  # a lost race is allowed to surface; nothing else is
                if not isinstance(exc, fm.ConcurrentWriteError):
                    errors.append(exc)
            except BaseException as exc:
                errors.append(exc)
            i += 1

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    dropper = fm.Memory(store_path, history=tenant)
    for _ in range(15):
        dropper.drop()
        stop.wait(0.05)
    stop.set()
    for t in threads:
        t.join(60)
    assert errors == [] and len(written) > 15  # the writers really raced the drops
    final = fm.Memory(store_path, history=tenant)
    assert {n.unit_id for n in final.notes()} <= set(written)
    assert final.verify() == []
    assert [n.seq for n in final.notes()] == list(range(len(final)))
    assert final.render("note", budget=300).tokens <= 285


def test_a_history_started_and_dropped_inside_a_write_is_a_lost_race(
    store_path: str, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL lets another writer start the history and a drop delete it between a write's insert of
    the history row (which the other row made a no-op) and its read of that row: the read found nothing
    and the write failed with TypeError (CI, the racing test above). It is now a lost race the core
    retries: the write lands, numbered from 0. (SQLite runs one writer at a time: the interleaving is
    forced there too, and must change nothing.)"""
    mem, other = fm.Memory(store_path, history=tenant), fm.Memory(store_path, history=tenant)
    store = mem.store
    run = store._run  # the one statement the interleaving needs
    fired: list[str] = []

    def run_with_a_race(conn: object, sql: str, args: object = ()) -> object:
        if sql.startswith("INSERT INTO histories") and not fired and store_path.startswith("postgres"):
            fired.append(sql)
            other.add_session(say("the other writer"), session_id="o")  # commits its own history row
            result = run(conn, sql, args)  # a no-op now: the row exists
            other.drop()  # deleted before this write reads the row
            return result
        return run(conn, sql, args)

    monkeypatch.setattr(store, "_run", run_with_a_race)
    mem.add_session(say("mine"), session_id="m")
    monkeypatch.undo()
    assert fired or not store_path.startswith("postgres")
    final = fm.Memory(store_path, history=tenant)
    assert [(n.seq, n.unit_id) for n in final.notes()] == [(0, "m")]
    assert final.verify() == []
