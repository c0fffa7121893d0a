"""Statistics of dpgen's empirical privacy audits: Clopper-Pearson intervals, the epsilon lower bound a
threshold test on release scores proves, the exact epsilon of one Gaussian step, and the verdict of one
audit row. The audits themselves (canaries through the methods' real code paths) are an application above
the privacy library: :mod:`dpgen.audit.canary` (``make audit``) and :mod:`dpgen.audit.one_run`
(``make audit-run``). This module imports nothing above :mod:`dpgen.privacy`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np
from scipy import optimize, stats

from dpgen.privacy.local import analytic_gaussian_sigma

CONFIDENCE = 0.95
#: a guaranteed row fails when the measured shift exceeds the design sensitivity by this many standard errors
SHIFT_SE = 3.0

# ================================================================================================
# statistics: Clopper-Pearson intervals and the epsilon lower bound
# ================================================================================================


def clopper_pearson(k: int, n: int, confidence: float = CONFIDENCE):
    """Exact two-sided binomial interval (Clopper & Pearson 1934) for k successes in n trials."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"clopper_pearson needs 0 <= k <= n and n > 0, got k={k}, n={n}")
    a = 1.0 - confidence
    lo = 0.0 if k == 0 else float(stats.beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def _cp_upper(k: np.ndarray, n: int, confidence: float) -> np.ndarray:
    """Upper ends of the two-sided Clopper-Pearson intervals of many counts ``k`` out of ``n``."""
    k = np.asarray(k)
    up = stats.beta.ppf(1 - (1 - confidence) / 2, k + 1, np.maximum(n - k, 1))
    return np.where(k >= n, 1.0, up)


def threshold_grid(scores: np.ndarray, levels: int = 40) -> np.ndarray:
    """Candidate thresholds: order statistics of ``scores`` at geometrically spaced ranks from each
    end (where the best tests of a tight audit live) plus the deciles; at most ~2 levels + 11."""
    s = np.sort(np.asarray(scores, dtype=np.float64))
    n = len(s)
    if n == 0:
        raise ValueError("threshold_grid needs scores")
    ranks = np.unique(np.round(np.geomspace(1, max(1, n // 2), levels)).astype(int))
    idx = np.unique(np.concatenate([ranks - 1, n - ranks, np.linspace(0, n - 1, 11).round().astype(int)]))
    return np.unique(s[np.clip(idx, 0, n - 1)])


def epsilon_lower_bound(scores_in: Sequence[float], scores_out: Sequence[float], delta: float,
                        thresholds: Optional[Sequence[float]] = None, confidence: float = CONFIDENCE) -> float:
    """Largest epsilon that any threshold test on the scores proves, with probability >= ``confidence``.

    ``scores_in``: scores of the releases on D (the canary in), ``scores_out``: on D'. For each
    threshold t the test "say D when score >= t" has FPR = P_D'(score >= t) and FNR = P_D(score < t);
    (epsilon, delta)-DP implies 1 - delta - FNR <= e^eps FPR, 1 - delta - FPR <= e^eps FNR, and the
    same for the reversed test. Each bound uses Clopper-Pearson upper ends; the intervals are
    Bonferroni-corrected over the 2 x len(thresholds) proportions examined, so the maximum over
    thresholds is still a ``confidence`` lower bound (without the correction a tight audit --
    Laplace -- overshoots its true epsilon in about 1 run of 10). Pass thresholds chosen on other
    trials (:func:`audit_rows` does) for an exact guarantee; ``None`` takes :func:`threshold_grid`
    of the pooled scores (a mild dependence on the data). Returns -inf when no test says anything.
    """
    s1 = np.sort(np.asarray(scores_in, dtype=np.float64))
    s0 = np.sort(np.asarray(scores_out, dtype=np.float64))
    n1, n0 = len(s1), len(s0)
    if n1 == 0 or n0 == 0:
        raise ValueError("epsilon_lower_bound needs scores on both datasets")
    if not 0 <= delta < 1:
        raise ValueError(f"delta={delta} must lie in [0, 1)")
    t = threshold_grid(np.concatenate([s1, s0])) if thresholds is None else np.unique(np.asarray(thresholds, float))
    conf = 1.0 - (1.0 - confidence) / (2 * len(t))  # Bonferroni over both proportions at every threshold
    fp = n0 - np.searchsorted(s0, t, side="left")  # D' scores >= t
    fn = np.searchsorted(s1, t, side="left")  # D scores < t
    fpr_u, fnr_u = _cp_upper(fp, n0, conf), _cp_upper(fn, n1, conf)
    tnr_u, tpr_u = _cp_upper(n0 - fp, n0, conf), _cp_upper(n1 - fn, n1, conf)  # for the reversed test
    cands = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for num, den in ((fnr_u, fpr_u), (fpr_u, fnr_u), (tpr_u, tnr_u), (tnr_u, tpr_u)):
            top = 1.0 - delta - num
            cands.append(np.where(top > 0, np.log(np.maximum(top, 1e-300) / den), -np.inf))
    return float(np.max(np.concatenate(cands)))


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Exact epsilon of one Gaussian mechanism with std = noise_multiplier x sensitivity at ``delta``.

    Analytic Gaussian mechanism (Balle & Wang 2018, Theorem 8): delta(eps) = Phi(1/(2z) - eps z) -
    e^eps Phi(-1/(2z) - eps z); dpgen's :func:`analytic_gaussian_sigma` inverts it for sigma, which
    we invert back for epsilon (it decreases in epsilon).
    """
    z = float(noise_multiplier)
    if not z > 0:
        raise ValueError(f"noise_multiplier={z} must be > 0")
    f = lambda e: analytic_gaussian_sigma(e, delta, 1.0) - z  # noqa: E731
    lo, hi = 1e-9, 1.0
    while f(hi) > 0:
        lo, hi = hi, hi * 2
        if hi > 1e4:
            raise ValueError(f"noise_multiplier={z}: epsilon beyond 1e4")
    if f(lo) < 0:
        return 0.0
    return float(optimize.brentq(f, lo, hi, xtol=1e-10, rtol=1e-10))


def rdp_one_step_epsilon(noise_multiplier: float, delta: float) -> float:
    """The same step under the project's RDP accountant (autodp), sample rate 1, one step: looser."""
    from dpgen.privacy.accountants import epsilon_for

    return float(epsilon_for(noise_multiplier, 1.0, 1, delta, "poisson"))


@dataclass
class Samples:
    """The outcome of one audit: scores on D (canary in) and on D', and what the design claims."""

    mechanism: str
    variant: str
    relation: str
    covered: bool  # the analysis covers this variant: it must pass (else it must be caught)
    claimed_epsilon: float
    delta: float
    sensitivity: float  # the most one record may move the score, by design (score units)
    scores_in: np.ndarray
    scores_out: np.ndarray
    notes: List[str] = field(default_factory=list)


def evaluate(samples: Samples, seconds: float = float("nan"), holdout: float = 0.1) -> Dict:
    """The table row of one audit: eps_lb (thresholds from the first ``holdout`` of the trials,
    counts from the rest), the mean shift and its standard error, and the verdict."""
    s1, s0 = np.asarray(samples.scores_in, float), np.asarray(samples.scores_out, float)
    n = min(len(s1), len(s0))
    h = max(20, int(n * holdout))
    if n - h < 20:
        raise ValueError(f"{n} trials per side are too few for an audit (need > {h + 20})")
    thresholds = threshold_grid(np.concatenate([s1[:h], s0[:h]]))
    eps_lb = epsilon_lower_bound(s1[h:], s0[h:], samples.delta, thresholds=thresholds)
    shift = float(s1.mean() - s0.mean())
    se = float(math.sqrt(s1.var(ddof=1) / len(s1) + s0.var(ddof=1) / len(s0)))
    if samples.covered:
        ok = eps_lb <= samples.claimed_epsilon and abs(shift) <= samples.sensitivity + SHIFT_SE * se
        verdict = "pass" if ok else "FAIL"
    else:
        verdict = "caught" if eps_lb > samples.claimed_epsilon else "MISSED"
    return {"mechanism": samples.mechanism, "variant": samples.variant,
            "neighbouring_relation": samples.relation, "claimed_epsilon": round(samples.claimed_epsilon, 4),
            "delta": samples.delta, "empirical_epsilon_lb": round(eps_lb, 4),
            "sensitivity_design": round(samples.sensitivity, 6), "score_shift_measured": round(shift, 6),
            "score_shift_se": se, "trials_per_side": n, "seconds": round(seconds, 2), "verdict": verdict,
            "covered": samples.covered, "notes": list(samples.notes)}
