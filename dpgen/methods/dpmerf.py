"""DP-MERF (Harder, Adamczewski & Park, AISTATS 2021): a reference baseline for the generation tables.

One release, then post-processing. Before training, the class-conditional mean embedding of the
private set in random Fourier features,

    mu = (1/n) sum_i phi(x_i) (outer) onehot(y_i),   phi(x) = sqrt(2/D) [cos(W x), sin(W x)],

(W: D/2 x d frequencies drawn N(0, I / l^2) for the Gaussian kernel of length scale l; ||phi(x)|| = 1
exactly, so ||phi(x) (outer) onehot(y)|| = 1) is released once with the Gaussian mechanism:
replacing one record moves mu by at most 2/n in l2 (two unit terms over n; n is public), so
mu~ = mu + N(0, (z 2/n)^2 I) is (epsilon, delta)-DP with z calibrated by the ledger (autodp RDP of one
Gaussian mechanism at sample rate 1, the prefix release of :class:`dpgen.privacy.ledger.Ledger`; the
analytic Gaussian mechanism of Balle & Wang 2018 is reported as an independent cross-check). Training
then fits a generator to mu~ alone: every step draws a generated batch with uniform labels (as DP-MERF's
own code does: the label proportions are not released) and minimises ||mu~ - mu_gen||^2, the squared
MMD in the random-feature space. ``sample_batch`` hands the loop no private record, so the steps are
post-processing and the guarantee does not depend on their number: ``max_steps`` is None and the loss may
be published.

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
from dpgen.utils.settings import ConfigError, MethodConfig

#: why DP-MERF's ledger is autodp's RDP whatever privacy.accountant says (the privacy report states it)
LEDGER_REASON = ("one Gaussian release of the whole set (sample rate 1), no subsampling or composition: "
                 "privacy.accountant applies to the subsampled-Gaussian ledgers; this release is calibrated with "
                 "autodp's RDP, as DP-MERF's measured results were, and the analytic Gaussian mechanism, exact for "
                 "one release, is printed beside it")

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


def mean_embedding(x: torch.Tensor, y: Optional[torch.Tensor], freqs: torch.Tensor, num_classes: int,
                   chunk: int = 4096) -> torch.Tensor:
    """(1/n) sum_i phi(x_i) (outer) onehot(y_i): (D, C); (D, 1) without classes. Chunked over the rows."""
    n = x.shape[0]
    cols = max(num_classes, 1)
    out = torch.zeros(2 * freqs.shape[0], cols, dtype=freqs.dtype, device=freqs.device)
    for i in range(0, n, chunk):
        phi = random_features(x[i:i + chunk].to(freqs.dtype), freqs)
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
    name = "dpmerf"
    private = True
    sampling = "without_replacement"
    accounts_steps = False  # one release before training; every step is post-processing
    needs_whole_set = True
    publishes_loss = True  # ||mu~ - mu_gen||^2: the release and generated samples only


    accounting_relation = "replace one record (the number of records n is public)"

    @classmethod
    def declare(cls, cfg, info, steps: int) -> OneShotGaussian:
        """One Gaussian release of the mean embedding (replace-one sensitivity 2 / n), its noise multiplier
        calibrated to the budget (autodp RDP of one full-batch release) unless method.noise_multiplier gives it."""
        from dpgen.privacy.accountants import autodp_epsilon
        from dpgen.privacy.local import geometric_bisect

        m, p = cfg.method, cfg.privacy
        if info.n_private <= 0:
            raise ValueError("dpmerf needs the private set's size (the release's sensitivity is 2 / n)")
        delta, budget = float(p.delta), float(p.epsilon)

        def eps_of(z: float) -> float:  # one Gaussian mechanism on the whole set (sample rate 1)
            return autodp_epsilon(((float(z), 1.0, 1),), delta, "without_replacement")

        if m.noise_multiplier is None:
            z = geometric_bisect(lambda s: eps_of(s) > budget, 1e-3, 1.0, rel_tol=float(p.rel_tol))
        else:
            z = float(m.noise_multiplier)
            if eps_of(z) > budget:
                raise ValueError(f"method.noise_multiplier={z} spends epsilon {eps_of(z):.4g} > privacy.epsilon="
                                 f"{budget}: raise the noise, or leave it null to calibrate it")
        return OneShotGaussian(z, calibrated=m.noise_multiplier is None, sensitivity=2.0 / info.n_private,
                               label=f"DP-MERF (the mean embedding in {int(m.n_features)} random features)")

    def __init__(self, cfg, num_classes: int = 0, data_dim: int = 0, n_private: int = 0, steps: int = 0,
                 batch_size: int = 0, **_):
        super().__init__()
        from dpgen.methods.registry import DataInfo

        m, p = cfg.method, cfg.privacy
        mechanism = self.declare(cfg, DataInfo(int(n_private)), steps)
        self.num_classes, self.data_dim, self.n_private = int(num_classes), int(data_dim), int(n_private)
        self.n_features = int(m.n_features)
        self.length_scale = float(m.length_scale) if m.length_scale is not None else default_length_scale(data_dim)
        self.sensitivity = mechanism.sensitivity
        self.delta, self.epsilon_budget = float(p.delta), float(p.epsilon)
        self.noise_multiplier = z = mechanism.noise_multiplier
        self.noise_std = z * self.sensitivity
        # one full-batch release, then post-processing (the report says whether its noise was calibrated above)
        self.ledger = ledger_for(mechanism, p, reason=LEDGER_REASON)
        self.accountant = self.ledger.accountant
        self.max_steps = None  # post-processing: no per-step budget
        self.freqs: Optional[torch.Tensor] = None
        self.embedding: Optional[torch.Tensor] = None
        self.steps_taken = 0

    # ---- the one release ------------------------------------------------------------------------------
    def settings(self) -> Dict[str, Any]:
        return {"n_features": self.n_features, "length_scale": self.length_scale, "noise_multiplier":
                self.noise_multiplier, "num_classes": self.num_classes, "n_private": self.n_private}

    def prepare_data(self, x: torch.Tensor, y: torch.Tensor, output_dir=None):
        if self.embedding is not None:  # released before (a resumed run): never a second release
            return x, y
        if self.rng is None:
            raise RuntimeError("DPMERF.prepare_data needs the mechanism's random generator (method.rng)")
        if self.n_features % 2:
            raise ValueError(f"method.n_features={self.n_features} must be even (cos and sin of D/2 frequencies)")
        if x.shape[0] != self.n_private:
            raise ValueError(f"dpmerf was built for {self.n_private} records, got {x.shape[0]}")
        dev = self.rng.device
        freqs = torch.randn(self.n_features // 2, x[0].numel(), generator=self.rng, device=dev,
                            dtype=torch.float64) / self.length_scale
        mu = mean_embedding(x.to(dev), y.to(dev) if y is not None else None, freqs, self.num_classes)
        noise = torch.randn(mu.shape, generator=self.rng, device=dev, dtype=torch.float64)
        self.ledger.release_prefix()  # accounted before the release can be used or published
        self.freqs = freqs.float()
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
        phi = random_features(fake.float(), freqs)
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
                          f"kernel, length scale {self.length_scale:.4g}), released once with Gaussian noise of std "
                          f"z 2 / n = {self.noise_std:.4g} (DP-MERF); training is post-processing"),
            **self.ledger.report(),
            "neighbouring_relation": "replace one record (the number of records n is public)",
            "not_covered": ("the generated labels are uniform (the class proportions are not released); n is "
                            "public; the random frequencies are data-independent"),
            "delta": self.delta,
            "noise_multiplier": self.noise_multiplier,
            "sensitivity": self.sensitivity,
            "sigma": self.noise_std,  # the release's noise std, z 2 / n
            "epsilon_analytic_gaussian": gaussian_dp_epsilon(self.noise_multiplier, self.delta),
            "depends_on_steps": False,
            "max_steps_in_budget": None,
            "training_steps": self.steps_taken,
            "guarantee_holds": True,
        }

    def state_dict(self) -> Dict[str, Any]:
        # the release (frequencies and noisy embedding) is the mechanism's output: it may be saved
        return {**super().state_dict(), "freqs": self.freqs, "embedding": self.embedding,
                "settings": self.settings(), "training_steps": self.steps_taken}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        if state.get("embedding") is not None:
            if state.get("settings") != self.settings():
                raise ValueError(f"the checkpoint's DP-MERF release was made with {state.get('settings')}, this run "
                                 f"asks for {self.settings()}: a second release would spend the budget again; resume "
                                 "with the original method settings or start a new run folder")
            self.freqs, self.embedding = state["freqs"], state["embedding"]
        self.steps_taken = int(state.get("training_steps", 0))


__all__ = ["DPMERF", "default_length_scale", "mean_embedding", "random_features"]
