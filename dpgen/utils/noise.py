"""The one way a mechanism of dpgen draws its randomness: its Gaussian noise (:func:`gaussian`), the
uniforms of Poisson sampling (:func:`uniform`), and the integers and permutations of sampling without
replacement and of random frames (:func:`randint`, :func:`permutation`).

``generator`` is either a ``torch.Generator`` (or None: torch's global one), and then each function is
exactly the torch call it replaces (``torch.randn``, ``torch.rand``, ``torch.randint``, ``torch.randperm``),
so a seeded run draws the same stream as before; or a :class:`SecureGenerator` (``privacy.secure_rng=true``,
:func:`dpgen.train.state.mechanism_generators`), and then every draw comes from the operating system's
cryptographically secure generator (``os.urandom``: Linux's getrandom, a ChaCha20 stream reseeded from
the kernel's entropy pool). This is the anchor of opacus' ``secure_mode`` (torchcsprng's
``/dev/urandom`` generator) and what it guards against:

* a predictable generator. torch's Mersenne Twister (CPU) and Philox (CUDA) are not cryptographic: their
  state is recoverable from enough outputs (624 words of MT19937), and a released noisy value is its
  clean value plus such an output, so an adversary who learns the state subtracts the noise. The OS
  generator has no state a process can read, save or restore, so nothing of it is ever checkpointed
  (:class:`SecureGenerator` refuses ``get_state`` / ``set_state`` / ``manual_seed``).
* the floating-point attack on the Gaussian (Mironov 2012 for the Laplace; Holohan & Braghin 2021,
  arXiv:2107.10138, for the Gaussian; shown on opacus in arXiv:2112.05307): a float Gaussian sample is a
  deterministic function of a few uniforms, so not every float is a possible sample, and an observed
  release can rule out candidate clean values. Holohan & Braghin's fix, which opacus' secure mode takes
  with n = 2, is to release the sum of 2n independent draws divided by sqrt(2n) (same N(0, 1) law):
  inverting it costs about 2^(p (2n - 1)) for p-bit uniforms, 2^159 here. Each secure Gaussian is
  :data:`SECURE_DRAWS` = 4 Box-Muller normals built from 53-bit uniforms in float64, summed and halved,
  then cast to the caller's dtype.

Not covered (as for opacus, whose issue #616 says so): precision-based attacks on the *addition* of the
noise to the clean value in floating point (a float32 sum rounds to a grid that depends on the clean
value's magnitude), which only a discretised mechanism (e.g. the discrete Gaussian) removes; the secure
source makes the noise unpredictable and its sampler hard to invert, not the rounding of the release.

Costs (``make bench``, part ``secure_noise``): the secure draw is much slower than ``torch.randn`` per
number (entropy from the kernel, four normals per output, and on a GPU a host-to-device copy), which is
negligible where a step releases a few thousand numbers and visible where it draws millions.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Optional, Sequence, Tuple, Union

import torch

#: independent Box-Muller normals summed per secure Gaussian (divided by sqrt(SECURE_DRAWS) = 2): the
#: 2n draws of Holohan & Braghin's fix with n = 2, opacus' choice (n = 1 is invertible at cost 2^53)
SECURE_DRAWS = 4
#: secure Gaussians built per block of OS entropy: bounds the workspace (4 normals each: about 40 MB at its peak)
_BLOCK = 1 << 18

Shape = Union[int, Sequence[int], torch.Size]


class SecureRNGError(RuntimeError):
    """A secure generator was asked for a state (to save, restore or seed): it has none."""


_NO_STATE = ("the OS CSPRNG (privacy.secure_rng=true) has no state to save, restore or seed: a secure run's "
             "mechanism randomness is never checkpointed nor reproducible. For a reproducible run set "
             "privacy.secure_rng=false privacy.secret_randomness=false")


class SecureGenerator:
    """Stands where a ``torch.Generator`` would for a mechanism (``method.rng``, the batch sampler): its
    draws (through this module's functions) come from the OS CSPRNG, placed on ``device``. It holds
    nothing: there is no state to read, save, restore or seed, and asking for one raises
    :class:`SecureRNGError` (a checkpoint never holds a secure run's mechanism randomness)."""

    def __init__(self, device: Union[str, torch.device] = "cpu"):
        self.device = torch.device(device)

    def get_state(self):
        raise SecureRNGError(_NO_STATE)

    def set_state(self, state) -> None:
        raise SecureRNGError(_NO_STATE)

    def manual_seed(self, seed) -> None:
        raise SecureRNGError(_NO_STATE)

    def initial_seed(self) -> int:
        raise SecureRNGError(_NO_STATE)

    def __repr__(self) -> str:
        return f"SecureGenerator(device={str(self.device)!r})"


def is_generator(obj) -> bool:
    """True for what this module draws from: a ``torch.Generator`` or a :class:`SecureGenerator`."""
    return isinstance(obj, (torch.Generator, SecureGenerator))


def _shape(shape: Shape) -> Tuple[int, ...]:
    return (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)


def _words(n: int) -> torch.Tensor:
    """``n`` independent uniform 64-bit words (int64) from the OS CSPRNG."""
    if n == 0:
        return torch.empty(0, dtype=torch.int64)
    with warnings.catch_warnings():  # the bytes are only read (the callers mask them into a new tensor): no copy
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(os.urandom(8 * n), dtype=torch.int64)


def _uniform_bits(n: int, bits: int) -> torch.Tensor:
    """``n`` uniforms k / 2^bits, k uniform in [0, 2^bits) (float64, exact for bits <= 53): in [0, 1), and
    representable in a float with ``bits`` significand bits, so a cast to it cannot round up to 1."""
    return (_words(n) & ((1 << bits) - 1)).to(torch.float64) * (2.0 ** -bits)


def _box_muller(n: int) -> torch.Tensor:
    """``n`` independent N(0, 1) (float64) from 53-bit uniforms, both outputs of each Box-Muller pair used:
    r = sqrt(-2 log(1 - u1)) (1 - u1 in (0, 1], so the log is finite; r <= 8.6), theta = 2 pi u2."""
    m = (n + 1) // 2
    u = _uniform_bits(2 * m, 53)
    r = torch.sqrt(-2.0 * torch.log1p(-u[:m]))
    theta = (2.0 * math.pi) * u[m:]
    return torch.cat([r * torch.cos(theta), r * torch.sin(theta)])[:n]


def _secure_normal(n: int) -> torch.Tensor:
    """``n`` independent N(0, 1) (float64, CPU): each the sum of SECURE_DRAWS normals / sqrt(SECURE_DRAWS)."""
    out = torch.empty(n, dtype=torch.float64)
    for s in range(0, n, _BLOCK):
        e = min(n, s + _BLOCK)
        out[s:e] = _box_muller(SECURE_DRAWS * (e - s)).view(SECURE_DRAWS, e - s).sum(0) / math.sqrt(SECURE_DRAWS)
    return out


def _place(x: torch.Tensor, generator: SecureGenerator, device, dtype) -> torch.Tensor:
    return x.to(device=torch.device(device) if device is not None else generator.device, dtype=dtype)


def gaussian(shape: Shape, *, generator=None, device=None, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """i.i.d. N(0, 1) of ``shape``: ``torch.randn`` from a ``torch.Generator`` (or None), else the OS CSPRNG
    with the floating-point mitigation (module doc), on ``device`` (None: the generator's) in ``dtype``
    (None: torch's default dtype)."""
    shape = _shape(shape)
    if isinstance(generator, SecureGenerator):
        z = _secure_normal(math.prod(shape)).view(shape)
        return _place(z, generator, device, dtype or torch.get_default_dtype())
    return torch.randn(shape, generator=generator, device=device, dtype=dtype)


def uniform(shape: Shape, *, generator=None, device=None, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """i.i.d. uniforms in [0, 1) of ``shape`` (e.g. Poisson sampling: record i is in the batch when u_i < q):
    ``torch.rand`` from a ``torch.Generator`` (or None); from the OS CSPRNG with as many random bits as
    ``dtype`` holds (None: float64, 53 bits, so that ``u < q`` has probability q to within 2^-53)."""
    shape = _shape(shape)
    if isinstance(generator, SecureGenerator):
        dtype = dtype or torch.float64
        u = _uniform_bits(math.prod(shape), min(53, round(-math.log2(torch.finfo(dtype).eps)) + 1)).view(shape)
        return _place(u, generator, device, dtype)
    return torch.rand(shape, generator=generator, device=device, dtype=dtype)


def randint(high: int, shape: Shape, *, generator=None, device=None) -> torch.Tensor:
    """i.i.d. integers uniform in [0, high) (int64): ``torch.randint(0, high, ...)`` from a ``torch.Generator``;
    from the OS CSPRNG as floor(u high) with u a 53-bit uniform (each value's probability within 2^-53 of
    1 / high)."""
    shape = _shape(shape)
    if isinstance(generator, SecureGenerator):
        k = torch.floor(_uniform_bits(math.prod(shape), 53) * int(high)).to(torch.int64).view(shape)
        return _place(k, generator, device, torch.int64)
    return torch.randint(0, int(high), shape, generator=generator, device=device)


def permutation(n: int, *, generator=None, device=None) -> torch.Tensor:
    """A uniform random permutation of 0..n-1 (int64): ``torch.randperm`` from a ``torch.Generator``; from the
    OS CSPRNG the order of n i.i.d. 63-bit keys (a tie, which the stable sort would break by index, has
    probability below n^2 / 2^64: 2e-10 at n = 60,000)."""
    if isinstance(generator, SecureGenerator):
        keys = _words(int(n)) & ((1 << 63) - 1)
        return _place(torch.argsort(keys, stable=True), generator, device, torch.int64)
    return torch.randperm(int(n), generator=generator, device=device)
