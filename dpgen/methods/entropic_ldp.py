"""Entropic-LDP GAN (entropic-ldp-gan.txt): a generator trained on locally privatised data with an
entropic W_p loss whose regularisation matches the privatisation noise.

Privacy mechanism (section 2.1, 4.1; :mod:`dpgen.privacy.local`). Before training, every record is
privatised once, locally: flattened, optionally DCT-transformed and sparsified (Laplace, section
4.4), projected on a ball of ``radius`` (l1 for Laplace, l2 for Gaussian) and noised: Laplace of
scale b = Delta_1 / epsilon (epsilon-LDP) or Gaussian of std s (analytic Gaussian mechanism,
(epsilon, delta)-LDP). The sensitivity is the ball's diameter 2r by default (``sensitivity=radius``
reproduces the paper's text, which halves the noise). The privatised set is cached in the run
folder with its parameters (the configuration and the record count: nothing computed from the clean
records, which would sit beside the release and tell neighbouring datasets apart), so a resumed run
reuses the same release (fresh noise would be a
second release of every record and double the privacy cost); the labels are dropped (the paper
trains unsupervised), so training never sees a clean value.

Remark 1: everything after the release is post-processing, so the guarantee is per record, set by
the local mechanism alone, and independent of the number of steps, the batch sampling and any
accountant: ``max_steps`` stays None and ``epsilon()`` is constant.

Loss (:mod:`dpgen.losses.entropic`): ``entropic`` W_{p,lambda} without debiasing, with (p, lambda) =
(1, b) for Laplace and (2, 2 s^2) for Gaussian unless given; ``wasserstein`` (exact W_p^p, POT) and
``sinkhorn`` (debiased divergence, same lambda) for the paper's comparisons. The generated batch is
compared with the privatised batch; for ``dct=true`` the generated images are DCT'd first.
"""

from __future__ import annotations

import json
import secrets
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch

from dpgen.losses.entropic import entropic_wasserstein, matched_loss_params, sinkhorn_divergence, wasserstein
from dpgen.methods.base import GenerativeMethod
from dpgen.privacy.ledger import RELATIONS
from dpgen.privacy.local import (
    analytic_gaussian_sigma,
    geometric_bisect,
    gaussian_mechanism,
    gaussian_sigma,
    laplace_mechanism,
    laplace_scale,
)
from dpgen.methods.registry import register
from dpgen.privacy.validation import check_positive
from dpgen.privacy.mechanisms import LocalRelease
from dpgen.utils.dct import dct_matrix  # noqa: F401  (re-exported: the figures use it)
from dpgen.utils.settings import ConfigError, MethodConfig
from dpgen.utils.settings import choice as _choice

CACHE_NAME = "privatised_data.pt"
LOSSES = ("entropic", "wasserstein", "sinkhorn")

# ---- settings (conf/method/<name>.yaml; validated when the config is composed) ----

@dataclass
class EntropicLDPConfig(MethodConfig):
    """Entropic-LDP GAN: data privatised once by a local mechanism (epsilon per record)."""

    name: str = "entropic_ldp"
    mechanism: str = "gaussian"
    radius: float = 1.0
    #: diameter (2r, correct under LDP) or radius (the paper's text)
    sensitivity: str = "diameter"
    #: Gaussian calibration: analytic (Balle & Wang, any epsilon) or classic (proven for epsilon < 1)
    calibration: str = "analytic"
    #: project records on the ball (false: the records must already lie in it; checked)
    project: bool = True
    #: training loss (dpgen/losses/entropic.py): entropic (W_{p,lambda}, no debiasing), wasserstein
    #: (exact W_p^p, POT), sinkhorn (debiased Sinkhorn divergence)
    loss: str = "entropic"
    #: order p (null: matched to the mechanism, laplace -> 1, gaussian -> 2)
    p: Optional[int] = None
    #: entropic regularisation lambda (null: matched, laplace b -> b, gaussian s -> 2 s^2)
    reg: Optional[float] = None
    #: allow p not matching the mechanism (a warning instead of an error)
    force: bool = False
    #: Laplace + DCT as section 4.4: DCT of each image, coefficients below the per-image
    #: dct_quantile of |c| set to 0, then the l1 projection; generated images are DCT'd too
    dct: bool = False
    dct_quantile: float = 0.8
    #: geomloss epsilon-scaling ratio in (0, 1) (closer to 1: more accurate, slower)
    scaling: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice(self.mechanism, "method.mechanism", ("laplace", "gaussian"))
        check_positive(self.radius, "method.radius", "the ball the records are projected on")
        _choice(self.sensitivity, "method.sensitivity", ("diameter", "radius"))
        _choice(self.calibration, "method.calibration", ("analytic", "classic"))
        _choice(self.loss, "method.loss", ("entropic", "wasserstein", "sinkhorn"))
        if self.p is not None:
            _choice(self.p, "method.p", (1, 2))
            matched = 1 if self.mechanism == "laplace" else 2
            if self.p != matched:
                msg = (f"method.p={self.p} does not match method.mechanism={self.mechanism} (the paper's rule: "
                       f"laplace -> p = 1, gaussian -> p = 2, so the entropic loss denoises the mechanism)")
                if not self.force:
                    raise ConfigError(msg + f": set method.p={matched} (or null), or method.force=true.")
                import warnings

                warnings.warn(msg + "; method.force=true: going on.", stacklevel=2)
        if self.reg is not None:
            check_positive(self.reg, "method.reg", "the entropic regularisation lambda")
        if not 0.0 < self.dct_quantile < 1.0:
            raise ConfigError(f"method.dct_quantile={self.dct_quantile} is invalid: it must lie in (0, 1).")
        if not 0.0 < self.scaling < 1.0:
            raise ConfigError(f"method.scaling={self.scaling} is invalid: it must lie in (0, 1).")


# ---- DCT (orthonormal, type II): dpgen.utils.dct ----------------------------------------------------------
def dct2(x: torch.Tensor) -> torch.Tensor:
    """2-D orthonormal DCT over the last two axes (differentiable)."""
    h, w = x.shape[-2:]
    ch, cw = dct_matrix(h, x.dtype, x.device), dct_matrix(w, x.dtype, x.device)
    return ch @ x @ cw.T


def sparsify_rows(rows: np.ndarray, quantile: float) -> np.ndarray:
    """Zero, per row, the coefficients whose |c| is below that row's ``quantile`` of |c| (section 4.4)."""
    a = np.abs(rows)
    thr = np.quantile(a, quantile, axis=1, keepdims=True)
    return np.where(a >= thr, rows, 0.0)


# ---- noise scale <-> epsilon --------------------------------------------------------------------------------
def noise_scale(mechanism: str, epsilon: float, delta: float, radius: float, sensitivity: str = "diameter",
                calibration: str = "analytic") -> float:
    """Laplace b or Gaussian s of the local mechanism."""
    if mechanism == "laplace":
        return laplace_scale(epsilon, radius, sensitivity)
    if mechanism == "gaussian":
        return gaussian_sigma(epsilon, delta, radius, sensitivity, calibration)
    raise ValueError(f"mechanism={mechanism!r} is invalid: choose laplace or gaussian")


def epsilon_for_noise_scale(mechanism: str, scale: float, radius: float, delta: float = 1e-5,
                            sensitivity: str = "diameter") -> float:
    """The per-record epsilon a noise scale gives (inverse of :func:`noise_scale`; analytic Gaussian)."""
    if not scale > 0:
        raise ValueError(f"noise scale={scale!r} is invalid: it must be > 0")
    D = 2.0 * radius if sensitivity == "diameter" else float(radius)
    if mechanism == "laplace":
        return D / scale
    # the epsilon whose analytic Gaussian sigma is the scale (sigma decreases in epsilon)
    return geometric_bisect(lambda eps: analytic_gaussian_sigma(eps, delta, D) > scale, 1e-6, 1.0)


# ---- the release ------------------------------------------------------------------------------------------
def privatise(x: np.ndarray, mechanism: str, epsilon: float, delta: float, radius: float,
              sensitivity: str = "diameter", calibration: str = "analytic", project: bool = True,
              dct_shape: Optional[Sequence[int]] = None, dct_quantile: float = 0.8,
              rng: Optional[np.random.Generator] = None) -> Tuple[np.ndarray, float]:
    """Privatise every record of ``x`` (n, ...) once. Returns (rows (n, d), noise scale).

    ``dct_shape`` (H, W): DCT each record (as an H x W image) and sparsify it before the projection.
    """
    rows = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    if dct_shape is not None:
        from scipy.fft import dctn

        h, w = dct_shape[-2:]
        imgs = rows.reshape(len(rows), -1, h, w)
        rows = dctn(imgs, type=2, norm="ortho", axes=(-2, -1)).reshape(len(rows), -1)
        rows = sparsify_rows(rows, dct_quantile)
    if mechanism == "laplace":
        z, s = laplace_mechanism(rows, epsilon, radius, rng=rng, sensitivity=sensitivity, project=project)
    elif mechanism == "gaussian":
        z, s = gaussian_mechanism(rows, epsilon, delta, radius, rng=rng, sensitivity=sensitivity,
                                  calibration=calibration, project=project)
    else:
        raise ValueError(f"mechanism={mechanism!r} is invalid: choose laplace or gaussian")
    return z, float(s)


def resolve_loss(mechanism: str, scale: float, p: Optional[int] = None, reg: Optional[float] = None,
                 force: bool = False) -> Tuple[int, float]:
    """(p, lambda) of the loss: the paper's matched values unless given; a mismatched p is an error unless forced."""
    p0, reg0 = matched_loss_params(mechanism, scale)
    if p is not None and int(p) != p0:
        msg = (f"p={p} does not match mechanism={mechanism} (laplace -> p = 1, gaussian -> p = 2): the entropic "
               "loss then does not denoise the mechanism")
        if not force:
            raise ValueError(msg + f"; use p={p0} or force=True.")
        warnings.warn(msg + " (forced).", stacklevel=2)
    p = p0 if p is None else int(p)
    if reg is not None and not reg > 0:
        raise ValueError(f"reg={reg!r} is invalid: the entropic regularisation must be > 0")
    return p, (reg0 if reg is None else float(reg))


def ldp_loss(kind: str, fake_rows: torch.Tensor, real_rows: torch.Tensor, p: int, reg: float,
             scaling: float = 0.9) -> torch.Tensor:
    """The loss ``kind`` (entropic | wasserstein | sinkhorn) between generated and privatised rows."""
    if kind == "entropic":
        return entropic_wasserstein(fake_rows, real_rows, p=p, reg=reg, scaling=scaling)
    if kind == "sinkhorn":
        return sinkhorn_divergence(fake_rows, real_rows, p=p, reg=reg, scaling=scaling)
    if kind == "wasserstein":
        return wasserstein(fake_rows, real_rows, p=p)
    raise ValueError(f"loss={kind!r} is invalid: choose one of {', '.join(LOSSES)}")


@register("entropic_ldp")
class EntropicLDP(GenerativeMethod):
    Settings = EntropicLDPConfig
    private = True
    accounts_steps = False  # Remark 1: training on the release is post-processing
    local = True  # each record privatised on its own: n is not in the guarantee

    @classmethod
    def declare(cls, cfg, info, steps: int) -> LocalRelease:
        m = cfg.method
        return LocalRelease(m.mechanism, m.radius, m.sensitivity, label="Entropic-LDP")

    def __init__(self, cfg, num_classes: int = 0, data_dim: int = 0, n_private: int = 0, steps: int = 0,
                 batch_size: int = 0, **_):
        super().__init__()
        m, pr = cfg.method, cfg.privacy
        self.mechanism = m.mechanism
        self.radius = float(m.radius)
        self.sensitivity = m.sensitivity
        self.calibration = m.calibration
        self.project = bool(m.project)
        self.epsilon_budget = float(pr.epsilon)
        self.delta = float(pr.delta) if self.mechanism == "gaussian" else 0.0
        self.noise_scale = noise_scale(self.mechanism, self.epsilon_budget, pr.delta, self.radius,
                                       self.sensitivity, self.calibration)
        self.loss_kind = m.loss
        self.p, self.reg = resolve_loss(self.mechanism, self.noise_scale, m.p,
                                        m.reg, bool(m.force))
        self.dct = bool(m.dct)
        self.dct_quantile = float(m.dct_quantile)
        self.scaling = float(m.scaling)
        self.secret = bool(pr.secret_randomness)
        self.seed = int(cfg.seed)
        self.dataset_name = cfg.dataset.name
        self.max_steps = None  # Remark 1: no per-step budget
        self.prepared = False
        self.cache_path: Optional[str] = None
        self.steps_taken = 0

    # ---- the one-time release -------------------------------------------------------------------------------
    def params(self, shape) -> Dict[str, Any]:
        return {"dataset": self.dataset_name, "mechanism": self.mechanism, "epsilon": self.epsilon_budget,
                "delta": self.delta, "radius": self.radius, "sensitivity": self.sensitivity,
                "calibration": self.calibration, "project": self.project, "dct": self.dct,
                "dct_quantile": self.dct_quantile if self.dct else None, "noise_scale": self.noise_scale,
                "shape": list(shape)}

    def prepare_data(self, x: torch.Tensor, y: torch.Tensor, output_dir=None):
        # the cache is keyed on public facts only (the configuration and the number of records): a key
        # computed from the clean records (a hash, say) would sit beside the release and tell D from D'
        shape = tuple(x.shape[1:])
        params = {**self.params(shape), "records": int(len(x))}
        cache = Path(output_dir) / CACHE_NAME if output_dir is not None else None
        if cache is not None and cache.exists():
            state = torch.load(cache, map_location="cpu", weights_only=False)
            if state["params"] != params:
                raise ValueError(
                    f"{cache} holds a release made with other parameters or data ({json.dumps(state['params'])}); "
                    "a second release with fresh noise would spend the privacy budget again: use a new run folder "
                    "(hydra.run.dir=...) or the original settings.")
            z = state["x"]
        else:
            if self.secret:
                rng = np.random.default_rng(secrets.randbits(128))
            else:
                rng = np.random.default_rng([self.seed, 7_000_003])
            rows, s = privatise(x.detach().cpu().numpy(), self.mechanism, self.epsilon_budget, self.delta or 1e-5,
                                self.radius, self.sensitivity, self.calibration, self.project,
                                dct_shape=shape[-2:] if self.dct else None, dct_quantile=self.dct_quantile, rng=rng)
            assert abs(s - self.noise_scale) <= 1e-9 * s
            z = torch.from_numpy(rows.astype(np.float32)).reshape(len(rows), *shape)
            if cache is not None:
                import io

                from dpgen.utils.io import atomic_write_bytes

                buf = io.BytesIO()
                torch.save({"x": z, "params": params}, buf)
                atomic_write_bytes(cache, buf.getvalue())
        self.prepared = True
        self.cache_path = str(cache) if cache is not None else None
        # labels dropped: the paper trains unsupervised, and a clean label would leak
        return z.to(x.device), torch.zeros(len(z), dtype=torch.long, device=x.device)

    def use_release(self) -> None:
        """Train on a set the caller released with this mechanism (the entropic-LDP figures privatise
        their sets themselves, to compare losses on one release): no release here."""
        self.prepared = True

    # ---- loss ------------------------------------------------------------------------------------------------
    def rows(self, x: torch.Tensor) -> torch.Tensor:
        if self.dct:
            x = dct2(x)
        return x.reshape(len(x), -1)

    def loss(self, fake, y_fake, real, y_real) -> torch.Tensor:
        if not self.prepared:
            raise RuntimeError(
                "entropic_ldp: the private set was not privatised (prepare_data was not called, e.g. a lazily "
                "loaded dataset): refusing to train on clean data. Use an in-memory dataset.")
        return ldp_loss(self.loss_kind, self.rows(fake), real.reshape(len(real), -1).detach(), self.p, self.reg,
                        self.scaling)

    def account(self) -> None:
        self.steps_taken += 1  # not a privacy cost (post-processing): recorded for the report only

    def epsilon(self) -> float:
        return self.epsilon_budget

    def privacy_report(self) -> Dict[str, Any]:
        what = (f"Laplace noise of scale b = {self.noise_scale:.6g} on the l1 ball of radius {self.radius}"
                if self.mechanism == "laplace" else
                f"Gaussian noise of std s = {self.noise_scale:.6g} on the l2 ball of radius {self.radius} "
                f"({self.calibration} calibration)")
        return {
            "private": True,
            "guarantee": ("local DP, per record: each record was privatised once, before training, by the local "
                          "mechanism; training is post-processing"),
            "neighbouring_relation": RELATIONS["local"],
            "not_covered": "labels are dropped; the number of records is public",
            "mechanism": what + (f", after a DCT and zeroing coefficients below the {self.dct_quantile} quantile"
                                 if self.dct else ""),
            "epsilon_budget": self.epsilon_budget,
            "epsilon_spent": self.epsilon_budget,
            "delta": self.delta,
            "noise_scale": self.noise_scale,
            # the Gaussian's std and z = std / D (D = 2r or r); a Laplace mechanism has neither (its scale is b)
            "noise_std": self.noise_scale if self.mechanism == "gaussian" else None,
            "noise_multiplier": (self.noise_scale / (2 * self.radius if self.sensitivity == "diameter" else self.radius)
                                 if self.mechanism == "gaussian" else None),
            "radius": self.radius,
            "sensitivity": (f"{self.sensitivity}: {2 * self.radius if self.sensitivity == 'diameter' else self.radius}"
                            + (" (the paper's text; under LDP the true epsilon is then about twice the budget)"
                               if self.sensitivity == "radius" else "")),
            "depends_on_steps": False,
            "remark_1": ("the guarantee does not depend on the number of training steps, the batch sampling or any "
                         "accountant (post-processing of the one-time release)"),
            "accountant": ("none: privacy.accountant (PLD / RDP) applies to subsampled-Gaussian ledgers; here each "
                           "record is privatised once by a local mechanism whose noise follows from (epsilon, delta) "
                           f"in closed form ({self.mechanism}), with no composition or subsampling to account"),
            "max_steps_in_budget": None,
            "training_steps": self.steps_taken,
            "private_steps": self.steps_taken,  # steps on the released data: they cost no privacy
            "labels": "dropped (unsupervised, as in the paper)",
            "loss": self.loss_kind,
            "p": self.p,
            "reg": self.reg if self.loss_kind != "wasserstein" else None,
            "release_cache": self.cache_path,
            # project=false: the mechanism checked that every record lies in the ball; sensitivity=radius
            # (the paper's text) halves the noise of a replace-one change: the budget does not hold
            "guarantee_holds": self.sensitivity != "radius",
        }

    def state_dict(self) -> Dict[str, Any]:
        return {"accountant": None, "release": self.params([]) | {"cache": self.cache_path},
                "training_steps": self.steps_taken}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.steps_taken = int(state.get("training_steps", 0))
