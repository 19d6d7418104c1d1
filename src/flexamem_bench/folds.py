"""Out-of-fold choice of a setting's value (issue 30): the one rule scripts/crossfold.py (readers) and
scripts/crossfold_agents.py (agent sessions) share.

For every fold, the value that scores best on the other folds is chosen; scoring each item by the value
chosen without it gives the out-of-fold figure, what carries to unseen data. A tie keeps the default:
a change has to gain to be chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

S = TypeVar("S")  # one value's scores, in whatever shape its script keeps them
T = TypeVar("T")


@dataclass(frozen=True)
class Choice:
    """The values chosen for one setting (keys such as ``auto_rho=0.05``)."""

    default: str
    in_fold: str  # the best on every fold together: what tuning on the development data shows
    per_fold: tuple[str, ...]  # per_fold[f]: the best without fold f, scored on fold f

    def held(self, fold: int) -> str:
        """The value an item of ``fold`` is scored with out of fold."""
        return self.per_fold[fold]


def deal(groups: Mapping[str, Sequence[str]], k: int) -> dict[str, int]:
    """item -> fold: the items of each group (a file, a question type) dealt out in turn, groups in name
    order and items sorted, so each fold holds some of every group and the split is the same every run."""
    out: dict[str, int] = {}
    dealt = 0
    for name in sorted(groups):
        for item in sorted(groups[name]):
            out[item] = dealt % k
            dealt += 1
    return out


def choose(
    keys: Sequence[str],
    default: str,
    fold_of: Mapping[str, int],
    k: int,
    score: Callable[[str, set[str]], float],
) -> Choice:
    """Choose among ``keys`` by ``score(key, items)`` (higher is better) on all folds and without each
    fold in turn. ``default`` must be one of ``keys``."""
    if default not in keys:
        raise ValueError(f"the default {default!r} is not among the values scored")
    ordered = [default, *(key for key in keys if key != default)]  # max keeps the first of a tie
    everyone = set(fold_of)
    per_fold = []
    for f in range(k):
        train = {i for i, g in fold_of.items() if g != f}
        per_fold.append(max(ordered, key=lambda key: score(key, train)))
    return Choice(default, max(ordered, key=lambda key: score(key, everyone)), tuple(per_fold))


def candidates(results: Mapping[str, object], variants: Sequence[str], grid: Mapping[str, Sequence[object]],
               defaults: object) -> dict[str, tuple[str, list[str]]]:  # fmt: skip
    """setting -> (its default's key, every key scored): ``variant`` (``auto`` or one of its switches
    off) and each grid setting as ``name=value``; a setting with a value not in ``results`` is left out."""
    out = {"variant": ("auto", list(variants))}
    out.update({s: (f"{s}={getattr(defaults, s)}", [f"{s}={v}" for v in vs]) for s, vs in grid.items()})
    return {s: (d, keys) for s, (d, keys) in out.items() if all(key in results for key in keys)}


def report(
    results: Mapping[str, S],
    settings: Mapping[str, tuple[str, list[str]]],
    fold_of: Mapping[str, int],
    k: int,
    objective: Callable[[S, set[str]], float],
    held: Callable[[Choice], S],
    figures: Callable[[S], object],
) -> list[dict[str, Any]]:
    """Per setting: the default's, the in-fold and the out-of-fold objective and figures side by side
    (``held(choice)``: every item scored by the value chosen without its fold), and every value's."""
    everyone = set(fold_of)
    out = []
    for setting, (default, keys) in settings.items():
        choice = choose(keys, default, fold_of, k, lambda key, items: objective(results[key], items))
        out_of_fold = held(choice)
        out.append(
            {
                "setting": setting,
                "default": default,
                "chosen_in_fold": choice.in_fold,
                "chosen_per_fold": list(choice.per_fold),
                "default_score": objective(results[default], everyone),
                "in_fold_score": objective(results[choice.in_fold], everyone),
                "out_of_fold_score": objective(out_of_fold, everyone),
                "default_figures": figures(results[default]),
                "in_fold_figures": figures(results[choice.in_fold]),
                "out_of_fold_figures": figures(out_of_fold),
                "every_value": {key: figures(results[key]) for key in keys},
            }
        )
    return out


def narrowed(
    wanted: str | None, grid: Mapping[str, T], variants: Sequence[str]
) -> tuple[dict[str, T], tuple[str, ...]]:
    """``--settings a,b``: only those grid settings (and ``auto`` itself); ValueError names unknown ones."""
    if not wanted:
        return dict(grid), tuple(variants)
    names = wanted.split(",")
    unknown = sorted(set(names) - set(grid))
    if unknown:
        raise ValueError(f"no grid for {', '.join(unknown)} (there: {', '.join(grid)})")
    return {s: grid[s] for s in names}, ("auto",)


def table(
    rows: Sequence[Mapping[str, Any]], extra: tuple[str, Callable[[Mapping[str, Any]], str]] | None = None
) -> str:
    """The report as a Markdown table (``extra``: one more column's title and cell)."""
    head = "| setting | default | chosen in fold | chosen per fold | default | in fold | out of fold |"
    rule = "|---|---|---|---|---:|---:|---:|"
    lines = [head + (f" {extra[0]} |" if extra else ""), rule + ("---|" if extra else "")]
    for r in rows:
        per_fold = ", ".join(c.split("=")[-1] for c in r["chosen_per_fold"])
        scores = " | ".join(f"{100 * r[k]:.2f}" for k in ("default_score", "in_fold_score", "out_of_fold_score"))
        cells = f"| {r['setting']} | {r['default'].split('=')[-1]} | {r['chosen_in_fold'].split('=')[-1]} "
        lines.append(cells + f"| {per_fold} | {scores} |" + (f" {extra[1](r)} |" if extra else ""))
    return "\n".join(lines)
