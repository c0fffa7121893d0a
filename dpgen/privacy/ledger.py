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
ledger here; the methods add what is theirs (the sensitivity, the mechanism's description). A one-shot
release (DP-MERF's) keeps a ledger of its one full-batch release and no step (``one_shot``), under
dp-accounting's PLD (:func:`dpgen.privacy.mechanisms.make_ledger`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Dict, Optional, Sequence

from dpgen.privacy.accountants import ACCOUNTANTS, resolve_accountant
from dpgen.privacy.ledger_accountants import ledger_accountant
from dpgen.privacy.calibration import steps_to_epsilon

RELATIONS = {"poisson": "add/remove one record (Poisson sampling: each record independently at rate q = B / n, n the "
                        "size declared as dataset.n_train and treated as public; nothing in the run depends on how "
                        "many records were loaded)",
             "without_replacement": "replace one record (fixed-size batches drawn without replacement)",
             # a release of the whole set once (a one-shot ledger), and a local mechanism (each record privatised)
             "one_shot": "replace one record (the number of records n is public)",
             "local": "replace one record (local DP: any two values of one record)"}


#: what the reports call each accountant (its ``label``; an accountant without one is called by its name)
ACCOUNTANT_TEXT = {name: cls.label for name, cls in ACCOUNTANTS.items() if cls.label}

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


class Ledger:
    """The privacy ledger of one run (see the module doc). What depends on its accountant (how epsilon, the noise
    and the steps in budget are computed, the cross-checks, the report's text) it asks ``self.family``, the object
    :func:`dpgen.privacy.ledger_accountants.ledger_accountant` finds for the accountant's name
    (:mod:`dpgen.privacy.ledger_accountants`); the ledger itself never branches on that name."""

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
        #: a one-shot release (:class:`dpgen.privacy.mechanisms.OneShotGaussian`): the prefix is the whole
        #: mechanism, no step is charged and ``noise_multiplier`` (the per-step noise) stays None
        self.one_shot = False
        #: the accountant's family (:mod:`dpgen.privacy.ledger_accountants`) and the accountant holding the history
        self.family = ledger_accountant(accountant, sampling)
        self.accountant = self.family.new_accountant(self.sample_rate)
        self.noise_multiplier: Optional[float] = None
        #: releases before training recorded by ``release_prefix`` (each one full-batch step in the
        #: accountant): counted explicitly, so a run whose own steps have q = 1 is not mistaken for them
        self.prefix_releases = 0

    # ---- the composition ----------------------------------------------------------------------
    def under(self, accountant: str) -> "Ledger":
        """A fresh ledger of the same composition (budget, sampling, sample rate, releases before training,
        rel_tol) kept by ``accountant``: the PLD family starts its searches from the RDP ledger's answers."""
        return Ledger(epsilon=self.epsilon_budget, delta=self.delta, sampling=self.sampling,
                      sample_rate=self.sample_rate, prefix=self.prefix, rel_tol=self.rel_tol, accountant=accountant)

    def epsilon_of(self, noise_multiplier: float, steps: int, surrogate: bool = False) -> float:
        """Epsilon of the prefix releases plus ``steps`` steps at ``noise_multiplier``.

        ``surrogate=True``: a fast accountant of (nearly) the same curve, used only to guide searches that the
        ledger's accountant then confirms: for RDP the numpy accountant of the same RDP curve (``SURROGATES``;
        agrees with autodp to ~1e-8 relative), for PLD dp-accounting's PLD on a 10x coarser grid."""
        groups = [(float(noise_multiplier), self.sample_rate, int(steps))] if steps > 0 else []
        groups += [(z, 1.0, 1) for z in self.prefix]
        if not groups:
            return 0.0
        return self.family.epsilon(groups, self.delta, surrogate)

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
        self.noise_multiplier = self.family.noise(self, steps, z0)
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
        return self.family.most_steps(self, z)

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

    def history(self) -> list:
        """What the ledger charged, grouped: ``[noise multiplier, sample rate, steps]`` per group (the releases
        before training included, at sample rate 1), sorted; public numbers, in every report (``composition``)."""
        groups = self.accountant._groups() if hasattr(self.accountant, "_groups") else {}
        return [[float(z), float(q), int(n)] for (z, q), n in sorted(groups.items())]

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
        return self.family.epsilon([(z, q, n) for (z, q), n in groups.items()], self.delta)

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
        out = {}
        for name, acc in self.family.cross_checks().items():
            for h in self.accountant.history:
                acc.step(noise_multiplier=h["noise_multiplier"], sample_rate=h["sample_rate"],
                         num_steps=h["num_steps"])
            out[name] = acc.get_epsilon(self.delta)
        return out

    def accountant_text(self) -> str:
        """Which accountant keeps the ledger, why, and what is printed beside it (the report's ``accountant``)."""
        name = self.family.text()
        role = ("calibrated the noise and keeps the ledger" if self.calibrated else
                "keeps the ledger; the noise was given")
        mechanism = ("Gaussian mechanism on the whole set (sample rate 1)" if self.sample_rate >= 1 else
                     "Poisson-subsampled Gaussian" if self.sampling == "poisson" else
                     "subsampled Gaussian without replacement (Wang et al. 2019)")
        return f"{name} ({self.accountant_reason}; it {role}), {mechanism}; {self.family.beside()}"

    def report(self) -> Dict[str, Any]:
        checks = self.cross_check()  # one replay of the history per report (reports are written every checkpoint)
        return {
            "epsilon_budget": self.epsilon_budget,
            "epsilon_spent": self.epsilon(),
            "noise_multiplier": self.prefix[0] if self.one_shot else self.noise_multiplier,
            "sampling": self.sampling,
            "sample_rate": self.sample_rate,
            "neighbouring_relation": RELATIONS["one_shot" if self.one_shot else self.sampling],
            "accountant": self.accountant_text(),
            "ledger_accountant": self.accountant_name,
            "epsilon_cross_check": checks,
            "cross_check": cross_check_verdict(self.epsilon(), checks, self.accountant_name),
            "private_steps": self.private_steps(),
            "composition": self.history(),
        }

    def state_dict(self) -> Dict[str, Any]:
        """The accountant's state and the number of releases before training (JSON)."""
        return {"accountant": self.accountant.state_dict(), "prefix_releases": self.prefix_releases}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Load :meth:`state_dict`, of the current format only: a ledger an older dpgen wrote is brought to it
        before it reaches here (``dpgen.train.migrations``, applied when a checkpoint or ledger file is loaded;
        this library imports nothing from the training package above it)."""
        self.accountant.load_state_dict(state["accountant"])
        self.prefix_releases = int(state["prefix_releases"])



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
    if ledger in ACCOUNTANTS and ACCOUNTANTS.lookup(ledger).exact:  # the (near) exact accountants: PLD, PRV
        passed = all(g >= -PLD_SLACK for g in gaps.values())
        rule = (f"no independent RDP upper bound below the charged PLD epsilon (by more than {PLD_SLACK:.0%}): PLD "
                "is the tightest of them, RDP bounds lie above it")
    else:
        passed = all(abs(g) <= tolerance for g in gaps.values())
        rule = f"the independent RDP accountants within {tolerance:.0%} of the charged epsilon"
    return {"charged": f"epsilon_spent ({ledger}): the ledger's epsilon, what the run spends and reports",
            "relative_gap": gaps, "passed": passed, "rule": rule}

__all__ = ["Ledger", "RELATIONS"]
