"""How each family of accountants keeps a :class:`dpgen.privacy.ledger.Ledger`.

The ledger asks one object, found by the one lookup of its accountant's name in the accountant registry
(:func:`ledger_accountant`: the class that the accountant's ``ledger_family`` names),
and never branches on that name. Every family answers the same small interface:

* ``new_accountant(sample_rate)``: the accountant that records the ledger's history;
* ``epsilon(groups, delta, surrogate)``: epsilon of a history of ``(z, q, steps)`` groups; ``surrogate=True`` asks
  for a fast accountant of (nearly) the same curve, used only to guide searches that ``epsilon`` then confirms;
* ``noise(ledger, steps, z0)``: the smallest noise multiplier keeping the ledger's releases before training plus
  ``steps`` steps within its budget;
* ``most_steps(ledger, z)``: the most steps at noise ``z`` within the budget, the releases before training
  included (the ledger has checked that one step fits);
* ``cross_checks()``: the independent accountants printed beside the ledger's (``epsilon_cross_check``), and
  ``beside()``, the sentence that says so; ``text()``: what the report calls the ledger's accountant.

The families:

* :class:`ReplayLedgerAccountant` (opacus_rdp, opacus_prv, moments, wang_wor): epsilon by replaying the groups into
  a fresh accountant of that name; the noise by :func:`dpgen.privacy.calibration.calibrate_noise_multiplier` and,
  with releases before training, bisection on log z; the steps by growth and bisection.
* :class:`RDPLedgerAccountant` (rdp): autodp's RDP bound (Wang et al. 2019; Zhu & Wang 2019), with the searches
  of the replay family guided by a numpy accountant of the same RDP curve (``SURROGATES``: wang_wor, moments).
* :class:`PLDLedgerAccountant` (pld): dp-accounting's PLD, whose searches start from the RDP ledger's answer (an
  RDP bound spends more, so its noise and its steps fit under PLD too) and are guided by PLD on a 10x coarser grid.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from dpgen.privacy.accountants import (ACCOUNTANTS, PLD_COARSE_INTERVAL, PLD_GUIDE_MAX_STEPS, PLD_INTERVAL,
                                       OpacusRDPAccountant, RDPAccountant, WangWORAccountant, autodp_epsilon,
                                       make_accountant, pld_epsilon, resolve_accountant)
from dpgen.privacy.base import Accountant
from dpgen.privacy.calibration import SURROGATES, calibrate_noise_multiplier, largest_steps, solve_noise
from dpgen.privacy.local import geometric_bisect
from dpgen.privacy.validation import PrivacyParameterError

#: dpgen.privacy.ledger.Ledger in annotations: that module imports this one, so it is not imported here
Ledger = Any

Groups = Sequence[Tuple[float, float, int]]


def _largest_fitting(fits: Callable[[int], bool], lo: int, hi: int, cap: int = 10**9) -> Optional[int]:
    """The largest integer t >= lo with ``fits(t)`` (monotone; ``fits(lo)`` holds): ``hi`` grown by 4x until
    it does not fit, then bisection. None when even ``cap`` fits."""
    while fits(hi):
        lo, hi = hi, hi * 4
        if hi > cap:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def replay_epsilon(name: str, groups: Groups, delta: float) -> float:
    """Epsilon of ``groups`` under a fresh accountant ``name``, stepped through them in their order."""
    acc = make_accountant(name)
    for z, q, n in groups:
        acc.step(noise_multiplier=z, sample_rate=q, num_steps=n)
    return acc.get_epsilon(delta)


class LedgerAccountant:
    """What every family shares: the accountant it builds and the cross-checks printed beside it (see the module
    doc for the interface)."""

    def __init__(self, name: str, sampling: str) -> None:
        #: the accountant's name (``auto`` resolved) and the ledger's sampling scheme
        self.name = name
        self.sampling = sampling

    def new_accountant(self, sample_rate: float) -> Accountant:
        acc = make_accountant(self.name)
        # a full-batch ledger (sample rate 1: a one-shot release) samples nothing, and one Gaussian on the whole
        # set has the same privacy loss distribution under add/remove and replace-one (the relation sets only
        # the sensitivity, which the method supplies): a Poisson-only accountant analyses it as well
        if acc.sampling not in (None, self.sampling) and sample_rate < 1.0:
            raise ValueError(f"privacy.accountant={self.name} analyses Poisson sampling only; this method samples "
                             f"{self.sampling}: use privacy.accountant=auto (autodp RDP here) or rdp")
        return acc

    def epsilon(self, groups: Groups, delta: float, surrogate: bool = False) -> float:
        raise NotImplementedError

    def noise(self, ledger: "Ledger", steps: int, z0: Optional[float]) -> float:
        raise NotImplementedError

    def most_steps(self, ledger: "Ledger", z: float) -> int:
        raise NotImplementedError

    def _independent(self) -> Tuple[str, Accountant]:
        """The independent accountant of the sampling scheme: opacus' RDP for Poisson, dpgen's own Theorem 9
        accountant for sampling without replacement."""
        if self.sampling == "poisson":
            return "opacus_rdp", OpacusRDPAccountant()
        return "wang_wor", WangWORAccountant()

    def _independent_text(self) -> str:
        return "opacus RDP" if self.sampling == "poisson" else "dpgen's own Theorem 9 accountant (wang_wor)"

    def cross_checks(self) -> Dict[str, Accountant]:
        """Fresh accountants that replay the ledger's history beside it: the sampling's independent accountant and
        autodp's RDP (this family does not keep the ledger with it)."""
        name, acc = self._independent()
        return {name: acc, "autodp_rdp": RDPAccountant(sampling=self.sampling)}

    def beside(self) -> str:
        return ("autodp RDP printed beside it as the cross-check, with " + self._independent_text()
                + " (epsilon_cross_check)")

    def text(self) -> str:
        return ACCOUNTANTS.lookup(self.name).label or self.name


class ReplayLedgerAccountant(LedgerAccountant):
    """opacus_rdp, opacus_prv, moments, wang_wor: the ledger replays its history into a fresh accountant."""

    def epsilon(self, groups: Groups, delta: float, surrogate: bool = False) -> float:
        return replay_epsilon(SURROGATES.get(self.sampling, self.name) if surrogate else self.name, groups, delta)

    def _surrogate_root(self, ledger: "Ledger", too_small: Callable[[float], bool], lo: float) -> Optional[float]:
        """The surrogate's smallest z with ``too_small(z)`` False (None: this family has no surrogate)."""
        return None

    def _surrogate_steps(self, ledger: "Ledger", z: float) -> Optional[int]:
        """The surrogate's most steps in budget at noise ``z`` (None: this family has no surrogate)."""
        return None

    def noise(self, ledger: "Ledger", steps: int, z0: Optional[float]) -> float:
        budget = ledger.epsilon_budget
        z = calibrate_noise_multiplier(budget, ledger.delta, ledger.sample_rate, steps, self.sampling,
                                       accountant=self.name, rel_tol=ledger.rel_tol, z0=z0)
        if ledger.prefix:  # the prefix spends part of the budget: more noise, found by bisection on log z
            # guided by the surrogate accountant (the same RDP curve in numpy, 15x faster than autodp):
            # its root, widened by rel_tol each side, usually brackets autodp's in two calls
            guess = self._surrogate_root(ledger, lambda x: ledger.epsilon_of(x, steps, surrogate=True) > budget, z)
            lo, hi = (guess / (1 + ledger.rel_tol), guess * (1 + ledger.rel_tol)) if guess else (z, z * 1.05)
            if ledger.epsilon_of(lo, steps) <= budget:
                lo, hi = z, lo  # the guess was too high: the prefix-free z is a lower end
            while ledger.epsilon_of(hi, steps) > budget:
                lo, hi = hi, hi * 1.5
            while hi / lo > 1 + ledger.rel_tol:  # epsilon_of(hi) <= budget always
                mid = math.sqrt(lo * hi)
                if ledger.epsilon_of(mid, steps) > budget:
                    lo = mid
                else:
                    hi = mid
            z = hi
        return float(z)

    def most_steps(self, ledger: "Ledger", z: float) -> int:
        fits = lambda t: ledger.epsilon_of(z, t) <= ledger.epsilon_budget  # noqa: E731
        lo, hi = 1, 1024
        guess = self._surrogate_steps(ledger, z)
        if guess is not None:  # the ledger's accountant confirms the surrogate's answer, usually in two calls
            lo, hi = (guess, guess + 1) if fits(guess) else (1, guess)
        found = _largest_fitting(fits, lo, hi)
        return 10**9 if found is None else found


class RDPLedgerAccountant(ReplayLedgerAccountant):
    """rdp: autodp's RDP bound, its searches guided by the numpy accountant of the same RDP curve (``SURROGATES``;
    it agrees with autodp to ~1e-8 relative); cross-checked by the sampling's independent accountant only."""

    def new_accountant(self, sample_rate: float) -> Accountant:
        return RDPAccountant(sampling=self.sampling)

    def epsilon(self, groups: Groups, delta: float, surrogate: bool = False) -> float:
        if surrogate:
            return super().epsilon(groups, delta, surrogate=True)
        return autodp_epsilon(tuple(sorted(groups)), delta, self.sampling)

    def _surrogate_root(self, ledger: "Ledger", too_small: Callable[[float], bool], lo: float) -> Optional[float]:
        if self.sampling not in SURROGATES:
            return None
        hi = lo * 1.05
        for _ in range(40):  # the surrogate's RDP orders floor its epsilon: it may never reach the budget
            if not too_small(hi):
                return geometric_bisect(too_small, lo, hi, rel_tol=ledger.rel_tol / 4)
            lo, hi = hi, hi * 2
        return None

    def _surrogate_steps(self, ledger: "Ledger", z: float) -> Optional[int]:
        if self.sampling not in SURROGATES:
            return None
        fits = lambda t: ledger.epsilon_of(z, t, surrogate=True) <= ledger.epsilon_budget  # noqa: E731
        return _largest_fitting(fits, 1, 1024) if fits(1) else None

    def cross_checks(self) -> Dict[str, Accountant]:
        name, acc = self._independent()
        return {name: acc}

    def beside(self) -> str:
        return self._independent_text() + " printed beside it as the cross-check (epsilon_cross_check)"


class PLDLedgerAccountant(LedgerAccountant):
    """pld: dp-accounting's PLD on its default grid (``PLD_INTERVAL``); the surrogate is PLD on a 10x coarser grid
    (``PLD_COARSE_INTERVAL``)."""

    def epsilon(self, groups: Groups, delta: float, surrogate: bool = False) -> float:
        return pld_epsilon(tuple(sorted(groups)), delta, PLD_COARSE_INTERVAL if surrogate else PLD_INTERVAL)

    def noise(self, ledger: "Ledger", steps: int, z0: Optional[float]) -> float:
        # PLD's epsilon is below every RDP bound's: the RDP ledger's noise (same prefix) spends at most the
        # budget under PLD, an upper end for the search to PLD_EPSILON_TOL in epsilon (a few PLD calls)
        try:
            z_hi = ledger.under("rdp").calibrate(steps, z0)
        except ValueError:  # no RDP order reaches the budget: PLD may still; start from z0 or 1
            z_hi = 1.0 if z0 is None else float(z0)
        guide = (lambda x: ledger.epsilon_of(x, steps, surrogate=True)) if steps <= PLD_GUIDE_MAX_STEPS else None
        return float(solve_noise(lambda x: ledger.epsilon_of(x, steps), ledger.epsilon_budget, z_hi, guide=guide))

    def most_steps(self, ledger: "Ledger", z: float) -> int:
        # from the RDP ledger's answer (it spends more: its steps fit)
        rdp = ledger.under("rdp")
        rdp.use_noise(z)
        floor = rdp.max_steps() or 1
        guide = (lambda t: ledger.epsilon_of(z, t, surrogate=True)) if floor <= PLD_GUIDE_MAX_STEPS // 4 else None
        return largest_steps(lambda t: ledger.epsilon_of(z, t), ledger.epsilon_budget, max(1, floor), guide=guide)


#: the families by the name an accountant class gives as its ``ledger_family``
FAMILIES = {c.__name__: c for c in (ReplayLedgerAccountant, RDPLedgerAccountant, PLDLedgerAccountant)}


def ledger_accountant(name: str, sampling: str):
    """What keeps a :class:`dpgen.privacy.ledger.Ledger` of ``sampling`` under accountant ``name`` (``auto``:
    :func:`resolve_accountant`): an object of the class the accountant's ``ledger_family`` names here
    (:data:`FAMILIES`), found by the one lookup of ``name`` in the accountant registry."""
    name = resolve_accountant(name, sampling)
    family = ACCOUNTANTS.lookup(name).ledger_family
    if family is None:
        raise PrivacyParameterError(
            f"privacy.accountant={name} accounts per-step privacy-loss statistics, not the subsampled Gaussian "
            "mechanism a ledger holds: use privacy.accountant=auto (or rdp, pld, opacus_rdp, opacus_prv, moments)")
    return FAMILIES[family](name, sampling)


__all__ = ["FAMILIES", "LedgerAccountant", "PLDLedgerAccountant", "RDPLedgerAccountant", "ReplayLedgerAccountant",
           "ledger_accountant", "replay_epsilon"]
