import pytest

from flexamem_bench.folds import choose, deal


def test_deal_spreads_every_group_over_the_folds_the_same_way_each_run() -> None:
    groups = {"b": [f"b{i}" for i in range(8)], "a": [f"a{i}" for i in range(5)]}
    fold_of = deal(groups, 4)
    assert set(fold_of) == {*groups["a"], *groups["b"]}
    assert {fold_of[i] for i in groups["b"]} == {0, 1, 2, 3}  # each fold holds some of every larger group
    sizes = [sum(1 for f in fold_of.values() if f == g) for g in range(4)]
    assert max(sizes) - min(sizes) <= 1
    assert deal({"b": list(reversed(groups["b"])), "a": groups["a"]}, 4) == fold_of  # order-free


def test_each_fold_is_scored_by_the_value_chosen_without_it() -> None:
    fold_of = {"x": 0, "y": 1, "z": 2}
    good = {"v=1": {"x": 1.0, "y": 0.0, "z": 0.0}, "v=2": {"x": 0.0, "y": 0.6, "z": 0.6}}

    def score(key: str, items: set[str]) -> float:
        return sum(good[key][i] for i in items)

    choice = choose(["v=1", "v=2"], "v=1", fold_of, 3, score)
    assert choice.in_fold == "v=2"  # 1.2 against 1.0 on everything
    assert choice.per_fold == ("v=2", "v=1", "v=1")  # without x, v=2 wins; without y or z, v=1 does
    assert choice.held(0) == "v=2"


def test_a_tie_keeps_the_default_and_the_default_must_be_scored() -> None:
    fold_of = {"x": 0, "y": 1}
    choice = choose(["a", "b", "c"], "b", fold_of, 2, lambda key, items: float(len(items)))
    assert choice.in_fold == "b" and choice.per_fold == ("b", "b")
    with pytest.raises(ValueError, match="default"):
        choose(["a"], "b", fold_of, 2, lambda key, items: 0.0)
