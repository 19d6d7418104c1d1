"""auto's signals: each owns its settings, checked by the rules on its fields; a new one is one module
(here: this test) and one registration."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

import flexamem as fm
from flexamem.config import knob_grids, setting_names, write_setting_names
from flexamem.knobs import check_knobs, knob
from flexamem.profiles import profile
from flexamem.recover.signals import (
    SIGNALS,
    Fusion,
    Neighbours,
    Phase,
    Rankers,
    Scores,
    TurnLength,
    owners,
    register,
    unregister,
)  # fmt: skip


@dataclass(frozen=True)
class Recency:
    """A signal a user adds: the turns of later units score more (``auto_recency`` per unit of age)."""

    phase: ClassVar[Phase] = "group"

    auto_recency: float = knob(0.0, zero=True, at_most=1, grid=(0.0, 0.5))

    def __post_init__(self) -> None:
        check_knobs(self)

    def apply(self, scores: Scores) -> None:
        if self.auto_recency == 0:
            return
        seqs = scores.history.doc_arrays()[0][scores.starts]
        scores.score = scores.score + self.auto_recency * seqs


@pytest.fixture
def recency() -> Iterator[type[Recency]]:
    register(Recency)
    try:
        yield Recency
    finally:
        unregister(Recency)


def two_units() -> fm.Memory:
    mem = fm.Memory(":memory:")
    mem.add_session([{"speaker": "Ana", "text": "My gym bag is blue."}], session_id="old")
    mem.add_session([{"speaker": "Ana", "text": "The weather was grey all week long."}], session_id="new")
    return mem


def test_a_signal_registered_once_is_a_setting_everywhere(recency: type[Recency]) -> None:
    assert "auto_recency" in setting_names() and knob_grids()["auto_recency"] == (0.0, 0.5)
    s = fm.Settings(auto_recency=0.5)  # by name, as any other setting
    assert s.rankers[Recency].auto_recency == 0.5 and s.value("auto_recency") == 0.5
    with pytest.raises(fm.InvalidInputError, match="auto_recency must be at most 1"):
        fm.Settings(auto_recency=2.0)  # its rule, from its own field
    mem = two_units()
    assert mem.search("gym bag", limit=2)[0].unit_id == "old"
    mem.settings = mem.settings.with_values(auto_recency=0.5)  # the signal now ranks
    assert mem.search("gym bag", limit=2)[0].unit_id == "new"
    # a profile and an override take it as they take any setting
    settings, overrides = profile("auto").with_overrides({"auto_recency": 0.5})
    assert overrides == {"auto_recency": 0.5} and settings.rankers[Recency].auto_recency == 0.5


def test_an_unregistered_signal_is_no_setting() -> None:
    assert Recency not in SIGNALS and "auto_recency" not in setting_names()
    with pytest.raises(fm.InvalidInputError, match="unknown setting"):
        fm.Settings(auto_recency=0.5)
    with pytest.raises(fm.InvalidInputError, match="not a registered signal"):
        Rankers((Recency(),))


def test_a_signal_may_not_take_another_ones_name() -> None:
    @dataclass(frozen=True)
    class Copy:
        phase: ClassVar[Phase] = "group"
        auto_neighbour: float = knob(0.5)

        def apply(self, scores: Scores) -> None:
            pass

    with pytest.raises(fm.InvalidInputError, match="auto_neighbour"):
        register(Copy)
    assert Copy not in SIGNALS


def test_each_setting_has_one_owner_and_settings_compare_by_value() -> None:
    assert owners()["auto_neighbour_reach"] is Neighbours and owners()["auto_turn_room"] is TurnLength
    assert fm.Settings() == fm.Settings(auto_alpha=0.5) == fm.Settings(rankers=Rankers((Fusion(),)))
    changed = fm.Settings(auto_neighbour_reach=2)
    assert changed != fm.Settings() and changed.values()["auto_neighbour_reach"] == 2
    # dataclasses.replace takes a signal's setting by name too (the ablations and the cross-fold grid)
    assert dataclasses.replace(fm.Settings(), auto_neighbour_reach=2) == changed
    assert changed.with_values(k=3).rankers[Neighbours].auto_neighbour_reach == 2
    with pytest.raises(fm.InvalidInputError, match="given twice"):
        Rankers((Fusion(), Fusion(auto_alpha=0.3)))
    # the write settings are the fields that say so, none of them a signal's
    assert "kappa" in write_setting_names() and not set(write_setting_names()) & set(owners())


def test_rules_live_on_the_fields() -> None:
    for bad, match in (
        ({"auto_neighbour": 1.0}, "auto_neighbour must be below 1"),
        ({"auto_neighbour_reach": 0}, "auto_neighbour_reach must be positive"),
        ({"auto_neighbour_reach": 1.5}, "whole number"),
        ({"agent_auto_identifiers": -1.0}, "agent_auto_identifiers must be 0 or more"),
        ({"kappa": 3}, "kappa must be at least 4"),
        ({"rho": 0.01}, "auto_rho <= rho"),
    ):
        with pytest.raises(fm.InvalidInputError, match=match):
            fm.Settings(**bad)  # type: ignore[arg-type]
    assert fm.Settings(auto_alpha=0.0).value("auto_alpha") == 0.0  # the cosine alone is allowed
    assert np.isfinite(fm.Settings().value("auto_turn_room"))
