"""How many threads should the embedder use? Measured, not guessed (prints a table; not a test).

Runs P processes at once (P = 1, 2, 4, 8 on this machine's cores), each embedding the same 64 texts
of ~40 words (``--words``), for each runtime (numpy MiniLM, onnxruntime MiniLM at ``--precision``) and
thread setting, and prints the total throughput (texts/s across all processes), the slowest process's
wall time and the CPU each text took (every process's CPU time over the texts). Thread settings:
numpy's BLAS pool (limited through threadpoolctl); onnxruntime's intra-op pool, with its worker threads
spinning (onnxruntime's default) or not. :func:`flexamem.write.embed.embed_threads` is the rule
chosen from these figures (docs/PERFORMANCE.md).

    python benchmarks/threads.py [--procs 1,2,4,8] [--texts 64] [--words 40] [--precision fp32|int8]

``--precision int8 --words 10``: a render's query forward (one short text); ``--words 40``: a turn.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

WORDS = (
    "flight booking hotel seat refund passenger baggage change cancel upgrade reservation payment card "
    "gift certificate airport delay weather museum painting camping family birthday concert guitar dog "
    "adoption school support group charity race marathon recipe dinner garden lake mountain trip"
)


def texts(n: int, words: int) -> list[str]:
    rng = random.Random(7)
    vocabulary = WORDS.split()
    return [" ".join(rng.choice(vocabulary) for _ in range(words)) + f" id {rng.randint(1000, 9999)}" for _ in range(n)]


def worker(runtime: str, threads: int, spin: bool, n: int, words: int, precision: str) -> None:
    """One process: load the embedder with the setting, warm it, time one embed of ``n`` texts (wall
    and this process's CPU)."""
    if runtime == "onnx":
        from flexamem.write.onnx_embed import OnnxMiniLMEmbedder

        emb = OnnxMiniLMEmbedder(threads=threads, spinning=spin, precision=precision)
        run = emb.embed
    else:
        from flexamem.write.embed import MiniLMEmbedder

        run = MiniLMEmbedder(threads=threads).embed  # BLAS threads limited through threadpoolctl

    batch = texts(n, words)
    run(batch[:4])
    print("READY", flush=True)
    sys.stdin.readline()  # start together
    start, cpu = time.perf_counter(), time.process_time()
    run(batch)
    print(json.dumps({"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu}), flush=True)


def measure(
    runtime: str, threads: int, spin: bool, procs: int, n: int, words: int, precision: str
) -> tuple[float, float, float]:
    """Texts/s over all ``procs`` processes, the slowest one's seconds, and CPU milliseconds per text."""
    cmd = [sys.executable, __file__, "--worker", runtime, str(threads), str(int(spin)), str(n), str(words), precision]
    ps = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    for p in ps:
        assert p.stdout is not None and p.stdout.readline().strip() == "READY"
    start = time.perf_counter()
    for p in ps:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    slowest, cpu = 0.0, 0.0
    for p in ps:
        out, _ = p.communicate()
        result = json.loads(out.strip().splitlines()[-1])
        slowest, cpu = max(slowest, result["seconds"]), cpu + result["cpu"]
    wall = time.perf_counter() - start
    return procs * n / wall, slowest, 1000 * cpu / (procs * n)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--procs", default="1,2,4,8")
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--runtimes", default="onnx,numpy")
    parser.add_argument("--words", type=int, default=40, help="words per text (a query: ~10; a turn: ~40)")
    parser.add_argument("--precision", choices=("fp32", "int8"), default="fp32", help="onnxruntime's weights")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(f"{cores} cores; load average {os.getloadavg()[0]:.2f}; {args.texts} texts of {args.words} words "
          f"per process; onnxruntime {args.precision}")  # fmt: skip
    print(f"{'runtime':<8}{'threads':>8}{'spin':>6}{'procs':>7}{'texts/s':>9}{'slowest s':>11}{'CPU ms/text':>13}")
    for runtime in args.runtimes.split(","):
        settings = [(t, s) for t in sorted({1, cores}) for s in ((True, False) if runtime == "onnx" else (False,))]
        for procs in (int(p) for p in args.procs.split(",")):
            for threads, spin in settings:
                rate, slowest, cpu = measure(runtime, threads, spin, procs, args.texts, args.words, args.precision)
                flag = ("yes" if spin else "no") if runtime == "onnx" else "-"
                row = f"{runtime:<8}{threads:>8}{flag:>6}{procs:>7}{rate:>9.1f}{slowest:>11.2f}{cpu:>13.2f}"
                print(row, flush=True)


if __name__ == "__main__":
    main()
