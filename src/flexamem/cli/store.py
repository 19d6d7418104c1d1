"""The CLI's store verbs: ``init``, ``add``, ``render``, ``histories``, ``notes``, ``show``, ``drop``,
``export``, ``import``, ``backup``, ``erase``, ``erasures``, ``scrub``.

Each takes ``--db`` (a SQLite file or a ``postgresql://`` URL; default ``$FLEXAMEM_DB``) and, where it
reads or writes one history, ``--history``. ``--json`` prints machine-readable output on stdout.
Exit codes: 0 done, 1 the store or a model failed, 2 bad input (a message on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from flexamem.cli.embeddings import add_embedder_arguments, use_embedder_arguments
from flexamem.client import RemoteMemory
from flexamem.errors import InvalidInputError
from flexamem.memory import Memory, check_file_path, import_history
from flexamem.names import session_history
from flexamem.notes import Note, note_json
from flexamem.profiles import ALIASES, PROFILES
from flexamem.profiles import profile as named_profile
from flexamem.render.renderer import MODES
from flexamem.render.result import rendering_json
from flexamem.store import transfer


def print_note(note: Note, out: list[str]) -> None:
    head = f"[{note.unit_id} · {note.date or note.kind}] tokens raw={note.raw_tokens} record={note.record_tokens}"
    out.append(head)
    out.append(f"  record:   {note.record}")
    out.append(f"  keywords: {', '.join(note.fields.keywords)}")
    out.append(
        f"  links:    {', '.join(str(s) for s in note.links) or '-'}   pieces: {len(note.pieces)}"
        f"   writer: {note.writer}{' (flagged)' if note.flagged else ''}"
    )


def progress_bar(label: str, stream: TextIO | None = None) -> Callable[[int, int], None]:
    """A progress bar on ``stream`` (stderr): redrawn in place on a terminal, a line per tenth otherwise."""
    last = [-1]

    def show(done: int, total: int) -> None:
        out = stream or sys.stderr
        width = 30
        filled = width * done // max(total, 1)
        line = f"{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}"
        if out.isatty():
            print("\r" + line, end="\n" if done >= total else "", file=out, flush=True)
        elif done >= total or 10 * done // max(total, 1) > last[0]:
            last[0] = 10 * done // max(total, 1)
            print(line, file=out, flush=True)

    return show


def _db(args: argparse.Namespace, *, must_exist: bool = True) -> str:
    db = args.db or os.environ.get("FLEXAMEM_DB")
    if not db:
        raise InvalidInputError("no database: give --db PATH (or set FLEXAMEM_DB)")
    check_file_path(db)  # a name too long, a NUL, a folder: one clear line
    if must_exist and "://" not in db and not Path(db).is_file():
        raise InvalidInputError(f"no database at {db} (create one with: flexamem init --db {db})")
    return str(db)


def _open(args: argparse.Namespace, *, read_only: bool = False, must_exist: bool = True) -> Memory:
    """The memory a command names: ``--url`` (or ``FLEXAMEM_URL``; the key from ``FLEXAMEM_API_KEY``), a
    server's, else ``--db``'s."""
    url = getattr(args, "url", None)
    if url and args.db:
        raise InvalidInputError("give --db or --url, not both")
    url = url or (None if args.db else os.environ.get("FLEXAMEM_URL"))
    history = getattr(args, "history", "default")
    profile = getattr(args, "profile", None)  # None: the default profile (flexamem.profiles)
    if url:
        args.where = url
        return Memory(url, history=history, profile=profile)
    args.where = _db(args, must_exist=must_exist)
    return Memory(args.where, history=history, read_only=read_only, profile=profile)


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2) if args.json else text)


def cmd_init(args: argparse.Namespace) -> int:
    db = _db(args, must_exist=False)
    existed = "://" in db or Path(db).is_file()
    with Memory(db) as mem:
        count = len(mem.store.histories())
    message = f"{db}: {'opened' if existed else 'created'}, {count} histories"
    _emit(args, {"db": db, "created": not existed, "histories": count}, message)
    return 0


def _read_items(source: str) -> list[Any]:
    """JSON (a list, or one object) or JSONL from a file or ``-`` (stdin)."""
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise InvalidInputError(f"cannot read {source}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{source}: not UTF-8 text (byte {exc.start}); JSON input must be UTF-8") from None
    if not text:
        raise InvalidInputError(f"{source}: no input")
    try:
        data = _json(text)
    except json.JSONDecodeError:
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append(_json(line))
                except json.JSONDecodeError as exc:
                    raise InvalidInputError(f"{source} line {n}: not JSON ({exc.msg})") from None
        return items
    return data if isinstance(data, list) else [data]


def _json(text: str) -> Any:
    """``json.loads``, with input nested too deep for Python a clear error (not a RecursionError)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise InvalidInputError("the input JSON is nested too deeply") from None


def _kind_of(items: list[Any]) -> str:
    first = items[0] if items else None
    if isinstance(first, dict):
        if "turns" in first:
            return "sessions"
        if "action" in first:
            return "steps"
        if "role" in first:
            return "messages"
        if "speaker" in first:
            return "turns"
    raise InvalidInputError(
        "cannot tell what the input holds: sessions ({'turns': [...]}), turns ({'speaker', 'text'}), "
        "OpenAI messages ({'role', 'content'}) or agent steps ({'action', 'observation'}); say it with --kind"
    )


def cmd_add(args: argparse.Namespace) -> int:
    items = _read_items(args.input)
    kind = args.kind or _kind_of(items)
    with _open(args, must_exist=False) as mem:
        _with_key(args, mem)
        if kind == "steps":
            if not args.agent:
                raise InvalidInputError("agent steps need --agent SESSION_ID (and --task/--budget to start it)")
            agent = mem.agent(args.task, budget=args.budget, session_id=args.agent, system=args.system or "")
            bar = None if args.quiet else progress_bar(f"steps of {args.agent}")
            numbers = []
            for i, step in enumerate(items):
                if not isinstance(step, dict):
                    raise InvalidInputError(f"step {i} must be an object with 'action'")
                unknown = set(step) - {"action", "observation", "messages", "step_id", "actor"}
                if unknown:
                    raise InvalidInputError(f"step {i} has unknown field(s) {sorted(unknown)}")
                numbers.append(agent.step(**step))
                if bar:
                    bar(i + 1, len(items))
            _emit(args, {"agent": args.agent, "steps": numbers}, f"{len(numbers)} steps recorded in {args.agent}")
            return 0
        if kind == "sessions":
            bar = None if args.quiet or len(items) < 2 else progress_bar("sessions")
            units = [u for ids in mem.add_sessions(items, progress=bar) for u in ids]
        elif kind == "messages":
            units = mem.add_messages(items, session_id=args.session_id, date=args.date)
        elif kind == "turns":
            units = mem.add_session(items, session_id=args.session_id, date=args.date)
        else:
            raise InvalidInputError(f"unknown --kind {kind!r}")
        _emit(args, {"history": args.history, "units": units}, f"{len(units)} unit(s) written: {', '.join(units)}")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    with _open(args, read_only=args.read_only) as mem:
        if len(mem) == 0:
            raise InvalidInputError(f"history {args.history!r} of {args.where} has no notes")
        r = mem.render(args.query, args.budget, mode=args.mode)
        if args.json:
            data = rendering_json(r)
            print(json.dumps(data, ensure_ascii=False, indent=2))
        else:
            print(r.text)
            overrides = "".join(f" {k}={v}" for k, v in r.overrides.items())
            print(f"-- {r.tokens} tokens, mode {r.mode}, allowance {r.allowance}, profile {r.profile}{overrides}",
                  file=sys.stderr)  # fmt: skip
    return 0


def _histories(mem: Memory) -> Iterator[dict[str, Any]]:
    for hid, kind in mem.store.histories():
        recorded = mem.store.get_state(hid, "write")  # None: written before write settings were recorded
        yield {"history": hid, "kind": kind, "notes": mem.store.note_count(hid), "write": recorded}


def _written_with(recorded: object) -> str:
    if not isinstance(recorded, dict):
        return "write settings not recorded (what its notes show is used; its next write records them)"
    return "written with " + " ".join(f"{k}={v}" for k, v in recorded.items())


def cmd_histories(args: argparse.Namespace) -> int:
    with _open(args, read_only=True) as mem:
        rows = mem.histories() if isinstance(mem, RemoteMemory) else list(_histories(mem))
    text = (
        "\n".join(
            f"{r['history']}\t{r['kind']}\t{r['notes']} notes"
            + (f"\t{_written_with(r['write'])}" if "write" in r else "")
            for r in rows
        )
        or "no histories"
    )
    _emit(args, rows, text)
    return 0


def cmd_notes(args: argparse.Namespace) -> int:
    with _open(args, read_only=True) as mem:
        notes = mem.notes()
    lines: list[str] = []
    for note in notes:
        print_note(note, lines)
    _emit(args, [note_json(n) for n in notes], "\n".join(lines) or f"no notes in history {args.history!r}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with _open(args, read_only=True) as mem:
        note = mem.note(args.unit)
        written = None if isinstance(mem, RemoteMemory) else mem.write_settings()
    data = {**note_json(note, full=True), **({"history_write_settings": written} if written else {})}
    header = [f"{note.label} ({note.unit_id}) · {note.date or note.kind}", f"record: {note.record}"]
    if written:
        header.append("history " + _written_with(written))
    text = "\n".join([*header, "", note.raw])
    _emit(args, data, text)
    return 0


def _with_key(args: argparse.Namespace, mem: Memory) -> Memory:
    """``--keys``: the server key file whose secret signs this store's heads (a local store only)."""
    if getattr(args, "keys", None):
        if getattr(args, "url", None):
            raise InvalidInputError("--keys is for a local store: a server signs its heads with its own key file")
        from flexamem.server.keys import KeyFile

        mem.store.head_key = KeyFile(args.keys).head_secret()
    return mem


def cmd_head(args: argparse.Namespace) -> int:
    """The heads of a history and its agent sessions (JSON lines), to keep outside the database."""
    with _open(args, read_only=True) as mem:
        _with_key(args, mem)
        heads = [mem.head(), *(mem.agent(session_id=sid).head() for sid in mem.sessions())]
    for head in heads:
        print(json.dumps(head.as_json(), ensure_ascii=False))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Every problem of the history's rows (and, with --head, whether it extends the heads kept then):
    exit 0 when none, 1 when some."""
    kept = None
    if args.head:
        text = sys.stdin.read() if args.head == "-" else Path(args.head).read_text(encoding="utf-8")
        try:
            kept = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise InvalidInputError(f"--head: not JSON lines of heads ({exc})") from None
    with _open(args, read_only=True) as mem:
        problems = _with_key(args, mem).verify(head=kept)
    _emit(args, {"history": args.history, "problems": problems}, "\n".join(problems) or "no problems")
    return 1 if problems else 0


def cmd_export(args: argparse.Namespace) -> int:
    """A history and its agent sessions (or, with --all, every history) as checkable JSON Lines."""
    db = _db(args)
    with Memory(db, history=args.history, read_only=True) as mem:
        if args.all:
            histories = transfer.everything(mem.store)
            if not histories:
                raise InvalidInputError(f"{db} holds no history to export")
            lines = transfer.export(mem.store, histories, args.out or sys.stdout)
        else:
            histories = transfer.family(mem.store, args.history)
            lines = mem.export(args.out or sys.stdout)
    where = args.out or "stdout"
    print(f"{len(histories)} histories ({lines} lines) exported to {where}: {', '.join(histories)}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """An export checked line by line, then written in one transaction (never over an existing history)."""
    db = _db(args, must_exist=False)
    histories = import_history(args.input, db, history=args.history)
    _emit(args, {"db": db, "histories": histories}, f"{len(histories)} histories imported: {', '.join(histories)}")
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    """A copy of a live SQLite store (SQLite's online backup API), verified: exit 1 if the copy has problems."""
    db = _db(args)
    problems = transfer.backup(db, args.out)
    _emit(args, {"db": db, "out": args.out, "problems": problems},
          "\n".join(problems) or f"{db} backed up to {args.out}; the copy verifies")  # fmt: skip
    return 1 if problems else 0


def cmd_drop(args: argparse.Namespace) -> int:
    if not args.yes:
        raise InvalidInputError(f"drop deletes history {args.history!r} and its agent sessions for good: add --yes")
    with _open(args) as mem:
        dropped = mem.drop()
    if not dropped:
        raise InvalidInputError(f"no history {args.history!r} in {args.where}")
    _emit(args, {"history": args.history, "dropped": True}, f"history {args.history!r} dropped")
    return 0


def cmd_erase(args: argparse.Namespace) -> int:
    """One turn, one session or one agent step erased from every stored copy (``Memory.erase``), in one
    transaction: the erasure as one JSON line. Nothing of that name: exit 2, nothing changes."""
    if args.step is not None and args.agent is None:
        raise InvalidInputError("--step needs --agent SESSION_ID (the agent session whose step it is)")
    if args.agent is not None and args.step is None:
        raise InvalidInputError("--agent needs --step N (the step to erase)")
    with _open(args) as mem:
        _with_key(args, mem)
        if args.agent is not None:
            done = mem.agent(session_id=args.agent).erase(args.step, reason=args.reason, marker=not args.no_marker)
        else:
            done = mem.erase(turn=args.turn, session=args.session, reason=args.reason, marker=not args.no_marker)
    print(json.dumps(done.as_json(), ensure_ascii=False))
    return 0


def cmd_erasures(args: argparse.Namespace) -> int:
    """The erasures of a history (or, with --agent, of one of its agent sessions) as JSON lines, oldest
    first: what each named, why, when; never the words."""
    with _open(args, read_only=True) as mem:
        if args.agent is None:
            erasures = mem.erasures()
        else:
            mem.agent(session_id=args.agent)  # none of that id: NotFoundError
            erasures = mem.store.erasures(session_history(mem.history_id, args.agent))
    for erasure in erasures:
        print(json.dumps(erasure.as_json(), ensure_ascii=False))
    return 0


def cmd_scrub(args: argparse.Namespace) -> int:
    """The store's clean-up of erased and deleted rows' bytes (SQLite: a WAL checkpoint; PostgreSQL:
    VACUUM FULL of the tables erasure rewrites, which locks them while it runs)."""
    db = _db(args)
    with Memory(db) as mem:
        mem.store.scrub()
    _emit(args, {"db": db, "scrubbed": True}, f"{db}: scrubbed")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from flexamem.server import KeyFile, ServerConfig, serve
    except ImportError:
        raise InvalidInputError("the server needs: pip install 'flexamem[server]'") from None
    keys = KeyFile(args.keys)
    if args.add_key:
        key = keys.add_key(args.add_key)
        print(f"new key for tenant {args.add_key!r} (shown once; only its hash is kept in {args.keys}):")
        print(key)
        return 0
    if not keys.tenants():
        raise InvalidInputError(
            f"no API keys in {args.keys}: create one with flexamem serve --keys {args.keys} --add-key TENANT"
        )
    db = _db(args, must_exist=False)
    use_embedder_arguments(args)  # the workers inherit it
    Memory(db).close()  # create or migrate the store once, before the workers start
    print(
        f"FlexA-Mem serving {db} on http://{args.host}:{args.port} ({args.workers} worker(s)); docs at /docs",
        file=sys.stderr,
    )
    limit: dict[str, Any] = {"max_body_bytes": args.max_body} if args.max_body is not None else {}
    if args.max_open is not None:
        limit["max_open"] = args.max_open
    limit["offload_writes"] = not args.no_offload
    if args.max_pending_writes is not None:
        if args.max_pending_writes < 1:
            raise InvalidInputError("--max-pending-writes must be at least 1")
        limit["max_pending_writes"] = args.max_pending_writes
    if args.write_target is not None:
        if args.write_target < 0:
            raise InvalidInputError("--write-target must be 0 (no bound) or more seconds")
        limit["write_target"] = args.write_target or None
    if args.write_nice is not None:
        if not 0 <= args.write_nice <= 19:
            raise InvalidInputError("--write-nice must be 0 to 19")
        limit["write_nice"] = args.write_nice
    if args.embed_processes is not None:
        if args.embed_processes < 1:
            raise InvalidInputError("--embed-processes must be at least 1")
        limit["embed_processes"] = args.embed_processes
    if args.embed_threads is not None:
        if args.embed_threads < 1:
            raise InvalidInputError("--embed-threads must be at least 1")
        limit["embed_threads"] = args.embed_threads
    if args.write_wait is not None:
        if args.write_wait < 0:
            raise InvalidInputError("--write-wait must be 0 (no bound) or more seconds")
        limit["write_wait"] = args.write_wait or None
    limit["records"] = args.records
    if args.profile is not None:
        limit["profile"] = named_profile(args.profile).name  # refused here, before the workers start
    for name in ("body_timeout", "header_timeout", "keep_alive", "max_header_bytes", "max_headers", "auth_rate"):
        value = getattr(args, name)
        if value is not None:
            if value <= 0:
                raise InvalidInputError(f"--{name.replace('_', '-')} must be more than 0")
            limit[name] = value
    if args.keep_alive_requests is not None:
        if args.keep_alive_requests < 0:
            raise InvalidInputError("--keep-alive-requests must be 0 (never closed) or more")
        limit["keep_alive_requests"] = args.keep_alive_requests
    if args.auth_burst is not None:
        if args.auth_burst < 0:
            raise InvalidInputError("--auth-burst must be 0 (no limit) or more")
        limit["auth_burst"] = args.auth_burst
    if args.forwarded_allow_ips is not None:
        trusted = ",".join(a.strip() for a in args.forwarded_allow_ips.split(",") if a.strip())
        if not trusted:
            raise InvalidInputError("--forwarded-allow-ips needs at least one address (or *)")
        limit["forwarded_allow_ips"] = trusted
    serve(ServerConfig(db, args.keys, **limit), args.host, args.port, args.workers)
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from flexamem.server.mcp import run_stdio
    except ImportError:
        raise InvalidInputError("the MCP server needs: pip install 'flexamem[mcp]'") from None
    run_stdio(_open(args, must_exist=False))
    return 0


PROFILE_HELP = f"a named profile: mode and settings ({', '.join([*PROFILES, *ALIASES])}; default: auto)"


def add_store_commands(sub: Any) -> None:
    """Register the store verbs on the CLI's subparsers."""

    def common(p: argparse.ArgumentParser, history: bool = True, url: bool = True) -> None:
        p.add_argument("--db", help="SQLite file or postgresql:// URL (default: $FLEXAMEM_DB)")
        if url:
            p.add_argument(
                "--url",
                help="a FlexA-Mem server instead of --db (default: $FLEXAMEM_URL; key: $FLEXAMEM_API_KEY)",
            )
        if history:
            p.add_argument("--history", default="default", help="which history of the store (default: default)")
            p.add_argument("--profile", help=PROFILE_HELP)
        p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("init", help="create a store (SQLite file) or check one opens")
    common(p, history=False, url=False)
    p.set_defaults(func=cmd_init)
    p = sub.add_parser("add", help="write sessions, turns, OpenAI messages or agent steps from JSON/JSONL")
    p.add_argument("input", help="a .json or .jsonl file, or - for stdin")
    common(p)
    p.add_argument("--kind", choices=["sessions", "turns", "messages", "steps"], help="default: guessed from the input")
    p.add_argument("--session-id", help="turns/messages: the session's id (default: the next free s<n>)")
    p.add_argument("--date", help="turns/messages: the session's date")
    p.add_argument("--agent", help="steps: the agent session id")
    p.add_argument("--task", help="steps: the task (to start a new agent session)")
    p.add_argument("--budget", type=int, help="steps: the context budget in tokens (to start a new session)")
    p.add_argument("--system", help="steps: the system prompt (to start a new session)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--keys", help="a local store: sign its heads with this server key file's secret")
    p.set_defaults(func=cmd_add)
    p = sub.add_parser("render", help="print the memory rendered for a query within a budget")
    p.add_argument("query")
    common(p)
    p.add_argument("--budget", type=int, default=4096, help="tokens (the memory gets 0.95 x budget - the query)")
    p.add_argument("--mode", choices=list(MODES), help="auto, pieces or units (default: the profile's; auto)")
    p.add_argument("--read-only", action="store_true", help="open the store read-only (merges kept in memory)")
    p.set_defaults(func=cmd_render)
    p = sub.add_parser("histories", help="list the histories of a store (agent sessions included)")
    common(p, history=False)
    p.set_defaults(func=cmd_histories)
    p = sub.add_parser("notes", help="list the notes of a history")
    common(p)
    p.set_defaults(func=cmd_notes)
    p = sub.add_parser("show", help="print one note in full (raw text, record, pieces)")
    p.add_argument("unit", help="a unit id (note.unit_id) or label (u<position>)")
    common(p)
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("head", help="print the heads of a history and its agent sessions (JSON lines) to keep")
    common(p)
    p.add_argument("--keys", help="a local store: sign with this server key file's secret")
    p.set_defaults(func=cmd_head)
    p = sub.add_parser("verify", help="check every stored row against its digest (exit 1 on a problem)")
    common(p)
    p.add_argument("--head", help="a file of heads kept from 'flexamem head' (- for stdin): must still extend them")
    p.add_argument("--keys", help="a local store: check signatures with this server key file's secret")
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser("drop", help="delete a whole history and its agent sessions (the only deletion)")
    common(p)
    p.add_argument("--yes", action="store_true", help="confirm the deletion")
    p.set_defaults(func=cmd_drop)
    p = sub.add_parser("export", help="write a history and its agent sessions (or --all) as checkable JSON Lines")
    p.add_argument("--db", help="SQLite file or postgresql:// URL (default: $FLEXAMEM_DB)")
    p.add_argument("--history", default="default", help="which history (default: default)")
    p.add_argument("--all", action="store_true", help="every history of the store")
    p.add_argument("--out", help="the file to write (default: stdout)")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("import", help="check an export line by line, then write it in one transaction")
    p.add_argument("input", help="a file from 'flexamem export', or - for stdin")
    p.add_argument("--db", help="SQLite file or postgresql:// URL (default: $FLEXAMEM_DB)")
    p.add_argument("--history", help="store the file's one history (and its sessions) under this name")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_import)
    p = sub.add_parser("backup", help="copy a live SQLite store (online backup API) and verify the copy")
    p.add_argument("out", help="the copy's path (must not exist)")
    p.add_argument("--db", help="SQLite file (default: $FLEXAMEM_DB)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_backup)
    p = sub.add_parser("erase", help="erase a turn, a session or an agent step from every stored copy")
    common(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--turn", help="a turn id, or <unit id or label>#<n> (the unit's n-th turn)")
    which.add_argument("--session", help="a session id: every turn of it")
    which.add_argument("--agent", help="an agent session id (with --step)")
    p.add_argument("--step", type=int, help="with --agent: the step number to erase")
    p.add_argument("--reason", default="", help="why (kept in the erasure; never the words)")
    p.add_argument("--no-marker", action="store_true", help="show nothing where the words were (default: (erased))")
    p.add_argument("--keys", help="a local store: sign its heads with this server key file's secret")
    p.set_defaults(func=cmd_erase)
    p = sub.add_parser("erasures", help="print the erasures of a history or of one agent session (JSON lines)")
    common(p)
    p.add_argument("--agent", help="an agent session id: its erasures (a local store)")
    p.set_defaults(func=cmd_erasures)
    p = sub.add_parser("scrub", help="make erased and deleted rows' bytes leave the store's files")
    common(p, history=False, url=False)
    p.set_defaults(func=cmd_scrub)
    p = sub.add_parser("serve", help="run the HTTP server (FastAPI; API keys per tenant)")
    p.add_argument("--db", help="SQLite file or postgresql:// URL (default: $FLEXAMEM_DB)")
    p.add_argument("--keys", default=os.environ.get("FLEXAMEM_KEYS", "flexamem-keys.json"), help="key file")
    p.add_argument("--add-key", metavar="TENANT", help="create an API key for TENANT, print it, and exit")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1, help="worker processes (they share the store)")
    p.add_argument("--max-body", type=int, help="largest request body in bytes (default: 8 MiB)")
    p.add_argument(
        "--max-open", type=int, help="histories each worker keeps open, least recently used closed first (128)"
    )
    p.add_argument(
        "--max-pending-writes",
        type=int,
        help="writes each worker admits at once; one more gets 503 with Retry-After, storing nothing (8)",
    )
    p.add_argument(
        "--write-target",
        type=float,
        help="with writes in progress, admit one only if it is predicted to be acknowledged within this many "
        "seconds (or twice its own embedding work, if longer) at the measured pace, else 503 with Retry-After "
        "(default 1; 0: no such bound)",
    )
    p.add_argument(
        "--embed-processes",
        type=int,
        help="embedding processes per worker: writes admitted together are embedded side by side "
        "(each holds a copy of the model, ~230 MB; default 2 on two cores or more, else 1)",
    )
    p.add_argument(
        "--embed-threads",
        type=int,
        help="onnxruntime threads in each worker and embedding process (default: FLEXAMEM_THREADS, else 1: "
        "the processes share the cores, and a second thread each costs CPU for little gain)",
    )
    p.add_argument(
        "--write-nice",
        type=int,
        help="the scheduling priority (nice, 0-19) of each worker's embedding process: higher gives renders the "
        "CPU first, writes wait longer (default 0)",
    )
    p.add_argument(
        "--write-wait",
        type=float,
        help="seconds a write waits for its vectors per ~1,000 tokens; past it 503 with Retry-After, storing "
        "nothing, its vectors kept for the retry (default: no bound; not with --no-offload)",
    )
    p.add_argument(
        "--no-offload",
        action="store_true",
        help="embed writes in the worker itself (default: a lower-priority process)",
    )
    p.add_argument(
        "--records", choices=["rule", "llm"], default="rule", help="record writer (llm: the FLEXAMEM_LLM_* endpoint)"
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        help="seconds for a request's line and headers; an idle new connection is closed, a started one gets 408 (10)",
    )
    p.add_argument("--body-timeout", type=float, help="seconds for a request's body once its headers are in; 408 (30)")
    p.add_argument("--keep-alive", type=int, help="seconds an idle kept-alive connection stays open (75)")
    p.add_argument(
        "--keep-alive-requests",
        type=int,
        help="answers on one kept-alive connection before it is closed, so a client's connections are spread "
        "over the workers again now and then (100; 0: never)",
    )
    p.add_argument("--max-header-bytes", type=int, help="largest request line and headers in bytes; 431 (16384)")
    p.add_argument("--max-headers", type=int, help="most headers in a request; 431 (100)")
    p.add_argument(
        "--auth-burst",
        type=int,
        help="failed authentications a client address may make at once, per worker; then 429 (20; 0: no limit)",
    )
    p.add_argument("--auth-rate", type=float, help="failed authentications a second an address regains, per worker (2)")
    p.add_argument(
        "--forwarded-allow-ips",
        metavar="ADDRESSES",
        help="comma-separated addresses or networks of the proxies whose X-Forwarded-For names the client "
        "(what the throttle counts; * for any); default: none, the connection's own address (a client "
        "cannot choose its address by sending the header)",
    )
    p.add_argument("--profile", help="the profile histories are rendered with unless a request names one (auto)")
    add_embedder_arguments(p)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("mcp", help="run an MCP server over stdio (tools: remember, recall, notes, erase)")
    p.add_argument("--db", help="SQLite file or postgresql:// URL (default: $FLEXAMEM_DB)")
    p.add_argument("--url", help="a FlexA-Mem server instead of --db (default: $FLEXAMEM_URL; key: $FLEXAMEM_API_KEY)")
    p.add_argument("--history", default="default", help="which history of the store (default: default)")
    p.add_argument("--profile", help=PROFILE_HELP)
    p.set_defaults(func=cmd_mcp)
