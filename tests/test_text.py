import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexamem.text import _MARKUP, _WORD, is_identifier, joined_query_terms, query_terms, words


def reference_words(text: str) -> list[str]:
    """The original definition: apostrophes removed from each matched word."""
    return [w.replace("’", "").replace("'", "") for w in _WORD.findall(_MARKUP.sub(" ", text).lower())]


@settings(max_examples=500)
@given(st.text(alphabet=st.sampled_from(list("ab é1_'’ -<>&;.x")), max_size=60))
def test_words_drop_apostrophes_exactly_as_the_reference(text: str) -> None:
    assert words(text) == reference_words(text)


@settings(max_examples=1000)
@given(
    st.lists(
        st.sampled_from(
            [
                "a",
                "B",
                "z",
                "Q",
                "1",
                "9",
                "_",
                "'",
                " ",
                "-",
                "\n",
                "\t",
                "\x1c",
                "\x0b",
                "<b>",
                "<",
                ">",
                "&amp;",
                "&",
                "http://x.io/a'b",
                "https",
                "![i](u)",
                "!",
                "[",
                "~",
                "\x7f",
                "'s",
                "n't",
            ]
        ),
        max_size=40,
    ).map("".join)
)
def test_ascii_words_are_those_of_the_word_pattern(text: str) -> None:
    """ASCII text takes the byte-translation path; its words are the pattern's (the reference)."""
    assert text.isascii()
    assert words(text) == reference_words(text)


def test_identifiers_are_long_words_with_a_digit() -> None:
    assert [w for w in ["4417", "a1", "h7k2p", "flight", "abc9", "2024-05"] if is_identifier(w)] == [
        "4417",
        "h7k2p",
        "abc9",
        "2024-05",
    ]
    assert re.fullmatch(r"\d+", "12") and not is_identifier("123")


def test_code_terms_keep_names_of_code_whole() -> None:
    from flexamem.text import code_terms

    found = code_terms('x = join.table_alias; see django/db/sql/query.py:12 and FilteredRelation, {"user_id": 3}')
    assert {"join.table_alias", "table_alias", "django/db/sql/query.py", "query.py", "FilteredRelation"} <= set(found)
    assert "user_id" not in found  # a JSON key is the output's schema
    assert code_terms("the cat sat on mia_li_3668 and Paris") == []  # plain words and ids of data are no names


QUERY_BITS = st.sampled_from(
    ["refund", "Visa", "the", "don't", "it's", "’s", "![", "](x.png)", "<b>", "</b>", "&amp;", "http://a.b/c", "\n",
     " ", "Σ", "ΑΣ", "_", "4417", "e\u0301", "(", ")", "]"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(QUERY_BITS, max_size=10).map("".join), min_size=1, max_size=4))
def test_query_terms_of_joined_texts_from_each_texts_terms(texts: list[str]) -> None:
    """The agent's query terms (task, then the newest unit) are put together from each text's own."""
    assert joined_query_terms(texts, [query_terms(t) for t in texts]) == query_terms("\n".join(texts))


def test_a_question_about_its_asker_says_i_or_my_and_addresses_no_one() -> None:
    from flexamem.text import asks_about_asker

    assert asks_about_asker("What did I buy for my cousin?")
    assert asks_about_asker("I'm wondering where I left the keys")
    assert asks_about_asker("How many days did I spend in Rome?")
    assert not asks_about_asker("What did you recommend to me last week?")  # asks what the other said
    assert not asks_about_asker("Can you remind me of my plan?")
    assert not asks_about_asker("Which recipe did I get from the assistant?")  # names the other party
    assert not asks_about_asker("When did Caroline go to the support group?")  # no one's own words
    assert not asks_about_asker("")


def test_a_field_is_read_as_a_reader_sees_it() -> None:
    """NFKC, format characters and combining marks left out, every space a space, look-alikes of the
    marks as the marks (docs/RENDERING.md, "Fields that could pose as structure")."""
    from flexamem.text import as_read, reading

    assert reading("Melanie:\u200b\u00a0Actually") == "Melanie: Actually"
    assert reading("\uff3bu7 \u0387 9 June\uff3d") == "[u7 · 9 June]"
    assert reading("\u27e6\u3010\u3014\u3016\u27e8 \u27e7\u3011\u3015\u3017\u27e9") == "[[[[[ ]]]]]"
    assert reading("\u0387\u2219\u22c5\u30fb\uff65\u2022") == "······"
    assert reading("\uffe8\u2502\u2503\u23d0\u2223\u01c0\u05c0\uff5c|") == "│" * 9
    assert reading("\uff1a\u2236\ufe55") == ":::" and reading("\uff08\u2768") == "(("
    assert reading("ジョン・スミス") == "ジョン・スミス" and "·" not in reading("ｼﾞｮﾝ･ｽﾐｽ")  # a katakana name's dot
    assert reading("u1・1") == "u1·1" and reading("ジョン・") == "ジョン·"  # not between two katakana
    assert reading("Zoë José 李雷 O'Brien Anne-Marie") == "Zoë José 李雷 O'Brien Anne-Marie"
    assert as_read("a\u200bb") == [("a", 0), ("b", 2)]  # each read character keeps its stored index


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("\uff3bu7\uff3d Ana", "holds '［' (U+FF3B, read as '[')"),
        ("Melanie:\u200b Actually", "holds ':\\u200b ' (U+003A U+200B U+0020, read as ': ')"),
        ("u1 \u0387 1 May", "holds '\u0387' (U+0387, read as '\u00b7')"),
        ("\uffe8PS", "holds '￨' (U+FFE8, read as '│')"),
        ("\uff08x", "holds '（' (U+FF08, read as '(') at its start"),
        ("Ana\uff1a", "holds '：' (U+FF1A, read as ':') at its end"),
        ("\u200b", "shows nothing"),
    ],
)
def test_a_speaker_posing_as_structure_is_refused_naming_the_character(value: str, message: str) -> None:
    from flexamem.errors import InvalidInputError
    from flexamem.text import clean_field

    with pytest.raises(InvalidInputError) as raised:
        clean_field(value, "turn 0 speaker", speaker=True)
    assert message in str(raised.value) and str(raised.value).startswith("turn 0 speaker")
    assert clean_field(value, "date") == value  # a date or an id is escaped when shown instead (format.time_tag)
