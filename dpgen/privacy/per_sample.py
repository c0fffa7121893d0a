"""The clipped sum of per-sample gradients, sum_i min(1, C / ||grad l_i||) grad l_i, without
materialising every per-sample gradient: opacus' fast gradient clipping (ghost norms for Linear layers,
per-sample gradients only inside its conv / norm grad samplers) on a private copy of the model.

Pass 1 back-propagates sum_i l_i with opacus' hooks on and reads the per-sample gradient norms; pass 2
back-propagates sum_i c_i l_i (c_i the clip factors, constants) with the hooks off, whose gradient is
exactly the clipped sum. A record whose loss or gradient norm is not finite gets c_i = 0 and, in pass 2,
a zero input: a fresh forward pass, because back-propagating 0 through the non-finite activations it left
in pass 1's graph would give NaN for every record (0 x inf), and pass 2 sums c_i l_i through ``where`` so that
a loss still non-finite on the zero input (an out-of-range label: DP-SGD's loss is NaN there) passes a zero
gradient; so its contribution is exactly 0 and the sensitivity C holds for every input. c_i is computed in
float64 with the clip margin of :mod:`dpgen.privacy.clipping` (norm <= C (1 - 1e-5)).

Pass 2 runs on a float64 copy of the model (issue 83): its backward forms the sum over the batch, and in
float32 that sum rounds by up to ~n 2^-24 C, so one more copy of a record moved the float32 sum by 1.00005 C
(n = 1,000, tests/privacy/test_clip_float64.py), past the margin. The clipped sums come out in float64, the
caller adds the noise to them and rounds after (:func:`dpgen.privacy.clipping.release_sum`). A margin that grows
with the batch instead was not taken: the actual batch size is private (a margin set by it moves every other
record's contribution when one joins), and one set by a public bound (the dataset size N) would take about
N 2^-24 of C (0.4% at N = 60,000) and still rest on the order of opacus' float32 sums.
Pass 1 (opacus' per-sample norms) stays in float32: its norms are those of the float32 forward, while pass 2
sums the float64 forward's gradients; the two agree to the float32 rounding of the forward (measured within
2e-6 relative on dpgen's networks, adversarial records included: test_clip_margin.py's DP-SGD ghost case,
largest shift 0.999992 C), inside the margin. Cost (one CPU thread): DP-SGD's CNN at B = 256, 0.20 -> 0.26 s
(16 x 16) and 0.68 -> 1.09 s (28 x 28) per call; DP-DANN's digits networks at B = 128, 0.09 -> 0.15 s (the
torch.func path: 0.26 s). Running pass 1 in float64 too would make the norms those of the summed gradients
(no forward-rounding caveat) at 2-4x the float32 cost.

Used by DP-SGD (``dpgen/methods/dpsgd.py``, ``method.per_sample=ghost``) and DP-DANN's target term;
:class:`PerSampleGrads` gives the materialised per-sample gradients through opacus, a cross-check.
The model must not mix examples (no batch norm). Imports nothing of dpgen above the privacy library.
"""

from __future__ import annotations

import copy
import warnings
from typing import Callable, List, Sequence, Tuple

import torch

from dpgen.privacy import clipping

#: loss(out, *targets) -> the (B,) per-sample losses of the model's output ``out``
PerSampleLoss = Callable[..., torch.Tensor]


class OpacusCopy:
    """A private copy of ``modules`` (composed in order) in opacus' hands, refreshed from the live weights on
    every call, so that opacus' hooks never touch the live modules (other code, torch.func or public passes,
    can use them freely). The copy uses the contiguous memory layout: opacus' conv grad sampler (1.6) is
    wrong on channels-last layers with several input channels. ``wrap`` makes the opacus module."""

    def __init__(self, modules: Sequence[torch.nn.Module], wrap: Callable[[torch.nn.Module], torch.nn.Module]):
        self.sources = list(modules)
        self.copy = torch.nn.Sequential(*[copy.deepcopy(m) for m in self.sources])
        for m in self.copy.modules():
            if hasattr(m, "set_channels_last"):
                m.set_channels_last(False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.gsm = wrap(self.copy)

    def _refresh(self) -> List[torch.Tensor]:
        params = list(self.copy.parameters())
        sources = [p for m in self.sources for p in m.parameters()]
        with torch.no_grad():
            for dst, src in zip(params, sources):
                dst.copy_(src)
        self._clear()
        return params

    def _clear(self) -> None:
        for v in self.copy.parameters():
            v.grad = None
            if hasattr(v, "grad_sample"):
                v.grad_sample = None


class PerSampleGrads(OpacusCopy):
    """``__call__(x, *targets)`` -> the per-sample gradients ``[(B, *param.shape)]``, one per parameter of
    ``modules`` in order, of ``loss(out, *targets)`` through opacus' GradSampleModule (materialised; a
    cross-check of the ghost path and of torch.func)."""

    def __init__(self, modules: Sequence[torch.nn.Module], loss: PerSampleLoss):
        from opacus import GradSampleModule

        self.loss = loss
        super().__init__(modules, lambda m: GradSampleModule(m, loss_reduction="sum"))

    def __call__(self, x: torch.Tensor, *targets) -> List[torch.Tensor]:
        params = self._refresh()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.loss(self.gsm(x), *targets).sum().backward()
        grads = [v.grad_sample.detach() for v in params]
        self._clear()
        return grads


class GhostClippedSum(OpacusCopy):
    """``__call__(x, *targets)`` -> (clipped sums, one per parameter of ``modules`` in order; the per-sample
    gradient norms before clipping; the per-sample losses), for the composition ``modules[-1](...modules[0](x))``
    (the module doc says how); the sums in float64 (pass 2 on a float64 copy). The live ``modules`` are never
    hooked (:class:`OpacusCopy`)."""

    def __init__(self, modules: Sequence[torch.nn.Module], loss: PerSampleLoss, clip: float):
        from opacus.grad_sample import GradSampleModuleFastGradientClipping

        self.loss = loss
        self.clip = float(clip)
        super().__init__(modules, lambda m: GradSampleModuleFastGradientClipping(
            m, max_grad_norm=self.clip, use_ghost_clipping=True, loss_reduction="sum"))
        #: pass 2's plain float64 copy (no opacus hooks): the clipped sum accumulates in float64 (module doc)
        self.copy64 = torch.nn.Sequential(*[copy.deepcopy(m) for m in self.sources]).to(torch.float64)

    def __call__(self, x: torch.Tensor, *targets) -> Tuple[List[torch.Tensor], torch.Tensor, torch.Tensor]:
        self._refresh()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.gsm.enable_hooks()
            losses = self.loss(self.gsm(x), *targets)
            losses.sum().backward()
            norms = self.gsm.get_norm_sample().detach()
            finite = torch.isfinite(losses.detach())
            coef = clipping.clip_factors(torch.where(finite, norms, norms.new_full((), float("inf"))),
                                         self.clip)  # float64; 0 for a record whose loss or norm is not finite
            # a factor that would be subnormal in the losses' dtype (a norm above ~1e37 C) is 0, as in
            # clipping.scale_finite
            coef = torch.where(coef >= torch.finfo(losses.dtype).tiny, coef, torch.zeros_like(coef))
            self._clear()
            self.gsm.disable_hooks()
            keep = (coef > 0).view(-1, *([1] * (x.dim() - 1)))
            safe = torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))
            # pass 2 on the float64 copy: the backward's sum over the batch accumulates in float64
            params64 = self._refresh64()
            # a record dropped (c_i = 0) takes no part in pass 2 even when its loss is not finite on the zero
            # input (an out-of-range label gives a NaN loss): where() passes it a zero gradient, 0 x NaN would not
            pass2 = self.loss(self.copy64(safe.to(torch.float64) if safe.is_floating_point() else safe), *targets)
            torch.where(coef > 0, coef * pass2, torch.zeros((), dtype=pass2.dtype, device=pass2.device)).sum().backward()
        sums = [v.grad.detach().clone() for v in params64]
        for v in params64:
            v.grad = None
        return sums, norms, losses.detach()

    def _refresh64(self) -> List[torch.Tensor]:
        """The float64 copy's parameters, set to the live weights (rounded up to float64: exact), no gradient."""
        params = list(self.copy64.parameters())
        with torch.no_grad():
            for dst, src in zip(params, (p for m in self.sources for p in m.parameters())):
                dst.copy_(src)
                dst.grad = None
        return params
