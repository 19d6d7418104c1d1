"""Small text helpers shared by the writer, the BM25 index and the baselines.

``content_words`` is the one definition of "content word" in the library (SPEC section 6): lower-cased
word tokens with markup and stop words removed. BM25 documents and queries both go through it, so the
two sides can never disagree.
"""

from __future__ import annotations

import functools
import re
import unicodedata
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

# -- how a reader sees a field: look-alikes of the memory's own marks (docs/RENDERING.md) -------------
# Each character below is read as the mark it resembles; the list is explicit (no Unicode property
# groups exactly the shapes a reader confuses with these marks). NFKC already maps the full-width,
# half-width, small and vertical presentation forms of most of them (［ ］ ︇ ﹇ ｜ ￨ ： ﹕ （ ﹙ ...),
# which are listed too where their NFKC form is not the mark itself.
_SQUARE_OPEN = (
    "[\uff3b\ufe47"  # [ and its full-width and vertical forms
    "\u27e6\u3010\u3014\u3016\u3018\u301a"  # ⟦ 【 〔 〖 〘 〚
    "\u27e8\u2329\u3008\u27ea\u300a"  # ⟨ 〈 〈 ⟪ 《 (angle brackets)
    "\u300c\u300e\uff62\ufe41\ufe43"  # 「 『 (corner brackets) and their forms
    "\u2045\u298b\u298d\u298f\u2997\u23a1\u23a2\u23a3\u2308\u230a\u27ec\u2e22\u2e24"  # ⁅ ⦋ ⦍ ⦏ ⦗ ⎡ ⎢ ⎣ ⌈ ⌊ ⟬ ⸢ ⸤
    "\ufe5d\ufe3b\ufe17\ufe39\ufe3f\ufe3d\ufe5b"  # small and vertical presentation forms of the above
)
_SQUARE_CLOSE = (
    "]\uff3d\ufe48"
    "\u27e7\u3011\u3015\u3017\u3019\u301b"  # ⟧ 】 〕 〗 〙 〛
    "\u27e9\u232a\u3009\u27eb\u300b"  # ⟩ 〉 〉 ⟫ 》
    "\u300d\u300f\uff63\ufe42\ufe44"  # 」 』
    "\u2046\u298c\u298e\u2990\u2998\u23a4\u23a5\u23a6\u2309\u230b\u27ed\u2e23\u2e25"
    "\ufe5e\ufe3c\ufe18\ufe3a\ufe40\ufe3e\ufe5c"
)
# the header separator's dot: · and ΄ ∙ ⋅ ・ ･ • ‧ ⸱ ꞏ ᛫ ᐧ ⦁ ⸳
MIDDLE_DOTS = "\u00b7\u0387\u2219\u22c5\u30fb\uff65\u2022\u2027\u2e31\ua78f\u16eb\u1427\u2981\u2e33"
# the continuation mark │ (U+2502): | and the box-drawing verticals, ⏐ ∣ ǀ ׀ ｜ ￨ ❘ ❙ ❚ ⎸ ⎹ ‖ ∥ ǁ । ॥ and
# the vertical presentation forms ︱ ︲ ︳ ︴ (whose NFKC forms are dashes and low lines)
_BARS = (
    "\u2502|\u2503\u2506\u2507\u250a\u250b\u254e\u254f\u2551\u2575\u2577\u2579\u257b\u257d\u257f"
    "\u23d0\u2223\u01c0\u05c0\uff5c\uffe8\u2758\u2759\u275a\u23b8\u23b9\u2016\u2225\u01c1\u0964\u0965"
    "\ufe31\ufe32\ufe33\ufe34"
)
# a colon: ː ˸ ։ ׃ ܃ ܄ ፡ ᛬ ᠄ ⁚ ∶ ꓽ ꞉ and the forms NFKC maps to ':' (： ﹕ ︓)
_COLONS = ":\u02d0\u02f8\u0589\u05c3\u0703\u0704\u1361\u16ec\u1804\u205a\u2236\ua4fd\ua789\uff1a\ufe55\ufe13"
# an opening parenthesis (the marks (…) and (erased) begin with one): ❨ ❪ ⟮ ⸨ ﴾ ⎛ ⎜ ⎝ ⦅ and the forms
# NFKC maps to '(' (（ ﹙ ⁽ ₍, and ⑴ ⒜ ..., which NFKC spells out with one)
_PARENS = "(\u2768\u276a\u27ee\u2e28\ufd3e\u239b\u239c\u239d\u2985\uff5f\uff08\ufe59\u207d\u208d"
LOOKALIKES: dict[str, str] = {
    **dict.fromkeys(_SQUARE_OPEN, "["),
    **dict.fromkeys(_SQUARE_CLOSE, "]"),
    **dict.fromkeys(MIDDLE_DOTS, "·"),
    **dict.fromkeys(_BARS, "│"),
    **dict.fromkeys(_COLONS, ":"),
    **dict.fromkeys(_PARENS, "("),
}
# letters and symbols drawn as blank space (Hangul fillers, the blank braille pattern): read as spaces
_BLANKS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
_INVISIBLE = frozenset(["Cf", "Mn", "Me"])  # format characters (U+200B, U+2060, ZWJ ...) and combining marks
_KATAKANA = re.compile(r"[\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_KATAKANA_DOTS = "\u30fb\uff65"  # ・ between two katakana separates the words of a name (ジョン・スミス)


def katakana_dot(text: str, i: int) -> bool:
    """Whether ``text[i]``, a katakana middle dot, stands between two katakana: the word separator of a
    name written in katakana (ジョン・スミス), not a look-alike of the header separator."""
    return (
        text[i] in _KATAKANA_DOTS
        and 0 < i < len(text) - 1
        and _KATAKANA.match(text[i - 1]) is not None
        and _KATAKANA.match(text[i + 1]) is not None
    )


def as_read(text: str) -> list[tuple[str, int]]:
    """``text`` as a reader sees it, one character at a time, each with the index of the stored
    character it comes from: a look-alike of a mark (``LOOKALIKES``) as that mark, format characters
    (Unicode category Cf: U+200B, U+2060, ZWJ, bidi marks ...) and combining marks left out, every
    space (Zs, NBSP, tab ...) and blank-drawn character as a space, anything else in its NFKC form
    (full-width, half-width, small, super- and subscript forms as the plain character). A katakana
    middle dot between two katakana stays itself (``katakana_dot``)."""
    out: list[tuple[str, int]] = []
    for i, ch in enumerate(text):
        mark = LOOKALIKES.get(ch)
        if mark is not None:
            out.append((ch if mark == "·" and katakana_dot(text, i) else mark, i))
        elif ch.isspace() or ch in _BLANKS:
            out.append((" ", i))
        elif unicodedata.category(ch) not in _INVISIBLE:
            for c in unicodedata.normalize("NFKC", ch):
                if unicodedata.category(c) not in _INVISIBLE:
                    out.append((" " if c.isspace() else LOOKALIKES.get(c, c), i))
    return out


def reading(text: str) -> str:
    """``text`` as a reader sees it (:func:`as_read`), as one string."""
    return "".join(c for c, _ in as_read(text))


def _posing(text: str) -> tuple[str, str] | None:
    """Where a speaker or actor, as read (:func:`as_read`), would pose as structure: the stored
    characters and the mark they read as; None when it would not."""
    read = as_read(text)
    while read and read[0][0] == " ":
        read.pop(0)
    while read and read[-1][0] == " ":
        read.pop()
    if not read:
        return text, "nothing visible"
    seen = "".join(c for c, _ in read)
    spots = [(seen.find(m), m) for m in SPEAKER_FORBIDDEN if m in seen]
    if seen.startswith("("):
        spots.append((0, "("))
    if seen.endswith(":"):
        spots.append((len(seen) - 1, ":"))
    if not spots:
        return None
    at, mark = min(spots)
    first, last = read[at][1], read[at + len(mark) - 1][1]
    return text[first : last + 1], mark


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
    special-token text. A speaker (or actor), read as a reader sees it (:func:`as_read`: NFKC, format
    characters left out, every space a space, look-alikes of the marks as the marks), also holds none
    of ``[ ] · │ ": "``, does not begin with ``(``, does not end with ``:`` and is not blank, so that
    no speaker can pose as a header, a label, a continuation line or another turn."""
    text = clean_text(value, what).strip()
    if LINE_BREAKS.search(text):
        raise InvalidInputError(f"{what} spans several lines")
    bad = UNSAFE.search(text)
    if bad is not None:
        raise InvalidInputError(f"{what} holds {visible(bad.group())!r}, a control or special-token text")
    if speaker:
        posing = _posing(text)
        if posing is not None:
            held, mark = posing
            if mark == "nothing visible":
                raise InvalidInputError(f"{what} {text[:60]!r} shows nothing: only spaces and invisible characters")
            codes = " ".join(f"U+{ord(c):04X}" for c in held)
            how = f"{held!r}" if held == mark else f"{held!r} ({codes}, read as {mark!r})"
            where = " at its start" if mark == "(" else " at its end" if mark == ":" else ""
            raise InvalidInputError(
                f"{what} {text[:60]!r} holds {how}{where}: a speaker may not hold [ ] · │ or ': ' or a look-alike"
                " of them, begin with '(' or end with ':' (it would read as the memory's own structure)"
            )
    return text
