"""What a render returns: the text, its exact token count, and where every unit went."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from flexamem.notes import unit_label

UnitResolution = Literal["raw", "excerpt", "record", "merged", "hidden"]


@dataclass(frozen=True)
class UnitView:
    """How one unit appears in a rendering.

    ``resolution``: ``raw`` / ``excerpt`` (recovered), ``record`` (its own timeline line),
    ``merged`` (inside a merged record) or ``hidden`` (not in this rendering at all).
    ``pieces``: indexes of its pieces shown verbatim (all of them for raw, the chosen ones for an
    excerpt or for piece recovery). ``verbatim_turns``: ids of turns all of whose pieces are shown.
    """

    seq: int
    unit_id: str
    resolution: UnitResolution
    pieces: tuple[int, ...] = ()
    verbatim_turns: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How the rendered text names the unit (``Note.label``)."""
        return unit_label(self.seq)


@dataclass(frozen=True)
class Hit:
    """One turn (a block of a unit: a conversation turn, an agent action or output) as a search ranks
    it: its unit (``seq``, ``unit_id``), the block's index in the unit, the caller's turn id when
    there is one, and its text, verbatim."""

    seq: int
    unit_id: str
    block: int
    turn_id: str | None
    text: str

    @property
    def label(self) -> str:
        return unit_label(self.seq)


@dataclass(frozen=True)
class Rendering:
    """A rendered memory. ``tokens`` is the exact o200k count of ``text``, always ``<= allowance``.

    ``shown`` (where every unit went) is built when first read, so a render costs what it shows,
    not one view per unit of the history; ``views`` is what builds it (or the views themselves)."""

    text: str
    tokens: int
    allowance: int
    mode: str  # the mode asked for (``pass_through`` says when the whole history fitted raw)
    views: Callable[[], list[UnitView]] | Sequence[UnitView] = field(default=(), repr=False, compare=False)
    composition: dict[str, int] = field(default_factory=dict)  # tokens by part (records, raw, ...)
    pass_through: bool = False
    merges_written: int = 0
    timeline_spans: tuple[tuple[int, int, int], ...] = ()  # (first, last, level) after merging
    profile: str | None = None  # the profile that produced it (flexamem.profiles), and the settings that
    overrides: dict[str, Any] = field(default_factory=dict)  # differed from the profile's

    @functools.cached_property
    def shown(self) -> list[UnitView]:
        """One view per unit of the rendered history, in time order (computed once, on first use)."""
        return list(self.views()) if callable(self.views) else list(self.views)

    def view(self, unit_id: str) -> UnitView:
        for v in self.shown:
            if v.unit_id == unit_id:
                return v
        raise KeyError(unit_id)

    @property
    def verbatim_turns(self) -> set[str]:
        return {t for v in self.shown for t in v.verbatim_turns}


def rendering_json(r: Rendering) -> dict[str, Any]:
    """A rendering as JSON (the server's render route, ``flexamem render --json``); read back by
    :func:`rendering_from_json`."""
    return {
        "text": r.text,
        "tokens": r.tokens,
        "allowance": r.allowance,
        "mode": r.mode,
        "pass_through": r.pass_through,
        "composition": dict(r.composition),
        "shown": [
            {
                "unit_id": v.unit_id,
                "label": v.label,
                "resolution": v.resolution,
                "pieces": list(v.pieces),
                "verbatim_turns": list(v.verbatim_turns),
            }
            for v in r.shown
        ],
        "merges_written": r.merges_written,
        "timeline_spans": [list(s) for s in r.timeline_spans],
        "profile": r.profile,
        "overrides": dict(r.overrides),
    }


def rendering_from_json(data: Mapping[str, Any]) -> Rendering:
    """The :class:`Rendering` :func:`rendering_json` wrote (views rebuilt from their labels)."""
    views = [
        UnitView(
            int(v["label"][1:]) - 1,
            v["unit_id"],
            v["resolution"],
            tuple(v["pieces"]),
            tuple(v.get("verbatim_turns", ())),
        )
        for v in data["shown"]
    ]
    return Rendering(
        text=data["text"],
        tokens=data["tokens"],
        allowance=data["allowance"],
        mode=data["mode"],
        views=views,
        composition=dict(data["composition"]),
        pass_through=data["pass_through"],
        merges_written=data.get("merges_written", 0),
        timeline_spans=tuple((int(a), int(b), int(c)) for a, b, c in data.get("timeline_spans", ())),
        profile=data.get("profile"),
        overrides=dict(data.get("overrides") or {}),
    )
