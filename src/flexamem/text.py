"""Small text helpers shared by the writer, the BM25 index and the baselines.

``content_words`` is the one definition of "content word" in the library (SPEC section 6): lower-cased
word tokens with markup and stop words removed. BM25 documents and queries both go through it, so the
two sides can never disagree.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import Any

from flexamem.errors import InvalidInputError

# A compact English stop list (function words, auxiliaries, pronouns, chat fillers).
STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren",
        "arent",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "cannot",
        "could",
        "couldn",
        "did",
        "didn",
        "didnt",
        "do",
        "does",
        "doesn",
        "doesnt",
        "doing",
        "don",
        "dont",
        "down",
        "during",
        "each",
        "else",
        "ever",
        "few",
        "for",
        "from",
        "further",
        "get",
        "got",
        "had",
        "hadn",
        "has",
        "hasn",
        "have",
        "haven",
        "having",
        "he",
        "hed",
        "hell",
        "hes",
        "her",
        "here",
        "heres",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "hows",
        "i",
        "id",
        "ill",
        "im",
        "ive",
        "if",
        "in",
        "into",
        "is",
        "isn",
        "isnt",
        "it",
        "its",
        "itself",
        "just",
        "lets",
        "like",
        "ll",
        "me",
        "more",
        "most",
        "much",
        "must",
        "mustn",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "oh",
        "ok",
        "okay",
        "on",
        "once",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "re",
        "s",
        "same",
        "shall",
        "shan",
        "she",
        "shed",
        "shell",
        "shes",
        "should",
        "shouldn",
        "so",
        "some",
        "such",
        "t",
        "than",
        "that",
        "thats",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "theres",
        "these",
        "they",
        "theyd",
        "theyll",
        "theyre",
        "theyve",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "upon",
        "us",
        "ve",
        "very",
        "was",
        "wasn",
        "we",
        "wed",
        "well",
        "were",
        "weren",
        "weve",
        "what",
        "whats",
        "when",
        "whens",
        "where",
        "wheres",
        "which",
        "while",
        "who",
        "whos",
        "whom",
        "why",
        "whys",
        "will",
        "with",
        "won",
        "wont",
        "would",
        "wouldn",
        "yeah",
        "yes",
        "you",
        "youd",
        "youll",
        "your",
        "youre",
        "yours",
        "yourself",
        "yourselves",
        "youve",
        "d",
        "m",
        "o",
        "y",
        "really",
        "gonna",
        "wanna",
        "hey",
        "hi",
        "hello",
        "thanks",
        "thank",
    ]
)

_MARKUP = re.compile(r"<[^>\n]{1,200}>|&[a-z]+;|https?://\S+|!\[[^\]]*\]\([^)]*\)")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
# an apostrophe between two word characters, found from the apostrophe (a pattern that starts with a
# character set is scanned for fast; one that starts with a lookbehind is tried at every position)
_JOINING_APOSTROPHE = re.compile(r"['’](?<=[^\W_]['’])(?=[^\W_])")
# lower-cased ASCII text (most of it) is split by one translation of its bytes instead of the word
# pattern: digits and letters kept, every other byte a space. The same words: tests/test_text.py.
_ASCII_WORD_BYTES = bytes(c if 48 <= c <= 57 or 97 <= c <= 122 else 32 for c in range(256))


def words(text: str) -> list[str]:
    """Lower-cased word tokens after removing markup (HTML tags, entities, URLs, image links); an
    apostrophe between two word characters joins them ("don't" -> "dont")."""
    if "<" in text or "&" in text or "http" in text or "![" in text:  # what markup needs to match
        text = _MARKUP.sub(" ", text)
    text = text.lower()
    if "'" in text or "’" in text:
        text = _JOINING_APOSTROPHE.sub("", text)
    if text.isascii():  # the bulk of a history's load: ~3x faster than the pattern (docs/PERFORMANCE.md)
        return text.encode().translate(_ASCII_WORD_BYTES).decode().split()
    return _WORD.findall(text)


def content_words(text: str) -> list[str]:
    """Words minus stop words, in order, with repeats (BM25 documents keep term frequencies)."""
    return [w for w in words(text) if w not in STOP_WORDS]


def query_terms(text: str) -> list[str]:
    """The BM25 query: the SET of content words, in first-seen order."""
    return list(dict.fromkeys(content_words(text)))


# How a question refers to the one who asks it and to the one it is asked of (words() drops apostrophes)
FIRST_PERSON = frozenset(["i", "me", "my", "mine", "myself", "im", "ive"])
OTHER_PARTY = frozenset(
    ["you", "your", "yours", "yourself", "yourselves", "youre", "youve", "youd", "youll", "assistant"]
)


def asks_about_asker(text: str) -> bool:
    """Whether a question speaks of its asker ("what did I buy?", "my cousin") without addressing or
    naming the other party ("what did you recommend?", "what did the assistant say?"): what it asks
    was said by the asker."""
    found = set(words(text))
    return not found.isdisjoint(FIRST_PERSON) and found.isdisjoint(OTHER_PARTY)


def joined_query_terms(texts: Sequence[str], terms: Sequence[Sequence[str]]) -> list[str]:
    """``query_terms("\\n".join(texts))`` from each text's own query terms (``terms``): a word never
    spans a line break, and markup spans one only as an image link opened (``![``) in a text before
    the last, which is then read whole."""
    if any("![" in text for text in texts[:-1]):
        return query_terms("\n".join(texts))
    return list(dict.fromkeys(term for group in terms for term in group))


def is_identifier(word: str) -> bool:
    """A word that names something exactly: at least 4 characters holding a digit (an id, a code, a
    number, a year), as agents pass them back verbatim in their next calls."""
    return len(word) >= 4 and _DIGIT.search(word) is not None


_DIGIT = re.compile(r"\d")
_CODE_TOKEN = re.compile(r"[A-Za-z_][\w./-]*\w")
_CODE_SPLIT = re.compile(r"[./]")


def _is_code_name(token: str) -> bool:
    inner = token.strip("_")
    return (
        len(token) >= 4
        and not _DIGIT.search(token)
        and (
            "_" in inner
            or "." in token
            or "/" in token
            or (token[0].islower() and any(c.isupper() for c in token))
            or (token[0].isupper() and any(c.isupper() for c in token[1:]) and any(c.islower() for c in token))
        )
    )


def code_terms(text: str) -> list[str]:
    """Names of code, kept whole and exact: snake_case, dotted names, paths and CamelCase of 4+
    characters (``join.table_alias``, ``sql/query.py``, ``FilteredRelation``), each with the parts of a
    dotted name or path that are names themselves (``table_alias``, ``query.py``); repeats kept. Plain
    words are left to BM25 over words, which splits these names; JSON object keys and names holding a
    digit (ids and codes of data, such as ``sara_doe_496``: BM25 keeps their digit parts) are left out."""
    out: list[str] = []
    for m in _CODE_TOKEN.finditer(text):
        if text.startswith('":', m.end()) and m.start() > 0 and text[m.start() - 1] == '"':
            continue  # a JSON object's key: the schema of a tool output, not a name the agent chose
        token = m.group(0).rstrip(".-/")
        if not _is_code_name(token):
            continue
        out.append(token)
        if "." in token or "/" in token:
            parts = _CODE_SPLIT.split(token)
            out += [p for p in parts if p != token and _is_code_name(p)]
            base = token.rsplit("/", 1)[-1]
            if base != token and _is_code_name(base):
                out.append(base)
    return out


_STEMS: dict[str, str] = {}


def stem(word: str) -> str:
    """The Snowball (Porter 2) English stem of one content word; a word holding a digit (a code, an id,
    a number, a date) is kept exactly as it is. Cached per word."""
    s = _STEMS.get(word)
    if s is None:
        s = word if _DIGIT.search(word) else _stemmer().stemWord(word)
        if len(_STEMS) < 500_000:
            _STEMS[word] = s
    return s


def stemmed(terms: Iterable[str]) -> list[str]:
    """:func:`stem` of each word: the same terms on both sides of ``auto``'s BM25."""
    get = _STEMS.get
    return [get(t) or stem(t) for t in terms]


@functools.cache
def _stemmer() -> Any:
    import snowballstemmer  # type: ignore[import-untyped]

    return snowballstemmer.stemmer("english")


def word_count(text: str) -> int:
    return len(text.split())


def cut_words(text: str, limit: int, mark: str = " (…)") -> str:
    """At most ``limit`` whitespace-separated words, the cut mark counted as one of them."""
    parts = text.split()
    if len(parts) <= limit:
        return " ".join(parts)
    return " ".join(parts[: max(limit - 1, 0)]) + mark


def clean_text(value: Any, what: str, *, allow_empty: bool = False) -> str:
    """Decode and normalise one text field, or raise :class:`InvalidInputError` naming it."""
    if isinstance(value, bytes | bytearray):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInputError(f"{what} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{what} holds a lone surrogate at character {exc.start}") from exc
    if "\x00" in value:
        raise InvalidInputError(f"{what} holds a NUL character")
    text: str = value.replace("\r\n", "\n").replace("\r", "\n")
    if not allow_empty and not text.strip():
        raise InvalidInputError(f"{what} is empty or whitespace only")
    return text


# -- what a render may show of stored text (docs/RENDERING.md, "Structure no stored text can forge") --
# characters that act on a terminal or a reader rather than being read: C0 controls but tab and line
# feed, DEL, C1 controls (NEL among them), bidi marks, embeddings, overrides and isolates, the line and
# paragraph separators and the byte-order mark; and ``<|``, which opens every special-token string
# (``<|endoftext|>``, ``<|im_start|>``, ``<|eot_id|>`` ...)
UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ufeff]|<\|")
LINE_BREAKS = re.compile(r"[\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
SPEAKER_FORBIDDEN = ("[", "]", "·", "│", ": ")  # a speaker holding one could pose as a header, a label or a turn


def visible(ch: str) -> str:
    """How a render shows one unsafe character (or ``<|``): a C0 control as its Unicode control
    picture (ESC -> ␛, BEL -> ␇), DEL as ␡, ``<|`` as ``<\\|``, any other as ``<U+XXXX>``: inert, and
    still there to be seen."""
    if ch == "<|":
        return "<\\|"
    code = ord(ch)
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "\u2421"
    return f"<U+{code:04X}>"


def inert(text: str) -> str:
    """``text`` with every unsafe character (and ``<|``) shown by :func:`visible`; unchanged (the same
    object) when it holds none, the common case."""
    if UNSAFE.search(text) is None:
        return text
    return UNSAFE.sub(lambda m: visible(m.group()), text)


def clean_field(value: Any, what: str, *, speaker: bool = False) -> str:
    """A one-line field a render shows in its structure (a speaker, an actor, a date, a session or
    turn id), stripped, or :class:`InvalidInputError`: no line break and no control, bidi or
    special-token text; a speaker (or actor) also holds none of ``[ ] · │ ": "``, does not begin with
    ``(`` and does not end with ``:``, so that no speaker can pose as a header, a label or another turn."""
    text = clean_text(value, what).strip()
    if LINE_BREAKS.search(text):
        raise InvalidInputError(f"{what} spans several lines")
    bad = UNSAFE.search(text)
    if bad is not None:
        raise InvalidInputError(f"{what} holds {visible(bad.group())!r}, a control or special-token text")
    if speaker:
        held = [s for s in SPEAKER_FORBIDDEN if s in text]
        if held or text.startswith("(") or text.endswith(":"):
            shown = held[0] if held else "(" if text.startswith("(") else ":"
            raise InvalidInputError(
                f"{what} {text[:60]!r} holds {shown!r}: a speaker may not hold [ ] · │ or ': ', begin with '('"
                " or end with ':' (it would read as the memory's own structure)"
            )
    return text
