"""DP-SGD (Abadi et al. 2016) for classifiers, with the WDP paper's three accountants side by side.

One step, Poisson sampling at rate q = B / N: per-example gradients of the cross-entropy, each clipped to l2 norm
<= C and summed (``method.per_sample``: ``ghost``, opacus' fast gradient clipping, or ``func``, torch.func; both give
the same sum), plus N(0, (sigma C)^2 I), divided by the expected batch size q N. Besides the ledger
(``privacy.accountant``), ``method.accountants`` runs the moments, Bayesian (``bdp``) and Wasserstein (``wdp``)
accountants on the same training, the last two fed with distances between clipped gradients of ``pair_examples``
examples per step.

Contract: an example's contribution to the sum moves it by at most C (float64 clip and sum), and an example with
non-finite values or an out-of-range label contributes 0; the ledger's accountant is data-independent and stops the
run before ``privacy.epsilon``; the BDP and WDP budgets are computed from the private gradients and are not released
privately. The mechanism, each accountant, which gradient pairs: docs/PAPERS.md, "DP-SGD classification".
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from dpgen.methods.base import Method, ledger_for, poisson_gaussian
from dpgen.methods.registry import register
from dpgen.utils.labels import label_in_range, safe_labels
from dpgen.privacy.ledger import RELATIONS
from dpgen.privacy.mechanisms import SubsampledGaussian
from dpgen.privacy.validation import (PrivacyParameterError, check_delta, check_positive, check_positive_int,
                                      check_sample_rate)
from dpgen.utils.noise import gaussian, permutation, uniform
from dpgen.utils.settings import ConfigError, MethodConfig
from dpgen.utils.settings import choice as _choice

# ---- settings (conf/method/<name>.yaml; validated when the config is composed) ----

@dataclass
class DPSGDConfig(MethodConfig):
    """DP-SGD classifier (WDP paper): per-sample clipping at C, noise sigma C."""

    name: str = "dpsgd"
    sampling: str = "poisson"
    clip: float = 1.0
    noise_multiplier: Optional[float] = None
    #: accountants run on the same training (dpgen/methods/dpsgd.py) besides the ledger (privacy.accountant,
    #: always on): moments, rdp, opacus_rdp, pld (DP), bdp (Bayesian, Triastcyn & Faltings), wdp (Wasserstein)
    accountants: List[str] = field(default_factory=lambda: ["moments", "bdp", "wdp"])
    bdp_delta: float = 1e-10
    wdp_delta: float = 1e-10
    #: WDP order mu and Theorem 1's beta (the WDP authors' code: 16 and 32)
    wdp_order: float = 16.0
    wdp_beta: float = 32.0
    #: examples per batch whose clipped gradients give the pairs of the bdp/wdp accountants (k(k-1)/2 pairs)
    pair_examples: int = 8
    #: per-example gradients computed this many at a time (null: the whole batch at once; per_sample=func)
    chunk_size: Optional[int] = 32
    #: the clipped per-sample sum: ghost (opacus' fast gradient clipping, default) or func (torch.func, materialised)
    per_sample: str = "ghost"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self.clip, "method.clip", "the per-sample gradient clipping bound C")
        if self.noise_multiplier is not None:
            check_positive(self.noise_multiplier, "method.noise_multiplier")
        for a in self.accountants:
            _choice(a, "method.accountants[]", ACCOUNTANT_CHOICES)
        _choice(self.per_sample, "method.per_sample", ("ghost", "func"))
        check_delta(self.bdp_delta, "method.bdp_delta")
        check_delta(self.wdp_delta, "method.wdp_delta")
        if not self.wdp_order >= 1:
            raise ConfigError(f"method.wdp_order={self.wdp_order} is invalid: the WDP order mu must be >= 1.")
        check_positive(self.wdp_beta, "method.wdp_beta", "Theorem 1's free parameter beta, e.g. 32")
        if self.pair_examples < 2:
            raise ConfigError(f"method.pair_examples={self.pair_examples} is invalid: the bdp/wdp accountants need "
                              "at least 2 per-example gradients per step (3 for bdp); e.g. 8.")
        if self.chunk_size is not None:
            check_positive_int(self.chunk_size, "method.chunk_size")

#: accountants dpsgd can run: the DP ledgers and the two pairwise (data-dependent) ones
DP_ACCOUNTANTS = ("moments", "rdp", "opacus_rdp", "pld")
PAIRWISE_ACCOUNTANTS = ("bdp", "wdp")
ACCOUNTANT_CHOICES = DP_ACCOUNTANTS + PAIRWISE_ACCOUNTANTS
#: the papers' framework name of each accountant's budget
FRAMEWORK = {"moments": "DP", "rdp": "DP", "opacus_rdp": "DP", "pld": "DP", "opacus_prv": "DP", "bdp": "BDP",
             "wdp": "WDP"}


# ----------------------------------------------------------------------------------------------
# per-example gradients and clipping
# ----------------------------------------------------------------------------------------------
#: how DP-SGD computes the clipped per-sample sum (method.per_sample)
PER_SAMPLE_CHOICES = ("ghost", "func")


def per_sample_gradients(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                         chunk_size: Optional[int] = None, return_loss: bool = False):
    """``{name: (B, *param.shape)}``: the gradient of each example's cross-entropy, by ``torch.func``.

    Equal (to float round-off) to ``B`` single-example backward passes; the model must not mix
    examples (no batch norm) and must be pure (no in-place activations). ``return_loss=True`` also
    returns the ``(B,)`` per-example losses (computed in the same pass).
    """
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def loss_one(p, b, xi, yi):
        out = functional_call(model, (p, b), (xi.unsqueeze(0),))
        y1 = yi.unsqueeze(0)
        ok = label_in_range(y1, out.shape[-1])[0]  # an out-of-range label: loss and gradient 0 (module doc)
        loss = F.cross_entropy(out, safe_labels(y1, out.shape[-1]))
        loss = torch.where(ok, loss, torch.zeros_like(loss))
        return loss, loss.detach()

    grads, losses = vmap(grad(loss_one, has_aux=True), in_dims=(None, None, 0, 0),
                         chunk_size=chunk_size)(params, buffers, x, y)
    return (grads, losses) if return_loss else grads


def per_example_cross_entropy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``(B,)`` cross-entropies of the logits ``out``; NaN for a label outside [0, classes) (``F.cross_entropy``
    would raise there, at a step decided by one private record): the ghost clipping drops a record whose loss
    is not finite (:class:`dpgen.privacy.per_sample.GhostClippedSum`), so it contributes nothing."""
    classes = out.shape[-1]
    ce = F.cross_entropy(out, safe_labels(y, classes), reduction="none")
    return torch.where(label_in_range(y, classes), ce, torch.full_like(ce, float("nan")))


def flatten_gradients(grads: Dict[str, torch.Tensor]) -> torch.Tensor:
    """``(B, P)``: the per-example gradients of every parameter, concatenated."""
    return torch.cat([g.reshape(g.shape[0], -1) for g in grads.values()], dim=1)


def check_clip(clip) -> float:
    return check_positive(clip, "method.clip", "the per-example gradient clipping bound C, e.g. 1.0")


def clip_gradients(flat: torch.Tensor, clip: float):
    """Rows of ``flat`` rescaled to l2 norm ``<= clip``; returns ``(clipped, norms before clipping)``."""
    from dpgen.privacy.clipping import clip_per_sample  # the one per-sample clipping (DP-DANN, DP-Sinkhorn too)

    clipped, norms = clip_per_sample([flat], check_clip(clip))
    return clipped[0], norms


def pair_distances(g: torch.Tensor) -> np.ndarray:
    """``||g_i - g_j||`` of all ``k (k - 1) / 2`` pairs ``i < j`` of the rows of ``g`` (float64 numpy)."""
    if g.shape[0] < 2:
        raise PrivacyParameterError(
            f"pair_examples={g.shape[0]}: the pairwise accountants need at least 2 gradients per step.")
    return torch.pdist(g.float()).double().cpu().numpy()


# ----------------------------------------------------------------------------------------------
# the method
# ----------------------------------------------------------------------------------------------
@dataclass
class ClassificationBatch:
    """One step's private batch (x, y) of a classification run."""

    x: torch.Tensor
    y: torch.Tensor


@register("dpsgd", tasks=("classification",))
class DPSGD(Method):
    """DP-SGD's mechanism + the accountants of one classification run (see module doc).

    ``private=False`` gives plain SGD (no clipping, no noise, no accountant): the non-private baseline.
    It implements the one method contract (``dpgen.methods.base.Method``): ``sample_batch``
    (Poisson at rate q; shuffled epochs for the non-private baseline), ``step({"model": m}, batch)``
    sets the noisy gradient, ``account()`` charges the step in every accountant.
    """

    Settings = DPSGDConfig



    #: examples a step's pairs need: 2 (wdp), 3 with bdp (its estimate needs >= 2 pairs); set by _check_accountants
    min_pair_examples = 2

    @classmethod
    def declare(cls, cfg, info, steps: int) -> SubsampledGaussian:
        """Poisson batches of B of the n records, per-sample gradients clipped to C (sensitivity C)."""
        return poisson_gaussian(cfg, info, cfg.method.clip, "DP-SGD")

    def __init__(
        self,
        *,
        clip: float = 1.0,
        noise_multiplier: Optional[float] = None,
        sample_rate: float = 0.01,
        expected_batch_size: float = 1.0,
        accountants: Sequence[str] = ("moments", "bdp", "wdp"),
        delta: float = 1e-5,
        bdp_delta: float = 1e-10,
        wdp_delta: float = 1e-10,
        wdp_order: float = 16.0,
        wdp_beta: float = 32.0,
        bdp_orders: Optional[Sequence[int]] = None,
        pair_examples: int = 8,
        total_steps: int = 1,
        batch_size: Optional[int] = None,
        private: bool = True,
        chunk_size: Optional[int] = None,
        ledger=None,
        per_sample: str = "ghost",
    ) -> None:
        self.private = bool(private)
        self.clip = check_clip(clip)
        self.chunk_size = chunk_size
        if per_sample not in PER_SAMPLE_CHOICES:
            raise PrivacyParameterError(f"method.per_sample={per_sample!r} is not one of {', '.join(PER_SAMPLE_CHOICES)}")
        #: how the clipped per-sample sum is computed: "ghost" (opacus' fast gradient clipping through
        #: dpgen.privacy.per_sample; 2.1x faster on the WDP MNIST CNN at B = 1024) or "func" (torch.func
        #: per-example gradients, materialised in chunks of chunk_size, then clipped)
        self.per_sample = per_sample
        self._ghost = None  # (model, GhostClippedSum) of the model last seen
        self.sample_rate = check_sample_rate(sample_rate)
        self.expected_batch_size = float(expected_batch_size)
        self.accountants: Dict[str, Any] = {}
        self.deltas: Dict[str, float] = {}
        self.noise_multiplier = None
        self.pair_examples = int(pair_examples)
        self.timing = {"sgd": 0.0, "pairs": 0.0, **{a: 0.0 for a in ACCOUNTANT_CHOICES}}
        self.timed_steps = 0
        self.sampling = "poisson" if self.private else "shuffled epochs"
        self._perm: Optional[torch.Tensor] = None
        self._pos = 0
        self._distances = None  # the pair distances of the last step, for account()
        self._pair_idx = None  # the pair examples sample_batch drew for the next step
        self.ledger = None
        #: the DP accountant that keeps the budget: the ledger's (privacy.accountant resolved; default PLD), or
        #: the moments accountant when the method is built without a ledger
        self.ledger_name = ledger.accountant_name if ledger is not None else "moments"
        if not self.private:
            return
        self.noise_multiplier = check_positive(noise_multiplier, "method.noise_multiplier",
                                               "the Gaussian noise std divided by C")
        names = list(dict.fromkeys([self.ledger_name, *accountants]))  # the ledger's accountant first
        self._check_accountants(names, batch_size)
        #: the run's dpgen.privacy.ledger.Ledger (calibration and budget); its accountant is the one below under
        #: ``ledger_name``, so the ledger and the reported DP epsilon are one
        self.ledger = ledger
        for a in names:
            self.accountants[a], self.deltas[a] = self._accountant(
                a, ledger, delta=delta, bdp_delta=bdp_delta, wdp_delta=wdp_delta, wdp_order=wdp_order,
                wdp_beta=wdp_beta, bdp_orders=bdp_orders, total_steps=total_steps)

    def _check_accountants(self, names: Sequence[str], batch_size: Optional[int]) -> None:
        """Known accountants; the pairwise ones (bdp, wdp) need pairs of per-example gradients from each batch."""
        for a in names:
            if a != self.ledger_name and a not in ACCOUNTANT_CHOICES:
                raise PrivacyParameterError(
                    f"method.accountants contains {a!r}, an unknown accountant: choose from "
                    f"{', '.join(ACCOUNTANT_CHOICES)} (DP: moments, rdp, opacus_rdp; BDP: bdp; WDP: wdp).")
        pairwise = [a for a in names if a in PAIRWISE_ACCOUNTANTS]
        if not pairwise:
            return
        need = 3 if "bdp" in pairwise else 2
        if batch_size is not None and int(batch_size) < 2:
            raise PrivacyParameterError(
                f"trainer.batch_size={batch_size} is invalid with method.accountants={pairwise}: the "
                "Bayesian and Wasserstein accountants measure pairs of per-example gradients from each "
                "batch, and a batch of 1 has no pair; use trainer.batch_size >= 2 (e.g. 64), or drop "
                "bdp/wdp from method.accountants.")
        self.min_pair_examples = need
        if self.pair_examples < need:
            raise PrivacyParameterError(
                f"method.pair_examples={self.pair_examples} is invalid with method.accountants={pairwise}: "
                f"each step needs at least {need} gradients ({need * (need - 1) // 2} pairs"
                f"{'; the Bayesian accountant estimates from >= 2 pairs' if need == 3 else ''}); e.g. 8.")
        if batch_size is not None and self.pair_examples > int(batch_size):
            raise PrivacyParameterError(
                f"method.pair_examples={self.pair_examples} is larger than trainer.batch_size={batch_size}: "
                "the pairs come from the batch; lower method.pair_examples.")

    def _accountant(self, a: str, ledger, *, delta, bdp_delta, wdp_delta, wdp_order, wdp_beta, bdp_orders,
                    total_steps):
        """(accountant ``a``, the delta it reports at): the ledger's own for ``ledger_name``, else a new one."""
        from dpgen.privacy.accountants import make_accountant

        if a == self.ledger_name:
            return (ledger.accountant if ledger is not None else make_accountant("moments"),
                    check_delta(delta, "privacy.delta"))
        if a == "bdp":
            kw = {"total_steps": int(total_steps), **({"orders": list(bdp_orders)} if bdp_orders else {})}
            return make_accountant("bdp", **kw), check_delta(bdp_delta, "method.bdp_delta")
        if a == "wdp":
            return make_accountant("wdp", order=wdp_order, beta=wdp_beta), check_delta(wdp_delta, "method.wdp_delta")
        kw = {"sampling": "poisson"} if a == "rdp" else {}  # moments, pld, rdp, opacus_rdp
        return make_accountant(a, **kw), check_delta(delta, "privacy.delta")

    # -- properties --------------------------------------------------------------------------------
    @property
    def noise_std(self) -> float:
        """Std of the Gaussian noise added to the sum of clipped gradients: ``sigma * C``."""
        return float(self.noise_multiplier * self.clip)

    @property
    def pairwise(self) -> List[str]:
        return [a for a in self.accountants if a in PAIRWISE_ACCOUNTANTS]

    # -- one step -----------------------------------------------------------------------------------
    def private_gradient(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                         noise_gen: Optional[torch.Generator] = None,
                         pair_idx: Optional[torch.Tensor] = None):
        """Set ``p.grad`` of every trainable parameter to DP-SGD's noisy gradient for this batch.

        ``pair_idx``: positions (in the batch) of the examples whose clipped gradients feed the pairwise
        accountants. Returns ``(mean loss, pair distances or None)``.
        """
        from dpgen.privacy.clipping import clipped_sum, release_sum

        params = [p for p in model.parameters() if p.requires_grad]
        device, dtype = params[0].device, params[0].dtype
        # the clipped sum in float64, rounded to the parameters' dtype after the noise (dpgen.privacy.clipping)
        total = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64, device=device)
        pair_rows = None
        loss_sum = torch.zeros((), device=device)  # a tensor: no host sync per step
        n = int(x.shape[0])
        if n > 0:
            if pair_idx is not None and len(pair_idx) >= 2:
                # put the pair examples first, so the first chunk holds them (the sum is order-free)
                rest = torch.ones(n, dtype=torch.bool, device=x.device)
                rest[pair_idx] = False
                order = torch.cat([pair_idx.to(x.device), torch.nonzero(rest).flatten()])
                x, y = x[order], y[order]
            if self.per_sample == "ghost":
                total, loss_sum = self._ghost_sum(model, x, y)
                if pair_idx is not None and len(pair_idx) >= 2:  # the pair examples come first (above)
                    k = len(pair_idx)
                    pair_rows, _ = clip_gradients(flatten_gradients(per_sample_gradients(model, x[:k], y[:k])),
                                                  self.clip)
                    pair_rows = pair_rows.detach()
            cs = self.chunk_size or n
            cs = max(cs, len(pair_idx) if pair_idx is not None else 0)
            for s in range(0, n if self.per_sample == "func" else 0, cs):
                xb, yb = x[s:s + cs], y[s:s + cs]
                grads, losses = per_sample_gradients(model, xb, yb, return_loss=True)
                flat = flatten_gradients(grads)
                del grads
                (part,), _ = clipped_sum([flat], check_clip(self.clip))
                total += part
                if s == 0 and pair_idx is not None and len(pair_idx) >= 2:  # the rows are clipped one by one
                    pair_rows = clip_gradients(flat[: len(pair_idx)], self.clip)[0].detach()
                del flat
                loss_sum = loss_sum + losses.detach().sum()
        noise = gaussian(total.shape, generator=noise_gen, device=device, dtype=dtype)
        flat = release_sum(total, noise, self.noise_std, dtype) / self.expected_batch_size
        off = 0
        for p in params:
            p.grad = flat[off:off + p.numel()].view_as(p).clone()
            off += p.numel()
        t0 = time.perf_counter()
        dist = pair_distances(pair_rows) if pair_rows is not None else None
        self.timing["pairs"] += time.perf_counter() - t0
        return (loss_sum / n if n else torch.tensor(float("nan"))), dist

    def _ghost_sum(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor):
        """(flat clipped sum of the batch's per-example gradients, sum of the losses) by ghost clipping."""
        from dpgen.privacy.per_sample import GhostClippedSum

        if self._ghost is None or self._ghost[0] is not model:
            self._ghost = (model, GhostClippedSum([model], per_example_cross_entropy, self.clip))
        sums, _, losses = self._ghost[1](x, y)
        return torch.cat([v.reshape(-1) for v in sums]), losses.sum()

    def sample_batch(self, n: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """Poisson batches at rate q (private); shuffled epochs for the non-private baseline."""
        if self.private:
            idx = torch.nonzero(uniform(n, generator=generator) < self.sample_rate).flatten()
            # which examples of the batch feed the pairwise accountants: the mechanism's randomness too
            self._pair_idx = self.pair_indices(idx.numel(), generator)
            return idx
        if self._perm is None or self._pos >= n:
            self._perm, self._pos = permutation(n, generator=generator), 0
        idx = self._perm[self._pos:self._pos + batch_size]
        self._pos += batch_size
        return idx

    def step(self, models, batch) -> Dict[str, torch.Tensor]:
        """One step on ``models["model"]``: the noisy clipped gradient (private; the clean loss is not
        returned, so it never leaves the run) or the plain cross-entropy gradient (baseline)."""
        model = models["model"]
        t0 = time.perf_counter()
        if not self.private:
            loss = F.cross_entropy(model(batch.x), batch.y)
            loss.backward()
            self.timing["sgd"] += time.perf_counter() - t0
            self.timed_steps += 1
            return {"loss": loss.detach()}
        pair_idx, self._pair_idx = self._pair_idx, None
        t_pairs = self.timing["pairs"]
        _, self._distances = self.private_gradient(model, batch.x, batch.y, noise_gen=self.rng, pair_idx=pair_idx)
        # plain DP-SGD's time: the step minus the pair distances (timed apart, an accountant cost)
        self.timing["sgd"] += time.perf_counter() - t0 - (self.timing["pairs"] - t_pairs)
        self.timed_steps += 1
        return {}

    def pair_indices(self, batch: int, generator: torch.Generator) -> Optional[torch.Tensor]:
        """Which examples of a batch of ``batch`` give the gradient pairs of the pairwise accountants.

        None when no pairwise accountant runs or the (Poisson, hence random) batch has fewer examples
        than the accountants need (3 for bdp, 2 for wdp): :meth:`account` then charges the step with
        the worst-case pairs (every distance 2 C), so a small batch never stops a run.
        """
        k = min(self.pair_examples, batch)
        if not self.pairwise or k < self.min_pair_examples:
            return None
        return permutation(batch, generator=generator)[:k]

    def account(self, distances: Optional[np.ndarray] = None) -> None:
        """Record one step in every accountant: the pair distances given, else those of the last
        ``step`` (worst case ``d = 2 C`` when the batch had no pair)."""
        if not self.private:
            return
        if distances is None:
            distances, self._distances = self._distances, None
        if self.pairwise and distances is None:
            k = self.pair_examples
            distances = np.full(k * (k - 1) // 2, 2.0 * self.clip)
        for a, acc in self.accountants.items():
            t0 = time.perf_counter()
            if a in PAIRWISE_ACCOUNTANTS:
                acc.step(noise_std=self.noise_std, sample_rate=self.sample_rate, distances=distances)
            else:
                acc.step(noise_multiplier=self.noise_multiplier, sample_rate=self.sample_rate)
            self.timing[a] = self.timing.get(a, 0.0) + time.perf_counter() - t0

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def from_config(cls, cfg, info, steps: int, **extra) -> "DPSGD":
        """The method object of a run: calibrated (or given) noise and the configured accountants."""
        m, t, p = cfg.method, cfg.trainer, cfg.privacy
        n = info.n_private
        q = t.batch_size / n
        common = dict(clip=m.clip, sample_rate=q, expected_batch_size=q * n, batch_size=t.batch_size,
                      chunk_size=m.chunk_size, per_sample=m.per_sample)
        if not m.private:
            return cls(private=False, **common)
        # the ledger: privacy.accountant (auto: dp-accounting's PLD; the WDP presets pin the moments accountant,
        # the WDP paper's DP column) calibrates and keeps the budget
        ledger = ledger_for(cls.declare(cfg, info, steps), p, steps)
        z = ledger.noise_multiplier
        method = cls(noise_multiplier=z, accountants=list(m.accountants), delta=p.delta, bdp_delta=m.bdp_delta,
                     wdp_delta=m.wdp_delta, wdp_order=m.wdp_order, wdp_beta=m.wdp_beta, pair_examples=m.pair_examples,
                     total_steps=steps, ledger=ledger, **common)
        method.epsilon_budget = float(p.epsilon)
        method.cross_check_names = tuple(p.cross_check)
        method.wdp_settings = {"order": m.wdp_order, "beta": m.wdp_beta}
        # the steps the budget allows in total: all the calibrated steps, or what a fixed noise affords
        method.max_steps = steps if m.noise_multiplier is None else ledger.max_steps()
        if method.max_steps == 0:
            raise ValueError(f"privacy.epsilon={p.epsilon} at delta={p.delta} is spent by not even one step with "
                             f"method.noise_multiplier={z} at q={q:.4g}: raise the noise or the budget (or set "
                             "method.noise_multiplier=null to calibrate it).")
        return method

    # -- reporting ----------------------------------------------------------------------------------
    #: set by from_config: the budget, the independent accountants of the cross-check, WDP's order and beta
    epsilon_budget: Optional[float] = None
    cross_check_names: Sequence[str] = ()
    wdp_settings: Dict[str, float] = {}

    def privacy_report(self) -> Dict[str, Any]:
        if not self.private:
            return {"private": False, "epsilon_spent": 0.0}
        from dpgen.privacy.accountants import epsilon_for

        eps = self.epsilons()
        delta = self.deltas[self.ledger_name]
        rep: Dict[str, Any] = {
            "private": True, "noise_multiplier": self.noise_multiplier, "clip": self.clip, "noise_std": self.noise_std,
            "sample_rate": self.sample_rate, "sampling": "poisson", "steps_accounted": self.steps,
            "neighbouring_relation": RELATIONS["poisson"],
            "not_covered": ("the BDP and WDP epsilons (eps_bdp, eps_wdp) are computed from private gradient pairs "
                            "and are not themselves released privately (as in the BDP/WDP papers); the DP "
                            f"({self.ledger_name}) epsilon is data-independent; the test accuracy reads the public "
                            "test split"),
            "epsilon_budget": self.epsilon_budget, "epsilon_spent": self.epsilon(), "delta": delta,
            "sensitivity": self.clip,  # add/remove one record moves the clipped sum by <= C: noise_std = z C
            "pair_examples": self.pair_examples if self.pairwise else None,
            "pairs_per_step": self.pair_examples * (self.pair_examples - 1) // 2 if self.pairwise else None,
            "accountants": {a: {"framework": FRAMEWORK[a], "epsilon": e, "delta": self.deltas[a],
                                "attack_probability": attack_probability(e)} for a, e in eps.items()},
            "ledger_accountant": self.ledger_name,
        }
        if self.ledger is not None:
            rep["accountant"] = self.ledger.accountant_text()
        if "wdp" in eps:
            rep["accountants"]["wdp"].update(self.wdp_settings)
        cross = {}  # the DP ledger checked by independent accountants on the same (sigma, q, steps)
        names = list(self.cross_check_names)
        if self.ledger_name != "rdp":  # autodp's RDP bound is printed beside the ledger (PLD by default)
            names = ["rdp", *[x for x in names if x != "rdp"]]
        for name in names:
            if name == self.ledger_name or self.steps == 0:
                continue
            try:
                cross[name] = epsilon_for(self.noise_multiplier, self.sample_rate, self.steps, delta,
                                          sampling="poisson", accountant=name)
            except Exception as e:  # an optional library missing: say so, do not fail the run
                cross[name] = f"unavailable: {e}"
        rep["cross_check"] = cross
        return rep

    def timing_ms_per_step(self) -> Dict[str, Any]:
        """Per-step times (ms): DP-SGD's step, the pair distances, each accountant, and the pairwise
        accountants' overhead over plain DP-SGD (pairs + accountant arithmetic)."""
        ts = max(1, self.timed_steps)
        timing: Dict[str, Any] = {k: round(1000.0 * v / ts, 3) for k, v in self.timing.items() if v > 0}
        if self.private and self.pairwise and "sgd" in timing:
            extra = {a: timing.get("pairs", 0.0) + timing.get(a, 0.0) for a in self.pairwise}
            timing["overhead_vs_dpsgd_percent"] = {a: round(100.0 * v / timing["sgd"], 2) for a, v in extra.items()}
        return timing

    # -- reading ------------------------------------------------------------------------------------
    def epsilons(self) -> Dict[str, float]:
        """Epsilon spent under every accountant, each at its own delta."""
        return {a: float(acc.get_epsilon(self.deltas[a])) for a, acc in self.accountants.items()}

    def epsilon(self) -> float:
        """The ledger: its accountant's epsilon at ``privacy.delta`` (0 when not private)."""
        if not self.private:
            return 0.0
        return float(self.accountants[self.ledger_name].get_epsilon(self.deltas[self.ledger_name]))

    @property
    def steps(self) -> int:
        return self.accountants[self.ledger_name].steps if self.private else 0

    # -- ledger (what dpgen.train.publication persists before anything is published) ---------------
    #: every step is a mechanism run the ledger charges
    accounts_steps = True

    #: the loss DP-SGD computes is the clean batch cross-entropy: a private run never publishes it
    @property
    def publishes_loss(self) -> bool:
        return not self.private

    def ledger_state(self) -> Dict[str, Any]:
        return {"accountants": {a: acc.state_dict() for a, acc in self.accountants.items()}}

    def load_ledger_state(self, state: Dict[str, Any]) -> None:
        for a, acc in self.accountants.items():
            acc.load_state_dict(state["accountants"][a])

    def ledger_steps(self) -> int:
        return self.steps

    def spent_steps(self) -> int:
        return self.steps

    # -- state --------------------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        return {"private": self.private, "noise_multiplier": self.noise_multiplier, "clip": self.clip,
                "sample_rate": self.sample_rate,
                "accountants": {a: acc.state_dict() for a, acc in self.accountants.items()},
                "timing": dict(self.timing), "timed_steps": self.timed_steps}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if bool(state.get("private")) != self.private:
            raise ValueError("checkpoint is from a run with method.private="
                             f"{state.get('private')}, this one has {self.private}: resume with the same method.")
        if self.private:
            mine = {"noise_multiplier": self.noise_multiplier, "clip": self.clip, "sample_rate": self.sample_rate}
            for key, value in mine.items():
                if not math.isclose(float(state[key]), float(value), rel_tol=1e-9):
                    raise ValueError(f"checkpoint has {key}={state[key]} but this run has {value}: "
                                     "resume with the settings the run was started with.")
            missing = set(self.accountants) - set(state["accountants"])
            if missing:
                raise ValueError(f"checkpoint has no state for accountants {sorted(missing)}: resume with "
                                 f"method.accountants={sorted(state['accountants'])}.")
            self.load_ledger_state(state)
        self.timing.update(state.get("timing", {}))
        self.timed_steps = int(state.get("timed_steps", 0))


def attack_probability(epsilon: float) -> float:
    """Triastcyn & Faltings' bound on a membership attack's success, ``1 / (1 + exp(-epsilon))``."""
    return float(1.0 / (1.0 + math.exp(-float(epsilon))))
