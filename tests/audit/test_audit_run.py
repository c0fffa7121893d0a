"""The whole-run audit (``make audit-run``): the one-run bound's statistics against exact math and
simulation, and the harness through the real loop (quick settings)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

from dpgen.privacy.one_run_bound import (best_epsilon_lower_bound, count_correct, epsilon_lower_bound,
                                         guess_accuracy, guesses_from_scores, max_epsilon_lower_bound,
                                         noise_from_release, p_value, poisson_gaussian_scores)


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
    over 10 pairs at m = 1000 (the plain-sum score and moments ledger of that version): full-noise 0 - 0.52,
    low-noise 2.94 every time (100 of 100 guesses right). The likelihood-ratio score keeps them apart."""
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


def test_the_likelihood_ratio_score_of_a_poisson_gaussian_run():
    """score_i = sum_t log(1 - q + q exp((mu x - mu^2 / 2) / s^2)); s read off the release (median |x| / 0.6745)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 50)) * 2.0
    assert noise_from_release(x) == pytest.approx(2.0, rel=0.05)
    mu = np.full_like(x, 0.9)
    s = poisson_gaussian_scores(x, mu, 0.1, sigma=2.0)
    direct = np.log(0.9 + 0.1 * np.exp((0.9 * x - 0.405) / 4.0)).sum(0)
    np.testing.assert_allclose(s, direct, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(poisson_gaussian_scores(x, mu, 1.0, sigma=2.0), ((0.9 * x - 0.405) / 4.0).sum(0))
    with pytest.raises(ValueError, match="q=0"):
        poisson_gaussian_scores(x, mu, 0.0)
    # it separates a subsampled Gaussian's in- from out-canaries better than the plain sum at low noise
    inc = rng.random(2000) < 0.5
    drawn = (rng.random((1000, 2000)) < 0.01) & inc
    x = drawn + 0.3 * rng.standard_normal((1000, 2000))
    lr = best_epsilon_lower_bound(poisson_gaussian_scores(x, np.ones_like(x), 0.01), inc, delta=1e-5)
    plain = best_epsilon_lower_bound(x.sum(0), inc, delta=1e-5)
    assert lr["epsilon_lb"] > plain["epsilon_lb"] + 0.5


def test_dpsinkhorn_per_record_whole_run_through_the_real_loop(tmp_path, monkeypatch):
    """The per-record row (method.clip_mode=per_sample, the embedded default's mechanism): one quick run through
    the real loop; the claim is the run's own ledger; the scores come from one projection per step and canary;
    its control really runs with half the noise while the ledger charges the full noise."""
    import dpgen.audit.one_run as one_run

    seen = {}
    real = one_run.score_poisson_run

    def spy(xs, mus, q):
        seen["shape"], seen["q"] = (len(xs), int(xs[0].shape[0])), q
        return real(xs, mus, q)

    monkeypatch.setattr(one_run, "score_poisson_run", spy)
    row = one_run.audit_run("dpsinkhorn_dct_per_record", m=60, noise_scale=1.0, quick=True, out_dir=tmp_path / "run")
    assert row["steps"] == 150 and seen["shape"] == (150, 60) and 0 < seen["q"] < 1
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert "per-record" in m["privacy"]["mechanism"] and "per-record clip" in row["setting"]
    assert m["privacy"]["epsilon_spent"] == pytest.approx(row["claimed_epsilon"], abs=1e-4)
    assert row["epsilon_lb"] <= row["claimed_epsilon"] and row["verdict"].startswith("pass")
    half = one_run.audit_run("dpsinkhorn_dct_per_record", m=60, noise_scale=0.5, quick=True)
    assert half["claimed_epsilon"] == pytest.approx(row["claimed_epsilon"], rel=1e-6)
    assert half["epsilon_at_actual_noise"] > 2 * half["claimed_epsilon"]
    assert ("dpsinkhorn_dct_per_record", 0.5) in one_run.ROWS and ("dpsinkhorn_dct_per_record", 1.0) in one_run.ROWS


def test_under_noise_halves_the_per_record_mechanism_only():
    from dpgen.audit.one_run import under_noise
    from dpgen.privacy.image_gradient import PerSampleGradientMechanism

    mech = PerSampleGradientMechanism(clip=0.5, noise_multiplier=1.1, sample_rate=0.03)
    under_noise(mech, 0.5)
    assert mech.noise_std == pytest.approx(0.5 * 0.5 * 1.1) and mech.noise_multiplier == 1.1
    out = mech.noise_sum([torch.zeros(20000)], generator=torch.Generator().manual_seed(0))[0]
    assert out.std().item() == pytest.approx(0.275, rel=0.03)


@pytest.mark.slow
def test_make_audit_run_catches_the_dpsgd_controls_and_passes_every_full_noise_row(tmp_path):
    """The whole ``make audit-run`` (about 4 min on 2 shared cores): every full-noise row below its claim; the
    small-batch DP-SGD control's bound above its claim (measured 3.8, claim 2.2); the per-record DP-Sinkhorn
    control's bound above its full-noise run's."""
    from dpgen.audit.one_run import main

    assert main(["--out", str(tmp_path)]) == 0
    import csv

    rows = list(csv.DictReader((tmp_path / "privacy_audit_run.csv").open()))
    full = {r["method"]: r for r in rows if float(r["noise_scale"]) == 1.0}
    assert len(full) == 4 and all(r["verdict"].startswith("pass") for r in full.values())
    ctrl = {(r["method"], float(r["noise_scale"])): r for r in rows}
    assert ctrl[("dpsgd_small_batch", 0.5)]["verdict"].startswith("caught")
    per = ctrl[("dpsinkhorn_dct_per_record", 0.5)]
    assert float(per["epsilon_lb"]) > float(full["dpsinkhorn_dct_per_record"]["epsilon_lb"])
