"""Out-of-fold choice of a setting's value (issue 30): the one rule scripts/crossfold.py (readers) and
scripts/crossfold_agents.py (agent sessions) share.

For every fold, the value that scores best on the other folds is chosen; scoring each item by the value
chosen without it gives the out-of-fold figure, what carries to unseen data. A tie keeps the default:
a change has to gain to be chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


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
