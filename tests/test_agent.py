import itertools
import json
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.render.messages import messages_tokens
from flexamem.write.units import step_text_tokens


def observation(i: int, size: int = 8) -> str:
    return json.dumps({"users": [{"id": f"U{i}-{j}", "email": f"p{i}{j}@mail.com"} for j in range(size)]})


def test_pass_through_then_memory_with_window(tmp_path: Path) -> None:
    mem = fm.Memory(tmp_path / "a.db")
    agent = mem.agent(task="Find every Venmo user of my contacts", budget=2048, system="You are an agent.")
    contexts = []
    for i in range(30):
        agent.step(action=f"search_users(query='c{i}')", observation=observation(i))
        contexts.append(agent.context())
    first = contexts[0]
    assert first.pass_through and first.memory is None
    assert [m["role"] for m in first.messages] == ["system", "user", "assistant", "user"]
    started = next(i for i, c in enumerate(contexts) if not c.pass_through)
    assert all(not c.pass_through for c in contexts[started:])  # once on, memory stays on
    last = contexts[-1]
    assert last.memory is not None and last.memory.text
    assert last.messages[2]["content"].startswith("Memory of earlier steps")
    assert last.messages[-1]["content"] == observation(29)  # the newest step is shown unchanged
    assert last.tokens <= last.ceiling == (2048 * 95) // 100
    # every unit older than the window is a note; the window is not
    assert last.notes == len(mem.store.load_notes(agent.core.history_id)) == min(last.window_units)


def test_window_is_longest_newest_run_within_a_quarter() -> None:
    mem = fm.Memory(":memory:")
    agent = mem.agent(task="t", budget=8000)
    for i in range(40):
        agent.step(action=f"a{i}", observation=observation(i, 3))
    units = agent.units()
    first = agent.window(units)
    sizes = [agent.unit_tokens(u) for u in units]
    assert sum(sizes[first:]) <= 8000 // 4
    assert first == 0 or sum(sizes[first - 1 :]) > 8000 // 4
    steps = agent.steps
    assert all(sum(step_text_tokens(steps[i], agent.counter) for i in u) <= 1000 for u in units)


def test_session_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    agent = fm.Memory(path).agent(task="Reset friends on venmo", budget=1500)
    for i in range(20):
        agent.step(action=f"call {i}", observation=observation(i))
    before = agent.context()
    sid = agent.session_id
    again = fm.Memory(path).agent(session_id=sid)
    assert again.task == "Reset friends on venmo" and len(again.steps) == 20
    after = again.context()
    assert after.messages == before.messages
    again.step(action="call 20", observation="done")
    assert again.context().tokens <= (1500 * 95) // 100
    with pytest.raises(fm.InvalidInputError, match="another task"):
        fm.Memory(path).agent(task="something else", budget=1500, session_id=sid)
    with pytest.raises(fm.InvalidInputError, match="no stored agent session"):
        fm.Memory(path).agent(session_id="nope")


def test_merged_records_persist_for_the_episode() -> None:
    mem = fm.Memory(":memory:")
    agent = mem.agent(task="Collect user ids", budget=1024)
    seen: list[list[list[int]]] = []
    for i in range(60):
        agent.step(action=f"lookup({i})", observation=observation(i, 2))
        agent.context()
        seen.append(mem.store.get_state(agent.core.history_id, "timeline") or [])
    grown = [s for s in seen if s]
    assert grown, "a 60-step episode at 1k must merge"
    for a, b in itertools.pairwise(grown):  # merges never undo: each span is kept or absorbed
        for first, last, _level in a:
            assert any(lo <= first and last <= hi for lo, hi, _ in b)


def test_newest_unit_too_big_is_cut_with_a_mark() -> None:
    mem = fm.Memory(":memory:")
    agent = mem.agent(task="Read the log", budget=512, system="Be brief.")
    agent.step(action="cat big.log", observation="line of log output\n" * 2000)
    ctx = agent.context()
    assert ctx.cut and ctx.tokens <= ctx.ceiling
    assert "tokens cut to fit the budget]" in ctx.messages[-1]["content"]
    with pytest.raises(fm.BudgetError):
        mem.agent(task="x " * 600, budget=512).context()


def test_tool_call_messages_are_kept_unchanged() -> None:
    mem = fm.Memory(":memory:")
    agent = mem.agent(task="t", budget=4096)
    msgs = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"id": 3}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
    ]
    agent.step(action="get(id=3)", observation='{"ok": true}', messages=msgs)
    ctx = agent.context()
    assert ctx.messages[-2:] == msgs
    assert ctx.tokens == messages_tokens(ctx.messages, mem.counter)
    with pytest.raises(fm.InvalidInputError):
        agent.step(action="  ", observation="x")
    with pytest.raises(fm.BudgetError):
        mem.agent(task="t", budget=0)


def test_auto_keeps_a_memory_when_the_newest_unit_must_be_cut() -> None:
    mem = fm.Memory(":memory:")
    agent = mem.agent(task="Audit the reservations", budget=2048)
    for i in range(30):
        details = f"Reservation R{i}X{i}: flight HAT{i:03d} from SFO to JFK on May {i + 1}, status confirmed. "
        agent.step(action=f"get_reservation_details(R{i}X{i})", observation=details * 12)
        agent.context(mode="auto")
    spans = mem.store.get_state(agent.core.history_id, "timeline")
    agent.step(action="cat big.log", observation="line of log output\n" * 2000)
    plain = agent.context(mode="units")
    assert plain.cut and plain.memory is None  # the paper's modes show no memory then
    ctx = agent.context(mode="auto")
    assert ctx.cut and ctx.tokens <= ctx.ceiling
    assert ctx.memory is not None and ctx.messages[1]["content"].startswith("Memory of earlier steps")
    assert "tokens cut to fit the budget]" in ctx.messages[-1]["content"]
    # every written unit is still represented (record, merged record or pieces)
    assert all(v.resolution != "hidden" or v.pieces for v in ctx.memory.shown)
    assert ctx.memory.tokens <= ctx.memory.allowance
    assert len(ctx.memory.shown) == len(agent.core.history) >= 4
    assert mem.store.get_state(agent.core.history_id, "timeline") == spans  # this call's merges are not kept
    assert agent.context(mode="auto").messages == ctx.messages  # the same call renders the same


def test_agent_auto_ranks_by_bm25_with_identifiers_and_writes_no_piece_vectors() -> None:
    mem = fm.Memory(":memory:")
    agent = mem.agent(task="Change the flight of my reservation", budget=1200)
    agent.step(action="get_user_details('mia_li_3668')", observation='{"reservations": ["4BMN53", "Q0ZF0J"]}')
    for i in range(15):
        agent.step(action=f"search_direct_flight(day {i})", observation=f"no direct flight on day {i} " * 20)
    ctx = agent.context(mode="auto")
    assert ctx.memory is not None and ctx.tokens <= ctx.ceiling
    assert "4BMN53" in ctx.memory.text  # the reservation codes come back, though no query word names them
    h = agent.core.history
    assert len(h) and not any(h.piece_vector_ready)  # agent auto is BM25 alone: no vectors written
    dense = fm.Memory(":memory:", settings=fm.Settings(agent_auto_alpha=0.5))
    d = dense.agent(task="t", budget=600)
    for i in range(20):
        d.step(action=f"call {i}", observation=observation(i, 8))
    d.context(mode="auto")
    assert len(d.core.history) and all(
        d.core.history.piece_vector_ready
    )  # with a cosine weight the pieces are embedded


def test_a_repeated_call_with_no_new_step_renders_nothing_again() -> None:
    mem = fm.Memory(":memory:")
    agent = mem.agent(task="count the crates", budget=700)
    for i in range(12):
        agent.step(action=f"count({i})", observation=f"crate {i} " * 40)
    first = agent.context()
    assert agent.context() is first  # same steps, same mode: the same context
    assert agent.context(mode="units") is not first
    agent.core.use_settings(fm.Settings(agent_auto_rho=0.1))
    smaller = agent.context()
    assert smaller is not first  # new settings: rendered again, though no step came
    agent.step(action="count(12)", observation="crate 12")
    after = agent.context()
    assert after is not smaller and after.messages[-1]["content"] == "crate 12"


@pytest.mark.parametrize("share", [0.1, 0.25, 0.5])
def test_agent_auto_rho_is_the_timeline_share_of_an_agent_memory(share: float) -> None:
    agent = fm.Memory(":memory:", settings=fm.Settings(agent_auto_rho=share)).agent(task="count", budget=3000)
    for i in range(80):
        agent.step(action=f"count({i})", observation=f"crate {i} holds item-{i:04d} " * 12)
    ctx = agent.context()
    assert ctx.memory is not None and ctx.tokens <= ctx.ceiling
    timeline = ctx.memory.composition["records"] + ctx.memory.composition["merged"]
    assert 0 < timeline <= share * ctx.memory.allowance  # merged down to the share
    assert ctx.memory.composition["pieces"] > 0  # the rest holds pieces
    if share == 0.5:
        assert timeline > 0.25 * ctx.memory.allowance  # a larger share is used, not only allowed


def test_agent_auto_rho_above_one_is_refused() -> None:
    with pytest.raises(fm.InvalidInputError, match="agent_auto_rho"):
        fm.Settings(agent_auto_rho=1.5)


def shell_agent(settings: fm.Settings | None = None, steps: int = 30, path: str | Path = ":memory:") -> fm.AgentSession:
    """A coding agent's session: bash in fenced blocks after reasoning, long outputs."""
    agent = fm.Memory(path, settings=settings).agent(task="Fix tests/test_parse.py", budget=3000)
    for i in range(steps):
        command = f"sed -n '1,60p' pkg/mod_{i}.py" if i % 2 else f"grep -rn parser_state_{i} pkg"
        agent.step(
            action=f"THOUGHT: I will look at part {i}, which is long reasoning.\n\n```bash\n{command}\n```",
            observation="\n".join(f"pkg/mod_{i}.py:{j}: parser_state_{i}.field_{j} = None" for j in range(40)),
        )
    return agent


def test_auto_keeps_a_trace_of_every_command_of_a_coding_agent() -> None:
    agent = shell_agent()
    ctx = agent.context()
    memory = next(m["content"] for m in ctx.messages if str(m.get("content")).startswith("Memory of earlier"))
    assert ctx.tokens <= ctx.ceiling and "Commands run before the recent steps" in memory
    trace = memory.split("\n[")[0]
    written = [s for u in agent.units()[: ctx.notes] for s in u]
    assert ctx.memory is not None
    raw = {i for v in ctx.memory.shown if v.resolution == "raw" for i in agent.units()[v.seq]}
    assert 0 < len(raw) < len(written)
    for i in written:  # every command that left the window: in the trace, or raw in the memory below it
        command = f"sed -n '1,60p' pkg/mod_{i}.py" if i % 2 else f"grep -rn parser_state_{i} pkg"
        assert (f"step {i + 1}: {command}" in trace) == (i not in raw)
        assert command in memory
    assert "which is long reasoning" not in trace
    full = shell_agent().context(options=fm.RenderOptions(trace_unshown=False))
    listed = next(str(m["content"]) for m in full.messages if "Commands run before" in str(m.get("content")))
    assert all(f"step {i + 1}: " in listed.split("\n[")[0] for i in written)  # the switch off: every command
    off = shell_agent().context(options=fm.RenderOptions(commands=False))
    assert not any("Commands run before" in str(m.get("content")) for m in off.messages)
    short = shell_agent(fm.Settings(agent_trace_share=0.05)).context()
    text = next(str(m["content"]) for m in short.messages if "Commands run before" in str(m.get("content")))
    lines = [line for line in text.splitlines() if line.startswith("step ")]
    assert 0 < len(lines) < len(written) and lines[-1].startswith(f"step {written[-1] + 1}:")  # the newest kept


def test_the_plan_names_the_units_a_render_shows_raw() -> None:
    """Renderer.raw_units (what the trace leaves out) is the raw set of the render it plans, without
    assembling or counting a text."""
    agent = shell_agent()
    agent.context()
    core, n = agent.core, len(agent.core.history)
    query = agent.query("auto")
    base = core.renderer.timeline.records(n)
    options = fm.RenderOptions(pass_through=False)  # the plan is unit recovery's, never a pass-through
    sizes = []
    for allowance in (300, 900, 1500, 2500, 6000, 100_000):
        planned = core.renderer.raw_units(query, allowance, options, n=n, merge_allowance=allowance, base=base)
        rendering = core.renderer.render(query, allowance, "auto", options, n=n, merge_allowance=allowance, base=base)
        assert planned == {v.seq for v in rendering.shown if v.resolution == "raw"}
        sizes.append(len(planned))
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]  # more room, more of the candidates raw


def test_records_and_labels_name_the_command_not_the_reasoning() -> None:
    agent = shell_agent()
    agent.context()
    note = agent.core.history.notes[1]
    assert "sed -n" in note.record or "grep -rn" in note.record
    assert "long reasoning" not in note.record
    labels = [p.label for p in note.pieces if p.label and "output of" in p.label]
    assert labels and all("THOUGHT" not in label for label in labels)
    assert any("output of grep -rn" in label or "output of sed -n" in label for label in labels)


def test_the_trace_shows_whole_commands_newest_first_and_first_lines_for_the_rest() -> None:
    agent = fm.Memory(":memory:").agent(task="Fix pkg/app.py", budget=4000)
    for i in range(24):
        script = "\n".join(f"print('check {i} line {j}')" for j in range(30))
        agent.step(action=f"Writing a script.\n\n```bash\ncat <<'EOF' > check_{i}.py\n{script}\nEOF\n```",
                   observation="\n".join(f"output {i} {j}" for j in range(60)))  # fmt: skip
    ctx = agent.context()
    trace = next(str(m["content"]) for m in ctx.messages if "Commands run before" in str(m.get("content")))
    trace = trace.split("\n[")[0]
    written = [s for u in agent.units()[: ctx.notes] for s in u]
    newest, oldest = written[-1], written[0]
    assert f"print('check {newest} line 29')" in trace  # the newest command whole
    assert f"step {oldest + 1}: cat <<'EOF' > check_{oldest}.py …" in trace  # an old one by its first line
    assert ctx.tokens <= ctx.ceiling


def test_a_step_the_store_refuses_leaves_the_session_as_it_was(tmp_path: Path) -> None:
    """A step joins the session's one list of steps before it is stored (with the units it pushes out);
    when the store refuses it, that entry goes again: steps, units, trace and context are as before,
    and its step id is not taken."""
    sid = shell_agent(path=tmp_path / "s.db").session_id
    reader = fm.Memory(tmp_path / "s.db", read_only=True).agent(session_id=sid)
    before, units = reader.context(), reader.units()
    assert any("Commands run before" in str(m.get("content")) for m in before.messages)
    for _ in range(3):  # the same id each time: a taken id would return a number instead of failing
        with pytest.raises(fm.ReadOnlyStoreError):
            reader.step(action="```bash\nrm -rf pkg\n```", observation="gone", step_id="x")
        assert len(reader.steps) == 30 and reader.units() == units and reader.message_count == 60
        again = reader.context()
        assert again.messages == before.messages and "rm -rf" not in json.dumps(again.messages)


def test_a_session_reads_and_writes_the_store_through_its_core(tmp_path: Path) -> None:
    mem = fm.Memory(tmp_path / "c.db")
    agent = mem.agent(task="t", budget=1024, system="s", session_id="one")
    agent.step(action="a", observation="o")
    core = agent.core
    meta = core.meta()
    assert core.kind() == "agent" and meta is not None and (meta["task"], meta["budget"]) == ("t", 1024)
    assert [json.loads(r.data)["action"] for r in core.steps()] == ["a"]
    core.set_state("note", [1, 2])
    assert core.state("note") == [1, 2] and core.state("absent") is None
    head = core.head()
    assert head is not None and head.steps == 1 and head == agent.head()
    assert not core.read_only and fm.Memory(tmp_path / "c.db", read_only=True).core.read_only
    none = fm.Memory(tmp_path / "c.db", history="nobody").core
    assert none.kind() is None and none.meta() is None and none.head() is None and none.steps() == []
