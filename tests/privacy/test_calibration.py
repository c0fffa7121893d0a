"""Calibration: sigma -> epsilon -> sigma round trips, precision, and bad input."""

import pytest

from dpgen.privacy.accountants import epsilon_for
from dpgen.privacy.calibration import (
    calibrate,
    calibrate_noise_multiplier,
    steps_for_epochs,
    steps_to_epsilon,
)
from dpgen.privacy.validation import PrivacyParameterError


@pytest.mark.parametrize(
    "eps,delta,q,steps,sampling",
    [
        (10, 1e-5, 128 / 10000, 7900, "without_replacement"),
        (1, 1e-5, 0.01, 1000, "without_replacement"),
        (3, 1e-3, 32 / 497, 800, "without_replacement"),
        (10, 1e-5, 50 / 60000, 200000, "poisson"),
        (0.5, 1e-6, 0.05, 100, "poisson"),
    ],
)
def test_calibration_reaches_target_to_relative_precision(eps, delta, q, steps, sampling):
    z = calibrate_noise_multiplier(eps, delta, q, steps, sampling, rel_tol=1e-3)
    reached = epsilon_for(z, q, steps, delta, sampling)
    assert reached <= eps  # never overspends
    # 1e-3 relative: a noise multiplier 0.1 % smaller overspends
    assert epsilon_for(z / 1.001, q, steps, delta, sampling) > eps
    assert reached == pytest.approx(eps, rel=1e-2)


@pytest.mark.parametrize("z0", [0.7, 1.3, 3.0])
def test_round_trip_sigma_epsilon_sigma(z0):
    q, steps, delta = 0.02, 500, 1e-5
    eps = epsilon_for(z0, q, steps, delta, "without_replacement")
    z1 = calibrate_noise_multiplier(eps, delta, q, steps, "without_replacement", rel_tol=1e-4)
    assert z1 == pytest.approx(z0, rel=1e-3)


def test_calibrate_reports_sigma_from_sensitivity():
    out = calibrate(10, 1e-5, n=60000, batch_size=100, epochs=1, sensitivity=2.5, sampling="poisson")
    assert out["steps"] == 600
    assert out["sigma"] == pytest.approx(2.5 * out["noise_multiplier"])
    assert out["epsilon_reached"] <= 10


def test_steps_for_epochs_counts_last_partial_batch():
    assert steps_for_epochs(10000, 128, 1) == 79
    assert steps_for_epochs(10000, 128, 100) == 7900
    assert steps_for_epochs(100, 10, 2.5) == 25


def test_steps_to_epsilon_is_the_largest_admissible_count():
    z, q, d = 1.1, 0.01, 1e-5
    t = steps_to_epsilon(2.0, d, z, q, "poisson")
    assert epsilon_for(z, q, t, d, "poisson") <= 2.0 < epsilon_for(z, q, t + 1, d, "poisson")
    assert steps_to_epsilon(1e-3, d, 0.5, 0.5, "poisson") == 0


@pytest.mark.parametrize(
    "kwargs,param",
    [
        (dict(epsilon=0, delta=1e-5, sample_rate=0.1, steps=10), "epsilon"),
        (dict(epsilon=-1, delta=1e-5, sample_rate=0.1, steps=10), "epsilon"),
        (dict(epsilon=1, delta=1.0, sample_rate=0.1, steps=10), "delta"),
        (dict(epsilon=1, delta=0.0, sample_rate=0.1, steps=10), "delta"),
        (dict(epsilon=1, delta=1e-5, sample_rate=0.0, steps=10), "sample_rate"),
        (dict(epsilon=1, delta=1e-5, sample_rate=1.01, steps=10), "sample_rate"),
        (dict(epsilon=1, delta=1e-5, sample_rate=0.1, steps=0), "steps"),
    ],
)
def test_bad_input_names_the_parameter(kwargs, param):
    with pytest.raises(PrivacyParameterError, match=param):
        calibrate_noise_multiplier(**kwargs)


def test_batch_larger_than_dataset_is_rejected():
    with pytest.raises(PrivacyParameterError, match="batch_size"):
        calibrate(10, 1e-5, n=100, batch_size=200, epochs=1)


def test_calibration_reaches_epsilons_below_the_surrogates_floor():
    """The numpy surrogate (wang_wor) floors near epsilon 3.6 at this setting (its RDP orders); the calibration
    then falls back to autodp itself instead of refusing, and the ledger's prefix search does not loop."""
    from dpgen.privacy.accountants import epsilon_for
    from dpgen.privacy.ledger import Ledger

    q, steps = 100 / 1437, 450
    assert epsilon_for(1e6, q, steps, 1e-5, "without_replacement", "wang_wor") > 1.0
    z = calibrate_noise_multiplier(1.0, 1e-5, q, steps, "without_replacement")
    assert epsilon_for(z, q, steps, 1e-5, "without_replacement", "rdp") <= 1.0
    ledger = Ledger(epsilon=1.0, delta=1e-5, sampling="without_replacement", sample_rate=q, prefix=(40.0,))
    z2 = ledger.calibrate(steps)
    assert z2 > z and ledger.epsilon_of(z2, steps) <= 1.0
