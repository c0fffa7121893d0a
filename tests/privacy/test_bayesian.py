"""Tests of dpgen.privacy.bayesian (Triastcyn & Faltings 2020 Bayesian accountant)."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy.special import comb
from scipy.stats import t as student_t

from dpgen.privacy.bayesian import BayesianAccountant, sgm_log_cost, ucb_log_mean_exp
from dpgen.privacy.validation import PrivacyParameterError
from dpgen.privacy.wdp import pairwise_distances


def _distances(seed=0, batch=20, dim=50):
    rng = np.random.default_rng(seed)
    return pairwise_distances(rng.weibull(0.5, size=(batch, dim)) / 10.0)


def test_log_cost_is_the_binomial_moment():
    # c(lambda; d) = log sum_k C(lambda+1, k) q^k (1-q)^(lambda+1-k) exp(k(k-1) d^2 / (2 s^2))
    lam, q, s = 4, 0.05, 1.3
    d = np.array([0.0, 0.4, 2.0])
    ref = [
        math.log(sum(comb(lam + 1, k) * q**k * (1 - q) ** (lam + 1 - k) * math.exp(k * (k - 1) * x * x / (2 * s * s))
                     for k in range(lam + 2)))
        for x in d
    ]
    np.testing.assert_allclose(sgm_log_cost(lam, d, s, q), ref, rtol=1e-12, atol=1e-15)
    assert sgm_log_cost(lam, [0.0], s, q)[0] == pytest.approx(0.0, abs=1e-15)


def test_log_cost_matches_moments_accountant_at_sensitivity_one():
    accountants = pytest.importorskip("dpgen.privacy.accountants")
    for lam in (1, 5, 17):
        assert sgm_log_cost(lam, [1.0], 1.1, 0.01)[0] == pytest.approx(
            accountants.log_moment_poisson_gaussian(lam, 1.1, 0.01), rel=1e-10
        )


def test_ucb_formula():
    x = np.random.default_rng(1).normal(0, 1, 100)
    e = np.exp(x)
    ref = math.log(e.mean() + student_t.isf(1e-3, 99) * e.std(ddof=1) / math.sqrt(100))
    assert ucb_log_mean_exp(x, 1e-3) == pytest.approx(ref, rel=1e-12)
    assert ucb_log_mean_exp(x, 1e-3) > math.log(e.mean())
    # log-space: huge exponents do not overflow
    assert math.isfinite(ucb_log_mean_exp(x * 1e3, 1e-16))
    assert ucb_log_mean_exp(np.full(10, 2.5), 1e-3) == pytest.approx(2.5)  # zero spread: the mean


def test_identical_pairs_reduce_to_the_moments_accountant_bound():
    # all pairs at distance 1, T = 1: BA = min_lambda (k c(lambda;1) - log delta) / lambda
    acc = BayesianAccountant(orders=(1, 2, 4, 8), total_steps=3)
    acc.step(distances=np.ones(10), noise_std=1.2, sample_rate=0.02, num_steps=3)
    ref = min((3 * sgm_log_cost(l, [1.0], 1.2, 0.02)[0] - math.log(1e-5 - acc.confidence_charge())) / l
              for l in (1, 2, 4, 8))
    assert acc.get_epsilon(1e-5) == pytest.approx(ref, rel=1e-12)


def test_epsilon_grows_with_steps():
    d = _distances()
    acc = BayesianAccountant(total_steps=20)
    eps = []
    for _ in range(20):
        acc.step(distances=d, noise_std=1.0, sample_rate=0.01)
        eps.append(acc.get_epsilon(1e-5))
    assert all(b > a for a, b in zip(eps, eps[1:]))
    assert acc.steps == 20


def test_epsilon_shrinks_with_sigma():
    d = _distances()
    eps = []
    for s in (0.5, 1.0, 2.0, 4.0):
        acc = BayesianAccountant(total_steps=10)
        acc.step(distances=d, noise_std=s, sample_rate=0.01, num_steps=10)
        eps.append(acc.get_epsilon(1e-5))
    assert all(b < a for a, b in zip(eps, eps[1:]))


def test_epsilon_shrinks_with_delta_and_grows_with_sample_rate():
    d = _distances()
    a1 = BayesianAccountant(total_steps=5)
    a1.step(distances=d, noise_std=1.0, sample_rate=0.01, num_steps=5)
    a2 = BayesianAccountant(total_steps=5)
    a2.step(distances=d, noise_std=1.0, sample_rate=0.05, num_steps=5)
    assert a1.get_epsilon(1e-3) < a1.get_epsilon(1e-10)
    assert a1.get_epsilon(1e-5) < a2.get_epsilon(1e-5)
    # get_delta inverts get_epsilon (up to the order grid: delta at that eps is <= the target)
    assert a1.get_delta(a1.get_epsilon(1e-5)) <= 1e-5 * (1 + 1e-9)


def test_gradients_and_distances_agree():
    rng = np.random.default_rng(3)
    g = rng.normal(size=(7, 11))
    a = BayesianAccountant(total_steps=2)
    b = BayesianAccountant(total_steps=2)
    a.step(gradients=g, noise_std=2.0, sample_rate=0.1)
    b.step(distances=pairwise_distances(g), noise_std=2.0, sample_rate=0.1)
    assert a.history[0]["num_pairs"] == 21
    assert a.get_epsilon(1e-5) == b.get_epsilon(1e-5)


def test_state_round_trip():
    d = _distances()
    acc = BayesianAccountant(orders=(2, 3, 8), total_steps=6, gamma=1e-12)
    for i in range(3):
        acc.step(distances=d * (1 + 0.1 * i), noise_std=1.0, sample_rate=0.02)
    state = json.loads(json.dumps(acc.state_dict()))
    fresh = BayesianAccountant()
    fresh.load_state_dict(state)
    assert fresh.orders == [2, 3, 8] and fresh.total_steps == 6 and fresh.gamma == 1e-12
    assert fresh.get_epsilon(1e-6) == acc.get_epsilon(1e-6)
    acc.step(distances=d, noise_std=1.0, sample_rate=0.02)
    fresh.step(distances=d, noise_std=1.0, sample_rate=0.02)
    assert fresh.get_epsilon(1e-6) == acc.get_epsilon(1e-6)
    with pytest.raises(ValueError, match="wdp"):
        fresh.load_state_dict({"name": "wdp", "history": []})


def test_warns_beyond_total_steps():
    acc = BayesianAccountant(total_steps=1)
    acc.step(distances=_distances(), noise_std=1.0, sample_rate=0.01)
    with pytest.warns(RuntimeWarning, match="total_steps"):
        acc.step(distances=_distances(), noise_std=1.0, sample_rate=0.01)


def test_no_steps_is_zero():
    assert BayesianAccountant().get_epsilon(1e-5) == 0.0


def _stepped(acc):
    acc.step(distances=[1.0, 2.0, 3.0], noise_std=1.0, sample_rate=0.1)
    return acc


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: BayesianAccountant().step(gradients=np.ones((1, 10)), noise_std=1.0, sample_rate=0.1), "gradients"),
        (lambda: BayesianAccountant().step(gradients=np.ones((2, 10)), noise_std=1.0, sample_rate=0.1), "distances"),
        (lambda: BayesianAccountant().step(distances=[1.0], noise_std=1.0, sample_rate=0.1), "distances"),
        (lambda: BayesianAccountant().step(distances=[1.0, 2.0], noise_std=0.0, sample_rate=0.1), "noise_std"),
        (lambda: BayesianAccountant().step(distances=[1.0, 2.0], noise_std=1.0, sample_rate=0.0), "sample_rate"),
        (lambda: BayesianAccountant().step(distances=[1.0, 2.0], noise_std=1.0, sample_rate=1.2), "sample_rate"),
        (lambda: BayesianAccountant().step(distances=[1.0, 2.0], noise_std=1.0, sample_rate=0.1, num_steps=0),
         "num_steps"),
        (lambda: BayesianAccountant().step(noise_std=1.0, sample_rate=0.1), "distances"),
        (lambda: BayesianAccountant(orders=(0, 2)), "orders"),
        (lambda: BayesianAccountant(orders=(1.5,)), "orders"),
        (lambda: BayesianAccountant(orders=()), "orders"),
        (lambda: BayesianAccountant(total_steps=0), "total_steps"),
        (lambda: BayesianAccountant(gamma=0.0), "gamma"),
        (lambda: BayesianAccountant(gamma=1.0), "gamma"),
        (lambda: BayesianAccountant(gamma=0.5), "gamma"),
        (lambda: BayesianAccountant().get_epsilon(0.0), "delta"),
        (lambda: BayesianAccountant().get_epsilon(1.0), "delta"),
        (lambda: _stepped(BayesianAccountant(gamma=0.4)).get_epsilon(1e-5), "delta"),
    ],
)
def test_bad_input_raises_naming_parameter(call, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(PrivacyParameterError, match=name):
            call()
