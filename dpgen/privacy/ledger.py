"""One privacy ledger for the subsampled-Gaussian methods: calibrate -> budget -> account -> report.

A run composes (1) releases made once before training on the whole private set (the DP mean of
DP-SWD's ``center=dp_mean``: a Gaussian mechanism at sample rate 1), then (2) one subsampled
Gaussian mechanism per training step (noise multiplier z, sample rate q, ``sampling`` Poisson or
without replacement). :class:`Ledger` holds that composition against an (epsilon, delta) budget:

* ``calibrate(steps)``: the smallest z (to ``rel_tol``) such that the prefix plus ``steps`` steps
  stay within the budget; ``use_noise(z)`` fixes z instead;
* ``max_steps(requested)``: the most steps the budget allows with that z (None when ``requested``
  steps already fit: no search);
* ``release_prefix()`` / ``step()``: record what ran; ``epsilon()``: what was spent (under the ledger's
  accountant: ``privacy.accountant``, whose default ``auto`` is dp-accounting's PLD for Poisson sampling and
  autodp's RDP bound for sampling without replacement, :data:`dpgen.privacy.accountants.AUTO_ACCOUNTANT`);
  the releases before training are counted as releases (``prefix_releases``), never by their sample
  rate, so ``private_steps()`` is the number of per-step mechanism runs for every q, full batch
  (q = 1) included;
* ``steps_left(wanted)``: how many more steps the budget allows after what the ledger already
  holds (its whole history: a resumed run, a run that carried an earlier attempt's ledger);
* ``cross_check()``: the same history under an independent accountant (opacus' RDP for Poisson,
  dpgen's own Theorem 9 accountant for sampling without replacement), and autodp's RDP when another
  accountant (PLD) keeps the ledger;
* ``report()``: the fields every private method's report states; ``state_dict()`` for checkpoints.

DP-SWD (generation and domain adaptation), DP-Sinkhorn and its variants, and DP-DANN keep their
ledger here; the methods add what is theirs (the sensitivity, the mechanism's description).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Dict, Optional, Sequence

from dpgen.privacy.accountants import (PLD_COARSE_INTERVAL, PLD_GUIDE_MAX_STEPS, PLD_INTERVAL, OpacusRDPAccountant,
                                       RDPAccountant, WangWORAccountant, autodp_epsilon, make_accountant, pld_epsilon,
                                       resolve_accountant)
from dpgen.privacy.calibration import (SURROGATES, calibrate_noise_multiplier, largest_steps, solve_noise,
                                       steps_to_epsilon)
from dpgen.privacy.local import geometric_bisect

RELATIONS = {"poisson": "add/remove one record (Poisson sampling: each record independently at rate q = B / n, n the "
                        "size declared as dataset.n_train and treated as public; nothing in the run depends on how "
                        "many records were loaded)",
             "without_replacement": "replace one record (fixed-size batches drawn without replacement)"}


ACCOUNTANT_TEXT = {"rdp": "autodp RDP", "pld": "dp-accounting PLD", "opacus_rdp": "opacus RDP",
                   "opacus_prv": "opacus PRV", "moments": "moments accountant (Abadi et al.)"}

#: why ``privacy.accountant=auto`` picks its accountant, per sampling scheme (the reports print it)
AUTO_REASONS = {
    "poisson": "privacy.accountant=auto: the tightest valid accountant for the Poisson-subsampled Gaussian "
               "(add/remove one)",
    "without_replacement": "privacy.accountant=auto: the tightest valid accountant here; dp-accounting's PLD does "
                           "not analyse sampling without replacement (replace one; its PLDAccountant has no rule "
                           "for SampledWithoutReplacementDpEvent), so autodp's RDP bound (Wang et al. 2019) is used",
}


def accountant_reason(requested: str, sampling: str) -> str:
    """Why the ledger of ``sampling`` uses the accountant ``privacy.accountant=requested`` resolves to."""
    if requested == "auto":
        return AUTO_REASONS[sampling]
    return f"privacy.accountant={requested}, as configured"


@lru_cache(maxsize=256)
def _steps_in_budget(epsilon: float, delta: float, z: float, q: float, sampling: str, accountant: str) -> int:
    return steps_to_epsilon(epsilon, delta, z, q, sampling, accountant)


def _largest_fitting(fits, lo: int, hi: int, cap: int = 10**9) -> Optional[int]:
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


class Ledger:
    """The privacy ledger of one run (see the module doc)."""

    def __init__(self, *, epsilon: float, delta: float, sampling: str, sample_rate: float,
                 prefix: Sequence[float] = (), rel_tol: float = 1e-3, accountant: str = "rdp",
                 reason: Optional[str] = None) -> None:
        self.epsilon_budget = float(epsilon)
        self.delta = float(delta)
        self.sampling = sampling
        self.sample_rate = float(sample_rate)
        #: noise multipliers of the full-batch releases made before training (each accounted once)
        self.prefix = tuple(float(z) for z in prefix)
        self.rel_tol = float(rel_tol)
        #: what was asked (privacy.accountant; ``auto``: the tightest valid accountant for the sampling) and
        #: the accountant that calibrates and keeps the ledger (``auto`` resolved: dp-accounting's PLD for
        #: Poisson sampling, autodp's RDP for sampling without replacement, the only one here for it)
        self.accountant_requested = accountant
        accountant = resolve_accountant(accountant, sampling)
        self.accountant_name = accountant
        #: why this accountant (the report states it); ``reason`` when the method chose it itself
        self.accountant_reason = reason or accountant_reason(self.accountant_requested, sampling)
        #: whether ``calibrate`` set the noise (else ``use_noise`` fixed it)
        self.calibrated = False
        if accountant == "rdp":
            self.accountant = RDPAccountant(sampling=sampling)
        else:
            self.accountant = make_accountant(accountant)
            if getattr(self.accountant, "sampling", sampling) != sampling:
                raise ValueError(f"privacy.accountant={accountant} analyses Poisson sampling only; this method samples "
                                 f"{sampling}: use privacy.accountant=auto (autodp RDP here) or rdp")
        self.noise_multiplier: Optional[float] = None
        #: releases before training recorded by ``release_prefix`` (each one full-batch step in the
        #: accountant): counted explicitly, so a run whose own steps have q = 1 is not mistaken for them
        self.prefix_releases = 0

    # ---- the composition ----------------------------------------------------------------------
    def epsilon_of(self, noise_multiplier: float, steps: int, surrogate: bool = False) -> float:
        """Epsilon of the prefix releases plus ``steps`` steps at ``noise_multiplier``.

        ``surrogate=True``: a fast accountant of (nearly) the same curve, used only to guide searches that the
        ledger's accountant then confirms: for RDP the numpy accountant of the same RDP curve (``SURROGATES``;
        agrees with autodp to ~1e-8 relative), for PLD dp-accounting's PLD on a 10x coarser grid."""
        groups = [(float(noise_multiplier), self.sample_rate, int(steps))] if steps > 0 else []
        groups += [(z, 1.0, 1) for z in self.prefix]
        if not groups:
            return 0.0
        if self.accountant_name == "pld":
            return pld_epsilon(tuple(sorted(groups)), self.delta, PLD_COARSE_INTERVAL if surrogate else PLD_INTERVAL)
        name = SURROGATES.get(self.sampling, self.accountant_name) if surrogate else self.accountant_name
        if name == "rdp":
            return autodp_epsilon(tuple(sorted(groups)), self.delta, self.sampling)
        acc = make_accountant(name)
        for z, q, n in groups:
            acc.step(noise_multiplier=z, sample_rate=q, num_steps=n)
        return acc.get_epsilon(self.delta)

    def _surrogate_root(self, too_small, lo: float) -> Optional[float]:
        """The surrogate's smallest z with ``too_small(z)`` False (None when no surrogate applies)."""
        if self.accountant_name != "rdp" or self.sampling not in SURROGATES:
            return None
        hi = lo * 1.05
        for _ in range(40):  # the surrogate's RDP orders floor its epsilon: it may never reach the budget
            if not too_small(hi):
                return geometric_bisect(too_small, lo, hi, rel_tol=self.rel_tol / 4)
            lo, hi = hi, hi * 2
        return None

    def _surrogate_steps(self, z: float) -> Optional[int]:
        """The surrogate's most steps in budget at noise ``z`` (None when no surrogate applies)."""
        if self.accountant_name != "rdp" or self.sampling not in SURROGATES:
            return None
        fits = lambda t: self.epsilon_of(z, t, surrogate=True) <= self.epsilon_budget  # noqa: E731
        return _largest_fitting(fits, 1, 1024) if fits(1) else None

    def _check_prefix(self) -> None:
        if self.prefix and self.epsilon_of(1e6, 0) >= self.epsilon_budget:
            raise ValueError(f"the releases before training (noise multipliers {list(self.prefix)}) alone spend "
                             f"epsilon {self.epsilon_of(1e6, 0):.4g} >= privacy.epsilon={self.epsilon_budget}: "
                             "raise their noise (e.g. method.center_noise_multiplier) or the budget")

    def calibrate(self, steps: int, z0: Optional[float] = None) -> float:
        """The smallest noise multiplier (to rel_tol; under PLD: spending within PLD_EPSILON_TOL below the
        budget, never above it) that keeps the prefix plus ``steps`` steps in budget."""
        self._check_prefix()
        self.calibrated = True
        if self.accountant_name == "pld":
            # PLD's epsilon is below every RDP bound's: the RDP ledger's noise (same prefix) spends at most the
            # budget under PLD, an upper end for the search to PLD_EPSILON_TOL in epsilon (a few PLD calls)
            rdp = Ledger(epsilon=self.epsilon_budget, delta=self.delta, sampling=self.sampling,
                         sample_rate=self.sample_rate, prefix=self.prefix, rel_tol=self.rel_tol, accountant="rdp")
            try:
                z_hi = rdp.calibrate(steps, z0)
            except ValueError:  # no RDP order reaches the budget: PLD may still; start from z0 or 1
                z_hi = 1.0 if z0 is None else float(z0)
            guide = (lambda x: self.epsilon_of(x, steps, surrogate=True)) if steps <= PLD_GUIDE_MAX_STEPS else None
            self.noise_multiplier = float(solve_noise(lambda x: self.epsilon_of(x, steps), self.epsilon_budget, z_hi,
                                                      guide=guide))
            return self.noise_multiplier
        z = calibrate_noise_multiplier(self.epsilon_budget, self.delta, self.sample_rate, steps, self.sampling,
                                       accountant=self.accountant_name, rel_tol=self.rel_tol, z0=z0)
        if self.prefix:  # the prefix spends part of the budget: more noise, found by bisection on log z
            # guided by the surrogate accountant (the same RDP curve in numpy, 15x faster than autodp):
            # its root, widened by rel_tol each side, usually brackets autodp's in two calls
            guess = self._surrogate_root(lambda x: self.epsilon_of(x, steps, surrogate=True) > self.epsilon_budget,
                                         z)
            lo, hi = (guess / (1 + self.rel_tol), guess * (1 + self.rel_tol)) if guess else (z, z * 1.05)
            if self.epsilon_of(lo, steps) <= self.epsilon_budget:
                lo, hi = z, lo  # the guess was too high: the prefix-free z is a lower end
            while self.epsilon_of(hi, steps) > self.epsilon_budget:
                lo, hi = hi, hi * 1.5
            while hi / lo > 1 + self.rel_tol:  # epsilon_of(hi) <= budget always
                mid = math.sqrt(lo * hi)
                if self.epsilon_of(mid, steps) > self.epsilon_budget:
                    lo = mid
                else:
                    hi = mid
            z = hi
        self.noise_multiplier = float(z)
        return self.noise_multiplier

    def use_noise(self, noise_multiplier: float) -> float:
        """Fix the noise multiplier (the budget then decides how many steps the run may take)."""
        self.noise_multiplier = float(noise_multiplier)
        return self.noise_multiplier

    def max_steps(self, requested: Optional[int] = None) -> Optional[int]:
        """The most steps the budget allows at the ledger's noise (None: ``requested`` steps fit)."""
        z = self.noise_multiplier
        if requested and self.epsilon_of(z, int(requested)) <= self.epsilon_budget:
            return None
        if not self.prefix:
            return _steps_in_budget(self.epsilon_budget, self.delta, z, self.sample_rate, self.sampling,
                                    self.accountant_name)
        self._check_prefix()
        if self.epsilon_of(z, 0) > self.epsilon_budget:
            raise ValueError(f"the releases before training alone spend epsilon {self.epsilon_of(z, 0):.4g} > "
                             f"privacy.epsilon={self.epsilon_budget}")
        if self.epsilon_of(z, 1) > self.epsilon_budget:
            return 0
        fits = lambda t: self.epsilon_of(z, t) <= self.epsilon_budget  # noqa: E731
        if self.accountant_name == "pld":  # from the RDP ledger's answer (it spends more: its steps fit)
            rdp = Ledger(epsilon=self.epsilon_budget, delta=self.delta, sampling=self.sampling,
                         sample_rate=self.sample_rate, prefix=self.prefix, rel_tol=self.rel_tol, accountant="rdp")
            rdp.use_noise(z)
            floor = rdp.max_steps() or 1
            guide = (lambda t: self.epsilon_of(z, t, surrogate=True)) if floor <= PLD_GUIDE_MAX_STEPS // 4 else None
            return largest_steps(lambda t: self.epsilon_of(z, t), self.epsilon_budget, max(1, floor), guide=guide)
        lo, hi = 1, 1024
        guess = self._surrogate_steps(z)
        if guess is not None:  # autodp confirms the surrogate's answer, usually in two calls
            lo, hi = (guess, guess + 1) if fits(guess) else (1, guess)
        found = _largest_fitting(fits, lo, hi)
        return 10**9 if found is None else found

    # ---- what ran ------------------------------------------------------------------------------
    def release_prefix(self) -> None:
        """Account the releases made before training (once per run; a resumed run has them)."""
        for z in self.prefix:
            self.accountant.step(noise_multiplier=z, sample_rate=1.0)
            self.prefix_releases += 1

    def step(self) -> None:
        self.accountant.step(noise_multiplier=self.noise_multiplier, sample_rate=self.sample_rate)

    def epsilon(self) -> float:
        return self.accountant.get_epsilon(self.delta) if self.accountant.steps else 0.0

    def private_steps(self) -> int:
        """Per-step mechanism runs (the releases before training excluded, counted as releases: a step at
        sample rate 1, a full-batch run, is a step like any other)."""
        return self.accountant.steps - self.prefix_releases

    def epsilon_after(self, more: int) -> float:
        """Epsilon of the ledger's whole history plus ``more`` steps at its noise multiplier and sample rate."""
        groups = dict(self.accountant._groups()) if hasattr(self.accountant, "_groups") else {}
        if more > 0:
            key = (float(self.noise_multiplier), self.sample_rate)
            groups[key] = groups.get(key, 0) + int(more)
        if not groups:
            return 0.0
        if self.accountant_name == "rdp":
            return autodp_epsilon(tuple(sorted((z, q, n) for (z, q), n in groups.items())), self.delta,
                                  self.sampling)
        acc = make_accountant(self.accountant_name)
        for (z, q), n in groups.items():
            acc.step(noise_multiplier=z, sample_rate=q, num_steps=n)
        return acc.get_epsilon(self.delta)

    def steps_left(self, wanted: int) -> int:
        """The most steps (at most ``wanted``) that fit in the budget after what the ledger already holds.

        Computed from the ledger's actual history, whatever it holds (the releases before training, the
        steps of earlier attempts, a release made twice because an attempt died before its first
        checkpoint): no run ends above its budget. The usual case costs one accountant call; otherwise
        the answer of :meth:`max_steps` (the planned composition) is checked against the history and
        refined by bisection."""
        wanted = max(0, int(wanted))
        if wanted == 0 or self.epsilon_after(wanted) <= self.epsilon_budget:
            return wanted
        fits = lambda t: t == 0 or self.epsilon_after(t) <= self.epsilon_budget  # noqa: E731
        if not fits(1):
            return 0
        lo, hi = 1, wanted  # fits(lo), not fits(hi)
        if self.prefix_releases == len(self.prefix):  # the planned composition: max_steps knows the answer
            total = self.max_steps()
            guess = (10**9 if total is None else int(total)) - self.private_steps()
            if 1 <= guess < wanted:
                if fits(guess) and not fits(guess + 1):
                    return guess
                lo, hi = (guess, hi) if fits(guess) else (lo, guess)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    def cross_check(self) -> Dict[str, float]:
        """The same history under independent accountants (autodp too when it did not keep the ledger)."""
        if not self.accountant.steps:
            return {}
        poisson = self.sampling == "poisson"
        others = {("opacus_rdp" if poisson else "wang_wor"): OpacusRDPAccountant() if poisson else WangWORAccountant()}
        if self.accountant_name != "rdp":
            others["autodp_rdp"] = RDPAccountant(sampling=self.sampling)
        out = {}
        for name, acc in others.items():
            for h in self.accountant.history:
                acc.step(noise_multiplier=h["noise_multiplier"], sample_rate=h["sample_rate"],
                         num_steps=h["num_steps"])
            out[name] = acc.get_epsilon(self.delta)
        return out

    def accountant_text(self) -> str:
        """Which accountant keeps the ledger, why, and what is printed beside it (the report's ``accountant``)."""
        name = ACCOUNTANT_TEXT.get(self.accountant_name, self.accountant_name)
        role = ("calibrated the noise and keeps the ledger" if self.calibrated else
                "keeps the ledger; the noise was given")
        mechanism = ("Gaussian mechanism on the whole set (sample rate 1)" if self.sample_rate >= 1 else
                     "Poisson-subsampled Gaussian" if self.sampling == "poisson" else
                     "subsampled Gaussian without replacement (Wang et al. 2019)")
        beside = ("autodp RDP printed beside it as the cross-check, with opacus RDP (epsilon_cross_check)"
                  if self.accountant_name != "rdp" else
                  "opacus RDP printed beside it as the cross-check (epsilon_cross_check)" if self.sampling == "poisson"
                  else "dpgen's own Theorem 9 accountant (wang_wor) printed beside it as the cross-check "
                       "(epsilon_cross_check)")
        return f"{name} ({self.accountant_reason}; it {role}), {mechanism}; {beside}"

    def report(self) -> Dict[str, Any]:
        checks = self.cross_check()  # one replay of the history per report (reports are written every checkpoint)
        return {
            "epsilon_budget": self.epsilon_budget,
            "epsilon_spent": self.epsilon(),
            "noise_multiplier": self.noise_multiplier,
            "sampling": self.sampling,
            "sample_rate": self.sample_rate,
            "neighbouring_relation": RELATIONS[self.sampling],
            "accountant": self.accountant_text(),
            "ledger_accountant": self.accountant_name,
            "epsilon_cross_check": checks,
            "cross_check": cross_check_verdict(self.epsilon(), checks, self.accountant_name),
            "private_steps": self.private_steps(),
        }

    def state_dict(self) -> Dict[str, Any]:
        """The accountant's state and the number of releases before training (JSON)."""
        return {"accountant": self.accountant.state_dict(), "prefix_releases": self.prefix_releases}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Load :meth:`state_dict`; also a bare accountant state (written by dpgen before the releases were
        counted), whose releases are inferred conservatively: at most one per declared release, and only
        from its full-batch entries (so every other step counts as a step)."""
        acc = state.get("accountant", state) if "history" not in state else state
        self.accountant.load_state_dict(acc)
        if "prefix_releases" in state:
            self.prefix_releases = int(state["prefix_releases"])
        else:
            full = sum(int(h["num_steps"]) for h in self.accountant.history if h["sample_rate"] >= 1.0)
            self.prefix_releases = min(len(self.prefix), full)



#: how far two RDP accountants of one history may differ (autodp's and opacus' order grids and conversions to
#: (epsilon, delta) differ: opacus 9.5 % below autodp at the digits default's 5,000 steps, sigma 1.1; 18 % below at
#: 50 steps, sigma 0.63) and the check still pass
CROSS_CHECK_TOLERANCE = 0.25
#: numerical slack of the PLD ledger's discretisation when it is compared with an RDP upper bound
PLD_SLACK = 0.02


def cross_check_verdict(charged: float, independent: Dict[str, float], ledger: str,
                        tolerance: float = CROSS_CHECK_TOLERANCE) -> Dict[str, Any]:
    """What ``epsilon_cross_check`` means, said beside it: which epsilon is charged (``epsilon_spent``, by the
    ledger's accountant), each independent accountant's relative gap to it, and whether the check passed. The rule
    follows what the accountants are: a PLD ledger is (near) exact for these mechanisms, so every RDP bound, a valid
    but looser upper bound, must lie at or above it (it is often 15-40 % above); two RDP accountants must agree
    within ``tolerance``. A failure points at a bug in one of them, never at a choice."""
    if not independent:
        return {"charged": f"epsilon_spent ({ledger})", "passed": None, "why": "no private step to check"}
    gaps = {k: round((float(v) - charged) / charged, 4) if charged > 0 else 0.0 for k, v in independent.items()}
    if ledger in ("pld", "opacus_prv"):  # the (near) exact accountants
        passed = all(g >= -PLD_SLACK for g in gaps.values())
        rule = (f"no independent RDP upper bound below the charged PLD epsilon (by more than {PLD_SLACK:.0%}): PLD "
                "is the tightest of them, RDP bounds lie above it")
    else:
        passed = all(abs(g) <= tolerance for g in gaps.values())
        rule = f"the independent RDP accountants within {tolerance:.0%} of the charged epsilon"
    return {"charged": f"epsilon_spent ({ledger}): the ledger's epsilon, what the run spends and reports",
            "relative_gap": gaps, "passed": passed, "rule": rule}

__all__ = ["Ledger", "RELATIONS"]
