"""``task=accounting`` is the privacy library's: methods declare what they release, ``account`` reports it
(issue 54, item 2). The numbers are checked against the accountants themselves, not against the report."""

from __future__ import annotations

import pytest

from dpgen.privacy.accounting import Budget, Setting, account
from dpgen.privacy.mechanisms import (LocalRelease, OneShotGaussian, ProjectedGaussian, SubsampledGaussian,
                                      make_ledger, projected_calibration)


def test_a_subsampled_gaussian_is_calibrated_to_the_budget_and_cross_checked():
    from dpgen.privacy.accountants import autodp_epsilon, pld_epsilon

    out = account(SubsampledGaussian("poisson", 0.01, sensitivity=2.0, label="toy"), Budget(3.0, 1e-5, "auto", 1e-3, ()),
                  Setting("digits", 10_000, 2_000, 100))
    s = out["summary"]
    assert s["accountant"] == "pld" and s["sample_rate"] == 0.01 and s["noise_std"] == pytest.approx(2 * s["noise_multiplier"])
    z = s["noise_multiplier"]
    assert s["epsilon"] == pytest.approx(pld_epsilon(((z, 0.01, 2000),), 1e-5), rel=1e-9) and s["epsilon"] <= 3.0
    assert s["epsilon_cross_check"]["rdp"] == pytest.approx(autodp_epsilon(((z, 0.01, 2000),), 1e-5, "poisson"))
    assert s["epsilon"] < s["epsilon_cross_check"]["rdp"]  # PLD is the tighter of the two
    assert out["relation"].startswith("add/remove one") and out["lines"][0].startswith("toy on digits: N=10000")


def test_a_given_noise_reports_the_steps_the_budget_allows():
    out = account(SubsampledGaussian("poisson", 0.01, 1.0), Budget(1.0, 1e-5, "rdp", 1e-3, None),
                  Setting("digits", 10_000, 100, 100))
    s = out["summary"]
    assert s["noise_multiplier"] == 1.0 and s["epsilon_cross_check"] == {}  # cross-checks off: None
    steps = s["steps_to_budget"]
    led = make_ledger(SubsampledGaussian("poisson", 0.01, 1.0), epsilon=1.0, delta=1e-5, accountant="rdp")
    assert led.epsilon_of(1.0, steps) <= 1.0 < led.epsilon_of(1.0, steps + 1)
    # which of the two noise multipliers printed a run uses (issue 84: both were printed, neither named)
    text = "\n".join(out["lines"])
    assert "; not used: method.noise_multiplier is given" in text
    assert "the run uses this configured noise multiplier, 1 " in text
    assert (f"steps until epsilon reaches 1.0: {steps} (the run stops there" in text) == (steps < 100)


def test_a_partition_draw_without_replacement_falls_back_to_rdp_for_a_poisson_only_accountant():
    mech = SubsampledGaussian("without_replacement", 1 / 50, 2.0, units=50, per_step=1, unit="partitions")
    out = account(mech, Budget(10.0, 1e-5, "moments", 1e-3, ()), Setting("digits", 5000, 100, 100))
    assert out["summary"]["accountant"] == "rdp" and "analyses Poisson sampling only" in out["summary"]["accountant_reason"]
    assert "1 of 50 partitions per step" in out["lines"][0]


def test_one_shot_and_local_releases_do_not_depend_on_the_steps():
    from dpgen.privacy.local import gaussian_sigma

    a = account(OneShotGaussian(1.0, sensitivity=0.002), Budget(10.0, 1e-5), Setting("d", 1000, 10, 10))
    b = account(OneShotGaussian(1.0, sensitivity=0.002), Budget(10.0, 1e-5), Setting("d", 1000, 10_000, 10))
    assert a["summary"] == b["summary"] and a["summary"]["noise_std"] == pytest.approx(0.002)
    loc = account(LocalRelease("gaussian", 16.0), Budget(6142.83, 1e-5), Setting("mnist", 8000, 1, 1))
    assert loc["summary"]["scale"] == pytest.approx(gaussian_sigma(6142.83, 1e-5, 16.0, "diameter"))


def test_a_projected_release_reports_its_run_calibration_as_the_run_ledger_does():
    mech = ProjectedGaussian(k=50, d=64, n=1437, batch_size=100, steps=450, bound="bernstein",
                             convention="paper_text", reading="run")
    out = account(mech, Budget(10.0, 1e-5, "auto", 1e-3, ()), Setting("digits", 1437, 450, 100))
    ledger = make_ledger(mech, epsilon=10.0, delta=1e-5)
    cal = projected_calibration(mech, ledger, 1e-5)
    assert out["summary"]["sigma"] == pytest.approx(cal["sigma"]) and "delta_bound_per_step" in cal  # union bound
    assert out["summary"]["epsilon_reached"] <= 10.0 and ledger.delta == pytest.approx(0.5e-5)


def test_every_private_builtin_method_declares_its_mechanism():
    """No built-in private method falls back to being built for task=accounting."""
    from dpgen.config import compose_config
    from dpgen.methods.registry import REGISTRY, DataInfo
    from dpgen.privacy.mechanisms import Mechanism
    from dpgen.tasks.accounting import steps_of

    mechanisms = tuple(Mechanism.__args__)
    seen = set()
    for task, reg in REGISTRY.items():
        for name in reg.names():
            cls = reg.get(name)
            if name in seen:
                continue
            overrides = [f"method={name}", "dataset=digits"] + (["task=classification"] if task == "classification"
                                                                 else [])
            if task == "domain_adaptation":
                overrides = [f"method={name}", "dataset=da_mnist_usps", "task=domain_adaptation"]
            cfg = compose_config(overrides)
            if not cfg.method.private:
                continue
            seen.add(name)
            ds = cfg.dataset
            info = DataInfo(int(ds.n_train), tuple(ds.shape or ()), int(ds.num_classes or 0), dim=int(ds.dim or 0))
            assert isinstance(cls.declare(cfg, info, steps_of(cfg)), mechanisms), name
    assert {"dpsinkhorn", "dpswd", "dpmerf", "entropic_ldp", "dpsgd", "dpdann"} <= seen
