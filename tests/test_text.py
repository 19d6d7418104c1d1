import re

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
