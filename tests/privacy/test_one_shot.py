"""One-shot releases (issue 83): every declared OneShotGaussian is calibrated or refused by the privacy library
before anything is trained or released, and it is calibrated and charged by the tightest valid accountant, the
exact epsilon of one Gaussian (dp-accounting's PLD = the analytic Gaussian mechanism of Balle & Wang 2018)."""

from __future__ import annotations

import textwrap

import pytest

from dpgen.privacy.local import analytic_gaussian_sigma
from dpgen.privacy.mechanisms import OneShotGaussian, SubsampledGaussian, check_declared, make_ledger
from dpgen.privacy.validation import PrivacyParameterError


def _pld_one_gaussian(z: float, delta: float) -> float:
    """dp-accounting's PLD of one GaussianDpEvent, through its own API (not dpgen's wrapper)."""
    import dp_accounting
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    acc = PLDAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(z))
    return float(acc.get_epsilon(delta))


# ---- a given noise over the budget is refused; a missing one is calibrated --------------------------------------


def test_a_fixed_noise_over_the_budget_is_refused_before_anything_is_released():
    # the finding: a fixed noise whose one release spends epsilon 2.56 (z 1.6) declared under a budget of 1.0
    with pytest.raises(PrivacyParameterError) as e:
        make_ledger(OneShotGaussian(1.6, sensitivity=0.01, label="toy"), epsilon=1.0, delta=1e-5)
    text = str(e.value)
    assert "method.noise_multiplier=1.6 spends epsilon 2.56 > privacy.epsilon=1" in text
    assert "at least 3.73" in text and "null" in text  # the fix: the noise the budget needs, or calibrate


def test_a_missing_noise_is_calibrated_to_the_budget():
    for eps in (0.5, 1.0, 10.0):
        ledger = make_ledger(OneShotGaussian(None, sensitivity=0.01), epsilon=eps, delta=1e-5)
        z = ledger.prefix[0]
        assert ledger.calibrated and ledger.one_shot and ledger.noise_multiplier is None  # no per-step noise
        spent = ledger.epsilon_of(z, 0)
        assert eps - 1e-3 <= spent <= eps and spent == pytest.approx(_pld_one_gaussian(z, 1e-5), abs=1e-6)
        assert z == pytest.approx(analytic_gaussian_sigma(eps, 1e-5), rel=1e-3)


def test_a_method_added_as_extending_md_says_is_refused_when_built(tmp_path, monkeypatch):
    """A one-file method with a YAML naming its class (docs/EXTENDING.md) that declares a OneShotGaussian: a fixed
    noise over the budget stops the build (before any data is read), null builds a ledger within it."""
    from dpgen.config import compose_config
    from dpgen.methods.registry import DataInfo, build

    (tmp_path / "conf" / "method").mkdir(parents=True)
    (tmp_path / "toy_one_shot.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass
        from typing import Optional

        from dpgen.config import MethodConfig
        from dpgen.methods.base import GenerativeMethod, ledger_for
        from dpgen.methods.registry import DataInfo
        from dpgen.privacy.mechanisms import OneShotGaussian


        @dataclass
        class OneShotMeanSettings(MethodConfig):
            noise_multiplier: Optional[float] = None


        class OneShotMean(GenerativeMethod):
            Settings = OneShotMeanSettings
            private = True
            accounts_steps = False  # one release of the whole set's mean, then post-processing

            @classmethod
            def declare(cls, cfg, info, steps):
                return OneShotGaussian(cfg.method.noise_multiplier, sensitivity=2.0 / info.n_private,
                                       label="one-shot mean")

            def __init__(self, cfg, n_private=0, steps=0, **_):
                super().__init__()
                self.ledger = ledger_for(self.declare(cfg, DataInfo(n_private), steps), cfg.privacy)
                self.accountant = self.ledger.accountant
                self.max_steps = None
    '''))
    (tmp_path / "conf" / "method" / "one_shot_mean.yaml").write_text(
        "name: one_shot_mean\ntarget: toy_one_shot.OneShotMean\nnoise_multiplier: null\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    base = ["method=one_shot_mean", f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "privacy.epsilon=1.0"]
    with pytest.raises(PrivacyParameterError, match="method.noise_multiplier=1.6 spends epsilon 2.56"):
        build(compose_config([*base, "method.noise_multiplier=1.6"]), DataInfo(1000, (1, 4, 4), 2), 20)
    m = build(compose_config(base), DataInfo(1000, (1, 4, 4), 2), 20)
    assert m.ledger.one_shot and m.ledger.epsilon_of(m.ledger.prefix[0], 0) <= 1.0
    check_declared(m.ledger, 0)  # what the run checks for a method whose steps are post-processing


# ---- releases before training and a first step that do not fit ---------------------------------------------------


def test_a_given_noise_is_refused_when_its_releases_or_its_first_step_do_not_fit():
    # releases before training alone over the budget: refused when the ledger is built
    with pytest.raises(PrivacyParameterError, match=r"releases before training \(noise multipliers \[0.5\]\) alone"):
        make_ledger(SubsampledGaussian("poisson", 0.01, 2.0, prefix=(0.5,)), epsilon=1.0, delta=1e-5)
    # a noise with which not even one step fits: the ledger accounts it (a report may say "0 steps"), the run
    # asks check_declared with its steps and is told before it trains
    ledger = make_ledger(SubsampledGaussian("poisson", 1.0, 0.5), epsilon=1.0, delta=1e-5)
    assert ledger.epsilon_of(0.5, 1) > 1.0
    check_declared(ledger, 0)
    with pytest.raises(PrivacyParameterError, match="even one step spends epsilon .* would train 0 steps"):
        check_declared(ledger, 100)
    check_declared(make_ledger(SubsampledGaussian("poisson", 0.01, 1.0), epsilon=2.0, delta=1e-5), 100)
    # a one-shot ledger charges no step: a method that declares one and counts its steps is told so
    one_shot = make_ledger(OneShotGaussian(2.0), epsilon=2.0, delta=1e-5)
    with pytest.raises(PrivacyParameterError, match="accounts_steps = False"):
        check_declared(one_shot, 10)


# ---- DP-MERF's release: calibrated and charged by the exact epsilon ----------------------------------------------


def _dpmerf(*overrides, n=1437):
    from dpgen.config import compose_config
    from dpgen.methods.dpmerf import DPMERF

    return DPMERF(compose_config(["method=dpmerf", *overrides]), num_classes=10, data_dim=64, n_private=n)


def test_dpmerf_is_calibrated_by_the_exact_epsilon_of_one_gaussian():
    m = _dpmerf("privacy.epsilon=10")
    # autodp's RDP calibrated 0.5679 here; the analytic Gaussian's root is 0.49989 (12 % less noise)
    assert m.noise_multiplier == pytest.approx(analytic_gaussian_sigma(10.0, 1e-5), abs=1e-3)
    assert m.noise_std == pytest.approx(m.noise_multiplier * 2 / 1437)
    m.ledger.release_prefix()
    z = m.noise_multiplier
    report = m.privacy_report()
    assert report["epsilon_spent"] == pytest.approx(_pld_one_gaussian(z, 1e-5), abs=1e-4)
    assert report["epsilon_spent"] <= 10.0 and report["ledger_accountant"] == "pld"
    assert report["epsilon_analytic_gaussian"] == pytest.approx(report["epsilon_spent"], abs=1e-4)
    # the RDP bound of the same release is kept beside it as the cross-check, above it
    assert report["epsilon_cross_check"]["autodp_rdp"] > report["epsilon_spent"] * 1.1
    assert report["cross_check"]["passed"] is True
    with pytest.raises(PrivacyParameterError, match="method.noise_multiplier=0.45 spends epsilon"):
        _dpmerf("privacy.epsilon=10", "method.noise_multiplier=0.45")


def test_a_one_shot_ledger_resumes_and_a_checkpoint_reads_its_exact_epsilon():
    from dpgen.train.run_record import epsilon_of_ledger

    m = _dpmerf("privacy.epsilon=10")
    m.ledger.release_prefix()
    state = m.ledger.state_dict()
    exact = _pld_one_gaussian(m.noise_multiplier, 1e-5)
    assert epsilon_of_ledger(state["accountant"], 1e-5) == pytest.approx(exact, abs=1e-4)
    resumed = _dpmerf("privacy.epsilon=10")
    resumed.load_ledger_state(state)
    assert resumed.ledger.epsilon() == pytest.approx(exact, abs=1e-4) and resumed.ledger.prefix_releases == 1
    # a checkpoint written while autodp's RDP kept DP-MERF's ledger: tests/train/test_migrations.py
