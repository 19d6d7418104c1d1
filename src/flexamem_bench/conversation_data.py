"""The LoCoMo loader (Maharana et al., 2024): conversations with sessions, dates and QA evidence.

The file is a list of samples ``{sample_id, conversation, qa, ...}``; ``conversation`` holds
``speaker_a``, ``speaker_b``, ``session_<n>`` (lists of turns ``{speaker, dia_id, text, ...}``) and
``session_<n>_date_time``. Image turns also carry ``blip_caption``; like common LoCoMo practice we
append it to the text as ``[shares a photo: caption]`` so the fact is not lost.
The data path comes from the caller (a CLI flag, or the ``FLEXAMEM_DATA`` env var in tests).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flexamem import InvalidInputError

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_SESSION = re.compile(r"^session_(\d+)$")


@dataclass(frozen=True)
class Session:
    session_id: str
    date: str | None
    turns: list[dict[str, str]]


@dataclass(frozen=True)
class Question:
    question: str
    answer: str | None
    evidence: list[str]
    category: int


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    sessions: list[Session]
    questions: list[Question] = field(default_factory=list)

    @property
    def turn_count(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


def default_path() -> Path:
    """``$FLEXAMEM_DATA/locomo/locomo-dev.json`` (``FLEXAMEM_DATA`` defaults to ``../shared/data``)."""
    root = os.environ.get("FLEXAMEM_DATA") or str(Path.cwd().parent / "shared" / "data")
    return Path(root) / "locomo" / "locomo-dev.json"


def _turn(raw: dict[str, Any], where: str) -> dict[str, str]:
    if not isinstance(raw, dict) or "speaker" not in raw or "text" not in raw:
        raise InvalidInputError(f"{where}: a turn needs 'speaker' and 'text'")
    text = str(raw["text"])
    if raw.get("blip_caption"):
        text = f"{text} [shares a photo: {raw['blip_caption']}]"
    turn = {"speaker": str(raw["speaker"]), "text": text}
    if raw.get("dia_id"):
        turn["id"] = str(raw["dia_id"])
    return turn


def parse_sample(sample: dict[str, Any]) -> Conversation:
    sid = str(sample.get("sample_id", "?"))
    conv = sample.get("conversation")
    if not isinstance(conv, dict):
        raise InvalidInputError(f"sample {sid}: no 'conversation' mapping")
    numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION.match(k)))
    sessions = []
    for n in numbers:
        turns = conv[f"session_{n}"]
        if not isinstance(turns, list) or not turns:
            continue
        sessions.append(
            Session(
                session_id=f"session_{n}",
                date=conv.get(f"session_{n}_date_time"),
                turns=[_turn(t, f"sample {sid} session_{n} turn {i}") for i, t in enumerate(turns)],
            )
        )
    questions = []
    for q in sample.get("qa", []):
        if not isinstance(q, dict) or "question" not in q:
            continue
        answer = q.get("answer", q.get("adversarial_answer"))
        questions.append(
            Question(
                question=str(q["question"]),
                answer=None if answer is None else str(answer),
                evidence=[str(e) for e in q.get("evidence", [])],
                category=int(q.get("category", 0)),
            )
        )
    return Conversation(sample_id=sid, sessions=sessions, questions=questions)


def read_json_list(path: str | Path, what: str) -> list[Any]:
    """A JSON file holding a list, or :class:`InvalidInputError` naming the file and the problem."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"cannot read {what} file {path}: {exc}") from exc
    if not isinstance(data, list):
        raise InvalidInputError(f"{path}: expected a list of {what} items")
    return data


def load_locomo(path: str | Path) -> list[Conversation]:
    """All conversations of a LoCoMo JSON file."""
    return [parse_sample(s) for s in read_json_list(path, "LoCoMo")]
