import math
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from flexamem.recover.bm25 import BM25Index
from flexamem.text import content_words, query_terms

VOCAB = [f"w{i}" for i in range(30)]


def brute_force(docs: list[list[str]], query: list[str], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    n = len(docs)
    avgdl = sum(map(len, docs)) / n
    out = np.zeros(n)
    for term in set(query):
        df = sum(term in d for d in docs)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            tf = d.count(term)
            if tf:
                out[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avgdl))
    return out


@settings(max_examples=50, deadline=None)
@given(
    docs=st.lists(st.lists(st.sampled_from(VOCAB), min_size=0, max_size=12), min_size=1, max_size=25),
    query=st.lists(st.sampled_from(VOCAB), min_size=1, max_size=5),
)
def test_scores_equal_the_formula(docs: list[list[str]], query: list[str]) -> None:
    index = BM25Index()
    index.add_many(docs)
    want = brute_force(docs, query)
    ids, scores = index.search(query)
    got = np.zeros(len(docs))
    got[ids] = scores
    assert np.allclose(got, want)
    assert set(ids.tolist()) == {i for i, d in enumerate(docs) if set(d) & set(query)}
    assert np.allclose(index.score_docs(query, list(range(len(docs)))), want)


def test_incremental_adds_match_a_fresh_build() -> None:
    rng = random.Random(7)
    docs = [[rng.choice(VOCAB) for _ in range(rng.randint(1, 10))] for _ in range(200)]
    inc = BM25Index()
    for i, d in enumerate(docs):
        inc.add(d)
        if i % 50 == 0:
            inc.search(["w1", "w2"])  # queries in between must not freeze stale arrays
    fresh = BM25Index()
    fresh.add_many(docs)
    for q in (["w1"], ["w3", "w7"], ["nothing"]):
        a, b = inc.search(q), fresh.search(q)
        assert np.array_equal(a[0], b[0]) and np.allclose(a[1], b[1])


def test_query_is_a_set_of_content_words_without_markup() -> None:
    assert query_terms("When did <b>Caroline</b> go to the support group, the SUPPORT group?") == [
        "caroline",
        "go",
        "support",
        "group",
    ]
    assert content_words("It's https://x.y/z Ana's &amp; café") == ["anas", "café"]
