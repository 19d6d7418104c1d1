"""Settings: every number the algorithm uses, with the reason for its default.

Writing settings (units, pieces, records, links, piece vectors: :data:`WRITE_SETTINGS`) shape what is
stored: a history records them at its first write and is written with them on every later open,
whatever settings it is opened with (:class:`WriteSettingsWarning` names the given ones they replace).
Rendering settings (``rho``, ``lam``, ``k``, ``excerpt_tokens``) may change at every call.
"""

from __future__ import annotations

import functools
import reprlib
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from flexamem.errors import InvalidInputError

_MAY_BE_ZERO = frozenset(
    {"agent_auto_identifiers", "agent_auto_code", "auto_turn_vector", "auto_turn_length", "auto_session_vector"}
)


T = TypeVar("T")


# the settings that shape what is written for a unit (pieces, records, links, vectors, merged records);
# the others only change how a render reads the store
WRITE_SETTINGS = (
    "kappa",
    "max_unit_tokens",
    "one_unit_per_session",
    "agent_unit_tokens",
    "links",
    "record_words",
    "merged_words",
    "piece_vectors",
    "piece_vector_limit",
)


class WriteSettingsWarning(UserWarning):
    """A history is written with the write settings it recorded, not the different ones it was opened
    with (``Memory(settings=...)``): one history is one consistent index."""


def write_settings(settings: Settings) -> dict[str, Any]:
    """The values of ``settings`` that shape what is stored (:data:`WRITE_SETTINGS`)."""
    return {name: getattr(settings, name) for name in WRITE_SETTINGS}


def with_write_settings(settings: Settings, recorded: dict[str, Any]) -> Settings:
    """``settings`` with the write settings a history recorded (names this version does not know are
    left out; a recorded value is checked as a given one is)."""
    known = {k: v for k, v in recorded.items() if k in WRITE_SETTINGS}
    try:
        return replace(settings, **known)
    except InvalidInputError as exc:
        raise InvalidInputError(f"the write settings the history recorded are not valid: {exc}") from None


@dataclass(frozen=True)
class Settings:
    kappa: int = 128
    """Max tokens of a piece. Pieces are packed lines within one turn/block; ~100-token pieces give the
    paper's ~1,040 pieces per 103k-token LongMemEval history. Calibrated in docs/CALIBRATION.md."""

    max_unit_tokens: int = 2000
    """Reader units: sessions are cut before user turns into spans of at most about this many tokens."""

    one_unit_per_session: bool = False
    """Reader units: keep each session whole (the paper's choice on LoCoMo)."""

    agent_unit_tokens: int = 1000
    """Agent units: consecutive steps are packed while the unit stays within this many tokens."""

    links: int = 3
    """Each new note links both ways to this many earlier notes of highest cosine."""

    record_words: int = 80
    """Word limit of a record (the paper's)."""

    merged_words: int = 150
    """Word limit of a merged record (asked for 120 from an LLM, cut at 150)."""

    rho: float = 0.25
    """Timeline share of the allowance: merging stops once the timeline fits ``rho * A`` (or ``A - D``).
    Calibrated (docs/CALIBRATION.md): 0.1 shows ~1 point more evidence, but that measure cannot see the
    trace the timeline keeps for agents, so we keep the largest value within a point of the best."""

    lam: float = 0.7
    """Discount for units reached through a link or as a time neighbour of a seed (lambda < 1)."""

    k: int = 5
    """Seeds: the k units most similar to the query (5 beat 2 and 3 at every budget on LoCoMo dev)."""

    excerpt_tokens: int = 128
    """E: token budget of the pieces in one excerpt (128 beat 256 and 512 on LoCoMo dev, as shorter
    excerpts did in the paper's Table 15)."""

    piece_vectors: bool = True
    """Embed every piece at write time (stored with the note), for the dense half of ``auto``'s
    ranking. Costs one MiniLM pass per piece at ingest; without them ``auto`` scores a piece by its
    unit's embedding (the ``auto-unit-vectors`` row of docs/EVALUATION.md measures both)."""

    piece_vector_limit: int = 128
    """A unit with more pieces than this (a huge tool output, a pasted file: ~16k tokens) is written
    without piece vectors, its note's embedding standing in for them, so one write never costs
    minutes of embedding on a CPU."""

    auto_alpha: float = 0.5
    """``auto`` ranking: weight of the max-normalised BM25 score (stemmed terms) against the piece
    cosine, ``alpha * bm25 / max(bm25) + (1 - alpha) * cos``. 0.4-0.6 within a point on LoCoMo dev."""

    auto_alpha_spread: float = 2.0
    """``auto`` for readers: how fast the BM25 weight falls for a query whose BM25 scores are flat over
    its best turns, ``a = min(auto_alpha, spread * auto_alpha * (1 - flat))`` (recover/hybrid.py
    ``turn_scores``). Calibrated on LoCoMo and LongMemEval dev together (docs/CALIBRATION.md)."""

    auto_neighbour: float = 0.7
    """``auto``: a turn next to a ranked turn (same unit) scores at least this share of its neighbour's
    score, so the question of an answer (or the answer of a question) comes with it when room allows.
    0.7 is chosen by every fold out of fold, on evidence turns and on answer strings alike (it was 0.5;
    docs/CALIBRATION.md)."""

    auto_neighbour_reach: int = 5
    """``auto`` for readers: how many turns away a turn lifts the turns of its unit, each to at least
    ``auto_neighbour ** d`` of its score at distance ``d``, so the turns around a relevant one come next,
    the nearer first. 5 is chosen out of fold (three folds of four; 1, the next turn only, was the rule
    until 2026-12-03): evidence +0.19 points, the answer string level (docs/CALIBRATION.md)."""

    auto_rho: float = 0.05
    """``auto``: the timeline is merged down to this share of the allowance; when even the fully merged
    timeline is longer, it keeps up to ``rho`` (every unit still covered) before the oldest entries are
    hidden. Pieces get the rest."""

    auto_turn_vector: float = 1.0
    """``auto`` for readers: the share of a turn's dense score that comes from the turn as a whole (its
    head vector: the token-weighted sum of the vectors of its pieces within its first 256 tokens) rather
    than from its best piece. 1.0 is chosen by every fold out of fold (0.0, the best piece alone, was
    the rule until 2026-12-02): LongMemEval dev + dev2 +3.0 / +1.0 / +0.8 / +1.0 points at 4k-32k,
    LoCoMo unchanged (docs/CALIBRATION.md)."""

    auto_turn_length: float = 1.0
    """``auto`` for readers: a turn longer than ``auto_turn_room`` of the pieces' room has its score
    multiplied by ``(auto_turn_room * room / tokens) ** auto_turn_length``, so a long turn must be that
    much more relevant to take its room (1.0: its score per token beyond that share; 0: no discount).
    It helps out of fold: on LongMemEval dev + dev2 the folds choose 1.5-2.0 (+2.0 points of evidence
    at 4k out of fold; 1.0 gives +1.9) and 0.5 for answer strings (+0.9 out of fold; 1.0 the same);
    LoCoMo unchanged (docs/CALIBRATION.md)."""

    auto_turn_room: float = 0.1
    """``auto`` for readers: the share of the pieces' room above which a turn is discounted
    (``auto_turn_length``). Out of fold the evidence folds choose 0.05 (+1.4 points at 4k and 8k on
    LongMemEval) and the answer-string folds 0.1 (0.05 loses one); 0.03 costs LoCoMo 2.6 points at 2k.
    Kept at 0.1, the value fixed before it was scored (docs/CALIBRATION.md)."""

    auto_session_vector: float = 0.0
    """``auto`` for readers: the share of a turn's dense score that comes from its unit (a session) as a
    whole, the cosine of the token-weighted sum of all the unit's piece vectors, so the turns of a
    session about the question outrank a turn that only sounds like it in a session about something
    else. Off by default: out of fold the folds choose 0.3-0.5 and gain on LoCoMo (+0.6 / +1.4 / +0.7
    points of evidence at 2k-8k) but lose on LongMemEval (0 / -0.5 / -0.4 / -0.9 at 4k-32k), and the
    answer string does not move (docs/CALIBRATION.md). Histories of many-topic sessions may set it."""

    auto_assistant_turns: float = 0.4
    """``auto`` for readers: for a question about its asker (it says "I" or "my" and neither addresses
    nor names the other party, "you", "the assistant": :func:`flexamem.text.asks_about_asker`), the
    score of every turn whose speaker is ``assistant`` is multiplied by this (after the neighbours are
    lifted, so such a turn still brings its neighbours), and what the asker said about themselves is
    shown before the assistant's longer answers around it. 1.0: no discount. Every fold chooses 0.4
    out of fold on evidence (LongMemEval dev + dev2 +4.3 / +4.1 / +2.0 / +0.5 points at 4k-32k; LoCoMo,
    whose speakers are named, unchanged); the answer-string folds keep 1.0 for one question whose
    evidence is all shown either way (docs/CALIBRATION.md)."""

    auto_long_turn: float = 0.5
    """``auto`` for readers: a turn is shown whole or not at all, except one longer than this share of
    the pieces' room, whose best pieces are taken one by one (a long turn taken whole could crowd out
    every other)."""

    agent_auto_alpha: float = 1.0
    """``auto`` in agent sessions: the BM25 weight (1.0: BM25 alone; a sentence embedding of tool
    output blurs the ids, codes and numbers an agent's next call needs, docs/EVALUATION_AGENTS.md).
    Agent histories rank pieces one by one (a tool output is no conversational turn: no whole turns,
    no neighbours) and keep the timeline at ``rho``, so every past unit stays represented."""

    agent_auto_rho: float = 0.25
    """``auto`` in agent sessions: the timeline is merged down to this share of the allowance (the
    paper's ``rho``, so every past unit stays represented: the trace). Scored out of fold on every
    tau / tau2 development trajectory (docs/CALIBRATION.md)."""

    agent_auto_identifiers: float = 3.0
    """``auto`` in agent sessions: a piece holding identifier words (4+ characters with a digit: ids,
    codes, numbers, dates) scores up to this much more (a third per identifier, up to three), on top
    of its max-normalised BM25: the values an agent passes back verbatim live in such pieces. 3.0 (it
    was 0.5, chosen on 36 trajectories) is chosen out of fold on all 240 tau / tau2 development
    trajectories (docs/CALIBRATION.md): +6 / +7 / +5 points of detail recall at 2k / 3k / 4k."""

    agent_auto_code: float = 1.0
    """``auto`` in agent sessions: the weight of a second BM25 over names of code kept whole (paths,
    dotted, snake_case and CamelCase names: :func:`flexamem.text.code_terms`), max-normalised and added
    to the piece score; BM25 over words splits ``table_alias`` into two common words."""

    agent_trace_share: float = 0.4
    """``auto`` in agent sessions: the command trace (each past step's command, as
    :func:`flexamem.write.units.command_text` reads it) takes at most this share of the allowance:
    every command's first line, newest first while they fit, then whole commands in their place,
    newest first. Records and pieces get the rest."""

    agent_query_tokens: int = 64
    """``auto`` for a shell agent: the query embedded for unit recovery is the task and the first
    this-many tokens of the newest unit (the whole unit costs a 256-token MiniLM pass per call)."""

    agent_trace_line_tokens: int = 300
    """``auto`` in agent sessions: a whole command longer than this is cut (with ``…``) in the trace."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            kind: type = type(f.default)
            if kind is bool:
                if not isinstance(value, bool):
                    raise InvalidInputError(f"setting {f.name} must be True or False, got {reprlib.repr(value)}")
                continue
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidInputError(f"setting {f.name} must be a whole number, got {reprlib.repr(value)}")
            if kind is float and (isinstance(value, bool) or not isinstance(value, int | float) or value != value):
                raise InvalidInputError(f"setting {f.name} must be a number, got {reprlib.repr(value)}")
            if value < 0 if f.name in _MAY_BE_ZERO else value <= 0:
                raise InvalidInputError(f"setting {f.name} must be positive, got {value}")
        if self.kappa < 4:
            raise InvalidInputError("setting kappa must be at least 4 tokens (one character can take 4)")
        if not self.lam < 1:
            raise InvalidInputError("setting lam (lambda) must be below 1")
        shares = (
            "rho", "agent_auto_rho", "agent_trace_share", "auto_long_turn", "auto_turn_vector", "auto_turn_room",
            "auto_session_vector", "auto_assistant_turns",
        )  # fmt: skip
        if not max(getattr(self, name) for name in shares) <= 1:
            raise InvalidInputError(f"settings {', '.join(shares)} must be at most 1")
        if not (self.auto_alpha <= 1 and self.auto_neighbour < 1 and self.auto_rho <= self.rho):
            raise InvalidInputError("settings: auto_alpha <= 1, auto_neighbour < 1 and auto_rho <= rho are required")


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


refuse_unknown_arguments(Settings)


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
