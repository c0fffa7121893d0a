"""Bayesian accountant: Bayesian differential privacy (BDP) of Triastcyn & Faltings, ICML 2020.

BDP bounds the privacy loss of the *typical* (in-distribution) differing example instead of the worst
case. For the Poisson-subsampled Gaussian mechanism (DP-SGD without relying on a clipping bound) the
privacy cost of step ``t`` at order ``lambda`` for a pair of adjacent gradients ``(g, g')`` is the
log moment of the privacy loss (moments-accountant style, order ``lambda + 1`` Renyi)::

    c_t(lambda; g, g') = log E_{k ~ Binomial(lambda + 1, q)} exp( k (k - 1) ||g - g'||^2 / (2 sigma^2) )

(``sigma`` is the std of the noise added to the gradient sum; for equal-variance Gaussians the two
orders of the pair give the same expression). BDP takes the expectation of ``exp(c_t)`` over the data
distribution, which is estimated from ``m`` sampled pairs; to keep the guarantee with probability
``1 - gamma`` the estimate is replaced by its upper confidence bound (Student-t, ``m - 1`` degrees of
freedom)::

    c_hat_t(lambda) = (1/T) log( M + t_{1-gamma, m-1} * S / sqrt(m) ),
    M, S = sample mean and (ddof=1) std of exp(T * c_t(lambda; pair_i)),  i = 1..m,

where ``T`` (``total_steps``) is the Hoelder-inequality correction for the dependence between steps
(the expectation of a product over ``T`` steps is bounded by the product of ``T``-th moments), so
``T`` must be an upper bound on the number of steps accounted. Finally (their Theorems 1-2)::

    eps(delta) = min_lambda ( sum_t c_hat_t(lambda) - log(delta - gamma_tot) ) / lambda,
    gamma_tot = 1 - (1 - gamma)^(number of estimates),

i.e. the estimator's failure probability is charged to delta. Everything is computed in log space.

Choices (the papers leave them to the user):

* order grid ``lambda in {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32}`` -- integer orders (the
  binomial expansion needs integer ``lambda + 1``), dense where the minimum usually falls, cheap enough
  to account 1225 pairs per step in ~1 ms per order;
* ``gamma = 1e-16`` per estimate (the default confidence ``1 - 1e-16`` of the authors' accountant);
  with thousands of steps the charge to delta is ~1e-12, negligible against delta >= 1e-10;
* gradient pairs: all ``B (B - 1) / 2`` pairs of the batch when per-example ``gradients`` are given
  (``m = 1225`` for a batch of 50), or the ``distances`` you pass.
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache
from typing import Any, Dict, Sequence

import numpy as np
from scipy.special import gammaln
from scipy.stats import t as student_t

from dpgen.privacy.base import Accountant
from dpgen.privacy.validation import (PrivacyParameterError, check_delta, check_positive, check_positive_int,
                                      check_sample_rate)
from dpgen.privacy.wdp import check_distances, pairwise_step_inputs, step_summary

__all__ = [
    "DEFAULT_ORDERS",
    "DEFAULT_GAMMA",
    "sgm_log_cost",
    "ucb_log_mean_exp",
    "BayesianAccountant",
]

DEFAULT_ORDERS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)
DEFAULT_GAMMA = 1e-16


def _log_binom_pmf(n: int, q: float) -> np.ndarray:
    k = np.arange(n + 1, dtype=float)
    logc = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    if q >= 1.0:
        out = np.full(n + 1, -np.inf)
        out[-1] = 0.0
        return out
    return logc + k * math.log(q) + (n - k) * math.log1p(-q)


def _sgm_log_costs(orders: Sequence[int], d: np.ndarray, s: float, q: float) -> np.ndarray:
    """``c(lambda; d)`` for every order (rows) and distance (columns); inputs already validated."""
    kmax = max(orders) + 1
    kk = np.arange(kmax + 1, dtype=float)
    a = (d * d) / (2.0 * s * s)
    expo = np.outer(a, kk * (kk - 1.0))  # (m, kmax + 1)
    out = np.empty((len(orders), d.size))
    for i, lam in enumerate(orders):
        x = expo[:, : lam + 2] + _log_binom_pmf(lam + 1, q)[None, :]
        mx = np.max(x, axis=1)
        out[i] = mx + np.log(np.sum(np.exp(x - mx[:, None]), axis=1))
    return out


def sgm_log_cost(order: int, distances, noise_std: float, sample_rate: float) -> np.ndarray:
    """``c(lambda; d) = log E_{k~Bin(lambda+1, q)} exp(k(k-1) d^2 / (2 sigma^2))`` for each distance ``d``.

    With ``d = 1`` and ``noise_std = noise_multiplier`` this is the moments accountant's log moment
    (Abadi et al. 2016) of one step at order ``lambda``.
    """
    lam = check_positive_int(order, "order", "Bayesian-accountant orders are integers lambda >= 1")
    d = check_distances(distances)
    s = check_positive(noise_std, "noise_std", "the std of the Gaussian noise (noise_multiplier * C)")
    q = check_sample_rate(sample_rate)
    return _sgm_log_costs([lam], d, s, q)[0]


@lru_cache(maxsize=256)
def _t_quantile(gamma: float, df: int) -> float:
    return float(student_t.isf(gamma, df=df))


def _ucb_rows(x: np.ndarray, gamma: float) -> np.ndarray:
    """Row-wise :func:`ucb_log_mean_exp` of a 2-D array of log samples (``m >= 2`` columns)."""
    m = x.shape[1]
    mx = np.max(x, axis=1, keepdims=True)
    e = np.exp(x - mx)
    mean_rel = np.mean(e, axis=1, keepdims=True)
    log_mean = (mx + np.log(mean_rel))[:, 0]
    ss = np.sum((e - mean_rel) ** 2, axis=1)
    out = log_mean.copy()
    ok = (ss > 0) & np.isfinite(ss)
    if ok.any():
        log_std = mx[ok, 0] + 0.5 * (np.log(ss[ok]) - math.log(m - 1))
        log_pen = math.log(_t_quantile(float(gamma), int(m - 1))) + log_std - 0.5 * math.log(m)
        out[ok] = np.logaddexp(log_mean[ok], log_pen)
    return out


def ucb_log_mean_exp(log_samples, gamma: float) -> float:
    """``log( mean(e^x) + t_{1-gamma, m-1} * std_1(e^x) / sqrt(m) )`` in log space (``m >= 2``).

    ``std_1`` is the unbiased (ddof=1) sample std, ``t_{1-gamma, m-1}`` the Student-t quantile; returns
    the plain log-mean when the samples are all equal (zero spread).
    """
    x = np.asarray(log_samples, dtype=float).reshape(1, -1)
    if x.shape[1] < 2:
        raise PrivacyParameterError(
            "distances has a single pair: the Bayesian accountant estimates the privacy cost from "
            "samples and needs at least 2 gradient pairs (a batch of at least 3 gradients is advised)."
        )
    return float(_ucb_rows(x, gamma)[0])


class BayesianAccountant(Accountant):
    """Bayesian accountant (Triastcyn & Faltings 2020) for the Poisson-subsampled Gaussian mechanism.

    Parameters
    ----------
    orders : integer orders ``lambda >= 1`` to minimise over (default :data:`DEFAULT_ORDERS`).
    total_steps : ``T``, the Hoelder correction: an upper bound on the number of steps that will be
        accounted (a warning is raised and the estimate is no longer valid once it is exceeded).
    gamma : failure probability of each sample estimate (default ``1e-16``); charged to delta.

    ``step(noise_std=, sample_rate=, distances= | gradients=, num_steps=1)`` estimates
    ``c_hat_t(lambda)`` for every order from the gradient pairs (all ``B(B-1)/2`` pairs of the batch's
    per-example ``gradients``, or the pair ``distances`` given) and records it in ``history``.
    """

    name = "bdp"

    def __init__(
        self,
        orders: Sequence[int] = DEFAULT_ORDERS,
        total_steps: int = 1,
        gamma: float = DEFAULT_GAMMA,
    ) -> None:
        super().__init__()
        if len(list(orders)) == 0:
            raise PrivacyParameterError("orders is empty: give at least one integer order lambda >= 1.")
        self.orders = [
            check_positive_int(o, "orders", "Bayesian-accountant orders are integers lambda >= 1")
            for o in orders
        ]
        self.total_steps = check_positive_int(
            total_steps, "total_steps", "an upper bound on the number of steps (Hoelder correction)"
        )
        g = check_positive(gamma, "gamma", "the per-estimate failure probability, e.g. 1e-16")
        if g >= 0.5:
            raise PrivacyParameterError(
                f"gamma={gamma!r} is invalid: the estimator's failure probability must lie in (0, 0.5) "
                "(an upper confidence bound needs confidence above 1/2; e.g. gamma=1e-16)."
            )
        self.gamma = g

    # -- recording ------------------------------------------------------------------------------
    def step(self, *, noise_std, sample_rate, distances=None, gradients=None, num_steps: int = 1) -> float:
        """Record ``num_steps`` steps; returns the smallest per-step cost ``min_lambda c_hat_t(lambda)/lambda``."""
        k, q, s, d = pairwise_step_inputs(noise_std, sample_rate, distances, gradients, num_steps)
        if d.size < 2:
            raise PrivacyParameterError(
                "distances has a single pair: the Bayesian accountant estimates the privacy cost from "
                "samples and needs at least 2 gradient pairs (a batch of at least 3 gradients)."
            )
        if self.steps + k > self.total_steps:
            warnings.warn(
                f"BayesianAccountant: {self.steps + k} steps accounted but total_steps={self.total_steps}: "
                "the Hoelder correction is too small and privacy may be underestimated; create the "
                "accountant with total_steps >= the number of steps.",
                RuntimeWarning,
                stacklevel=2,
            )
        T = self.total_steps
        all_c = _sgm_log_costs(self.orders, d, s, q)
        costs = list(_ucb_rows(T * k * all_c, self.gamma) / T)
        # log_cost: the total cost of these num_steps steps (already multiplied by num_steps), per order
        self.history.append({**step_summary(k, q, s, d), "log_cost": [float(c) for c in costs]})
        return float(min(c / lam for c, lam in zip(costs, self.orders)))

    # -- reading ----------------------------------------------------------------------------------
    def total_cost(self) -> np.ndarray:
        """``sum_t c_hat_t(lambda)`` per order."""
        tot = np.zeros(len(self.orders))
        for h in self.history:
            tot += np.asarray(h["log_cost"], dtype=float)
        return tot

    def confidence_charge(self) -> float:
        """``1 - (1 - gamma)^n`` for the ``n`` estimates made so far (added to delta)."""
        n = len(self.history)
        return float(-math.expm1(n * math.log1p(-self.gamma)))

    def get_epsilon(self, delta: float) -> float:
        """``min_lambda (sum_t c_hat_t(lambda) - log(delta - gamma_tot)) / lambda``."""
        dl = check_delta(delta)
        eff = dl - self.confidence_charge()
        if eff <= 0:
            raise PrivacyParameterError(
                f"delta={delta!r} is invalid: it must exceed the estimator's failure charge "
                f"{self.confidence_charge():.3g} (lower gamma or raise delta)."
            )
        if not self.history:
            return 0.0
        lam = np.asarray(self.orders, dtype=float)
        eps = (self.total_cost() - math.log(eff)) / lam
        return float(max(0.0, np.min(eps)))

    def get_delta(self, epsilon: float) -> float:
        """``min_lambda exp(sum_t c_hat_t(lambda) - lambda eps) + gamma_tot``."""
        e = check_positive(epsilon, "epsilon", "the target budget")
        lam = np.asarray(self.orders, dtype=float)
        logd = float(np.min(self.total_cost() - lam * e))
        return float(min(1.0, math.exp(min(logd, 0.0)) + self.confidence_charge()))

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        state = super().state_dict()
        state.update({"orders": list(self.orders), "total_steps": self.total_steps, "gamma": self.gamma})
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.orders = [int(o) for o in state.get("orders", self.orders)]
        self.total_steps = int(state.get("total_steps", self.total_steps))
        self.gamma = float(state.get("gamma", self.gamma))
        for h in self.history:
            if len(h.get("log_cost", [])) != len(self.orders):
                raise ValueError("accountant state is inconsistent: one cost per order expected per step.")

    def __repr__(self) -> str:
        return (
            f"BayesianAccountant(orders={self.orders}, total_steps={self.total_steps}, "
            f"gamma={self.gamma:g}, steps={self.steps})"
        )
