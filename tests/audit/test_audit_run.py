"""The whole-run audit (``make audit-run``): the one-run bound's statistics against exact math and
simulation, and the harness through the real loop (quick settings)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from dpgen.privacy.one_run_bound import (best_epsilon_lower_bound, count_correct, epsilon_lower_bound,
                                         guess_accuracy, guesses_from_scores, max_epsilon_lower_bound, p_value)


def test_pure_dp_p_value_is_the_binomial_tail():
    p = guess_accuracy(1.0)
    assert p == pytest.approx(math.e / (1 + math.e))
    assert p_value(1000, 100, 80, 1.0) == pytest.approx(stats.binom.sf(79, 100, p))
    assert p_value(1000, 100, 0, 1.0) == 1.0


def test_delta_only_weakens_the_test():
    for v in (60, 75, 90):
        assert p_value(1000, 100, v, 1.0, 1e-5) >= p_value(1000, 100, v, 1.0, 0.0)
    assert epsilon_lower_bound(1000, 100, 90, delta=1e-5) <= epsilon_lower_bound(1000, 100, 90, delta=0.0)


def test_all_guesses_right_gives_the_closed_form():
    # delta = 0, r guesses all right: rejected while p^r <= a, i.e. eps_lb = logit(a^(1/r))
    r, a = 100, 0.05
    p = a ** (1 / r)
    assert max_epsilon_lower_bound(1000, r) == pytest.approx(math.log(p / (1 - p)), abs=1e-4)


def test_bound_is_zero_for_chance_and_grows_with_correct_guesses():
    assert epsilon_lower_bound(1000, 100, 50) == 0.0
    lbs = [epsilon_lower_bound(1000, 100, v) for v in (60, 70, 80, 90, 100)]
    assert lbs == sorted(lbs) and lbs[0] < lbs[-1]


def test_guesses_fix_their_count_before_the_scores():
    t = guesses_from_scores([5.0, 1.0, 3.0, -2.0, 0.0], k_plus=2, k_minus=1)
    assert t.tolist() == [1, 0, 1, -1, 0]
    assert count_correct(t, [True, False, False, False, True]) == (3, 2)
    with pytest.raises(ValueError, match="k_plus=4, k_minus=2"):
        guesses_from_scores([0.0] * 5, 4, 2)


def test_the_bound_is_valid_for_randomized_response():
    """An epsilon-DP mechanism (randomized response on each canary's bit): the 95 % lower bound exceeds the
    true epsilon in at most ~5 % of the runs (here: never more than 10 of 100)."""
    eps, m = 1.0, 1000
    rng = np.random.default_rng(1)
    above = 0
    for _ in range(100):
        s = rng.random(m) < 0.5
        keep = rng.random(m) < guess_accuracy(eps)
        seen = np.where(keep, s, ~s)  # the mechanism's output: the bit, flipped with probability 1 / (1 + e^eps)
        scores = seen + 0.01 * rng.standard_normal(m)  # ties broken at random
        res = best_epsilon_lower_bound(scores, s)
        above += res["epsilon_lb"] > eps
    assert above <= 10
    # and it has power: the last run's bound is well above 0
    assert res["epsilon_lb"] > 0.5


def test_dpsgd_whole_run_through_the_real_loop(tmp_path):
    """m = 1000 canaries: with 200 (the first version) the two bounds' tails met: the mechanism's noise comes
    from OS entropy, and one CI run drew a full-noise bound of 0.85 beside a low-noise one of 1.33. Measured
    over 10 pairs at m = 1000: full-noise 0 - 0.52, low-noise 2.94 every time (100 of 100 guesses right)."""
    from dpgen.audit.one_run import audit_run

    full = audit_run("dpsgd", m=1000, noise_scale=1.0, quick=True, out_dir=tmp_path / "full")
    assert full["epsilon_lb"] <= full["claimed_epsilon"] and full["verdict"].startswith("pass")
    assert full["claimed_epsilon"] == pytest.approx(2.2, abs=0.01)  # the ledger calibrated the whole run
    led = json.loads((tmp_path / "full" / "checkpoints" / "ledger.json").read_text())
    assert led["private_steps"] == full["steps"]
    # a twentieth of the noise while the ledger charges the full noise: the audit catches it
    low = audit_run("dpsgd", m=1000, noise_scale=0.05, quick=True, out_dir=tmp_path / "low")
    assert low["claimed_epsilon"] == pytest.approx(full["claimed_epsilon"], rel=1e-3)
    assert low["epsilon_at_actual_noise"] > 100 * low["claimed_epsilon"]
    assert low["epsilon_lb"] > low["claimed_epsilon"] and low["verdict"].startswith("caught")
    assert low["epsilon_lb"] > full["epsilon_lb"] + 1.0


def test_dpsinkhorn_dct_whole_run_through_the_real_loop(tmp_path):
    from dpgen.audit.one_run import audit_run

    row = audit_run("dpsinkhorn_dct", m=100, noise_scale=1.0, quick=True, out_dir=tmp_path / "run")
    assert row["steps"] == 150 and 0 < row["claimed_epsilon"] <= 10
    assert row["epsilon_lb"] <= row["claimed_epsilon"]
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["privacy"]["epsilon_spent"] == pytest.approx(row["claimed_epsilon"], abs=1e-4)
