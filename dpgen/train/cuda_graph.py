"""``trainer.cuda_graph=true``: the whole training step (the method's step with its mechanism, the optimizer, the
EMA) captured once in a CUDA graph and replayed for every later step, so that a small step (the paper's
DP-Sinkhorn: batch 50, a DCGAN, 60 fixed Sinkhorn iterations) costs one graph launch instead of hundreds of kernel
launches. The ledger stays on the host: the loop counts each step (``method.account()``) after its replay, as it
does after an eager step.

What a graph needs, and how this step gets it:

* fixed shapes: ``trainer.static_shapes`` pads every Poisson batch to one capacity with a record mask
  (:meth:`dpgen.data.private.PrivateData.static_batch`); the step copies the batch into static buffers;
* no host read inside the step: the static Sinkhorn loop (``method.backend=static``), the non-finite guard read at
  log steps only (:class:`dpgen.train.loop.NonFiniteGuard`);
* its randomness from generators the graph advances: torch's default generator (the generated codes) and the
  method's noise generator, registered with the graph; ``privacy.secure_rng`` (the OS CSPRNG) cannot be captured;
* an optimizer whose state lives on the device: Adam with ``capturable=True``.

A step that does not fit the graph runs eagerly on the same parameters, gradients and optimizer state: an empty
Poisson batch (the noise alone) and a draw above the capacity (unpadded). The first :data:`WARMUP` steps run eagerly
on a side stream (as torch's documentation asks before a capture); the capture itself runs nothing, so the step
captured is then replayed.

The capture and replay are behind :class:`GraphBackend`; :class:`EagerBackend` runs the same control flow without a
GPU (each "replay" calls the step), which is how the CPU test suite checks this module: the same weights as the
plain loop. Measured on a GPU: not yet (issue 84; ``make bench``'s DP-Sinkhorn rows and docs/SPEED.md).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import torch

#: eager steps before the capture (torch's CUDA-graph notes: warm up on a side stream first)
WARMUP = 3


class GraphBackend:
    """Captures ``fn`` (no arguments; reads and writes static tensors) once; returns the replay."""

    def warm(self, fn: Callable[[], Any]) -> Any:
        raise NotImplementedError

    def capture(self, fn: Callable[[], Any], generators=()) -> Callable[[], None]:
        raise NotImplementedError


class EagerBackend(GraphBackend):
    """The control flow without a graph: a replay calls the step again (CPU tests)."""

    def __init__(self) -> None:
        self.captures = 0

    def warm(self, fn):
        return fn()

    def capture(self, fn, generators=()):
        self.captures += 1
        return fn


class CudaBackend(GraphBackend):
    """torch.cuda.CUDAGraph: warm-up on a side stream, one capture, replays on the current stream."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device=device)
        self.graph: Optional[torch.cuda.CUDAGraph] = None

    def warm(self, fn):
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            out = fn()
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        return out

    def capture(self, fn, generators=()):
        self.graph = torch.cuda.CUDAGraph()
        for g in generators:  # the noise generator: the graph advances its offset on every replay
            self.graph.register_generator_state(g)
        with torch.cuda.graph(self.graph):
            fn()
        return self.graph.replay


def check_graph_settings(cfg, device: torch.device) -> None:
    """Refuse, before anything is built, a trainer.cuda_graph=true that cannot be captured, with the fix."""
    if not cfg.trainer.cuda_graph:
        return
    if device.type != "cuda" or not torch.cuda.is_available():
        raise ValueError(f"trainer.cuda_graph=true needs a CUDA device (this run's is {device}): set "
                         "trainer.cuda_graph=false, or trainer.device=cuda on a machine with a GPU")
    if not cfg.trainer.static_shapes:
        raise ValueError("trainer.cuda_graph=true needs fixed batch shapes: add trainer.static_shapes=true")
    if cfg.privacy.secure_rng:
        raise ValueError("trainer.cuda_graph=true cannot capture privacy.secure_rng=true's OS generator: set "
                         "privacy.secure_rng=false (torch's generator, seeded from OS entropy with "
                         "privacy.secret_randomness=true), or trainer.cuda_graph=false")
    if cfg.trainer.optimizer != "adam":
        raise ValueError(f"trainer.cuda_graph=true runs Adam with its state on the device (capturable); "
                         f"trainer.optimizer={cfg.trainer.optimizer} is not supported: use adam or cuda_graph=false")


class GraphedStep:
    """One training step, ``step(batch) -> logs``, replayed from a graph once warm (module doc).

    ``run`` gives the pieces the loop's eager step uses: its ``method`` and its ``state`` (nets, opt, ema)."""

    def __init__(self, run, backend: Optional[GraphBackend] = None, warmup: int = WARMUP) -> None:
        self.run, self.warmup = run, int(warmup)
        self.backend = backend or CudaBackend(run.device)
        self.done = 0
        self.replay: Optional[Callable[[], None]] = None
        self.static: Optional[Any] = None  # the batch buffers the graph reads
        self.logs: Dict[str, torch.Tensor] = {}  # the step's outputs the graph writes

    # the step itself, eager or captured: gradients written in place (never set to None), so that the graph's
    # gradient tensors are the parameters' own in every kind of step
    def _body(self, batch) -> Dict[str, torch.Tensor]:
        run, st = self.run, self.run.state
        st.opt.zero_grad(set_to_none=False)
        logs = run.method.step(st.nets, batch)
        st.opt.step()
        if st.ema is not None:
            st.ema.update(st.nets)
        return logs

    def _fits(self, batch) -> bool:
        return batch.real is not None and batch.mask is not None

    def __call__(self, batch) -> Dict[str, torch.Tensor]:
        if not self._fits(batch):  # an empty or an over-capacity batch: eagerly, on the same tensors
            return self._body(batch)
        if self.replay is None and self.done < self.warmup:
            self.done += 1
            return self.backend.warm(lambda: self._body(batch))
        if self.replay is None:
            import dataclasses

            self.static = dataclasses.replace(batch, real=batch.real.clone(), y=batch.y.clone(),
                                              mask=batch.mask.clone())
            rng = self.run.method.rng
            gens = [rng] if isinstance(rng, torch.Generator) and rng.device.type == "cuda" else []

            def captured() -> None:
                self.logs = self._body(self.static)

            self.replay = self.backend.capture(captured, gens)
        self.static.real.copy_(batch.real)
        self.static.y.copy_(batch.y)
        self.static.mask.copy_(batch.mask)
        self.replay()
        return dict(self.logs)


__all__ = ["CudaBackend", "EagerBackend", "GraphBackend", "GraphedStep", "WARMUP", "check_graph_settings"]
