"""Statistics for paired comparisons: exact McNemar, paired bootstrap CIs, Holm correction.

numpy only. Outcomes are paired per item (question or step): two methods answered the same items.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> tuple[int, int, float]:
    """(only a right, only b right, two-sided exact p) on paired binary outcomes."""
    if len(a) != len(b):
        raise ValueError("paired outcomes must have the same length")
    n01 = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    n10 = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    n = n01 + n10
    if n == 0:
        return n01, n10, 1.0
    k = min(n01, n10)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return n01, n10, min(1.0, 2 * tail)


def bootstrap_ci(
    values: Sequence[float],
    groups: Sequence[str] | None = None,
    *,
    resamples: int = 10_000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile CI of the mean, resampling items, or whole groups (e.g. conversations) if given."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    if groups is None:
        idx = rng.integers(0, len(x), size=(resamples, len(x)))
        means = x[idx].mean(axis=1)
    else:
        keys = sorted(set(groups))
        members = [np.flatnonzero(np.asarray(groups) == k) for k in keys]
        sums = np.array([x[m].sum() for m in members])
        counts = np.array([len(m) for m in members], dtype=np.float64)
        pick = rng.integers(0, len(keys), size=(resamples, len(keys)))
        means = sums[pick].sum(axis=1) / counts[pick].sum(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def paired_bootstrap_diff(
    a: Sequence[float], b: Sequence[float], *, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """(mean of a - b, CI low, CI high), resampling paired items."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    lo, hi = bootstrap_ci(d.tolist(), resamples=resamples, seed=seed)
    return float(d.mean()) if len(d) else math.nan, lo, hi


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted
