"""Wasserstein differential privacy (WDP): Yang, Qi & Zhou, AAAI 2024 ("Wasserstein Differential Privacy").

What is here, with the paper's numbering:

* **Table 1 / Propositions 7-8** -- privacy budgets of the Laplace mechanism (scale ``b``, the paper's
  lambda) and of the Gaussian mechanism (std ``sigma``) under DP, RDP and WDP:
  :func:`laplace_epsilon`, :func:`gaussian_epsilon` and the individual closed forms.
* **Propositions 9, 10, 11** -- conversions DP -> WDP, RDP -> WDP, WDP -> RDP / DP, exactly as the paper
  states them: :func:`dp_to_wdp`, :func:`rdp_to_wdp`, :func:`wdp_to_rdp`, :func:`wdp_to_dp`.
* **Lemma 1** -- the mu-order raw absolute moment of ``N(q d_t, Var)`` through Kummer's confluent
  hypergeometric function ``M(a, b; z)`` (:func:`kummer_m`, our own series with fallbacks, and
  :func:`gaussian_abs_moment` / :func:`wdp_abs_moment`).
* **Theorems 2-3 and Corollary 1** -- the Wasserstein accountant for subsampled-Gaussian SGD:
  :func:`wdp_step_loss`, :func:`wdp_epsilon`, :func:`wdp_log_delta` and
  :class:`WassersteinAccountant`.

Notes on what the paper states (read these before comparing numbers):

* The WDP entries of Table 1 are ``1/2 * Delta * (sqrt(2 KL))**(1/mu)`` (Laplace, with the KL divergence
  of the sensitivity-1 Laplace pair) and ``1/2 * (Delta/sigma)**(1/mu)`` (Gaussian); both equal
  Proposition 10 applied to the order-1 RDP value (the KL divergence). They are *not* the mu-Wasserstein
  distance between the two output distributions: for any translation family ``W_mu(P, P(. - Delta)) =
  Delta`` for every mu (see :func:`numerical_wasserstein_1d`, which the tests use to show it).
  The Laplace formula carries ``Delta`` outside the root while the Gaussian one has it inside; we keep
  both as printed.
* Proposition 4 (monotonicity in mu) holds for these closed forms only when the base
  ``sqrt(2 KL)`` (resp. ``Delta/sigma``) is below 1, i.e. for enough noise; for ``sigma < Delta`` the
  Gaussian closed form *decreases* with mu.
* Theorem 2 sums the absolute moments over ``i = 1..n``; following the authors' description
  (``d_t = ||g_t - g'_t||`` for *pairs* of adjacent gradients) ``i`` runs over the gradient pairs
  supplied for the step, so the per-step loss grows like ``n**(1/mu)``. The ``inf_{d_t}`` in front of
  the sum acts on a single number once the pairs are fixed, so it does nothing here.
* ``Z_t ~ N(q d_t, (2 - 2q + 2q^2) sigma^2)`` has a variance that does not vanish with the distance;
  the Theorem-2 loss therefore *grows* with the noise std sigma (unlike DP/RDP/BDP budgets).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional

import numpy as np
from scipy.special import gammaln, gammasgn, log_ndtr, logsumexp

from dpgen.privacy.base import Accountant
from dpgen.privacy.validation import (PrivacyParameterError, check_delta, check_positive, check_positive_int,
                                      check_sample_rate)

__all__ = [
    "FRAMEWORKS",
    "check_order",
    "laplace_kl",
    "laplace_rdp",
    "laplace_wdp",
    "gaussian_rdp",
    "gaussian_wdp",
    "gaussian_dp_epsilon",
    "laplace_epsilon",
    "gaussian_epsilon",
    "dp_to_wdp",
    "rdp_to_wdp",
    "wdp_to_rdp",
    "wdp_to_dp",
    "kummer_m",
    "gaussian_abs_moment",
    "log_gaussian_abs_moment",
    "wdp_variance",
    "wdp_abs_moment",
    "wdp_step_loss",
    "wdp_epsilon",
    "wdp_log_delta",
    "pairwise_distances",
    "numerical_wasserstein_1d",
    "WassersteinAccountant",
]

FRAMEWORKS = ("dp", "rdp", "wdp")


# ----------------------------------------------------------------------------------------------
# parameter checks
# ----------------------------------------------------------------------------------------------
def check_order(order, name: str = "order", allow_inf: bool = False) -> float:
    """An order (RDP alpha or WDP mu) must be a number >= 1 (``inf`` only where ``allow_inf``)."""
    try:
        v = float(order)
    except (TypeError, ValueError):
        v = float("nan")
    if math.isnan(v) or v < 1.0 or (math.isinf(v) and not allow_inf):
        rng = "[1, inf]" if allow_inf else "[1, inf)"
        raise PrivacyParameterError(
            f"{name}={order!r} is invalid: the order must be a number in {rng} "
            f"(e.g. {name}=2; order 1 is the KL limit for RDP and 1-Wasserstein for WDP)."
        )
    return v


def _check_framework(framework) -> str:
    f = str(framework).lower()
    if f not in FRAMEWORKS:
        raise PrivacyParameterError(
            f"framework={framework!r} is invalid: it must be one of {', '.join(FRAMEWORKS)}."
        )
    return f


def _check_sensitivity(sensitivity) -> float:
    return check_positive(sensitivity, "sensitivity", "the l_p sensitivity Delta of the query, e.g. 1.0")


# ----------------------------------------------------------------------------------------------
# Table 1: basic mechanisms
# ----------------------------------------------------------------------------------------------
def laplace_kl(scale, sensitivity=1.0) -> float:
    """KL divergence between ``Lap(0, b)`` and ``Lap(Delta, b)``: ``r + exp(-r) - 1`` with ``r = Delta/b``.

    This is Table 1's RDP entry at ``alpha = 1`` (Mironov 2017, Table 2).
    """
    b = check_positive(scale, "scale", "the Laplace scale b (the paper's lambda), e.g. scale=1")
    r = _check_sensitivity(sensitivity) / b
    return float(r + math.expm1(-r))


def laplace_rdp(scale, alpha, sensitivity=1.0) -> float:
    """RDP of the Laplace mechanism (Mironov 2017, Table 2; WDP Table 1).

    ``alpha > 1``: ``1/(alpha-1) log{ alpha/(2 alpha-1) exp((alpha-1) r) + (alpha-1)/(2 alpha-1) exp(-alpha r) }``
    with ``r = Delta / b``; ``alpha = 1``: the KL limit ``r + exp(-r) - 1``; ``alpha = inf``: ``r`` (pure DP).
    Evaluated in log space, so large orders do not overflow.
    """
    b = check_positive(scale, "scale", "the Laplace scale b (the paper's lambda), e.g. scale=1")
    a = check_order(alpha, "alpha", allow_inf=True)
    r = _check_sensitivity(sensitivity) / b
    if math.isinf(a):
        return float(r)
    if a == 1.0:
        return laplace_kl(b, sensitivity)
    t1 = math.log(a / (2 * a - 1)) + (a - 1) * r
    t2 = math.log((a - 1) / (2 * a - 1)) - a * r
    return float(np.logaddexp(t1, t2) / (a - 1))


def gaussian_rdp(sigma, alpha, sensitivity=1.0) -> float:
    """RDP of the Gaussian mechanism: ``alpha Delta^2 / (2 sigma^2)`` (order 1 is the KL divergence)."""
    s = check_positive(sigma, "sigma", "the std of the Gaussian noise, e.g. sigma=1")
    a = check_order(alpha, "alpha", allow_inf=True)
    d = _check_sensitivity(sensitivity)
    return float(a * d * d / (2.0 * s * s))


def laplace_wdp(scale, mu, sensitivity=1.0) -> float:
    """WDP of the Laplace mechanism, Proposition 7 / Table 1, as printed:

    ``1/2 * Delta * (sqrt(2 [1/b + exp(-1/b) - 1]))**(1/mu)``.

    The bracket is the KL divergence of the *sensitivity-1* Laplace pair (the paper keeps ``1/lambda``
    inside and ``Delta`` outside); with ``Delta = 1`` this is :func:`rdp_to_wdp` of :func:`laplace_kl`.
    """
    b = check_positive(scale, "scale", "the Laplace scale b (the paper's lambda), e.g. scale=1")
    m = check_order(mu, "mu")
    d = _check_sensitivity(sensitivity)
    kl1 = 1.0 / b + math.expm1(-1.0 / b)
    return float(0.5 * d * math.sqrt(2.0 * kl1) ** (1.0 / m))


def gaussian_wdp(sigma, mu, sensitivity=1.0) -> float:
    """WDP of the Gaussian mechanism, Proposition 8 / Table 1: ``1/2 * (Delta / sigma)**(1/mu)``."""
    s = check_positive(sigma, "sigma", "the std of the Gaussian noise, e.g. sigma=1")
    m = check_order(mu, "mu")
    d = _check_sensitivity(sensitivity)
    return float(0.5 * (d / s) ** (1.0 / m))


def _gaussian_delta(eps: float, sigma: float, sensitivity: float) -> float:
    """Exact delta(eps) of the Gaussian mechanism (Balle & Wang 2018, Theorem 8), in log space."""
    u = sensitivity / (2.0 * sigma)
    v = eps * sigma / sensitivity
    la = log_ndtr(u - v)
    lb = eps + log_ndtr(-u - v)
    if lb >= la:
        return 0.0
    return float(math.exp(la) * -math.expm1(lb - la))


def gaussian_dp_epsilon(sigma, delta, sensitivity=1.0) -> float:
    """Smallest eps with the Gaussian mechanism ``(eps, delta)``-DP: the analytic Gaussian mechanism.

    Table 1 lists the Gaussian mechanism's pure-DP budget as infinite; with a ``delta`` we return the
    exact (tight) epsilon of Balle & Wang (2018), found by bisection on their delta(eps) formula.
    """
    s = check_positive(sigma, "sigma", "the std of the Gaussian noise, e.g. sigma=1")
    dl = check_delta(delta)
    d = _check_sensitivity(sensitivity)
    if _gaussian_delta(0.0, s, d) <= dl:
        return 0.0
    lo, hi = 0.0, 1.0
    while _gaussian_delta(hi, s, d) > dl:
        hi *= 2.0
        if hi > 1e8:  # pragma: no cover - absurd parameters
            return float("inf")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _gaussian_delta(mid, s, d) > dl:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return float(hi)


def laplace_epsilon(scale, order=None, framework: str = "wdp", sensitivity=1.0) -> float:
    """Privacy budget of the Laplace mechanism ``f(x) + Lap(0, scale)`` (WDP Table 1).

    ``framework="dp"``: ``Delta / scale`` (``order`` ignored); ``"rdp"``: :func:`laplace_rdp` at
    ``alpha = order`` (order 1 = KL limit, ``inf`` = DP); ``"wdp"``: :func:`laplace_wdp` at ``mu = order``.
    """
    f = _check_framework(framework)
    if f == "dp":
        b = check_positive(scale, "scale", "the Laplace scale b (the paper's lambda), e.g. scale=1")
        return float(_check_sensitivity(sensitivity) / b)
    if order is None:
        raise PrivacyParameterError(f"order=None is invalid: framework={f!r} needs an order >= 1.")
    if f == "rdp":
        return laplace_rdp(scale, order, sensitivity)
    return laplace_wdp(scale, order, sensitivity)


def gaussian_epsilon(sigma, order=None, framework: str = "wdp", sensitivity=1.0, delta=None) -> float:
    """Privacy budget of the Gaussian mechanism ``f(x) + N(0, sigma^2)`` (WDP Table 1).

    ``framework="dp"``: ``inf`` when ``delta`` is None (Table 1: no pure-DP guarantee), otherwise the
    tight ``(eps, delta)`` budget of :func:`gaussian_dp_epsilon`; ``"rdp"``: ``alpha Delta^2/(2 sigma^2)``;
    ``"wdp"``: ``1/2 (Delta/sigma)^(1/mu)``.
    """
    f = _check_framework(framework)
    if f == "dp":
        check_positive(sigma, "sigma", "the std of the Gaussian noise, e.g. sigma=1")
        _check_sensitivity(sensitivity)
        if delta is None:
            return float("inf")
        return gaussian_dp_epsilon(sigma, delta, sensitivity)
    if order is None:
        raise PrivacyParameterError(f"order=None is invalid: framework={f!r} needs an order >= 1.")
    if f == "rdp":
        return gaussian_rdp(sigma, order, sensitivity)
    return gaussian_wdp(sigma, order, sensitivity)


# ----------------------------------------------------------------------------------------------
# Propositions 9-11: conversions
# ----------------------------------------------------------------------------------------------
def dp_to_wdp(epsilon, mu, sensitivity=1.0) -> float:
    """Proposition 9: ``eps``-DP implies ``(mu, 1/2 Delta (2 eps (e^eps - 1))^(1/(2 mu)))``-WDP."""
    e = check_positive(epsilon, "epsilon", "the pure-DP budget")
    m = check_order(mu, "mu")
    d = _check_sensitivity(sensitivity)
    return float(0.5 * d * (2.0 * e * math.expm1(e)) ** (1.0 / (2.0 * m)))


def rdp_to_wdp(epsilon, mu, sensitivity=1.0) -> float:
    """Proposition 10: ``(alpha, eps)``-RDP implies ``(mu, 1/2 Delta (2 eps)^(1/(2 mu)))``-WDP (any alpha)."""
    e = check_positive(epsilon, "epsilon", "the RDP budget")
    m = check_order(mu, "mu")
    d = _check_sensitivity(sensitivity)
    return float(0.5 * d * (2.0 * e) ** (1.0 / (2.0 * m)))


def wdp_to_rdp(epsilon, mu, alpha, lipschitz) -> float:
    """Proposition 11: ``(mu, eps)``-WDP with an ``L``-Lipschitz log-density implies
    ``(alpha, alpha/(alpha-1) * L * eps^(mu/(mu+1)))``-RDP, for ``alpha > 1`` (``alpha = inf`` gives DP)."""
    e = check_positive(epsilon, "epsilon", "the WDP budget")
    m = check_order(mu, "mu")
    a = check_order(alpha, "alpha", allow_inf=True)
    if a == 1.0:
        raise PrivacyParameterError(
            "alpha=1 is invalid here: Proposition 11 has the factor alpha/(alpha-1); use alpha > 1."
        )
    L = check_positive(lipschitz, "lipschitz", "the Lipschitz constant L of log p_M")
    base = L * e ** (m / (m + 1.0))
    return float(base if math.isinf(a) else a / (a - 1.0) * base)


def wdp_to_dp(epsilon, mu, lipschitz) -> float:
    """Proposition 11, ``alpha -> inf``: ``(mu, eps)``-WDP implies ``L * eps^(mu/(mu+1))``-DP."""
    return wdp_to_rdp(epsilon, mu, float("inf"), lipschitz)


# ----------------------------------------------------------------------------------------------
# Lemma 1: Kummer's function and the raw absolute moment
# ----------------------------------------------------------------------------------------------
_ASYMPTOTIC_NEG_Z = 60.0   # z < -60: large-|z| asymptotic expansion (DLMF 13.7.2)
_KUMMER_TRANSFORM_Z = -1.0  # -60 <= z < -1: Kummer's transformation M(a,b,z) = e^z M(b-a,b,-z)


def _is_nonpos_int(x: float) -> bool:
    return float(x).is_integer() and x <= 0


def _check_terms(n: int, max_terms: int, a: float, b: float, z_left: np.ndarray) -> None:
    if n >= max_terms:
        raise RuntimeError(f"kummer_m: series for a={a}, b={b} did not converge in {max_terms} terms "
                           f"(max |z| = {np.abs(z_left).max():.3g}); raise max_terms.")


def _series(a: float, b: float, z: np.ndarray, tol: float, max_terms: int) -> np.ndarray:
    """Direct power series ``sum_n (a)_n / (b)_n z^n / n!`` (vectorised over z).

    Convergence rule: an element stops once ``n >= |z| + |a|`` (past the point where terms can still
    grow) and the last term is below ``tol`` times the partial sum, or a term is exactly 0
    (terminating series, ``a`` a non-positive integer).
    """
    z = np.asarray(z, dtype=float)
    total = np.ones_like(z)
    term = np.ones_like(z)
    done = np.zeros(z.shape, dtype=bool)
    absz = np.abs(z)
    n = 0
    while not done.all():
        _check_terms(n, max_terms, a, b, absz[~done])
        term = term * ((a + n) / (b + n)) * z / (n + 1)
        n += 1
        upd = ~done
        total[upd] += term[upd]
        small = np.abs(term) <= tol * np.abs(total)
        done |= (term == 0) | (small & (n >= absz + abs(a)))
    return total


def _asymptotic_neg(a: float, b: float, x: np.ndarray, tol: float) -> np.ndarray:
    """``M(a, b, -x)`` for large ``x > 0``: ``Gamma(b)/Gamma(b-a) x^(-a) sum_s (a)_s (a-b+1)_s / s! x^(-s)``.

    The exponentially small companion term (``~ e^(-x)``) is dropped; the sum is truncated at its
    smallest term (optimal truncation) or when it terminates.
    """
    x = np.asarray(x, dtype=float)
    total = np.ones_like(x)
    term = np.ones_like(x)
    done = np.zeros(x.shape, dtype=bool)
    for s in range(0, 500):
        new = term * (a + s) * (a - b + 1 + s) / ((s + 1) * x)
        grow = np.abs(new) >= np.abs(term)
        stop = done | grow
        upd = ~stop
        total[upd] += new[upd]
        done = stop | (np.abs(new) <= tol * np.abs(total)) | (new == 0)
        term = new
        if done.all():
            break
    log_pref = gammaln(b) - gammaln(b - a)
    sign = float(gammasgn(b - a))
    return sign * np.exp(log_pref - a * np.log(x)) * total


def _log_series_positive(a: float, b: float, x: np.ndarray, tol: float, max_terms: int) -> np.ndarray:
    """``log M(a, b, x)`` for ``a > 0``, ``b > 0``, ``x > 0``: every term is positive, summed in log space
    (no overflow for large ``x``). Same convergence rule as :func:`_series`."""
    x = np.asarray(x, dtype=float)
    logx = np.log(x)
    log_term = np.zeros_like(x)
    log_total = np.zeros_like(x)
    done = np.zeros(x.shape, dtype=bool)
    n = 0
    while not done.all():
        _check_terms(n, max_terms, a, b, x[~done])
        log_term = log_term + math.log((a + n) / (b + n)) + logx - math.log(n + 1)
        n += 1
        upd = ~done
        log_total[upd] = np.logaddexp(log_total[upd], log_term[upd])
        done |= (log_term - log_total <= math.log(tol)) & (n >= x + a)
    return log_total


def _asymptotic_threshold(a: float, b: float) -> float:
    """``|z|`` from which the asymptotic expansion is accurate to ~double precision for these a, b."""
    return max(_ASYMPTOTIC_NEG_Z, 10.0 * (abs(a) + 1.0) * (abs(a - b + 1.0) + 1.0))


def kummer_m(a, b, z, tol: float = 1e-15, max_terms: int = 2000000):
    """Kummer's confluent hypergeometric function ``M(a, b; z) = 1F1(a; b; z)``, by its own series.

    * ``a`` a non-positive integer: the terminating polynomial (exact for every ``z``; for ``z < 0``
      all its terms are positive).
    * ``z >= -1``: the defining series ``sum_n (a)_n/(b)_n z^n/n!`` with the convergence rule of
      :func:`_series` (stop once past ``n >= |z| + |a|`` and the term is below ``tol`` of the sum).
    * ``z < -1``: Kummer's transformation ``M(a, b; z) = e^z M(b-a, b; -z)``; for Lemma 1
      (``a = -mu/2, b = 1/2``) ``b - a > 0`` and the transformed series has only positive terms, which we
      sum in log space (no cancellation, no overflow).
    * ``|z|`` beyond :func:`_asymptotic_threshold` (at least 60, and large against ``|a| |a-b+1|``): the
      large-``|z|`` asymptotic expansion (DLMF 13.7.2) with optimal truncation, which needs no
      ``O(|z|)`` terms.

    Accepts a scalar or an array ``z`` (``a``, ``b`` scalars); returns a float or an ndarray.
    """
    a = float(a)
    b = float(b)
    if _is_nonpos_int(b):
        raise PrivacyParameterError(f"b={b!r} is invalid: M(a, b; z) is undefined for b = 0, -1, -2, ...")
    zz = np.asarray(z, dtype=float)
    scalar = zz.ndim == 0
    zz = np.atleast_1d(zz)
    if not np.all(np.isfinite(zz)):
        raise PrivacyParameterError("z is invalid: Kummer's function needs finite arguments.")
    out = np.empty_like(zz)
    if _is_nonpos_int(a):
        out[:] = _series(a, b, zz, tol, max_terms)
        return float(out[0]) if scalar else out
    direct = zz >= _KUMMER_TRANSFORM_Z
    if direct.any():
        out[direct] = _series(a, b, zz[direct], tol, max_terms)
    neg = ~direct
    if neg.any():
        x = -zz[neg]
        res = np.empty_like(x)
        if _is_nonpos_int(b - a):  # transformed series is a polynomial
            res[:] = np.exp(-x) * _series(b - a, b, x, tol, max_terms)
        else:
            asym = x >= _asymptotic_threshold(a, b)
            if asym.any():
                res[asym] = _asymptotic_neg(a, b, x[asym], tol)
            mid = ~asym
            if mid.any():
                if b - a > 0 and b > 0:
                    res[mid] = np.exp(-x[mid] + _log_series_positive(b - a, b, x[mid], tol, max_terms))
                else:
                    res[mid] = np.exp(-x[mid]) * _series(b - a, b, x[mid], tol, max_terms)
        out[neg] = res
    return float(out[0]) if scalar else out


def log_gaussian_abs_moment(order, mean, var):
    """``log E|X|^mu`` for ``X ~ N(mean, var)``, any order ``mu > -1`` (Winkelbauer 2012; WDP Lemma 1, Eq. 12):

    ``E|X|^mu = (2 var)^(mu/2) Gamma((mu+1)/2) / sqrt(pi) * M(-mu/2, 1/2; -mean^2 / (2 var))``.
    Vectorised over ``mean``.
    """
    try:
        m = float(order)
    except (TypeError, ValueError):
        m = float("nan")
    if not (-1.0 < m < float("inf")):
        raise PrivacyParameterError(
            f"order={order!r} is invalid: the absolute moment needs a finite order > -1 (WDP uses mu >= 1)."
        )
    v = check_positive(var, "var", "the variance of the Gaussian")
    mean = np.asarray(mean, dtype=float)
    z = -(mean * mean) / (2.0 * v)
    k = np.asarray(kummer_m(-m / 2.0, 0.5, z))
    return (m / 2.0) * math.log(2.0 * v) + gammaln((m + 1.0) / 2.0) - 0.5 * math.log(math.pi) + np.log(k)


def gaussian_abs_moment(order, mean, var):
    """``E|X|^mu`` for ``X ~ N(mean, var)`` by Lemma 1 (Kummer form); float for scalar ``mean``."""
    r = np.exp(log_gaussian_abs_moment(order, mean, var))
    return float(r) if np.ndim(r) == 0 else r


def wdp_variance(noise_std, sample_rate) -> float:
    """Theorem 2's variance ``Var = (2 - 2q + 2q^2) sigma^2`` of ``Z_t``."""
    s = check_positive(noise_std, "noise_std", "the std of the Gaussian noise added to the gradient sum")
    q = check_sample_rate(sample_rate)
    return float((2.0 - 2.0 * q + 2.0 * q * q) * s * s)


def wdp_abs_moment(order, distance, noise_std, sample_rate):
    """Lemma 1: ``E|Z_t|^mu`` for ``Z_t ~ N(q d_t, (2 - 2q + 2q^2) sigma^2)``."""
    q = check_sample_rate(sample_rate)
    var = wdp_variance(noise_std, q)
    return gaussian_abs_moment(order, q * np.asarray(distance, dtype=float), var)


def check_distances(distances) -> np.ndarray:
    d = np.asarray(distances, dtype=float).reshape(-1)
    if d.size == 0:
        raise PrivacyParameterError(
            "distances is empty: a step needs at least one gradient pair (a batch of size >= 2)."
        )
    if not np.all(np.isfinite(d)) or np.any(d < 0):
        raise PrivacyParameterError("distances is invalid: gradient-pair distances must be finite and >= 0.")
    return d


def pairwise_distances(gradients) -> np.ndarray:
    """l2 distances ``||g_i - g_j||`` of all ``B (B-1) / 2`` pairs ``i < j`` of a batch ``(B, ...)``."""
    g = np.asarray(gradients, dtype=float)
    if g.ndim < 2:
        g = g.reshape(-1, 1)
    g = g.reshape(g.shape[0], -1)
    if g.shape[0] < 2:
        raise PrivacyParameterError(
            f"gradients has batch size {g.shape[0]}: pairwise accounting needs a batch of at least 2 "
            "per-example gradients."
        )
    sq = np.einsum("ij,ij->i", g, g)
    gram = g @ g.T
    d2 = sq[:, None] + sq[None, :] - 2.0 * gram
    iu = np.triu_indices(g.shape[0], k=1)
    return np.sqrt(np.maximum(d2[iu], 0.0))


def pairwise_step_inputs(noise_std, sample_rate, distances, gradients, num_steps):
    """The checked inputs of a pairwise (data-dependent) accountant's step: (num_steps, q, noise std,
    pair distances), the distances given or those of all pairs of the per-example ``gradients``."""
    if (distances is None) == (gradients is None):
        raise PrivacyParameterError(
            "distances/gradients: pass exactly one of distances= (gradient-pair l2 distances) or "
            "gradients= (the per-example gradients of the batch).")
    k = check_positive_int(num_steps, "num_steps")
    q = check_sample_rate(sample_rate)
    s = check_positive(noise_std, "noise_std", "the std of the Gaussian noise (noise_multiplier * C)")
    d = pairwise_distances(gradients) if gradients is not None else check_distances(distances)
    return k, q, s, d


def step_summary(k: int, q: float, s: float, d: np.ndarray) -> Dict[str, Any]:
    """What a pairwise accountant's history records of a step (besides its cost)."""
    return {"num_steps": k, "sample_rate": q, "noise_std": s, "num_pairs": int(d.size),
            "mean_distance": float(d.mean()), "max_distance": float(d.max())}


def wdp_step_loss(distances, noise_std, sample_rate, order) -> float:
    """Theorem 2: the WDP privacy loss of one step, ``[sum_i E|Z_ti|^mu]^(1/mu)``.

    ``distances`` are the ``d_ti = ||g_i - g'_i||`` of the ``n`` gradient pairs used for the step;
    ``noise_std`` is the std of the Gaussian noise added to the (summed) gradient (``sigma * C`` in
    DP-SGD); ``sample_rate`` is ``q``. Computed in log space (log-sum-exp over the pairs).
    """
    m = check_order(order, "order")
    d = check_distances(distances)
    q = check_sample_rate(sample_rate)
    var = wdp_variance(noise_std, q)
    logs = log_gaussian_abs_moment(m, q * d, var)
    return float(math.exp(logsumexp(logs) / m))


def wdp_epsilon(total_loss, delta, beta=1.0) -> float:
    """Corollary 1: ``eps = sum_t W_t - log(delta) / beta``."""
    dl = check_delta(delta)
    be = check_positive(beta, "beta", "the free parameter of Theorem 1, e.g. beta=1")
    tl = float(total_loss)
    if not tl >= 0:
        raise PrivacyParameterError(f"total_loss={total_loss!r} is invalid: it must be >= 0.")
    return float(tl - math.log(dl) / be)


def wdp_log_delta(total_loss, epsilon, beta=1.0) -> float:
    """Theorem 3: ``log delta = beta * sum_t W_t - beta * eps``."""
    be = check_positive(beta, "beta", "the free parameter of Theorem 1, e.g. beta=1")
    e = check_positive(epsilon, "epsilon", "the WDP budget")
    return float(be * float(total_loss) - be * e)


# ----------------------------------------------------------------------------------------------
# a numerical W_mu between two 1-D distributions (for checks)
# ----------------------------------------------------------------------------------------------
def numerical_wasserstein_1d(ppf_p: Callable, ppf_q: Callable, order, n: int = 200001) -> float:
    """``W_mu(P, Q)`` of two distributions on the line, ``(int_0^1 |F_P^-1(u) - F_Q^-1(u)|^mu du)^(1/mu)``.

    In one dimension the monotone (quantile) coupling is optimal for every ``mu >= 1``; the integral is
    evaluated by the midpoint rule on ``n`` points.
    """
    m = check_order(order, "order")
    u = (np.arange(n) + 0.5) / n
    diff = np.abs(np.asarray(ppf_p(u), dtype=float) - np.asarray(ppf_q(u), dtype=float))
    return float(np.mean(diff ** m) ** (1.0 / m))


# ----------------------------------------------------------------------------------------------
# the accountant
# ----------------------------------------------------------------------------------------------
class WassersteinAccountant(Accountant):
    """Wasserstein accountant (WDP Theorems 2-3, Corollary 1) for subsampled-Gaussian SGD.

    Each :meth:`step` records the Theorem-2 loss ``W_t = [sum_i E|Z_ti|^mu]^(1/mu)`` with
    ``Z_ti ~ N(q d_ti, (2 - 2q + 2q^2) noise_std^2)``; :meth:`get_epsilon` composes them with
    Corollary 1, ``eps = sum_t W_t - log(delta)/beta``.

    **Which gradient pairs.** Pass either ``distances`` (the ``d_ti`` of the pairs you choose) or
    ``gradients``, the ``(B, ...)`` per-example gradients of the batch; from gradients *all*
    ``B (B - 1) / 2`` pairs ``(g_i, g_j), i < j`` are used (1225 pairs for a batch of 50, as in the
    composition experiments of Triastcyn & Faltings and of the WDP paper). The sum of Theorem 2 runs over
    these ``n`` pairs, so the loss grows like ``n^(1/mu)``.

    Parameters
    ----------
    order : the WDP order ``mu >= 1`` (a single one: ``(mu, eps)``-WDP guarantees at different orders are
        different statements, so we do not minimise over a grid). Default 16.
    beta : Theorem 1's free parameter ``beta > 0`` (Figure 3 studies it). Default 1.

    The state (``state_dict``) is plain JSON: order, beta and the per-step summaries.
    """

    name = "wdp"

    def __init__(self, order: float = 16.0, beta: float = 1.0) -> None:
        super().__init__()
        self.order = check_order(order, "order")
        self.beta = check_positive(beta, "beta", "the free parameter of Theorem 1, e.g. beta=1")

    # -- recording ------------------------------------------------------------------------------
    def step(self, *, noise_std, sample_rate, distances=None, gradients=None, num_steps: int = 1) -> float:
        """Record ``num_steps`` steps with this batch summary; returns the per-step loss ``W_t``.

        ``noise_std``: std of the Gaussian noise added to the gradient (``noise_multiplier * C``);
        ``sample_rate``: ``q`` in (0, 1]; exactly one of ``distances`` / ``gradients`` (see class doc).
        """
        k, q, s, d = pairwise_step_inputs(noise_std, sample_rate, distances, gradients, num_steps)
        loss = wdp_step_loss(d, s, q, self.order)
        self.history.append({**step_summary(k, q, s, d), "loss": loss})
        return loss

    # -- reading ----------------------------------------------------------------------------------
    def total_loss(self) -> float:
        """``sum_t W_t`` over the recorded steps."""
        return float(sum(h["loss"] * h.get("num_steps", 1) for h in self.history))

    def get_epsilon(self, delta: float, beta: Optional[float] = None) -> float:
        """Corollary 1: ``sum_t W_t - log(delta) / beta`` (``beta`` defaults to the accountant's)."""
        return wdp_epsilon(self.total_loss(), delta, self.beta if beta is None else beta)

    def get_log_delta(self, epsilon: float, beta: Optional[float] = None) -> float:
        """Theorem 3: ``log delta`` for a target ``epsilon``."""
        return wdp_log_delta(self.total_loss(), epsilon, self.beta if beta is None else beta)

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        state = super().state_dict()
        state.update({"order": self.order, "beta": self.beta})
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.order = check_order(state.get("order", self.order), "order")
        self.beta = check_positive(state.get("beta", self.beta), "beta")

    def __repr__(self) -> str:
        return f"WassersteinAccountant(order={self.order:g}, beta={self.beta:g}, steps={self.steps})"
