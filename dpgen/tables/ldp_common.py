"""Shared pieces of the entropic-LDP GAN figures (``dpgen/tables/ldp_*.py``, the computed tables
``conf/table/ldp_*.yaml`` that ``dpgen table`` runs: :func:`dpgen.tables.declared.run_computed`).

Training on an already privatised set (the release of :func:`dpgen.methods.entropic_ldp.privatise`;
the clean set is used only to measure the result) with ``method=entropic_ldp`` through the one loop
(:func:`dpgen.train.loop.fit`): each figure cell is a run folder under ``outputs/runs/<table>/<scale>/``
with its ``config.yaml``, like ``python run.py experiment=ldp_*``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch

from dpgen.models import make_generator
from dpgen.tasks.generation import GenerationBatch
from dpgen.train.loop import Task


#: the MNIST sets of the entropic-LDP MNIST figures: ``mnist10k`` (the 8,000 / 2,000 stand-in) or the full
#: ``mnist`` (60,000 / 10,000: the paper's data, ``DPGEN_DATA_ROOT=../shared/data``)
MNIST_SETS = {"mnist10k": "mnist10k train (8,000 images)", "mnist": "the full MNIST train (60,000 images)"}


class ReleasedSetTask(Task):
    """Generation on a set already released by a local mechanism (the figures privatise it themselves,
    with a seeded RNG, to compare losses on one release): training on it is post-processing (Remark 1)."""

    name = "generation"

    def __init__(self, released: torch.Tensor):
        self.released = released

    def setup(self, cfg, device) -> None:
        self.device = device
        self.X = self.released.to(device)
        self.n_private = len(self.X)

    def build(self, cfg, steps: int, device):
        from dpgen.methods.registry import DataInfo, build

        shape = tuple(self.X.shape[1:])
        method = build(cfg, DataInfo(self.n_private, shape, 0), steps, "generation")
        if method.private and method.accounts_steps:
            raise ValueError(f"method={cfg.method.name} runs a mechanism at every step: it cannot train on a set "
                             "released before (use method=entropic_ldp or a non-private method)")
        method.use_release()  # the figure's own release (entropic_ldp: of the same mechanism)
        self.models = {"generator": make_generator(cfg.model.generator, shape, 0, cfg.model.code_dim).to(device)}
        return method, self.models

    def next_batch(self, method, sampler_gen, step: int, target_steps: int) -> GenerationBatch:
        b = self.cfg.trainer.batch_size
        real = self.X if b == self.n_private else self.X[method.sample_batch(self.n_private, b, sampler_gen)]
        return GenerationBatch(real, None, b, self.device)


def fit_on_release(target: torch.Tensor, overrides, run_dir, progress: bool = True
                   ) -> Tuple[torch.nn.Module, float, list]:
    """Train a generator on ``target`` (a set already released) with the config ``python run.py
    <overrides>`` composes, through the one loop, in the run folder ``run_dir`` (config.yaml,
    metrics.jsonl, checkpoint). Returns (generator, seconds, [(step, loss), ...]).

    The run goes through ``resume=auto`` (an override may say otherwise): a finished run in ``run_dir`` is read
    back from its checkpoint without training again, an interrupted one continues from its last checkpoint
    (``trainer.checkpoint_every``), so a figure at the paper's length survives interruptions and sessions.
    ``seconds`` then covers the whole run, all its sittings."""
    from dpgen.config import compose_config

    cfg = compose_config(["resume=auto", *overrides,
                          "privacy.secret_randomness=false",  # batches of a public release: seeded
                          f"trainer.progress={str(progress).lower()}"])
    metrics, task = _fit_or_wait(cfg, target, run_dir)
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    history = [(r["step"], r["loss"]) for r in map(json.loads, lines) if "loss" in r]
    return task.models["generator"], float(metrics["loop_seconds"]), history


_WAIT_S = 600.0  # how long a finished run held by another process's read-back is waited for


def _fit_or_wait(cfg, target: torch.Tensor, run_dir, poll_s: float = 2.0):
    """``fit`` in ``run_dir``; when the run has finished (``metrics.json``) and another live process holds its
    folder, that process is reading it back (two processes of a split figure collect the same finished runs):
    wait for it, up to ``_WAIT_S`` seconds, instead of failing. An unfinished run held elsewhere is being trained
    there: :class:`~dpgen.utils.run_dir.RunDirBusy` at once, as before."""
    import time

    from dpgen.train.loop import fit
    from dpgen.utils.run_dir import RunDirBusy

    deadline = time.monotonic() + _WAIT_S
    while True:
        task = ReleasedSetTask(target)
        try:
            return fit(cfg, task, run_dir), task
        except RunDirBusy:
            if not (Path(run_dir) / "metrics.json").exists() or time.monotonic() > deadline:
                raise
            time.sleep(poll_s)


def fit_generator(target: torch.Tensor, loss: str, p: int, reg: float, *, release: Dict[str, Any], generator: str,
                  code_dim: int, steps: int, run_dir, batch_size: Optional[int] = None, lr: float = 1e-3,
                  optimizer: str = "rmsprop", scaling: float = 0.8, seed: int = 0, preset: str = "ldp_manifolds",
                  dataset: Optional[str] = None, progress: bool = True) -> Tuple[torch.nn.Module, float, list]:
    """``method=entropic_ldp`` with ``loss`` (order ``p``, regularisation ``reg``) on ``target``, the release
    ``release`` describes (method.mechanism, privacy.epsilon, method.radius, method.project): see
    :func:`fit_on_release`. ``batch_size`` None: the full set every step (the paper's synthetic experiment).
    ``preset``: the experiment the run's config.yaml starts from (it names the dataset the release came from;
    every training setting is given here); ``dataset``: the dataset the release came from, when it is not the
    preset's (e.g. ``mnist``, the full set, beside a preset written for ``mnist10k``), so that the run's
    config.yaml names the data it was trained on."""
    b = len(target) if batch_size is None else min(int(batch_size), len(target))
    betas = "[0.5,0.999]" if optimizer == "adam" else "[0.9,0.999]"
    return fit_on_release(target, [
        f"experiment={preset}", *([f"dataset={dataset}"] if dataset else []),
        *(f"{k}={v}" for k, v in release.items()), f"method.loss={loss}",
        f"method.p={p}", f"method.reg={reg}", "method.force=true", f"method.scaling={scaling}",
        f"model.generator={generator}", f"model.code_dim={code_dim}", "trainer.epochs=null", f"trainer.steps={steps}",
        f"trainer.batch_size={b}", f"trainer.lr={lr}", f"trainer.optimizer={optimizer}", f"trainer.betas={betas}",
        f"trainer.log_every={max(1, steps // 20)}", f"trainer.checkpoint_every={checkpoint_every(steps)}",
        f"seed={seed}"],
        run_dir, progress)


def checkpoint_every(steps: int, every: int = 1000) -> int:
    """A figure run's checkpoint cadence: every ``every`` steps (at most ``steps``), so an interrupted
    paper-length run loses at most that much work when it resumes."""
    return max(1, min(int(steps), int(every)))


@torch.no_grad()
def generate(gen, n: int, seed: int = 123) -> torch.Tensor:
    """``n`` samples of ``gen``, drawn on its own device (a CUDA model needs a CUDA random generator), on the CPU."""
    g = torch.Generator(device=next(gen.parameters()).device).manual_seed(seed)
    return torch.cat([gen.sample(min(1000, n - i), generator=g)[0].cpu() for i in range(0, n, 1000)])


def w2(x, y) -> float:
    """Exact W2 (POT) between two clouds (flattened)."""
    from dpgen.eval.w2 import w2_distance

    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
    return float(w2_distance(x, y, method="exact", exact_max=max(len(x), len(y))))


def default_data_root(data_root=None):
    """``data_root``, else $DPGEN_DATA_ROOT, else ../shared/data."""
    import os

    from dpgen.utils.paper import shared_dir

    return data_root or os.environ.get("DPGEN_DATA_ROOT") or str(shared_dir() / "data")


def load_mnist_images(data_root=None, dataset: str = "mnist10k"):
    """(train, test) image tensors in [0, 1] of ``dataset`` (:data:`MNIST_SETS`: ``mnist10k``, the 8,000 / 2,000
    stand-in, or the full ``mnist``)."""
    from dpgen.data import as_tensors, load_dataset

    if dataset not in MNIST_SETS:
        raise ValueError(f"dataset={dataset!r} is not one of {sorted(MNIST_SETS)}")
    root = default_data_root(data_root)
    xtr = as_tensors(load_dataset(dataset, "train", data_root=root))[0]
    xte = as_tensors(load_dataset(dataset, "test", data_root=root))[0]
    return xtr, xte

