import json
from pathlib import Path

import numpy as np

from flexamem.write.embed import Embedder, default_embedder

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
