"""The HTTP server under load, started as a user would (prints a table; figures, not a test).

Writes H histories of S LoCoMo dev sessions each (before the clock starts), starts ``flexamem serve
--workers W`` on 127.0.0.1, and runs C clients on loopback for D seconds per phase: renders only, then
a share of the requests writing a new session. Prints throughput, p50 / p95 / p99 latency, status
counts, and the acked-vs-stored check: every write the server acknowledged must be in the store
afterwards (read back through the API).

What a write sends (``--writes``): ``fresh`` (the default) a session no history and no earlier write of
the run holds, so the server embeds all of it, as it would a user's new words: LongMemEval dev sessions
(deduplicated, cut at a turn boundary near LoCoMo's mean session length, 2,800 characters); ``locomo``
one of the 99 LoCoMo dev sessions under a fresh id, as issue 52 first measured: most of them are already
in the history or were embedded for an earlier write, so a write often embeds little.

Before the server starts, the floors are measured in this process with the default embedder, on the
threads the server embeds with (``FLEXAMEM_THREADS``, else the server's 1; a ``--serve-args
"--embed-threads N"`` is not followed here): a write's own embedding work (the texts ``add_session``
embeds, timed alone) and a warm render (its query's forward plus the library's render at the budget),
so each latency can be read as a ratio to its floor.

    python benchmarks/server_load.py [--store sqlite,postgres] [--clients 16] [--duration 30] [--writes fresh]
        [--think 0]

``--think S``: each client pauses after an answer (exponential, mean S seconds), as people and agents
do, so the offered load is below what the server can do (0, the default and issue 52's load: each client
sends again at once, so the machine is always saturated and writes queue behind renders or the reverse).

After each phase it prints (to stderr) how busy the machine's cores were over the phase (every process,
from ``/proc/stat``), the load generator's own share of that, and how busy they were in the second
before each write refused with 503: a refusal while the cores had time to spare would be a write
turned away with capacity left.

``--store postgres`` starts the local PostgreSQL of the test suite (scripts/start_postgres.sh) unless
``FLEXAMEM_TEST_POSTGRES`` names one. The load generator runs on the same machine as the server, so
its own CPU is taken from the server's cores: it sends with aiohttp (``--client``, :func:`poster`; until
issue 52's session 41 it sent with httpx, which takes 3-4 times as much of the generator's CPU a request).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import httpx

import flexamem as fm
from flexamem.server import KeyFile
from flexamem.server.settings import SERVER_EMBED_THREADS
from flexamem_bench.conversation_data import default_path
from flexamem_bench.datasets import locomo_histories

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def postgres_url() -> str:
    url = os.environ.get("FLEXAMEM_TEST_POSTGRES")
    if url:
        return url
    out = subprocess.run(["bash", str(ROOT / "scripts/start_postgres.sh")], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


class Server:
    """``flexamem serve`` in a child process, as a user starts it."""

    def __init__(self, db: str, keys: Path, workers: int, extra: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "flexamem", "serve", "--db", db, "--keys", str(keys)]
        cmd += ["--port", str(self.port), "--workers", str(workers), *extra]
        self.log = tempfile.NamedTemporaryFile("w+", prefix="flexamem-serve-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)  # a pipe would fill and block

    def wait(self, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {Path(self.log.name).read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError("the server did not answer /health")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Answer(NamedTuple):
    """What the load generator keeps of an answer (its body is read and dropped)."""

    status_code: int
    retry_after: str | None


TRANSPORT_ERRORS = (httpx.HTTPError, aiohttp.ClientError, asyncio.TimeoutError)
CLIENTS = ("aiohttp", "httpx")


@asynccontextmanager
async def poster(
    kind: str, url: str, headers: dict[str, str], connections: int
) -> AsyncIterator[Callable[[str, dict[str, Any]], Awaitable[Answer]]]:
    """``post(path, body)`` over one pool of kept-alive connections, by aiohttp (the default: about 0.9
    ms of the generator's CPU a render request, measured on this machine) or httpx (3.0-3.4 ms): the
    generator runs on the server's machine, so its CPU is taken from the server's cores."""
    if kind == "httpx":
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120, limits=limits) as client:

            async def post_httpx(path: str, body: dict[str, Any]) -> Answer:
                r = await client.post(path, json=body)
                return Answer(r.status_code, r.headers.get("retry-after"))

            yield post_httpx
        return
    connector = aiohttp.TCPConnector(limit=connections)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(url, headers=headers, connector=connector, timeout=timeout) as session:

        async def post_aiohttp(path: str, body: dict[str, Any]) -> Answer:
            async with session.post(path, json=body) as r:
                await r.read()
                return Answer(r.status, r.headers.get("Retry-After"))

        yield post_aiohttp


async def load(
    url: str,
    key: str,
    names: list[str],
    sessions: list[list[dict[str, str]]],
    questions: list[str],
    *,
    clients: int,
    duration: float,
    write_share: float,
    budget: int,
    seed: int,
    retry: bool = False,
    fresh: list[list[dict[str, str]]] | None = None,
    think: float = 0.0,
    client_kind: str = "aiohttp",
) -> dict[str, Any]:
    """C clients, each sending one request after the other for ``duration`` seconds. A write refused
    with 503 and ``Retry-After`` is sent again after it (at most 2 s, as the one-API client does; by a
    task of its own, so the offered load of renders does not fall) when ``retry`` is set, until 30 s
    past the phase; each acknowledged write's latency is its acknowledged request's, and the time from
    its first attempt is kept beside it. ``fresh``: each write takes the next session of this list
    (taken off it) instead of a random one of ``sessions``. ``think``: a client's mean pause after an
    answer, in seconds (exponential; 0: none, each client sends as fast as it is answered).
    ``client_kind``: the HTTP client the generator sends with (:func:`poster`)."""
    rng = random.Random(seed)
    renders: list[float] = []
    writes: list[float] = []
    first_to_ack: list[float] = []
    statuses: Counter[int | str] = Counter()
    acked: list[tuple[str, str]] = []
    refused_at: list[float] = []  # perf_counter times of the writes answered 503
    headers = {"Authorization": f"Bearer {key}"}
    async with poster(client_kind, url, headers, connections=clients + 64) as post:  # + the retries
        end = time.perf_counter() + duration
        retries: list[asyncio.Task[None]] = []

        async def write(history: str, body: dict[str, Any], start: float) -> Answer:
            sent = time.perf_counter()
            r = await post(f"/v1/histories/{history}/sessions", body)
            if r.status_code == 200:
                writes.append(time.perf_counter() - sent)  # the acknowledged request's own wait
                first_to_ack.append(time.perf_counter() - start)
                acked.append((history, body["session_id"]))
            elif r.status_code == 503:
                refused_at.append(time.perf_counter())
            return r

        async def write_again(history: str, body: dict[str, Any], start: float, r: Answer) -> None:
            while r.status_code == 503 and r.retry_after is not None and time.perf_counter() < end + 30:
                await asyncio.sleep(min(float(r.retry_after), 2.0))
                try:
                    r = await write(history, body, start)
                except TRANSPORT_ERRORS as exc:
                    statuses[f"{type(exc).__name__} (retry)"] += 1
                    return
                statuses[f"{r.status_code} (retry)"] += 1
            if r.status_code != 200:
                statuses["given up"] += 1

        async def one_client() -> None:
            while time.perf_counter() < end:
                history = rng.choice(names)
                start = time.perf_counter()
                try:
                    if rng.random() < write_share:
                        sid = "w" + uuid.uuid4().hex[:12]
                        turns = fresh.pop() if fresh else rng.choice(sessions)
                        body = {"turns": turns, "session_id": sid}
                        r = await write(history, body, start)
                        if r.status_code == 503 and retry and r.retry_after is not None:
                            # refused (busy): sent again after Retry-After, as the one-API client does, by a
                            # task of its own, so that this client's next requests go on as before
                            retries.append(asyncio.create_task(write_again(history, body, start, r)))
                    else:
                        query = {"query": rng.choice(questions), "budget": budget}
                        r = await post(f"/v1/histories/{history}/render", query)
                        if r.status_code == 200:
                            renders.append(time.perf_counter() - start)
                    status: int | str = r.status_code
                except TRANSPORT_ERRORS as exc:  # a timeout or a dropped connection is counted, not fatal
                    status = type(exc).__name__
                statuses[status] += 1
                if think > 0:
                    await asyncio.sleep(min(rng.expovariate(1 / think), end - time.perf_counter()))

        began = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        elapsed = time.perf_counter() - began  # the rates' time: the refused writes' retries may go on after it
        await asyncio.gather(*retries)
        write_seconds = time.perf_counter() - began  # acknowledgements may come until the last retry
    return {
        "renders": renders, "writes": writes, "first_to_ack": first_to_ack, "statuses": statuses, "acked": acked,
        "seconds": elapsed, "write_seconds": write_seconds, "refused_at": refused_at,
    }  # fmt: skip


def fresh_sessions(path: Path, chars: int = 2800) -> list[list[dict[str, str]]]:
    """Distinct LongMemEval sessions, each cut after the turn that passes ``chars`` characters."""
    seen: set[str] = set()
    out: list[list[dict[str, str]]] = []
    for item in json.loads(path.read_text()):
        for session in item["haystack_sessions"]:
            turns, size = [], 0
            for turn in session:
                turns.append({"speaker": turn["role"], "text": turn["content"]})
                size += len(turn["content"])
                if size >= chars:
                    break
            key = json.dumps(turns)
            if turns and key not in seen:
                seen.add(key)
                out.append(turns)
    random.Random(7).shuffle(out)
    return out


class Counting:
    """The default embedder, timed: the floor of a write is the time its own texts take to embed."""

    def __init__(self) -> None:
        from flexamem.write.default_embed import default_embedder

        self.inner = default_embedder()
        self.name, self.dim, self.seconds = self.inner.name, self.inner.dim, 0.0

    def embed(self, texts: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - start


def floors(
    history: list[list[dict[str, str]]], writes: list[list[dict[str, str]]], questions: list[str], budget: int
) -> tuple[float, float]:
    """Median ms of a write's own embedding work (``writes`` added one by one after ``history``) and of a
    warm render with its query embedded, in this process, one at a time."""  # fmt: skip
    counting = Counting()
    mem = fm.Memory(":memory:", embedder=counting)
    mem.add_sessions([{"turns": t, "session_id": f"s{k}"} for k, t in enumerate(history)])
    embed_ms = []
    for k, turns in enumerate(writes):
        counting.seconds = 0.0
        mem.add_session(turns, session_id=f"w{k}")
        embed_ms.append(1000 * counting.seconds)
    mem.render(questions[0], budget)
    render_ms = []
    for q in questions[1:]:
        start = time.perf_counter()
        mem.render(q, budget)
        render_ms.append(1000 * (time.perf_counter() - start))
    return percentile(embed_ms, 0.5), percentile(render_ms, 0.5)


def stored_sessions(url: str, key: str, history: str) -> set[str]:
    r = httpx.get(f"{url}/v1/histories/{history}/notes", headers={"Authorization": f"Bearer {key}"}, timeout=60)
    r.raise_for_status()
    return {n["session_id"] for n in r.json()}


def fm_embedder() -> str:
    from flexamem.write.default_embed import default_embedder

    return default_embedder().name


class CpuSampler:
    """The machine's CPU use, sampled from ``/proc/stat`` every ``interval`` seconds by a thread: how busy
    all cores were (every process, the load generator's included) over any span of the run."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.samples: list[tuple[float, float, float, float]] = []  # time, busy and all jiffies, own CPU s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _read() -> tuple[float, float]:
        with open("/proc/stat") as f:
            values = [float(v) for v in f.readline().split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0.0)  # idle and iowait
        return sum(values) - idle, sum(values)

    def _run(self) -> None:
        while not self._stop.is_set():
            own = os.times()
            self.samples.append((time.perf_counter(), *self._read(), own.user + own.system))
            self._stop.wait(self.interval)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def busy(self, start: float, end: float) -> float | None:
        """The share of every core's time spent busy between ``start`` and ``end`` (the nearest samples)."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2 or inside[-1][2] == inside[0][2]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][2] - inside[0][2])

    def own_share(self) -> float | None:
        """This process's (the load generator's) share of every core's time over the run."""
        if len(self.samples) < 2:
            return None
        (t0, _, _, c0), (t1, _, _, c1) = self.samples[0], self.samples[-1]
        cores = os.cpu_count() or 1
        return (c1 - c0) / ((t1 - t0) * cores) if t1 > t0 else None


def refusals_line(store: str, result: dict[str, Any], cpu: CpuSampler) -> str:
    """How busy the machine was in the second before each refused write, beside the whole phase."""
    shares = [b for t in result["refused_at"] if (b := cpu.busy(t - 1.0, t)) is not None]
    phase = cpu.busy(cpu.samples[0][0], cpu.samples[-1][0]) if cpu.samples else None
    own = cpu.own_share()
    text = f"# {store}: CPU busy over the phase {phase:.0%}" if phase is not None else f"# {store}: CPU not sampled"
    text += f" (the load generator itself: {own:.0%} of the cores)" if own is not None and phase is not None else ""
    if shares:
        shares.sort()
        text += (f"; {len(shares)} writes refused, CPU busy in the second before each: min {shares[0]:.0%}, "
                 f"median {shares[len(shares) // 2]:.0%}")  # fmt: skip
    return text


def run_store(store: str, args: argparse.Namespace, work: Path) -> list[str]:
    db = str(work / "load.db") if store == "sqlite" else postgres_url()
    keys = work / "keys.json"
    tenant = "load" + uuid.uuid4().hex[:6]  # a fresh tenant: a shared PostgreSQL keeps other runs apart
    key = KeyFile(str(keys)).add_key(tenant)
    data = locomo_histories(args.data)
    sessions = [[{"speaker": t["speaker"], "text": t["text"]} for t in s.turns] for h in data for s in h.sessions]
    questions = [q.question for h in data for q in h.questions]
    names = [f"h{i}" for i in range(args.histories)]
    pool = fresh_sessions(Path(args.fresh_data)) if args.writes == "fresh" else []
    if pool:
        write_ms, render_ms = floors(sessions[: args.sessions], pool[-20:], questions[:41], args.budget)
        del pool[-20:]  # timed in this process: never sent to the server
    else:
        write_ms, render_ms = floors(sessions[: args.sessions], sessions[args.sessions : args.sessions + 20],
                                     questions[:41], args.budget)  # fmt: skip
    print(f"# {store}: floors in this process ({fm_embedder()}): a write's own embedding work p50 {write_ms:.0f} ms, "
          f"a warm render p50 {render_ms:.1f} ms; writes: {args.writes}"
          + (f" ({len(pool)} sessions in the pool)" if pool else ""), file=sys.stderr)  # fmt: skip
    start = time.perf_counter()
    for i, name in enumerate(names):  # the histories, written before the clock starts
        mem = fm.Memory(db, history=f"{tenant}/{name}")
        picked = random.Random(i).sample(sessions, args.sessions)
        mem.add_sessions([{"turns": turns, "session_id": f"s{k}"} for k, turns in enumerate(picked)])
        mem.close()
    print(f"# {store}: {args.histories} histories x {args.sessions} sessions written in "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr)  # fmt: skip
    server = Server(db, keys, args.workers, args.serve_args.split())
    rows: list[str] = []
    try:
        server.wait()
        asyncio.run(
            load(server.url, key, names, sessions, questions, clients=args.clients, duration=args.warmup,
                 write_share=0.0, budget=args.budget, seed=99, client_kind=args.client)
        )  # fmt: skip  # every worker opens every history and loads its models: not measured
        for phase, share in (("renders only", 0.0), (f"{args.write_share:.0%} session writes", args.write_share)):
            with CpuSampler() as cpu:
                result = asyncio.run(
                    load(
                        server.url, key, names, sessions, questions, clients=args.clients, duration=args.duration,
                        write_share=share, budget=args.budget, seed=len(rows), retry=args.retry_writes,
                        fresh=pool if args.writes == "fresh" else None, think=args.think, client_kind=args.client,
                    )
                )  # fmt: skip
            print(refusals_line(store, result, cpu), file=sys.stderr, flush=True)
            lost = 0
            by_history: dict[str, set[str]] = {}
            for history, sid in result["acked"]:
                if history not in by_history:
                    by_history[history] = stored_sessions(server.url, key, history)
                lost += sid not in by_history[history]
            s, r, w = result["seconds"], result["renders"], result["writes"]
            ws = result["write_seconds"]
            ms = [1000 * x for x in r]
            wms = [1000 * x for x in w]
            fms = [1000 * x for x in result["first_to_ack"]]
            rows.append(
                f"| {store} | {phase} | {len(r) / s:.0f} | {percentile(ms, 0.5):.0f} / {percentile(ms, 0.95):.0f} / "
                f"{percentile(ms, 0.99):.0f} ms | "
                + (
                    f"{len(w) / ws:.1f} | {percentile(wms, 0.5):.0f} / {percentile(wms, 0.99):.0f} ms | "
                    f"{percentile(fms, 0.5):.0f} / {percentile(fms, 0.99):.0f} ms"
                    if w
                    else "- | - | -"
                )
                + f" | {json.dumps({str(k): v for k, v in result['statuses'].items()}, sort_keys=True)} | "
                + f"{len(result['acked'])} / {lost} |"
            )
            print(rows[-1], flush=True)
    finally:
        server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--data", default=str(default_path()), help="LoCoMo dev file (sessions and questions)")
    parser.add_argument(
        "--fresh-data",
        default=str(default_path().parent.parent / "longmemeval" / "longmemeval-s-dev.json"),
        help="LongMemEval file the fresh writes' sessions come from",
    )
    parser.add_argument("--writes", choices=("fresh", "locomo"), default="fresh", help="what a write sends (above)")
    parser.add_argument("--histories", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per phase")
    parser.add_argument("--write-share", type=float, default=0.1)
    parser.add_argument(
        "--think", type=float, default=0.0, help="a client's mean pause after each answer, seconds (0: none)"
    )
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds of renders before measuring")
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--retry-writes", action="store_true", help="send a refused (503) write again after Retry-After (its own task)"
    )
    parser.add_argument(
        "--client", choices=CLIENTS, default="aiohttp", help="the generator's HTTP client (its CPU per request differs)"
    )
    parser.add_argument("--serve-args", default="", help="more flexamem serve options, e.g. '--max-open 64'")
    args = parser.parse_args()
    # the floors are timed here with the threads the server embeds with (its default, unless set)
    os.environ.setdefault("FLEXAMEM_THREADS", str(SERVER_EMBED_THREADS))
    print(f"# {os.cpu_count()} cores; {args.clients} {args.client} clients on loopback (think {args.think:g} s), "
          f"{args.duration:.0f} s per phase; "
          f"flexamem serve --workers {args.workers} {args.serve_args}".rstrip())  # fmt: skip
    print(
        "| store | load | renders/s | render p50 / p95 / p99 | writes/s | write ack p50 / p99 | first send to ack "
        "p50 / p99 | statuses | acked / lost |"
    )
    print("|---|---|---:|---|---:|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for store in args.store.split(","):
            run_store(store.strip(), args, Path(tmp))


if __name__ == "__main__":
    main()
