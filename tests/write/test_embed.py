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
