"""Two runs of ``flexamem eval`` on the same data, side by side: every method, budget and measure, with
the paired difference (B - A) and its 95% bootstrap CI (issue 32: int8 against fp32 MiniLM).

Rows are paired by item (question or agent step); the bootstrap resamples items, or whole groups
(conversations, trajectories) with ``--by-group``. A difference "holds" when its CI contains 0 or lies
above it.

    python scripts/compare_runs.py results/q/lme-dev-fp32 results/q/lme-dev-int8 \
        [--measures evidence_verbatim,evidence_partial] [--by-group]

``--exact`` asks only whether the rows both runs hold are identical in every field but timings: a
refactor against the code before it, both run on the same ``--keep`` stores (issue 50).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from flexamem_bench.harness import load_rows
from flexamem_bench.stats import bootstrap_ci

DEFAULT = "evidence_verbatim,evidence_partial,answer_contained,session_recall,detail_recall,trace_coverage"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="the baseline run's folder (e.g. fp32)")
    parser.add_argument("b", type=Path, help="the other run's folder (e.g. int8)")
    parser.add_argument("--measures", default=DEFAULT)
    parser.add_argument("--by-group", action="store_true", help="resample whole groups (trajectories)")
    parser.add_argument("--resamples", type=int, default=5000)
    parser.add_argument(
        "--exact",
        action="store_true",
        help="only say whether the rows both runs hold are identical in every field but timings (a refactor "
        "against the code before it, on kept stores); exit 1 if any differs",
    )
    args = parser.parse_args(argv)
    rows: dict[str, dict[tuple[str, int, str], dict[str, object]]] = {}
    for side, folder in (("a", args.a), ("b", args.b)):
        rows[side] = {(str(r["method"]), int(r["budget"]), str(r["item"])): r for r in load_rows(folder)}
    if args.exact:
        return exact(rows["a"], rows["b"])
    cells: dict[tuple[str, int, str], list[tuple[float, float, str]]] = defaultdict(list)
    for key, ra in rows["a"].items():
        rb = rows["b"].get(key)
        if rb is None:
            continue
        for m in args.measures.split(","):
            va, vb = ra.get(m), rb.get(m)
            if isinstance(va, int | float) and isinstance(vb, int | float):
                cells[(key[0], key[1], m)].append((float(va), float(vb), str(ra.get("group", key[2]))))
    print(f"A = {args.a}, B = {args.b}\n")
    print("| method | budget | measure | n | A | B | B - A [95% CI] | holds |")
    print("|---|---:|---|---:|---:|---:|---|---|")
    held = total = 0
    for (method, budget, m), pairs in sorted(cells.items()):
        a = [p[0] for p in pairs]
        b = [p[1] for p in pairs]
        d = [y - x for x, y in zip(a, b, strict=True)]
        groups = [p[2] for p in pairs] if args.by_group else None
        lo, hi = bootstrap_ci(d, groups, resamples=args.resamples)
        mean = sum(d) / len(d)
        ok = hi >= 0  # inside the CI of no difference, or better
        held += ok
        total += 1
        print(
            f"| {method} | {budget} | {m} | {len(d)} | {100 * sum(a) / len(a):.1f} | {100 * sum(b) / len(b):.1f} "
            f"| {100 * mean:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] | {'yes' if ok else '**no**'} |"
        )
    print(f"\n{held} of {total} differences hold (CI contains 0 or lies above it)")
    return 0


def exact(a: dict[tuple[str, int, str], dict[str, object]], b: dict[tuple[str, int, str], dict[str, object]]) -> int:
    """Rows of both runs compared field by field, timings left out: how many are identical."""

    def fixed(row: dict[str, object]) -> dict[str, object]:
        return {k: v for k, v in row.items() if "latency" not in k and not k.endswith("_ms")}

    common = sorted(set(a) & set(b))
    differing = [k for k in common if fixed(a[k]) != fixed(b[k])]
    print(f"rows: A {len(a)}, B {len(b)}, both {len(common)}, identical {len(common) - len(differing)}")
    for k in differing[:10]:
        fa, fb = fixed(a[k]), fixed(b[k])
        print(" ", k, {f: (fa.get(f), fb.get(f)) for f in sorted(set(fa) | set(fb)) if fa.get(f) != fb.get(f)})
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main())
