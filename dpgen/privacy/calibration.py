"""Calibration: the noise multiplier reaching a target (epsilon, delta).

Epsilon of the subsampled Gaussian mechanism decreases monotonically in the noise multiplier,
so the target is bracketed and the root found by bisection on log(noise multiplier) (Brent's
safeguarded bisection, which needs fewer accountant calls than plain halving), to ``rel_tol``
relative precision. The value returned is the upper end of the final bracket, whose epsilon is
checked to be <= the target: a calibrated run never overspends.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from scipy.optimize import brentq

from dpgen.privacy.accountants import (PLD_COARSE_INTERVAL, PLD_GUIDE_MAX_STEPS, check_sampling, epsilon_for,
                                       pld_epsilon, resolve_accountant)
from dpgen.privacy.validation import (
    PrivacyParameterError,
    check_delta,
    check_epsilon,
    check_positive,
    check_positive_int,
    check_sample_rate,
)


def requested_steps(steps: Optional[int], epochs: Optional[float], n: int, batch_size: int) -> int:
    """A run's steps: ``steps`` when given (trainer.steps), else ``epochs`` passes over the declared ``n``
    (:func:`steps_for_epochs`). The one rule, for a run (``Task.requested_steps``) and for ``task=accounting``."""
    return int(steps) if steps is not None else steps_for_epochs(n, batch_size, epochs)


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

#: accountant=pld: a calibrated noise multiplier spends at most the target epsilon and at least this much less
#: (absolute, in epsilon); PLD's epsilon is smooth in the noise (about 1e-5 per 1e-4 relative change at
#: epsilon 10), so the window is met in a few accountant calls
PLD_EPSILON_TOL = 1e-3


def solve_noise(eps_of: Callable[[float], float], epsilon: float, z0: float, tol: float = PLD_EPSILON_TOL,
                guide: Optional[Callable[[float], float]] = None, max_calls: int = 40) -> float:
    """A noise multiplier z with ``epsilon - tol <= eps_of(z) <= epsilon`` (``eps_of`` decreasing in z).

    ``z0``: where the search starts (for PLD: the root of an RDP bound of the same composition, which spends
    at most ``epsilon`` under PLD too). ``guide``: a cheap approximation of ``eps_of`` (PLD on a 10x coarser
    grid, about 10x faster), solved first; its root is where the search on ``eps_of`` starts, usually one or two
    calls away. The search runs on (log z, log epsilon), where the curve is close to a line: secant steps until
    the target is bracketed, then false position with the Illinois rule, aiming at the middle of the window.
    The value returned never spends more than ``epsilon``."""
    if not tol > 0 or not epsilon > tol:
        raise PrivacyParameterError(f"tol={tol} is invalid for epsilon={epsilon}: need 0 < tol < epsilon")
    z0 = check_positive(z0, "z0", "a guess of the noise multiplier")
    if guide is not None:
        try:
            z0 = solve_noise(guide, epsilon, z0, tol, max_calls=max_calls)
        except PrivacyParameterError:
            pass  # the guide does not reach the target: the search on eps_of itself says whether it is reachable
    aim = math.log(epsilon - tol / 2)
    calls = 0

    def g(x: float) -> float:  # log epsilon - log aim at noise e^x; decreasing in x
        nonlocal calls
        calls += 1
        e = float(eps_of(math.exp(x)))
        if epsilon - tol <= e <= epsilon:
            raise _Found(x)
        return math.log(e) - aim if e > 0 else -math.inf

    lo = hi = None  # (log z, g): the largest noise seen that spends too much, the smallest that spends too little
    side = 0  # Illinois: which end moved last (+1 hi, -1 lo)
    x, last = math.log(z0), None
    try:
        while calls < max_calls:
            if x > math.log(1e6):
                raise PrivacyParameterError(f"epsilon={epsilon} cannot be reached even with a noise multiplier of "
                                            "1e6: raise epsilon or delta, or take fewer steps.")
            gx = g(x)
            if gx > 0:  # too little noise
                if lo is not None and hi is not None and side == -1:
                    hi = (hi[0], hi[1] / 2)
                lo, side = (x, gx), -1
            else:
                if lo is not None and hi is not None and side == 1:
                    lo = (lo[0], lo[1] / 2)
                hi, side = (x, gx), 1
            if lo is not None and hi is not None:  # bracketed: false position (Illinois)
                (xl, gl), (xh, gh) = lo, hi
                if hi[0] - lo[0] < 1e-12:
                    break
                x = xh - gh * (xh - xl) / (gh - gl) if math.isfinite(gl) and math.isfinite(gh) else (xl + xh) / 2
                if not xl < x < xh:
                    x = (xl + xh) / 2
            else:  # one side only: a secant step from the last two points (d log eps / d log z is about -2)
                slope = -2.0
                if last is not None and last[0] != x and math.isfinite(last[1]) and math.isfinite(gx):
                    slope = min(-0.25, (gx - last[1]) / (x - last[0]))
                last = (x, gx)
                step = -gx / slope if math.isfinite(gx) else (1.0 if gx > 0 else -1.0)
                x = x + max(-1.0, min(1.0, step))  # at most a factor e of noise per step
    except _Found as found:
        return math.exp(found.x)
    if hi is None:
        raise PrivacyParameterError(f"epsilon={epsilon}: no noise multiplier found within {max_calls} accountant calls")
    return math.exp(hi[0])  # spends less than epsilon - tol (a curve that jumps there): safe


class _Found(Exception):
    def __init__(self, x: float) -> None:
        super().__init__(x)
        self.x = x


def largest_steps(eps_of: Callable[[int], float], epsilon: float, start: int, cap: int = 10**9,
                  guide: Optional[Callable[[int], float]] = None) -> int:
    """The largest integer t <= ``cap`` with ``eps_of(t) <= epsilon`` (``eps_of`` increasing in t; 0 when even one
    step spends more).

    ``start``: a first guess (for PLD: the answer of an RDP bound, which spends more, so its steps fit);
    ``guide``: a cheap approximation of ``eps_of`` (PLD on a coarser grid) whose answer is found first and
    becomes the guess. Secant steps on (log t, log epsilon) until the target is bracketed, then interpolation
    inside the bracket, each candidate checked with its neighbour (the integer is settled when the estimate
    was right), and bisection when a step does not halve the bracket."""
    cap = max(1, int(cap))
    if guide is not None:
        start = max(1, largest_steps(guide, epsilon, start, cap))
    target = math.log(epsilon)
    memo: dict = {}

    def e(t: int) -> float:
        if t not in memo:
            memo[t] = float(eps_of(t))
        return memo[t]

    t = min(max(1, int(start)), cap)
    lo = hi = None  # the most steps seen that fit, the fewest that do not
    last = None
    while hi is None or lo is None:
        et = e(t)
        if et <= epsilon:
            lo = t
            if t >= cap:
                return cap
        else:
            hi = t
            if t == 1:
                return 0
        if lo is not None and hi is not None:
            break
        slope = 0.5  # d log eps / d log t: about 1/2 (composition), up to 1
        if last is not None and last[0] != t and et > 0 and last[1] > 0:
            slope = max(0.05, (math.log(et) - math.log(last[1])) / (math.log(t) - math.log(last[0])))
        last = (t, et)
        guess = t * math.exp((target - math.log(et)) / slope) if et > 0 else 2 * t
        if lo is not None:  # grow: at least one step, at most 16x
            t = min(max(int(math.floor(guess)), t + 1), 16 * t, cap)
        else:  # shrink: at least one step, at most 16x
            t = max(min(int(math.floor(guess)), t - 1), t // 16, 1)
    while hi - lo > 1:
        width = hi - lo
        elo, ehi = e(lo), e(hi)
        if 0 < elo < ehi:
            frac = (target - math.log(elo)) / (math.log(ehi) - math.log(elo))
            t = int(math.floor(math.exp(math.log(lo) + frac * (math.log(hi) - math.log(lo)))))
        else:
            t = (lo + hi) // 2
        t = min(max(t, lo + 1), hi - 1)
        if e(t) <= epsilon:
            lo = t
            if t + 1 < hi:  # its neighbour settles the integer when the estimate was right
                if e(t + 1) > epsilon:
                    return t
                lo = t + 1
        else:
            hi = t
            if t - 1 > lo:
                if e(t - 1) <= epsilon:
                    return t - 1
                hi = t - 1
        if hi - lo > max(1, width // 2):  # the interpolation stalled: bisect once
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if e(mid) <= epsilon else (lo, mid)
    return lo


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

    ``accountant="pld"`` (dp-accounting's PLD, Poisson sampling; what ``auto`` means for it): the noise spends
    at most ``epsilon`` and within :data:`PLD_EPSILON_TOL` of it (a precision in epsilon, not ``rel_tol``),
    found by :func:`solve_noise` from the RDP bound's root (PLD <= RDP, so PLD's noise is below it), guided by
    PLD on a coarser grid: one RDP calibration (autodp, fast), a few coarse PLD evaluations (0.03-0.2 s each)
    and one or two on dp-accounting's default grid (0.3-1.5 s each).

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
    accountant = resolve_accountant(accountant, sampling)
    if accountant == "pld":
        try:  # the RDP bound's noise spends at most epsilon under PLD too: the search starts there
            z_hi = calibrate_noise_multiplier(epsilon, delta, q, steps, sampling, "rdp", rel_tol, z0)
        except PrivacyParameterError:
            z_hi = 1.0 if z0 is None else z0
        coarse = lambda z: pld_epsilon(((float(z), q, steps),), delta, PLD_COARSE_INTERVAL)  # noqa: E731
        return solve_noise(lambda z: epsilon_for(z, q, steps, delta, sampling, "pld"), epsilon, z_hi,
                           guide=coarse if steps <= PLD_GUIDE_MAX_STEPS else None)
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

    lo, hi, small = _bracket(f, _secant_guess(f, math.log(z0), secant), rel_tol, epsilon, delta, steps, q)
    if small:  # a noise multiplier below 1e-4 already spends less than epsilon
        return math.exp(hi)
    # 3. bisection (Brent) on log z to rel_tol
    if hi - lo > math.log1p(rel_tol):
        root = brentq(f, lo, hi, xtol=math.log1p(rel_tol) / 4, rtol=1e-12)
        hi = root + math.log1p(rel_tol) / 4
    z = math.exp(hi)
    while f(math.log(z)) > 0:  # never overspend (accountant round-off)
        z *= 1 + rel_tol / 4
    return z


def _bracket(f, guess: float, rel_tol: float, epsilon, delta, steps, q) -> "tuple[float, float, bool]":
    """2. (lo, hi, below 1e-4) around the root of ``f`` in log z, growing the step from ``guess`` until the sign
    changes; a PrivacyParameterError when even 1e6 does not reach epsilon."""
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
                return lo, hi, True
    return lo, hi, False


def _secant_guess(f, x0: float, secant: bool) -> float:
    """1. Up to two secant steps on (log z, f) from ``x0`` (none when the surrogate gave the guess)."""
    x1 = x0 + 0.5 if secant else x0
    for _ in range(2 if secant else 0):
        f0, f1 = f(x0), f(x1)
        if not (math.isfinite(f0) and math.isfinite(f1)) or f1 == f0:
            break
        x0, x1 = x1, min(max(x1 - f1 * (x1 - x0) / (f1 - f0), x1 - 3.0), x1 + 3.0)
    return x1


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
    accountant = resolve_accountant(accountant, check_sampling(sampling))
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
    ``accountant="pld"``: from the RDP bound's answer (which spends more, so its steps fit), by
    :func:`largest_steps` guided by PLD on a coarser grid (typically 3-5 PLD evaluations on the default grid).
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    z = check_positive(noise_multiplier, "noise_multiplier")
    q = check_sample_rate(sample_rate)
    accountant = resolve_accountant(accountant, check_sampling(sampling))
    if accountant == "pld":
        floor = steps_to_epsilon(epsilon, delta, z, q, sampling, "rdp", max_steps)
        coarse = lambda t: pld_epsilon(((z, q, int(t)),), delta, PLD_COARSE_INTERVAL)  # noqa: E731
        return largest_steps(lambda t: epsilon_for(z, q, t, delta, sampling, "pld"), epsilon, max(1, floor),
                             cap=max_steps, guide=coarse if floor <= PLD_GUIDE_MAX_STEPS // 4 else None)

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
