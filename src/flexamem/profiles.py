"""Named profiles: the defaults a user picks, under stable names that never change meaning.

A profile is a mode and every setting's value, written out here in full, so a later change of a
default (a new calibration) never changes what a named profile renders: it gets a new version. Figures
in docs name the profile that produced them. ``Memory(profile=...)`` (and every door: ``--profile``,
the HTTP ``profile`` field, the MCP server's ``--profile``) takes a name or an alias; explicit settings
still override one field at a time (``Memory(profile=..., settings={"k": 3})``), and a ``Rendering``
says which profile and which overrides produced it.

- ``paper-units-v1``: the paper's unit recovery (fit-or-degrade: raw, excerpt or record) with the
  numbers calibrated for the paper's Table 8 (docs/CALIBRATION.md: ``rho`` 0.25, ``lambda`` 0.7, ``k``
  5, ``E`` 128, ``kappa`` 128);
- ``paper-pieces-v1``: the paper's piece recovery (BM25 over all pieces) with the same numbers;
- ``auto-v1``: ``auto`` as calibrated up to 2026-12-04 (docs/CALIBRATION.md, docs/EVALUATION.md).

Aliases name the newest version of each (``auto``, ``paper-units``, ``paper-pieces``; ``default`` is
``auto``). ``Settings()``'s defaults are the newest ``auto`` profile's values: a test holds them equal,
so changing a default means adding a profile version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flexamem.config import Settings, setting_names
from flexamem.errors import InvalidInputError

# every setting as calibrated up to 2026-12-04 (docs/CALIBRATION.md): the values of auto-v1 and the
# paper's modes v1; written out, not read from Settings' defaults, so they never move
_V1: dict[str, Any] = {
    "kappa": 128,
    "max_unit_tokens": 2000,
    "one_unit_per_session": False,
    "agent_unit_tokens": 1000,
    "links": 3,
    "record_words": 80,
    "merged_words": 150,
    "rho": 0.25,
    "lam": 0.7,
    "k": 5,
    "excerpt_tokens": 128,
    "piece_vectors": True,
    "piece_vector_limit": 128,
    "auto_alpha": 0.5,
    "auto_alpha_spread": 2.0,
    "auto_neighbour": 0.7,
    "auto_neighbour_reach": 5,
    "auto_rho": 0.05,
    "auto_turn_vector": 1.0,
    "auto_turn_length": 1.0,
    "auto_turn_room": 0.1,
    "auto_session_vector": 0.0,
    "auto_assistant_turns": 0.4,
    "auto_long_turn": 0.5,
    "agent_auto_alpha": 1.0,
    "agent_auto_rho": 0.25,
    "agent_auto_identifiers": 3.0,
    "agent_auto_code": 1.0,
    "agent_trace_share": 0.4,
    "agent_query_tokens": 64,
    "agent_trace_line_tokens": 300,
}


@dataclass(frozen=True)
class Profile:
    """A named, versioned choice of mode and settings (every field's value)."""

    name: str
    mode: str
    values: Mapping[str, Any]
    description: str

    @property
    def settings(self) -> Settings:
        return Settings(**dict(self.values))

    def with_overrides(self, overrides: Mapping[str, Any] | Settings | None) -> tuple[Settings, dict[str, Any]]:
        """This profile's settings with ``overrides`` (a mapping of fields, or a whole ``Settings`` whose
        differing fields count as overrides), and the overrides that differ from the profile."""
        base = self.settings
        if overrides is None:
            return base, {}
        if isinstance(overrides, Settings):
            changed = overrides.values()
        elif isinstance(overrides, Mapping):
            changed = dict(overrides)
        else:
            kind = type(overrides).__name__
            raise InvalidInputError(f"settings must be a Settings or a mapping of fields, got {kind}")
        unknown = sorted(set(changed) - set(setting_names()))
        if unknown:
            raise InvalidInputError(f"unknown setting(s) {', '.join(map(str, unknown))}")
        settings = base.with_values(changed)
        return settings, {k: v for k, v in changed.items() if self.values.get(k) != v}


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("auto-v1", "auto", _V1, "auto as calibrated up to 2026-12-04"),
        Profile("paper-units-v1", "units", _V1, "the paper's unit recovery, its numbers as calibrated"),
        Profile("paper-pieces-v1", "pieces", _V1, "the paper's piece recovery, its numbers as calibrated"),
    )
}
ALIASES = {"default": "auto-v1", "auto": "auto-v1", "paper-units": "paper-units-v1", "paper-pieces": "paper-pieces-v1"}
DEFAULT = "auto-v1"


def profile(name: object) -> Profile:
    """The profile a name or alias names, or :class:`InvalidInputError` listing them."""
    if not isinstance(name, str):
        raise InvalidInputError(f"a profile is named by a string, got {type(name).__name__}")
    found = PROFILES.get(ALIASES.get(name.strip(), name.strip()))
    if found is None:
        names = ", ".join([*PROFILES, *ALIASES])
        raise InvalidInputError(f"no profile {name!r}; profiles: {names}")
    return found


__all__ = ["ALIASES", "DEFAULT", "PROFILES", "Profile", "profile"]
