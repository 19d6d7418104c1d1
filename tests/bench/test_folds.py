import pytest

from flexamem_bench.folds import Choice, candidates, choose, deal, narrowed, report, table


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


def test_the_report_scores_each_item_by_the_value_chosen_without_its_fold() -> None:
    class Defaults:
        v, w = 1, 1

    results = {"auto": {"x": 0.5, "y": 0.5}, "v=1": {"x": 1.0, "y": 0.0}, "v=2": {"x": 0.0, "y": 0.6}}
    settings = candidates(results, ["auto"], {"v": [1, 2], "w": [1]}, Defaults())
    assert settings == {"variant": ("auto", ["auto"]), "v": ("v=1", ["v=1", "v=2"])}  # w was not scored
    fold_of = {"x": 0, "y": 1}

    def objective(scores: dict[str, float], items: set[str]) -> float:
        return sum(scores[i] for i in items)

    def held(choice: Choice) -> dict[str, float]:
        return {i: results[choice.held(fold_of[i])][i] for i in fold_of}

    rows = report(results, settings, fold_of, 2, objective, held, lambda s: sorted(s.values()))
    v = rows[1]
    assert v["chosen_per_fold"] == ["v=2", "v=1"]  # fold 0 (x) is chosen on y, fold 1 (y) on x
    assert v["out_of_fold_score"] == 0.0 and v["in_fold_score"] == 1.0 == v["default_score"]
    assert v["every_value"] == {"v=1": [0.0, 1.0], "v=2": [0.0, 0.6]}
    assert "| v | 1 | 1 | 2, 1 | 100.00 | 100.00 | 0.00 |" in table(rows)
    assert narrowed("v", {"v": [1], "w": [2]}, ["auto", "auto-x"]) == ({"v": [1]}, ("auto",))
    with pytest.raises(ValueError, match="no grid for z"):
        narrowed("v,z", {"v": [1]}, ["auto"])
