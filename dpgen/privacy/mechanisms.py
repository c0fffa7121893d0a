"""What a method releases, declared; the ledger that accounts it, built here (opacus' shape: methods declare, the
library builds).

A method states its mechanism as a small value and asks :func:`make_ledger` for the calibrated ledger:

* :class:`SubsampledGaussian`: every step releases a statistic of a batch sampled at rate q (``poisson``: each
  record independently, add/remove one record; ``without_replacement``: fixed-size batches, replace one record)
  with Gaussian noise of std ``noise_multiplier`` x its sensitivity; optional full-batch releases before training
  (``prefix``, each accounted once). DP-SGD, DP-DANN, DP-Sinkhorn and DP-SWD's projection declare one.
* :class:`OneShotGaussian`: one full-batch Gaussian release, then post-processing only (DP-MERF's mean embedding).

``make_ledger(mechanism, epsilon=, delta=, steps=, accountant=, rel_tol=)`` returns the :class:`Ledger` with its
noise set: calibrated to the budget at ``steps`` when the mechanism leaves ``noise_multiplier`` unset, else the
given noise with the budget deciding how many steps it allows (``ledger.max_steps()``: the budget's stop). The
ledger's ``report()`` is the accounting report. Plain numbers in, no configuration object: this module knows
mechanisms, never methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple, Union

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


@dataclass(frozen=True)
class OneShotGaussian:
    """One full-batch Gaussian release at ``noise_multiplier`` (calibrated by the method, whose sensitivity it is),
    then post-processing: no per-step cost and no budget stop. ``calibrated``: whether the method solved the noise
    for the budget (the report says which)."""

    noise_multiplier: float
    calibrated: bool = True


Mechanism = Union[SubsampledGaussian, OneShotGaussian]


def make_ledger(mechanism: Mechanism, *, epsilon: float, delta: float, steps: int = 0, accountant: str = "auto",
                rel_tol: float = 1e-3, reason: Optional[str] = None) -> Ledger:
    """The calibrated ledger of ``mechanism`` under (``epsilon``, ``delta``) for a run of ``steps`` steps."""
    if isinstance(mechanism, OneShotGaussian):
        ledger = Ledger(epsilon=epsilon, delta=delta, sampling="without_replacement", sample_rate=1.0,
                        prefix=(float(mechanism.noise_multiplier),), rel_tol=rel_tol, accountant="rdp", reason=reason)
        ledger.calibrated = bool(mechanism.calibrated)
        return ledger
    if not isinstance(mechanism, SubsampledGaussian):
        raise TypeError(f"make_ledger: {mechanism!r} is not a mechanism this library accounts "
                        "(SubsampledGaussian or OneShotGaussian)")
    ledger = Ledger(epsilon=epsilon, delta=delta, sampling=mechanism.sampling, sample_rate=mechanism.sample_rate,
                    prefix=tuple(mechanism.prefix), rel_tol=rel_tol, accountant=accountant, reason=reason)
    if mechanism.noise_multiplier is None:
        if int(steps) <= 0:
            raise PrivacyParameterError("the noise is calibrated to the budget at the run's length, but no steps were "
                                        "given: give the steps, or a noise multiplier")
        ledger.calibrate(int(steps))
    else:
        ledger.use_noise(float(mechanism.noise_multiplier))
    return ledger


__all__ = ["Mechanism", "OneShotGaussian", "SubsampledGaussian", "make_ledger"]
