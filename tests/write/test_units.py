import pytest

from flexamem.errors import InvalidInputError
from flexamem.notes import Step
from flexamem.tokens import counter
from flexamem.write.units import agent_unit, cut_session, pack_steps, parse_turns


def turns(n: int, words: int = 30, role_every: int = 0) -> list[dict[str, str]]:
    out = []
    for i in range(n):
        t = {"speaker": "user" if i % 2 == 0 else "assistant", "text": f"turn {i} " + "word " * words, "id": f"D1:{i}"}
        if role_every:
            t["role"] = "user" if i % 2 == 0 else "assistant"
        out.append(t)
    return out


def test_spans_stay_within_limit_and_cover_all_turns() -> None:
    units = cut_session(parse_turns(turns(60)), counter(), session_id="s", date=None, max_unit_tokens=300)
    assert len(units) > 1
    assert all(counter().count(u.raw) <= 300 for u in units)
    assert [tid for u in units for tid in u.turn_ids] == [f"D1:{i}" for i in range(60)]
    assert units[0].unit_id == "s/0" and units[-1].unit_id == f"s/{len(units) - 1}"


def test_cuts_only_before_user_turns_when_roles_are_given() -> None:
    units = cut_session(parse_turns(turns(40, role_every=1)), counter(), session_id="s", date=None, max_unit_tokens=200)
    assert len(units) > 1
    for u in units:
        assert u.blocks[0].text.startswith("user: ")


def test_one_unit_per_session_and_oversized_turn() -> None:
    parsed = parse_turns(turns(30))
    assert len(cut_session(parsed, counter(), session_id="s", date="d", max_unit_tokens=50, one_unit=True)) == 1
    big = parse_turns([{"speaker": "A", "text": "x " * 5000}, {"speaker": "B", "text": "short"}])
    units = cut_session(big, counter(), session_id="s", date=None, max_unit_tokens=100)
    assert [len(u.blocks) for u in units] == [1, 1]


def test_pack_steps_rule() -> None:
    assert pack_steps([400, 500, 200, 1500, 10], 1000) == [[0, 1], [2], [3], [4]]
    assert pack_steps([], 1000) == []


def test_agent_unit_blocks_and_labels() -> None:
    u = agent_unit([Step(3, "ls -la\ncat x", "file.txt"), Step(4, "login()", "")], unit_id="u1")
    assert u.steps == (3, 4)
    assert [b.kind for b in u.blocks] == ["action", "output", "action", "output"]
    assert u.blocks[1].label == "step 3 · output of ls -la"
    assert u.raw.split("\n")[0] == "[step 3] assistant: ls -la"
    for b in u.blocks:
        assert u.raw[b.start : b.start + len(b.text)] == b.text


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([{"speaker": "A", "text": "   "}], "empty"),
        ([{"speaker": "A", "text": b"\xff\xfe"}], "UTF-8"),
        ([{"speaker": "A", "text": "hi", "mood": "x"}], "unknown field"),
        ([{"text": "hi"}], "no speaker"),
        ([{"speaker": "A", "text": "a\ud800b"}], "surrogate"),
        ([{"speaker": "A", "text": 3}], "must be a string"),
        ([], "at least one turn"),
        ("just a string", "list of turns"),
    ],
)
def test_bad_turns_are_rejected_clearly(bad: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        parse_turns(bad)  # type: ignore[arg-type]


def test_normalisation_keeps_text_verbatim_but_newlines() -> None:
    [t] = parse_turns([{"speaker": " A ", "text": "x\r\ny\rz  ", "id": 7}])
    assert (t.speaker, t.text, t.id) == ("A", "x\ny\nz  ", "7")
    [t] = parse_turns([{"speaker": "A", "text": "caf\xc3\xa9".encode("latin-1")}])
    assert t.text == "café"


def test_command_of_reads_the_command_line_of_a_step() -> None:
    from flexamem.write.units import command_of

    assert command_of("THOUGHT: long.\n\n```bash\nsed -n 1,5p a.py\n```") == "sed -n 1,5p a.py"
    assert command_of('I will.\nbash({"command": "cat <<EOF > x.py\\nimport os\\nEOF"})') == "bash: cat <<EOF > x.py …"
    assert command_of('[tool call c1] bash({"command": "ls -la"})') == "bash: ls -la"
    assert command_of('get_user({"user_id": "u1"})') is None  # structured arguments: no command line
    assert command_of("Sure, your flight is booked.") is None
    assert command_of("```python\nprint(1)\n```") is None  # only shell fences
