"""The CLI's verbs, run as a user runs them (``python -m flexamem ...`` in a subprocess)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

SESSIONS = [
    {"session_id": "trip", "date": "2024-05-08", "turns": [{"speaker": "Ana", "text": "My seat is 12C on TP1351."}]},
    {"session_id": "hotel", "turns": [{"speaker": "Ana", "text": "Refund to Visa ending 4417, ref CR-88412."}]},
]
MESSAGES = [
    {"role": "user", "content": "Track order #W4417"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "track", "arguments": '{"id": "#W4417"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "in transit, 1Z999AA10123456784"},
]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flexamem", *args], input=stdin, capture_output=True, text=True, timeout=180
    )


@pytest.mark.slow
def test_a_store_from_init_to_drop(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    done = run("init", "--db", db, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["created"] is True
    jsonl = "\n".join(json.dumps(s) for s in SESSIONS)
    done = run("add", "-", "--db", db, "--history", "ana", "--json", stdin=jsonl)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["units"] == ["trip", "hotel"]
    (tmp_path / "chat.json").write_text(json.dumps(MESSAGES))
    done = run("add", str(tmp_path / "chat.json"), "--db", db, "--history", "ana", "--session-id", "shop")
    assert done.returncode == 0 and "1 unit(s) written: shop" in done.stdout
    steps = [{"action": "search flights", "observation": "TP1351 at 09:40"}, {"action": "book", "observation": "ok"}]
    done = run(
        "add",
        "-",
        "--db",
        db,
        "--history",
        "ana",
        "--agent",
        "a1",
        "--task",
        "book",
        "--budget",
        "4000",
        stdin=json.dumps(steps),
    )
    assert done.returncode == 0 and "2 steps recorded" in done.stdout, done.stderr

    histories = json.loads(run("histories", "--db", db, "--json").stdout)
    assert {(h["history"], h["kind"]) for h in histories} >= {("ana", "conversation"), ("ana/agent:a1", "agent")}
    notes = json.loads(run("notes", "--db", db, "--history", "ana", "--json").stdout)
    assert [n["unit_id"] for n in notes] == ["trip", "hotel", "shop"] and notes[0]["label"] == "u1"
    shown = json.loads(run("show", "u3", "--db", db, "--history", "ana", "--json").stdout)
    assert "[tool call c1] track" in shown["raw"] and shown["pieces"][0]["text"]
    rendered = json.loads(run("render", "which card gets the refund?", "--db", db, "--history", "ana", "--json").stdout)
    assert "4417" in rendered["text"] and rendered["tokens"] <= rendered["allowance"]

    refused = run("drop", "--db", db, "--history", "ana")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert run("drop", "--db", db, "--history", "ana", "--yes").returncode == 0
    left = json.loads(run("histories", "--db", db, "--json").stdout)
    assert not [h for h in left if h["history"].startswith("ana")]
    assert run("drop", "--db", db, "--history", "ana", "--yes").returncode == 2  # nothing left to drop


@pytest.mark.slow
def test_bad_input_exits_2_with_a_message(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    assert run("init", "--db", db).returncode == 0
    cases = [
        (run("add", "-", "--db", db, stdin="{not json\n"), "not JSON"),
        (run("add", "-", "--db", db, stdin='[{"x": 1}]'), "cannot tell"),
        (run("add", "-", "--db", db, stdin='[{"action": "a"}]'), "--agent"),
        (run("render", "q", "--db", str(tmp_path / "typo.db")), "no database"),
        (run("show", "u9", "--db", db), "no unit"),
        (run("render", "q", "--db", db, "--budget", "0"), "has no notes"),
        (run("replay", "x.json", "--step", "1", "--budget", "100", "--method", "bogus"), "invalid choice"),
    ]
    for done, message in cases:
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert message in done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "typo.db").exists()


def test_every_verb_has_help() -> None:
    verbs = ("init", "add", "render", "histories", "notes", "show", "drop", "erase", "erasures", "scrub")
    for verb in (*verbs, "demo", "ingest", "eval", "replay"):
        done = run(verb, "--help")
        assert done.returncode == 0 and "usage: flexamem" in done.stdout, verb


@pytest.mark.slow
def test_erase_a_turn_from_the_cli(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    assert run("add", "-", "--db", db, "--history", "ana", stdin=json.dumps(SESSIONS)).returncode == 0
    done = run("erase", "--db", db, "--history", "ana", "--turn", "hotel#1", "--reason", "asked to forget")
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    erasure = json.loads(line)
    assert (erasure["kind"], erasure["ids"], erasure["units"]) == ("turn", ["hotel#1"], ["u2"])
    assert erasure["reason"] == "asked to forget"
    rendered = json.loads(run("render", "which card gets the refund?", "--db", db, "--history", "ana", "--json").stdout)
    shown = json.loads(run("show", "hotel", "--db", db, "--history", "ana", "--json").stdout)
    notes = run("notes", "--db", db, "--history", "ana", "--json").stdout
    card = r"(?<![0-9A-Za-z])4417(?![0-9A-Za-z])"  # the number alone: a digest or a time may hold its digits
    for text in (rendered["text"], shown["raw"], notes):
        assert not re.search(card, text) and "CR-88412" not in text
    assert "(erased)" in shown["raw"] and "12C" in rendered["text"]
    assert run("verify", "--db", db, "--history", "ana").returncode == 0
    listed = run("erasures", "--db", db, "--history", "ana")
    assert [json.loads(x) for x in listed.stdout.splitlines()] == [erasure]
    assert run("scrub", "--db", db).returncode == 0
    assert not re.search(card.encode(), Path(db).read_bytes())  # the words are in no file of the store


@pytest.mark.slow
def test_erasing_what_is_not_there_changes_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    assert run("add", "-", "--db", db, "--history", "ana", stdin=json.dumps(SESSIONS)).returncode == 0
    before = run("notes", "--db", db, "--history", "ana", "--json").stdout
    cases = [
        (run("erase", "--db", db, "--history", "ana", "--turn", "nope"), "no turn 'nope'"),
        (run("erase", "--db", db, "--history", "ana", "--turn", "hotel#2"), "has 1 turns"),
        (run("erase", "--db", db, "--history", "ana", "--session", "nope"), "nothing named 'nope'"),
        (run("erase", "--db", db, "--history", "ana", "--agent", "a9", "--step", "1"), "no stored agent session"),
        (run("erase", "--db", db, "--history", "ana", "--agent", "a9"), "--step"),
    ]
    for done, message in cases:
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr and not done.stdout
    refused = run("erase", "--db", db, "--history", "ana", "--turn", "trip#1", "--session", "trip")
    assert refused.returncode == 2 and "not allowed with" in refused.stderr  # one of them, said by argparse
    listed = run("erasures", "--db", db, "--history", "ana")
    assert listed.returncode == 0 and listed.stdout == ""
    assert run("notes", "--db", db, "--history", "ana", "--json").stdout == before


@pytest.mark.slow
def test_erase_an_agent_step_from_the_cli(tmp_path: Path) -> None:
    import flexamem as fm

    db = str(tmp_path / "m.db")
    steps = [{"action": "look up the booking", "observation": "PNR XQ7Z41, seat 12C"}, {"action": "done"}]
    added = run("add", "-", "--db", db, "--agent", "a1", "--task", "book", "--budget", "4000", stdin=json.dumps(steps))
    assert added.returncode == 0, added.stderr
    done = run("erase", "--db", db, "--agent", "a1", "--step", "1", "--reason", "secret", "--no-marker")
    assert done.returncode == 0, done.stderr
    erasure = json.loads(done.stdout)
    assert (erasure["kind"], erasure["ids"], erasure["reason"]) == ("step", ["a1:1"], "secret")
    listed = run("erasures", "--db", db, "--agent", "a1")
    assert [json.loads(x) for x in listed.stdout.splitlines()] == [erasure]
    history_wide = [json.loads(x) for x in run("erasures", "--db", db).stdout.splitlines()]
    assert history_wide == [erasure]  # the history lists its sessions' erasures too
    with fm.Memory(db) as mem:
        agent = mem.agent(session_id="a1")
        assert "XQ7Z41" not in json.dumps([vars(s) for s in agent.steps], default=str)
        assert "XQ7Z41" not in str(agent.context().messages) and agent.steps[1].action == "done"
        assert mem.verify() == []
    assert run("verify", "--db", db).returncode == 0


@pytest.mark.slow
@pytest.mark.faults
def test_heads_kept_by_the_cli_catch_a_cut_tail(tmp_path: Path) -> None:
    import sqlite3

    db, keys, kept = str(tmp_path / "m.db"), str(tmp_path / "keys.json"), tmp_path / "heads.jsonl"
    assert run("serve", "--keys", keys, "--add-key", "acme").returncode == 0  # a key file and its secret
    jsonl = "\n".join(json.dumps(s) for s in SESSIONS)
    assert run("add", "-", "--db", db, "--history", "ana", "--keys", keys, stdin=jsonl).returncode == 0
    done = run("head", "--db", db, "--history", "ana", "--keys", keys)
    assert done.returncode == 0, done.stderr
    heads = [json.loads(line) for line in done.stdout.splitlines()]
    assert heads[0]["notes"] == 2 and heads[0]["signature"]
    kept.write_text(done.stdout)
    assert run("verify", "--db", db, "--history", "ana", "--head", str(kept), "--keys", keys).returncode == 0
    conn = sqlite3.connect(db)  # the newest note cut off past the library, its head with it
    for table in ("pieces", "piece_vectors", "links", "notes"):
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
        conn.execute(f"DELETE FROM {table} WHERE history_id = 'ana' AND {'src' if table == 'links' else 'seq'} = 1")
    conn.execute("DELETE FROM links WHERE history_id = 'ana' AND dst = 1")
    conn.execute("DELETE FROM heads")
    conn.commit()
    conn.close()
    done = run("verify", "--db", db, "--history", "ana", "--head", str(kept), "--json")
    assert done.returncode == 1 and any("rolled back" in p for p in json.loads(done.stdout)["problems"]), done.stdout


def test_an_export_read_by_a_reader_that_stops_early_ends_quietly(tmp_path: Path) -> None:
    """``flexamem export | head``: the reader closes the pipe; the export stops with no traceback."""
    import flexamem as fm

    db = tmp_path / "m.db"
    mem = fm.Memory(db)
    for i in range(40):
        mem.add_session([{"speaker": "Ana", "text": f"day {i}: " + "a walk by the river " * 50}], session_id=f"s{i}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "flexamem", "export", "--db", str(db), "--history", "default"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(100).startswith(b'{"format"')
    proc.stdout.close()  # the reader is gone
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == ""


def test_serve_refuses_a_negative_keep_alive_requests_before_it_starts(tmp_path: Path) -> None:
    keys = str(tmp_path / "keys.json")
    assert run("serve", "--keys", keys, "--add-key", "acme").returncode == 0
    done = run("serve", "--db", str(tmp_path / "m.db"), "--keys", keys, "--port", "0", "--keep-alive-requests", "-1")
    assert done.returncode != 0 and "--keep-alive-requests must be 0 (never closed) or more" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_refuses_an_empty_forwarded_allow_ips_before_it_starts(tmp_path: Path) -> None:
    keys = str(tmp_path / "keys.json")
    assert run("serve", "--keys", keys, "--add-key", "acme").returncode == 0
    done = run("serve", "--db", str(tmp_path / "m.db"), "--keys", keys, "--port", "0", "--forwarded-allow-ips", " , ")
    assert done.returncode == 2 and "--forwarded-allow-ips needs at least one address" in done.stderr
    assert "Traceback" not in done.stderr
