"""The default ledger of the Poisson-subsampled Gaussian methods is dp-accounting's PLD (issue 52, section 4).

``privacy.accountant=auto`` (the default) is the tightest valid accountant for the method's sampling: PLD for
Poisson sampling (DP-Sinkhorn and its variants, DP-SGD, DP-DANN), autodp's RDP for sampling without
replacement (DP-SWD), which dp-accounting's PLD does not analyse. Checked here against dp-accounting and opacus
called directly (never through dpgen's own wrappers): the ledger's epsilon is PLD's, below every RDP-type bound
dpgen prints and above opacus' PRV lower bound; the calibration lands within PLD_EPSILON_TOL below the target;
the default config's DP-Sinkhorn reports PLD with autodp's RDP beside it; DP-SWD keeps RDP and says why.
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache

import pytest

from dpgen.config import compose_config

DELTA = 1e-5

#: (sigma, q, steps): the embedded default and the headline preset at their old RDP noise, and a spread of others
SETTINGS = [
    (1.1, 30 / 1437, 5000),
    (0.8, 0.01, 1000),
    (2.0, 0.05, 2000),
    (1.5, 0.02, 10000),
    pytest.param(1.0, 0.004, 30000, marks=pytest.mark.slow),
    (5.0, 0.1, 500),
    pytest.param(0.9, 0.0005, 100000, marks=pytest.mark.slow),
    (1.2, 0.0166, 3000),
    pytest.param(0.7751, 200 / 60000, 60000, marks=pytest.mark.slow),  # opacus' PRV: 5 s
    pytest.param(0.6, 0.001, 20000, marks=pytest.mark.slow),
]


@lru_cache(maxsize=None)
def pld_direct(z: float, q: float, steps: int, delta: float = DELTA) -> float:
    """dp-accounting's PLD accountant, add/remove one, Poisson-subsampled Gaussian: its own API."""
    import dp_accounting
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    acc = PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    acc.compose(dp_accounting.SelfComposedDpEvent(event, steps))
    return float(acc.get_epsilon(delta))


def prv_bounds(z: float, q: float, steps: int, delta: float = DELTA):
    """opacus' PRV accountant: (lower bound, estimate, upper bound) of epsilon."""
    from opacus.accountants import PRVAccountant

    acc = PRVAccountant()
    acc.history = [(z, q, steps)]
    delta_error, eps_error = delta / 1000, 0.01
    return acc._get_dprv(eps_error=eps_error, delta_error=delta_error).compute_epsilon(delta, delta_error, eps_error)


@lru_cache(maxsize=None)
def default_privacy():
    return compose_config([]).privacy


def default_ledger(q: float):
    """A Ledger built the way the Poisson methods build theirs, from the default config."""
    from dpgen.privacy.ledger import Ledger

    p = default_privacy()
    return Ledger(epsilon=p.epsilon, delta=p.delta, sampling="poisson", sample_rate=q, rel_tol=p.rel_tol,
                  accountant=p.accountant)


def test_the_default_accountant_is_auto_and_resolves_to_pld_for_poisson_and_rdp_without_replacement():
    from dpgen.privacy.accountants import resolve_accountant

    assert default_privacy().accountant == "auto"
    assert resolve_accountant("auto", "poisson") == "pld"
    assert resolve_accountant("auto", "without_replacement") == "rdp"
    for explicit in ("rdp", "pld", "moments", "opacus_rdp", "opacus_prv"):
        assert resolve_accountant(explicit, "poisson") == explicit


@pytest.mark.parametrize("z,q,steps", SETTINGS)
def test_ledger_epsilon_is_dp_accountings_pld_between_prv_lower_and_every_rdp_bound(z, q, steps):
    from opacus.accountants.analysis import rdp as opacus_rdp

    from dpgen.privacy.accountants import MomentsAccountant, epsilon_for

    led = default_ledger(q)
    assert led.accountant_name == "pld"
    led.use_noise(z)
    led.accountant.step(noise_multiplier=z, sample_rate=q, num_steps=steps)
    eps = led.epsilon()
    assert eps == pytest.approx(pld_direct(z, q, steps), rel=1e-12, abs=0)
    # every RDP-type upper bound dpgen prints: autodp RDP, opacus RDP, the moments accountant (and the ledger's
    # own cross-check, which holds autodp and opacus RDP)
    autodp = epsilon_for(z, q, steps, DELTA, "poisson", "rdp")
    orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 257))
    opacus = opacus_rdp.get_privacy_spent(orders=orders, rdp=opacus_rdp.compute_rdp(q=q, noise_multiplier=z,
                                                                                       steps=steps, orders=orders),
                                          delta=DELTA)[0]
    moments = MomentsAccountant()
    moments.step(noise_multiplier=z, sample_rate=q, num_steps=steps)
    cross = led.cross_check()
    assert set(cross) == {"autodp_rdp", "opacus_rdp"}
    for bound in (autodp, opacus, moments.get_epsilon(DELTA), *cross.values()):
        assert eps <= bound, (eps, bound)
    lower, estimate, upper = prv_bounds(z, q, steps)
    assert lower <= eps, (lower, eps)
    assert eps == pytest.approx(estimate, abs=0.02)  # two numerical accountants of the same curve


@pytest.mark.parametrize("q,steps", [(30 / 1437, 5000),
                                     pytest.param(0.01, 100, marks=pytest.mark.slow)])  # sigma 0.43: 7 s
def test_calibration_lands_within_tolerance_below_the_target(q, steps):
    from dpgen.privacy.calibration import PLD_EPSILON_TOL, calibrate_noise_multiplier

    led = default_ledger(q)
    z = led.calibrate(steps)
    eps = pld_direct(z, q, steps)
    assert 10.0 - PLD_EPSILON_TOL <= eps <= 10.0, eps
    assert PLD_EPSILON_TOL <= 1e-3
    # the function the reports use agrees, and PLD's noise is below the RDP bound's (PLD <= RDP)
    z2 = calibrate_noise_multiplier(10.0, DELTA, q, steps, "poisson", "auto")
    assert 10.0 - PLD_EPSILON_TOL <= pld_direct(z2, q, steps) <= 10.0
    assert z < calibrate_noise_multiplier(10.0, DELTA, q, steps, "poisson", "rdp")


@pytest.mark.slow
@pytest.mark.parametrize("batch,steps,sigma", [(500, 120000, 1.5999), (500, 60000, 1.2234), (200, 60000, 0.7244)])
def test_calibration_of_the_headline_preset_lands_within_tolerance(batch, steps, sigma):
    """The numbers conf/experiment/dpsinkhorn_best_*.yaml states: 1.5999 at MNIST's batches of 500 over 120,000 steps,
    1.2234 at Fashion-MNIST's over 60,000, 0.7244 at Table 1's batches of 200."""
    from dpgen.privacy.calibration import PLD_EPSILON_TOL

    q = batch / 60000
    z = default_ledger(q).calibrate(steps)
    assert 10.0 - PLD_EPSILON_TOL <= pld_direct(z, q, steps) <= 10.0
    assert z == pytest.approx(sigma, abs=5e-4)


def test_max_steps_and_steps_left_under_pld_are_the_largest_that_fit():
    q, z = 30 / 1437, 1.1
    led = default_ledger(q)
    led.use_noise(z)
    assert led.max_steps(5000) is None  # 5,000 steps fit: one accountant call, no search
    n = led.max_steps()
    assert pld_direct(z, q, n) <= 10.0 < pld_direct(z, q, n + 1)
    led.accountant.step(noise_multiplier=z, sample_rate=q, num_steps=n - 100)
    assert led.steps_left(1000) == 100


def test_the_default_dpsinkhorn_keeps_a_pld_ledger_with_rdp_beside_it():
    from dpgen.methods.registry import DataInfo, build
    from dpgen.tasks.accounting import steps_of
    from dpgen.privacy.calibration import PLD_EPSILON_TOL

    cfg = compose_config([])
    assert cfg.method.name == "dpsinkhorn" and cfg.method.noise_multiplier is None  # calibrated to the budget
    ds = cfg.dataset
    steps = steps_of(cfg)
    m = build(cfg, DataInfo(ds.n_train, tuple(ds.shape), ds.num_classes), steps)
    q = cfg.trainer.batch_size / ds.n_train
    assert m.ledger.accountant_name == "pld" and m.sample_rate == pytest.approx(q)
    assert 10.0 - PLD_EPSILON_TOL <= pld_direct(m.noise_multiplier, q, steps) <= 10.0
    assert m.mechanism.noise_multiplier == m.noise_multiplier
    for _ in range(3):
        m.ledger.step()
    rep = m.privacy_report()
    assert rep["ledger_accountant"] == "pld"
    assert rep["accountant"].startswith("dp-accounting PLD (privacy.accountant=auto: the tightest valid accountant")
    assert "autodp RDP printed beside it as the cross-check" in rep["accountant"]
    assert rep["epsilon_spent"] == pytest.approx(pld_direct(m.noise_multiplier, q, 3), rel=1e-12)
    assert set(rep["epsilon_cross_check"]) == {"autodp_rdp", "opacus_rdp"}
    assert rep["epsilon_spent"] <= min(rep["epsilon_cross_check"].values())


def test_an_explicit_accountant_keeps_working():
    from dpgen.privacy.accountants import autodp_epsilon
    from dpgen.privacy.ledger import Ledger

    q, z, steps = 0.02, 1.0, 300
    led = Ledger(epsilon=10, delta=DELTA, sampling="poisson", sample_rate=q, accountant="rdp")
    led.use_noise(z)
    led.accountant.step(noise_multiplier=z, sample_rate=q, num_steps=steps)
    assert led.accountant_name == "rdp" and "privacy.accountant=rdp, as configured" in led.accountant_text()
    assert led.epsilon() == autodp_epsilon(((z, q, steps),), DELTA, "poisson")
    with pytest.raises(ValueError, match="privacy.accountant=pld analyses Poisson sampling only.*auto"):
        Ledger(epsilon=10, delta=DELTA, sampling="without_replacement", sample_rate=q, accountant="pld")


def test_dp_accountings_pld_does_not_analyse_sampling_without_replacement():
    """What auto's choice for DP-SWD rests on: if dp-accounting's PLD learns sampling without replacement, this
    fails, and auto should then use it there too."""
    import dp_accounting
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    event = dp_accounting.SampledWithoutReplacementDpEvent(1437, 100, dp_accounting.GaussianDpEvent(1.0))
    for relation in (dp_accounting.NeighboringRelation.REPLACE_ONE,
                     dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE):
        assert not PLDAccountant(neighboring_relation=relation).supports(event)
    assert dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE).supports(event)


def test_dpswd_under_the_default_config_keeps_rdp_and_says_why():
    from dpgen.methods.registry import DataInfo, build
    from dpgen.tasks.accounting import steps_of

    cfg = compose_config(["method=dpswd", "trainer.epochs=null", "trainer.steps=200"])
    assert cfg.privacy.accountant == "auto"
    ds = cfg.dataset
    m = build(cfg, DataInfo(ds.n_train, tuple(ds.shape), ds.num_classes), steps_of(cfg))
    rep = m.privacy_report()
    assert m.ledger.accountant_name == "rdp" and rep["ledger_accountant"] == "rdp"
    assert rep["accountant"].startswith("autodp RDP (privacy.accountant=auto")
    assert "PLD does not analyse sampling without replacement" in rep["accountant"]


def test_dpsgd_under_the_default_config_keeps_a_pld_ledger_and_the_moments_accountant_beside_it():
    from dpgen.methods.dpsgd import DPSGD
    from dpgen.methods.registry import DataInfo

    cfg = compose_config(["task=classification", "method=dpsgd", "trainer.epochs=null", "trainer.steps=50",
                          "trainer.batch_size=64", "method.noise_multiplier=2.0"])
    m = DPSGD.from_config(cfg, DataInfo(cfg.dataset.n_train, tuple(cfg.dataset.shape), 10), 50)
    assert m.ledger_name == "pld" and list(m.accountants)[:2] == ["pld", "moments"]
    m.account(None)
    q = 64 / cfg.dataset.n_train
    assert m.epsilon() == pytest.approx(pld_direct(2.0, q, 1), rel=1e-12)
    rep = m.privacy_report()
    assert rep["ledger_accountant"] == "pld" and "rdp" in rep["cross_check"]
    assert rep["accountants"]["pld"]["epsilon"] <= rep["accountants"]["moments"]["epsilon"]
    pinned = compose_config(["experiment=wdp_dl_mnist10k"])
    assert pinned.privacy.accountant == "moments"  # the WDP paper's DP column


def test_the_accounting_task_schema_accepts_every_training_task_key():
    """task=accounting experiment=<preset> composes whatever task keys the preset sets (issue 52, 5a)."""
    from dpgen import config as c

    accepted = {f.name for f in dataclasses.fields(c.AccountingTaskConfig)}
    for schema in (c.GenerationTaskConfig, c.ClassificationTaskConfig, c.DomainAdaptationTaskConfig,
                   c.EvaluateTaskConfig):
        missing = {f.name for f in dataclasses.fields(schema)} - accepted
        assert not missing, f"task=accounting would refuse {schema.__name__}'s keys {sorted(missing)}"


def test_accountant_reasons_are_stated():
    from dpgen.privacy.ledger import AUTO_REASONS, accountant_reason

    assert accountant_reason("auto", "poisson") == AUTO_REASONS["poisson"]
    assert "tightest valid accountant for the Poisson-subsampled Gaussian" in AUTO_REASONS["poisson"]
    assert "SampledWithoutReplacementDpEvent" in AUTO_REASONS["without_replacement"]
    assert math.isfinite(pld_direct(1.1, 30 / 1437, 10))
