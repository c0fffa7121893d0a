"""Tests of dpgen.privacy.wdp: Table 1, Propositions 4 and 9-11, Lemma 1, Theorems 2-3 / Corollary 1."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import hyp1f1

from dpgen.privacy.validation import PrivacyParameterError
from dpgen.privacy.wdp import (
    WassersteinAccountant,
    dp_to_wdp,
    gaussian_abs_moment,
    gaussian_dp_epsilon,
    gaussian_epsilon,
    gaussian_rdp,
    gaussian_wdp,
    kummer_m,
    laplace_epsilon,
    laplace_kl,
    laplace_rdp,
    laplace_wdp,
    numerical_wasserstein_1d,
    pairwise_distances,
    rdp_to_wdp,
    wdp_abs_moment,
    wdp_epsilon,
    wdp_log_delta,
    wdp_step_loss,
    wdp_to_dp,
    wdp_to_rdp,
    wdp_variance,
)

SCALES = (1.0, 2.0, 3.0, 5.0)
ORDERS = tuple(range(1, 11))


# ------------------------------------------------------------------------------------------------
# Proposition 4: monotonicity in mu
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("fn", [laplace_wdp, gaussian_wdp])
def test_wdp_closed_forms_non_decreasing_in_order(fn, scale):
    vals = [fn(scale, mu) for mu in np.linspace(1, 10, 37)]
    assert all(b >= a - 1e-15 for a, b in zip(vals, vals[1:]))


def test_gaussian_closed_form_decreases_in_order_when_sigma_below_sensitivity():
    # documented limitation: the printed formula 1/2 (Delta/sigma)^(1/mu) violates Proposition 4
    # when sigma < Delta (base > 1)
    assert gaussian_wdp(0.5, 1) > gaussian_wdp(0.5, 4) > gaussian_wdp(0.5, 10)


@pytest.mark.parametrize("d", [0.0, 3.0, 40.0])
def test_theorem2_loss_of_one_pair_non_decreasing_in_order(d):
    # one pair: W = (E|Z|^mu)^(1/mu) is a Lyapunov norm, non-decreasing in mu
    vals = [wdp_step_loss([d], 1.5, 0.3, mu) for mu in np.linspace(1, 12, 23)]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(vals, vals[1:]))


# ------------------------------------------------------------------------------------------------
# Lemma 1: Kummer's function and the absolute moment
# ------------------------------------------------------------------------------------------------
A_GRID = (-0.5, -1.0, -1.5, -2.5, -4.0, -8.0, -8.5, 0.5, 1.3)
B_GRID = (0.5, 1.5, 3.3)


@pytest.mark.parametrize("a", A_GRID)
@pytest.mark.parametrize("b", B_GRID)
def test_kummer_matches_scipy_on_negative_axis(a, b):
    z = np.concatenate([-np.logspace(-4, 4, 60), [0.0]])
    ours = kummer_m(a, b, z)
    ref = hyp1f1(a, b, z)
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=0)


@pytest.mark.parametrize("a", A_GRID)
@pytest.mark.parametrize("b", B_GRID)
def test_kummer_matches_scipy_on_positive_axis(a, b):
    z = np.logspace(-4, 1, 25)
    np.testing.assert_allclose(kummer_m(a, b, z), hyp1f1(a, b, z), rtol=1e-8, atol=1e-12)


def test_kummer_scalar_and_special_values():
    assert isinstance(kummer_m(-1.0, 0.5, -2.0), float)
    assert kummer_m(-1.0, 0.5, -2.0) == pytest.approx(1 + 2 * 2.0)  # M(-1, 1/2, -x) = 1 + 2x
    assert kummer_m(0.7, 1.9, 0.0) == 1.0
    assert kummer_m(1.0, 1.0, -3.0) == pytest.approx(math.exp(-3.0), rel=1e-13)  # M(a, a, z) = e^z
    with pytest.raises(PrivacyParameterError, match="b="):
        kummer_m(0.5, -2.0, 1.0)


def test_paper_series_eq14_equals_kummer():
    # Eq. (14): sum_n q^2n d^2n / (n! 4^n (1-q+q^2)^n sigma^2n) prod_i (mu-2i+2)/(2i-1)
    for mu, q, d, sigma in [(3.0, 0.2, 5.0, 1.3), (16.0, 0.01, 200.0, 30.0), (2.5, 0.9, 1.0, 0.7)]:
        x = q * q * d * d / (4 * (1 - q + q * q) * sigma * sigma)
        total, term = 1.0, 1.0
        for n in range(1, 400):
            term *= x / n * (mu - 2 * n + 2) / (2 * n - 1)
            total += term
            if abs(term) < 1e-17 * abs(total) and n > mu:
                break
        var = wdp_variance(sigma, q)
        assert kummer_m(-mu / 2, 0.5, -(q * d) ** 2 / (2 * var)) == pytest.approx(total, rel=1e-10)


@pytest.mark.parametrize("mu,mean,var", [(1.0, 1.5, 4.0), (1.5, -0.7, 1.0), (2.5, 3.0, 2.0), (4.0, 0.3, 0.5)])
def test_abs_moment_against_monte_carlo(mu, mean, var):
    rng = np.random.default_rng(12345)
    x = np.abs(rng.normal(mean, math.sqrt(var), size=10**6)) ** mu
    se = x.std(ddof=1) / math.sqrt(x.size)
    assert abs(gaussian_abs_moment(mu, mean, var) - x.mean()) < 5 * se


def test_abs_moment_closed_forms():
    m, s = 1.3, 0.8
    assert gaussian_abs_moment(2, m, s * s) == pytest.approx(s * s + m * m, rel=1e-13)
    folded = s * math.sqrt(2 / math.pi) * math.exp(-m * m / (2 * s * s)) + m * (1 - 2 * stats.norm.cdf(-m / s))
    assert gaussian_abs_moment(1, m, s * s) == pytest.approx(folded, rel=1e-12)
    assert gaussian_abs_moment(4, m, s * s) == pytest.approx(m**4 + 6 * m * m * s * s + 3 * s**4, rel=1e-12)
    # Lemma 1 as used by the accountant: Z ~ N(q d, (2 - 2q + 2q^2) sigma^2)
    q, d, sig = 0.3, 2.0, 1.1
    var = (2 - 2 * q + 2 * q * q) * sig * sig
    assert wdp_abs_moment(2, d, sig, q) == pytest.approx(var + (q * d) ** 2, rel=1e-13)


# ------------------------------------------------------------------------------------------------
# Table 1 against direct numerical computation
# ------------------------------------------------------------------------------------------------
def _renyi_numeric(logp, logq, alpha, lo=-80, hi=80):
    """D_alpha(P || Q) by quadrature of the densities (KL at alpha = 1)."""
    if alpha == 1:
        f = lambda x: math.exp(logp(x)) * (logp(x) - logq(x))  # noqa: E731
        return integrate.quad(f, lo, hi, points=[0, 1], limit=400)[0]
    f = lambda x: math.exp(alpha * logp(x) + (1 - alpha) * logq(x))  # noqa: E731
    return math.log(integrate.quad(f, lo, hi, points=[0, 1], limit=400)[0]) / (alpha - 1)


@pytest.mark.parametrize("scale", [1.0, 2.0])
@pytest.mark.parametrize("alpha", [1, 1.5, 2, 5])
def test_laplace_rdp_matches_numerical_renyi(scale, alpha):
    p = lambda x: stats.laplace.logpdf(x, 0, scale)  # noqa: E731
    q = lambda x: stats.laplace.logpdf(x, 1, scale)  # noqa: E731
    assert laplace_rdp(scale, alpha) == pytest.approx(_renyi_numeric(p, q, alpha), rel=1e-6)


@pytest.mark.parametrize("sigma", [1.0, 3.0])
@pytest.mark.parametrize("alpha", [1, 2, 7])
def test_gaussian_rdp_matches_numerical_renyi(sigma, alpha):
    p = lambda x: stats.norm.logpdf(x, 0, sigma)  # noqa: E731
    q = lambda x: stats.norm.logpdf(x, 1, sigma)  # noqa: E731
    assert gaussian_rdp(sigma, alpha) == pytest.approx(_renyi_numeric(p, q, alpha), rel=1e-6)


def test_laplace_rdp_limits():
    assert laplace_rdp(2.0, 1.0) == pytest.approx(laplace_rdp(2.0, 1.0 + 1e-7), rel=1e-5)
    assert laplace_rdp(2.0, float("inf")) == pytest.approx(0.5)
    assert laplace_rdp(0.05, 200.0) < 1 / 0.05 + 1e-9  # log-space: no overflow at large orders


@pytest.mark.parametrize("mu", [1.0, 2.0, 3.5])
@pytest.mark.parametrize("delta_shift", [1.0, 2.5])
def test_true_wasserstein_of_shifted_mechanisms_is_the_shift(mu, delta_shift):
    # W_mu between a distribution and its translate by Delta is Delta, for every mu (1-D quantile
    # coupling); the paper's Table 1 WDP entries are a different quantity (see next test).
    for dist in (stats.norm(0, 2.0), stats.laplace(0, 2.0)):
        w = numerical_wasserstein_1d(dist.ppf, lambda u: dist.ppf(u) + delta_shift, mu)
        assert w == pytest.approx(delta_shift, rel=1e-9)
    # and a non-trivial check of the numerical W: N(0,1) vs N(0,4) gives |1 - 2| (E|X|^mu)^(1/mu)
    w = numerical_wasserstein_1d(stats.norm(0, 1).ppf, stats.norm(0, 2).ppf, mu)
    assert w == pytest.approx(gaussian_abs_moment(mu, 0.0, 1.0) ** (1 / mu), rel=1e-3)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("mu", [1, 2, 5, 10])
def test_table1_wdp_is_proposition10_of_the_kl(scale, mu):
    assert laplace_wdp(scale, mu) == pytest.approx(rdp_to_wdp(laplace_kl(scale), mu), rel=1e-13)
    assert gaussian_wdp(scale, mu) == pytest.approx(rdp_to_wdp(gaussian_rdp(scale, 1), mu), rel=1e-13)
    assert laplace_wdp(scale, mu) < 1.0 and gaussian_wdp(scale, mu) < 1.0  # below the true W_mu = Delta


def test_epsilon_dispatch_and_dp():
    assert laplace_epsilon(2.0, framework="dp") == 0.5
    assert laplace_epsilon(2.0, 3, "rdp") == laplace_rdp(2.0, 3)
    assert laplace_epsilon(2.0, 3, "WDP") == laplace_wdp(2.0, 3)
    assert gaussian_epsilon(2.0, framework="dp") == float("inf")
    assert gaussian_epsilon(2.0, 3, "rdp") == pytest.approx(3 / 8)
    assert laplace_wdp(2.0, 3, sensitivity=2.0) == pytest.approx(2 * laplace_wdp(2.0, 3))
    assert laplace_rdp(4.0, 3, sensitivity=2.0) == pytest.approx(laplace_rdp(2.0, 3))
    # analytic Gaussian mechanism: the returned eps reproduces delta, and is tighter than the classic bound
    for sigma, delta in [(1.0, 1e-5), (4.0, 1e-6), (0.7, 1e-3)]:
        eps = gaussian_epsilon(sigma, framework="dp", delta=delta)
        u, v = 1 / (2 * sigma), eps * sigma
        back = stats.norm.cdf(u - v) - math.exp(eps) * stats.norm.cdf(-u - v)
        assert back == pytest.approx(delta, rel=1e-6)
        assert eps <= math.sqrt(2 * math.log(1.25 / delta)) / sigma
    assert gaussian_dp_epsilon(1e3, 0.5) == 0.0


# ------------------------------------------------------------------------------------------------
# Propositions 9-11
# ------------------------------------------------------------------------------------------------
def test_conversions_as_stated():
    assert dp_to_wdp(1.0, 2, sensitivity=3.0) == pytest.approx(0.5 * 3.0 * (2 * (math.e - 1)) ** 0.25)
    assert rdp_to_wdp(0.5, 3) == pytest.approx(0.5)
    assert rdp_to_wdp(2.0, 1, sensitivity=2.0) == pytest.approx(2.0)
    assert wdp_to_rdp(0.25, 1, 2, lipschitz=3.0) == pytest.approx(2 * 3.0 * 0.25**0.5)
    assert wdp_to_dp(0.25, 3, lipschitz=2.0) == pytest.approx(2.0 * 0.25**0.75)
    # RDP bound decreases to the DP bound as alpha grows
    vals = [wdp_to_rdp(0.3, 2, a, 1.5) for a in (1.5, 2, 10, 1e6)]
    assert all(x > y for x, y in zip(vals, vals[1:]))
    assert vals[-1] == pytest.approx(wdp_to_dp(0.3, 2, 1.5), rel=1e-5)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("mu", [1, 3, 10])
def test_dp_route_is_looser_than_kl_route(scale, mu):
    # eps-DP implies KL <= eps (e^eps - 1), so Proposition 9 >= Proposition 10 at the KL value
    eps = laplace_epsilon(scale, framework="dp")
    assert laplace_kl(scale) <= eps * math.expm1(eps)
    assert dp_to_wdp(eps, mu) >= laplace_wdp(scale, mu)


# ------------------------------------------------------------------------------------------------
# Theorems 2-3, Corollary 1 and the accountant
# ------------------------------------------------------------------------------------------------
def test_step_loss_definition():
    d = np.array([0.5, 2.0, 7.0])
    sig, q, mu = 1.3, 0.2, 3.0
    direct = sum(wdp_abs_moment(mu, x, sig, q) for x in d) ** (1 / mu)
    assert wdp_step_loss(d, sig, q, mu) == pytest.approx(direct, rel=1e-12)
    # huge moments do not overflow (log-sum-exp)
    assert math.isfinite(wdp_step_loss(np.full(1225, 300.0), 1e4, 1.0, 64))


def test_pairwise_distances():
    rng = np.random.default_rng(0)
    g = rng.normal(size=(6, 9))
    d = pairwise_distances(g)
    ref = [np.linalg.norm(g[i] - g[j]) for i in range(6) for j in range(i + 1, 6)]
    np.testing.assert_allclose(d, ref, rtol=1e-10)
    assert d.size == 15


def test_accountant_composition_and_theorem3():
    rng = np.random.default_rng(1)
    g = rng.weibull(0.5, size=(8, 20))
    acc = WassersteinAccountant(order=4, beta=2.0)
    w1 = acc.step(gradients=g, noise_std=0.5, sample_rate=0.01)
    w2 = acc.step(distances=pairwise_distances(g), noise_std=0.5, sample_rate=0.01, num_steps=3)
    assert w1 == pytest.approx(w2)
    assert acc.steps == 4 and acc.history[0]["num_pairs"] == 28
    eps = acc.get_epsilon(1e-5)
    assert eps == pytest.approx(4 * w1 - math.log(1e-5) / 2.0)
    assert eps == pytest.approx(wdp_epsilon(acc.total_loss(), 1e-5, 2.0))
    # Theorem 3 and Corollary 1 are the same relation
    assert acc.get_log_delta(eps) == pytest.approx(math.log(1e-5))
    assert wdp_log_delta(acc.total_loss(), eps, 2.0) == pytest.approx(math.log(1e-5))
    # epsilon falls with beta and with delta
    assert acc.get_epsilon(1e-5, beta=10) < eps < acc.get_epsilon(1e-10)


def test_accountant_state_round_trip():
    rng = np.random.default_rng(2)
    acc = WassersteinAccountant(order=8, beta=3.0)
    for _ in range(5):
        acc.step(gradients=rng.normal(size=(10, 30)), noise_std=0.8, sample_rate=0.05)
    state = json.loads(json.dumps(acc.state_dict()))
    fresh = WassersteinAccountant()  # default order/beta: restored from the state
    fresh.load_state_dict(state)
    assert fresh.order == 8 and fresh.beta == 3.0 and fresh.steps == 5
    assert fresh.get_epsilon(1e-6) == acc.get_epsilon(1e-6)
    # continuing after the restore equals an uninterrupted run
    g = rng.normal(size=(10, 30))
    acc.step(gradients=g, noise_std=0.8, sample_rate=0.05)
    fresh.step(gradients=g, noise_std=0.8, sample_rate=0.05)
    assert fresh.get_epsilon(1e-6) == acc.get_epsilon(1e-6)
    with pytest.raises(ValueError, match="bdp"):
        fresh.load_state_dict({"name": "bdp", "history": []})


# ------------------------------------------------------------------------------------------------
# bad input names the parameter
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: laplace_epsilon(0.0, 2), "scale"),
        (lambda: laplace_epsilon(-1.0, 2, "rdp"), "scale"),
        (lambda: gaussian_epsilon(0.0, 2), "sigma"),
        (lambda: laplace_wdp(1.0, 0.5), "mu"),
        (lambda: laplace_rdp(1.0, 0.9), "alpha"),
        (lambda: gaussian_epsilon(1.0, 0.0, "wdp"), "mu"),
        (lambda: gaussian_epsilon(1.0, None, "rdp"), "order"),
        (lambda: laplace_epsilon(1.0, 2, "zcdp"), "framework"),
        (lambda: gaussian_epsilon(1.0, framework="dp", delta=1.5), "delta"),
        (lambda: laplace_wdp(1.0, 2, sensitivity=0), "sensitivity"),
        (lambda: wdp_epsilon(3.0, 0.0), "delta"),
        (lambda: wdp_epsilon(3.0, 1.0), "delta"),
        (lambda: wdp_epsilon(3.0, 1e-5, beta=0), "beta"),
        (lambda: WassersteinAccountant(beta=-1), "beta"),
        (lambda: WassersteinAccountant(order=0.5), "order"),
        (lambda: wdp_step_loss([1.0], 1.0, 1.5, 2), "sample_rate"),
        (lambda: wdp_step_loss([1.0], 1.0, 0.0, 2), "sample_rate"),
        (lambda: wdp_step_loss([1.0], 0.0, 0.5, 2), "noise_std"),
        (lambda: wdp_step_loss([], 1.0, 0.5, 2), "distances"),
        (lambda: wdp_step_loss([-1.0], 1.0, 0.5, 2), "distances"),
        (lambda: WassersteinAccountant().step(gradients=np.ones((1, 5)), noise_std=1, sample_rate=0.1), "gradients"),
        (lambda: WassersteinAccountant().step(noise_std=1, sample_rate=0.1), "distances"),
        (lambda: WassersteinAccountant().get_epsilon(2.0), "delta"),
        (lambda: dp_to_wdp(0.0, 2), "epsilon"),
        (lambda: wdp_to_rdp(0.5, 2, 1.0, 1.0), "alpha"),
        (lambda: wdp_to_rdp(0.5, 2, 2.0, 0.0), "lipschitz"),
    ],
)
def test_bad_input_raises_naming_parameter(call, name):
    with pytest.raises(PrivacyParameterError, match=name):
        call()
