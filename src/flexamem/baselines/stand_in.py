"""A deterministic stand-in for an LLM, shipped for tests: each baseline prompt names its task on its
first line, and the stand-in answers it by a fixed rule over the prompt's own words (no network, the
same answer every time). It exercises the baselines' logic, not their quality."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence

from flexamem.llm.client import Completion, Message
from flexamem.text import content_words
from flexamem.tokens import counter

_ID_LINE = re.compile(r"^\[(\d+)\]\s*(.*)$", re.M)


def _section(prompt: str, head: str) -> str:
    """The text after ``head`` up to the next blank-line-separated upper-case heading."""
    at = prompt.find(head)
    if at < 0:
        return ""
    rest = prompt[at + len(head) :]
    end = re.search(r"\n\n[A-Z][A-Z ]+:", rest)
    return rest[: end.start()] if end else rest


def _top_words(text: str, n: int) -> list[str]:
    return [w for w, _ in Counter(content_words(text)).most_common(n)]


def _overlap(a: str, b: str) -> int:
    return len(set(content_words(a)) & set(content_words(b)))


class StandInModel:
    """A ``ChatModel`` answering the baselines' prompts by rule (see the module docstring)."""

    name = "stand-in"

    def __init__(self) -> None:
        self.counter = counter()

    def _answer(self, prompt: str) -> str:
        task = prompt.split("\n", 1)[0].removeprefix("TASK:").strip()
        body = prompt.split("\n", 1)[1] if "\n" in prompt else ""
        if task == "note":
            part = _section(prompt, "PART:")
            first = re.split(r"(?<=[.!?])\s", part.strip(), maxsplit=1)[0]
            words = _top_words(part, 8)
            return json.dumps({"keywords": words, "tags": words[:3], "context": " ".join(first.split()[:25])})
        if task == "links":
            new = _section(prompt, "NEW NOTE:")
            ids = [
                int(i) for i, text in _ID_LINE.findall(_section(prompt, "EARLIER NOTES:")) if _overlap(new, text) >= 2
            ]
            return json.dumps({"links": ids[:3]})
        if task == "evolve":
            new_words = _top_words(_section(prompt, "NEW NOTE:"), 2)
            linked = _ID_LINE.findall(_section(prompt, "LINKED NOTES:"))
            return json.dumps({"updates": [{"id": int(i), "tags": new_words, "context": t[:160]} for i, t in linked]})
        if task == "summary":
            limit = int(re.search(r"At most (\d+) words", body).group(1))  # type: ignore[union-attr]
            old = _section(prompt, "SUMMARY SO FAR:").strip()
            new = " ".join(line.split(":", 1)[-1].strip() for line in _section(prompt, "NEXT PART:").splitlines()[:3])
            words = (old + " " + new).split()
            return " ".join(words[-limit:])
        if task == "importance":
            part = _section(prompt, "PART:")
            return "high" if re.search(r"\d", part) and re.search(r"\b[A-Z][a-z]+", part) else "medium"
        if task == "compress":
            return " ".join(_section(prompt, "PART:").split()[:70])
        if task == "gist":
            limit = int(re.search(r"at most (\d+) words", body).group(1))  # type: ignore[union-attr]
            raw = prompt.split("\n", 5)[-1]
            lines = [" ".join(line.split()[:10]) for line in raw.splitlines() if line.strip()]
            return " ".join(" ".join(lines).split()[:limit])
        if task == "pick":
            k = int(re.search(r"at most (\d+)", body).group(1))  # type: ignore[union-attr]
            question = prompt.rsplit("QUESTION:", 1)[-1]
            scored = [(_overlap(question, text), int(i)) for i, text in _ID_LINE.findall(_section(prompt, "GISTS:"))]
            best = [i for s, i in sorted(scored, key=lambda x: (-x[0], x[1])) if s > 0][:k]
            return json.dumps({"pages": best})
        if task == "summarize":
            part = _section(prompt, "PART:")
            return json.dumps({"summary": " ".join(part.split()[:50]), "keywords": _top_words(part, 10)})
        if task == "filter":
            question = prompt.rsplit("QUESTION:", 1)[-1]
            listed = _ID_LINE.findall(_section(prompt, "CANDIDATES:"))
            return json.dumps({"keep": [int(i) for i, text in listed if _overlap(question, text) > 0]})
        return "I do not know this task."

    def complete(self, messages: Sequence[Message], *, max_tokens: int = 512, json_mode: bool = False) -> Completion:
        prompt = "\n".join(m["content"] for m in messages)
        text = self._answer(prompt)
        return Completion(text, self.name, self.counter.count(prompt), min(self.counter.count(text), max_tokens))

    async def acomplete(
        self, messages: Sequence[Message], *, max_tokens: int = 512, json_mode: bool = False
    ) -> Completion:
        return self.complete(messages, max_tokens=max_tokens, json_mode=json_mode)
