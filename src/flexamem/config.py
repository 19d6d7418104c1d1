"""Settings: every number the algorithm uses, each declared once, with its rule, where it is used.

A ``Settings`` is the paper's numbers and the write settings (fields here), and the settings of each
of ``auto``'s signals (``rankers``: :mod:`flexamem.recover.signals`, each signal's knobs in its own
module). Every setting has one public name (``Settings(auto_neighbour_reach=3)``, profiles, the HTTP
``settings`` field, ``Rendering.overrides``), whichever object holds it; its rule (sign, bounds) and its
calibration grid are declared on its field (:func:`flexamem.knobs.knob`).

Writing settings (``knob(..., write=True)``: units, pieces, records, links, piece vectors) shape what is
stored: a history records them at its first write and is written with them on every later open,
whatever settings it is opened with (:class:`WriteSettingsWarning` names the given ones they replace).
The others only change how a render reads the store and may change at every call.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, TypeVar

from flexamem.errors import InvalidInputError
from flexamem.knobs import check_knobs, knob, rule_of
from flexamem.recover.signals import Rankers, owners

T = TypeVar("T")


class WriteSettingsWarning(UserWarning):
    """A history is written with the write settings it recorded, not the different ones it was opened
    with (``Memory(settings=...)``): one history is one consistent index."""


@dataclass(frozen=True)
class Settings:
    """Every setting (see the module's text). Give any of them by name, ``Settings(k=3,
    auto_neighbour=0.5)``; read a signal's by its class, ``settings.rankers[Neighbours].auto_neighbour``,
    or any by name with :meth:`value`."""

    kappa: int = knob(128, minimum=4, write=True)
    """Max tokens of a piece. Pieces are packed lines within one turn/block; ~100-token pieces give the
    paper's ~1,040 pieces per 103k-token LongMemEval history. Calibrated in docs/CALIBRATION.md."""

    max_unit_tokens: int = knob(2000, write=True)
    """Reader units: sessions are cut before user turns into spans of at most about this many tokens."""

    one_unit_per_session: bool = knob(False, write=True)
    """Reader units: keep each session whole (the paper's choice on LoCoMo)."""

    agent_unit_tokens: int = knob(1000, write=True)
    """Agent units: consecutive steps are packed while the unit stays within this many tokens."""

    links: int = knob(3, write=True)
    """Each new note links both ways to this many earlier notes of highest cosine."""

    record_words: int = knob(80, write=True)
    """Word limit of a record (the paper's)."""

    merged_words: int = knob(150, write=True)
    """Word limit of a merged record (asked for 120 from an LLM, cut at 150)."""

    rho: float = knob(0.25, at_most=1)
    """Timeline share of the allowance: merging stops once the timeline fits ``rho * A`` (or ``A - D``).
    Calibrated (docs/CALIBRATION.md): 0.1 shows ~1 point more evidence, but that measure cannot see the
    trace the timeline keeps for agents, so we keep the largest value within a point of the best."""

    lam: float = knob(0.7, below=1)
    """Discount for units reached through a link or as a time neighbour of a seed (lambda < 1)."""

    k: int = knob(5)
    """Seeds: the k units most similar to the query (5 beat 2 and 3 at every budget on LoCoMo dev)."""

    excerpt_tokens: int = knob(128)
    """E: token budget of the pieces in one excerpt (128 beat 256 and 512 on LoCoMo dev, as shorter
    excerpts did in the paper's Table 15)."""

    piece_vectors: bool = knob(True, write=True)
    """Embed every piece at write time (stored with the note), for the dense half of ``auto``'s
    ranking. Costs one MiniLM pass per piece at ingest; without them ``auto`` scores a piece by its
    unit's embedding (the ``auto-unit-vectors`` row of docs/EVALUATION.md measures both)."""

    piece_vector_limit: int = knob(128, write=True)
    """A unit with more pieces than this (a huge tool output, a pasted file: ~16k tokens) is written
    without piece vectors, its note's embedding standing in for them, so one write never costs
    minutes of embedding on a CPU."""

    auto_rho: float = knob(0.05, at_most=1, grid=(0.02, 0.05, 0.1))
    """``auto``: the timeline is merged down to this share of the allowance; when even the fully merged
    timeline is longer, it keeps up to ``rho`` (every unit still covered) before the oldest entries are
    hidden. Pieces get the rest."""

    auto_long_turn: float = knob(0.5, at_most=1, grid=(0.15, 0.25, 0.35, 0.5, 1.0))
    """``auto`` for readers: a turn is shown whole or not at all, except one longer than this share of
    the pieces' room, whose best pieces are taken one by one (a long turn taken whole could crowd out
    every other)."""

    agent_auto_rho: float = knob(0.25, at_most=1, grid=(0.1, 0.15, 0.2, 0.25))
    """``auto`` in agent sessions: the timeline is merged down to this share of the allowance (the
    paper's ``rho``, so every past unit stays represented: the trace). Scored out of fold on every
    tau / tau2 development trajectory (docs/CALIBRATION.md)."""

    agent_trace_share: float = knob(0.4, at_most=1, grid=(0.3, 0.4, 0.5))
    """``auto`` in agent sessions: the command trace (each past step's command, as
    :func:`flexamem.write.units.command_text` reads it) takes at most this share of the allowance:
    every command's first line, newest first while they fit, then whole commands in their place,
    newest first. Records and pieces get the rest."""

    agent_query_tokens: int = knob(64)
    """``auto`` for a shell agent: the query embedded for unit recovery is the task and the first
    this-many tokens of the newest unit (the whole unit costs a 256-token MiniLM pass per call)."""

    agent_trace_line_tokens: int = knob(300)
    """``auto`` in agent sessions: a whole command longer than this is cut (with ``…``) in the trace."""

    rankers: Rankers = field(default_factory=Rankers)
    """The settings of ``auto``'s signals (:mod:`flexamem.recover.signals`), one object per signal."""

    if TYPE_CHECKING:  # what a type checker sees of ``Settings(...)``: the fields above, then any signal's knob by name

        def __init__(
            self,
            kappa: int = ...,
            max_unit_tokens: int = ...,
            one_unit_per_session: bool = ...,
            agent_unit_tokens: int = ...,
            links: int = ...,
            record_words: int = ...,
            merged_words: int = ...,
            rho: float = ...,
            lam: float = ...,
            k: int = ...,
            excerpt_tokens: int = ...,
            piece_vectors: bool = ...,
            piece_vector_limit: int = ...,
            auto_rho: float = ...,
            auto_long_turn: float = ...,
            agent_auto_rho: float = ...,
            agent_trace_share: float = ...,
            agent_query_tokens: int = ...,
            agent_trace_line_tokens: int = ...,
            rankers: Rankers = ...,
            **knobs: float | bool,
        ) -> None: ...

    def __post_init__(self) -> None:
        check_knobs(self)
        if not isinstance(self.rankers, Rankers):
            raise InvalidInputError(f"setting rankers must be Rankers, got {type(self.rankers).__name__}")
        if not self.auto_rho <= self.rho:
            raise InvalidInputError("settings: auto_rho <= rho is required")

    def value(self, name: str) -> Any:
        """The value of the setting ``name`` (a field here or a signal's knob)."""
        if name in _OWN:
            return getattr(self, name)
        return self.rankers.values()[name] if name in owners() else _unknown([name])

    def values(self) -> dict[str, Any]:
        """Every setting by name (the form profiles, recorded write settings and HTTP use)."""
        return {**{name: getattr(self, name) for name in _OWN}, **self.rankers.values()}

    def with_values(self, values: Mapping[str, Any] | None = None, /, **more: Any) -> Settings:
        """These settings with the given ones changed, by name (each checked by its rule)."""
        changed = {**(values or {}), **more}
        own = {k: v for k, v in changed.items() if k in _OWN}
        rest = {k: v for k, v in changed.items() if k not in _OWN}
        unknown = sorted(k for k in rest if k not in owners())
        if unknown:
            _unknown(unknown)
        rankers = self.rankers.with_values(rest) if rest else self.rankers
        return replace(self, **own, rankers=rankers)


_OWN = tuple(f.name for f in fields(Settings) if rule_of(f))


def setting_names() -> list[str]:
    """Every setting's name: the fields of :class:`Settings`, then each registered signal's knobs."""
    return [*_OWN, *owners()]


def write_setting_names() -> tuple[str, ...]:
    """The settings that shape what is stored for a unit (their field says ``write=True``)."""
    return tuple(f.name for f in fields(Settings) if rule_of(f).get("write"))


def knob_grids() -> dict[str, tuple[Any, ...]]:
    """Setting name -> the values the cross-fold calibration scores (its field's ``grid``), for every
    setting that has one."""
    out = {f.name: rule_of(f)["grid"] for f in fields(Settings) if rule_of(f).get("grid")}
    for cls in owners().values():
        out.update({f.name: rule_of(f)["grid"] for f in fields(cls) if rule_of(f).get("grid")})  # type: ignore[arg-type]
    return out


def _unknown(names: list[str]) -> Any:
    raise InvalidInputError(f"unknown setting(s) {', '.join(map(str, names))}; known: {', '.join(setting_names())}")


def write_settings(settings: Settings) -> dict[str, Any]:
    """The values of ``settings`` that shape what is stored (:func:`write_setting_names`)."""
    return {name: getattr(settings, name) for name in write_setting_names()}


def with_write_settings(settings: Settings, recorded: dict[str, Any]) -> Settings:
    """``settings`` with the write settings a history recorded (names this version does not know are
    left out; a recorded value is checked as a given one is)."""
    names = write_setting_names()
    known = {k: v for k, v in recorded.items() if k in names}
    try:
        return replace(settings, **known)
    except InvalidInputError as exc:
        raise InvalidInputError(f"the write settings the history recorded are not valid: {exc}") from None


def _by_name(cls: type[Settings]) -> None:
    """Let ``Settings(...)`` take any setting by name: a signal's knob goes to its signal's settings."""
    generated = cls.__init__

    @functools.wraps(generated)
    def init(self: Settings, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(_OWN):
            raise InvalidInputError(f"Settings takes at most {len(_OWN)} values by position")
        theirs = {k: kwargs.pop(k) for k in list(kwargs) if k not in _OWN and k != "rankers"}
        unknown = sorted(k for k in theirs if k not in owners())
        if unknown:
            _unknown(unknown)
        if theirs:
            base = kwargs.get("rankers", Rankers())
            if not isinstance(base, Rankers):
                raise InvalidInputError(f"setting rankers must be Rankers, got {type(base).__name__}")
            kwargs["rankers"] = base.with_values(theirs)
        generated(self, *args, **kwargs)

    cls.__init__ = init  # type: ignore[method-assign]


_by_name(Settings)


def refuse_unknown_arguments(cls: type[T]) -> type[T]:
    """Give a frozen dataclass an ``__init__`` that refuses unknown or extra arguments with
    :class:`InvalidInputError` (the generated one raises ``TypeError``); its ``__post_init__`` checks
    the values."""
    generated = cls.__init__
    known = [f.name for f in fields(cls)]  # type: ignore[arg-type]

    @functools.wraps(generated)
    def checked(self: T, *args: Any, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - set(known))
        if unknown:
            raise InvalidInputError(f"unknown {cls.__name__} field(s) {', '.join(unknown)}; known: {', '.join(known)}")
        if len(args) > len(known):
            raise InvalidInputError(f"{cls.__name__} takes at most {len(known)} values")
        generated(self, *args, **kwargs)

    cls.__init__ = checked  # type: ignore[method-assign,assignment]
    return cls


@dataclass(frozen=True)
class ClientSettings:
    """How a memory at a URL talks to its server(s)."""

    timeout: float = 60.0
    """Seconds to wait for one answer (a first render of a large history loads it: seconds)."""
    connect_timeout: float = 5.0
    """Seconds to wait for a connection before trying again (or the next server)."""
    retry_seconds: float = 30.0
    """How long a call keeps retrying a retryable failure before it raises (0: never retries)."""
    backoff: float = 0.1
    """The first wait between attempts, doubled each time (with jitter) up to ``max_backoff``."""
    max_backoff: float = 2.0
    """The longest wait between two attempts (a ``Retry-After`` above it is cut to it)."""

    def __post_init__(self) -> None:
        for name in ("timeout", "connect_timeout", "backoff", "max_backoff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise InvalidInputError(f"{name} must be a positive number of seconds, got {value!r}")
        if isinstance(self.retry_seconds, bool) or not isinstance(self.retry_seconds, int | float):
            raise InvalidInputError(f"retry_seconds must be a number of seconds, got {self.retry_seconds!r}")
        if self.retry_seconds < 0:
            raise InvalidInputError(f"retry_seconds must be 0 or more, got {self.retry_seconds!r}")
