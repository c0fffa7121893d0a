"""The empirical one-step canary audit (dpgen/audit/canary.py, ``make audit``; statistics in dpgen/privacy/audit_stats.py): its statistics, that
the guaranteed mechanisms pass, that the variants dpgen says are not covered are caught, and that a
mechanism with half its calibrated noise is caught too (the audit can fail)."""

import csv
import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from dpgen.audit import canary as A

ALPHA = 1 - A.CONFIDENCE


# ---- (a) the statistics ---------------------------------------------------------------------------------------


def test_clopper_pearson_known_values():
    # textbook exact intervals: 0/10 -> [0, 1 - 0.025^(1/10)], 5/10 -> [0.1871, 0.8129], 10/10 mirrors 0/10
    lo, hi = A.clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** 0.1, rel=1e-9) and hi == pytest.approx(0.3085, abs=1e-4)
    lo, hi = A.clopper_pearson(5, 10)
    assert lo == pytest.approx(0.1871, abs=1e-4) and hi == pytest.approx(0.8129, abs=1e-4)
    lo, hi = A.clopper_pearson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** 0.1, rel=1e-9)
    with pytest.raises(ValueError):
        A.clopper_pearson(3, 2)


@pytest.mark.parametrize("n", [100, 1000, 20000])
def test_perfect_separation_gives_the_computable_bound(n):
    delta = 1e-5
    s_in, s_out = np.ones(n), np.zeros(n)
    # one threshold: 2 proportions, each 0 of n, Bonferroni level alpha / 2 two-sided -> upper 1 - (alpha/4)^(1/n)
    u = 1 - (ALPHA / 4) ** (1 / n)
    expected = math.log((1 - delta - u) / u)
    assert A.epsilon_lower_bound(s_in, s_out, delta, thresholds=[0.5]) == pytest.approx(expected, rel=1e-9)
    # pooled grid: the thresholds are the two observed values {0, 1}; t = 1 separates perfectly
    u2 = 1 - (ALPHA / 8) ** (1 / n)
    assert A.epsilon_lower_bound(s_in, s_out, delta) == pytest.approx(math.log((1 - delta - u2) / u2), rel=1e-9)
    # the same numbers swapped: the reversed test finds it too
    assert A.epsilon_lower_bound(s_out, s_in, delta, thresholds=[0.5]) == pytest.approx(expected, rel=1e-9)


def test_coin_flip_test_proves_nothing():
    n = 5000
    half = np.repeat([0.0, 1.0], n // 2)  # the threshold 0.5 has FPR = FNR = 0.5 exactly
    assert A.epsilon_lower_bound(half, half, 1e-5, thresholds=[0.5]) <= 0
    rng = np.random.default_rng(0)
    same = [A.epsilon_lower_bound(rng.normal(size=n), rng.normal(size=n), 1e-5) for _ in range(5)]
    assert max(same) <= 0.2  # identical laws: only sampling noise, well under any claim


def test_tight_laplace_audit_stays_below_its_epsilon():
    # Laplace with shift 2 and scale 1 is exactly 2-DP: the bound gets close but must not cross it
    rng = np.random.default_rng(1)
    lbs = [A.epsilon_lower_bound(rng.laplace(1, 1, 20000), rng.laplace(-1, 1, 20000), 0.0) for _ in range(10)]
    assert max(lbs) <= 2.0 and min(lbs) > 1.5


def test_claimed_epsilon_is_the_analytic_gaussian():
    for z, delta in [(2.0, 1e-5), (1.1, 1e-5), (5.0, 1e-6)]:
        eps = A.gaussian_epsilon(z, delta)
        # Balle & Wang (2018), Theorem 8, evaluated independently
        d = stats.norm.cdf(1 / (2 * z) - eps * z) - math.exp(eps) * stats.norm.cdf(-1 / (2 * z) - eps * z)
        assert d == pytest.approx(delta, rel=1e-6)
        assert eps < A.rdp_one_step_epsilon(z, delta)  # RDP's conversion is looser
    assert A.gaussian_epsilon(2.0, 1e-5) == pytest.approx(1.993, abs=1e-3)


# ---- (b) the guaranteed mechanisms pass -----------------------------------------------------------------------


@pytest.mark.parametrize("name,trials", [("dpswd/frame", 600), ("dpsinkhorn/hook", 1000), ("dpsgd", 600),
                                         ("dpsinkhorn/dct_per_record", 1000),
                                         ("dpswd/dp_mean", 1000), ("local/gaussian", 1000),
                                         ("selection/exponential", 1000), ("nonfinite/selection", 1000)])
def test_fast_audit_passes(name, trials):
    (row,) = A.audit_rows([name], trials=trials, seed=123, progress=False)
    assert row["covered"] and row["verdict"] == "pass", row
    assert row["empirical_epsilon_lb"] <= row["claimed_epsilon"]
    # the canaries reach the design sensitivity: the measured shift is close to it, not just below
    assert abs(row["score_shift_measured"]) == pytest.approx(row["sensitivity_design"],
                                                             abs=4 * row["score_shift_se"] + 1e-9)


# ---- (c) power: what dpgen says is not covered is caught ------------------------------------------------------


@pytest.mark.parametrize("name", ["dpswd/row_bound=none", "dpsinkhorn/leaky_logger", "selection/unclipped",
                                  "selection/quarter_noise"])
def test_not_covered_variants_are_caught(name):
    (row,) = A.audit_rows([name], trials=600, seed=7, progress=False)
    assert not row["covered"] and row["verdict"] == "caught", row
    assert row["empirical_epsilon_lb"] > row["claimed_epsilon"] + 1
    assert abs(row["score_shift_measured"]) > row["sensitivity_design"] + 3 * row["score_shift_se"]


def test_leaky_logger_separates_with_certainty():
    with A.one_thread():
        s = A.audit_leaky_logger(50, seed=0, progress=False)
    assert np.ptp(s.scores_in) == 0 and np.ptp(s.scores_out) == 0  # the published loss has no noise at all
    assert s.scores_in[0] != s.scores_out[0]


# ---- (d) the audit can fail: half the calibrated noise is caught ----------------------------------------------


def test_half_noise_is_caught():
    # the DP mean with its noise multiplier halved while the claim keeps the design value
    (row,) = A.audit_rows(["dpswd/dp_mean"], trials=25_000, seed=5, progress=False, noise_scale=0.5)
    assert not row["covered"] and row["verdict"] == "caught", row
    # the local Gaussian with the paper's "sensitivity = radius": exactly half the calibrated std
    (row,) = A.audit_rows(["local/gaussian_radius"], trials=10_000, seed=5, progress=False)
    assert row["verdict"] == "caught", row


def test_a_calibrated_one_shot_release_passes_and_its_quarter_noise_is_caught():
    # DP-MERF's release with the noise the privacy library's one-shot ledger calibrated (issue 83), claiming the
    # epsilon that ledger charges: exact for one Gaussian (dp-accounting's PLD = the analytic Gaussian mechanism)
    from dpgen.privacy.mechanisms import one_shot_noise

    (row,) = A.audit_rows(["dpmerf/calibrated"], trials=2000, seed=11, progress=False)
    assert row["covered"] and row["verdict"] == "pass", row
    assert A.ONE_SHOT_EPSILON - 1e-3 <= row["claimed_epsilon"] <= A.ONE_SHOT_EPSILON
    assert A.gaussian_epsilon(one_shot_noise(A.ONE_SHOT_EPSILON, A.DELTA), A.DELTA) == pytest.approx(
        row["claimed_epsilon"], abs=1e-4)
    # the canary moves the score by sqrt(2) / N of the design's 2 / N (orthogonal class blocks)
    assert abs(row["score_shift_measured"]) == pytest.approx(math.sqrt(2) / 4, abs=4 * row["score_shift_se"])
    (row,) = A.audit_rows(["dpmerf/calibrated_quarter_noise"], trials=5000, seed=11, progress=False)
    assert not row["covered"] and row["verdict"] == "caught", row


@pytest.mark.slow
def test_half_noise_dpsinkhorn_hook_is_caught():
    (row,) = A.audit_rows(["dpsinkhorn/hook"], trials=100_000, seed=9, progress=False, noise_scale=0.5)
    assert row["verdict"] == "caught", row


# ---- the command line -------------------------------------------------------------------------------------------


def test_cli_writes_table_and_exit_code(tmp_path, monkeypatch):
    rc = A.main(["--only", "local/gaussian,local/laplace", "--trials", "500", "--seed", "3", "--out", str(tmp_path),
                 "--no-progress"])
    assert rc == 0
    with open(tmp_path / "privacy_audit.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(A.COLUMNS) and {r["verdict"] for r in rows} == {"pass"}
    assert (tmp_path / "privacy_audit.md").read_text().count("| pass |") == 2

    # a mechanism that claims a guarantee it does not have (the paper's radius sensitivity, labelled
    # covered) fails, and a failing row makes the exit code 1
    def broken(n, seed, progress=True):
        return dataclasses.replace(A.audit_local(n, seed, kind="gaussian", sensitivity="radius"), covered=True)

    monkeypatch.setattr(A, "AUDITS", [A.AuditSpec("broken", broken, {}, min_trials=200_000)])
    monkeypatch.setattr(A, "AUDIT_NAMES", ["broken"])
    assert A.main(["--seed", "3", "--out", str(tmp_path), "--no-progress"]) == 1
    with open(tmp_path / "privacy_audit.csv") as f:
        assert [r["verdict"] for r in csv.DictReader(f)] == ["FAIL"]


def test_the_own_data_split_moves_no_other_record_and_the_permutation_is_caught():
    # your own data's held-out test part (issue 83): D vs D plus one record, through the loader's split function;
    # the seeded permutation over n of 2ad157b (38 of 400 records moved each time) is the control
    hashed, perm = A.audit_rows(["split/own_data_hash", "split/own_data_permutation"], trials=200, seed=3,
                                progress=False)
    assert hashed["covered"] and hashed["verdict"] == "pass" and hashed["score_shift_measured"] == 0, hashed
    assert not perm["covered"] and perm["verdict"] == "caught" and perm["score_shift_measured"] > 10, perm
