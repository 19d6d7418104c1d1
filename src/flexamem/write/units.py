"""Validating input and cutting it into units (SPEC section 1).

Reader side: a session is cut before user turns into spans of at most ``max_unit_tokens`` (~2,000)
tokens, or kept whole (``one_unit_per_session``, as the paper does on LoCoMo). Agent side: consecutive
steps are packed into one unit while it stays within ``agent_unit_tokens`` (1,000); a larger step is a
unit on its own.

Normalisation (documented in the README): text may be ``str`` or UTF-8 ``bytes``; ``\\r\\n`` and ``\\r``
become ``\\n``; nothing else is changed, so exact strings survive verbatim.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from flexamem.chat import message_turn
from flexamem.errors import InvalidInputError
from flexamem.notes import Block, Step, Turn, UnitDraft
from flexamem.text import clean_field, clean_text
from flexamem.tokens import TokenCounter

TURN_FIELDS = frozenset({"speaker", "text", "id", "role"})
LABEL_COMMAND_CHARS = 60
SHELL_FENCE = re.compile(r"```(?:[\w-]*bash[\w-]*|sh|shell|console|zsh)[ \t]*\n(.*?)```", re.S)
_CALL = re.compile(r"^(?:\[tool call [^\]\n]*\] )?([A-Za-z_][\w.-]*)\((\{.*\})\)[ \t]*$", re.M)


def command_text(action: str) -> str | None:
    """The command a step ran, whole, or None when its action is no command.

    A command is a tool call written as ``name({...})`` (as the adapters and the trajectory readers
    write them) whose one argument is a string holding a space or a new line (a shell command:
    ``bash: ls -la``; several such calls are joined with ``;``), or else the first shell fenced block
    of the text (``bash``, ``sh``, ``mswea_bash_command``...: mini-swe-agent's text actions).
    Reasoning around the command is no part of it; calls with structured arguments (ids, fields) and
    plain replies are no commands."""
    calls = []
    for m in _CALL.finditer(action):
        try:
            args = json.loads(m.group(2))
        except json.JSONDecodeError:
            continue
        one = next(iter(args.values())) if isinstance(args, dict) and len(args) == 1 else None
        if isinstance(one, str) and any(c in one.strip() for c in " \n"):
            calls.append(f"{m.group(1)}: {one.strip()}")
    if calls:
        return " ; ".join(calls)
    fence = SHELL_FENCE.search(action)
    return fence.group(1).strip() or None if fence is not None else None


def command_of(action: str) -> str | None:
    """:func:`command_text` on one line (:func:`first_line`)."""
    text = command_text(action)
    return first_line(text) if text is not None else None


def first_line(command: str) -> str | None:
    """A command's first non-blank line, and `` …`` when it has more; None when it is blank."""
    lines = [line.strip() for line in command.splitlines() if line.strip()]
    if not lines:
        return None
    return lines[0] + (" …" if len(lines) > 1 else "")


def parse_turns(turns: Iterable[Mapping[str, Any] | Turn]) -> list[Turn]:
    """Validate caller turns: dicts with ``speaker`` and ``text`` (``id`` and ``role`` optional), or
    OpenAI chat messages (``role``, ``content``, ``tool_calls``...; see :func:`flexamem.chat.message_turn`)."""
    if isinstance(turns, str | bytes | Mapping) or not isinstance(turns, Iterable):
        raise InvalidInputError("turns must be a list of turns ({'speaker': ..., 'text': ...} dicts)")
    out: list[Turn] = []
    for i, turn in enumerate(turns):
        where = f"turn {i}"
        if isinstance(turn, Turn):
            turn = {"speaker": turn.speaker, "text": turn.text, "id": turn.id, "role": turn.role}
        if isinstance(turn, Mapping) and "text" not in turn and ("content" in turn or "tool_calls" in turn):
            turn = message_turn(turn, where)  # an OpenAI chat message
        if not isinstance(turn, Mapping):
            raise InvalidInputError(f"{where} must be a mapping with 'speaker' and 'text'")
        unknown = [repr(k) for k in turn if k not in TURN_FIELDS]
        if unknown:
            raise InvalidInputError(
                f"{where} has unknown field(s) {', '.join(unknown)}; allowed: {sorted(TURN_FIELDS)}"
            )
        if turn.get("speaker") is None:
            raise InvalidInputError(f"{where} has no speaker")
        speaker = clean_field(turn["speaker"], f"{where} speaker", speaker=True)
        text = clean_text(turn.get("text"), f"{where} text")
        tid = turn.get("id")
        if isinstance(tid, int) and not isinstance(tid, bool):
            tid = str(tid)
        role = turn.get("role")
        out.append(
            Turn(
                speaker=speaker,
                text=text,
                id=None if tid is None else clean_field(tid, f"{where} id"),
                role=None if role is None else clean_field(role, f"{where} role").lower(),
            )
        )
    if not out:
        raise InvalidInputError("a session needs at least one turn")
    return out


def turn_blocks(turns: Sequence[Turn]) -> list[Block]:
    """One block per turn, ``"Speaker: text"``, offsets as if joined by newlines."""
    blocks, pos = [], 0
    for t in turns:
        text = f"{t.speaker}: {t.text}"
        blocks.append(Block(kind="turn", text=text, label=t.speaker, start=pos, source_id=t.id))
        pos += len(text) + 1
    return blocks


def step_blocks(steps: Sequence[Step], start: int = 0) -> list[Block]:
    """Two blocks per step: the action and its output, each under a ``[step N]`` header."""
    blocks, pos = [], start
    for s in steps:
        command = (command_of(s.action) or s.action.strip().split("\n", 1)[0])[:LABEL_COMMAND_CHARS]
        for kind, text, label in (
            ("action", f"[step {s.number}] {s.actor}: {s.action}", f"step {s.number}"),
            ("output", f"[step {s.number}] output: {s.observation}", f"step {s.number} · output of {command}"),
        ):
            blocks.append(
                Block(kind=kind, text=text, label=label, start=pos, source_id=f"step {s.number}", step=s.number)  # type: ignore[arg-type]
            )
            pos += len(text) + 1
    return blocks


def _rebase(blocks: Sequence[Block]) -> tuple[str, tuple[Block, ...]]:
    """Join blocks into raw text, re-computing their offsets from zero."""
    out, pos = [], 0
    for b in blocks:
        out.append(Block(kind=b.kind, text=b.text, label=b.label, start=pos, source_id=b.source_id, step=b.step))
        pos += len(b.text) + 1
    return "\n".join(b.text for b in blocks), tuple(out)


def cut_session(
    turns: Sequence[Turn],
    counter: TokenCounter,
    *,
    session_id: str,
    date: str | None,
    max_unit_tokens: int,
    one_unit: bool = False,
) -> list[UnitDraft]:
    """Cut one session into units: before user turns, each span within ``max_unit_tokens``.

    When no turn carries ``role="user"`` (two human speakers, as in LoCoMo) any turn may start a span.
    A turn is never split: one larger than the limit is a unit on its own.
    """
    blocks = turn_blocks(turns)
    sizes = counter.count_many([b.text for b in blocks])
    has_roles = any(t.role == "user" for t in turns)
    groups: list[list[int]] = [[]]
    total = 0
    for i, turn in enumerate(turns):
        can_cut = not has_roles or turn.role == "user"
        if not one_unit and groups[-1] and can_cut and total + sizes[i] + 1 > max_unit_tokens:
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += sizes[i] + 1
    units = []
    for k, group in enumerate(groups):
        raw, rebased = _rebase([blocks[i] for i in group])
        unit_id = session_id if len(groups) == 1 else f"{session_id}/{k}"
        units.append(
            UnitDraft(unit_id=unit_id, kind="conversation", raw=raw, blocks=rebased, session_id=session_id, date=date)
        )
    return units


def free_session_id(history: Any) -> str:
    """The name of a library-named session: ``s<n>`` for the first ``n`` past the history's session
    count that no session or unit of the history holds (a caller's own ``s2`` is never reused)."""
    used = {n.session_id for n in history.notes}
    k = len(used) + 1
    while f"s{k}" in used or f"s{k}" in history.unit_ids:
        k += 1
    return f"s{k}"


def relabel_drafts(drafts: Sequence[UnitDraft], session_id: str) -> list[UnitDraft]:
    """The same units (as cut by :func:`cut_session`) under another session id."""
    if len(drafts) == 1:
        return [dataclasses.replace(drafts[0], unit_id=session_id, session_id=session_id)]
    return [dataclasses.replace(d, unit_id=f"{session_id}/{k}", session_id=session_id) for k, d in enumerate(drafts)]


def pack_steps(step_tokens: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Group consecutive step indexes: a unit grows while it stays within ``max_tokens``."""
    groups: list[list[int]] = []
    total = 0
    for i, size in enumerate(step_tokens):
        if groups and total + size <= max_tokens:
            groups[-1].append(i)
            total += size
        else:
            groups.append([i])
            total = size
    return groups


def agent_unit(steps: Sequence[Step], *, unit_id: str, session_id: str | None = None) -> UnitDraft:
    """One agent unit from consecutive steps."""
    if not steps:
        raise InvalidInputError("an agent unit needs at least one step")
    raw, blocks = _rebase(step_blocks(steps))
    return UnitDraft(
        unit_id=unit_id,
        kind="agent",
        raw=raw,
        blocks=blocks,
        session_id=session_id,
        steps=(steps[0].number, steps[-1].number),
    )


ERASED_MARK = "(erased)"  # what a render shows where erased words were, when the eraser asks for it


def erased_draft(unit: UnitDraft | Any, erased: Callable[[Block], bool], *, marker: bool = False) -> UnitDraft:
    """``unit`` (a draft or a note) without the blocks ``erased`` names, as a draft (its id, session,
    date and steps kept). With ``marker``, one block :data:`ERASED_MARK` stands where each erased turn
    was (``[step N] (erased)`` for an agent step's blocks), so a turn's place (``unit#n``) stays the
    place it was written at; a marker names no turn or step, so it is never erased again and a record is
    written without it. No words left: a draft of one marker (without ``marker``: of no block)."""
    kept: list[Block] = []
    real = 0
    last_marked: object = None
    for b in unit.blocks:
        if is_marker(b) or not erased(b):
            kept.append(b)
            real += not is_marker(b)
            last_marked = None
            continue
        key = b.step if b.step is not None else id(b)  # one marker a step, one a turn
        if marker and key != last_marked:
            text = ERASED_MARK if b.step is None else f"[step {b.step}] {ERASED_MARK}"
            kept.append(Block(kind=b.kind, text=text, label="" if b.step is None else f"step {b.step}", start=0))
        last_marked = key
    if not real:  # no words left: one marker (with ``marker``), else nothing
        kept = [b for b in kept if is_marker(b)][:1] if marker else []
    raw, blocks = _rebase(kept)
    return UnitDraft(
        unit_id=unit.unit_id, kind=unit.kind, raw=raw, blocks=blocks, session_id=unit.session_id, date=unit.date,
        steps=unit.steps,
    )  # fmt: skip


def is_marker(block: Block) -> bool:
    """Whether ``block`` is an erasure's marker (:func:`erased_draft`), not stored words: a turn block
    always has a speaker for its label and an agent block its step, which a marker has not."""
    if block.source_id is not None or block.step is not None:
        return False
    return block.kind != "turn" or (block.label == "" and block.text == ERASED_MARK)


def step_text_tokens(step: Step, counter: TokenCounter) -> int:
    """Tokens one step adds to a unit (both blocks and their separators)."""
    return sum(counter.count(b.text) + 1 for b in step_blocks([step]))
