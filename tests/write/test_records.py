from flexamem.cli.demo import DEMO_SESSIONS
from flexamem.notes import Step
from flexamem.tokens import counter
from flexamem.write.records import RecordWriter, RuleWriter, names_in, numbers_in
from flexamem.write.units import agent_unit, cut_session, parse_turns


def demo_units():  # type: ignore[no-untyped-def]
    out = []
    for sid, date, turns in DEMO_SESSIONS:
        out += cut_session(parse_turns(turns), counter(), session_id=sid, date=date, max_unit_tokens=2000)
    return out


def test_rule_writer_is_a_record_writer() -> None:
    assert isinstance(RuleWriter(), RecordWriter)


def test_conversation_record_keeps_names_numbers_and_limit() -> None:
    writer = RuleWriter()
    records = writer.write_records(demo_units())
    first = records[0]
    assert len(first.text.split()) <= 80
    for exact in ("Lisbon", "TP1351", "CR-88412", "2 March 2024"):
        assert exact in first.text
    assert first.writer == "rule" and not first.flagged
    assert "lisbon" in first.fields.keywords
    assert first.fields.tags[:3] == ("conversation", "Ana", "Ben")
    assert "Ana and Ben" in first.fields.description


def test_long_session_record_is_cut_at_80_words() -> None:
    turns = [
        {"speaker": "A" if i % 2 else "B", "text": f"Visited museum number {i} in Paris with Lena today."}
        for i in range(200)
    ]
    [unit] = cut_session(parse_turns(turns), counter(), session_id="s", date=None, max_unit_tokens=10**6)
    record = RuleWriter().write_records([unit])[0]
    assert len(record.text.split()) <= 80


def test_agent_record_keeps_calls_arguments_and_results() -> None:
    unit = agent_unit(
        [
            Step(1, 'get_user_details(user_id="sara_doe_496")', '{"name": "Sara Doe", "reservations": ["HAT123"]}'),
            Step(2, 'cancel_reservation(reservation_id="HAT123")', '{"status": "cancelled", "refund": 433}'),
        ],
        unit_id="u0",
    )
    record = RuleWriter().write_records([unit])[0]
    assert len(record.text.split()) <= 80
    for exact in ("get_user_details", "sara_doe_496", "HAT123", "cancel_reservation", "cancelled"):
        assert exact in record.text
    assert record.fields.tags == ("agent", "get_user_details", "cancel_reservation")
    assert record.fields.description == "Steps 1-2: called get_user_details, cancel_reservation."


def test_merge_keeps_names_and_numbers_within_150_words() -> None:
    records = [r.text for r in RuleWriter().write_records(demo_units())]
    merged = RuleWriter().merge_records(records * 2).text
    assert len(merged.split()) <= 150
    for exact in ("TP1351", "4417"):
        assert exact in merged


def test_name_and_number_extraction() -> None:
    assert names_in("Yesterday Ana met Mrs Okafor in Lisbon.") == ["Ana", "Mrs Okafor", "Lisbon"]
    assert numbers_in("Flight at 07:40 cost $1,250 and 3 bags, 15%") == ["07:40", "$1,250", "3", "15%"]
