"""Accountants of the subsampled Gaussian mechanism.

One interface (:class:`dpgen.privacy.base.Accountant`): ``step(noise_multiplier=, sample_rate=,
num_steps=1)``, ``get_epsilon(delta)``, ``state_dict()`` / ``load_state_dict()``.

``noise_multiplier`` is the noise std divided by the L2 sensitivity of the mechanism
(for DP-SWD: sigma / sqrt(w(k, delta)); for DP-Sinkhorn: std / (2 C) = sigma).

* :class:`RDPAccountant` — autodp's analytical RDP accountant (Wang, Balle & Kasiviswanathan,
  AISTATS 2019). ``sampling="without_replacement"`` is the fixed-size batch amplification the
  DP-SWD authors used; ``sampling="poisson"`` is the Poisson amplification (Zhu & Wang 2019)
  that DP-Sinkhorn uses. RDP -> DP with the classic conversion eps = rdp(a) + log(1/delta)/(a-1)
  (Mironov 2017, Prop. 3), optimised over the order.
* :class:`OpacusRDPAccountant` — opacus' RDP accountant (Mironov, Talwar & Zhang 2019), Poisson
  only, with opacus' improved RDP -> DP conversion (Balle et al. 2020). An independent second
  implementation for cross-checks.
* :class:`OpacusPRVAccountant` — opacus' privacy-random-variable accountant (Gopi et al. 2021),
  Poisson only: a numerically tight third opinion.
* :class:`MomentsAccountant` — the moments accountant of Abadi et al. 2016 written from the
  paper: the log moment generating function of the privacy loss of the Poisson-subsampled
  Gaussian at integer orders lambda, by the exact binomial expansion, composed over steps, and
  the tail bound delta = min_lambda exp(alpha(lambda) - lambda * eps).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Dict, Tuple

import numpy as np
from scipy.special import gammaln, logsumexp

from dpgen.privacy.base import Accountant
from dpgen.privacy.bayesian import BayesianAccountant
from dpgen.privacy.validation import (
    PrivacyParameterError,
    check_delta,
    check_nonneg_int,
    check_positive,
    check_sample_rate,
)
from dpgen.privacy.wdp import WassersteinAccountant
from dpgen.utils.registry import Registry

SAMPLING_SCHEMES = ("without_replacement", "poisson")

#: ``privacy.accountant=auto`` (the default): the tightest valid accountant of each sampling scheme. Poisson
#: sampling (add/remove one): dp-accounting's PLD (numerically exact up to its pessimistic discretisation; at
#: DP-Sinkhorn's headline settings 8.35 where autodp's RDP bound says 10.0). Sampling without replacement
#: (replace one): autodp's RDP bound of Wang et al. 2019, since dp-accounting's PLD accountant does not analyse
#: it (dp-accounting 0.6: ``PLDAccountant`` has no rule for ``SampledWithoutReplacementDpEvent``; only its RDP
#: accountant has, and autodp is that bound's reference implementation)
AUTO_ACCOUNTANT = {"poisson": "pld", "without_replacement": "rdp"}


def resolve_accountant(name: str, sampling: str) -> str:
    """The accountant ``name`` stands for under ``sampling``: ``auto`` is :data:`AUTO_ACCOUNTANT`'s choice,
    any other name itself."""
    if name == "auto":
        return AUTO_ACCOUNTANT[check_sampling(sampling)]
    return name


def check_sampling(sampling: str) -> str:
    if sampling not in SAMPLING_SCHEMES:
        raise PrivacyParameterError(
            f"sampling={sampling!r} is unknown: choose one of {', '.join(SAMPLING_SCHEMES)} "
            "(without_replacement = fixed-size batches, as DP-SWD; poisson = DP-Sinkhorn / DP-SGD)."
        )
    return sampling


class _SubsampledGaussianAccountant(Accountant):
    """Common bookkeeping: a history of (noise_multiplier, sample_rate, num_steps) groups."""

    #: by default a :class:`dpgen.privacy.ledger.Ledger` kept by a subsampled-Gaussian accountant replays its
    #: history into a fresh accountant of the class (:class:`dpgen.privacy.ledger_accountants.ReplayLedgerAccountant`)
    ledger_family = "ReplayLedgerAccountant"

    def step(self, *, noise_multiplier: float, sample_rate: float, num_steps: int = 1) -> None:
        z = check_positive(noise_multiplier, "noise_multiplier", "the noise std over the L2 sensitivity")
        q = check_sample_rate(sample_rate)
        n = check_nonneg_int(num_steps, "num_steps")
        if n == 0:
            return
        if self.history and self.history[-1]["noise_multiplier"] == z and self.history[-1]["sample_rate"] == q:
            self.history[-1]["num_steps"] += n
        else:
            self.history.append({"noise_multiplier": z, "sample_rate": q, "num_steps": n})

    def _groups(self) -> Dict[Tuple[float, float], int]:
        groups: Dict[Tuple[float, float], int] = {}
        for h in self.history:
            key = (float(h["noise_multiplier"]), float(h["sample_rate"]))
            groups[key] = groups.get(key, 0) + int(h["num_steps"])
        return groups


# --------------------------------------------------------------------------------------------
# autodp
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def autodp_epsilon(groups: Tuple[Tuple[float, float, int], ...], delta: float, sampling: str) -> float:
    from autodp import rdp_acct, rdp_bank

    acct = rdp_acct.anaRDPacct()
    for z, q, n in groups:
        func = lambda x, z=z: rdp_bank.RDP_gaussian({"sigma": z}, x)  # noqa: E731
        if q >= 1.0:
            acct.compose_mechanism(func, coeff=n)
        elif sampling == "poisson":
            acct.compose_poisson_subsampled_mechanisms(func, q, coeff=n)
        else:
            acct.compose_subsampled_mechanism(func, q, coeff=n)
    return float(acct.get_eps(delta))


class RDPAccountant(_SubsampledGaussianAccountant):
    """autodp's RDP accountant for the subsampled Gaussian mechanism.

    >>> acc = RDPAccountant(sampling="poisson")
    >>> acc.step(noise_multiplier=1.1, sample_rate=50 / 60000, num_steps=1000)
    >>> round(acc.get_epsilon(1e-5), 3) > 0
    True
    """

    name = "rdp"
    label = "autodp RDP"
    ledger_family = "RDPLedgerAccountant"

    def __init__(self, sampling: str = "without_replacement") -> None:
        super().__init__()
        self.sampling = check_sampling(sampling)

    def get_epsilon(self, delta: float) -> float:
        delta = check_delta(delta)
        groups = tuple(sorted((z, q, n) for (z, q), n in self._groups().items()))
        if not groups:
            return 0.0
        return autodp_epsilon(groups, delta, self.sampling)

    def state_dict(self):
        s = super().state_dict()
        s["sampling"] = self.sampling
        return s

    def load_state_dict(self, state) -> None:
        super().load_state_dict(state)
        if state.get("sampling", self.sampling) != self.sampling:
            raise ValueError(
                f"accountant state uses sampling={state.get('sampling')!r} but this accountant uses "
                f"{self.sampling!r}: resume with the sampling scheme the run was started with."
            )


# --------------------------------------------------------------------------------------------
# opacus
# --------------------------------------------------------------------------------------------


class OpacusRDPAccountant(_SubsampledGaussianAccountant):
    """opacus' RDP accountant (Poisson sampling), with opacus' RDP -> DP conversion."""

    name = "opacus_rdp"
    label = "opacus RDP"
    sampling = "poisson"

    def get_epsilon(self, delta: float) -> float:
        from opacus.accountants.analysis import rdp as opacus_rdp

        delta = check_delta(delta)
        groups = self._groups()
        if not groups:
            return 0.0
        orders = np.asarray(OPACUS_ORDERS)
        total = np.zeros_like(orders)
        for (z, q), n in groups.items():
            total += n * _opacus_rdp_one_step(z, q)  # RDP composes additively over steps
        eps, _ = opacus_rdp.get_privacy_spent(orders=orders, rdp=total, delta=delta)
        return float(eps)


#: RDP orders for the opacus accountant: opacus' own default grid extended to 256
OPACUS_ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [80, 96, 128, 192, 256])


@lru_cache(maxsize=1024)
def _opacus_rdp_one_step(z: float, q: float) -> np.ndarray:
    from opacus.accountants.analysis import rdp as opacus_rdp

    return np.asarray(opacus_rdp.compute_rdp(q=q, noise_multiplier=z, steps=1, orders=list(OPACUS_ORDERS)))


class OpacusPRVAccountant(_SubsampledGaussianAccountant):
    """opacus' PRV accountant (Poisson sampling): an upper estimate of epsilon within ``eps_error``."""

    name = "opacus_prv"
    label = "opacus PRV"
    exact = True
    sampling = "poisson"

    def __init__(self, eps_error: float = 0.1) -> None:
        super().__init__()
        self.eps_error = check_positive(eps_error, "eps_error")

    def get_epsilon(self, delta: float) -> float:
        from opacus.accountants import PRVAccountant

        delta = check_delta(delta)
        if not self.history:
            return 0.0
        acc = PRVAccountant()
        for h in self.history:  # opacus' public API; it merges repeated identical steps into one entry
            for _ in range(int(h["num_steps"])):
                acc.step(noise_multiplier=h["noise_multiplier"], sample_rate=h["sample_rate"])
        return float(acc.get_epsilon(delta=delta, eps_error=self.eps_error))


# --------------------------------------------------------------------------------------------
# Google's dp-accounting: the privacy loss distribution (PLD) accountant
# --------------------------------------------------------------------------------------------


#: dp-accounting's default grid of privacy-loss values, the one every ledger and report uses
PLD_INTERVAL = 1e-4
#: a 10x coarser grid (about 10x faster up to ~1e5 steps, epsilon within ~1e-3 of the default grid's at 5,000
#: steps, ~1e-2 at 60,000): only to guide searches (calibration, steps in budget), whose answer the default grid
#: then confirms. Its rounding adds up over the steps: beyond PLD_GUIDE_MAX_STEPS it is both far off (1.3 at 3e6
#: steps) and slower than the default grid, so the searches go without it there
PLD_COARSE_INTERVAL = 1e-3
PLD_GUIDE_MAX_STEPS = 100_000


@lru_cache(maxsize=4096)
def pld_epsilon(groups: Tuple[Tuple[float, float, int], ...], delta: float, interval: float = PLD_INTERVAL) -> float:
    """Epsilon of Poisson-subsampled Gaussian groups (z, q, steps) under dp-accounting's PLD
    accountant (add/remove-one neighbours; Koskela et al. / Doroshenko et al. 2022): the tightest
    of dpgen's accountants, numerically exact up to its discretisation (a pessimistic estimate).
    ``interval``: the accountant's value_discretization_interval (dp-accounting's default 1e-4)."""
    try:
        import dp_accounting
        from dp_accounting.pld.pld_privacy_accountant import PLDAccountant as _PLD
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise PrivacyParameterError("accountant=pld needs dp-accounting: pip install dp-accounting") from e
    acc = _PLD(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
               value_discretization_interval=interval)
    for z, q, n in groups:
        event = dp_accounting.GaussianDpEvent(z)
        if q < 1.0:
            event = dp_accounting.PoissonSampledDpEvent(q, event)
        acc.compose(dp_accounting.SelfComposedDpEvent(event, int(n)))
    return float(acc.get_epsilon(delta))


class PLDAccountant(_SubsampledGaussianAccountant):
    """dp-accounting's PLD accountant for the Poisson-subsampled Gaussian mechanism (``pld``)."""

    name = "pld"
    label = "dp-accounting PLD"
    exact = True
    ledger_family = "PLDLedgerAccountant"
    sampling = "poisson"

    def get_epsilon(self, delta: float) -> float:
        delta = check_delta(delta)
        groups = tuple(sorted((z, q, n) for (z, q), n in self._groups().items()))
        return pld_epsilon(groups, delta) if groups else 0.0


# --------------------------------------------------------------------------------------------
# Moments accountant (Abadi et al. 2016), written from the paper
# --------------------------------------------------------------------------------------------


def log_moment_poisson_gaussian(lam: int, noise_multiplier: float, sample_rate: float) -> float:
    """alpha(lambda) of Abadi et al. for one step of the Poisson-subsampled Gaussian mechanism.

    alpha(lambda) = log E_{x ~ mu}[(mu(x)/mu0(x))^lambda] with mu = (1-q) N(0, s^2) + q N(1, s^2),
    mu0 = N(0, s^2). Expanding (1 - q + q r(x))^lambda binomially, with
    E_mu0[r^j] = exp(j (j-1) / (2 s^2)), gives for integer lambda the exact value
    log sum_{k=0}^{lambda+1} C(lambda+1, k) (1-q)^{lambda+1-k} q^k exp(k (k-1) / (2 s^2))
    (the moment of order lambda+1 under mu0 of mu/mu0, which bounds both directions).
    """
    a = int(lam) + 1
    q = float(sample_rate)
    s2 = float(noise_multiplier) ** 2
    if q >= 1.0:
        return lam * (lam + 1) / (2 * s2)
    k = np.arange(a + 1)
    log_binom = gammaln(a + 1) - gammaln(k + 1) - gammaln(a - k + 1)
    terms = log_binom + (a - k) * math.log1p(-q) + k * math.log(q) + k * (k - 1) / (2 * s2)
    return float(logsumexp(terms))


@lru_cache(maxsize=1024)
def _log_moments_one_step(z: float, q: float, max_lambda: int) -> np.ndarray:
    return np.array([log_moment_poisson_gaussian(l, z, q) for l in range(1, max_lambda + 1)])


class MomentsAccountant(_SubsampledGaussianAccountant):
    """Abadi et al. 2016 moments accountant for the Poisson-subsampled Gaussian mechanism.

    Log moments at integer orders ``lambda in 1..max_lambda`` add up over steps (Theorem 2.1 of
    Abadi et al.), and epsilon at delta is min_lambda (alpha_total(lambda) + log(1/delta)) / lambda.
    """

    name = "moments"
    label = "moments accountant (Abadi et al.)"
    sampling = "poisson"

    def __init__(self, max_lambda: int = 256) -> None:
        super().__init__()
        self.max_lambda = int(max_lambda)

    def log_moments(self) -> np.ndarray:
        total = np.zeros(self.max_lambda)
        for (z, q), n in self._groups().items():
            total += n * _log_moments_one_step(z, q, self.max_lambda)  # log moments add over steps
        return total

    def get_epsilon(self, delta: float) -> float:
        delta = check_delta(delta)
        if not self.history:
            return 0.0
        lams = np.arange(1, self.max_lambda + 1)
        alpha = self.log_moments()
        return float(np.min((alpha + math.log(1.0 / delta)) / lams))


# --------------------------------------------------------------------------------------------
# Sampling without replacement: Wang, Balle & Kasiviswanathan 2019, Theorem 9, written from the paper
# --------------------------------------------------------------------------------------------


def rdp_subsampled_gaussian_wor(alpha: int, noise_multiplier: float, sample_rate: float) -> float:
    """RDP at integer order ``alpha`` of the Gaussian mechanism on a subsample without replacement.

    Theorem 9 of Wang et al. (AISTATS 2019) for a base mechanism with RDP eps(j) = j / (2 z^2)
    (so eps(inf) = inf and every min{2, (e^eps(inf) - 1)^j} is 2):

        eps'(alpha) <= 1/(alpha-1) log(1 + g^2 C(alpha,2) min{4 (e^eps(2) - 1), 2 e^eps(2)}
                                         + sum_{j=3}^{alpha} g^j C(alpha,j) e^{(j-1) eps(j)} 2)

    with g the sampling ratio. An independent second implementation beside autodp's.
    """
    a = int(alpha)
    if a < 2:
        raise PrivacyParameterError(f"alpha={alpha!r} is invalid: integer orders >= 2 only.")
    g = float(sample_rate)
    z2 = float(noise_multiplier) ** 2
    if g >= 1.0:
        return a / (2 * z2)
    eps = lambda j: j / (2 * z2)  # noqa: E731
    log_terms = [0.0]
    e2 = eps(2)
    log_min2 = min(math.log(4.0) + math.log(math.expm1(e2)), math.log(2.0) + e2)
    log_terms.append(2 * math.log(g) + math.log(a * (a - 1) / 2) + log_min2)
    if a >= 3:
        j = np.arange(3, a + 1)
        log_binom = gammaln(a + 1) - gammaln(j + 1) - gammaln(a - j + 1)
        log_terms.extend(j * math.log(g) + log_binom + (j - 1) * j / (2 * z2) + math.log(2.0))
    return float(logsumexp(log_terms)) / (a - 1)


@lru_cache(maxsize=1024)
def _wor_rdp_one_step(z: float, q: float, max_alpha: int) -> np.ndarray:
    """Theorem 9 at every integer order 2..max_alpha at once (same formula, vectorised)."""
    a = np.arange(2, max_alpha + 1, dtype=float)[:, None]
    z2 = float(z) ** 2
    if q >= 1.0:
        return a[:, 0] / (2 * z2)
    j = np.arange(3, max_alpha + 1, dtype=float)[None, :]
    with np.errstate(invalid="ignore"):
        log_binom = gammaln(a + 1) - gammaln(j + 1) - gammaln(np.maximum(a - j, 0) + 1)
    higher = np.where(j <= a, j * math.log(q) + log_binom + (j - 1) * j / (2 * z2) + math.log(2.0), -np.inf)
    e2 = 1.0 / z2
    log_min2 = min(math.log(4.0) + math.log(math.expm1(e2)), math.log(2.0) + e2)
    second = 2 * math.log(q) + np.log(a * (a - 1) / 2) + log_min2
    terms = np.concatenate([np.zeros_like(a), second, higher], axis=1)
    return logsumexp(terms, axis=1) / (a[:, 0] - 1)


class WangWORAccountant(_SubsampledGaussianAccountant):
    """Sampling without replacement, Theorem 9 of Wang et al. 2019 at integer orders 2..max_alpha,
    classic RDP -> DP conversion. dpgen's own code: the cross-check of autodp for DP-SWD."""

    name = "wang_wor"
    sampling = "without_replacement"
    offered = False  # the surrogate and cross-check of autodp for sampling without replacement

    def __init__(self, max_alpha: int = 256) -> None:
        super().__init__()
        self.max_alpha = int(max_alpha)

    def get_epsilon(self, delta: float) -> float:
        delta = check_delta(delta)
        if not self.history:
            return 0.0
        alphas = np.arange(2, self.max_alpha + 1)
        total = np.zeros(len(alphas))
        for (z, q), n in self._groups().items():
            total += n * _wor_rdp_one_step(z, q, self.max_alpha)
        return float(np.min(total + math.log(1.0 / delta) / (alphas - 1)))


#: ``accountant=`` -> the class (the Bayesian and Wasserstein accountants live in their own modules)
ACCOUNTANTS = Registry("accountant", key="accountant", error=PrivacyParameterError)
for _name, _cls in {"wang_wor": WangWORAccountant, "rdp": RDPAccountant, "opacus_rdp": OpacusRDPAccountant,
                    "opacus_prv": OpacusPRVAccountant, "moments": MomentsAccountant, "pld": PLDAccountant,
                    "bdp": BayesianAccountant, "wdp": WassersteinAccountant}.items():
    ACCOUNTANTS.register(_name, _cls)


def ledger_accountant_names() -> Tuple[str, ...]:
    """The accountants a user may name as ``privacy.accountant`` or ``privacy.cross_check``, in registry order:
    those that keep a ledger and are offered (rdp, opacus_rdp, opacus_prv, moments, pld)."""
    return tuple(name for name, cls in ACCOUNTANTS.items() if cls.ledger_family and cls.offered)


def make_accountant(name: str, **kwargs) -> Accountant:
    """Build an accountant by name: rdp, opacus_rdp, opacus_prv, moments, pld, wang_wor, bdp, wdp."""
    return ACCOUNTANTS.build(name, **kwargs)


def epsilon_for(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                sampling: str = "without_replacement", accountant: str = "rdp") -> float:
    """Epsilon after ``steps`` identical steps of the subsampled Gaussian mechanism (``accountant="auto"``:
    :func:`resolve_accountant`)."""
    sampling = check_sampling(sampling)
    accountant = resolve_accountant(accountant, sampling)
    if accountant == "rdp":
        acc: Accountant = RDPAccountant(sampling=sampling)
    else:
        acc = make_accountant(accountant)
        if acc.sampling not in (None, sampling):
            raise PrivacyParameterError(
                f"accountant={accountant!r} supports sampling={acc.sampling!r} only, not {sampling!r}: "
                "use accountant=rdp for sampling without replacement."
            )
    acc.step(noise_multiplier=noise_multiplier, sample_rate=sample_rate, num_steps=steps)
    return acc.get_epsilon(delta)
