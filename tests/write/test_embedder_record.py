"""Each history keeps the embedder it was written with: recorded in its row, used again when the
default changes, and a different one refused (vectors of two models are never compared)."""

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import flexamem as fm
from flexamem.write.default_embed import default_embedder
from flexamem.write.onnx_embed import OnnxMiniLMEmbedder

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "stores"

SESSION = [
    {"role": "user", "content": "I booked the Lisbon hotel, reference HX-4471, for the pottery week."},
    {"role": "assistant", "content": "Noted: Lisbon, HX-4471."},
]


def recorded(path: Path, history: str) -> object:
    with sqlite3.connect(path) as db:
        return json.loads(db.execute("SELECT meta FROM histories WHERE id = ?", (history,)).fetchone()[0]).get(
            "embedder"
        )


@pytest.fixture(scope="module")
def int8(tmp_path_factory: pytest.TempPathFactory) -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder(threads=1, precision="int8")


def test_a_history_records_its_embedder_and_keeps_it_when_the_default_changes(
    tmp_path: Path, int8: OnnxMiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "m.db"
    with fm.Memory(db, history="old") as mem:
        mem.add_session(SESSION)
        fp32_name = mem.embedder.name
    assert recorded(db, "old") == fp32_name == "all-MiniLM-L6-v2"
    with fm.Memory(db, history="new", embedder=int8) as mem:
        mem.add_session(SESSION)
    assert recorded(db, "new") == "all-MiniLM-L6-v2-int8-v3"

    monkeypatch.setenv("FLEXAMEM_EMBEDDER", "onnx-int8")  # the default is now int8 ...
    with fm.Memory(db, history="old") as mem:  # ... but the fp32 history goes on with fp32
        assert mem.embedder.name == "all-MiniLM-L6-v2"
        mem.add_session([{"role": "user", "content": "Also a kiln class in Porto."}])
        vectors = mem.history.embeddings
    with fm.Memory(":memory:", embedder=default_embedder("all-MiniLM-L6-v2")) as twin:  # fp32 on purpose
        twin.add_session(SESSION)
        twin.add_session([{"role": "user", "content": "Also a kiln class in Porto."}])
        assert np.allclose(vectors, twin.history.embeddings, atol=1e-5)
    with fm.Memory(db, history="old") as mem:
        assert "HX-4471" in mem.render("What is the Lisbon hotel reference?", 2048).text
    with fm.Memory(db, history="fresh") as mem:  # a new history takes the new default
        mem.add_session(SESSION)
        assert mem.embedder.name == "all-MiniLM-L6-v2-int8-v3"
    assert recorded(db, "fresh") == "all-MiniLM-L6-v2-int8-v3"


def test_another_embedder_than_the_recorded_one_is_refused_and_nothing_is_written(
    tmp_path: Path, int8: OnnxMiniLMEmbedder
) -> None:
    db = tmp_path / "m.db"
    with fm.Memory(db) as mem:
        mem.add_session(SESSION)
    with fm.Memory(db, embedder=int8) as mem:
        with pytest.raises(fm.InvalidInputError, match="written with the embedder 'all-MiniLM-L6-v2'"):
            mem.add_session([{"role": "user", "content": "another"}])
        with pytest.raises(fm.InvalidInputError, match="another model"):
            mem.render("the hotel?", 2048)
    with fm.Memory(db) as mem:
        assert len(mem.notes()) == 1


def test_agent_sessions_record_the_embedder_too(tmp_path: Path, int8: OnnxMiniLMEmbedder) -> None:
    db = tmp_path / "m.db"
    with fm.Memory(db, embedder=int8) as mem:
        session = mem.agent("find the hotel reference", budget=4096, session_id="s1")
        session.step("read_file('bookings.txt')", "Lisbon hotel HX-4471")
        sid = session.core.history_id
    assert recorded(db, sid) == "all-MiniLM-L6-v2-int8-v3"
    with fm.Memory(db) as mem:  # the default: the session goes on with its own embedder
        mem.agent(session_id="s1").step("noop()", "ok")
        assert mem.agent(session_id="s1").core.embedder.name == "all-MiniLM-L6-v2-int8-v3"
    fp32 = default_embedder("all-MiniLM-L6-v2")
    with fm.Memory(db, embedder=fp32) as mem, pytest.raises(fm.InvalidInputError, match="another model"):
        mem.agent(session_id="s1").step("noop()", "ok")  # another one given: refused


def test_a_history_written_before_names_were_recorded_counts_as_fp32(tmp_path: Path, int8: OnnxMiniLMEmbedder) -> None:
    db = tmp_path / "m.db"  # a store an older version wrote (schema 5, e233e51): no embedder in its meta
    shutil.copy(FIXTURES / "v5-e233e51.db", db)
    assert json.loads(sqlite3.connect(db).execute("SELECT meta FROM histories WHERE id = 'conv'").fetchone()[0]) == {}
    with (
        fm.Memory(db, history="conv", embedder=int8) as mem,
        pytest.raises(fm.InvalidInputError, match="all-MiniLM-L6-v2'"),
    ):
        mem.render("Where did Carla move?", 2048)
    with fm.Memory(db, history="conv") as mem:
        assert mem.embedder.name == "all-MiniLM-L6-v2"
        assert "aquarium" in mem.render("Where did Carla move for her job?", 2048).text


@pytest.mark.parametrize(
    ("precision", "name"), [("int8-v1", "all-MiniLM-L6-v2-int8"), ("int8-v2", "all-MiniLM-L6-v2-int8-v2")]
)
def test_a_history_written_with_an_earlier_int8_recipe_goes_on_with_it(
    tmp_path: Path, int8: OnnxMiniLMEmbedder, monkeypatch: pytest.MonkeyPatch, precision: str, name: str
) -> None:
    db = tmp_path / "m.db"
    earlier = OnnxMiniLMEmbedder(threads=1, precision=precision)
    assert earlier.name == name  # the name int8 histories recorded while the recipe was this one
    with fm.Memory(db, history="old", embedder=earlier) as mem:
        mem.add_session(SESSION)
    monkeypatch.setenv("FLEXAMEM_EMBEDDER", "onnx-int8")  # the current int8 recipe is the default ...
    with fm.Memory(db, history="old") as mem:  # ... the old history is still embedded with its recipe
        assert mem.embedder.name == name
        mem.add_session([{"role": "user", "content": "Also a kiln class in Porto."}])
        stored = mem.history.embeddings
    with fm.Memory(":memory:", embedder=earlier) as twin:  # the same texts written with it from the start
        twin.add_session(SESSION)
        twin.add_session([{"role": "user", "content": "Also a kiln class in Porto."}])
        assert np.allclose(stored, twin.history.embeddings, atol=1e-5)
    # (the recipes' vectors are close, equal for some texts: the recorded names keep them apart, and a
    # history refuses another one)
    with fm.Memory(db, history="old", embedder=int8) as mem, pytest.raises(fm.InvalidInputError, match="another"):
        mem.render("the hotel?", 2048)


def cpuinfo(*flags: str) -> str:
    return "processor\t: 0\nflags\t\t: " + " ".join(flags) + "\n"


def test_the_default_precision_follows_the_processor() -> None:
    from flexamem.write.default_embed import auto_precision

    assert auto_precision(cpuinfo("fpu", "sse4_2", "avx")) == "fp32"  # no AVX2: int8 not measured faster
    assert auto_precision(cpuinfo("fpu", "avx", "avx2", "fma")) == "int8"
    assert auto_precision(cpuinfo("avx2", "avx512f", "avx512bw")) == "int8"
    assert auto_precision(cpuinfo("avx2", "avx512f", "avx512bw", "avx512_vnni")) == "int8"
    assert auto_precision(cpuinfo("avx2", "avx_vnni")) == "int8"
    assert auto_precision(cpuinfo("avx512_vnni", "amx_bf16", "amx_int8")) == "int8"
    assert auto_precision("") == "fp32"  # no flags line (not Linux): fp32
    assert auto_precision("processor\t: 0\nFeatures\t: fp asimd asimddp\n") == "fp32"  # Arm: not measured


def test_the_default_embedder_is_the_processors_and_fp32_is_one_setting_away(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from flexamem.write.default_embed import auto_precision
    from flexamem.write.onnx_embed import NAMES

    def name(**env: str) -> str:
        base = {k: v for k, v in os.environ.items() if k != "FLEXAMEM_EMBEDDER"}
        code = "from flexamem.write.default_embed import default_embedder; print(default_embedder().name)"
        out = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert name() == NAMES[auto_precision()]  # unset: this processor's choice
    assert name(FLEXAMEM_EMBEDDER="fp32") == "all-MiniLM-L6-v2"  # fp32 whatever the processor
    assert name(FLEXAMEM_EMBEDDER="onnx-int8") == "all-MiniLM-L6-v2-int8-v3"
