"""Methods declare their mechanism; make_ledger builds the same ledger a hand-built Ledger would."""

import pytest

from dpgen.privacy.ledger import Ledger
from dpgen.privacy.mechanisms import OneShotGaussian, SubsampledGaussian, make_ledger
from dpgen.privacy.validation import PrivacyParameterError


@pytest.mark.parametrize("sampling,accountant", [("poisson", "rdp"), ("without_replacement", "rdp")])
def test_a_calibrated_mechanism_matches_the_hand_built_ledger(sampling, accountant):
    mech = SubsampledGaussian(sampling, 0.01, None)
    ledger = make_ledger(mech, epsilon=2.0, delta=1e-5, steps=500, accountant=accountant)
    by_hand = Ledger(epsilon=2.0, delta=1e-5, sampling=sampling, sample_rate=0.01, accountant=accountant)
    assert ledger.noise_multiplier == pytest.approx(by_hand.calibrate(500), rel=1e-12)
    assert ledger.epsilon_of(ledger.noise_multiplier, 500) <= 2.0 * (1 + 1e-9)
    assert ledger.calibrated


def test_a_given_noise_lets_the_budget_decide_the_steps():
    ledger = make_ledger(SubsampledGaussian("poisson", 0.02, 1.5), epsilon=3.0, delta=1e-5, accountant="rdp")
    n = ledger.max_steps()
    assert ledger.noise_multiplier == 1.5 and n is not None and n > 10
    assert ledger.epsilon_of(1.5, n) <= 3.0 < ledger.epsilon_of(1.5, n + 1)


def test_releases_before_training_are_composed_first():
    plain = make_ledger(SubsampledGaussian("without_replacement", 0.01, 1.0), epsilon=5.0, delta=1e-5, accountant="rdp")
    with_prefix = make_ledger(SubsampledGaussian("without_replacement", 0.01, 1.0, (3.0,)), epsilon=5.0, delta=1e-5,
                              accountant="rdp")
    assert with_prefix.epsilon_of(1.0, 100) > plain.epsilon_of(1.0, 100)
    assert with_prefix.max_steps() < plain.max_steps()


def test_a_one_shot_release_is_one_full_batch_gaussian():
    from dpgen.privacy.wdp import gaussian_dp_epsilon

    ledger = make_ledger(OneShotGaussian(2.0, calibrated=False), epsilon=10.0, delta=1e-5)
    assert ledger.prefix == (2.0,) and ledger.sample_rate == 1.0 and ledger.calibrated is False
    # issue 83: one Gaussian is charged its exact epsilon (dp-accounting's PLD = the analytic Gaussian mechanism,
    # 1.9931 at z 2), no longer autodp's RDP bound of the same release (2.5243)
    assert ledger.accountant_name == "pld" and ledger.one_shot
    assert ledger.epsilon_of(2.0, 0) == pytest.approx(gaussian_dp_epsilon(2.0, 1e-5), abs=1e-6)
    assert ledger.epsilon_of(2.0, 0) < Ledger(epsilon=10.0, delta=1e-5, sampling="without_replacement",
                                              sample_rate=1.0, prefix=(2.0,), accountant="rdp").epsilon_of(2.0, 0)


def test_what_cannot_be_built_is_refused():
    with pytest.raises(PrivacyParameterError, match="no steps"):
        make_ledger(SubsampledGaussian("poisson", 0.01, None), epsilon=1.0, delta=1e-5, steps=0)
    with pytest.raises(TypeError, match="not a mechanism"):
        make_ledger("gaussian", epsilon=1.0, delta=1e-5)


def test_a_mechanism_without_a_ledger_is_refused_naming_every_kind_a_ledger_keeps():
    import pytest

    from dpgen.privacy.mechanisms import LocalRelease, make_ledger

    with pytest.raises(TypeError, match="SubsampledGaussian, OneShotGaussian or ProjectedGaussian; a LocalRelease "
                                        "keeps none"):
        make_ledger(LocalRelease("laplace", 1.0), epsilon=1.0, delta=1e-5)
