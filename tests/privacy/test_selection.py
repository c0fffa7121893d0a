"""dpgen.privacy.selection: the exponential mechanism that picks a post-processing setting on held-out records."""

import math

import numpy as np
import pytest

from dpgen.privacy.selection import (bounded_scores, choice_ratio_bound, exponential_choice, parallel_epsilon,
                                     selection_probabilities)
from dpgen.privacy.validation import PrivacyParameterError


def test_one_record_moves_each_score_by_at_most_the_bound_whatever_it_holds():
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 2, size=(300, 5))
    s0 = bounded_scores(base, 2.0)
    for row in ([5.0, -3.0, np.nan, np.inf, -np.inf], [2.0] * 5, [1e300, 0.5, 0.0, 2.0, 1.0]):
        s1 = bounded_scores(np.vstack([base, np.asarray(row, dtype=float)]), 2.0)
        assert np.all(np.abs(s1 - s0) <= 2.0 + 1e-12)
        assert np.all(np.isfinite(s1))
    # a NaN contributes nothing, +inf the bound
    assert bounded_scores([[np.nan, np.inf]], 2.0).tolist() == [0.0, 2.0]


def test_choice_probabilities_change_by_at_most_exp_epsilon_between_neighbours():
    rng = np.random.default_rng(1)
    eps, bound = 0.7, 2.0
    for _ in range(200):
        s = rng.uniform(0, 1000, size=6)
        s_neighbour = s + rng.uniform(-bound, bound, size=6)  # one record more or less: each score within the bound
        ratio = selection_probabilities(s, bound, eps) / selection_probabilities(s_neighbour, bound, eps)
        assert ratio.max() <= choice_ratio_bound(eps) * (1 + 1e-9)
        assert ratio.min() >= 1 / choice_ratio_bound(eps) * (1 - 1e-9)


def test_the_sampler_draws_the_exponential_mechanisms_distribution():
    """Gumbel-max draws candidate j with probability softmax(eps s / (2 Delta)): frequencies of 40,000 draws agree
    within 5 standard errors (a noise scale off by a factor 2 moves them by far more)."""
    scores, bound, eps = [10.0, 12.0, 13.0, 9.0], 2.0, 1.5
    p = selection_probabilities(scores, bound, eps)
    rng = np.random.default_rng(2)
    n = 40000
    counts = np.bincount([exponential_choice(scores, bound, eps, rng=rng) for _ in range(n)], minlength=4)
    se = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(counts / n - p) < 5 * se)
    wrong = selection_probabilities(scores, bound, 2 * eps)  # what a halved noise scale would draw
    assert np.any(np.abs(counts / n - wrong) > 10 * se)


def test_a_clear_winner_is_chosen_and_noise_comes_from_os_entropy_by_default():
    assert exponential_choice([0.0, 5000.0, 0.0], 2.0, 1.0) == 1
    draws = {exponential_choice([0.0, 0.0, 0.0, 0.0], 2.0, 1.0) for _ in range(200)}
    assert len(draws) > 1  # unseeded: not one fixed answer


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "x"])
def test_bad_epsilon_is_named(bad):
    with pytest.raises(PrivacyParameterError, match="epsilon"):
        exponential_choice([1.0, 2.0], 2.0, bad)


def test_non_finite_scores_and_bad_shapes_are_refused_without_their_values():
    with pytest.raises(ValueError, match="not finite") as err:
        exponential_choice([1.0, float("nan")], 2.0, 1.0)
    assert "nan" not in str(err.value).lower().replace("not finite", "")
    with pytest.raises(ValueError, match="records, candidates"):
        bounded_scores([1.0, 2.0], 2.0)


def test_parallel_composition_is_the_larger_epsilon():
    assert parallel_epsilon(9.9995, 1.0) == 9.9995
    assert parallel_epsilon(1.0, 2.5) == 2.5
    assert math.isclose(choice_ratio_bound(1.0), math.e)
