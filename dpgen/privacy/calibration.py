"""Calibration: the noise multiplier reaching a target (epsilon, delta).

Epsilon of the subsampled Gaussian mechanism decreases monotonically in the noise multiplier,
so the target is bracketed and the root found by bisection on log(noise multiplier) (Brent's
safeguarded bisection, which needs fewer accountant calls than plain halving), to ``rel_tol``
relative precision. The value returned is the upper end of the final bracket, whose epsilon is
checked to be <= the target: a calibrated run never overspends.
"""

from __future__ import annotations

import math
from typing import Optional

from scipy.optimize import brentq

from dpgen.privacy.accountants import check_sampling, epsilon_for
from dpgen.privacy.validation import (
    PrivacyParameterError,
    check_delta,
    check_epsilon,
    check_positive,
    check_positive_int,
    check_sample_rate,
)


def steps_for_epochs(n: int, batch_size: int, epochs: float) -> int:
    """Number of steps of ``epochs`` passes over ``n`` samples with ``batch_size`` per step.

    One epoch is ceil(n / batch_size) steps (the last batch may be smaller), the convention of a
    PyTorch DataLoader without ``drop_last``.
    """
    n = check_positive_int(n, "N", "the number of private samples")
    b = check_positive_int(batch_size, "batch_size")
    if b > n:
        raise PrivacyParameterError(f"batch_size={b} is invalid: it must be <= N={n}.")
    e = check_positive(epochs, "epochs")
    return int(math.ceil(e * math.ceil(n / b)))


#: fast accountants with the same RDP curve, used for the calibration's first guess
SURROGATES = {"without_replacement": "wang_wor", "poisson": "moments"}


def calibrate_noise_multiplier(epsilon: float, delta: float, sample_rate: float, steps: int,
                               sampling: str = "without_replacement", accountant: str = "rdp", rel_tol: float = 1e-3,
                               z0: Optional[float] = None) -> float:
    """Smallest noise multiplier (to ``rel_tol``) whose epsilon after ``steps`` steps is <= target.

    A guess comes from ``z0`` or, by default, from a fast surrogate accountant computing the same
    RDP curve in vectorised numpy (``wang_wor`` for sampling without replacement, ``moments`` for
    Poisson; they agree with autodp to ~1e-6); else two secant steps on (log z, log epsilon). A
    bracket [lo, hi] of the root is grown from the guess with the requested accountant, then
    bisected (Brent's safeguarded bisection on log z) until hi / lo <= 1 + rel_tol. Returns hi,
    checked to satisfy epsilon(hi) <= target: a calibrated run never overspends. With the
    surrogate's guess this takes 2-4 calls of the requested accountant.

    >>> z = calibrate_noise_multiplier(10, 1e-5, sample_rate=100 / 60000, steps=60000)
    >>> 0.5 < z < 2
    True
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    q = check_sample_rate(sample_rate)
    steps = check_positive_int(steps, "steps")
    sampling = check_sampling(sampling)
    rel_tol = check_positive(rel_tol, "rel_tol")
    surrogate = SURROGATES.get(sampling)
    guess = None
    if z0 is None and accountant in ("rdp", "opacus_rdp", "opacus_prv") and surrogate:
        try:
            guess = calibrate_noise_multiplier(epsilon, delta, q, steps, sampling, surrogate, rel_tol / 4, 1.0)
        except PrivacyParameterError:
            guess = None  # the surrogate's RDP orders cannot reach so small an epsilon: the accountant itself may
    if guess is not None:
        z0, secant = guess, False
    else:
        z0 = check_positive(1.0 if z0 is None else z0, "z0", "an initial guess of the noise multiplier")
        secant = True
    target = math.log(epsilon)
    cache = {}

    def f(x: float) -> float:  # log epsilon(e^x) - log target; decreasing in x
        if x not in cache:
            e = epsilon_for(math.exp(x), q, steps, delta, sampling, accountant)
            cache[x] = math.log(e) - target if e > 0 else -math.inf
        return cache[x]

    # 1. secant guess
    x0, x1 = math.log(z0), math.log(z0) + 0.5
    if not secant:
        x1 = x0
    for _ in range(2 if secant else 0):
        f0, f1 = f(x0), f(x1)
        if not (math.isfinite(f0) and math.isfinite(f1)) or f1 == f0:
            break
        x0, x1 = x1, min(max(x1 - f1 * (x1 - x0) / (f1 - f0), x1 - 3.0), x1 + 3.0)
    guess = x1
    # 2. bracket around the guess, growing the step until the sign changes
    step = math.log1p(rel_tol)
    lo = hi = guess
    if f(guess) > 0:
        while f(hi) > 0:
            lo, hi = hi, hi + step
            step *= 4
            if hi > math.log(1e6):
                raise PrivacyParameterError(
                    f"epsilon={epsilon} at delta={delta} cannot be reached with {steps} steps at "
                    f"sample rate {q} even with a noise multiplier of 1e6: raise epsilon or delta, "
                    "or take fewer steps."
                )
    else:
        while f(lo) <= 0:
            hi, lo = lo, lo - step
            step *= 4
            if lo < math.log(1e-4):
                return math.exp(hi)
    # 3. bisection (Brent) on log z to rel_tol
    if hi - lo > math.log1p(rel_tol):
        root = brentq(f, lo, hi, xtol=math.log1p(rel_tol) / 4, rtol=1e-12)
        hi = root + math.log1p(rel_tol) / 4
    z = math.exp(hi)
    while f(math.log(z)) > 0:  # never overspend (accountant round-off)
        z *= 1 + rel_tol / 4
    return z


def calibrate(
    epsilon: float,
    delta: float,
    n: int,
    batch_size: int,
    epochs: Optional[float] = None,
    steps: Optional[int] = None,
    sampling: str = "without_replacement",
    accountant: str = "rdp",
    sensitivity: float = 1.0,
    rel_tol: float = 1e-3,
) -> dict:
    """Noise std reaching (epsilon, delta) for N samples, a batch size and epochs or steps.

    Returns ``{"noise_multiplier", "sigma" (= noise_multiplier * sensitivity), "steps",
    "sample_rate", "epsilon_reached", ...}``.
    """
    n = check_positive_int(n, "N")
    batch_size = check_positive_int(batch_size, "batch_size")
    if batch_size > n:
        raise PrivacyParameterError(f"batch_size={batch_size} is invalid: it must be <= N={n}.")
    if steps is None and epochs is None:
        raise PrivacyParameterError("give epochs or steps: calibration needs the length of training.")
    if steps is None:
        steps = steps_for_epochs(n, batch_size, epochs)
    steps = check_positive_int(steps, "steps")
    sensitivity = check_positive(sensitivity, "sensitivity")
    q = batch_size / n
    z = calibrate_noise_multiplier(epsilon, delta, q, steps, sampling, accountant, rel_tol)
    return {
        "noise_multiplier": z,
        "sigma": z * sensitivity,
        "sensitivity": sensitivity,
        "steps": steps,
        "sample_rate": q,
        "sampling": sampling,
        "accountant": accountant,
        "epsilon_target": epsilon,
        "delta": delta,
        "epsilon_reached": epsilon_for(z, q, steps, delta, sampling, accountant),
    }


def steps_to_epsilon(epsilon: float, delta: float, noise_multiplier: float, sample_rate: float,
                     sampling: str = "poisson", accountant: str = "rdp", max_steps: int = 10**9) -> int:
    """Largest number of steps whose epsilon stays <= ``epsilon`` (0 if even one step exceeds it).

    Found by doubling then bisection on the integer number of steps (epsilon grows with steps).
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    z = check_positive(noise_multiplier, "noise_multiplier")
    q = check_sample_rate(sample_rate)

    def gap(t: int) -> float:
        return epsilon_for(z, q, t, delta, sampling, accountant) - epsilon

    if gap(1) > 0:
        return 0
    # bracket by growing x8 from 1000 steps (a few calls), then Brent on log(steps)
    lo, hi = 1, 1000
    while gap(hi) <= 0:
        lo, hi = hi, hi * 8
        if hi > max_steps:
            return max_steps if gap(max_steps) <= 0 else steps_to_epsilon(
                epsilon, delta, z, q, sampling, accountant, max_steps=max_steps // 2)
    f = lambda x: gap(int(round(math.exp(x))))  # noqa: E731
    root = brentq(f, math.log(lo), math.log(hi), xtol=1e-7, rtol=1e-9)
    t = max(1, int(math.floor(math.exp(root))))
    # settle the integer: the largest t with gap(t) <= 0
    while t > 1 and gap(t) > 0:
        t -= 1
    while gap(t + 1) <= 0:
        t += 1
    return t
