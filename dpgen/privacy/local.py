"""Local mechanisms of the entropic-LDP GAN paper (section 2.1 and 4.1).

Each record is projected on a ball (l1 for the Laplace mechanism, l2 for the Gaussian one) of
radius ``r`` and then noised once, before any training.

Sensitivity. Under local DP any two inputs are neighbours, so the sensitivity of the identity
on a ball of radius r is its diameter, 2r. The paper's text sets the sensitivity "equal to the
radius of the ball"; that halves the noise and, for a ball centred at 0, doubles the true
epsilon. We default to the diameter (``sensitivity="diameter"``) and keep the paper's choice as
``sensitivity="radius"`` for reproduction only.

* Laplace: scale b = Delta_1 / epsilon gives epsilon-LDP.
* Gaussian: std s from the analytic Gaussian mechanism (Balle & Wang 2018), valid for every
  epsilon > 0; ``calibration="classic"`` gives s = Delta_2 sqrt(2 ln(1.25/delta)) / epsilon,
  the textbook formula (Dwork & Roth, Thm A.1), which is only proven for epsilon < 1.
"""

from __future__ import annotations

import math
import warnings
from typing import Optional

import numpy as np

from dpgen.privacy.validation import (
    PrivacyParameterError,
    check_delta,
    check_epsilon,
    check_positive,
)

SENSITIVITY_CHOICES = ("diameter", "radius")


def project_l2_ball(x: np.ndarray, radius: float) -> np.ndarray:
    """Project each row of ``x`` on the l2 ball of ``radius`` (rows inside are unchanged). A row with a
    non-finite value maps to the ball's centre 0 (inside the ball: the mechanism's sensitivity holds for
    every input, and the release stays finite)."""
    radius = check_positive(radius, "radius", "the ball radius is the data's bound")
    x = _finite_rows(x)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.linalg.norm(x, axis=1, keepdims=True)
    scale = np.where(np.isfinite(norms), np.minimum(1.0, radius / np.maximum(norms, 1e-300)), 0.0)
    return x * scale


def _finite_rows(x) -> np.ndarray:
    """``x`` as float64 rows, each row holding a non-finite value replaced by zeros."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        x = x.copy()
        x[bad] = 0.0
    return x


def project_l1_ball(x: np.ndarray, radius: float) -> np.ndarray:
    """Euclidean projection of each row on the l1 ball of ``radius`` (Duchi et al. 2008).

    Soft-thresholding with the threshold theta that makes the l1 norm equal to the radius,
    found by sorting the absolute values.
    """
    radius = check_positive(radius, "radius", "the ball radius is the data's bound")
    x = _finite_rows(x)  # a row with a non-finite value maps to 0 (see project_l2_ball)
    out = x.copy()
    with np.errstate(over="ignore"):
        a = np.abs(x)
        outside = a.sum(axis=1) > radius
    if not outside.any():
        return out
    v = a[outside]
    u = -np.sort(-v, axis=1)
    css = np.cumsum(u, axis=1)
    j = np.arange(1, v.shape[1] + 1)
    cond = u - (css - radius) / j > 0
    rho = cond.shape[1] - 1 - np.argmax(cond[:, ::-1], axis=1)  # last index where cond holds
    theta = (css[np.arange(len(v)), rho] - radius) / (rho + 1)
    out[outside] = np.sign(x[outside]) * np.maximum(v - theta[:, None], 0.0)
    return out


def _sensitivity(radius: float, sensitivity: str) -> float:
    if sensitivity not in SENSITIVITY_CHOICES:
        raise PrivacyParameterError(
            f"sensitivity={sensitivity!r} is unknown: choose 'diameter' (2r, correct for LDP) or "
            "'radius' (r, the paper's text, for reproduction only)."
        )
    return 2.0 * radius if sensitivity == "diameter" else radius


def laplace_scale(epsilon: float, radius: float, sensitivity: str = "diameter") -> float:
    """Laplace scale b = Delta_1 / epsilon for epsilon-LDP of records in an l1 ball of ``radius``."""
    epsilon = check_epsilon(epsilon)
    radius = check_positive(radius, "radius")
    return _sensitivity(radius, sensitivity) / epsilon


def analytic_gaussian_sigma(epsilon: float, delta: float, l2_sensitivity: float = 1.0) -> float:
    """Smallest std s with (epsilon, delta)-DP for the Gaussian mechanism (Balle & Wang 2018).

    delta(s) = Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D) decreases in s; solved by
    bisection on log s to 1e-10 relative.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    D = check_positive(l2_sensitivity, "l2_sensitivity")

    def delta_of(s: float) -> float:
        a, b = D / (2 * s), epsilon * s / D
        from scipy.stats import norm  # imported where used (0.4 s at every interpreter start)

        return norm.cdf(a - b) - math.exp(epsilon + norm.logcdf(-a - b))  # e^eps Phi(.) without overflow

    return geometric_bisect(lambda s: delta_of(s) > delta, 1e-6 * D, D)


def geometric_bisect(too_small, lo: float, hi: float, rel_tol: float = 1e-10) -> float:
    """The smallest positive x with ``too_small(x)`` False (``too_small`` True below it, False above),
    to ``rel_tol`` relative: ``hi`` doubled until it is not too small, then bisection on log x."""
    while too_small(hi):
        hi *= 2
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if too_small(mid):
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + rel_tol:
            break
    return hi


def gaussian_sigma(epsilon: float, delta: float, radius: float, sensitivity: str = "diameter",
                   calibration: str = "analytic") -> float:
    """Gaussian std for (epsilon, delta)-LDP of records in an l2 ball of ``radius``."""
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    radius = check_positive(radius, "radius")
    D = _sensitivity(radius, sensitivity)
    if calibration == "analytic":
        return analytic_gaussian_sigma(epsilon, delta, D)
    if calibration == "classic":
        if epsilon >= 1:
            warnings.warn(
                f"calibration='classic' is only proven for epsilon < 1 (got epsilon={epsilon}); "
                "use calibration='analytic' for a valid guarantee.",
                stacklevel=2,
            )
        return D * math.sqrt(2 * math.log(1.25 / delta)) / epsilon
    raise PrivacyParameterError(
        f"calibration={calibration!r} is unknown: choose 'analytic' or 'classic'."
    )


def laplace_mechanism(
    x: np.ndarray,
    epsilon: float,
    radius: float,
    rng: Optional[np.random.Generator] = None,
    sensitivity: str = "diameter",
    project: bool = True,
) -> tuple:
    """epsilon-LDP: project each row on the l1 ball of ``radius``, add Laplace(b) noise.

    Returns ``(privatised, b)``. With ``project=False`` the caller guarantees ||x||_1 <= radius
    (checked).
    """
    rng = np.random.default_rng() if rng is None else rng
    b = laplace_scale(epsilon, radius, sensitivity)
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    if project:
        x = project_l1_ball(x, radius)
    elif not np.all(np.abs(x).sum(axis=1) <= radius * (1 + 1e-9)):  # NaN fails too
        raise PrivacyParameterError(
            f"radius={radius} is too small: a record lies outside the l1 ball of that radius (its norm is not "
            "printed: it is computed from a private record); set project=True or a larger radius."
        )
    return x + rng.laplace(0.0, b, size=x.shape), b


def gaussian_mechanism(
    x: np.ndarray,
    epsilon: float,
    delta: float,
    radius: float,
    rng: Optional[np.random.Generator] = None,
    sensitivity: str = "diameter",
    calibration: str = "analytic",
    project: bool = True,
) -> tuple:
    """(epsilon, delta)-LDP: project each row on the l2 ball of ``radius``, add N(0, s^2) noise.

    Returns ``(privatised, s)``.
    """
    rng = np.random.default_rng() if rng is None else rng
    s = gaussian_sigma(epsilon, delta, radius, sensitivity, calibration)
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    if project:
        x = project_l2_ball(x, radius)
    elif not np.all(np.linalg.norm(x, axis=1) <= radius * (1 + 1e-9)):  # NaN fails too
        raise PrivacyParameterError(
            f"radius={radius} is too small: a record lies outside the l2 ball of that radius (its norm is not "
            "printed: it is computed from a private record); set project=True or a larger radius."
        )
    return x + rng.normal(0.0, s, size=x.shape), s
