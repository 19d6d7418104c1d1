"""config.py: what a type checker is told of ``Settings(...)`` is what it takes at run time."""

from __future__ import annotations

import ast
import inspect
from dataclasses import fields

import flexamem as fm
from flexamem import config


def checker_init() -> ast.FunctionDef:
    """The ``__init__`` that ``Settings`` declares under ``TYPE_CHECKING`` (its source, parsed)."""
    tree = ast.parse(inspect.getsource(config))
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Settings"]
    found = [
        f
        for block in cls.body
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for f in block.body
        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
    ]
    assert len(found) == 1
    return found[0]


def test_the_type_checkers_settings_are_the_fields_in_their_order() -> None:
    """The declared parameters are the dataclass's fields (names, order, types), then any knob by name:
    a field added or retyped without its parameter fails here, not in a user's type check."""
    init = checker_init()
    declared = [(a.arg, ast.unparse(a.annotation) if a.annotation else None) for a in init.args.args[1:]]
    assert declared == [(f.name, str(f.type)) for f in fields(fm.Settings)]
    assert init.args.kwarg is not None and init.args.kwarg.arg == "knobs"
    assert len(init.args.defaults) == len(declared)  # each may be left out
