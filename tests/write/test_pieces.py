from hypothesis import given, settings
from hypothesis import strategies as st

from flexamem.notes import Step, Turn
from flexamem.tokens import counter
from flexamem.write.pieces import cut_pieces
from flexamem.write.units import agent_unit, cut_session

line = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\x00"), max_size=120)
turn_text = st.lists(line, min_size=1, max_size=6).map("\n".join).filter(lambda t: t.strip() != "")


def check_pieces(unit, kappa):  # type: ignore[no-untyped-def]
    pieces = cut_pieces(unit, kappa, counter())
    c = counter()
    covered = [False] * len(unit.raw)
    last_end = 0
    for p in pieces:
        assert p.text == unit.raw[p.start : p.end]
        assert p.tokens == c.count(p.text) <= kappa
        assert p.start >= last_end  # in order, no overlap
        last_end = p.end
        block = unit.blocks[p.block]
        assert block.start <= p.start and p.end <= block.start + len(block.text)  # never crosses a block
        assert p.source_id == block.source_id
        assert (p.label is None) == (p.start == block.start)
        for i in range(p.start, p.end):
            covered[i] = True
    # every character no piece holds is whitespace (blank lines and trimmed edges)
    assert all(ok or ch.isspace() for ok, ch in zip(covered, unit.raw, strict=True))
    return pieces


@settings(max_examples=80, deadline=None)
@given(texts=st.lists(turn_text, min_size=1, max_size=5), kappa=st.integers(min_value=4, max_value=64))
def test_conversation_pieces_cover_raw_exactly(texts: list[str], kappa: int) -> None:
    turns = [Turn(speaker=f"S{i % 2}", text=t, id=f"D1:{i}") for i, t in enumerate(texts)]
    for unit in cut_session(turns, counter(), session_id="s", date=None, max_unit_tokens=10_000):
        check_pieces(unit, kappa)


@settings(max_examples=40, deadline=None)
@given(actions=st.lists(turn_text, min_size=1, max_size=3), output=line, kappa=st.integers(min_value=4, max_value=40))
def test_agent_pieces_cover_raw_exactly(actions: list[str], output: str, kappa: int) -> None:
    steps = [Step(i + 1, a, output) for i, a in enumerate(actions)]
    check_pieces(agent_unit(steps, unit_id="u"), kappa)


def test_lines_are_packed_and_long_lines_split_at_spaces() -> None:
    text = "short one\nshort two\n" + "word " * 400
    [unit] = cut_session([Turn("Ana", text, "D1:1")], counter(), session_id="s", date=None, max_unit_tokens=10_000)
    pieces = check_pieces(unit, 32)
    assert pieces[0].text == "Ana: short one\nshort two"
    assert all(p.text.startswith("word") and p.text.endswith("word") for p in pieces[2:])
    assert all(p.label == "Ana" for p in pieces[1:])


def test_megabyte_single_line() -> None:
    text = "".join(f"tok{i} " for i in range(160_000))[:1_000_000]
    [unit] = cut_session([Turn("A", text)], counter(), session_id="s", date=None, max_unit_tokens=2000)
    pieces = cut_pieces(unit, 128, counter())
    assert all(p.tokens <= 128 for p in pieces)
    assert "".join(p.text for p in pieces).replace(" ", "") == unit.raw.replace(" ", "")
