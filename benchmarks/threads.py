"""How many threads should the embedder use? Measured, not guessed (prints a table; not a test).

Runs P processes at once (P = 1, 2, 4, 8 on this machine's cores), each embedding the same 64 texts
of ~40 words, for each runtime (numpy MiniLM, onnxruntime MiniLM) and thread setting, and prints the
total throughput (texts/s across all processes) and the slowest process's wall time. Thread settings:
numpy's BLAS pool (limited through threadpoolctl); onnxruntime's intra-op pool, with its worker threads
spinning (onnxruntime's default) or not. :func:`flexamem.write.embed.embed_threads` is the rule
chosen from these figures (docs/PERFORMANCE.md).

    python benchmarks/threads.py [--procs 1,2,4,8] [--texts 64]
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


def texts(n: int) -> list[str]:
    rng = random.Random(7)
    return [" ".join(rng.choice(WORDS.split()) for _ in range(40)) + f" id {rng.randint(1000, 9999)}" for _ in range(n)]


def worker(runtime: str, threads: int, spin: bool, n: int) -> None:
    """One process: load the embedder with the setting, warm it, time one embed of ``n`` texts."""
    if runtime == "onnx":
        from flexamem.write.onnx_embed import OnnxMiniLMEmbedder

        emb = OnnxMiniLMEmbedder(threads=threads, spinning=spin)
        run = emb.embed
    else:
        from flexamem.write.embed import MiniLMEmbedder

        run = MiniLMEmbedder(threads=threads).embed  # BLAS threads limited through threadpoolctl

    batch = texts(n)
    run(batch[:4])
    print("READY", flush=True)
    sys.stdin.readline()  # start together
    start = time.perf_counter()
    run(batch)
    print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)


def measure(runtime: str, threads: int, spin: bool, procs: int, n: int) -> tuple[float, float]:
    cmd = [sys.executable, __file__, "--worker", runtime, str(threads), str(int(spin)), str(n)]
    ps = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    for p in ps:
        assert p.stdout is not None and p.stdout.readline().strip() == "READY"
    start = time.perf_counter()
    for p in ps:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    slowest = 0.0
    for p in ps:
        out, _ = p.communicate()
        slowest = max(slowest, json.loads(out.strip().splitlines()[-1])["seconds"])
    wall = time.perf_counter() - start
    return procs * n / wall, slowest


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--procs", default="1,2,4,8")
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--runtimes", default="onnx,numpy")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(f"{cores} cores; load average {os.getloadavg()[0]:.2f}; {args.texts} texts per process")
    print(f"{'runtime':<8}{'threads':>8}{'spin':>6}{'procs':>7}{'texts/s':>9}{'slowest s':>11}")
    for runtime in args.runtimes.split(","):
        settings = [(t, s) for t in sorted({1, cores}) for s in ((True, False) if runtime == "onnx" else (False,))]
        for procs in (int(p) for p in args.procs.split(",")):
            for threads, spin in settings:
                rate, slowest = measure(runtime, threads, spin, procs, args.texts)
                flag = ("yes" if spin else "no") if runtime == "onnx" else "-"
                print(f"{runtime:<8}{threads:>8}{flag:>6}{procs:>7}{rate:>9.1f}{slowest:>11.2f}", flush=True)


if __name__ == "__main__":
    main()
