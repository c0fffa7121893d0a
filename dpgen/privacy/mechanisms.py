"""What a method releases, declared; the ledger that accounts it, built here (opacus' shape: methods declare, the
library builds).

A method states its mechanism as a small value and asks :func:`make_ledger` for the calibrated ledger:

* :class:`SubsampledGaussian`: every step releases a statistic of a batch sampled at rate q (``poisson``: each
  record independently, add/remove one record; ``without_replacement``: fixed-size batches, replace one record)
  with Gaussian noise of std ``noise_multiplier`` x its sensitivity; optional full-batch releases before training
  (``prefix``, each accounted once). DP-SGD, DP-DANN, DP-Sinkhorn and DP-SWD's projection declare one.
* :class:`OneShotGaussian`: one full-batch Gaussian release, then post-processing only (DP-MERF's mean embedding),
  calibrated and charged by dp-accounting's PLD of one Gaussian (exact for it: :data:`ONE_SHOT_REASON`).
* :class:`ProjectedGaussian`: DP-SWD's release, a subsampled Gaussian on k random projections whose sensitivity is a
  high-probability bound (:mod:`dpgen.privacy.projection`).
* :class:`LocalRelease`: each record privatised once by a local mechanism (entropic-LDP GAN), then post-processing.

A mechanism also carries the public facts its accounting report names (``label``, ``sensitivity``, the units
sampled): :func:`dpgen.privacy.accounting.account` turns it into ``task=accounting``'s report, so that report
needs no code of the method's.

``make_ledger(mechanism, epsilon=, delta=, steps=, accountant=, rel_tol=)`` returns the :class:`Ledger` with its
noise set: calibrated to the budget at ``steps`` when the mechanism leaves ``noise_multiplier`` unset, else the
given noise with the budget deciding how many steps it allows (``ledger.max_steps()``: the budget's stop). The
ledger's ``report()`` is the accounting report. Every declared mechanism, whatever its kind, is calibrated or
refused here, before anything is trained or released: a given noise whose one-shot release or releases before
training already spend more than the budget raises :class:`PrivacyParameterError`; a run also calls
:func:`check_declared` with its steps, which refuses a noise with which not even one step fits. Plain numbers in,
no configuration object: this module knows mechanisms, never methods (the errors name ``method.noise_multiplier``,
the key every method gives its noise under).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Union

from dpgen.privacy.ledger import Ledger
from dpgen.privacy.validation import PrivacyParameterError


@dataclass(frozen=True)
class SubsampledGaussian:
    """Each step: a batch sampled at ``sample_rate`` (``sampling``: poisson | without_replacement), a release with
    Gaussian noise of ``noise_multiplier`` x its sensitivity (None: calibrate to the budget); ``prefix``: the noise
    multipliers of full-batch releases made once before training."""

    sampling: str
    sample_rate: float
    noise_multiplier: Optional[float] = None
    prefix: Tuple[float, ...] = ()
    #: for the report only: the l2 sensitivity the noise multiplier scales, what the method is called, and the
    #: units sampled when they are not records (``units`` of them, ``per_step`` per step, named ``unit``)
    sensitivity: float = 1.0
    label: str = ""
    units: int = 0
    per_step: int = 0
    unit: str = "records"


@dataclass(frozen=True)
class OneShotGaussian:
    """One full-batch Gaussian release of noise std ``noise_multiplier`` x ``sensitivity`` (the method's, under its
    neighbouring relation), then post-processing: no per-step cost and no budget stop. ``noise_multiplier`` None:
    :func:`make_ledger` calibrates it to the budget; a given one is refused there when it spends more than the
    budget. ``calibrated``: the method solved the given noise for the budget itself (the report says so)."""

    noise_multiplier: Optional[float] = None
    calibrated: bool = False
    sensitivity: float = 1.0
    label: str = ""


@dataclass(frozen=True)
class ProjectedGaussian:
    """DP-SWD: each step a batch of ``batch_size`` of ``n`` records drawn without replacement, projected on ``k``
    random directions in ``d`` dimensions, with Gaussian noise of ``noise_multiplier`` (None: calibrated) x the
    directions' ``bound`` on the sensitivity (holding with probability 1 - delta_bound; ``convention``,
    ``delta_split``, ``union_bound``: :mod:`dpgen.privacy.projection`). ``prefix``: full-batch releases before
    training. ``reading``: ``paper`` (the paper's calibration, per-step bound, with ``epochs`` when the run is
    given in epochs) or ``run`` (the training run's ledger, for the variants the paper does not have)."""

    k: int
    d: int
    n: int
    batch_size: int
    steps: int
    bound: str
    convention: str
    delta_split: float = 0.5
    epochs: Optional[float] = None
    noise_multiplier: Optional[float] = None
    prefix: Tuple[float, ...] = ()
    union_bound: bool = True
    reading: str = "paper"
    label: str = ""


@dataclass(frozen=True)
class LocalRelease:
    """Each record privatised once by the ``kind`` (laplace | gaussian) local mechanism on the ball of radius
    ``radius`` (``sensitivity``: diameter | radius); training on the release is post-processing."""

    kind: str
    radius: float
    sensitivity: str = "diameter"
    label: str = ""


Mechanism = Union[SubsampledGaussian, OneShotGaussian, ProjectedGaussian, LocalRelease]


def accountant_for(requested: str, sampling: str) -> Tuple[str, Optional[str]]:
    """(the accountant a ledger of ``sampling`` uses for privacy.accountant=``requested``, the reason when it is
    not the one requested): sampling without replacement replaces a Poisson-only accountant by autodp's RDP."""
    if sampling == "poisson" or requested in ("auto", "rdp"):
        return requested, None
    return "rdp", (f"privacy.accountant={requested} analyses Poisson sampling only, and this variant draws one "
                   "partition per step without replacement (replace one): autodp's RDP bound (Wang et al. 2019), the "
                   "tightest valid accountant here")


#: why a one-shot release is calibrated and charged by dp-accounting's PLD whatever privacy.accountant says (the
#: reports state it)
ONE_SHOT_REASON = ("one Gaussian release of the whole set (sample rate 1), no subsampling or composition: its "
                   "privacy loss distribution is the same under add/remove and replace-one (the relation sets only "
                   "the sensitivity, which the method supplies), so dp-accounting's PLD of one Gaussian, exact for it "
                   "up to its discretisation (the analytic Gaussian mechanism of Balle & Wang 2018), is valid and the "
                   "tightest; privacy.accountant applies to the subsampled-Gaussian ledgers")


def one_shot_epsilon(noise_multiplier: float, delta: float) -> float:
    """Epsilon of one Gaussian release at ``noise_multiplier``: dp-accounting's PLD of one GaussianDpEvent, what a
    one-shot ledger charges (within 1e-8 of the analytic Gaussian mechanism's exact value at z 0.5 to 4)."""
    from dpgen.privacy.accountants import pld_epsilon

    return pld_epsilon(((float(noise_multiplier), 1.0, 1),), float(delta))


def one_shot_noise(epsilon: float, delta: float) -> float:
    """The smallest noise multiplier (to PLD_EPSILON_TOL in epsilon, never above the budget) of one Gaussian
    release within (``epsilon``, ``delta``). The search starts at the analytic Gaussian mechanism's root (Balle &
    Wang 2018, exact for one release) just inside the budget, where the PLD agrees: one or two PLD calls."""
    from dpgen.privacy.calibration import PLD_EPSILON_TOL, solve_noise
    from dpgen.privacy.local import analytic_gaussian_sigma

    tol = min(PLD_EPSILON_TOL, float(epsilon) / 2)
    z0 = analytic_gaussian_sigma(float(epsilon) - tol / 2, float(delta))
    return float(solve_noise(lambda z: one_shot_epsilon(z, delta), float(epsilon), z0, tol=tol))


def _one_shot_ledger(m: OneShotGaussian, epsilon: float, delta: float, rel_tol: float,
                     reason: Optional[str]) -> Ledger:
    """The ledger of one full-batch release: its noise calibrated to the budget, or the given one checked."""
    if m.noise_multiplier is None:
        z = one_shot_noise(epsilon, delta)
    else:
        z = float(m.noise_multiplier)
        if not z > 0 or not math.isfinite(z):
            raise PrivacyParameterError(f"method.noise_multiplier={m.noise_multiplier!r} is invalid for "
                                        f"{m.label or 'a one-shot release'}: give a positive number, or null to "
                                        "calibrate it to privacy.epsilon")
        spent = one_shot_epsilon(z, delta)
        if spent > epsilon:
            raise PrivacyParameterError(
                f"method.noise_multiplier={z:g} spends epsilon {spent:.4g} > privacy.epsilon={epsilon:g} in the one "
                f"release of {m.label or 'this one-shot mechanism'} (delta {delta:g}): raise it to at least "
                f"{one_shot_noise(epsilon, delta):.4g}, or leave it null to calibrate it to the budget")
    ledger = Ledger(epsilon=epsilon, delta=delta, sampling="without_replacement", sample_rate=1.0, prefix=(z,),
                    rel_tol=rel_tol, accountant="pld", reason=reason or ONE_SHOT_REASON)
    ledger.one_shot = True
    ledger.calibrated = m.noise_multiplier is None or bool(m.calibrated)
    return ledger


def check_declared(ledger: Ledger, steps: int = 0) -> None:
    """Refuse, before anything is trained or released, a ledger whose declared mechanism does not fit its budget.

    ``steps``: the mechanism steps the run will charge (0 for a method whose steps are post-processing,
    ``accounts_steps = False``). Refused: releases before training (a one-shot release among them) that alone
    spend more than the budget; a one-shot ledger asked to charge steps; a per-step noise neither calibrated nor
    given; a given noise with which not even one step fits (the run would train 0 steps). The planned
    composition is checked, not the ledger's history: a resumed run whose budget is spent stops by its own rule."""
    budget = ledger.epsilon_budget
    if ledger.prefix:
        spent = ledger.epsilon_of(1.0, 0)  # the releases before training only (no step: the noise is unused)
        if spent > budget:
            what = ("the one release alone spends" if ledger.one_shot else
                    f"the releases before training (noise multipliers {list(ledger.prefix)}) alone spend")
            raise PrivacyParameterError(
                f"{what} epsilon {spent:.4g} > privacy.epsilon={budget:g}: raise their noise "
                "(method.noise_multiplier of a one-shot release, method.center_noise_multiplier of DP-SWD's DP mean) "
                "or the budget")
    if int(steps) <= 0:
        return
    if ledger.one_shot:
        raise PrivacyParameterError(
            f"the ledger of a one-shot release charges no step, and the run asks it to charge {int(steps)}: a method "
            "that declares a OneShotGaussian trains on its release only (post-processing): set accounts_steps = False "
            "on its class")
    z = ledger.noise_multiplier
    if z is None:
        raise PrivacyParameterError("the ledger's per-step noise multiplier was neither calibrated nor given: build "
                                    "it with dpgen.privacy.mechanisms.make_ledger (dpgen.methods.base.ledger_for)")
    first = ledger.epsilon_of(z, 1)
    if first > budget:
        raise PrivacyParameterError(
            f"method.noise_multiplier={z:g}: even one step spends epsilon {first:.4g} > privacy.epsilon={budget:g}"
            + (" (with the releases before training)" if ledger.prefix else "")
            + ", so the run would train 0 steps: raise the noise multiplier or the budget, or leave "
            "method.noise_multiplier null to calibrate it to the run's steps")


def make_ledger(mechanism: Mechanism, *, epsilon: float, delta: float, steps: int = 0, accountant: str = "auto",
                rel_tol: float = 1e-3, reason: Optional[str] = None) -> Ledger:
    """The calibrated ledger of ``mechanism`` under (``epsilon``, ``delta``) for a run of ``steps`` steps
    (:class:`ProjectedGaussian`: its own steps, and the RDP share of ``delta``, the directions' bound taking the
    rest: :func:`projected_calibration`; :class:`OneShotGaussian`: one release, ``steps`` and ``accountant``
    unused, :data:`ONE_SHOT_REASON`). A given noise whose one-shot release or releases before training do not fit
    the budget is refused (:func:`check_declared`; a run also calls it with its steps)."""
    if isinstance(mechanism, ProjectedGaussian):
        from dpgen.privacy.projection import split_delta

        _, delta_rdp = split_delta(delta, mechanism.convention, mechanism.delta_split, None, None, mechanism.bound)
        sub = SubsampledGaussian("without_replacement", mechanism.batch_size / mechanism.n,
                                 mechanism.noise_multiplier, tuple(mechanism.prefix))
        return make_ledger(sub, epsilon=epsilon, delta=delta_rdp, steps=mechanism.steps, accountant=accountant,
                           rel_tol=rel_tol, reason=reason)
    if isinstance(mechanism, OneShotGaussian):
        return _one_shot_ledger(mechanism, float(epsilon), float(delta), rel_tol, reason)
    if not isinstance(mechanism, SubsampledGaussian):
        raise TypeError(f"make_ledger: {mechanism!r} is not a mechanism a ledger keeps (SubsampledGaussian, "
                        "OneShotGaussian or ProjectedGaussian; a LocalRelease keeps none: its noise follows from "
                        "(epsilon, delta) in closed form, dpgen.privacy.local)")
    ledger = Ledger(epsilon=epsilon, delta=delta, sampling=mechanism.sampling, sample_rate=mechanism.sample_rate,
                    prefix=tuple(mechanism.prefix), rel_tol=rel_tol, accountant=accountant, reason=reason)
    if mechanism.noise_multiplier is None:
        if int(steps) <= 0:
            raise PrivacyParameterError("the noise is calibrated to the budget at the run's length, but no steps were "
                                        "given: give the steps, or a noise multiplier")
        ledger.calibrate(int(steps))
    else:
        ledger.use_noise(float(mechanism.noise_multiplier))
        # its releases before training fit the budget; whether a step fits is the run's question (a report may
        # account a noise that allows none): check_declared(ledger, steps) before it trains
        check_declared(ledger)
    return ledger


def projected_calibration(mechanism: ProjectedGaussian, ledger: Ledger, delta: float,
                          max_steps: Optional[int] = None) -> Dict[str, Any]:
    """The noise std of a :class:`ProjectedGaussian` run whose ledger (:func:`make_ledger`) is ``ledger``: sigma =
    z sqrt(w), w the directions' squared-sensitivity bound at delta_bound (the rest of ``delta``).

    Each step draws fresh directions, and the bound fails with probability delta_bound per draw. The differing
    record enters a step with probability q, independently of the directions, so over T steps the bound fails
    for it with probability <= q T delta_bound' (union bound). With ``union_bound`` (the default) a random-
    direction bound (bernstein, chernoff) is evaluated at delta_bound' = delta_bound / max(1, q T), T the most
    steps the budget allows, so the run's delta is delta_bound + delta_rdp as reported; ``union_bound=False`` is
    the paper's per-step reading (reproduction only). ``max_steps``: ``ledger.max_steps()`` when the caller has it."""
    from dpgen.privacy.projection import sensitivity_bound, split_delta

    m = mechanism
    db, dr = split_delta(delta, m.convention, m.delta_split, None, None, m.bound)
    z = float(ledger.noise_multiplier)
    w = sensitivity_bound(m.k, m.d, db, bound=m.bound, convention=m.convention)
    cal = {"sigma": z * math.sqrt(w), "noise_multiplier": z, "squared_sensitivity": w, "delta_bound": db,
           "delta_rdp": dr, "bound": m.bound, "convention": m.convention}
    if m.union_bound and m.bound in ("bernstein", "chernoff"):
        touches = max(1.0, ledger.sample_rate * float(ledger.max_steps() if max_steps is None else max_steps))
        per_step = db / touches
        w = sensitivity_bound(m.k, m.d, per_step, bound=m.bound, convention=m.convention)
        cal.update(squared_sensitivity=w, delta_bound_per_step=per_step, sigma=z * w ** 0.5,
                   steps_touching_a_record=touches)
    return cal


__all__ = ["LocalRelease", "Mechanism", "ONE_SHOT_REASON", "OneShotGaussian", "ProjectedGaussian", "SubsampledGaussian",
           "accountant_for", "check_declared", "make_ledger", "one_shot_epsilon", "one_shot_noise",
           "projected_calibration"]
