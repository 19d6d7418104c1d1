"""The embeddings endpoint: vectors from a real local HTTP server serving this library's own MiniLM
(``flexamem.server.embeddings``), through :class:`EndpointEmbedder`, compared with the local embedder's;
retries against a real server answering 503 and a port nobody listens on yet; a second, tiny model
(words hashed into 64 numbers) served the same way to show that two models' vectors never mix."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import flexamem as fm
from flexamem.errors import EmbeddingEndpointError, ModelUnavailableError
from flexamem.server.embeddings import EmbeddingServer
from flexamem.write.default_embed import default_embedder
from flexamem.write.embed import Embedder
from flexamem.write.remote_embed import MIN_COSINE, EndpointEmbedder, endpoint_from_env, reference
from tests.servers import free_port

MINILM = "all-MiniLM-L6-v2"
SESSIONS = [
    [
        {
            "speaker": "Caroline",
            "text": "I went to the LGBTQ support group yesterday, it was so powerful.",
            "id": "D1:1",
        },
        {"speaker": "Melanie", "text": "That sounds great! I painted a sunrise over the lake last week.", "id": "D1:2"},
    ],
    [
        {
            "speaker": "Caroline",
            "text": "I'm researching adoption agencies; my flight is HAT023 from JFK.",
            "id": "D2:1",
        },
        {
            "speaker": "Melanie",
            "text": "Café Zürich — naïve façade, 東京, and a pottery class 🎉 on Friday.",
            "id": "D2:2",
        },
    ],
]
TEXTS = [t["text"] for s in SESSIONS for t in s] + ["a", "long " * 400, "tabs\tinside\nand lines"]


class WordHash:
    """A second, real model (tiny): each word hashed into one of 64 numbers, the counts L2-normalised."""

    name = "word-hash-64"
    dim = 64

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[i, hashlib.sha256(word.encode()).digest()[0] % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.asarray(out / np.maximum(norms, 1e-12), dtype=np.float32)


@pytest.fixture(scope="module")
def local() -> Embedder:
    return default_embedder()


@pytest.fixture(scope="module")
def minilm(local: Embedder) -> Iterator[EmbeddingServer]:
    with EmbeddingServer(local) as server:
        yield server


@pytest.fixture(scope="module")
def hashed() -> Iterator[EmbeddingServer]:
    with EmbeddingServer(WordHash()) as server:
        yield server


class Flaky:
    """A real HTTP server in front of another: answers its first ``failures`` POSTs 503 (with
    ``Retry-After: 0``), then passes each request on and the answer back."""

    def __init__(self, upstream: str, failures: int) -> None:
        self.upstream, self.failures, self.posts = upstream, failures, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.posts += 1
                if outer.posts <= outer.failures:
                    status, blob = 503, b'{"error": {"message": "loading the model"}}'
                else:
                    answer = httpx.post(outer.upstream + self.path.removeprefix("/v1"), content=body,
                                        headers={"Content-Type": "application/json"}, timeout=60)  # fmt: skip
                    status, blob = answer.status_code, answer.content
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(blob)))
                if status == 503:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(blob)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_the_endpoint_gives_the_local_vectors_in_batches(minilm: EmbeddingServer, local: Embedder) -> None:
    endpoint = EndpointEmbedder(minilm.url, MINILM, batch=3)
    assert endpoint.name == local.name == MINILM and endpoint.dim == 384
    before = len(minilm.batches)
    got, want = endpoint.embed(TEXTS), local.embed(TEXTS)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert float((got * want).sum(axis=1).min()) >= 0.99999 and float(np.abs(got - want).max()) < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    # the probes first (8 texts, one request), then 7 texts 3 a request: several texts per request
    assert minilm.batches[before:] == [8, 3, 3, 1]
    assert endpoint.worst_cosine is not None and endpoint.worst_cosine >= MIN_COSINE
    assert endpoint.embed([]).shape == (0, 384) and len(minilm.batches) == before + 4  # nothing sent
    one = endpoint.embed(["hello"])  # checked once: later calls send only their texts
    assert minilm.batches[-1] == 1 and np.allclose(one, local.embed(["hello"]), atol=1e-5)


def test_a_memory_written_through_the_endpoint_renders_as_one_written_locally(
    minilm: EmbeddingServer, tmp_path: Path
) -> None:
    endpoint = EndpointEmbedder(minilm.url, MINILM)
    with fm.Memory(tmp_path / "far.db", embedder=endpoint) as far, fm.Memory(tmp_path / "near.db") as near:
        for i, turns in enumerate(SESSIONS):
            far.add_session(turns, session_id=f"s{i}", date="8 May 2023")
            near.add_session(turns, session_id=f"s{i}", date="8 May 2023")
        assert np.allclose(far.history.embeddings, near.history.embeddings, atol=1e-5)
        for question in ("Where did Caroline go yesterday?", "What is the flight number?"):
            for budget in (60, 200, 4096):
                a, b = far.render(question, budget), near.render(question, budget)
                assert a.text == b.text and a.tokens == b.tokens
        assert [r.unit_id for r in far.search("pottery class", limit=3)] == [
            r.unit_id for r in near.search("pottery class", limit=3)
        ]
    # both record the model, not how its vectors were made: each goes on with the other's way
    with fm.Memory(tmp_path / "near.db", embedder=EndpointEmbedder(minilm.url, MINILM)) as near:  # local, then far
        near.add_session([{"speaker": "Ana", "text": "The kiln class moved to Porto."}])
        assert "Porto" in near.render("Where is the kiln class?", 4096).text
    with fm.Memory(tmp_path / "far.db") as far:  # written through the endpoint, continued locally
        assert far.embedder.name == MINILM and not isinstance(far.embedder, EndpointEmbedder)
        far.add_session([{"speaker": "Ana", "text": "The kiln class moved to Porto."}])


def test_transient_failures_are_retried_then_given_up_clearly(minilm: EmbeddingServer, local: Embedder) -> None:
    flaky = Flaky(minilm.url, failures=2)
    try:
        endpoint = EndpointEmbedder(flaky.url, MINILM)
        got = endpoint.embed(["The support group met on Tuesday."])  # 503, 503, then the probes, then the text
        assert flaky.posts == 4
        assert np.allclose(got, local.embed(["The support group met on Tuesday."]), atol=1e-5)
    finally:
        flaky.close()

    port = free_port()  # nobody listens yet: connection refused until the server starts a second later
    late = EmbeddingServer(local, port=port)
    starter = threading.Timer(1.0, late.start)
    started = time.monotonic()
    starter.start()
    try:
        got = EndpointEmbedder(f"http://127.0.0.1:{port}/v1", MINILM).embed(["late but there"])
        assert time.monotonic() - started >= 1.0
        assert np.allclose(got, local.embed(["late but there"]), atol=1e-5)
    finally:
        starter.join()
        late.close()

    started = time.monotonic()
    gone = EndpointEmbedder(f"http://127.0.0.1:{free_port()}/v1", MINILM, retry_for=1.0)
    with pytest.raises(EmbeddingEndpointError, match=r"failed after \d+ attempts .*ConnectError"):
        gone.embed(["nobody there"])
    assert time.monotonic() - started < 10


def test_refusals_and_wrong_answers_are_clear_errors_at_once(
    minilm: EmbeddingServer, hashed: EmbeddingServer, local: Embedder
) -> None:
    started = time.monotonic()
    with pytest.raises(EmbeddingEndpointError, match=r"HTTP 404.*'text-embedding-3-small' is not served here"):
        EndpointEmbedder(minilm.url, "text-embedding-3-small", dim=384).embed(["x"])
    assert time.monotonic() - started < 5  # a 4xx is not retried
    # another model served under MiniLM's name: its vectors are not 384 numbers
    liar = EmbeddingServer(WordHash(), model=MINILM)
    with liar, pytest.raises(EmbeddingEndpointError, match="vectors of 64 numbers, not 384"):
        EndpointEmbedder(liar.url, MINILM).embed(["x"])
    with pytest.raises(EmbeddingEndpointError, match="vectors of 64 numbers, not 128"):
        EndpointEmbedder(hashed.url, "word-hash-64", dim=128).embed(["x"])
    # MiniLM with int8 weights served as MiniLM: the right size, not the same vectors
    from flexamem.write.onnx_embed import OnnxMiniLMEmbedder

    with EmbeddingServer(OnnxMiniLMEmbedder(threads=1, precision="int8"), model=MINILM) as int8:
        endpoint = EndpointEmbedder(int8.url, MINILM)
        with pytest.raises(EmbeddingEndpointError, match=r"does not give the vectors of 'all-MiniLM-L6-v2'.*cosine"):
            endpoint.embed(["x"])
        assert endpoint.worst_cosine is not None and 0.9 < endpoint.worst_cosine < MIN_COSINE
    with pytest.raises(fm.InvalidInputError, match="int8 recipes"):
        EndpointEmbedder(minilm.url, "m", name="all-MiniLM-L6-v2-int8-v3")
    with pytest.raises(fm.InvalidInputError, match="http"):
        EndpointEmbedder("gpu-box:8081", MINILM)
    with EmbeddingServer(local, key="s3cret") as locked:
        with pytest.raises(EmbeddingEndpointError, match="HTTP 401"):
            EndpointEmbedder(locked.url, MINILM).embed(["x"])
        keyed = EndpointEmbedder(locked.url, MINILM, key="s3cret")
        assert "s3cret" not in repr(keyed) and "key=<set>" in repr(keyed)
        assert np.allclose(keyed.embed(["x"]), local.embed(["x"]), atol=1e-5)


def test_two_models_never_mix(hashed: EmbeddingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "m.db"
    other = EndpointEmbedder(hashed.url, "word-hash-64")  # its size asked once
    assert other.dim == 64 and other.name == "word-hash-64"
    with fm.Memory(db, history="minilm") as mem:
        mem.add_session(SESSIONS[0])
    with fm.Memory(db, history="minilm", embedder=other) as mem:
        with pytest.raises(
            fm.InvalidInputError, match="written with the embedder 'all-MiniLM-L6-v2', not 'word-hash-64'"
        ):
            mem.add_session(SESSIONS[1])
        with pytest.raises(fm.InvalidInputError, match="another model"):
            mem.render("the support group?", 2048)
    with fm.Memory(db, history="hashed", embedder=other) as mem:
        mem.add_session(SESSIONS[1])
        assert mem.history.embeddings.shape == (1, 64)
    no_endpoint = fm.Memory(db, history="hashed")  # none configured: refused, saying how to set one
    with no_endpoint, pytest.raises(ModelUnavailableError, match="FLEXAMEM_EMBEDDER=endpoint"):
        no_endpoint.render("the flight?", 2048)
    minilm_given = fm.Memory(db, history="hashed", embedder=default_embedder())
    with minilm_given, pytest.raises(fm.InvalidInputError, match="written with the embedder 'word-hash-64'"):
        minilm_given.render("the flight?", 2048)
    # the environment's endpoint: the history written with its model takes it, the MiniLM one keeps MiniLM
    monkeypatch.setenv("FLEXAMEM_EMBEDDER", "endpoint")
    monkeypatch.setenv("FLEXAMEM_EMBEDDINGS_URL", hashed.url)
    monkeypatch.setenv("FLEXAMEM_EMBEDDINGS_MODEL", "word-hash-64")
    with fm.Memory(db, history="hashed") as mem:
        assert isinstance(mem.embedder, EndpointEmbedder) and "HAT023" in mem.render("flight HAT023", 4096).text
    with fm.Memory(db, history="minilm") as mem:
        assert mem.embedder.name == MINILM and not isinstance(mem.embedder, EndpointEmbedder)
        mem.add_session(SESSIONS[1])
    with fm.Memory(db, history="new") as mem:  # a new history takes the endpoint
        mem.add_session(SESSIONS[0])
        assert mem.embedder.name == "word-hash-64"


def test_the_environment_names_the_endpoint(minilm: EmbeddingServer) -> None:
    env = {"FLEXAMEM_EMBEDDINGS_URL": minilm.url, "FLEXAMEM_EMBEDDINGS_MODEL": f"sentence-transformers/{MINILM}"}
    endpoint = endpoint_from_env({**env, "FLEXAMEM_EMBEDDINGS_NAME": MINILM, "FLEXAMEM_EMBEDDINGS_BATCH": "16"})
    assert endpoint.model == f"sentence-transformers/{MINILM}" and endpoint.name == MINILM and endpoint.batch == 16
    assert endpoint.embed(["x"]).shape == (1, 384)  # the server takes the organisation-prefixed name
    with pytest.raises(ModelUnavailableError, match="FLEXAMEM_EMBEDDINGS_URL"):
        endpoint_from_env({"FLEXAMEM_EMBEDDINGS_MODEL": MINILM})
    with pytest.raises(ModelUnavailableError, match="BATCH must be a number"):
        endpoint_from_env({**env, "FLEXAMEM_EMBEDDINGS_BATCH": "many"})
    ref = reference(MINILM)
    assert ref is not None and ref.dim == 384 and len(ref.texts) == 8


def test_the_shipped_probes_are_the_local_models_vectors(local: Embedder) -> None:
    ref = reference(MINILM)
    assert ref is not None
    assert float((local.embed(list(ref.texts)) * ref.vectors).sum(axis=1).min()) > 0.999999


def test_the_server_answers_the_protocol(minilm: EmbeddingServer, local: Embedder) -> None:
    one = httpx.post(minilm.url + "/embeddings", json={"model": MINILM, "input": "hello"}, timeout=30).json()
    assert one["object"] == "list" and one["model"] == MINILM and one["usage"]["prompt_tokens"] == 3
    assert one["data"][0]["index"] == 0 and len(one["data"][0]["embedding"]) == 384
    b64 = httpx.post(
        minilm.url + "/embeddings", json={"input": ["hello"], "encoding_format": "base64"}, timeout=30
    ).json()
    import base64

    decoded = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), dtype="<f4")
    assert np.array_equal(decoded, np.asarray(one["data"][0]["embedding"], dtype=np.float32))
    for body, status in (({"input": []}, 400), ({"input": [1, 2]}, 400), ({"input": "x", "model": "gpt"}, 404)):
        answer = httpx.post(minilm.url + "/embeddings", json=body, timeout=30)
        assert answer.status_code == status and answer.json()["error"]["message"]
    assert httpx.post(minilm.url + "/embeddings", content=b"{no", timeout=30).status_code == 400
    assert httpx.get(minilm.url + "/models", timeout=30).json()["data"][0]["id"] == MINILM
    health = httpx.get(minilm.url.removesuffix("/v1") + "/health", timeout=30).json()
    assert health == {"status": "ok", "model": MINILM}


@pytest.mark.slow
def test_flexamem_embed_serve_serves_the_local_vectors(local: Embedder) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "flexamem", "embed-serve", "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "all-MiniLM-L6-v2" in line and f"http://127.0.0.1:{port}/v1/embeddings" in line
        got = EndpointEmbedder(f"http://127.0.0.1:{port}/v1", MINILM).embed(TEXTS)
        assert float((got * local.embed(TEXTS)).sum(axis=1).min()) >= 0.99999
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_flexamem_serve_embeds_through_the_endpoint(minilm: EmbeddingServer, tmp_path: Path) -> None:
    from flexamem.server.keys import KeyFile
    from tests.servers import ServerProcess

    keys = tmp_path / "keys.json"
    key = KeyFile(str(keys)).add_key("acme")
    args = ["--embeddings-url", minilm.url, "--embeddings-model", MINILM]
    server = ServerProcess(str(tmp_path / "s.db"), keys, tmp_path / "serve.log", workers=1, args=args).start()
    try:
        before = minilm.texts
        remote = fm.Memory(server.url, key=key, history="trip")
        for i, turns in enumerate(SESSIONS):
            remote.add_session(turns, session_id=f"s{i}", date="8 May 2023")
        assert minilm.texts > before  # the worker's writes were embedded by the endpoint ...
        assert server.embedders() == []  # ... and no embedding process was started for them
        with fm.Memory(tmp_path / "near.db") as near:
            for i, turns in enumerate(SESSIONS):
                near.add_session(turns, session_id=f"s{i}", date="8 May 2023")
            for question in ("Where did Caroline go yesterday?", "What is the flight number?"):
                assert remote.render(question, 200).text == near.render(question, 200).text
    finally:
        server.stop()
    with fm.Memory(tmp_path / "s.db", history="acme/trip") as stored:
        assert stored.core.recorded_embedder() == MINILM
