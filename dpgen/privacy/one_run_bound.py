"""The epsilon lower bound of a one-run privacy audit (Steinke, Nasr & Jagielski, NeurIPS 2023).

"Privacy Auditing with One (1) Training Run": m canaries, each included in the private set independently
with probability 1/2 (the vector S in {-1, +1}^m, S_i = +1 when canary i is in); ONE run of the mechanism
M on the set that holds the included ones; an auditor that sees only what M released (and public
information) guesses T_i = +1 ("in") or -1 ("out") for r of the canaries and abstains (T_i = 0) on the rest.
W = sum_i max(0, T_i S_i) counts the correct guesses.

The theorem (restated from the paper; pure DP is its Theorem 3.1, approximate DP its Theorem 5.2 with
the computation of its Algorithm 2):

    if M is (epsilon, delta)-DP with respect to adding / removing one canary, then for every v,

        P[W >= v]  <=  beta(v) + 2 m delta alpha(v),
        beta(v)  = P[Binomial(r, p) >= v],             p = e^epsilon / (1 + e^epsilon),
        alpha(v) = max_{i = 1..v}  P[v - i <= Binomial(r, p) < v] / i.

With delta = 0 the bound is the binomial tail alone: each guess is no better than epsilon-DP randomized
response, whose accuracy is p. The right-hand side, evaluated at the observed (r, v), is a p-value for
the null hypothesis "M is (epsilon, delta)-DP"; it grows with epsilon. The audit's lower bound at
confidence 1 - a is the largest epsilon whose null hypothesis (and every smaller epsilon's) is
rejected at level a: if the mechanism really is (epsilon_true, delta)-DP, then epsilon_lb >= epsilon_true
only when the test rejected the true null, which has probability at most a.

The number of guesses r must not depend on S: the auditor fixes k+ ("in" for the k+ highest scores)
and k- ("out" for the k- lowest) before looking; trying K settings of (k+, k-) and keeping the best is
covered by a Bonferroni correction (each at level a / K): :func:`best_epsilon_lower_bound`.

This module imports only numpy, scipy and the standard library (the privacy library imports nothing
above it); the harness that runs dpgen's training with canaries is ``dpgen/audit/one_run.py``.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
from scipy import stats

#: default confidence of the lower bound
CONFIDENCE = 0.95


def _check(m: int, r: int, v: int, delta: float) -> None:
    if not (isinstance(m, (int, np.integer)) and isinstance(r, (int, np.integer)) and isinstance(v, (int, np.integer))):
        raise TypeError(f"m, r and v must be integers, got m={m!r}, r={r!r}, v={v!r}")
    if not 0 <= v <= r <= m:
        raise ValueError(f"the counts need 0 <= v (correct) <= r (guesses) <= m (canaries), got v={v}, r={r}, m={m}")
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta={delta} is invalid: it must lie in [0, 1]")


def guess_accuracy(epsilon: float) -> float:
    """p = e^eps / (1 + e^eps): the accuracy of epsilon-DP randomized response, the best any guess can have."""
    if not epsilon >= 0:
        raise ValueError(f"epsilon={epsilon} is invalid: it must be >= 0")
    return float(1.0 / (1.0 + math.exp(-epsilon)))


def p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """The probability bound of the theorem: P[W >= v] for an (epsilon, delta)-DP mechanism, r guesses out
    of m canaries (at most 1). Small values reject "the run is (epsilon, delta)-DP"."""
    _check(m, r, v, delta)
    if v == 0:
        return 1.0
    p = guess_accuracy(epsilon)
    beta = float(stats.binom.sf(v - 1, r, p))  # P[Bin(r, p) >= v]
    if delta == 0.0:
        return min(1.0, beta)
    # alpha(v) = max_i P[v - i <= Bin < v] / i: the cumulative mass below v, i values at a time
    pmf = stats.binom.pmf(np.arange(v - 1, -1, -1), r, p)  # P[Bin = v - 1], P[Bin = v - 2], ..., P[Bin = 0]
    cum = np.cumsum(pmf)  # cum[i - 1] = P[v - i <= Bin < v]
    alpha = float(np.max(cum / np.arange(1, v + 1)))
    return min(1.0, beta + 2.0 * m * delta * alpha)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float = 0.0, confidence: float = CONFIDENCE,
                        eps_max: float = 50.0, tol: float = 1e-6) -> float:
    """The largest epsilon such that every epsilon' in [0, epsilon] is rejected by :func:`p_value` at level
    1 - ``confidence``: a ``confidence`` lower bound on the epsilon of an (epsilon, delta)-DP run that
    gave v correct out of r guesses on m canaries. 0.0 when not even epsilon = 0 is rejected."""
    _check(m, r, v, delta)
    a = 1.0 - float(confidence)
    if not 0.0 < a < 1.0:
        raise ValueError(f"confidence={confidence} is invalid: it must lie in (0, 1)")
    if r == 0 or p_value(m, r, v, 0.0, delta) > a:
        return 0.0
    # the p-value grows with epsilon (a weaker null hypothesis); scan a grid for the first epsilon not
    # rejected (robust to a non-monotone stretch), then bisect inside that cell
    grid = np.concatenate([np.arange(0.0, 10.0, 0.05), np.arange(10.0, eps_max + 1e-9, 0.5)])
    lo = 0.0
    hi = None
    for e in grid[1:]:
        if p_value(m, r, v, float(e), delta) > a:
            hi = float(e)
            break
        lo = float(e)
    if hi is None:
        return float(eps_max)
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if p_value(m, r, v, mid, delta) <= a:
            lo = mid
        else:
            hi = mid
    return lo


def guesses_from_scores(scores: Sequence[float], k_plus: int, k_minus: int) -> np.ndarray:
    """T in {-1, 0, +1}^m: +1 for the ``k_plus`` highest scores, -1 for the ``k_minus`` lowest, 0 for the
    rest (ties broken by position, i.e. independently of which canaries were included)."""
    s = np.asarray(scores, dtype=np.float64)
    m = s.shape[0]
    if s.ndim != 1:
        raise ValueError(f"scores must be one number per canary, got shape {s.shape}")
    if k_plus < 0 or k_minus < 0 or k_plus + k_minus > m:
        raise ValueError(f"k_plus={k_plus}, k_minus={k_minus} are invalid for {m} canaries: need k_plus, "
                         f"k_minus >= 0 and k_plus + k_minus <= m")
    if np.any(~np.isfinite(s)):
        raise ValueError("scores must be finite")
    order = np.argsort(-s, kind="stable")  # highest first
    t = np.zeros(m, dtype=np.int64)
    t[order[:k_plus]] = 1
    if k_minus:
        t[order[m - k_minus:]] = -1
    return t


def count_correct(guesses: Sequence[int], included: Sequence[bool]) -> Tuple[int, int]:
    """(r, v): the guesses made (non-zero T_i) and how many are right (T_i = S_i)."""
    t = np.asarray(guesses)
    s = np.where(np.asarray(included, dtype=bool), 1, -1)
    if t.shape != s.shape:
        raise ValueError(f"{t.shape[0]} guesses for {s.shape[0]} canaries")
    return int(np.count_nonzero(t)), int(np.sum(np.maximum(0, t * s)))


def guess_grid(m: int, fractions: Iterable[Tuple[float, float]] = ((0.02, 0.02), (0.05, 0.05), (0.1, 0.1),
                                                                    (0.2, 0.2), (0.05, 0.0), (0.1, 0.0))
               ) -> List[Tuple[int, int]]:
    """The (k+, k-) settings tried, fixed before any score is seen: fractions of m (at least one guess
    each; duplicates dropped)."""
    out: List[Tuple[int, int]] = []
    for fp, fm in fractions:
        kp = max(1, int(round(fp * m))) if fp > 0 else 0
        km = max(1, int(round(fm * m))) if fm > 0 else 0
        if kp + km > m:
            continue
        if (kp, km) not in out:
            out.append((kp, km))
    if not out:
        raise ValueError(f"no (k+, k-) setting fits {m} canaries")
    return out


def best_epsilon_lower_bound(scores: Sequence[float], included: Sequence[bool], delta: float = 0.0,
                             grid: Optional[Sequence[Tuple[int, int]]] = None,
                             confidence: float = CONFIDENCE) -> Dict[str, object]:
    """The audit's result: for each (k+, k-) of ``grid`` (default :func:`guess_grid`), the lower bound at
    level (1 - confidence) / len(grid) (Bonferroni), and the best of them, which is then a ``confidence``
    lower bound. Returns {"epsilon_lb", "k_plus", "k_minus", "guesses", "correct", "settings": [...]}."""
    inc = np.asarray(included, dtype=bool)
    m = inc.shape[0]
    if np.asarray(scores).shape[0] != m:
        raise ValueError(f"{np.asarray(scores).shape[0]} scores for {m} canaries")
    grid = list(grid) if grid is not None else guess_grid(m)
    a = (1.0 - float(confidence)) / len(grid)
    settings = []
    best = None
    for kp, km in grid:
        r, v = count_correct(guesses_from_scores(scores, kp, km), inc)
        eps = epsilon_lower_bound(m, r, v, delta, confidence=1.0 - a)
        row = {"k_plus": kp, "k_minus": km, "guesses": r, "correct": v, "epsilon_lb": eps}
        settings.append(row)
        if best is None or eps > best["epsilon_lb"] or (eps == best["epsilon_lb"] and v / max(r, 1) >
                                                         best["correct"] / max(best["guesses"], 1)):
            best = row
    return {**best, "settings": settings, "level_per_setting": a, "confidence": confidence}


def noise_from_release(x: np.ndarray) -> float:
    """A robust estimate of the noise std in projections ``x`` of released noisy sums onto unit directions
    (mostly noise: a canary's signal is in a sampled step's projection only): median |x| / 0.6745, the
    normal distribution's median absolute deviation about 0. A function of the release alone."""
    a = np.abs(np.asarray(x, dtype=np.float64)).ravel()
    if a.size == 0 or not np.all(np.isfinite(a)):
        raise ValueError("noise_from_release needs finite projections")
    return float(np.median(a) / 0.6744897501960817)


def poisson_gaussian_scores(x: np.ndarray, mu: np.ndarray, q: float, sigma: Optional[float] = None) -> np.ndarray:
    """Each canary's log-likelihood ratio "in" vs "out" of a Poisson-subsampled Gaussian run, summed over steps:
    ``x`` [T, m] the release projected onto each canary's unit direction at step t (in units of the clip C),
    ``mu`` [T, m] the canary's signal there when its record is drawn (its clipped norm / C, known to the auditor
    from public values), ``q`` the sampling rate; per step the canary is drawn with probability q, so

        score_i = sum_t log(1 - q + q exp((mu_ti x_ti - mu_ti^2 / 2) / sigma^2)),

    the Neyman-Pearson statistic of the step mixture (a sum of x weighs a step without the canary as much as
    one with it). ``sigma``: the noise std in units of C; None: :func:`noise_from_release` of ``x`` (the auditor
    reads the noise off the release, so a run with less noise than claimed is scored at its real noise)."""
    x = np.asarray(x, dtype=np.float64)
    mu = np.broadcast_to(np.asarray(mu, dtype=np.float64), x.shape)
    if x.ndim != 2:
        raise ValueError(f"x must be [steps, canaries], got shape {x.shape}")
    if not 0.0 < q <= 1.0:
        raise ValueError(f"q={q} is invalid: the sampling rate lies in (0, 1]")
    s = noise_from_release(x) if sigma is None else float(sigma)
    if not s > 0:
        raise ValueError(f"sigma={s} is invalid: the noise std must be > 0")
    z = (mu * x - 0.5 * mu * mu) / (s * s)
    step = np.logaddexp(math.log1p(-q), math.log(q) + z) if q < 1.0 else z
    return step.sum(axis=0)


def max_epsilon_lower_bound(m: int, r: int, delta: float = 0.0, confidence: float = CONFIDENCE) -> float:
    """The most an audit with r guesses on m canaries can show: every guess right."""
    return epsilon_lower_bound(m, r, r, delta, confidence)


__all__ = ["CONFIDENCE", "guess_accuracy", "p_value", "epsilon_lower_bound", "guesses_from_scores",
           "count_correct", "guess_grid", "best_epsilon_lower_bound", "max_epsilon_lower_bound", "noise_from_release",
           "poisson_gaussian_scores"]
