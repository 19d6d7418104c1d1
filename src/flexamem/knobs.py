"""Knobs: a setting's value, its rule and its calibration grid, declared once, on its field.

Every number the algorithm uses is a field of a frozen dataclass made with :func:`knob`, in the module
whose code reads it (a ranker's settings sit beside the ranker). The field carries what a value must be
(positive, or zero allowed; at most / below a bound; at least a minimum), whether it shapes what is
written (``write``), and the values the cross-fold calibration tries (``grid``). :func:`check_knobs`
checks an instance against its fields, so no list of names is kept by hand anywhere else.
"""

from __future__ import annotations

import reprlib
from dataclasses import Field, field, fields
from typing import Any

from flexamem.errors import InvalidInputError


def knob(
    default: bool | int | float,
    *,
    zero: bool = False,
    at_most: float | None = None,
    below: float | None = None,
    minimum: float | None = None,
    write: bool = False,
    grid: tuple[Any, ...] = (),
) -> Any:
    """A setting's field: ``default``, and its rule. Numbers must be above 0 (``zero``: 0 or more), at
    most ``at_most``, below ``below`` and at least ``minimum`` when given; ``write`` marks a setting that
    shapes what is stored for a unit (a history records it at its first write); ``grid``: the values
    ``scripts/crossfold.py`` scores out of fold."""
    rule = {"zero": zero, "at_most": at_most, "below": below, "minimum": minimum, "write": write, "grid": grid}
    return field(default=default, metadata={"knob": rule})


def rule_of(f: Field[Any]) -> dict[str, Any]:
    """The rule :func:`knob` put on a field (empty for a field that is not a knob)."""
    rule: dict[str, Any] = f.metadata.get("knob", {})
    return rule


def check_knobs(obj: object) -> None:
    """:class:`InvalidInputError` naming the first field of ``obj`` (a dataclass of knobs) whose value
    breaks its rule: its type (that of its default), its sign and its bounds."""
    for f in fields(obj):  # type: ignore[arg-type]
        rule = rule_of(f)
        if not rule:
            continue
        name, value = f.name, getattr(obj, f.name)
        kind: type = type(f.default)
        if kind is bool:
            if not isinstance(value, bool):
                raise InvalidInputError(f"setting {name} must be True or False, got {reprlib.repr(value)}")
            continue
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidInputError(f"setting {name} must be a whole number, got {reprlib.repr(value)}")
        if kind is float and (isinstance(value, bool) or not isinstance(value, int | float) or value != value):
            raise InvalidInputError(f"setting {name} must be a number, got {reprlib.repr(value)}")
        if value < 0 if rule["zero"] else value <= 0:
            sign = "0 or more" if rule["zero"] else "positive"
            raise InvalidInputError(f"setting {name} must be {sign}, got {value}")
        if rule["at_most"] is not None and not value <= rule["at_most"]:
            raise InvalidInputError(f"setting {name} must be at most {rule['at_most']}, got {value}")
        if rule["below"] is not None and not value < rule["below"]:
            raise InvalidInputError(f"setting {name} must be below {rule['below']}, got {value}")
        if rule["minimum"] is not None and not value >= rule["minimum"]:
            raise InvalidInputError(f"setting {name} must be at least {rule['minimum']}, got {value}")


__all__ = ["check_knobs", "knob", "rule_of"]
