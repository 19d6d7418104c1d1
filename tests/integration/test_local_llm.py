"""Records and merged records written by a real local model (llama.cpp server, Qwen2.5-Coder 0.5B).

``scripts/setup_local_llm.sh`` installs both; without them these tests skip, unless
``FLEXAMEM_REQUIRE_LOCAL_LLM=1`` (set by CI), where a missing model is a failure.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.cli.demo import DEMO_SESSIONS
from flexamem.llm.local import LocalServer, local_model_path
from tests.helpers import needs_data, shared_file
from tests.integration.conftest import NEEDS_LOCAL_LLM, require_local_llm

pytestmark = NEEDS_LOCAL_LLM
MODEL = "qwen2.5-coder-0.5b-instruct"


def llm(server: LocalServer, cache: Path) -> fm.OpenAICompatible:
    return server.client(MODEL, cache=cache, concurrency=1, timeout=300)


def exact_values(text: str) -> set[str]:
    return set(re.findall(r"\b\d[\d:]*\b|\b[A-Z][a-z]{2,}\b", text))


def test_a_real_model_writes_records_and_fields(server: LocalServer, tmp_path: Path) -> None:
    mem = fm.Memory(tmp_path / "m.db", writer=fm.LLMWriter(llm(server, tmp_path / "cache.sqlite")))
    for sid, date, turns in DEMO_SESSIONS[:2]:
        mem.add_session(turns, session_id=sid, date=date)
    notes = mem.notes()
    assert len(notes) == 2
    for n in notes:
        assert n.writer == f"llm:{MODEL}" and not n.flagged, n.flag_reason
        assert 3 <= len(n.record.split()) <= 80
        assert n.fields.keywords and n.fields.description
        kept = exact_values(n.record + " " + " ".join(n.fields.keywords))
        assert kept & exact_values(n.raw), (n.record, n.fields)  # names or numbers of the unit survive
    calls = mem.store.llm_calls(mem.history_id)
    assert [c.seq for c in calls if c.purpose == "record"] == [0, 1]
    assert all(c.prompt_tokens > 100 and c.completion_tokens > 5 and not c.cached for c in calls)

    # a rerun (a fresh store, the same cache) costs nothing and writes the same records
    again = fm.Memory(tmp_path / "again.db", writer=fm.LLMWriter(llm(server, tmp_path / "cache.sqlite")))
    for sid, date, turns in DEMO_SESSIONS[:2]:
        again.add_session(turns, session_id=sid, date=date)
    assert [n.record for n in again.notes()] == [n.record for n in notes]
    assert again.llm_usage()["calls"] == 0 and again.llm_usage()["cached_calls"] == len(calls)


def test_a_real_model_writes_agent_records_and_merged_records(server: LocalServer, tmp_path: Path) -> None:
    writer = fm.LLMWriter(llm(server, tmp_path / "cache.sqlite"))
    mem = fm.Memory(tmp_path / "a.db", writer=writer)
    agent = mem.agent(task="Cancel reservation EHGLP3 for user mia_li_3668", budget=1024)
    outputs = [
        {"user_id": "mia_li_3668", "reservations": ["EHGLP3", "NO6JO3"], "membership": "gold"},
        {"reservation_id": "EHGLP3", "origin": "JFK", "destination": "SEA", "date": "2024-05-20", "cabin": "economy"},
        {"reservation_id": "EHGLP3", "status": "cancelled", "refund": 327.5},
        {"reservation_id": "NO6JO3", "origin": "SEA", "destination": "JFK", "date": "2024-05-27", "cabin": "basic"},
        {"user_id": "mia_li_3668", "payment_methods": ["credit_card_4421", "gift_card_7090"]},
        {"reservation_id": "NO6JO3", "status": "unchanged"},
    ]
    calls = [
        "get_user_details",
        "get_reservation_details",
        "cancel_reservation",
        "get_reservation_details",
        "get_user_details",
        "get_reservation_details",
    ]
    for name, out in zip(calls, outputs, strict=True):
        agent.step(f"{name}({json.dumps({'id': out.get('reservation_id', 'mia_li_3668')})})", json.dumps(out) * 12)
    notes = agent.core.notes()
    assert len(notes) >= 2 and all(n.writer == f"llm:{MODEL}" and not n.flagged for n in notes), [
        n.flag_reason for n in notes
    ]
    assert all(len(n.record.split()) <= 80 for n in notes)

    merged = writer.merge_records([n.record for n in notes])
    assert not merged.flagged, merged.flag_reason
    assert 3 <= len(merged.text.split()) <= 150
    assert merged.calls and merged.calls[0].purpose == "merge" and merged.calls[0].prompt_tokens > 50


def test_a_real_model_reads_and_judges(server: LocalServer, tmp_path: Path) -> None:
    from flexamem_bench.harness import load_rows, run
    from flexamem_bench.reader import LLMReader
    from tests.helpers import tiny_history

    reader = LLMReader(llm(server, tmp_path / "cache.sqlite"), answer_tokens=120)
    run([tiny_history()], ["piece-recovery"], [1024], tmp_path / "out", progress=False, reader=reader)
    (row,) = load_rows(tmp_path / "out")
    assert row["accuracy"] in (0.0, 1.0) and row["reader_answer"]
    assert row["evidence_verbatim"] == 1.0  # the passport turn is in the memory the model read


def test_the_server_reports_its_own_death(tmp_path: Path) -> None:
    """A server that dies mid-run is named as the cause (exit code, log) at once, not after retries."""
    require_local_llm()
    with LocalServer(local_model_path()) as s:
        client = s.client(MODEL, timeout=30)
        assert s.dead() is None
        assert s._proc is not None
        s._proc.kill()
        s._proc.wait()
        start = time.monotonic()
        with pytest.raises(fm.LLMError, match=r"the local server exited with code -9 \(SIGKILL\), see .*\.log"):
            client.complete([{"role": "user", "content": "hello"}], max_tokens=4)
        assert time.monotonic() - start < 5  # no backoff through five retries


def test_the_built_wheel_is_portable() -> None:
    """The llama.cpp libraries hold no AMX instructions (which crash in VMs that report AMX but forbid it),
    and the wheel was built with native CPU detection off."""
    import shutil
    import subprocess

    import llama_cpp

    libs = sorted(Path(llama_cpp.__file__).parent.rglob("libggml*.so*"))
    assert libs, "no ggml libraries in the installed llama_cpp package"
    objdump = shutil.which("objdump")
    assert objdump is not None, "objdump (binutils, installed with the compiler that built the wheel) is missing"
    for lib in libs:
        asm = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True).stdout
        found = re.findall(r"\t(ldtilecfg|tdpb[su]{2}d|tdpbf16ps|tileloadd|tilezero)\b", asm)
        assert not found, f"{lib.name} holds AMX instructions: {sorted(set(found))}"
    opts = sorted(
        Path(os.environ.get("FLEXAMEM_CACHE", Path.home() / ".cache" / "flexamem")).glob("wheels/*/BUILD_OPTIONS")
    )
    assert opts and all("-DGGML_NATIVE=OFF" in p.read_text() for p in opts)


LME = shared_file("longmemeval", "longmemeval-s-dev.json")


@needs_data(LME)
def test_a_real_model_reads_longmemeval_by_its_protocol(server: LocalServer, tmp_path: Path) -> None:
    """The plumbing of LongMemEval's accuracy protocol on one real dev question: the question date and
    the chain-of-note prompt reach the model, the judge of the question's type answers yes or no."""
    from flexamem_bench.datasets import longmemeval_histories
    from flexamem_bench.harness import load_rows, run
    from flexamem_bench.reader import LLMReader

    h = longmemeval_histories(LME)[0]
    reader = LLMReader(llm(server, tmp_path / "cache.sqlite"), answer_tokens=200, protocol="longmemeval")
    run([h], ["auto"], [2048], tmp_path / "out", progress=False, reader=reader)
    (row,) = load_rows(tmp_path / "out")
    assert row["accuracy"] in (0.0, 1.0) and row["reader_answer"] and row["within_budget"]
