"""The int8 MiniLM: made from the shipped weights, cached with a checksum, close to fp32, named apart."""

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from flexamem.errors import ModelUnavailableError
from flexamem.write import default_embed
from flexamem.write.embed import batched_embed
from flexamem.write.onnx_embed import OnnxMiniLMEmbedder

TEXTS = [
    "I booked a flight to Lisbon for the pottery workshop",
    "My plane ticket to Portugal is for Thursday",
    "The bowl needs glazing before the kiln firing",
    "reservation OBUT9V: IAH -> DEN, economy, 1 bag",
    "hi",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def int8(cache: Path) -> OnnxMiniLMEmbedder:
    old = os.environ.get("FLEXAMEM_CACHE")
    os.environ["FLEXAMEM_CACHE"] = str(cache)
    try:
        return OnnxMiniLMEmbedder(threads=1, precision="int8")
    finally:
        os.environ.pop("FLEXAMEM_CACHE") if old is None else os.environ.__setitem__("FLEXAMEM_CACHE", old)


def test_int8_vectors_are_close_to_fp32_and_keep_the_neighbours(int8: OnnxMiniLMEmbedder) -> None:
    fp32 = OnnxMiniLMEmbedder(threads=1)
    a, b = int8.embed(TEXTS), fp32.embed(TEXTS)
    assert a.shape == b.shape == (len(TEXTS), 384) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    cosine = (a * b).sum(axis=1)
    assert cosine.min() > 0.97 and not np.allclose(a, b, atol=1e-6)  # close, not the same model's vectors
    assert np.array_equal(np.argsort(-(a @ a[0]))[:3], np.argsort(-(b @ b[0]))[:3])
    assert (int8.name, fp32.name) == ("all-MiniLM-L6-v2-int8-v3", "all-MiniLM-L6-v2")
    assert int8.embed([]).shape == (0, 384)


def test_an_int8_vector_depends_on_its_text_only(int8: OnnxMiniLMEmbedder) -> None:
    """One activation scale per forward: int8 embeds each text alone, so a text gets the same vector
    whichever texts share its call (in one forward of several, it would not)."""
    together = int8.embed(TEXTS)
    alone = np.vstack([int8.embed([t]) for t in TEXTS])
    with_others = int8.embed([TEXTS[2], "a much longer text about kilns " * 6, TEXTS[0]])
    assert int8.batch_size == 1
    assert np.abs(together - alone).max() < 1e-6
    assert np.abs(with_others[[2, 0]] - alone[[0, 2]]).max() < 1e-6

    def forward(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:  # the same model, two texts a forward
        out: np.ndarray = int8.session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]
        return out

    batched = batched_embed(int8.tokenizer, TEXTS[:2], int8.dim, 2, threading.Lock(), forward)
    assert np.abs(batched - alone[:2]).max() > 1e-3
    with pytest.raises(ValueError, match="batch_size must be 1 for int8"):
        OnnxMiniLMEmbedder(threads=1, precision="int8", batch_size=8)


def test_the_made_model_is_cached_with_its_checksum_and_a_damaged_copy_is_made_again(
    int8: OnnxMiniLMEmbedder, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEXAMEM_CACHE", str(cache))
    (model,) = cache.glob("minilm-int8-*.onnx")
    digest = model.with_suffix(".sha256").read_text().strip()
    import hashlib

    assert hashlib.sha256(model.read_bytes()).hexdigest() == digest
    want = int8.embed(TEXTS)
    before = model.stat().st_mtime_ns
    assert np.array_equal(OnnxMiniLMEmbedder(threads=1, precision="int8").embed(TEXTS), want)
    assert model.stat().st_mtime_ns == before  # read from the cache, not made again
    blob = bytearray(model.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # one flipped byte in a weight
    model.write_bytes(bytes(blob))
    again = OnnxMiniLMEmbedder(threads=1, precision="int8")
    assert np.array_equal(again.embed(TEXTS), want)  # the damaged copy was not used
    assert hashlib.sha256(model.read_bytes()).hexdigest() == digest  # and was made again


def test_a_cache_folder_that_cannot_be_written_still_gives_the_model(
    int8: OnnxMiniLMEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("FLEXAMEM_CACHE", str(blocked / "cache"))
    e = OnnxMiniLMEmbedder(threads=1, precision="int8")
    assert np.array_equal(e.embed(TEXTS), int8.embed(TEXTS))


def test_precision_and_embedder_choice_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="precision"):
        OnnxMiniLMEmbedder(precision="int4")
    monkeypatch.setenv("FLEXAMEM_EMBEDDER", "onnx-int4")
    with pytest.raises(ModelUnavailableError, match="onnx-int8"):
        default_embed.default_embedder()


def test_the_library_int8_has_seven_bit_weights_whose_products_are_exact_on_this_cpu() -> None:
    """Symmetric weights within [-64, 64]: two products of a uint8 activation and a weight (at most
    2 * 255 * 64 = 32,640) fit the int16 sum of AVX2's multiply-add, so every CPU computes the same
    integer products. The earlier recipe's 8-bit
    weights do not fit, and a CPU without VNNI gets some of their products wrong."""
    import onnx
    from onnx import numpy_helper

    from flexamem.write.embed import int8_instructions
    from flexamem.write.onnx_embed import precision_model
    from flexamem.write.quantize import inexact_products

    def int8_weights(blob: bytes) -> list[np.ndarray]:
        model = onnx.load_from_string(blob)
        return [numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT8]

    library, earlier = precision_model("int8"), precision_model("int8-v2")
    seven, eight = int8_weights(library), int8_weights(earlier)
    assert len(seven) == len(eight) > 0
    assert all(w.min() >= -64 and w.max() <= 64 for w in seven)
    assert max(int(np.abs(w.astype(np.int16)).max()) for w in eight) > 64
    assert inexact_products(library) == 0
    if int8_instructions() in ("avx2", "avx512bw"):  # 8-bit products summed in 16 bits: they saturate
        assert (inexact_products(earlier) or 0) > 0
    assert inexact_products(precision_model("fp32")) is None  # no int8 weights: nothing to check
