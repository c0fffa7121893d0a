"""metrics.json says which epsilon is charged and whether the independent accountants agree with it (issue 55)."""

import pytest

from dpgen.privacy.ledger import Ledger, cross_check_verdict


def test_a_pld_ledger_passes_when_every_rdp_bound_lies_above_it():
    ok = cross_check_verdict(10.0, {"opacus_rdp": 11.6, "autodp_rdp": 14.1}, "pld")
    assert ok["passed"] is True and ok["relative_gap"] == {"opacus_rdp": 0.16, "autodp_rdp": 0.41}
    assert ok["charged"].startswith("epsilon_spent (pld)")
    bad = cross_check_verdict(10.0, {"autodp_rdp": 8.0}, "pld")  # an RDP upper bound below the exact one: a bug
    assert bad["passed"] is False


def test_two_rdp_accountants_must_agree_within_the_tolerance():
    assert cross_check_verdict(9.89, {"opacus_rdp": 8.95}, "rdp")["passed"] is True  # the 9.89 / 8.95
    assert cross_check_verdict(9.89, {"opacus_rdp": 5.0}, "rdp")["passed"] is False
    assert cross_check_verdict(0.0, {}, "rdp")["passed"] is None


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_a_ledgers_report_carries_the_verdict_and_it_passes(accountant):
    led = Ledger(epsilon=10.0, delta=1e-5, sample_rate=100 / 1437, accountant=accountant, sampling="poisson")
    led.use_noise(0.6336)
    for _ in range(50):
        led.step()
    rep = led.report()
    check = rep["cross_check"]
    assert check["passed"] is True, (rep["epsilon_spent"], rep["epsilon_cross_check"])
    assert set(check["relative_gap"]) == set(rep["epsilon_cross_check"])
