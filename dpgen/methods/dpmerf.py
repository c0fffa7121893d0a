"""DP-MERF (Harder, Adamczewski & Park, AISTATS 2021): a reference baseline for the generation tables.

One release, then post-processing. Before training, the class-conditional mean embedding of the
private set in random Fourier features,

    mu = (1/n) sum_i phi(x_i) (outer) onehot(y_i),   phi(x) = sqrt(2/D) [cos(W x), sin(W x)],

(W: D/2 x d frequencies drawn N(0, I / l^2) for the Gaussian kernel of length scale l; ||phi(x)|| = 1
exactly, so ||phi(x) (outer) onehot(y)|| = 1) is released once with the Gaussian mechanism:
replacing one record moves mu by at most 2/n in l2 (two unit terms over n; n is public), so
mu~ = mu + N(0, (z 2/n)^2 I) is (epsilon, delta)-DP with z calibrated by the privacy library's one-shot
ledger (:func:`dpgen.privacy.mechanisms.make_ledger` of a :class:`OneShotGaussian`: dp-accounting's PLD of one
Gaussian, exact for one release and equal to the analytic Gaussian mechanism of Balle & Wang 2018, which is
reported beside it; autodp's RDP, which calibrated dpgen's earlier DP-MERF runs, asks 14 % more noise at epsilon 10
(z 0.5679, not 0.4999) and 31 % more at epsilon 1, and is the ledger's cross-check). Training
then fits a generator to mu~ alone: every step draws a generated batch with uniform labels (as DP-MERF's
own code does: the label proportions are not released) and minimises ||mu~ - mu_gen||^2, the squared
MMD in the random-feature space. ``sample_batch`` hands the loop no private record, so the steps are
post-processing and the guarantee does not depend on their number: ``max_steps`` is None and the loss may
be published.

Beyond the paper (``method.conv_channels > 0``, off by default): the embedding also holds the mean of
psi(x), the spatially pooled activations of a small *random* convolutional network (three 3 x 3 layers,
He-normal weights drawn from the mechanism's generator, no data), each layer's block (a constant appended)
scaled to unit norm:
the feature vector is [sqrt(1 - s) phi(x), sqrt(s / L) psi_1(x), ..., sqrt(s / L) psi_L(x)] with s =
``conv_share``, so its norm is at most 1 and the release's sensitivity stays 2 / n. Random convolutions see
local strokes and edges that a Gaussian kernel on whole images blurs; whether they help is measured on the
public proxy (experiments/fidelity/2026-11-29_dpmerf_levers.md), not assumed.

Settings from DP-MERF's public code for MNIST (``train_dp_generator_directly.py``): D = 1000 random
features, kernel variance 127 on [0, 1] pixels of dimension 784 (length scale sqrt(127) = 11.3); dpgen
scales the length scale with the dimension (``length_scale: null`` -> sqrt(127 d / 784)), so that the
kernel sees images of any size alike. No setting was tuned on any test split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch

from dpgen.methods.base import GenerativeMethod, ledger_for
from dpgen.methods.registry import register
from dpgen.utils.labels import one_hot_or_zero
from dpgen.privacy.mechanisms import OneShotGaussian
from dpgen.privacy.validation import check_positive, check_positive_int
from dpgen.utils.noise import gaussian
from dpgen.utils.settings import ConfigError, MethodConfig

#: why DP-MERF's ledger is dp-accounting's PLD whatever privacy.accountant says (the privacy report states it)
LEDGER_REASON = ("one Gaussian release of the whole set (sample rate 1), no subsampling or composition: its privacy "
                 "loss distribution is the same under replace-one and add/remove (the relation sets the sensitivity, "
                 "2 / n here), so dp-accounting's PLD of one Gaussian, exact for it (the analytic Gaussian mechanism "
                 "of Balle & Wang 2018, printed beside it), calibrates and charges it; autodp's RDP, which "
                 "calibrated dpgen's earlier DP-MERF runs with more noise, is the cross-check; privacy.accountant "
                 "applies to the subsampled-Gaussian ledgers")

# ---- settings (conf/method/<name>.yaml; validated when the config is composed) ----

@dataclass
class DPMERFConfig(MethodConfig):
    """DP-MERF (Harder et al. 2021), the reference baseline: the class-conditional mean embedding of the
    private set in random Fourier features, released once (Gaussian mechanism), a generator fitted to it."""

    name: str = "dpmerf"
    private: bool = True
    #: D random features (D / 2 frequencies, cos and sin); DP-MERF's MNIST setting
    n_features: int = 1000
    #: length scale of the Gaussian kernel (null: sqrt(127 d / 784), DP-MERF's MNIST kernel scaled to d pixels)
    length_scale: Optional[float] = None
    #: noise multiplier of the one release, std = z 2 / n (null: calibrated to privacy.epsilon)
    noise_multiplier: Optional[float] = None
    #: width of the random convolutional features' first layer (0: off, DP-MERF as published; layers c, 2c, 2c)
    conv_channels: int = 0
    #: share of the unit feature norm given to the convolutional features (the pixel kernel keeps 1 - share)
    conv_share: float = 0.5
    #: each convolutional layer's activations are average-pooled to conv_pool x conv_pool cells
    conv_pool: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int(self.n_features, "method.n_features", "the number of random features")
        if self.n_features % 2:
            raise ConfigError(f"method.n_features={self.n_features} is invalid: it must be even (cos and sin of "
                              "n_features / 2 frequencies)")
        if self.length_scale is not None:
            check_positive(self.length_scale, "method.length_scale", "the Gaussian kernel's length scale")
        if self.noise_multiplier is not None:
            check_positive(self.noise_multiplier, "method.noise_multiplier")
        if isinstance(self.conv_channels, bool) or not isinstance(self.conv_channels, int) or self.conv_channels < 0:
            raise ConfigError(f"method.conv_channels={self.conv_channels!r} is invalid: give 0 (no convolutional "
                              "features) or a positive width such as 16")
        if not 0.0 < float(self.conv_share) < 1.0:
            raise ConfigError(f"method.conv_share={self.conv_share!r} is invalid: it must lie strictly between 0 "
                              "and 1 (the share of the unit feature norm given to the convolutional features)")
        check_positive_int(self.conv_pool, "method.conv_pool", "the pooled grid of each convolutional layer")

#: DP-MERF's MNIST kernel variance on 784 pixels in [0, 1] (its public code's default)
MNIST_KERNEL_VARIANCE, MNIST_DIM = 127.0, 784


def default_length_scale(dim: int) -> float:
    """DP-MERF's MNIST length scale, scaled to ``dim`` pixels: sqrt(127 dim / 784)."""
    return math.sqrt(MNIST_KERNEL_VARIANCE * dim / MNIST_DIM)


def random_features(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """phi(x) = sqrt(2 / D) [cos(x W^T), sin(x W^T)] for rows x (n, d) and frequencies W (D/2, d): unit norm.
    A row with a non-finite value (or a projection that overflows) gets phi = 0, norm 0 <= 1: the
    release's sensitivity 2 / n holds for every input."""
    proj = x.flatten(1) @ freqs.T
    phi = torch.cat([torch.cos(proj), torch.sin(proj)], dim=1) * math.sqrt(1.0 / freqs.shape[0])
    return torch.where(torch.isfinite(phi).all(dim=1, keepdim=True), phi, torch.zeros((), dtype=phi.dtype,
                                                                                        device=phi.device))


#: the constant appended to each convolutional block before it is scaled to unit norm. Without it a blank image
#: (all activations 0) had psi = 0, and a generator matched the real mean's norm by mixing blank images with
#: templates (seen on the proxy, experiments/fidelity/2026-11-29_dpmerf_levers.md); with it a blank image maps to the
#: constant's own direction,
#: far from any real image's (pooled activations of norm 2-15 at He initialisation on USPS).
BLOCK_CONSTANT = 1.0


class ConvFeatures:
    """psi(x): a random (data-independent) convolutional network's pooled activations and a constant, each
    layer's block scaled to norm exactly 1 / sqrt(layers) (a row with a non-finite value: 0). ``weights``: the
    three layers' (out, in, 3, 3) kernels; ``shape``: the images' (C, H, W), so that flattened rows can be read
    as images."""

    def __init__(self, weights, pool: int, shape):
        self.weights, self.pool, self.shape = list(weights), int(pool), tuple(int(v) for v in shape)

    @staticmethod
    def draw(channels: int, in_channels: int, generator: torch.Generator, dtype=torch.float64):
        """He-normal kernels of widths c, 2c, 2c (3 x 3), drawn from ``generator``: no data involved."""
        widths, out = [in_channels, channels, 2 * channels, 2 * channels], []
        for a, b in zip(widths[:-1], widths[1:]):
            w = gaussian((b, a, 3, 3), generator=generator, device=generator.device, dtype=dtype)
            out.append(w * math.sqrt(2.0 / (9 * a)))
        return out

    def dim(self) -> int:
        return sum(int(w.shape[0]) * self.pool ** 2 + 1 for w in self.weights)

    def to(self, device=None, dtype=None) -> "ConvFeatures":
        return ConvFeatures([w.to(device=device, dtype=dtype) for w in self.weights], self.pool, self.shape)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        import torch.nn.functional as F

        h = x.reshape(x.shape[0], *self.shape).to(self.weights[0].dtype)
        h = torch.where(torch.isfinite(h), h, torch.zeros((), dtype=h.dtype, device=h.device))
        blocks = []
        for i, w in enumerate(self.weights):
            h = F.relu(F.conv2d(h, w, stride=1 if i == 0 else 2, padding=1))
            b = F.adaptive_avg_pool2d(h, self.pool).flatten(1)
            b = torch.cat([b, torch.full_like(b[:, :1], BLOCK_CONSTANT)], dim=1)  # norm >= 1: no division by 0
            blocks.append(b / b.norm(dim=1, keepdim=True) / math.sqrt(len(self.weights)))
        psi = torch.cat(blocks, dim=1)
        ok = torch.isfinite(psi).all(dim=1, keepdim=True) & torch.isfinite(x.flatten(1)).all(dim=1, keepdim=True)
        return torch.where(ok, psi, torch.zeros((), dtype=psi.dtype, device=psi.device))


def features(x: torch.Tensor, freqs: torch.Tensor, conv: Optional[ConvFeatures] = None,
             share: float = 0.5) -> torch.Tensor:
    """The embedding's feature vector of each row: phi(x) alone, or [sqrt(1 - share) phi, sqrt(share) psi]
    with the convolutional features psi; of norm at most 1 either way."""
    phi = random_features(x, freqs)
    if conv is None:
        return phi
    return torch.cat([phi * math.sqrt(1.0 - share), conv(x).to(phi.dtype) * math.sqrt(share)], dim=1)


def mean_embedding(x: torch.Tensor, y: Optional[torch.Tensor], freqs: torch.Tensor, num_classes: int,
                   chunk: int = 4096, conv: Optional[ConvFeatures] = None, share: float = 0.5) -> torch.Tensor:
    """(1/n) sum_i f(x_i) (outer) onehot(y_i): (D, C); (D, 1) without classes. Chunked over the rows. f is
    phi, or phi and the convolutional features (:func:`features`)."""
    n = x.shape[0]
    cols = max(num_classes, 1)
    width = 2 * freqs.shape[0] + (conv.dim() if conv is not None else 0)
    out = torch.zeros(width, cols, dtype=freqs.dtype, device=freqs.device)
    for i in range(0, n, chunk):
        phi = features(x[i:i + chunk].to(freqs.dtype), freqs, conv, share)
        if num_classes > 0:
            # a label outside [0, num_classes) adds nothing (no exception, no host read; dpgen.utils.labels)
            onehot = one_hot_or_zero(y[i:i + chunk], num_classes, phi.dtype)
        else:
            onehot = torch.ones(phi.shape[0], 1, dtype=phi.dtype, device=phi.device)
        out = out + phi.T @ onehot
    return out / n


@register("dpmerf")
class DPMERF(GenerativeMethod):
    Settings = DPMERFConfig
    private = True
    sampling = "without_replacement"
    accounts_steps = False  # one release before training; every step is post-processing
    needs_whole_set = True
    publishes_loss = True  # ||mu~ - mu_gen||^2: the release and generated samples only



    @classmethod
    def declare(cls, cfg, info, steps: int) -> OneShotGaussian:
        """One Gaussian release of the mean embedding (replace-one sensitivity 2 / n) at method.noise_multiplier;
        null: the privacy library calibrates it to the budget, and refuses a given one that spends more
        (:func:`dpgen.privacy.mechanisms.make_ledger`)."""
        m = cfg.method
        if info.n_private <= 0:
            raise ValueError("dpmerf needs the private set's size (the release's sensitivity is 2 / n)")
        z = None if m.noise_multiplier is None else float(m.noise_multiplier)
        return OneShotGaussian(z, sensitivity=2.0 / info.n_private,
                               label=f"DP-MERF (the mean embedding in {int(m.n_features)} random features"
                               + (f" and random convolutional features of width {int(m.conv_channels)})"
                                  if int(m.conv_channels) else ")"))

    def __init__(self, cfg, num_classes: int = 0, data_dim: int = 0, n_private: int = 0, steps: int = 0,
                 batch_size: int = 0, **_):
        super().__init__()
        from dpgen.methods.registry import DataInfo

        m, p = cfg.method, cfg.privacy
        mechanism = self.declare(cfg, DataInfo(int(n_private)), steps)
        self.num_classes, self.data_dim, self.n_private = int(num_classes), int(data_dim), int(n_private)
        self.n_features = int(m.n_features)
        self.conv_channels, self.conv_share = int(m.conv_channels), float(m.conv_share)
        self.conv_pool = int(m.conv_pool)
        self.conv: Optional[ConvFeatures] = None
        self.length_scale = float(m.length_scale) if m.length_scale is not None else default_length_scale(data_dim)
        self.sensitivity = mechanism.sensitivity
        self.delta, self.epsilon_budget = float(p.delta), float(p.epsilon)
        # one full-batch release, then post-processing: the ledger calibrates its noise (or refuses a given one
        # over the budget) before anything is released; the report says which
        self.ledger = ledger_for(mechanism, p, reason=LEDGER_REASON)
        self.noise_multiplier = z = self.ledger.prefix[0]
        self.noise_std = z * self.sensitivity
        self.max_steps = None  # post-processing: no per-step budget
        self.freqs: Optional[torch.Tensor] = None
        self.embedding: Optional[torch.Tensor] = None
        self.steps_taken = 0

    # ---- the one release ------------------------------------------------------------------------------
    def settings(self) -> Dict[str, Any]:
        """What the release was made with (a checkpoint's must equal a resumed run's: no second release)."""
        return {"n_features": self.n_features, "length_scale": self.length_scale, "noise_multiplier":
                self.noise_multiplier, "num_classes": self.num_classes, "n_private": self.n_private,
                "conv_channels": self.conv_channels, "conv_share": self.conv_share, "conv_pool": self.conv_pool}

    def prepare_data(self, x: torch.Tensor, y: torch.Tensor, output_dir=None):
        if self.embedding is not None:  # released before (a resumed run): never a second release
            return x, y
        if self.rng is None:
            raise RuntimeError("DPMERF.prepare_data needs the mechanism's random generator (method.rng)")
        if self.n_features % 2:
            raise ValueError(f"method.n_features={self.n_features} must be even (cos and sin of D/2 frequencies)")
        if x.shape[0] != self.n_private:
            # the loop refuses a set of another size first (dpgen.privacy.preflight.check_declared_size); the loaded
            # size is computed from the private data, so it is not in the message
            raise ValueError(f"dpmerf was built for dataset.n_train={self.n_private} records, and the loaded set has "
                             "another size: set dataset.n_train to the number of records in the files")
        dev = self.rng.device
        freqs = gaussian((self.n_features // 2, x[0].numel()), generator=self.rng, device=dev,
                            dtype=torch.float64) / self.length_scale
        conv = None
        if self.conv_channels:
            if x.dim() != 4:
                raise ValueError(f"method.conv_channels={self.conv_channels} needs images (N, C, H, W), the data "
                                 f"has {x.dim()} dimensions: set method.conv_channels=0 for vector data")
            conv = ConvFeatures(ConvFeatures.draw(self.conv_channels, int(x.shape[1]), self.rng), self.conv_pool,
                                x.shape[1:])
        mu = mean_embedding(x.to(dev), y.to(dev) if y is not None else None, freqs, self.num_classes, conv=conv,
                            share=self.conv_share)
        noise = gaussian(mu.shape, generator=self.rng, device=dev, dtype=torch.float64)
        self.ledger.release_prefix()  # accounted before the release can be used or published
        self.freqs = freqs.float()
        self.conv = conv.to(dtype=torch.float32) if conv is not None else None
        self.embedding = (mu + self.noise_std * noise).float()
        return x, y

    def sample_batch(self, n: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """No private record: training reads the release only."""
        return torch.empty(0, dtype=torch.long)

    # ---- training on the release ----------------------------------------------------------------------
    def loss_of(self, fake: torch.Tensor, y_fake: Optional[torch.Tensor]) -> torch.Tensor:
        if self.embedding is None:
            raise RuntimeError("dpmerf: the mean embedding was not released (prepare_data did not run, e.g. a "
                               "lazily loaded dataset): use an in-memory dataset")
        freqs, emb = self.freqs.to(fake.device), self.embedding.to(fake.device)
        conv = self.conv.to(device=fake.device) if self.conv is not None else None
        phi = features(fake.float(), freqs, conv, self.conv_share)
        if self.num_classes > 0:
            gen = phi.T @ torch.nn.functional.one_hot(y_fake.long(), self.num_classes).to(phi.dtype) / len(fake)
        else:
            gen = phi.mean(0, keepdim=True).T
        return ((emb - gen) ** 2).sum()

    def step(self, models, batch) -> Dict[str, torch.Tensor]:
        fake, y_fake = models["generator"].sample(batch.size, device=batch.device)
        loss = self.loss_of(fake, y_fake)
        loss.backward()
        return {"loss": loss.detach()}

    def account(self) -> None:
        self.steps_taken += 1  # post-processing: no privacy cost, counted for the report

    def epsilon(self) -> float:
        return self.ledger.epsilon()

    def privacy_report(self) -> Dict[str, Any]:
        from dpgen.privacy.wdp import gaussian_dp_epsilon

        return {
            "private": True,
            "mechanism": (f"class-conditional mean embedding in {self.n_features} random Fourier features (Gaussian "
                          f"kernel, length scale {self.length_scale:.4g})"
                          + (f" and the pooled activations of a random 3-layer convolutional network (width "
                             f"{self.conv_channels}, share {self.conv_share:g} of the unit feature norm)"
                             if self.conv_channels else "") + f", released once with Gaussian noise of std "
                          f"z 2 / n = {self.noise_std:.4g} (DP-MERF); training is post-processing"),
            **self.ledger.report(),
            "not_covered": ("the generated labels are uniform (the class proportions are not released); n is "
                            "public; the random frequencies are data-independent"),
            "delta": self.delta,
            "noise_multiplier": self.noise_multiplier,
            "sensitivity": self.sensitivity,
            "noise_std": self.noise_std,  # the release's noise std, z 2 / n
            "epsilon_analytic_gaussian": gaussian_dp_epsilon(self.noise_multiplier, self.delta),
            "depends_on_steps": False,
            "max_steps_in_budget": None,
            "training_steps": self.steps_taken,
            "guarantee_holds": True,
        }

    def state_dict(self) -> Dict[str, Any]:
        # the release (frequencies and noisy embedding) is the mechanism's output: it may be saved
        return {**super().state_dict(), "freqs": self.freqs, "embedding": self.embedding,
                "conv_weights": self.conv.weights if self.conv is not None else None,
                "conv_shape": list(self.conv.shape) if self.conv is not None else None,
                "settings": self.settings(), "training_steps": self.steps_taken}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Load :meth:`state_dict` of the current format (an older checkpoint is migrated when it is loaded:
        dpgen.train.migrations)."""
        super().load_state_dict(state)
        if state["embedding"] is not None:
            if state["settings"] != self.settings():
                raise ValueError(f"the checkpoint's DP-MERF release was made with {state['settings']}, this run "
                                 f"asks for {self.settings()}: a second release would spend the budget again; resume "
                                 "with the original method settings or start a new run folder")
            self.freqs, self.embedding = state["freqs"], state["embedding"]
            if state["conv_weights"] is not None:
                self.conv = ConvFeatures(state["conv_weights"], self.conv_pool, state["conv_shape"])
        self.steps_taken = int(state["training_steps"])


__all__ = ["ConvFeatures", "DPMERF", "default_length_scale", "features", "mean_embedding", "random_features"]
