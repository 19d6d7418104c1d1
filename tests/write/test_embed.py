import json
from pathlib import Path

import numpy as np

from flexamem.write.default_embed import default_embedder
from flexamem.write.embed import Embedder

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "minilm_reference.json"


def test_matches_sentence_transformers_reference() -> None:
    ref = json.loads(FIXTURE.read_text())
    got = default_embedder().embed(ref["texts"])
    want = np.asarray(ref["vectors"], dtype=np.float32)
    assert got.shape == want.shape == (len(ref["texts"]), 384)
    assert np.abs(got - want).max() < 1e-6


def test_batched_equals_single_and_unit_norm() -> None:
    e = default_embedder()
    texts = ["a short one", "a much longer sentence about pottery classes in Lisbon on Thursday", "x"]
    batch = e.embed(texts)
    single = np.vstack([e.embed([t]) for t in texts])
    assert np.abs(batch - single).max() < 1e-6
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    assert e.embed([]).shape == (0, 384)
    assert isinstance(e, Embedder)


def test_similar_texts_are_closer() -> None:
    v = default_embedder().embed(
        ["I booked a flight to Lisbon", "My plane ticket to Portugal", "The bowl needs glazing"]
    )
    assert v[0] @ v[1] > v[0] @ v[2]


def test_onnx_and_numpy_forwards_give_the_same_vectors() -> None:
    from flexamem.write.embed import MiniLMEmbedder
    from flexamem.write.onnx_embed import OnnxMiniLMEmbedder

    texts = ["Visa ending 4417", "hi", "the parcel went to depot seven " * 30, "x" * 900, "Émile a réservé à Zürich."]
    a, b = MiniLMEmbedder().embed(texts), OnnxMiniLMEmbedder(threads=1).embed(texts)
    assert a.shape == b.shape == (5, 384)
    assert float(np.abs(a - b).max()) < 2e-6
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    assert OnnxMiniLMEmbedder().embed([]).shape == (0, 384)


def test_the_fused_graph_gives_the_op_for_op_vectors() -> None:
    """onnxruntime's fused kernels (the int8 recipe's graph) compute the same fp32 forward, padded
    batches (several lengths in one batch) and a text cut at the longest length included."""
    from flexamem.write.onnx_embed import OnnxMiniLMEmbedder, minilm_graph, session

    texts = ["hi", "Visa ending 4417", "the parcel went to depot seven " * 3, "x " * 600, "Émile à Zürich."]
    plain, fused = OnnxMiniLMEmbedder(threads=1, batch_size=4), OnnxMiniLMEmbedder(threads=1, batch_size=4)
    fused.session = session(minilm_graph(fused=True).SerializeToString(), threads=1)
    ops = {n.op_type for n in minilm_graph(fused=True).graph.node}
    assert {"Attention", "BiasGelu", "SkipLayerNormalization"} <= ops and "Erf" not in ops
    a, b = plain.embed(texts), fused.embed(texts)
    assert float(np.abs(a - b).max()) < 2e-6


def test_length_batches_bound_padding_and_keep_every_text() -> None:
    from flexamem.write.embed import length_batches

    lengths = [5, 100, 7, 98, 6, 40, 41, 8, 99, 42, 5, 5, 5]
    batches = length_batches(lengths, batch_size=4)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(1 <= len(b) <= 4 for b in batches)
    for b in batches:  # a batch never mixes a short text with a long one
        assert max(lengths[i] for i in b) <= min(lengths[i] for i in b) * 1.25 + 8
    assert length_batches([], 8) == []


def test_thread_count_comes_from_the_environment_or_the_runtime_default(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from flexamem.errors import FlexaMemError
    from flexamem.write.embed import MiniLMEmbedder, embed_threads

    monkeypatch.delenv("FLEXAMEM_THREADS", raising=False)
    assert embed_threads(2) == 2
    assert MiniLMEmbedder().threads == 1  # OpenBLAS threads spin: one unless told otherwise
    monkeypatch.setenv("FLEXAMEM_THREADS", "3")
    assert embed_threads(1) == 3
    assert MiniLMEmbedder().threads == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("FLEXAMEM_THREADS", bad)
        with pytest.raises(FlexaMemError, match="FLEXAMEM_THREADS"):
            embed_threads(1)


def test_int8_instructions_name_the_best_the_cpu_has() -> None:
    from flexamem.write.embed import INT8_INSTRUCTIONS, int8_instructions

    def cpuinfo(*flags: str) -> str:  # two cores, as /proc/cpuinfo lists them
        one = "processor\t: {}\nmodel name\t: X\nflags\t\t: fpu sse2 " + " ".join(flags) + "\n\n"
        return "".join(one.format(i) for i in range(2))

    assert int8_instructions(cpuinfo("avx2", "fma")) == "avx2"
    assert int8_instructions(cpuinfo("avx2", "avx512f", "avx512bw", "avx512_vnni")) == "avx512_vnni"
    assert int8_instructions(cpuinfo("avx2", "avx_vnni")) == "avx_vnni"
    assert int8_instructions(cpuinfo("sse4_2")) == "none"
    assert int8_instructions("") == "unknown"  # no flags line: not a Linux cpuinfo
    here = Path("/proc/cpuinfo")  # by default, this machine's, read from there
    assert int8_instructions() == (int8_instructions(here.read_text()) if here.exists() else "unknown")
    assert int8_instructions() in {*INT8_INSTRUCTIONS, "none", "unknown"}


class Counting:
    """The real default embedder, counting the texts it is asked to embed."""

    def __init__(self) -> None:
        self.inner = default_embedder()
        self.name, self.dim = self.inner.name, self.inner.dim
        self.texts: list[str] = []
        self.calls = 0

    def embed(self, texts: "list[str]") -> np.ndarray:
        self.texts += list(texts)
        self.calls += 1
        return self.inner.embed(texts)


def test_a_text_is_embedded_once_per_write_and_once_per_history() -> None:
    import flexamem as fm

    counting = Counting()
    twin = fm.Memory(":memory:")  # every text embedded, as before
    with fm.Memory(":memory:", embedder=counting) as mem:
        session = [
            {"role": "user", "content": "Thanks!"},
            {"role": "assistant", "content": "The parcel went to depot seven on Tuesday."},
            {"role": "user", "content": "Thanks!"},
        ]
        mem.add_session(session)
        twin.add_session(session)
        pieces = [p.text for p in mem.history.notes[0].pieces]
        assert pieces.count("user: Thanks!") == 2  # the same piece twice in one write ...
        assert counting.texts.count("user: Thanks!") == 1  # ... embedded once
        first = len(counting.texts)
        again = [{"role": "user", "content": "Thanks!"}, {"role": "assistant", "content": "Depot seven, noted."}]
        mem.add_session(again)  # its first turn's piece was embedded for this history already
        twin.add_session(again)
        new = counting.texts[first:]
        assert "user: Thanks!" in [p.text for p in mem.history.notes[1].pieces]
        assert "user: Thanks!" not in new  # embedded for this history before: not again
        assert "assistant: Depot seven, noted." in new
        # and the vectors are those a plain embedding gives
        for a, b in zip(mem.history.notes, twin.history.notes, strict=True):
            assert a.piece_vectors is not None and b.piece_vectors is not None
            assert np.abs(a.piece_vectors - b.piece_vectors).max() < 1e-5
            assert np.abs(a.embedding - b.embedding).max() < 1e-5
    twin.close()


def test_a_write_sends_its_units_and_pieces_texts_in_one_call() -> None:
    """A server embeds each call as one job of an embedding process: a write that made two calls (its
    units' texts, then its pieces') queued twice behind other writes."""
    import flexamem as fm

    counting = Counting()
    with fm.Memory(":memory:", embedder=counting) as mem:
        mem.add_session([{"speaker": "Ana", "text": "The ferry leaves at nine."}, {"speaker": "Bo", "text": "Pier 4."}])
        assert counting.calls == 1
        records = len(mem.history.notes)
        pieces = sum(len(n.pieces) for n in mem.history.notes)
        assert len(counting.texts) == records + pieces  # the one call held both kinds of text
        mem.add_session([{"speaker": "Ana", "text": f"Day {i}: rain in Porto."} for i in range(3)])
        assert counting.calls == 2


def test_the_vectors_do_not_depend_on_the_threads() -> None:
    """A server embeds with one thread per process and a Memory with every core: one history written by
    both must hold the vectors either would have made (int8 and fp32, short and long texts)."""
    from flexamem.write.onnx_embed import OnnxMiniLMEmbedder

    texts = ["hi", "Visa ending 4417", "the parcel went to depot seven " * 30, "Émile a réservé à Zürich.", "x " * 600]
    for precision in ("int8", "fp32"):
        one = OnnxMiniLMEmbedder(threads=1, precision=precision).embed(texts)
        for threads in (2, 3):
            assert np.array_equal(one, OnnxMiniLMEmbedder(threads=threads, precision=precision).embed(texts))
