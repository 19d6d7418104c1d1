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
    # excerpts rank a unit's pieces from score_all: the very same floats as score_docs, so ties break alike
    assert index.score_all(query).tolist() == index.score_docs(query, list(range(len(docs)))).tolist()


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


def _docs_strategy():  # type: ignore[no-untyped-def]
    from hypothesis import strategies as st

    word = st.sampled_from(["seat", "seats", "refund", "refunds", "4417", "lisbon", "flight", "flights", "a1b2"])
    return st.lists(st.lists(word, max_size=12), min_size=1, max_size=40)


def test_bulk_loading_builds_the_same_index_as_one_by_one() -> None:
    from hypothesis import given, settings

    from flexamem.text import stem, stemmed

    queries = (["seat"], ["refund", "4417"], ["flight", "lisbon", "nothing"], ["seats", "a1b2"], [])

    @settings(max_examples=150, deadline=None)
    @given(first=_docs_strategy(), second=_docs_strategy(), start_bulk=st.booleans(), peek=st.booleans())
    def check(first: list[list[str]], second: list[list[str]], start_bulk: bool, peek: bool) -> None:
        one, bulk = BM25Index(), BM25Index()
        s_one, s_bulk = BM25Index(), BM25Index()
        for d in first + second:
            one.add(d)
            s_one.add(stemmed(d))
        if start_bulk:  # an empty index's first load: each term's postings made when first asked for
            bulk.add_many(first)
            s_bulk.add_many(first, transform=stem)
        else:  # one by one, then in bulk
            bulk.add(first[0])
            bulk.add_many(first[1:])
            s_bulk.add(stemmed(first[0]))
            s_bulk.add_many(first[1:], transform=stem)
        if peek:  # a query between the loads makes some terms' postings before the next load extends them
            bulk.search(["seat", "refund"])
            s_bulk.score_all(stemmed(["flights", "4417"]))
        half = len(second) // 2  # a second load in bulk: it extends the postings the first one sliced
        bulk.add_many(second[:half])
        s_bulk.add_many(second[:half], transform=stem)
        for d in second[half:]:
            bulk.add(d)
            s_bulk.add(stemmed(d))
        n = len(first) + len(second)
        for query in queries:
            for a, b, terms in ((one, bulk, query), (s_one, s_bulk, stemmed(query))):
                da, sa = a.search(terms)
                db, sb = b.search(terms)
                assert da.tolist() == db.tolist()
                assert np.allclose(sa, sb)
                assert np.allclose(a.score_docs(terms, list(range(n))), b.score_docs(terms, list(range(n))))
                assert np.allclose(a.score_all(terms), b.score_all(terms))
                assert [a.idf(t) for t in terms] == [b.idf(t) for t in terms]

    check()


def test_threads_asking_for_a_first_load_term_at_once_all_see_it() -> None:
    """A render may run without the history's lock (an agent session's context): threads that ask for a
    term of the first load at once all find its postings, and a write after them extends the postings
    every later query reads."""
    import threading

    docs = [[f"w{i % 97}", f"w{(i * 7) % 89}", "shared"] for i in range(600)]
    for _ in range(20):
        index = BM25Index()
        index.add_many(docs)
        found: list[list[int]] = []
        gate = threading.Barrier(8)

        def ask(index: BM25Index = index, found: list[list[int]] = found, gate: threading.Barrier = gate) -> None:
            gate.wait()
            found.append(index.search(["shared", "w3"])[0].tolist())

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert found == [list(range(600))] * 8
        index.add(["shared"])
        assert index.search(["shared"])[0].tolist() == list(range(601))
