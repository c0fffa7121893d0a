"""Shared pieces of the entropic-LDP GAN figures (``dpgen/tables/ldp_*.py``).

A compact training loop on an already privatised set (the release of
:func:`dpgen.methods.entropic_ldp.privatise`; the clean set is used only to measure the result),
with the losses of :func:`dpgen.methods.entropic_ldp.ldp_loss` and the generators of
:mod:`dpgen.models.generators`. ``python run.py experiment=ldp_*`` runs the same method through the
shared trainer; the figures use this loop to train many small models in one process.
"""

from __future__ import annotations

import time
from typing import Optional, Tuple

import numpy as np
import torch

from dpgen.methods.entropic_ldp import ldp_loss
from dpgen.models import make_generator


def parse_cli(doc: str, argv, scales, data_root: bool = True):
    """The command line every ldp_* table takes: --scale, [--data-root], --seed, --no-progress."""
    import argparse

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=sorted(scales), default="smoke")
    if data_root:
        ap.add_argument("--data-root", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true")
    return ap.parse_args(argv)


def one_thread(fn, *args, **kwargs):
    """Run ``fn`` on one torch thread (the machines these run on are shared), then restore."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn(*args, **kwargs)
    finally:
        torch.set_num_threads(n)


def fit_generator(target: torch.Tensor, loss: str, p: int, reg: float, *, generator: str, code_dim: int,
                  out_shape, steps: int, batch_size: Optional[int] = None, lr: float = 1e-3,
                  optimizer: str = "rmsprop", scaling: float = 0.8, seed: int = 0, transform=None,
                  desc: str = "", progress: bool = True) -> Tuple[torch.nn.Module, float, list]:
    """Train ``generator`` to minimise ``loss`` between its samples and rows of ``target`` (the privatised set).

    ``batch_size`` None: the full set every step (the paper's synthetic experiment). Returns
    (generator, seconds, [(step, loss), ...]).
    """
    from tqdm.auto import tqdm

    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    gen = make_generator(generator, out_shape, 0, code_dim)
    params = gen.parameters()
    if optimizer == "rmsprop":
        opt = torch.optim.RMSprop(params, lr=lr)
    elif optimizer == "adam":
        opt = torch.optim.Adam(params, lr=lr, betas=(0.5, 0.999))
    else:
        raise ValueError(f"optimizer={optimizer!r} is invalid: choose rmsprop or adam")
    n = len(target)
    b = n if batch_size is None else min(int(batch_size), n)
    t0 = time.time()
    history = []
    gen.train()
    for step in tqdm(range(steps), desc=desc or f"{loss} p={p}", disable=not progress, leave=False,
                     mininterval=5.0):
        real = target if b == n else target[torch.randperm(n, generator=g)[:b]]
        fake, _ = gen.sample(b, generator=g)
        fake = fake if transform is None else transform(fake)
        value = ldp_loss(loss, fake.reshape(b, -1), real.reshape(len(real), -1), p, reg, scaling)
        if not torch.isfinite(value):
            raise RuntimeError(f"{loss} loss is {value.item()} at step {step + 1}: lower the learning rate")
        opt.zero_grad(set_to_none=True)
        value.backward()
        opt.step()
        if step % max(1, steps // 20) == 0 or step == steps - 1:
            history.append((step + 1, float(value.detach())))
    gen.eval()
    return gen, time.time() - t0, history


@torch.no_grad()
def generate(gen, n: int, seed: int = 123) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.cat([gen.sample(min(1000, n - i), generator=g)[0] for i in range(0, n, 1000)])


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


def load_mnist10k(data_root=None):
    """(train, test) image tensors of ``dataset=mnist10k`` (8,000 / 2,000 MNIST images in [0, 1])."""
    from dpgen.data import as_tensors, load_dataset

    root = default_data_root(data_root)
    xtr = as_tensors(load_dataset("mnist10k", "train", data_root=root))[0]
    xte = as_tensors(load_dataset("mnist10k", "test", data_root=root))[0]
    return xtr, xte
