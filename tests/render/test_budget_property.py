"""The budget guarantee, over random histories, budgets from 256 to 32k and every mode."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flexamem as fm
from flexamem.render.messages import messages_tokens

WORDS = [
    "garden",
    "Lisbon",
    "refund",
    "4417",
    "pottery",
    "Clara",
    "flight",
    "TP1351",
    "the",
    "and",
    "東京",
    "café",
    "x" * 40,
    "value=42",
    '{"id": 7}',
    "🎉",
    "checkout",
    "market",
    "rain",
    "a\tb",
]
text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=120).map(" ".join)
turn = st.tuples(st.sampled_from(["Ana", "Ben", "user", "assistant"]), st.lists(text, min_size=1, max_size=4))
session = st.lists(turn, min_size=1, max_size=6)
budgets = st.integers(min_value=256, max_value=32_000)
SWITCHES = [fm.RenderOptions(atomic_turns=False), fm.RenderOptions(tight_timeline=False)]
AGENT_SWITCHES = [
    fm.RenderOptions(commands=False),
    fm.RenderOptions(code_terms=False),
    fm.RenderOptions(trace_unshown=False),
]
slow = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@slow
@given(
    sessions=st.lists(session, min_size=0, max_size=10),
    budgets=st.lists(budgets, min_size=1, max_size=3),
    query=text,
    prompt=st.sampled_from(["", "Answer from memory.", "rules " * 150]),
    kappa=st.sampled_from([16, 64, 128]),
)
def test_reader_renders_never_exceed_the_budget(sessions, budgets, query, prompt, kappa) -> None:  # type: ignore[no-untyped-def]
    mem = fm.Memory(":memory:", settings=fm.Settings(kappa=kappa, max_unit_tokens=300))
    for i, turns in enumerate(sessions):
        mem.add_session(
            [{"speaker": s, "text": "\n".join(lines)} for s, lines in turns], session_id=f"s{i}", date=f"{i + 1} May"
        )
    for budget in budgets:
        fixed = fm.count(prompt) + fm.count(query)
        if fixed >= (budget * 95) // 100:
            continue
        for mode in ("auto", "pieces", "units"):
            r = mem.render(query, budget, mode=mode, prompt=prompt)
            assert r.tokens == fm.count(r.text)
            assert fixed + r.tokens <= (budget * 95) // 100
            assert len(r.shown) == len(mem)
        for options in SWITCHES:  # auto's switches, each turned off
            r = mem.render(query, budget, options=options, prompt=prompt)
            assert r.tokens == fm.count(r.text) and fixed + r.tokens <= (budget * 95) // 100


@slow
@given(
    steps=st.lists(
        st.tuples(text, st.lists(text, min_size=0, max_size=30).map("\n".join), st.booleans()), min_size=1, max_size=25
    ),
    budget=budgets,
    system=st.sampled_from(["", "You are an agent.", "policy " * 100]),
    share=st.sampled_from([0.01, 0.25, 1.0]),
)
def test_agent_context_never_exceeds_the_ceiling(steps, budget, system, share) -> None:  # type: ignore[no-untyped-def]
    mem = fm.Memory(":memory:", settings=fm.Settings(agent_trace_share=share))
    agent = mem.agent(task="Refund the Lisbon hotel checkout to the Visa card", budget=budget, system=system)
    ceiling = (budget * 95) // 100
    for action, observation, shell in steps:
        if shell:  # a coding agent's text action: reasoning, then its command in a fenced block
            action = f"THOUGHT: {action}\n\n```bash\nsed -n '1,40p' src/{action[:20]}.py\n{action}\n```"
        agent.step(action=action, observation=observation)
        for mode in ("auto", "units"):
            ctx = agent.context(mode=mode)
            assert ctx.tokens == messages_tokens(ctx.messages, mem.counter) <= ceiling
            assert ctx.messages[-1]["role"] in ("user", "assistant")
        for options in AGENT_SWITCHES:  # agent auto's switches, each turned off
            ctx = agent.context(options=options)
            assert ctx.tokens == messages_tokens(ctx.messages, mem.counter) <= ceiling


def test_a_turn_shown_whole_reads_as_written() -> None:
    """auto (readers) shows a ranked turn whole or not at all, and its pieces joined into the text it was:
    a long turn of many lines comes back verbatim line for line (each line after its first behind the
    continuation mark), with no piece labels inside it."""
    mem = fm.Memory(":memory:", settings=fm.Settings(kappa=16))
    long_turn = "\n".join(f"Line {i}: the Lisbon pottery class moved to room {100 + i}." for i in range(12))
    mem.add_session([{"speaker": "Ana", "text": long_turn}, {"speaker": "Ben", "text": "Noted."}], session_id="a")
    for i in range(40):
        mem.add_session([{"speaker": "Ana", "text": f"Day {i}: the garden, the market and the rain. " * 4}])
    assert len(mem.notes()[0].pieces) > 6  # the turn is many pieces
    r = mem.render("Which room is the pottery class in?", budget=700)
    shown = "Ana: " + long_turn.replace("\nLine", "\n│Line")
    assert not r.pass_through and shown in r.text
    parted = mem.render("Which room is the pottery class in?", budget=700, options=fm.RenderOptions(atomic_turns=False))
    assert shown not in parted.text and "[Ana]" in parted.text  # labelled pieces, one a line
