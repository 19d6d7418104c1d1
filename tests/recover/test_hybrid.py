"""auto's ranking: stemmed BM25 fused with piece vectors, whole turns, neighbouring turns."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import flexamem as fm
from flexamem.recover import hybrid
from flexamem.recover.hybrid import fuse, hybrid_parts
from flexamem.recover.signals import (
    AgentRanking,
    Fusion,
    Neighbours,
    Phase,
    Scores,
    SessionVector,
    TurnLength,
    TurnVector,
    discounted,
)  # fmt: skip
from flexamem.recover.signals.fusion import TOP_TURNS
from flexamem.text import content_words, stemmed


# the ranking's parts, each called with the signals that own its settings (recover/signals)
def hybrid_scores(
    h: object, terms: list[str], vector: object, n: int, *, alpha: float, stemmed: bool = True,
    piece_vectors: bool = True, identifiers: float = 0.0,
) -> np.ndarray:  # fmt: skip
    """The fused piece scores, with the agent's identifier prior at ``identifiers``."""
    state = Scores(h, np.zeros(0), agent=True)  # type: ignore[arg-type]
    signals = [AgentRanking(agent_auto_identifiers=identifiers, agent_auto_code=0.0)]
    bm, cos = hybrid_parts(
        h, terms, vector, n, dense=alpha < 1, stemmed=stemmed, piece_vectors=piece_vectors, signals=signals,  # type: ignore[arg-type]
        scores=state,
    )  # fmt: skip
    return fuse(bm, cos, alpha)


@dataclass(frozen=True)
class MaskDiscount:
    """A signal written here, in a test: the groups a mask marks are discounted (the seam a new signal
    uses: a frozen dataclass with a phase and ``apply``)."""

    phase: ClassVar[Phase] = "group"
    mask: np.ndarray
    keep: float

    def apply(self, scores: Scores) -> None:
        scores.score = discounted(scores.score, np.where(self.mask[: len(scores.starts)], self.keep, 1.0))


def rank(
    h: object, scores: np.ndarray, room: int, *, neighbour: float, reach: int, whole_turns: bool = True,
    discount: tuple[np.ndarray, float] | None = None,
) -> list[int]:  # fmt: skip
    signals: list[object] = []
    if neighbour > 0:
        signals.append(Neighbours(auto_neighbour=neighbour, auto_neighbour_reach=reach))
    if discount is not None:
        signals.append(MaskDiscount(*discount))
    return hybrid.hybrid_ranking(h, scores, room, signals=signals, whole_turns=whole_turns)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TopFusion(Fusion):
    top: int = TOP_TURNS

    def apply(self, scores: Scores, top: int = TOP_TURNS) -> None:
        super().apply(scores, top=self.top)


def turn_scores(
    h: object, bm: np.ndarray, cos: np.ndarray, *, alpha: float, spread: float, top: int = TOP_TURNS,
    turn_vector: float = 0.0, long_from: float = 0.0, length: float = 0.0, session: float = 0.0,
) -> np.ndarray:  # fmt: skip
    """The turn scores, by the signals of the turn phases (the turn-length discount from ``long_from``
    tokens: a room of ``long_from`` with ``auto_turn_room`` 1)."""
    signals = [
        TurnVector(auto_turn_vector=turn_vector),
        SessionVector(auto_session_vector=session),
        TopFusion(auto_alpha=alpha, auto_alpha_spread=spread, top=top),
        TurnLength(auto_turn_length=length, auto_turn_room=1.0),
    ]
    state = Scores(h, bm, cos, room=long_from)  # type: ignore[arg-type]
    return hybrid.turn_scores(state, signals)  # type: ignore[arg-type]


def test_stems_join_word_forms_and_keep_codes_exact() -> None:
    assert stemmed(["refunds", "refunded", "refund"]) == ["refund"] * 3
    assert stemmed(["flights", "tp1351", "2023", "cr88412s"]) == ["flight", "tp1351", "2023", "cr88412s"]


def history_mem(tmp_path: Path | None = None, **settings: object) -> fm.Memory:
    mem = fm.Memory(tmp_path / "m.db" if tmp_path else ":memory:", settings=fm.Settings(**settings))  # type: ignore[arg-type]
    mem.add_session(
        [
            {"speaker": "Ana", "text": "The weather was grey all week.", "id": "D1:1"},
            {"speaker": "Ben", "text": "Where did you send the hotel money?", "id": "D1:2"},
            {"speaker": "Ana", "text": "They refunded it to my Visa ending 4417.", "id": "D1:3"},
            {"speaker": "Ben", "text": "Good. My cat sleeps all day.", "id": "D1:4"},
        ],
        session_id="s1",
    )
    mem.add_session(
        [
            {"speaker": "Ana", "text": "Pottery class is on Thursday.", "id": "D2:1"},
            {"speaker": "Ben", "text": "Clara wants to join it.", "id": "D2:2"},
        ],
        session_id="s2",
    )
    return mem


def test_stemmed_bm25_matches_other_word_forms() -> None:
    mem = history_mem()
    h = mem.history
    qv = mem.embedder.embed(["refunds"])[0]
    plain = hybrid_scores(h, ["refunds"], lambda: qv, len(h), alpha=1.0, stemmed=False)
    stem = hybrid_scores(h, stemmed(["refunds"]), lambda: qv, len(h), alpha=1.0, stemmed=True)
    assert plain.max() == 0  # "refunds" is not a word of the history
    assert int(np.argmax(stem)) == 2 and stem[2] == pytest.approx(1.0)  # max-normalised


def test_scores_fuse_normalised_bm25_with_piece_cosines() -> None:
    mem = history_mem()
    h = mem.history
    qv = mem.embedder.embed(["Visa card refund"])[0]
    terms = stemmed(content_words("Visa card refund"))
    dense = hybrid_scores(h, terms, lambda: qv, len(h), alpha=0.0)
    assert np.allclose(dense, h.piece_matrix @ qv)
    bm = hybrid_scores(h, terms, lambda: qv, len(h), alpha=1.0)
    both = hybrid_scores(h, terms, lambda: qv, len(h), alpha=0.5)
    assert np.allclose(both, 0.5 * bm + 0.5 * dense)
    # without piece vectors, a piece's cosine is its unit's
    units = hybrid_scores(h, terms, lambda: qv, len(h), alpha=0.0, piece_vectors=False)
    assert np.allclose(units[:4], float(h.embeddings[0] @ qv)) and np.allclose(units[4:], float(h.embeddings[1] @ qv))
    # only notes 0..n-1 are scored
    assert len(hybrid_scores(h, terms, lambda: qv, 1, alpha=0.5)) == h.doc_of[1]


def test_neighbours_are_lifted_within_their_unit_only() -> None:
    mem = history_mem()
    h = mem.history
    scores = np.zeros(h.pieces_count)
    scores[2] = 1.0  # the refund answer
    scores[4] = 0.3  # the pottery turn of the next unit
    plain = rank(h, scores, 10_000, neighbour=0.0, reach=1)
    lifted = rank(h, scores, 10_000, neighbour=0.5, reach=1)
    assert plain[:2] == [2, 4]
    assert lifted[:4] == [2, 1, 3, 4]  # the question before and the turn after the answer come next
    # doc 3 (last of unit 0) does not lift doc 4 (first of unit 1) above doc 5, nor the other way
    scores2 = np.zeros(h.pieces_count)
    scores2[3] = 1.0
    assert rank(h, scores2, 10_000, neighbour=0.5, reach=1)[:2] == [3, 2]


def test_neighbours_further_away_are_lifted_by_reach() -> None:
    mem = history_mem()
    h = mem.history
    scores = np.zeros(h.pieces_count)
    scores[0] = 1.0  # the weather turn opens unit 0; the cat turn (doc 3) is three turns away
    scores[3] = 0.05
    scores[4] = 0.2  # the pottery turn of the next unit
    one = rank(h, scores, 10_000, neighbour=0.5, reach=1)
    assert one[:3] == [0, 1, 4]  # reach 1: only doc 1 (0.5) is lifted; doc 2 stays at 0
    two = rank(h, scores, 10_000, neighbour=0.5, reach=2)
    assert two[:4] == [0, 1, 2, 4]  # doc 2 gets 0.25, above the pottery turn's 0.2
    three = rank(h, scores, 10_000, neighbour=0.5, reach=3)
    assert three[:4] == [0, 1, 2, 4] and three.index(3) == 4  # doc 3 gets 0.125, below 0.2
    # within a unit only: unit 0 ends at doc 3, so further passes change nothing (doc 5 gets 0.1
    # from doc 4, its own unit's)
    assert rank(h, scores, 10_000, neighbour=0.5, reach=5) == three == [0, 1, 2, 4, 3, 5]


def test_a_discounted_turn_is_discounted_after_it_lifts_its_neighbours() -> None:
    mem = history_mem()
    h = mem.history
    scores = np.zeros(h.pieces_count)
    scores[2] = 1.0  # the refund answer (doc 2)
    scores[4] = 0.4  # the pottery turn of the next unit
    scores[5] = -0.2
    mask = np.array([False, False, True, False, False, True])  # turns 2 and 5 discounted
    ranked = rank(h, scores, 10_000, neighbour=0.5, reach=1, discount=(mask, 0.3))
    # doc 2 falls to 0.3, below the pottery turn, but its neighbours keep the 0.5 its own score gives;
    # doc 5 is lifted by doc 4 (0.2), then discounted (0.06), still above doc 0
    assert ranked == [1, 3, 4, 2, 5, 0]
    # a score below 0 is divided (it falls further), and a mask longer than the turns scored is cut
    long_mask = np.append(mask, [True, True])
    assert rank(h, scores, 10_000, neighbour=0.0, reach=1, discount=(long_mask, 0.5))[-1] == 5
    assert rank(h, scores, 10_000, neighbour=0.0, reach=1, discount=None)[:2] == [2, 4]


def test_a_question_about_its_asker_ranks_the_askers_words_before_the_assistants() -> None:
    def ranking(question: str, discount: float) -> list[str | None]:
        mem = fm.Memory(settings=fm.Settings(auto_assistant_turns=discount))
        turns = [
            (
                "user",
                "Back from the trip: it was my sister's wedding, in Lisbon, and the food and the music were great.",
            ),
            ("assistant", "A wedding in Lisbon! Lisbon weddings are lovely."),
            ("user", "Thanks. What should I cook tonight?"),
            ("assistant", "A quick pasta with lemon and garlic."),
        ]
        mem.add_session([{"speaker": r, "text": t, "id": f"t{i}"} for i, (r, t) in enumerate(turns)], session_id="a")
        return [h.turn_id for h in mem.search(question, limit=2)]

    # the assistant's short echo ranks first unless the discount is on ...
    assert ranking("Whose wedding in Lisbon did I go to?", 1.0) == ["t1", "t0"]
    assert ranking("Whose wedding in Lisbon did I go to?", 0.4) == ["t0", "t2"]  # t2: lifted by t1
    # ... and a question to the assistant ("you") is not discounted
    assert ranking("Which Lisbon wedding did you call lovely?", 0.4) == ["t1", "t0"]


def test_the_assistants_turns_are_known_per_turn_and_extended_write_by_write() -> None:
    mem = fm.Memory()
    mem.add_session(
        [{"speaker": "user", "text": "Hello there."}, {"speaker": "Assistant", "text": "Hi! How can I help?"}]
    )
    assert mem.history.assistant_turns().tolist() == [False, True]
    mem.add_session([{"role": "user", "content": "One more."}, {"role": "assistant", "content": "Sure."}])
    mem.add_session([{"speaker": "Ana", "text": "Two people talking."}, {"speaker": "Ben", "text": "Indeed."}])
    assert mem.history.assistant_turns().tolist() == [False, True, False, True, False, False]


def reference_lift(seqs: np.ndarray, scores: np.ndarray, neighbour: float, reach: int) -> np.ndarray:
    """The rule as written: the best of ``neighbour ** d * score`` over the groups with a positive score
    at most ``reach`` away in the same note (d = 0: the group itself)."""
    out = scores.copy()
    for i in range(len(scores)):
        for j in range(max(0, i - reach), min(len(scores), i + reach + 1)):
            if seqs[j] == seqs[i] and scores[j] > 0:
                out[i] = max(out[i], neighbour ** abs(i - j) * scores[j])
    return out


def test_lifting_follows_the_rule_and_the_best_groups_rank_as_if_every_group_lifted() -> None:
    from flexamem.recover.signals.neighbours import SOURCES, lifted_neighbours

    rng = np.random.default_rng(7)
    small = rng.uniform(-0.2, 1.0, 900)
    notes = np.cumsum(rng.random(900) < 0.1)  # notes of ~10 groups
    for reach in (1, 2, 4):
        assert np.allclose(lifted_neighbours(notes, small, 0.7, reach), reference_lift(notes, small, 0.7, reach))
    n = SOURCES + 1500  # more groups than lift from afar: the first SOURCES of the ranking are exact
    big, notes = rng.uniform(-0.2, 1.0, n), np.cumsum(rng.random(n) < 0.1)
    ours, ref = lifted_neighbours(notes, big, 0.7, 3), reference_lift(notes, big, 0.7, 3)
    first = np.lexsort((np.arange(n), -ref))[:SOURCES]
    assert np.array_equal(np.lexsort((np.arange(n), -ours))[:SOURCES], first)
    assert np.allclose(ours[first], ref[first]) and np.all(ours <= ref + 1e-12)
    # most groups unrelated (the SOURCES-th best score below 0): still exact, and nothing is raised by
    # a neighbour that scores 0 or less
    low = rng.uniform(-1.0, 0.02, n)
    assert np.allclose(lifted_neighbours(notes, low, 0.7, 3), reference_lift(notes, low, 0.7, 3))
    assert np.array_equal(lifted_neighbours(notes, -np.abs(low), 0.7, 3), -np.abs(low))


def test_a_memory_lifts_its_turns_surroundings_as_far_as_its_setting_reaches() -> None:
    def ranking(reach: int) -> list[str | None]:
        mem = fm.Memory(settings=fm.Settings(auto_neighbour_reach=reach))
        texts = ["My passport number is X9981.", "Noted.", "Sure thing.", "Lovely weather today.", "The cat sleeps."]
        mem.add_session([{"speaker": "Ana", "text": t, "id": f"A{i}"} for i, t in enumerate(texts)], session_id="a")
        mem.add_session([{"speaker": "Ben", "text": "Travel documents are checked at the gate.", "id": "B0"}])
        return [h.turn_id for h in mem.search("What is my passport number?", limit=6)]

    # the other session's turn about travel documents comes before the small talk two turns away ...
    assert ranking(1) == ["A0", "A1", "B0", "A2", "A3", "A4"]
    # ... unless the answer's surroundings are lifted that far (0.7 ** 2, 0.7 ** 3 of its score)
    assert ranking(3) == ["A0", "A1", "A2", "A3", "B0", "A4"]


def test_a_long_turn_is_ranked_whole() -> None:
    mem = fm.Memory(settings=fm.Settings(kappa=8))
    mem.add_session(
        [
            {"speaker": "Ana", "text": " ".join(f"word{i}" for i in range(30)), "id": "a"},
            {"speaker": "Ben", "text": "short", "id": "b"},
        ],
        session_id="s1",
    )
    h = mem.history
    turn_a = [d for d in range(h.pieces_count) if h.piece(d)[1].source_id == "a"]
    assert len(turn_a) >= 3
    scores = np.zeros(h.pieces_count)
    scores[turn_a[-1]] = 1.0  # its last piece matches
    whole = rank(h, scores, 10_000, neighbour=0.0, reach=1)
    assert whole[: len(turn_a)] == turn_a  # the whole turn, in text order
    single = rank(h, scores, 10_000, neighbour=0.0, reach=1, whole_turns=False)
    assert single[0] == turn_a[-1] and single[1] == turn_a[0]


def test_ranking_stops_well_past_the_room() -> None:
    mem = fm.Memory(settings=fm.Settings(piece_vectors=False))
    turns = [{"speaker": "A", "text": f"line {i} about the garden and the weather today"} for i in range(400)]
    mem.add_session(turns, session_id="s1")
    h = mem.history
    total = sum(h.piece(d)[1].tokens for d in range(h.pieces_count))
    assert total > 3 * 10 + 2048 + 500  # more than the cap for a 10-token room
    scores = np.arange(h.pieces_count, dtype=float)
    short = rank(h, scores, 10, neighbour=0.5, reach=1)
    held = sum(h.piece(d)[1].tokens for d in short)
    assert len(short) < h.pieces_count
    assert 3 * 10 + 2048 < held <= 3 * 10 + 2048 + max(h.piece(d)[1].tokens for d in short)
    assert short[0] == h.pieces_count - 1  # best first
    assert len(rank(h, scores, 10**6, neighbour=0.5, reach=1)) == h.pieces_count  # a large room: all
    assert rank(h, np.zeros(0), 10, neighbour=0.5, reach=1) == []


def test_piece_vectors_are_written_once_and_reloaded(tmp_path: Path) -> None:
    mem = history_mem(tmp_path)
    before = mem.history.piece_matrix.copy()
    assert all(mem.history.piece_vector_ready)
    note = mem.notes()[0]
    assert note.piece_vectors is not None and note.piece_vectors.shape == (len(note.pieces), 384)
    assert np.allclose(note.piece_vectors[2], mem.embedder.embed([note.pieces[2].text])[0], atol=1e-5)
    mem.close()
    again = fm.Memory(tmp_path / "m.db")
    assert np.array_equal(again.history.piece_matrix, before)
    assert all(again.history.piece_vector_ready)


def test_units_over_the_limit_or_written_without_vectors_use_their_embedding() -> None:
    mem = history_mem(piece_vector_limit=3)  # unit s1 has 4 pieces, s2 has 2
    h = mem.history
    assert h.piece_vector_ready == [False] * 4 + [True] * 2
    assert np.array_equal(h.piece_matrix[0], h.embeddings[0])
    off = history_mem(piece_vectors=False)
    assert not any(off.history.piece_vector_ready)
    r = off.render("Which card got the hotel refund?", 70)  # auto still renders, BM25 + unit cosines
    assert "Visa ending 4417" in r.text
    # with no vector of their own among the pieces scored, the cosines are read per note (not from the
    # piece matrix of copies), with the same values
    qv = mem.embedder.embed(["hotel refund"])[0]
    for history, n in ((off.history, 2), (h, 1), (h, 2)):
        _, cos = hybrid_parts(history, ["hotel"], lambda: qv, n, dense=True)
        limit = history.doc_of[n] if n < len(history.doc_of) else history.pieces_count
        assert cos is not None and np.allclose(cos, history.piece_matrix[:limit] @ qv, atol=1e-6)
    assert off.history.first_piece_vector is None and h.first_piece_vector == 4


def test_auto_is_the_default_and_shows_the_answer_with_its_question() -> None:
    mem = history_mem()
    r = mem.render("Which card got the refund?", 70)
    assert r.mode == "auto" and not r.pass_through
    assert "They refunded it to my Visa ending 4417." in r.text
    assert "Where did you send the hotel money?" in r.text  # the neighbour (the question) came with it
    assert r.tokens <= r.allowance
    assert r.view("s1").pieces


def test_auto_ablations_render_within_the_budget_and_switch_their_part() -> None:
    from flexamem.render.renderer import AUTO_ABLATIONS

    mem = history_mem()
    renders = {name: mem.render("Which card got the refund?", 70, options=o) for name, o in AUTO_ABLATIONS.items()}
    assert all(r.tokens <= r.allowance and r.mode == "auto" for r in renders.values())
    texts = {name: r.text for name, r in renders.items()}
    assert all("Visa ending 4417" in t for n, t in texts.items() if n != "auto-rho-timeline")
    assert "· merged]" in texts["auto-rho-timeline"] and "· merged]" not in texts["auto"]  # rho: timeline first
    assert (
        "Where did you send the hotel money?" not in texts["auto-no-neighbours"]
        or texts["auto-no-neighbours"] == texts["auto"]
    )
    with pytest.raises(fm.InvalidInputError, match="unknown mode"):
        mem.render("q", 100, mode="hybrid")


def test_identifier_words_hold_a_digit_and_four_characters() -> None:
    from flexamem.text import is_identifier

    assert all(is_identifier(w) for w in ["4bmn53", "hat078", "9879898", "2024"])
    assert not any(is_identifier(w) for w in ["flight", "a1", "123", "reservation"])


def test_identifier_prior_lifts_pieces_holding_ids() -> None:
    mem = fm.Memory(":memory:")
    mem.add_session(
        [
            {"speaker": "user", "text": "I would like help with a flight today."},
            {"speaker": "tool", "text": '{"reservations": ["4BMN53", "Q0ZF0J", "OBUT9V"]}'},
            {"speaker": "user", "text": "What are the flight rules and flight prices?"},
        ]
    )
    h = mem.history
    terms = stemmed(content_words("flight"))
    plain = hybrid_scores(h, terms, lambda: np.zeros(384), len(h), alpha=1.0)
    lifted = hybrid_scores(h, terms, lambda: np.zeros(384), len(h), alpha=1.0, identifiers=0.5)
    ids = h.doc_arrays()[2]
    assert list(ids) == [0, 3, 0]  # the three reservation codes
    assert plain[1] == 0 and plain[0] > 0  # BM25 alone ranks the id-less turns first ...
    assert lifted[1] == pytest.approx(0.5)  # ... the prior lifts the codes: 0.5 for three (or more) ids
    strong = hybrid_scores(h, terms, lambda: np.zeros(384), len(h), alpha=1.0, identifiers=1.0)
    assert strong[1] > strong[0]
    assert np.allclose(lifted - plain, 0.5 * np.minimum(ids, 3) / 3)


def test_ranked_groups_match_a_full_stable_sort() -> None:
    import numpy as np

    from flexamem.recover.hybrid import TOP, ranked_groups

    rng = np.random.default_rng(3)
    for n in (1, 10, 2 * TOP + 1, 3 * TOP, 9000):
        scores = np.round(rng.random(n) * 40) / 10  # many ties
        assert list(ranked_groups(scores)) == list(np.lexsort((np.arange(n), -scores)))


def test_turn_scores_keep_bm25_for_a_pointed_query_and_lean_on_meaning_for_a_flat_one() -> None:

    mem = history_mem()
    h = mem.history
    starts = np.flatnonzero(h.doc_arrays()[1])
    qv = mem.embedder.embed(["x"])[0]
    # one turn stands out lexically (flat ~ 0.1 over the 6 turns): the full BM25 weight is kept
    bm, cos = hybrid_parts(h, stemmed(["4417"]), lambda: qv, len(h), dense=True)
    assert cos is not None
    pointed = turn_scores(h, bm, cos, alpha=0.5, spread=2.0)
    best_bm, best_cos = np.maximum.reduceat(bm, starts), np.maximum.reduceat(cos, starts)
    assert np.allclose(pointed, 0.5 * best_bm + 0.5 * best_cos)
    # every turn matches as well as the best (flat = 1): ranked by meaning alone
    flat_bm = np.ones_like(bm)
    assert np.allclose(turn_scores(h, flat_bm, cos, alpha=0.5, spread=2.0), best_cos)
    # in between, the weight falls linearly with the flatness: top-2 mean 0.75 -> a = 2 * 0.5 * 0.25
    half = np.zeros_like(bm)
    half[starts[0]], half[starts[1]] = 1.0, 0.5
    got = turn_scores(h, half, cos, alpha=0.5, spread=2.0, top=2)
    assert np.allclose(got, 0.25 * np.maximum.reduceat(half, starts) + 0.75 * best_cos)


def test_a_turn_reads_as_its_head_vector_when_turn_vector_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto_turn_vector``: a turn's cosine is its head's (the weighted sum of the vectors of its
    pieces within the first TURN_HEAD tokens), computed here from the pieces independently."""
    from flexamem import history as history_module
    from flexamem.history import TURN_HEAD, History

    mem = history_mem()
    long_turn = "\n".join(f"Step {i}: water the tomato seedlings and move tray {i} to the window." for i in range(40))
    turns = [{"speaker": "Ana", "text": long_turn, "id": "D3:1"}, {"speaker": "Ben", "text": "Nice.", "id": "D3:2"}]
    mem.add_session(turns, session_id="s3")
    h = mem.history
    qv = mem.embedder.embed(["how do I care for tomato seedlings"])[0]
    bm, cos = hybrid_parts(h, [], lambda: qv, len(h), dense=True)
    assert cos is not None
    starts = [*np.flatnonzero(h.doc_arrays()[1]), h.pieces_count]
    want = []
    for a, b in itertools.pairwise(starts):
        vector, before = np.zeros(h.dim), 0
        for d in range(a, b):
            tokens = h.piece(d)[1].tokens
            if before < TURN_HEAD:
                vector += tokens * h.piece_matrix[d]
            before += tokens
        want.append(float(vector @ qv) / float(np.linalg.norm(vector)))
    assert (h.turn_heads()[0] == 0).any()  # the long turn's pieces past its head are out of its vector
    whole = turn_scores(h, bm, cos, alpha=0.0, spread=2.0, turn_vector=1.0)  # dense alone
    assert np.allclose(whole, want, atol=1e-5)
    best = turn_scores(h, bm, cos, alpha=0.0, spread=2.0)
    half = turn_scores(h, bm, cos, alpha=0.0, spread=2.0, turn_vector=0.5)
    assert np.allclose(half, 0.5 * best + 0.5 * whole)
    # extended write by write, the heads equal those of the history loaded at once
    fresh = History.from_notes(h.notes, h.dim)
    assert all(np.allclose(x, y) for x, y in zip(h.turn_heads(), fresh.turn_heads(), strict=True))
    monkeypatch.setattr(history_module, "HEAD_CHUNK", 3)  # summed a few turns at a time: the same heads
    chunked = History.from_notes(h.notes, h.dim)
    assert all(np.allclose(x, y) for x, y in zip(h.turn_heads(), chunked.turn_heads(), strict=True))


def test_a_long_turn_is_discounted_by_the_room_it_takes() -> None:
    """``auto_turn_length``: a turn longer than ``long_from`` tokens (``auto_turn_room`` of the room) has
    its score times ``(long_from / tokens) ** length`` (divided when negative); shorter turns keep theirs."""

    mem = history_mem()
    long_turn = "\n".join(f"Step {i}: water the tomato seedlings and move tray {i} to the window." for i in range(40))
    mem.add_session([{"speaker": "Ana", "text": long_turn}, {"speaker": "Ben", "text": "Tomatoes."}], session_id="s3")
    h = mem.history
    qv = mem.embedder.embed(["how do I care for tomato seedlings"])[0]
    bm, cos = hybrid_parts(h, ["tomato"], lambda: qv, len(h), dense=True)
    assert cos is not None
    starts = np.flatnonzero(h.doc_arrays()[1])
    sizes = np.add.reduceat(h.doc_tokens(), starts)
    plain = turn_scores(h, bm, cos, alpha=0.5, spread=2.0)
    long_from = float(np.median(sizes))  # half the turns are longer
    for length in (0.5, 1.0, 2.0):
        got = turn_scores(h, bm, cos, alpha=0.5, spread=2.0, long_from=long_from, length=length)
        keep = np.minimum(1.0, long_from / sizes) ** length
        assert np.allclose(got, np.where(plain > 0, plain * keep, plain / keep))
        assert np.array_equal(got[sizes <= long_from], plain[sizes <= long_from])
        assert (got[sizes > long_from] < plain[sizes > long_from]).all()
    assert np.array_equal(turn_scores(h, bm, cos, alpha=0.5, spread=2.0, long_from=long_from, length=0.0), plain)


def test_turn_sizes_are_kept_per_history_and_extended_write_by_write() -> None:
    """``History.turn_tokens``: per turn the tokens of its pieces, the same when computed before and
    after a write (extended, not recomputed) as for the whole history loaded at once."""
    from flexamem.history import History

    mem = history_mem()
    h = mem.history
    before = h.turn_tokens().copy()
    mem.add_session([{"speaker": "Ana", "text": "\n".join(f"Line {i} of a long note." for i in range(30))},
                     {"speaker": "Ben", "text": "Short."}], session_id="s3")  # fmt: skip
    starts = [*np.flatnonzero(h.doc_arrays()[1]), h.pieces_count]
    want = [sum(h.piece(d)[1].tokens for d in range(a, b)) for a, b in itertools.pairwise(starts)]
    assert h.turn_tokens().tolist() == want
    assert h.turn_tokens()[: len(before)].tolist() == before.tolist()
    assert len(want) > len(before) and want[-2] > 30  # the new turns are there, the long one summed
    assert History.from_notes(h.notes, h.dim).turn_tokens().tolist() == want


def test_doc_arrays_are_extended_write_by_write_as_if_loaded_at_once() -> None:
    """``History.doc_arrays`` (each doc's note, turn start and identifier words) read before a write
    are extended by the write's docs, not rebuilt, and equal those of the history loaded at once."""
    from flexamem.history import History

    mem = history_mem()
    h = mem.history
    before = [a.copy() for a in h.doc_arrays()]
    mem.add_session([{"speaker": "Ana", "text": "Order A-1234 shipped.\nTracking ZX-99887."},
                     {"speaker": "Ben", "text": "Thanks."}], session_id="s3")  # fmt: skip
    after = h.doc_arrays()
    loaded = History.from_notes(h.notes, h.dim).doc_arrays()
    assert len(after[0]) == h.pieces_count > len(before[0])
    for got, want, old in zip(after, loaded, before, strict=True):
        assert got.tolist() == want.tolist()
        assert got[: len(old)].tolist() == old.tolist()
    assert after[0][-1] == len(h.notes) - 1 and after[2][len(before[0]) :].sum() >= 2  # the new note's ids
    assert h.turn_starts(h.pieces_count).tolist() == np.flatnonzero(loaded[1]).tolist()


def test_a_turn_takes_a_share_of_its_sessions_vector_when_session_vector_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``auto_session_vector``: a share of a turn's cosine comes from its unit as a whole (the
    token-weighted sum of all its piece vectors), computed here from the pieces independently; a turn
    in a session about the question then outranks a like-sounding turn in a session about another thing."""
    from flexamem import history as history_module
    from flexamem.history import History

    mem = history_mem()
    garden = ["I planted tomato seedlings in the raised bed.", "They need water every morning.",
              "The tomato seedlings are growing fast now."]  # fmt: skip
    other = ["My laptop battery dies quickly.", "Seedlings of doubt about the new phone.", "I will buy a charger."]
    mem.add_session([{"speaker": "Ana", "text": t} for t in garden], session_id="garden")
    h = mem.history
    first = h.unit_vectors()[1].copy()  # then extended by the next write
    mem.add_session([{"speaker": "Ana", "text": t} for t in other], session_id="tech")
    assert len(h.unit_vectors()[1]) == len(first) + 1 and np.array_equal(h.unit_vectors()[1][: len(first)], first)
    qv = mem.embedder.embed(["how often should I water my tomato seedlings"])[0]
    bm, cos = hybrid_parts(h, [], lambda: qv, len(h), dense=True)
    assert cos is not None
    starts = np.flatnonzero(h.doc_arrays()[1])
    seqs = h.doc_arrays()[0]
    unit_cos = []
    for note in h.notes:
        docs = [d for d in range(h.pieces_count) if seqs[d] == note.seq]
        vector = sum(max(h.piece(d)[1].tokens, 1) * h.piece_matrix[d].astype(np.float64) for d in docs)
        unit_cos.append(float(vector @ qv) / float(np.linalg.norm(vector)))
    plain = turn_scores(h, bm, cos, alpha=0.0, spread=2.0, turn_vector=1.0)  # dense alone
    for share in (0.3, 1.0):
        got = turn_scores(h, bm, cos, alpha=0.0, spread=2.0, turn_vector=1.0, session=share)
        want = (1 - share) * plain + share * np.array([unit_cos[s] for s in seqs[starts]])
        assert np.allclose(got, want, atol=1e-5)
    water = next(i for i, d in enumerate(starts) if "water every morning" in h.piece(int(d))[1].text)
    doubt = next(i for i, d in enumerate(starts) if "Seedlings of doubt" in h.piece(int(d))[1].text)
    together = turn_scores(h, bm, cos, alpha=0.0, spread=2.0, turn_vector=1.0, session=0.5)
    assert together[water] - together[doubt] > plain[water] - plain[doubt]  # its session lifts it
    # extended write by write, the norms equal those of the history loaded at once (and summed in chunks)
    assert np.allclose(h.unit_vectors()[1], History.from_notes(h.notes, h.dim).unit_vectors()[1])
    monkeypatch.setattr(history_module, "HEAD_CHUNK", 2)
    assert np.allclose(h.unit_vectors()[1], History.from_notes(h.notes, h.dim).unit_vectors()[1])
