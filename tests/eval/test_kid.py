"""KID (dpgen.eval.kid): the U-statistic against its definition, its unbiasedness at small n (what makes a quick
evaluation's number comparable with a large one's; FID's estimate is not), and its jackknife standard error."""

import numpy as np
import pytest

from dpgen.eval.kid import kid


def _direct(x, y):
    d = x.shape[1]
    k = lambda a, b: (a @ b / d + 1.0) ** 3  # noqa: E731
    m, n = len(x), len(y)
    sxx = sum(k(x[i], x[j]) for i in range(m) for j in range(m) if i != j)
    syy = sum(k(y[i], y[j]) for i in range(n) for j in range(n) if i != j)
    sxy = sum(k(x[i], y[j]) for i in range(m) for j in range(n))
    return sxx / (m * (m - 1)) + syy / (n * (n - 1)) - 2 * sxy / (m * n)


def test_kid_is_the_u_statistic_of_its_definition():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(9, 5)), rng.normal(0.3, 1.2, size=(12, 5))
    out = kid(x, y, groups=3)
    assert out["kid"] == pytest.approx(_direct(x, y), rel=1e-12)
    assert (out["kid_generated"], out["kid_real"]) == (9, 12)


def test_kid_leave_one_group_out_matches_recomputing():
    # the jackknife's leave-out estimates come from group sums: the same as recomputing without the group
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(10, 4)), rng.normal(0.5, 1.0, size=(11, 4))
    g = 8
    out = kid(x, y, groups=g, seed=3)
    # recompute: the same seeded group assignment
    r = np.random.default_rng(3)
    gx, gy = r.permutation(10) % g, r.permutation(11) % g
    loo = np.array([_direct(x[gx != b], y[gy != b]) for b in range(g)])
    se = np.sqrt((g - 1) / g * ((loo - loo.mean()) ** 2).sum())
    assert out["kid_se"] == pytest.approx(se, rel=1e-10)


def test_kid_is_unbiased_at_small_n_and_its_se_is_the_spread():
    rng = np.random.default_rng(2)
    d, reps, small = 16, 300, 40
    # equal distributions: the population MMD^2 is 0; the U-statistic averages to 0, a V-statistic would not
    same = np.array([kid(rng.normal(size=(small, d)), rng.normal(size=(small, d)))["kid"] for _ in range(reps)])
    assert abs(same.mean()) < 4 * same.std(ddof=1) / np.sqrt(reps)
    # different distributions: small-n estimates average to the large-sample value
    shift = np.full(d, 0.4)
    draws = [kid(rng.normal(size=(small, d)) + shift, rng.normal(size=(small, d))) for _ in range(reps)]
    est = np.array([o["kid"] for o in draws])
    big = kid(rng.normal(size=(2000, d)) + shift, rng.normal(size=(2000, d)))
    tol = 4 * np.sqrt(est.var(ddof=1) / reps + big["kid_se"] ** 2)
    assert est.mean() == pytest.approx(big["kid"], abs=tol)
    assert big["kid"] > 10 * big["kid_se"]  # a real difference, seen
    # the jackknife s.e. tracks the estimate's spread across draws (within a factor 1.6 on average)
    ratio = np.mean([o["kid_se"] for o in draws]) / est.std(ddof=1)
    assert 1 / 1.6 < ratio < 1.6


def test_kid_subsamples_and_refuses_bad_shapes():
    rng = np.random.default_rng(4)
    out = kid(rng.normal(size=(50, 3)), rng.normal(size=(30, 3)), max_samples=25)
    assert (out["kid_generated"], out["kid_real"]) == (25, 25)
    with pytest.raises(ValueError, match="equal d"):
        kid(np.zeros((30, 3)), np.zeros((30, 4)))
    with pytest.raises(ValueError, match="at least 12 features a side"):
        kid(np.zeros((10, 3)), np.zeros((30, 3)))
