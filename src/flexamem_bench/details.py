"""What a next action reuses from earlier output, read without a model (the agent replay's measures).

- :func:`commands_of`: the commands of one step, wherever they sit: ``bash``/``sh`` fenced blocks in
  the assistant's text (mini-swe-agent's text actions), tool-call arguments (each string leaf, or the
  raw argument string when it is not JSON). Reasoning outside a fenced block is not a command.
- :func:`details_of`: the details of a command: file paths, ``path:line``, line ranges (``120,140``
  of ``sed -n 120,140p``), identifiers of code (dotted names, snake_case and CamelCase of 4+
  characters), test ids (``tests/x.py::test_y``), quoted strings (3+ characters inside the quotes)
  and numbers of 3+ digits.
- :func:`occurs`: a detail is found in a text when it occurs with no letter, digit or ``_`` glued to
  either end (``120`` is not found in ``11203``); JSON string escapes are read as what they stand for.
- :func:`displays_in`: the files a command displays (``cat``, ``nl``, ``head``, ``tail``, ``less``,
  ``more``, ``sed -n``, an editor's ``view``), and :func:`listed_paths`: the paths a listing or a grep
  shows, for the ``file_shown`` measure.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Iterator
from typing import Any

from flexamem.write.units import SHELL_FENCE

_EXT = r"[A-Za-z][A-Za-z0-9]{0,7}"
PATH = re.compile(
    rf"(?<![\w/.-])(?:\.{{0,2}}/)?(?:[\w.-]+/)*[\w-][\w.-]*\.{_EXT}(?![\w/-])|(?<![\w/.-])(?:\.{{0,2}}/)?(?:[\w.-]+/)+[\w.-]+(?![\w/-])"
)
_PATH_LINE = re.compile(rf"(?:[\w.-]+/)*[\w-][\w.-]*\.{_EXT}:\d+(?::\d+)?")
_RANGE = re.compile(r"(?<![\w,])(\d+),(\d+)(?=p?\b)")
_TEST_ID = re.compile(r"(?:[\w.-]+/)*[\w.-]+\.py(?:::[\w\[\]-]+)+")
_DOTTED = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?![\w])")
_WORD = re.compile(r"(?<![\w.])[A-Za-z_]\w{3,}(?![\w])")
_QUOTED = re.compile(r"\"([^\"\n\\]{3,200})\"|'([^'\n\\]{3,200})'")
_NUMBER = re.compile(r"(?<![\w.])\d{3,}(?![\w])")
_DISPLAY = frozenset({"cat", "nl", "head", "tail", "less", "more", "bat", "view"})
_SPLIT = re.compile(r"&&|\|\||[;|\n]")


def leaves(value: Any) -> Iterator[str]:
    """The values of a JSON value (strings, numbers), depth first."""
    if isinstance(value, dict):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v)
    elif not (isinstance(value, bool) or value is None):
        yield str(value)


def commands_of(messages: Iterable[dict[str, Any]]) -> list[str]:
    """The commands of a step's assistant messages (see the module docstring)."""
    out: list[str] = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        content = m.get("content")
        if isinstance(content, str):
            out += [block.strip() for block in SHELL_FENCE.findall(content) if block.strip()]
        for call in m.get("tool_calls") or []:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            args: Any = fn.get("arguments", "") if isinstance(fn, dict) else ""
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError:
                    out.append(str(args))
                    continue
            out += [leaf for leaf in leaves(args) if leaf.strip()]
    return out


def _is_identifier(word: str) -> bool:
    inner = word.strip("_")
    snake = "_" in inner
    camel = any(c.isupper() for c in word[1:]) and any(c.islower() for c in word)
    return len(word) >= 4 and (snake or camel)


def details_of(command: str) -> list[str]:
    """The details of one command, in order of first appearance, each once."""
    whole = [m for rx in (_TEST_ID, _PATH_LINE, PATH) for m in rx.finditer(command)]
    found: list[tuple[int, str]] = [(m.start(), m.group(0)) for m in whole]
    spans = [(m.start(), m.end()) for m in whole]

    def free(m: re.Match[str]) -> bool:  # not a part of a path or test id found above
        return not any(a <= m.start() and m.end() <= b for a, b in spans)

    for m in _RANGE.finditer(command):
        found.append((m.start(), f"{m.group(1)},{m.group(2)}"))
        found += [(m.start(k), m.group(k)) for k in (1, 2) if len(m.group(k)) >= 3]
    found += [(m.start(), m.group(0)) for m in _DOTTED.finditer(command) if free(m) and not PATH.fullmatch(m.group(0))]
    found += [(m.start(), m.group(0)) for m in _WORD.finditer(command) if free(m) and _is_identifier(m.group(0))]
    found += [(m.start(), m.group(1) or m.group(2)) for m in _QUOTED.finditer(command)]
    found += [(m.start(), m.group(0)) for m in _NUMBER.finditer(command) if free(m)]
    return list(dict.fromkeys(d.strip() for _, d in sorted(found, key=lambda x: x[0]) if len(d.strip()) >= 3))


def readable(text: str) -> str:
    """``text`` plus, where it holds JSON string escapes (tool-call arguments shown as JSON), the same
    text with them read (``\\"`` as ``"``, ``\\n`` as a new line)."""
    if "\\" not in text:
        return text
    unescaped = text.replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\\t", "\t")
    return text + "\n" + unescaped.replace("\x00", "\\")


def _pattern(detail: str) -> re.Pattern[str]:
    left = r"(?<![\w])" if re.match(r"\w", detail) else ""
    right = r"(?![\w])" if re.search(r"\w$", detail) else ""
    return re.compile(left + re.escape(detail) + right)


def occurs(detail: str, text: str) -> bool:
    """Whether ``detail`` occurs in ``text`` with nothing word-like glued to its ends."""
    return detail in text and _pattern(detail).search(text) is not None


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, comments=True)
    except ValueError:
        return segment.split()


def displays_in(command: str) -> list[tuple[str, str]]:
    """(path, the command segment) for each file the command displays: ``cat``/``nl``/``head``/
    ``tail``/``less``/``more`` of a file, ``sed -n`` with a file, an editor's ``view`` (a segment
    that redirects output or reads a here-document writes, it does not display)."""
    out: list[tuple[str, str]] = []
    for segment in _SPLIT.split(command):
        segment = segment.strip()
        words = _words(segment)
        while words and (("=" in words[0] and not words[0].startswith("-")) or words[0] in ("sudo", "command")):
            words = words[1:]
        if not words or "<<" in segment or re.search(r"(?<![0-9&])>", segment):
            continue
        program = words[0].rsplit("/", 1)[-1]
        args = words[1:]
        if program == "sed":
            if "-n" not in args and not any(a.startswith("-n") for a in args):
                continue
        elif program in ("str_replace_editor", "editor", "str_replace_based_edit_tool"):
            if not args or args[0] != "view":
                continue
        elif program not in _DISPLAY:
            continue
        for a in (a.strip("\"'(){}[],`") for a in args):
            if not a.startswith("-") and PATH.fullmatch(a) and "." in a.rsplit("/", 1)[-1]:
                out.append((_norm(a), segment))
    return out


def _norm(path: str) -> str:
    path = path.removeprefix("/testbed/")
    while path.startswith("./"):
        path = path[2:]
    return path


_LISTED = re.compile(rf"^\s*(?:\./)?((?:[\w.-]+/)*[\w-][\w.-]*\.{_EXT})(?=[:\s*]|$)", re.M)


def listed_paths(output: str) -> list[str]:
    """Paths of files a listing (``ls``, ``find``) or a grep shows: a file path at a line's start."""
    return list(dict.fromkeys(_norm(m.group(1)) for m in _LISTED.finditer(output)))


_PROGRAM = re.compile(r"(?<![\w-])(?:cat|nl|head|tail|less|more|bat|sed|view)\s")


def shown_displays(text: str) -> set[str]:
    """The files whose display command (program and path) a context shows, anywhere in its text
    (a command inside a line, e.g. in a record or a tool call shown as JSON, counts)."""
    out: set[str] = set()
    for line in readable(text).splitlines():
        for m in _PROGRAM.finditer(line):
            segment = _SPLIT.split(line[m.start() :], 1)[0]
            out.update(path for path, _ in displays_in(segment))
    return out
