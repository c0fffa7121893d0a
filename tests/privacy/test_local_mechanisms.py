"""Local mechanisms of the entropic-LDP paper: projections and noise scales."""

import math

import numpy as np
import pytest
from scipy import stats

from dpgen.privacy.local import (
    analytic_gaussian_sigma,
    gaussian_mechanism,
    gaussian_sigma,
    laplace_mechanism,
    laplace_scale,
    project_l1_ball,
    project_l2_ball,
)
from dpgen.privacy.validation import PrivacyParameterError


def test_l2_projection_holds_and_is_idempotent():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 20)) * rng.uniform(0.01, 3, size=(500, 1))
    p = project_l2_ball(x, 1.5)
    assert np.all(np.linalg.norm(p, axis=1) <= 1.5 + 1e-9)
    inside = np.linalg.norm(x, axis=1) <= 1.5
    np.testing.assert_allclose(p[inside], x[inside])
    np.testing.assert_allclose(project_l2_ball(p, 1.5), p)


def test_l1_projection_is_the_euclidean_projection():
    rng = np.random.default_rng(1)
    x = rng.laplace(size=(200, 10)) * 2
    r = 1.0
    p = project_l1_ball(x, r)
    assert np.all(np.abs(p).sum(axis=1) <= r + 1e-9)
    np.testing.assert_allclose(project_l1_ball(p, r), p, atol=1e-12)
    # optimality: no random point of the ball is closer to x than its projection
    for i in range(20):
        cand = rng.laplace(size=(2000, 10))
        cand = cand / np.abs(cand).sum(axis=1, keepdims=True) * rng.uniform(0, r, size=(2000, 1))
        d_proj = np.linalg.norm(x[i] - p[i])
        assert np.all(np.linalg.norm(cand - x[i], axis=1) >= d_proj - 1e-9)
    # KKT: the projection is a soft-thresholding of x with one threshold per row
    for i in range(20):
        if np.abs(x[i]).sum() > r:
            nz = p[i] != 0
            theta = np.abs(x[i][nz]) - np.abs(p[i][nz])
            np.testing.assert_allclose(theta, theta[0], atol=1e-10)
            assert np.all(np.abs(x[i][~nz]) <= theta[0] + 1e-10)


def test_laplace_noise_has_the_mechanism_scale():
    rng = np.random.default_rng(2)
    x = np.zeros((20000, 5))
    y, b = laplace_mechanism(x, epsilon=2.0, radius=1.0, rng=rng)
    assert b == pytest.approx(2 * 1.0 / 2.0)  # sensitivity = diameter 2r
    noise = (y - x).ravel()
    # Laplace(b): mean |noise| = b; KS test against the exact law
    assert np.mean(np.abs(noise)) == pytest.approx(b, rel=0.02)
    assert stats.kstest(noise, "laplace", args=(0, b)).pvalue > 1e-3
    assert not np.allclose(y, x)


def test_gaussian_noise_has_the_mechanism_scale():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(10000, 8))
    y, s = gaussian_mechanism(x, epsilon=1.0, delta=1e-5, radius=2.0, rng=rng)
    noise = y - project_l2_ball(x, 2.0)
    n = noise.size
    sd = noise.std()
    # sample std within 5 standard errors (se ~ s / sqrt(2n))
    assert abs(sd - s) < 5 * s / math.sqrt(2 * n)
    assert stats.kstest(noise.ravel() / s, "norm").pvalue > 1e-3
    assert not np.any(y == x)


def test_analytic_gaussian_is_tight_and_below_classic():
    # delta(s) of the analytic mechanism equals the target at the returned s
    eps, delta = 0.5, 1e-5
    s = analytic_gaussian_sigma(eps, delta, 1.0)
    a, b = 1 / (2 * s), eps * s
    achieved = stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b)
    assert achieved == pytest.approx(delta, rel=1e-6)
    classic = gaussian_sigma(eps, delta, 0.5, calibration="classic")  # diameter 1
    assert s < classic


def test_paper_sensitivity_halves_the_noise():
    assert laplace_scale(1.0, 1.0, "radius") == pytest.approx(laplace_scale(1.0, 1.0) / 2)
    assert gaussian_sigma(1.0, 1e-5, 1.0, "radius") == pytest.approx(gaussian_sigma(1.0, 1e-5, 0.5))


def test_classic_gaussian_warns_beyond_its_validity():
    with pytest.warns(UserWarning, match="epsilon < 1"):
        gaussian_sigma(5.0, 1e-5, 1.0, calibration="classic")


@pytest.mark.parametrize(
    "call,param",
    [
        (lambda: laplace_scale(0, 1.0), "epsilon"),
        (lambda: laplace_scale(-2, 1.0), "epsilon"),
        (lambda: laplace_scale(1.0, 0), "radius"),
        (lambda: gaussian_sigma(1.0, 1.0, 1.0), "delta"),
        (lambda: gaussian_sigma(1.0, 0.0, 1.0), "delta"),
        (lambda: gaussian_sigma(1.0, 1e-5, -1.0), "radius"),
        (lambda: project_l1_ball(np.ones((2, 2)), 0.0), "radius"),
        (lambda: laplace_mechanism(np.ones((2, 2)), 1.0, 1.0, project=False), "radius"),
        (lambda: laplace_scale(1.0, 1.0, "median"), "sensitivity"),
    ],
)
def test_bad_input_names_the_parameter(call, param):
    with pytest.raises(PrivacyParameterError, match=param):
        call()
