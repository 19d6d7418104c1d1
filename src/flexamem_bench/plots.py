"""PNG plots of a results folder (matplotlib, an optional extra: ``pip install flexamem[eval]``).

One plot per measure against budget (a line per method), and the memory composition of the
FlexA-Mem methods per budget (share of tokens on records, merged records, excerpts, raw text and
pieces), as the paper's Figure 6.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from flexamem.errors import ModelUnavailableError

PARTS = ("records", "merged", "excerpts", "raw", "pieces", "other")


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError as exc:
        raise ModelUnavailableError("plots need matplotlib: pip install 'flexamem[eval]'") from exc
    return plt


def plot_measures(results: list[dict[str, Any]], out: Path, measures: tuple[str, ...]) -> list[Path]:
    plt = _pyplot()
    paths = []
    for name in measures:
        rows = [r for r in results if r["measure"] == name]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for method in sorted({r["method"] for r in rows}):
            pts = sorted((r["budget"], r["value"]) for r in rows if r["method"] == method)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=method)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("budget (tokens)")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_composition(rows: list[dict[str, Any]], out: Path, methods: tuple[str, ...]) -> Path | None:
    """Stacked bars: for each (method, budget), the mean share of memory tokens by part."""
    plt = _pyplot()
    shares: dict[tuple[str, int], dict[str, float]] = {}
    groups: dict[tuple[str, int], list[dict[str, int]]] = defaultdict(list)
    for r in rows:
        if r["method"] in methods and r.get("composition"):
            groups[(r["method"], r["budget"])].append(r["composition"])
    if not groups:
        return None
    for key, comps in groups.items():
        totals = {p: sum(c.get(p, 0) for c in comps) for p in PARTS}
        all_tokens = sum(totals.values()) or 1
        shares[key] = {p: totals[p] / all_tokens for p in PARTS}
    keys = sorted(shares)
    fig, ax = plt.subplots(figsize=(max(6, len(keys) * 0.8), 4))
    bottom = [0.0] * len(keys)
    for part in PARTS:
        vals = [shares[k][part] for k in keys]
        ax.bar(range(len(keys)), vals, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(range(len(keys)), [f"{m}\n{b}" for m, b in keys], fontsize=7)
    ax.set_ylabel("share of memory tokens")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    path = out / "composition.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
