import math

import pytest

from flexamem_bench.stats import bootstrap_ci, holm, mcnemar_exact, paired_bootstrap_diff


def test_mcnemar_exact_matches_the_binomial() -> None:
    a = [True] * 10 + [False] * 2 + [True] * 5
    b = [False] * 10 + [True] * 2 + [True] * 5
    n01, n10, p = mcnemar_exact(a, b)
    assert (n01, n10) == (10, 2)
    assert p == pytest.approx(2 * sum(math.comb(12, i) for i in range(3)) / 2**12)
    assert mcnemar_exact([True, False], [True, False])[2] == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact([True], [True, False])


def test_bootstrap_ci_brackets_the_mean_and_groups() -> None:
    values = [1.0] * 70 + [0.0] * 30
    lo, hi = bootstrap_ci(values, resamples=2000)
    assert lo < 0.7 < hi and hi - lo < 0.25
    groups = [f"c{i % 4}" for i in range(100)]
    glo, ghi = bootstrap_ci(values, groups, resamples=2000)
    assert glo <= 0.7 <= ghi
    assert math.isnan(bootstrap_ci([])[0])
    diff, dlo, dhi = paired_bootstrap_diff([1, 1, 1, 0], [0, 1, 0, 0], resamples=500)
    assert diff == 0.5 and dlo <= diff <= dhi


def test_holm() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([]) == []
