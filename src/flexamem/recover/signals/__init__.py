"""``auto``'s signals, each with its own settings (knobs), and the one list that registers them.

A new signal (or a new knob of one) is its module here plus its test, and one line in
:data:`SIGNALS` (or a :func:`register` call, for one defined outside the package). Its knobs are then
settings like every other (``Settings(auto_x=...)``, profiles, the HTTP ``settings`` field), checked
by their own rules, and its grid is scored by ``scripts/crossfold.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from flexamem.errors import InvalidInputError
from flexamem.recover.signals.agent import AgentRanking
from flexamem.recover.signals.base import PHASES, Phase, Scores, Signal, discounted, run_phase
from flexamem.recover.signals.fusion import Fusion
from flexamem.recover.signals.neighbours import Neighbours
from flexamem.recover.signals.speakers import AssistantTurns
from flexamem.recover.signals.turns import SessionVector, TurnLength, TurnVector

S = TypeVar("S")

# every signal, in the order they run within a phase
SIGNALS: list[type[Signal]] = [AgentRanking, TurnVector, SessionVector, Fusion, TurnLength, Neighbours, AssistantTurns]


def register(cls: type[S]) -> type[S]:
    """Add a signal class (a frozen dataclass of knobs with a ``phase`` and ``apply``) after the others;
    its knobs' names must be new. Usable as a decorator."""
    if cls in SIGNALS:
        return cls
    taken = owners()
    clash = sorted(f.name for f in fields(cls) if f.name in taken)  # type: ignore[arg-type]
    if clash:
        raise InvalidInputError(f"setting name(s) {', '.join(clash)} are already a signal's")
    SIGNALS.append(cls)  # type: ignore[arg-type]
    return cls


def unregister(cls: type[Any]) -> None:
    """Remove a signal :func:`register` added (tests, plug-ins that unload)."""
    if cls in SIGNALS:
        SIGNALS.remove(cls)


def owners() -> dict[str, type[Signal]]:
    """Setting name -> the signal class whose knob it is."""
    return {f.name: cls for cls in SIGNALS for f in fields(cls)}  # type: ignore[arg-type]


@dataclass(frozen=True)
class Rankers:
    """The settings of every registered signal: those given, the defaults for the rest. Kept as the
    given ones that differ from their defaults, so two equal settings compare equal."""

    given: tuple[Signal, ...] = ()

    def __post_init__(self) -> None:
        seen: set[type] = set()
        for s in self.given:
            if type(s) not in SIGNALS:
                raise InvalidInputError(f"{type(s).__name__} is not a registered signal")
            if type(s) in seen:
                raise InvalidInputError(f"{type(s).__name__} is given twice")
            seen.add(type(s))
        order = {cls: i for i, cls in enumerate(SIGNALS)}
        kept = tuple(sorted((s for s in self.given if s != type(s)()), key=lambda s: order[type(s)]))
        object.__setattr__(self, "given", kept)

    def __getitem__(self, cls: type[S]) -> S:
        for s in self.given:
            if type(s) is cls:
                return s
        return cls()

    def __iter__(self) -> Iterator[Signal]:
        """Every registered signal's settings, in running order (built once per registry: a render reads
        them before every model call)."""
        cached: tuple[tuple[type, ...], tuple[Signal, ...]] | None = self.__dict__.get("_all")
        if cached is None or cached[0] != tuple(SIGNALS):
            cached = (tuple(SIGNALS), tuple(self[cls] for cls in SIGNALS))
            object.__setattr__(self, "_all", cached)
        return iter(cached[1])

    def with_values(self, values: Mapping[str, Any]) -> Rankers:
        """These settings with ``values`` (setting name -> value; every name a signal's knob)."""
        by_owner: dict[type[Signal], dict[str, Any]] = {}
        known = owners()
        for name, value in values.items():
            if name not in known:
                raise InvalidInputError(f"unknown setting {name}")
            by_owner.setdefault(known[name], {})[name] = value
        changed = {cls: replace(self[cls], **vals) for cls, vals in by_owner.items()}  # type: ignore[type-var]
        return Rankers(tuple(changed.get(cls, self[cls]) for cls in SIGNALS))

    def values(self) -> dict[str, Any]:
        """Setting name -> value, for every knob of every registered signal."""
        return {f.name: getattr(s, f.name) for s in self for f in fields(s)}  # type: ignore[arg-type]


__all__ = [
    "PHASES", "SIGNALS", "AgentRanking", "AssistantTurns", "Fusion", "Neighbours", "Phase", "Rankers", "Scores",
    "SessionVector", "Signal", "TurnLength", "TurnVector", "discounted", "owners", "register", "run_phase",
    "unregister",
]  # fmt: skip
