"""Class-conditional generators: input (code z, label y) -> a sample in the data's shape.

* ``merf_conv`` — DP-SWD Table 3 (the DP-MERF generator): FC 20-200, BN, FC 200-784, BN,
  reshape to 16 x 7 x 7, upsample x2, conv 5x5 (16 -> 8) + ReLU, upsample x2, conv 5x5 (8 -> C)
  + sigmoid: 28 x 28 images, ~167K parameters for code 10 + one-hot label 10. ``upsample``: nearest
  (dpgen's default) or bilinear with aligned corners, the mode of DP-MERF's released generator, which
  DP-SWD says it reused (``model.upsample=bilinear``; Table 3 prints only "upsampling factor = 2"). (Table 3 prints
  "Reshape 28 x 28"; two x2 upsamplings of 28 x 28 would give 112 x 112, so the 784 units are
  read as 16 channels of 7 x 7, which gives 28 x 28 and the ~180K parameters the paper quotes.)
* ``dcgan64`` — DP-SWD Table 5 (Nguyen et al.'s CelebA generator): transposed convolutions
  32-512-256-128-64-3 with 4x4 kernels, BN + ReLU, tanh output mapped to [0, 1]. Table 5 prints
  stride 1 everywhere, which cannot reach 64 x 64 from a 1 x 1 code; we use stride 1 (padding 0)
  for the first layer and stride 2 (padding 1) after it: 1 -> 4 -> 8 -> 16 -> 32 -> 64.
* ``mlp`` — a small fully connected generator (code + one-hot -> hidden -> sigmoid) for any
  shape: the default for digits (8 x 8), features and synthetic data.
* ``dct`` — a small MLP (code + one-hot -> 256 -> 256 -> K) whose K = ``model.dct_size``^2 outputs
  per channel are the lowest-frequency 2-D DCT-II coefficients of the image, decoded by a fixed,
  data-independent layer (inverse DCT, then a clamp to [0, 1] whose gradient is the identity).
  Its output layer is the privacy barrier of DP-Sinkhorn (``sample_code`` / ``decode``): the
  image gradient is released in K dimensions per sample instead of H x W (K = 100 of 784 for
  MNIST: 2.8x less noise norm at the same sigma).
* ``model.dct_project=true`` — any other image generator (e.g. ``dcgan``) followed by the orthogonal
  projection of its images onto the same k x k lowest frequencies and the same fixed decode
  (``DCTProjectedGenerator``): the inner generator's architecture with ``dct``'s barrier.

Every generator splits into ``code`` (the trainable layers) and ``decode`` (fixed operations without
parameters; the identity unless said otherwise): ``sample_code`` gives the tensor at that split,
which mechanisms that privatise the generator's output gradient hook (dpgen/methods/dpsinkhorn.py).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from dpgen.models.base import ConditionalGenerator, count_parameters  # noqa: F401 (re-exported)
from dpgen.models.dcgan import BigGAN32Generator, DCGANGenerator
from dpgen.utils.dct import dct_matrix
from dpgen.utils.registry import Registry


class MLPGenerator(ConditionalGenerator):
    def __init__(self, code_dim, num_classes, out_shape, hidden: Sequence[int] = (200, 400)):
        super().__init__(code_dim, num_classes, out_shape)
        dims = [self.code_dim + self.num_classes, *hidden]
        layers = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU()]
        layers += [nn.Linear(dims[-1], math.prod(self.out_shape)), nn.Sigmoid()]
        self.net = nn.Sequential(*layers)

    def forward(self, z, y=None):
        return self.net(self.inputs(z, y)).view(-1, *self.out_shape)


class MERFConvGenerator(ConditionalGenerator):
    def __init__(self, code_dim=10, num_classes=10, out_shape=(1, 28, 28), hidden: int = 200,
                 channels: Sequence[int] = (16, 8), kernel: int = 5, upsample: str = "nearest"):
        super().__init__(code_dim, num_classes, out_shape)
        if upsample not in ("nearest", "bilinear"):
            raise ValueError(f"merf_conv: upsample={upsample!r}; choose nearest or bilinear")
        self.upsample = upsample
        c_out, h, w = self.out_shape
        if h % 4 or w % 4:
            raise ValueError(f"merf_conv needs an image size divisible by 4, got {h} x {w}")
        self.h0, self.w0 = h // 4, w // 4
        self.c0 = channels[0]
        self.fc1 = nn.Linear(self.code_dim + self.num_classes, hidden)
        self.bn1 = nn.BatchNorm1d(hidden, eps=1e-5, momentum=0.1)
        self.fc2 = nn.Linear(hidden, self.c0 * self.h0 * self.w0)
        self.bn2 = nn.BatchNorm1d(self.c0 * self.h0 * self.w0, eps=1e-5, momentum=0.1)
        self.conv1 = nn.Conv2d(channels[0], channels[1], kernel, padding=kernel // 2)
        self.conv2 = nn.Conv2d(channels[1], c_out, kernel, padding=kernel // 2)

    def forward(self, z, y=None):
        x = F.relu(self.bn1(self.fc1(self.inputs(z, y))))
        x = self.bn2(self.fc2(x)).view(-1, self.c0, self.h0, self.w0)
        x = F.relu(self.conv1(self._up(x)))
        return torch.sigmoid(self.conv2(self._up(x)))

    def _up(self, x):
        if self.upsample == "bilinear":
            return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        return F.interpolate(x, scale_factor=2)


class DCGAN64Generator(ConditionalGenerator):
    def __init__(self, code_dim=32, num_classes=0, out_shape=(3, 64, 64),
                 widths: Sequence[int] = (512, 256, 128, 64)):
        super().__init__(code_dim, num_classes, out_shape)
        c_out, h, w = self.out_shape
        if (h, w) != (64, 64):
            raise ValueError(f"dcgan64 produces 64 x 64 images, the dataset has {h} x {w}")
        layers, c = [], self.code_dim + self.num_classes
        for i, width in enumerate(widths):
            layers += [nn.ConvTranspose2d(c, width, 4, 1 if i == 0 else 2, 0 if i == 0 else 1, bias=False),
                       nn.BatchNorm2d(width, eps=1e-5, momentum=0.1), nn.ReLU()]
            c = width
        layers += [nn.ConvTranspose2d(c, c_out, 4, 2, 1), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z, y=None):
        x = self.inputs(z, y)[:, :, None, None]
        return (self.net(x) + 1) / 2


def dct_weights(k: int, taper: float = 0.0) -> torch.Tensor:
    """``model.dct_taper``: the decode's weight of the DCT coefficient of frequency (u, v), u, v < k,
    t_uv = (1 + sqrt(u^2 + v^2))^(-a) (a = ``taper``, any finite number: 1 everywhere at a = 0, the high
    frequencies weighted down for a > 0 and up for a < 0, the DC coefficient 1 always), as a
    [k, k] float64 tensor. A function of the band and the setting only: nothing read from data."""
    u = torch.arange(k, dtype=torch.float64)
    r = torch.sqrt(u.reshape(-1, 1) ** 2 + u.reshape(1, -1) ** 2)
    return (1.0 + r).pow(-float(taper))


class _DCTDecode:
    """The fixed decode shared by ``dct`` and ``model.dct_project``: the ``c k k`` lowest-frequency 2-D DCT-II
    coefficients per channel -> image (inverse DCT, then a clamp to [0, 1] with a straight-through gradient).
    The basis is a non-persistent float32 buffer scaled by sqrt(H W) / k (unit-variance codes give
    unit-variance pixels), each frequency's row weighted by :func:`dct_weights` (``model.dct_taper``; 1 without
    it); nothing in it is trainable or read from data."""

    def _init_dct(self, dct_size: int, name: str, taper: float = 0.0) -> None:
        if len(self.out_shape) != 3:
            raise ValueError(f"{name} needs images (C, H, W), the dataset gives {self.out_shape}")
        c, h, w = self.out_shape
        k = int(dct_size) or min(10, h, w)  # 0: by the images' size (the own-data recipe)
        if not 1 <= k <= min(h, w):
            raise ValueError(f"model.dct_size={k} is invalid for {h} x {w} images: give 1 <= k <= {min(h, w)}")
        taper = float(taper)
        if not math.isfinite(taper):
            raise ValueError(f"model.dct_taper={taper} is invalid: give a finite a (0: no taper, every coefficient of "
                             "the band decoded at weight 1; a > 0 weights the high frequencies down, a < 0 up)")
        self.k, self.taper = k, taper
        # image = coefficients of the basis images outer(D_h[u], D_w[v]), u, v < k, each row weighted by
        # dct_weights(k, taper) (1 without a taper); float32 buffer
        basis = torch.einsum("ui,vj->uvij", dct_matrix(h)[:k], dct_matrix(w)[:k]).reshape(k * k, h * w)
        weights = dct_weights(k, taper).reshape(k * k)
        basis = basis * weights.reshape(k * k, 1).to(basis.dtype)
        self.register_buffer("basis", basis.float() * (math.sqrt(h * w) / k), persistent=False)
        # project's scale per coefficient: a basis row's squared norm is t_uv^2 H W / k^2
        self.register_buffer("project_scale", k * k / (h * w) / weights.pow(2), persistent=False)  # float64

    def decode(self, code: torch.Tensor) -> torch.Tensor:
        c, h, w = self.out_shape
        x = (code.reshape(code.shape[0], c, self.k * self.k) @ self.basis).reshape(code.shape[0], c, h, w)
        return x + (x.clamp(0.0, 1.0) - x).detach()  # values in [0, 1], gradient of the identity

    def decode_vjp(self, pixel_grad: torch.Tensor) -> torch.Tensor:
        """The code gradient of a function of ``decode(code)`` whose image gradient is ``pixel_grad``
        ([..., C, H, W] -> [..., C k k]): ``decode`` is linear with a straight-through clamp, so its
        vector-Jacobian product is the same fixed matrix for every sample, ``v @ basis^T`` per channel."""
        c, h, w = self.out_shape
        lead = pixel_grad.shape[:-3]
        g = pixel_grad.reshape(*lead, c, h * w) @ self.basis.t().to(pixel_grad.dtype)
        return g.reshape(*lead, c * self.k * self.k)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """The coefficients of images x [n, C, H, W] whose ``decode`` (before the clamp) is x's orthogonal
        projection onto the k x k lowest frequencies: the basis rows are orthogonal with squared norm
        t_uv^2 H W / k^2, so code = x basis^T k^2 / (H W t_uv^2)."""
        c, h, w = self.out_shape
        code = (x.reshape(x.shape[0], c, h * w) @ self.basis.t().to(x.dtype)) * self.project_scale.to(x.dtype)
        return code.reshape(x.shape[0], c * self.k * self.k)

    def forward(self, z, y=None):
        """Samples: the subclass's ``code`` (every trainable layer), then the fixed ``decode``."""
        return self.decode(self.code(z, y))


class DCTGenerator(_DCTDecode, ConditionalGenerator):
    """MLP -> the k x k lowest-frequency DCT coefficients per channel -> fixed inverse DCT -> [0, 1].

    ``decode`` has no parameters (the basis is a buffer): every trainable weight sits before the
    coefficients, so a mechanism that privatises the gradient of the coefficients (DP-Sinkhorn's
    hook) releases C * k * k numbers per sample instead of C * H * W. The coefficients are scaled by
    sqrt(H W) / k (unit-variance codes give unit-variance pixels) and the image is clamped to
    [0, 1] with a straight-through gradient: the samples stay in the data's range, and a pixel
    pushed outside it still passes the cost's gradient back (a sigmoid saturates under the noise
    of a private run: its gradient vanishes while the noise keeps moving the weights).
    """

    def __init__(self, code_dim=12, num_classes=10, out_shape=(1, 28, 28), dct_size: int = 10,
                 hidden: Sequence[int] = (256, 256), dct_taper: float = 0.0):
        super().__init__(code_dim, num_classes, out_shape)
        self._init_dct(dct_size, "model.generator=dct", dct_taper)
        c = self.out_shape[0]
        dims = [self.code_dim + self.num_classes, *hidden]
        layers = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.LeakyReLU(0.2)]
        layers += [nn.Linear(dims[-1], c * self.k * self.k)]
        self.net = nn.Sequential(*layers)

    def code(self, z, y=None) -> torch.Tensor:
        return self.net(self.inputs(z, y))


class DCTProjectedGenerator(_DCTDecode, ConditionalGenerator):
    """``model.dct_project=true``: any image generator whose output is projected onto its k x k
    lowest-frequency DCT coefficients (``code``: a fixed linear map after the inner generator's last
    layer), then decoded as ``dct`` decodes (inverse DCT, straight-through clamp). The inner generator
    (a DCGAN, say) keeps its architecture and latent law; the privacy barrier of DP-Sinkhorn's hook and
    per-record gradient moves from its H x W pixels to the C k k coefficients, as with ``dct``. The
    projection has no parameters, so every trainable weight still sits before the barrier."""

    def __init__(self, inner: ConditionalGenerator, dct_size: int = 10, dct_taper: float = 0.0):
        super().__init__(inner.code_dim, inner.num_classes, inner.out_shape)
        self.inner = inner
        self._init_dct(dct_size, "model.dct_project=true", dct_taper)

    def draw(self, n: int, y=None, generator=None, device=None):
        return self.inner.draw(n, y, generator, device)

    def code(self, z, y=None) -> torch.Tensor:
        return self.project(self.inner(z, y))


#: ``model.generator`` -> the class (``auto``: :func:`default_generator` picks one from the data's shape)
GENERATORS = Registry("generator", key="model.generator", extra=("auto",))
for _name, _cls in {"mlp": MLPGenerator, "merf_conv": MERFConvGenerator, "dcgan64": DCGAN64Generator,
                    "dct": DCTGenerator}.items():
    GENERATORS.register(_name, _cls)


def default_generator(shape: Sequence[int]) -> str:
    shape = tuple(shape)
    if len(shape) == 3 and shape[1:] == (28, 28):
        return "merf_conv"
    if len(shape) == 3 and shape[1:] == (64, 64):
        return "dcgan64"
    return "mlp"


def generator_from_config(model_cfg, out_shape, num_classes: int) -> ConditionalGenerator:
    """``make_generator`` with the ``model.*`` fields (``model.dct_size`` for ``dct`` and ``model.dct_project``,
    which wraps the generator in :class:`DCTProjectedGenerator`)."""
    taper = float(getattr(model_cfg, "dct_taper", 0.0) or 0.0)  # an older run's config.yaml lacks the key
    if taper and model_cfg.generator != "dct" and not bool(model_cfg.dct_project):
        raise ValueError(f"model.dct_taper={taper} weights the DCT band of model.generator=dct or "
                         f"model.dct_project=true; this run's generator is {model_cfg.generator!r} without "
                         "dct_project: drop model.dct_taper or use a DCT generator")
    kw = {"dct_size": int(model_cfg.dct_size), "dct_taper": taper} if model_cfg.generator == "dct" else {}
    upsample = str(model_cfg.upsample)
    name = default_generator(out_shape) if model_cfg.generator == "auto" else model_cfg.generator
    if name == "merf_conv":
        kw["upsample"] = upsample
    elif upsample != "nearest":
        raise ValueError(f"model.upsample={upsample} applies to the merf_conv generator only, this run's is "
                         f"{model_cfg.generator!r}: drop model.upsample or set model.generator=merf_conv")
    gen = make_generator(model_cfg.generator, out_shape, num_classes, model_cfg.code_dim, **kw)
    if bool(model_cfg.dct_project):
        if model_cfg.generator == "dct":
            raise ValueError("model.dct_project=true projects another generator's images onto DCT coefficients; "
                             "model.generator=dct emits them already: drop model.dct_project or pick another "
                             "generator (e.g. model.generator=dcgan)")
        gen = DCTProjectedGenerator(gen, int(model_cfg.dct_size), taper)
    if str(model_cfg.init) == "dcgan":
        dcgan_init(gen)
    return gen


def dcgan_init(module: nn.Module, std: float = 0.02) -> nn.Module:
    """DCGAN's initialisation (Radford et al. 2016, section 4): every convolution, transposed convolution and
    linear weight from N(0, std), their biases 0, batch-norm gains from N(1, std) and shifts 0 (``model.init=
    dcgan``). Embeddings keep theirs. A spectrally normalised weight is set through its original tensor. Draws
    from torch's global generator, so the run's seed fixes it."""
    from torch.nn.utils import parametrize

    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
                w = (m.parametrizations.weight.original if parametrize.is_parametrized(m, "weight")
                     else m.weight)
                w.normal_(0.0, std)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.modules.batchnorm._BatchNorm) and m.affine:
                m.weight.normal_(1.0, std)
                m.bias.zero_()
    return module


def sharpen(x: torch.Tensor, k: float, at: float = 0.5) -> torch.Tensor:
    """The contrast curve of ``model.sharpen``: pixels in [0, 1] through a logistic of slope ``k`` centred at
    ``at``, rescaled so that 0 stays 0 and 1 stays 1 (monotone; ``k`` -> 0 tends to the identity, a large ``k`` to a
    threshold at ``at``). Applied to released samples only: post-processing, with no privacy cost."""
    d = x.double()  # a gentle slope subtracts nearly equal logistics: in float64, as near the identity as it is
    lo = torch.sigmoid(torch.tensor(-k * at, dtype=d.dtype, device=x.device))
    hi = torch.sigmoid(torch.tensor(k * (1.0 - at), dtype=d.dtype, device=x.device))
    d = torch.nan_to_num(d, nan=0.0).clamp(0.0, 1.0)
    return ((torch.sigmoid(k * (d - at)) - lo) / (hi - lo)).clamp(0.0, 1.0).to(x.dtype)


class SharpenedSamples(nn.Module):
    """A trained generator whose samples pass through :func:`sharpen`: what a run evaluates and releases when
    ``model.sharpen`` is set. Training never sees it (the mechanism trains the inner generator); ``sample``
    draws exactly the inner generator's samples, then sharpens them."""

    def __init__(self, inner: ConditionalGenerator, k: float, at: float = 0.5):
        super().__init__()
        self.inner, self.k, self.at = inner, float(k), float(at)
        self.num_classes, self.code_dim, self.out_shape = inner.num_classes, inner.code_dim, inner.out_shape

    def forward(self, z, y=None):
        return sharpen(self.inner(z, y), self.k, self.at)

    def sample(self, n: int, y=None, generator=None, device=None):
        x, y = self.inner.sample(n, y=y, generator=generator, device=device)
        return sharpen(x, self.k, self.at), y


def released_generator(gen: ConditionalGenerator, model_cfg) -> nn.Module:
    """The generator as the run evaluates and releases it: ``gen`` itself, or wrapped in
    :class:`SharpenedSamples` when ``model.sharpen`` is set (``model_cfg`` None: off)."""
    k = model_cfg.sharpen if model_cfg is not None else None
    if not k:
        return gen
    return SharpenedSamples(gen, float(k), float(model_cfg.sharpen_at or 0.5))


def apply_memory_format(gen: torch.nn.Module, setting: str, device) -> torch.nn.Module:
    """``model.memory_format`` on a generator placed on ``device``: every submodule that offers
    ``set_channels_last`` (the DCGAN generator) gets channels-last weights for ``channels_last``, or for
    ``auto`` on a CPU, where oneDNN's transposed convolutions run faster in that layout; otherwise contiguous.
    Only the layout changes, not the function."""
    if setting not in ("auto", "channels_last", "contiguous"):
        raise ValueError(f"model.memory_format={setting!r} is unknown: choose auto, channels_last or contiguous")
    flag = setting == "channels_last" or (setting == "auto" and torch.device(device).type == "cpu")
    for m in gen.modules():
        if hasattr(m, "set_channels_last"):
            m.set_channels_last(flag)
    return gen


def make_generator(name: str, out_shape, num_classes: int, code_dim: int, **kwargs) -> ConditionalGenerator:
    """Build a generator by name (``auto`` picks from the data shape)."""
    if name == "auto":
        name = default_generator(out_shape)
    return GENERATORS.build(name, code_dim=code_dim, num_classes=num_classes, out_shape=tuple(out_shape), **kwargs)


# ---- entropic-LDP GAN generators (unconditional, uniform latent; entropic-ldp-gan.txt section 4) ----------
class UniformLatentGenerator(ConditionalGenerator):
    """Unconditional generator fed a uniform latent U[-1, 1]^code_dim (the paper trains without labels).

    ``sample`` returns ``(x, y)`` with y the labels given (or zeros): the labels are ignored.
    """

    def __init__(self, code_dim, num_classes, out_shape):
        super().__init__(code_dim, 0, out_shape)

    def draw(self, n: int, y=None, generator=None, device=None):
        device = device or next(self.parameters()).device
        z = torch.rand(n, self.code_dim, generator=generator, device=device) * 2 - 1
        if y is None:
            y = torch.zeros(n, dtype=torch.long, device=device)
        return z, y


class UniformMLPGenerator(UniformLatentGenerator):
    """``mlp256_uniform``: 2 hidden layers of 256 (ReLU), linear output (section 4.2, synthetic manifolds);
    ``fc500``: 2 hidden layers of 500 (ReLU), sigmoid output in [0, 1] (section 4.5, MNIST convergence)."""

    def __init__(self, code_dim=2, num_classes=0, out_shape=(2,), hidden: Sequence[int] = (256, 256),
                 sigmoid: bool = False):
        super().__init__(code_dim, num_classes, out_shape)
        dims = [self.code_dim, *hidden]
        layers = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers += [nn.Linear(dims[-1], math.prod(self.out_shape))] + ([nn.Sigmoid()] if sigmoid else [])
        self.net = nn.Sequential(*layers)

    def forward(self, z, y=None):
        return self.net(z).view(-1, *self.out_shape)


class DCGAN28Generator(UniformLatentGenerator):
    """``dcgan28``: DCGAN (Radford et al.) sized for 28 x 28: FC -> 128 x 7 x 7, BN + ReLU, transposed
    convolutions 4x4 stride 2 (128 -> 64, BN + ReLU; 64 -> C), sigmoid output in [0, 1]."""

    def __init__(self, code_dim=100, num_classes=0, out_shape=(1, 28, 28), width: int = 64):
        super().__init__(code_dim, num_classes, out_shape)
        c, h, w = self.out_shape
        if (h, w) != (28, 28):
            raise ValueError(f"dcgan28 produces 28 x 28 images, the dataset has {h} x {w}")
        self.fc = nn.Sequential(nn.Linear(self.code_dim, 2 * width * 7 * 7), nn.BatchNorm1d(2 * width * 7 * 7),
                                nn.ReLU())
        self.width = width
        self.net = nn.Sequential(
            nn.ConvTranspose2d(2 * width, width, 4, 2, 1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.ConvTranspose2d(width, c, 4, 2, 1), nn.Sigmoid())

    def forward(self, z, y=None):
        return self.net(self.fc(z).view(-1, 2 * self.width, 7, 7))


GENERATORS.register("mlp256_uniform", UniformMLPGenerator)
GENERATORS.register("fc500", lambda **kw: UniformMLPGenerator(hidden=(500, 500), sigmoid=True, **kw))
GENERATORS.register("dcgan28", DCGAN28Generator)


# ---- DP-Sinkhorn generators (dp-sinkhorn.txt appendix D.3): dpgen/models/dcgan.py -------------------------
GENERATORS.register("dcgan", DCGANGenerator)
GENERATORS.register("biggan32", BigGAN32Generator)
