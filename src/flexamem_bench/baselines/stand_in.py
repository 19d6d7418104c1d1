"""A deterministic stand-in for an LLM, shipped for tests: each baseline prompt names its task on its
first line, and the stand-in answers it by a fixed rule over the prompt's own words (no network, the
same answer every time). It exercises the baselines' logic, not their quality."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from flexamem.llm.client import Completion, Message, ToolCall
from flexamem.text import content_words
from flexamem.tokens import counter

_ID_LINE = re.compile(r"^\[(\d+)\]\s*(.*)$", re.M)
_FRAGMENT = re.compile(r"^\[(u\d+) · [^\]]* · (raw|summary|folded[^\]]*)\]", re.M)


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
        if task == "fragment-summary":
            return " ".join(_section(prompt, "PART:").split()[:40])
        if task == "filter":
            question = prompt.rsplit("QUESTION:", 1)[-1]
            listed = _ID_LINE.findall(_section(prompt, "CANDIDATES:"))
            return json.dumps({"keep": [int(i) for i, text in listed if _overlap(question, text) > 0]})
        return "I do not know this task."

    def _sculpt(self, prompt: str) -> list[ToolCall]:
        """Search the goal's words first; then restore the best hit, summarizing and folding the oldest
        full fragments that share no word with the goal; then nothing (done)."""
        done, goal = _section(prompt, "DONE SO FAR:"), prompt.rsplit("GOAL:", 1)[-1]
        if "search_context" not in done:
            return [ToolCall("call_0", "search_context", {"query": " ".join(_top_words(goal, 5))})]
        if "restore_fragment" in done:
            return []
        view = _section(prompt, "MEMORY:")
        heads = list(_FRAGMENT.finditer(view))
        bodies = {m.group(1): view[m.end() : heads[i + 1].start() if i + 1 < len(heads) else len(view)]
                  for i, m in enumerate(heads)}  # fmt: skip
        idle = [m.group(1) for m in heads if m.group(2) == "raw" and _overlap(goal, bodies[m.group(1)]) == 0]
        calls = [ToolCall("call_1", "summarize_fragment", {"fragment_id": u}) for u in idle[:1]]
        calls += [ToolCall("call_2", "fold_fragment", {"fragment_id": u}) for u in idle[1:2]]
        hit = re.search(r"-> (u\d+):", done)
        calls += [ToolCall("call_3", "restore_fragment", {"fragment_id": hit.group(1)})] if hit else []
        return calls

    def complete_tools(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], *, max_tokens: int = 512
    ) -> Completion:
        """Tool calls by rule for the ``sculpt`` task (Sculptor); any other prompt gets no call."""
        prompt = "\n".join(str(m.get("content") or "") for m in messages)
        names = {t["function"]["name"] for t in tools}
        calls = self._sculpt(prompt) if prompt.startswith("TASK: sculpt") else []
        calls = [c for c in calls if c.name in names]
        text = "" if calls else "DONE"
        out = json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls]) + text
        prompt_tokens = self.counter.count(prompt) + self.counter.count(json.dumps(list(tools)))
        return Completion(text, self.name, prompt_tokens, self.counter.count(out), tool_calls=tuple(calls))

    async def acomplete_tools(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], *, max_tokens: int = 512
    ) -> Completion:
        return self.complete_tools(messages, tools, max_tokens=max_tokens)

    def complete(self, messages: Sequence[Message], *, max_tokens: int = 512, json_mode: bool = False) -> Completion:
        prompt = "\n".join(m["content"] for m in messages)
        text = self._answer(prompt)
        return Completion(text, self.name, self.counter.count(prompt), min(self.counter.count(text), max_tokens))

    async def acomplete(
        self, messages: Sequence[Message], *, max_tokens: int = 512, json_mode: bool = False
    ) -> Completion:
        return self.complete(messages, max_tokens=max_tokens, json_mode=json_mode)
