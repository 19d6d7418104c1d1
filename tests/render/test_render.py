import pytest

import flexamem as fm
from flexamem.render.renderer import ABLATIONS, RenderOptions


def filler(mem: fm.Memory, n: int) -> None:
    for i in range(n):
        mem.add_session(
            [
                {
                    "speaker": "Ben",
                    "text": f"Day {i}: the garden, the weather and the market again.\n" * 6,
                    "id": f"F{i}:1",
                },
                {"speaker": "Ana", "text": "Nothing new on my side, just work and the usual errands.", "id": f"F{i}:2"},
            ],
            session_id=f"f{i}",
            date=f"{i + 1} June 2024",
        )


@pytest.fixture()
def big(demo_mem: fm.Memory) -> fm.Memory:
    filler(demo_mem, 12)
    return demo_mem


def test_piece_recovery_shows_the_evidence_turn_verbatim(big: fm.Memory) -> None:
    q = "Which card should the Casa do Rio refund go to?"
    r = big.render(q, 1024, mode="pieces")
    assert r.tokens == fm.count(r.text) <= r.allowance == (1024 * 95) // 100 - fm.count(q)
    assert "I asked them to refund it to my Visa ending 4417." in r.text
    assert "[verbatim pieces from the history, grouped by unit in time order]" in r.text
    s3 = r.view("s3")
    assert s3.pieces and s3.resolution in ("record", "merged")
    assert r.composition["pieces"] > 0


def test_unit_recovery_puts_the_unit_in_place_of_its_record(big: fm.Memory) -> None:
    r = big.render("Casa do Rio late checkout refund Visa", 1200, mode="units")
    s3 = r.view("s3")
    assert s3.resolution in ("raw", "excerpt")
    lines = r.text.split("\n")
    header = next(i for i, line in enumerate(lines) if line.startswith("[u3 · 20 April 2024 · "))
    assert "[u3 · 20 April 2024]" not in r.text  # its record line is replaced, not repeated
    # time order: whatever stands for u2 comes before u3, u4's line after
    before = [i for i, line in enumerate(lines) if line.startswith(("[u2 ", "[u1-"))]
    assert before and before[0] < header
    if s3.resolution == "raw":
        assert "Visa ending 4417" in r.text and set(s3.verbatim_turns) == set()  # demo turns carry no ids
    assert r.tokens <= r.allowance


def test_prompt_counts_against_the_budget(big: fm.Memory) -> None:
    prompt = "You answer questions about the user's past conversations. " * 20
    q = "When does Clara start pottery?"
    r = big.render(q, 2048, mode="pieces", prompt=prompt)
    assert fm.count(prompt) + fm.count(q) + r.tokens <= (2048 * 95) // 100


def test_pass_through_while_everything_fits(demo_mem: fm.Memory) -> None:
    r = demo_mem.render("anything", 8192, mode="units")
    assert r.pass_through and all(v.resolution == "raw" for v in r.shown)
    assert r.text.startswith("[u1 · 2 March 2024 · raw]\nAna: I finally booked the trip to Lisbon!")
    r = demo_mem.render("anything", 8192, mode="units", options=RenderOptions(pass_through=False))
    assert not r.pass_through


def test_bad_render_input(big: fm.Memory) -> None:
    for budget in (0, -5, 2.5, True):
        with pytest.raises(fm.BudgetError):
            big.render("q", budget, mode="pieces")  # type: ignore[arg-type]
    with pytest.raises(fm.BudgetError, match="leaves no room"):
        big.render("q", 1024, prompt="word " * 2000)
    with pytest.raises(fm.InvalidInputError, match="empty"):
        big.render("   ", 1024)
    with pytest.raises(fm.InvalidInputError, match="unknown mode"):
        big.render("q", 1024, mode="chunks")
    huge = "lisbon " * 100_000
    with pytest.raises(fm.BudgetError):
        big.render(huge, 32_000)
    r = big.render(huge, 220_000, mode="pieces")  # a huge query with a huge budget still works
    assert r.tokens <= r.allowance
    assert fm.Memory(":memory:").render("q", 1024).text == ""


def test_render_never_changes_the_store_except_merged_records(big: fm.Memory) -> None:
    store = big.store

    def snapshot() -> tuple[object, ...]:
        db = store.db  # type: ignore[attr-defined]
        return tuple(
            db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("notes", "pieces", "links", "piece_vectors", "llm_calls", "state")
        )

    before = snapshot()
    for budget in (400, 900, 3000):
        for mode in ("pieces", "units"):
            big.render("garden market Lisbon refund", budget, mode=mode)
    assert snapshot() == before
    assert len(store.load_merged("default")) > 0


@pytest.mark.parametrize("name", sorted(ABLATIONS))
def test_ablations_respect_the_budget_and_do_what_they_say(big: fm.Memory, name: str) -> None:
    options = ABLATIONS[name]
    r = big.render(
        "refund Visa Casa do Rio",
        900,
        mode="units",
        options=RenderOptions(**{**options.__dict__, "pass_through": False}),
    )
    assert r.tokens <= r.allowance
    resolutions = {v.resolution for v in r.shown}
    if name == "no-recovery":
        assert not resolutions & {"raw", "excerpt"}
    if name == "no-timeline":
        assert not resolutions & {"record", "merged"}
    if name == "fixed-length":
        assert "raw" not in resolutions
    if name == "no-excerpts":
        assert "excerpt" not in resolutions
    if name == "random-candidates":
        again = big.render(
            "refund Visa Casa do Rio", 900, mode="units", options=RenderOptions(candidates="random", pass_through=False)
        )
        assert again.text == r.text


def test_shown_is_built_on_first_use_only() -> None:
    from flexamem.render.result import Rendering, UnitView

    calls: list[int] = []

    def views() -> list[UnitView]:
        calls.append(1)
        return [UnitView(0, "u1", "record")]

    r = Rendering("text", 1, 10, "units", views)
    assert calls == []  # a render that nobody inspects builds no views
    assert r.view("u1").resolution == "record" and r.shown[0].seq == 0
    assert calls == [1]  # built once, then kept
    mem = fm.Memory(":memory:")
    mem.add_session([{"speaker": "A", "text": f"line {i} about the depot"} for i in range(40)], session_id="s1")
    mem.add_session([{"speaker": "B", "text": "the depot code is 7919"}], session_id="s2")
    rendered = mem.render("depot code", budget=200)
    assert [v.unit_id for v in rendered.shown] == ["s1", "s2"] and rendered.view("s2").pieces


def test_unit_recovery_excerpts_are_made_once_per_query_and_history() -> None:
    """An agent's call plans twice with one query: the second plan reuses the first's excerpts; a new
    note, other query terms or another excerpt size make them again."""
    mem = fm.Memory(":memory:")
    mem.add_session([{"speaker": "A", "text": "The build failed on test_models.py line 42."}], session_id="a")
    renderer = mem.renderer
    first = renderer.recovery(["build", "failed"], 128)
    assert renderer.recovery(["build", "failed"], 128) is first
    assert renderer.recovery(["build"], 128) is not first
    again = renderer.recovery(["build"], 64)
    mem.add_session([{"speaker": "A", "text": "Fixed the import in models.py."}], session_id="b")
    renderer = mem.renderer  # a write may give the memory a new renderer; either way nothing stale is used
    assert renderer.recovery(["build"], 64) is not again
    assert renderer.recovery(["build"], 64).excerpt(0)[0]  # scores made before the new note are not used
    assert "Fixed the import" in renderer.recovery(["build"], 64).excerpt(1)[0]


def test_a_short_turn_gets_the_room_a_long_one_would_take() -> None:
    """``auto_turn_length`` (default 1.0): at a small budget a short turn that answers the question is
    shown, where without the discount a long turn about the same thing took its room."""

    def memory(settings: fm.Settings) -> fm.Memory:
        mem = fm.Memory(":memory:", settings=settings)
        long_turn = " ".join(
            f"For the tomato seedlings, step {i}: water them and turn tray {i} toward the window." for i in range(30)
        )
        filler = [{"speaker": "Ben", "text": f"The bus to work was late again on day {i}."} for i in range(30)]
        short = {"speaker": "Ana", "text": "My tomato seedlings sit in the blue tray by the kitchen window."}
        mem.add_session([{"speaker": "Ana", "text": long_turn}, *filler, short], session_id="s1", date="1 May 2023")
        return mem

    question = "Where do I keep my tomato seedlings?"
    assert "blue tray" in memory(fm.Settings()).render(question, 600).text
    assert "blue tray" not in memory(fm.Settings(auto_turn_length=0.0)).render(question, 600).text


def test_a_cut_never_leaves_part_of_a_mark(big: fm.Memory) -> None:
    """At budgets so small that unit recovery's render is cut, its own marks (hidden entries, omitted
    text) are shown whole or not at all: a fragment such as ``(`` is a mark no reader can tell apart."""
    import re

    whole = re.compile(r"^\(… \d+ older timeline entries hidden for this call\)$|^\(…\)$")
    cut = 0
    for budget in range(8, 64):
        r = big.render("the garden and the market", budget=budget, mode="units")
        assert r.tokens <= budget
        cut += r.text.endswith("cut to fit the budget]")
        for line in r.text.split("\n"):
            assert not line.startswith("(") or whole.match(line), (budget, r.text)
    assert cut  # the sweep reaches the cut it is about


def test_a_piece_line_shown_again_in_another_choice_is_not_counted_again() -> None:
    """The hot path counts each rendered piece line once per memory: a second query that shows some of
    the same pieces of a note beside others counts only the lines it has not shown before."""
    from flexamem.tokens import TokenCounter

    mem = fm.Memory(":memory:")
    turns = [{"speaker": "A", "text": f"crate {i} went to the {'north' if i % 2 else 'south'} dock"} for i in range(12)]
    turns += [{"speaker": "B", "text": f"crate {i} holds {'red' if i < 6 else 'blue'} paint"} for i in range(12)]
    mem.add_session(turns, session_id="s1")
    renderer = mem.renderer

    class Counting:
        def __init__(self, inner: TokenCounter) -> None:
            self.inner, self.texts = inner, list[str]()

        def count(self, text: str) -> int:
            self.texts.append(text)
            return self.inner.count(text)

        def count_lines(self, lines: list[str], cache: dict[tuple[str, bool], int]) -> int:
            return TokenCounter.count_lines(self, lines, cache)  # its own count() counts

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

    counting = Counting(renderer.counter)
    renderer.counter = counting
    first = mem.render("north dock crates", budget=220, mode="pieces")
    counting.texts.clear()
    second = mem.render("crates of red paint by the north dock", budget=220, mode="pieces")
    shared = {line for line in first.text.splitlines() if "crate" in line} & set(second.text.splitlines())
    assert shared, "the two renders must show some of the same pieces for this test to mean anything"
    assert first.text != second.text and second.tokens == fm.count(second.text)
    again = [line for text in counting.texts for line in text.splitlines() if line in shared]
    assert not again, f"counted again: {again}"
