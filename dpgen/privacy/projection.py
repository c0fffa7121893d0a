"""DP-SWD: sensitivity of random direction projections and its Gaussian mechanism (Rakotomamonjy & Ralaivola,
"Differentially Private Sliced Wasserstein Distance", ICML 2021, sections 2-3 and appendix 8.1-8.3).

For X, X' differing in one row by at most 1 in l2 norm and k directions U, the squared sensitivity of X U is a sum
of k Beta(1/2, (d-1)/2) variables; this module bounds it (Bernstein, Lemma 2 / Eq. 6; Chernoff; CLT, an
approximation; ``frame``: stacked orthonormal blocks, exactly ceil(k / d)), draws the directions, and calibrates the
noise std sigma = noise_multiplier * sqrt(w) under two conventions (``paper_text``: Eq. 6 and Proposition 2 as
written; ``authors_code``: what reproduces the published Table 4).

Contract: every bound is of the *squared* sensitivity w; callers must bound each private row (any two within 1 in
l2 norm) before projecting; the probabilistic bounds hold per step, without a union bound over the T steps (the
method adds it). Bad parameters raise :class:`PrivacyParameterError` naming them. The lemmas, both conventions and
the caveat: docs/DPSWD.md, "The sensitivity of random projections".
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Dict, Optional

import numpy as np
from scipy import special
from scipy.optimize import brentq

from dpgen.privacy.accountants import epsilon_for
from dpgen.privacy.calibration import calibrate_noise_multiplier, steps_for_epochs
from dpgen.privacy.validation import (
    PrivacyParameterError,
    check_delta,
    check_epsilon,
    check_positive,
    check_positive_int,
)

BOUNDS = ("bernstein", "clt", "chernoff", "frame")
CONVENTIONS = ("paper_text", "authors_code")


class DPSWDWarning(UserWarning):
    """A DP-SWD bound is used outside the regime the paper states it for."""


# --------------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------------


def _check_kd(k, d):
    k = check_positive_int(k, "k", "the number of random projection directions")
    d = check_positive_int(d, "d", "the data dimension")
    return k, d


def _check_choice(value, name, choices):
    if value not in choices:
        raise PrivacyParameterError(
            f"{name}={value!r} is unknown: choose one of {', '.join(choices)}."
        )
    return value


# --------------------------------------------------------------------------------------------
# Lemma 1 / Lemma 2 / CLT bound
# --------------------------------------------------------------------------------------------


def beta_variance(d: int) -> float:
    """v_d = 2 (d-1) / (d^2 (d+2)): variance of Beta(1/2, (d-1)/2) (Remark 3)."""
    d = check_positive_int(d, "d", "the data dimension")
    return 2.0 * (d - 1) / (d * d * (d + 2.0))


def bernstein_bound(k: int, d: int, delta: float, convention: str = "paper_text") -> float:
    """w(k, delta) of Lemma 2 / Eq. 6: a (1 - delta) bound on the squared sensitivity.

    ``paper_text``: k/d + (2/3) ln(1/delta) + sqrt(2 k v_d ln(1/delta)), identical to Eq. 6's
    (2/d) sqrt(k (d-1)/(d+2) ln(1/delta)). ``authors_code``: k counted twice in the square root,
    sqrt(2 k (k v_d) ln(1/delta)) (larger by a factor sqrt(k) in that term).
    """
    k, d = _check_kd(k, d)
    delta = check_delta(delta)
    _check_choice(convention, "convention", CONVENTIONS)
    log_term = math.log(1.0 / delta)
    var_sum = k * beta_variance(d)  # sum of the k variances
    if convention == "authors_code":
        var_sum *= k
    return k / d + (2.0 / 3.0) * log_term + math.sqrt(2.0 * var_sum * log_term)


def clt_bound(k: int, d: int, delta: float, warn: bool = True) -> float:
    """The CLT approximation of section 3.1 / appendix 8.3: k/d + z_{1-delta} sqrt(k v_d).

    Equals k/d + (z_{1-delta}/d) sqrt(2 k (d-1)/(d+2)). Not a rigorous bound; the paper asks for
    k > 30 (a :class:`DPSWDWarning` is issued otherwise, unless ``warn=False``).
    """
    k, d = _check_kd(k, d)
    delta = check_delta(delta)
    if warn and k <= 30:
        warnings.warn(
            f"clt_bound with k={k} <= 30: the CLT approximation of DP-SWD (section 3.1) is only "
            "advocated for k > 30 and is not a rigorous bound; prefer bound='bernstein'.",
            DPSWDWarning,
            stacklevel=2,
        )
    from scipy import stats  # imported where used: scipy.stats costs 0.4 s at every interpreter start

    return k / d + float(stats.norm.isf(delta)) * math.sqrt(k * beta_variance(d))


def frame_bound(k: int, d: int) -> float:
    """Exact squared sensitivity of DP-SWD with *frame* directions (dpgen's addition).

    When U stacks m = ceil(k / d) blocks of orthonormal columns (:func:`orthogonal_directions`),
    U U^T = sum_j Q_j Q_j^T <= m I, so ||z^T U||^2 <= m ||z||^2 for every z: the sensitivity is
    sqrt(ceil(k / d)) with probability one (no delta spent on a bound). When d divides k, U U^T =
    (k / d) I exactly: the bound equals E||z^T U||^2 for uniform directions, the value the random
    bounds (Bernstein, CLT, Chernoff) only reach as delta -> 1/2.
    """
    k, d = _check_kd(k, d)
    return float(math.ceil(k / d))


def haar_columns(d: int, c: int, generator, device=None):
    """The first ``c`` columns of a Haar-random d x d orthogonal matrix (float64, torch).

    Distributed exactly as the Q factor (signs fixed so that diag(R) > 0) of the QR factorisation
    of a d x c Gaussian matrix, at about a third of its cost: Householder QR of a Gaussian matrix
    builds its j-th reflector from the trailing d - j entries of the updated j-th column, and by
    rotation invariance those are again i.i.d. N(0, 1) and independent of the earlier reflectors.
    So the reflectors are drawn directly from the lower triangle of a fresh Gaussian matrix (no
    trailing update, i.e. no ``geqrf``) and only their product is formed
    (``torch.linalg.householder_product``). The normals are drawn in float32 (5x cheaper than
    float64 on a CPU) and the reflectors built and multiplied in float64, so the columns are
    orthonormal to float64 rounding (~1e-15), which the deterministic frame sensitivity needs.
    """
    import torch
    from dpgen.utils.noise import gaussian

    g = gaussian((d, c), generator=generator, device=device).double().tril()  # x_j = g[j:, j]
    alpha = torch.diagonal(g).clone()
    norm = g.norm(dim=0)
    # LAPACK's larfg: beta = -sign(alpha) ||x_j||, tau = (beta - alpha) / beta, v = x_j[1:] / (alpha - beta)
    sign = torch.where(alpha >= 0, 1.0, -1.0).to(g.dtype)
    beta = -sign * norm
    tau = (beta - alpha) / beta
    v = g / (alpha - beta)  # below the diagonal: the reflector (its unit head is implicit)
    q = torch.linalg.householder_product(v, tau)  # H_1 ... H_c applied to I[:, :c]
    return q * -sign  # R_jj = beta_j: flip column j where beta_j < 0, the Haar convention diag(R) > 0


def orthogonal_directions(d: int, k: int, generator=None, dtype=None, device=None):
    """A d x k matrix of ceil(k / d) stacked random orthonormal blocks (the last one truncated):
    unit columns, each block a Haar-random orthonormal set, independent of the others.
    Marginally every column is uniform on S^{d-1}, as DP-SWD's directions, and the sensitivity is
    :func:`frame_bound` deterministically. Torch generator -> tensor (:func:`haar_columns`: the
    Householder reflectors of a Gaussian QR drawn directly); else numpy (QR of a Gaussian matrix,
    signs fixed).
    """
    d = check_positive_int(d, "d", "the data dimension")
    k = check_positive_int(k, "k", "the number of random projection directions")
    if _is_torch_generator(generator):
        import torch

        dev = device or generator.device
        blocks, left = [], k
        while left > 0:
            c = min(d, left)
            blocks.append(haar_columns(d, c, generator, dev))
            left -= c
        return torch.cat(blocks, dim=1).to(dtype or torch.float32)
    rng = np.random.default_rng(generator)
    blocks, left = [], k
    while left > 0:
        c = min(d, left)
        q, r = np.linalg.qr(rng.standard_normal((d, c)))
        blocks.append(q * np.where(np.diag(r) < 0, -1.0, 1.0))
        left -= c
    u = np.concatenate(blocks, axis=1)
    return u.astype(dtype, copy=False) if dtype is not None else u


FRAME_DIRECTIONS = ("structured", "haar")
STRUCTURED_ROUNDS = 3


def hartley(x):
    """The orthonormal discrete Hartley transform along the last dimension, any length n:
    (H x)_j = n^{-1/2} sum_i x_i (cos + sin)(2 pi i j / n). H is real, symmetric and orthogonal
    (H = H^T = H^{-1}); one FFT, O(n log n) per row, differentiable."""
    import torch

    f = torch.fft.fft(x, norm="ortho")
    return f.real - f.imag


class StructuredFrame:
    """k directions in R^d as ceil(k / d) blocks; block j is ``c_j`` columns, drawn without
    replacement, of the orthogonal d x d matrix M_j that maps a row r to
    r D_1 H D_2 H ... D_R H (R = ``rounds`` random-sign diagonals D and orthonormal Hartley
    transforms H, the structured random orthogonal transform of Yu et al. 2016, "Orthogonal Random
    Features", with the Hartley transform in place of Walsh-Hadamard so that any d works without
    padding). Every M_j is exactly orthogonal, so each block is an orthonormal set and
    U U^T <= ceil(k / d) I: the sensitivity is :func:`frame_bound`, as for Haar blocks. A column is
    not exactly uniform on the sphere (its first moments are: tests/methods/test_dpswd_frame.py), which
    matters for the SWD estimate only, never for the privacy bound.

    Applying it costs O(n d log d) for n rows (``frame(rows)``) instead of the O(d k^2) draw plus
    O(n d k) product of dense Haar blocks. Computed in float64 (orthogonal to ~1e-15) and returned
    in the rows' dtype. ``matrix()`` gives the dense d x k matrix (for tests and audits).
    """

    def __init__(self, signs, keep):
        self.signs = signs  # (blocks, rounds, d) of +-1, float64
        self.keep = keep  # a list of ``blocks`` index tensors, the columns kept from each M_j
        self.d = int(signs.shape[-1])
        self.k = int(sum(len(i) for i in keep))

    @classmethod
    def draw(cls, d: int, k: int, generator, device=None, rounds: int = STRUCTURED_ROUNDS):
        from dpgen.utils.noise import permutation, randint

        d = check_positive_int(d, "d", "the data dimension")
        k = check_positive_int(k, "k", "the number of random projection directions")
        dev = device or generator.device
        blocks = -(-k // d)
        signs = randint(2, (blocks, rounds, d), generator=generator, device=dev).double() * 2 - 1
        keep, left = [], k
        for _ in range(blocks):
            c = min(d, left)
            keep.append(permutation(d, generator=generator, device=dev)[:c])
            left -= c
        return cls(signs, keep)

    def __call__(self, rows):
        import torch

        if rows.shape[-1] != self.d:
            raise ValueError(f"the rows have dimension {rows.shape[-1]}, the frame was drawn for d={self.d}")
        out = []
        for j, idx in enumerate(self.keep):
            y = rows.double()
            for s in self.signs[j].to(rows.device):
                y = hartley(y * s)
            out.append(y[..., idx.to(rows.device)])
        return torch.cat(out, dim=-1).to(rows.dtype)

    def matrix(self, dtype=None):
        """The dense d x k matrix U with ``frame(rows) == rows @ U``, column by column: column c of
        M = D_1 H ... D_R H is M e_c = (e_c^T M^T)^T and M^T = H D_R ... H D_1 (H and D symmetric), so
        each kept column costs O(d log d) (k of them, not the d rows of an identity)."""
        import torch

        cols = []
        for j, idx in enumerate(self.keep):
            y = torch.zeros(len(idx), self.d, dtype=torch.float64, device=self.signs.device)
            y[torch.arange(len(idx), device=y.device), idx.to(y.device)] = 1.0
            for s in self.signs[j].flip(0).to(y.device):
                y = hartley(y) * s
            cols.append(y.T)
        u = torch.cat(cols, dim=1)
        return u.to(dtype) if dtype is not None else u


def frame_directions(d: int, k: int, generator, kind: str = "structured", dtype=None, device=None):
    """The directions of ``bound=frame``: ``structured`` (:class:`StructuredFrame`, an operator
    applied to rows, O(d log d) per row) or ``haar`` (:func:`orthogonal_directions`, a dense d x k
    matrix of Haar blocks). Both stack ceil(k / d) exactly orthonormal blocks: the same
    sensitivity, :func:`frame_bound`."""
    if kind == "structured":
        return StructuredFrame.draw(d, k, generator, device=device)
    if kind == "haar":
        return orthogonal_directions(d, k, generator=generator, dtype=dtype, device=device)
    raise ValueError(f"frame directions {kind!r} are unknown: choose one of {FRAME_DIRECTIONS}")


def sensitivity_bound(
    k: int, d: int, delta: float, bound: str = "bernstein", convention: str = "paper_text"
) -> float:
    """(1 - delta) bound w on the *squared* L2 sensitivity ||z^T U||^2 (||z|| <= 1).

    ``bound="bernstein"`` (Lemma 2, rigorous), ``"clt"`` (approximation, k > 30) or ``"chernoff"``
    (dpgen's addition: the exact Chernoff bound of the Beta sum, rigorous like Bernstein -- of which
    it is the unrelaxed form -- and much tighter; see :func:`squared_sensitivity_quantile`).
    ``convention`` only changes the Bernstein bound (the authors' code uses the CLT formula as
    written). The L2 sensitivity is ``sqrt(w)``.
    """
    _check_choice(bound, "bound", BOUNDS)
    _check_choice(convention, "convention", CONVENTIONS)
    if bound == "frame":  # orthogonal-frame directions: exact, no delta
        return frame_bound(k, d)
    if bound == "bernstein":
        return bernstein_bound(k, d, delta, convention=convention)
    if bound == "chernoff":
        # a hair above the root, so round-off in the root finding never lands below the bound
        return squared_sensitivity_quantile(k, d, delta, method="chernoff") * (1 + 1e-9)
    return clt_bound(k, d, delta)


# --------------------------------------------------------------------------------------------
# exact-ish quantiles of H = sum of k Beta(1/2, (d-1)/2) (used to check the bounds)
# --------------------------------------------------------------------------------------------


def _beta_cgf(theta: np.ndarray, d: int):
    """CGF K, K', K'' of Y ~ Beta(1/2, (d-1)/2) at theta: M(theta) = 1F1(1/2; d/2; theta)."""
    a, b = 0.5, d / 2.0
    with np.errstate(all="ignore"):
        m0 = special.hyp1f1(a, b, theta)
        m1 = (a / b) * special.hyp1f1(a + 1, b + 1, theta)
        m2 = (a * (a + 1) / (b * (b + 1))) * special.hyp1f1(a + 2, b + 2, theta)
        k0 = np.log(m0)
        k1 = m1 / m0
        k2 = m2 / m0 - k1 ** 2
    return k0, k1, k2


def squared_sensitivity_quantile(k: int, d: int, delta: float, method: str = "saddlepoint") -> float:
    """(1 - delta)-quantile of H = ||z^T U||^2 without simulation.

    * ``"saddlepoint"``: Lugannani-Rice tail approximation with the exact Beta CGF
      (relative error O(k^{-3/2}) on the tail probability; agrees with large simulations);
    * ``"chernoff"``: the point t where the exact Chernoff bound inf_theta E e^{theta (H - t)}
      equals delta -- a rigorous *upper* bound on the exact quantile, and never above the
      Bernstein bound (Bernstein's inequality is a relaxation of this Chernoff bound).
    """
    k, d = _check_kd(k, d)
    delta = check_delta(delta)
    _check_choice(method, "method", ("saddlepoint", "chernoff"))
    if d == 1:  # Y = 1 almost surely
        return float(k)
    mean = k / d
    log_delta = math.log(delta)

    def point(theta):
        k0, k1, k2 = _beta_cgf(theta, d)
        t = k * k1
        w2 = 2.0 * (theta * t - k * k0)
        return t, max(w2, 0.0), k2

    def log_tail(theta):
        t, w2, k2 = point(theta)
        if not (math.isfinite(t) and math.isfinite(w2) and math.isfinite(k2)):
            return -1e300  # hyp1f1 overflow: far beyond any delta of interest
        if method == "chernoff":
            return -w2 / 2.0
        w = math.sqrt(w2)
        u = theta * math.sqrt(k * k2)
        if w < 1e-6:
            return math.log(0.5)
        from scipy import stats

        p = stats.norm.sf(w) + stats.norm.pdf(w) * (1.0 / u - 1.0 / w)
        return math.log(max(p, 1e-300))

    # theta > 0 increases t = k K'(theta) from the mean towards k; bracket the root in theta
    lo, hi = 1e-8, 1.0
    while log_tail(hi) > log_delta:
        lo, hi = hi, hi * 2.0
        if hi > 1e7:
            break
    theta = brentq(lambda th: log_tail(th) - log_delta, lo, hi, xtol=1e-12, rtol=1e-12)
    t = point(theta)[0]
    return float(max(t, mean))


# --------------------------------------------------------------------------------------------
# simulation and the mechanism
# --------------------------------------------------------------------------------------------


def _is_torch_generator(generator) -> bool:
    try:
        from dpgen.utils.noise import is_generator  # needs torch
    except ImportError:  # pragma: no cover
        return False
    return is_generator(generator)  # a torch.Generator or the OS CSPRNG's SecureGenerator


def random_directions(d: int, k: int, generator=None, dtype=None, device=None):
    """A d x k matrix of k i.i.d. directions uniform on S^{d-1} (unit-norm columns).

    ``generator``: a ``numpy.random.Generator`` (or None, or an int seed) -> numpy array;
    a ``torch.Generator`` -> torch tensor (``dtype``/``device`` as given, default float32).
    Normalised standard Gaussian vectors are uniform on the sphere.
    """
    d = check_positive_int(d, "d", "the data dimension")
    k = check_positive_int(k, "k", "the number of random projection directions")
    if _is_torch_generator(generator):
        import torch
        from dpgen.utils.noise import gaussian

        u = gaussian((d, k), generator=generator, dtype=dtype or torch.float32, device=device or generator.device)
        return u / u.norm(dim=0, keepdim=True)
    rng = np.random.default_rng(generator)
    u = rng.standard_normal((d, k))
    u /= np.linalg.norm(u, axis=0, keepdims=True)
    return u.astype(dtype, copy=False) if dtype is not None else u


def gaussian_mechanism(X, U, sigma: float, generator=None):
    """M(X) = X U + V with V i.i.d. N(0, sigma^2) of shape (n, k) (section 2.1).

    Works on numpy arrays (``generator``: numpy Generator / seed / None) and torch tensors
    (``generator``: a torch.Generator or None). Each row of the output is a sanitised
    projection of a sample; DP-SWD is then the SWD between two such projected clouds.
    """
    sigma = float(sigma)
    if not math.isfinite(sigma) or sigma < 0:
        raise PrivacyParameterError(f"sigma={sigma!r} is invalid: the noise std must be >= 0.")
    try:
        import torch

        is_torch = isinstance(X, torch.Tensor)
    except ImportError:  # pragma: no cover
        is_torch = False
    if is_torch:
        import torch
        from dpgen.utils.noise import gaussian

        U = torch.as_tensor(U, dtype=X.dtype, device=X.device)
        P = X @ U
        if sigma == 0:
            return P
        noise = gaussian(P.shape, generator=generator, dtype=P.dtype, device=P.device)
        return P + sigma * noise
    X = np.asarray(X, dtype=float)
    P = X @ np.asarray(U, dtype=float)
    if sigma == 0:
        return P
    return P + sigma * np.random.default_rng(generator).standard_normal(P.shape)


def sample_squared_sensitivity(
    k: int,
    d: int,
    n_draws: int,
    rng=None,
    method: str = "directions",
    z=None,
    chunk_elems: int = 4_000_000,
) -> np.ndarray:
    """``n_draws`` samples of H = ||z^T U||^2 for a unit z and U with k uniform unit columns.

    * ``"directions"``: actually draw U (d x k, normalised Gaussians) for each sample and project
      the fixed unit z (default: a random unit vector drawn once) -- Lemma 2 as stated;
    * ``"beta"``: the Lemma 1 shortcut, a sum of k Beta(1/2, (d-1)/2) draws, each drawn as
      g^2 / (g^2 + C) with g ~ N(0, 1) and C ~ chi^2_{d-1} (same law, ~d times cheaper).
    """
    k, d = _check_kd(k, d)
    n_draws = check_positive_int(n_draws, "n_draws")
    _check_choice(method, "method", ("directions", "beta"))
    rng = np.random.default_rng(rng)
    out = np.empty(n_draws)
    if method == "beta":
        per = max(1, chunk_elems // k)
        for s in range(0, n_draws, per):
            m = min(per, n_draws - s)
            g2 = rng.standard_normal((m, k)) ** 2
            if d == 1:
                y = np.ones_like(g2)
            else:
                y = g2 / (g2 + rng.chisquare(d - 1, size=(m, k)))
            out[s : s + m] = y.sum(axis=1)
        return out
    if z is None:
        z = rng.standard_normal(d)
    z = np.asarray(z, dtype=float).reshape(-1)
    if z.shape[0] != d or not np.linalg.norm(z) > 0:
        raise PrivacyParameterError(f"z must be a non-zero vector of length d={d}.")
    z = z / np.linalg.norm(z)
    per = max(1, chunk_elems // (k * d))
    for s in range(0, n_draws, per):
        m = min(per, n_draws - s)
        u = rng.standard_normal((m, d, k))
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        out[s : s + m] = (np.einsum("d,mdk->mk", z, u) ** 2).sum(axis=1)
    return out


# --------------------------------------------------------------------------------------------
# Proposition 2 (full batch) and the subsampled calibration
# --------------------------------------------------------------------------------------------


def dpswd_epsilon_full_batch(alpha: Optional[float], sigma: float, k: int, d: int, delta: float,
                             bound: str = "bernstein", convention: str = "paper_text") -> float:
    """Proposition 2: epsilon = alpha w(k, delta/2) / (2 sigma^2) + log(2/delta) / (alpha - 1).

    ``alpha=None`` minimises over alpha > 1 in closed form: alpha* = 1 + sqrt(log(2/delta) / A)
    with A = w / (2 sigma^2), giving epsilon = A + 2 sqrt(A log(2/delta)).
    """
    sigma = check_positive(sigma, "sigma", "the std of the Gaussian noise")
    delta = check_delta(delta)
    w = sensitivity_bound(k, d, delta / 2.0, bound=bound, convention=convention)
    a_coef = w / (2.0 * sigma ** 2)
    log_term = math.log(2.0 / delta)
    if alpha is None:
        return a_coef + 2.0 * math.sqrt(a_coef * log_term)
    alpha = float(alpha)
    if not alpha > 1:
        raise PrivacyParameterError(f"alpha={alpha!r} is invalid: the Renyi order must be > 1.")
    return alpha * a_coef + log_term / (alpha - 1.0)


def calibrate_dpswd_sigma_full_batch(
    epsilon: float, delta: float, k: int, d: int, bound: str = "bernstein", convention: str = "paper_text"
) -> float:
    """Inverse of :func:`dpswd_epsilon_full_batch` (optimal alpha): the sigma reaching epsilon."""
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    w = sensitivity_bound(k, d, delta / 2.0, bound=bound, convention=convention)
    log_term = math.log(2.0 / delta)
    sqrt_a = math.sqrt(log_term + epsilon) - math.sqrt(log_term)
    return math.sqrt(w / (2.0 * sqrt_a ** 2))


def authors_steps(n: int, batch_size: int, epochs: int) -> int:
    """Steps as in the authors' script: ``epochs * (N // B + 1)`` (one extra batch per epoch
    even when B divides N)."""
    n = check_positive_int(n, "N")
    b = check_positive_int(batch_size, "batch_size")
    e = check_positive_int(epochs, "epochs")
    return e * (n // b + 1)


def split_delta(delta, convention, delta_split, delta_bound, delta_rdp, bound=None):
    """(delta_bound, delta_rdp): the share of ``delta`` for the directions' sensitivity bound and for
    the RDP -> DP conversion, as the convention says (``bound=frame``: the bound holds surely, all of
    delta to the accountant); ``delta_bound`` / ``delta_rdp`` override the split."""
    if bound == "frame":  # the frame bound holds surely: the whole delta goes to the accountant
        return 0.0, (check_delta(delta_rdp, "delta_rdp") if delta_rdp is not None else delta)
    if convention == "authors_code":
        db, dr = delta / 2.0, delta
    else:
        split = float(delta_split)
        if not 0.0 < split < 1.0:
            raise PrivacyParameterError(
                f"delta_split={delta_split!r} is invalid: the share of delta given to the "
                "sensitivity bound must lie in (0, 1) (Proposition 2: 0.5)."
            )
        db, dr = delta * split, delta * (1.0 - split)
    if delta_bound is not None:
        db = check_delta(delta_bound, "delta_bound")
    if delta_rdp is not None:
        dr = check_delta(delta_rdp, "delta_rdp")
    return db, dr


def _steps(n, batch_size, epochs, steps, convention):
    if steps is not None:
        return check_positive_int(steps, "steps")
    if epochs is None:
        raise PrivacyParameterError("give epochs or steps: calibration needs the length of training.")
    if convention == "authors_code":
        return authors_steps(n, batch_size, epochs)
    return steps_for_epochs(n, batch_size, epochs)


def _epsilon_for(z, q, steps, delta, sampling):
    return float(epsilon_for(z, q, steps, delta, sampling))


def calibrate_dpswd_sigma(epsilon: float, delta: float, k: int, d: int, n: int, batch_size: int,
                          epochs: Optional[int] = None, bound: str = "bernstein", convention: str = "paper_text",
                          delta_split: float = 0.5, sampling: str = "without_replacement",
                          steps: Optional[int] = None, rel_tol: float = 1e-3, delta_bound: Optional[float] = None,
                          delta_rdp: Optional[float] = None, z0: Optional[float] = None) -> Dict[str, Any]:
    """Noise std sigma of DP-SWD reaching (epsilon, delta) over minibatch training.

    sigma = noise_multiplier * sqrt(w), where w = sensitivity_bound(k, d, delta_bound) and the
    noise multiplier reaches (epsilon, delta_rdp) for ``steps`` compositions of the Gaussian
    mechanism subsampled without replacement at rate q = batch_size / N (autodp).
    ``delta_bound``/``delta_rdp`` override the convention's split. ``delta_total`` in the result
    is delta_bound + delta_rdp, the delta actually guaranteed (per step bound, see module doc).
    ``z0`` is the calibration's starting guess of the noise multiplier (a close guess saves accountant calls).
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    k, d = _check_kd(k, d)
    n = check_positive_int(n, "N", "the number of private samples")
    batch_size = check_positive_int(batch_size, "batch_size")
    if batch_size > n:
        raise PrivacyParameterError(f"batch_size={batch_size} is invalid: it must be <= N={n}.")
    _check_choice(bound, "bound", BOUNDS)
    _check_choice(convention, "convention", CONVENTIONS)
    db, dr = split_delta(delta, convention, delta_split, delta_bound, delta_rdp, bound)
    steps = _steps(n, batch_size, epochs, steps, convention)
    q = batch_size / n
    w = sensitivity_bound(k, d, db, bound=bound, convention=convention)
    z = calibrate_noise_multiplier(epsilon, dr, q, steps, sampling, rel_tol=rel_tol, z0=z0)
    return {
        "sigma": z * math.sqrt(w),
        "noise_multiplier": z,
        "sensitivity": math.sqrt(w),
        "squared_sensitivity": w,
        "delta_bound": db,
        "delta_rdp": dr,
        "delta_total": db + dr,
        "steps": steps,
        "sample_rate": q,
        "epsilon": epsilon,
        "epsilon_reached": _epsilon_for(z, q, steps, dr, sampling),
        "delta": delta,
        "bound": bound,
        "convention": convention,
        "sampling": sampling,
    }


def dpswd_epsilon(sigma: float, delta: float, k: int, d: int, n: int, batch_size: int, epochs: Optional[int] = None,
                  bound: str = "bernstein", convention: str = "paper_text", delta_split: float = 0.5,
                  sampling: str = "without_replacement", steps: Optional[int] = None,
                  delta_bound: Optional[float] = None, delta_rdp: Optional[float] = None) -> float:
    """Epsilon of DP-SWD with noise std ``sigma`` (inverse of :func:`calibrate_dpswd_sigma`)."""
    sigma = check_positive(sigma, "sigma", "the std of the Gaussian noise")
    delta = check_delta(delta)
    k, d = _check_kd(k, d)
    n = check_positive_int(n, "N", "the number of private samples")
    batch_size = check_positive_int(batch_size, "batch_size")
    _check_choice(convention, "convention", CONVENTIONS)
    db, dr = split_delta(delta, convention, delta_split, delta_bound, delta_rdp, bound)
    steps = _steps(n, batch_size, epochs, steps, convention)
    w = sensitivity_bound(k, d, db, bound=bound, convention=convention)
    return _epsilon_for(sigma / math.sqrt(w), batch_size / n, steps, dr, sampling)


__all__ = [
    "BOUNDS",
    "CONVENTIONS",
    "DPSWDWarning",
    "authors_steps",
    "bernstein_bound",
    "beta_variance",
    "calibrate_dpswd_sigma",
    "calibrate_dpswd_sigma_full_batch",
    "clt_bound",
    "dpswd_epsilon",
    "dpswd_epsilon_full_batch",
    "frame_bound",
    "frame_directions",
    "FRAME_DIRECTIONS",
    "StructuredFrame",
    "hartley",
    "haar_columns",
    "orthogonal_directions",
    "gaussian_mechanism",
    "random_directions",
    "sample_squared_sensitivity",
    "sensitivity_bound",
    "split_delta",
    "squared_sensitivity_quantile",
]

