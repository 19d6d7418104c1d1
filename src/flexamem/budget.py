"""The budget arithmetic, in one place (SPEC section 2).

A model call of budget ``B`` gets a context of at most ``ceiling(B) = floor(0.95 * B)`` tokens; the
memory gets what the fixed part (prompt and query, or system, task and recent window) leaves of it:
``allowance(B, fixed) = ceiling(B) - fixed``. Every door, harness and baseline uses these functions.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from flexamem.errors import BudgetError

MAX_BUDGET = 100_000_000  # tokens: far above any model's context window; larger is a mistake
SHARE = 95  # percent of the budget the whole context may take


def check_budget(budget: Any) -> int:
    """``budget`` as a plain int (numpy integers accepted), or :class:`BudgetError`: a budget is a whole
    number of tokens from 1 to ``MAX_BUDGET``."""
    if isinstance(budget, bool) or not isinstance(budget, numbers.Integral):
        raise BudgetError(f"budget must be a whole number of tokens, got {budget!r}")
    if not 0 < int(budget) <= MAX_BUDGET:
        raise BudgetError(f"budget must be between 1 and {MAX_BUDGET:,} tokens, got {int(budget):,}")
    return int(budget)


def ceiling(budget: int) -> int:
    """``floor(0.95 * B)``: the hard limit on the whole context."""
    return (check_budget(budget) * SHARE) // 100


def allowance(budget: int, fixed_tokens: int) -> int:
    """What the memory may take: the ceiling less the fixed part, or :class:`BudgetError` when the
    fixed part leaves nothing."""
    room = ceiling(budget) - fixed_tokens
    if room <= 0:
        raise BudgetError(
            f"budget {budget} leaves no room for memory: the fixed prompt takes {fixed_tokens} of the "
            f"{ceiling(budget)} tokens allowed (0.95 * budget)"
        )
    return room


def budget_for(room: int, fixed_tokens: int = 0) -> int:
    """The smallest budget whose ceiling holds ``room`` tokens on top of ``fixed_tokens`` (the inverse of
    :func:`ceiling`; e.g. a memory of at most ``max_tokens`` for an MCP ``recall``, or a history budget
    with the fixed prompt on top)."""
    return max(1, math.ceil((room + fixed_tokens) * 100 / SHARE))
