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


# Two sentences whose rarity is exactly equal (3 words seen once; 1 + 1 + 1/2 + 1/3 + 1/6) but whose
# float sum in a set's iteration order (which follows the process's string hashes) can be a bit over or
# under 3.0: the record must not depend on PYTHONHASHSEED.
_TIE_SCRIPT = """
from flexamem.write.records import RuleWriter
from flexamem.write.units import cut_session, parse_turns
from flexamem.tokens import counter
text = ("delta echo foxtrot golf hotel. alpha bravo charlie. foxtrot golf. golf hotel. "
        "hotel. hotel. hotel. hotel.")
[unit] = cut_session(parse_turns([{"speaker": "user", "text": text}]), counter(), session_id="s", date=None,
                     max_unit_tokens=10**6)
print(RuleWriter(record_words=7).write_record(unit).text)
"""


def test_conversation_record_does_not_depend_on_the_hash_seed() -> None:
    import os
    import subprocess
    import sys

    records = set()
    for seed in range(12):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        out = subprocess.run([sys.executable, "-c", _TIE_SCRIPT], env=env, capture_output=True, text=True, check=True)
        records.add(out.stdout.strip())
    assert records == {"user. user: delta echo foxtrot golf hotel."}  # equal scores: the earlier sentence
