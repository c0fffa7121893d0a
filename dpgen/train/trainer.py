"""The one training loop every generative method shares.

Per step: the method draws the real batch (its sampling scheme is what its accountant assumes),
the generator produces a batch with labels drawn uniformly (never the private labels), the
method's loss applies its privacy mechanism to the real side, the optimizer steps, and the
accountant records the step.

* ``trainer.device=auto``: CUDA when present, else CPU. Seeds: ``seed``.
* Checkpoints every ``trainer.checkpoint_every`` steps and at the end, written atomically:
  generator, optimizer, RNG states, accountant ledger, the privacy settings it was spent under,
  step, log position. ``resume=true`` continues from the last one with the same noise (the noise
  is calibrated for the checkpoint's steps, not for a changed ``trainer.steps``) and refuses
  changed privacy settings, naming them.
* Publication (dpgen.train.publication): the ledger is written to ``checkpoints/ledger.json``
  before anything from a step is logged or checkpointed, so a run resumed after a crash counts
  every step it published, even after its last checkpoint; log lines after the checkpoint are cut
  from ``metrics.jsonl`` but stay charged. A private method whose loss is computed from clean
  records (``publishes_loss = False``: DP-Sinkhorn and its variants) never has its loss logged,
  shown or written; only step and epsilon are.
* Budget: a private method knows how many steps its (epsilon, delta) allows; the run stops before
  a step that would exceed it (counting the steps its ledger already holds) and records what it
  spent.
* A non-finite step stops the run with the step number: the test reads a released quantity (the
  published loss, else the noisy gradient), the failed step is charged in the ledger file, and the
  last good checkpoint is kept.
* Results in the run folder: ``metrics.jsonl`` (every ``trainer.log_every`` steps),
  ``metrics.json`` (final), ``samples.png``, ``config.yaml``, ``checkpoints/last.pt``.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any, Dict

import numpy as np
import torch

from dpgen.train.checkpoint import Checkpointer, rng_state, set_rng_state
from dpgen.train.publication import Publisher, finite_gradients, stop_step
from dpgen.utils.io import atomic_write_text, write_json


class TrainingError(RuntimeError):
    """Training cannot continue (NaN loss, ...); the message says where and what was kept."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("trainer.device=cuda but no CUDA device is available: use trainer.device=auto or cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def mechanism_generators(cfg, device):
    """Random generators of the privacy mechanism: which records a batch holds, the directions and
    the noise. Subsampling amplification and the Gaussian mechanism both assume this randomness is
    unknown to an adversary, so by default (``privacy.secret_randomness=true``) it is seeded from
    the operating system's entropy, never from the public ``seed``, and never written to a
    checkpoint. ``false`` seeds it from ``seed`` for bit-reproducible experiments: the guarantee
    then holds only while the seed stays secret.
    """
    import secrets

    if cfg.privacy.secret_randomness:
        s1, s2 = secrets.randbits(63), secrets.randbits(63)
    else:
        s1, s2 = cfg.seed + 1_000_003, cfg.seed + 2_000_003
    return torch.Generator().manual_seed(s1), torch.Generator(device=device).manual_seed(s2)


class EMA:
    """Exponential moving average of a model's parameters and buffers (``trainer.ema`` = decay).

    DP training takes many small noisy steps; averaging the iterates cancels much of the noise.
    The average is a function of the released iterates only, so it costs no privacy.
    """

    def __init__(self, model: torch.nn.Module, decay: float):
        import copy

        self.decay = float(decay)
        self.model = copy.deepcopy(model)
        for p in self.model.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        for a, b in zip(self.model.parameters(), model.parameters()):
            a.lerp_(b, 1.0 - self.decay)
        for a, b in zip(self.model.buffers(), model.buffers()):
            if a.dtype.is_floating_point:
                a.lerp_(b, 1.0 - self.decay)
            else:
                a.copy_(b)


def make_optimizer(t, params) -> torch.optim.Optimizer:
    """The optimizer ``trainer.optimizer`` names (adam | sgd | rmsprop) with the trainer's settings."""
    if t.optimizer == "adam":
        return torch.optim.Adam(params, lr=t.lr, betas=tuple(t.betas), weight_decay=t.weight_decay)
    if t.optimizer == "sgd":
        return torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    if t.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    raise ValueError(f"trainer.optimizer={t.optimizer!r} is unknown: choose adam, sgd or rmsprop")


def load_checkpoint(cfg, ckpt):
    """The checkpoint's state when ``resume=true|auto`` and one exists, else None (a fresh start)."""
    if cfg.resume and ckpt.exists():
        return ckpt.load()
    if cfg.resume is True:  # resume=auto starts quietly when there is nothing to continue
        print(f"[dpgen] resume=true but no checkpoint at {ckpt.path}: starting from step 0")
    return None


def prepare_resume(state, requested_steps: int, cfg, **settings_kw):
    """(steps to calibrate the noise for, privacy settings of the run). A resumed run keeps its
    checkpoint's calibration (its noise was released) and refuses changed privacy settings."""
    from dpgen.train.publication import calibration_steps, check_resume_settings, privacy_settings

    steps = calibration_steps(state, requested_steps)
    settings = privacy_settings(cfg, calibration_steps=steps, **settings_kw)
    if state is not None:
        check_resume_settings(state["privacy_settings"], settings)
    return steps, settings


def open_run(cfg, state, publisher, method, sampler_gen, noise_gen) -> int:
    """Start or continue a run; returns its step. With a checkpoint ``state`` (the caller has loaded
    its modules): the run's RNG (and, when not secret, the mechanism's) restored, ``metrics.jsonl``
    cut back to its step, the method's state loaded and its ledger brought up to the newest one on
    disk (steps published after the checkpoint count). Without: stale files of an earlier run in
    the folder are removed (a fresh start)."""

    if state is None:
        if publisher.jsonl.exists():
            publisher.jsonl.unlink()
        publisher.ledger.remove()
        return 0
    set_rng_state(state["rng"])
    if not cfg.privacy.secret_randomness and "mechanism_rng" in state:
        sampler_gen.set_state(state["mechanism_rng"]["sampler"])
        noise_gen.set_state(state["mechanism_rng"]["noise"])
    _truncate_jsonl(publisher.jsonl, int(state["step"]))
    method.load_state_dict(state["method"])
    publisher.ledger.reconcile(method)
    return int(state["step"])


def run_state(cfg, step: int, sampler_gen, noise_gen, settings, **parts) -> dict:
    """A checkpoint: ``parts`` (state dicts), the privacy settings its ledger was spent under, the
    run's RNG state and step, and the mechanism's RNG only when it is not secret (reproducible runs)."""

    return {**parts, "rng": rng_state(), "step": step, "privacy_settings": settings,
            **({} if cfg.privacy.secret_randomness else
               {"mechanism_rng": {"sampler": sampler_gen.get_state(), "noise": noise_gen.get_state()}})}


def _truncate_jsonl(path: Path, max_step: int) -> None:
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line).get("step", 0) <= max_step:
                keep.append(line)
        except json.JSONDecodeError:
            break  # a torn last line from a kill: drop it and what follows
    atomic_write_text(path, "".join(l + "\n" for l in keep))


def save_grid(images: torch.Tensor, path: Path, nrow: int = 10) -> None:
    """Save a grid of images in [0, 1] (N, C, H, W) as PNG (atomically)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from torchvision.utils import make_grid

    from dpgen.utils.io import atomic_write_bytes

    grid = make_grid(images.detach().cpu().clamp(0, 1), nrow=nrow, padding=1, pad_value=1.0)
    arr = grid.permute(1, 2, 0).numpy()
    fig = plt.figure(figsize=(arr.shape[1] / 40 + 1, arr.shape[0] / 40 + 1))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.imshow(arr.squeeze(-1) if arr.shape[-1] == 1 else arr, cmap="gray" if arr.shape[-1] == 1 else None,
              interpolation="nearest")
    ax.axis("off")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def train_generative(cfg, output_dir) -> Dict[str, Any]:
    """Train ``cfg.method`` on ``cfg.dataset``; evaluate; write the run's files. Returns metrics."""
    from tqdm.auto import tqdm

    from dpgen.data import load_dataset
    from dpgen.methods import make_method
    from dpgen.models import count_parameters, make_generator
    from dpgen.privacy.calibration import steps_for_epochs

    t_start = time.time()
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t = cfg.trainer
    device = resolve_device(t.device)
    seed_everything(cfg.seed)  # models, generated codes and labels: reproducible from the seed
    sampler_gen, noise_gen = mechanism_generators(cfg, device)

    ds_opts = dict(cfg.dataset.options or {})
    train_ds = load_dataset(cfg.dataset.name, "train", data_root=cfg.dataset.data_root,
                            download=cfg.dataset.download, **ds_opts)
    n = len(train_ds)
    shape = tuple(train_ds.shape)
    in_memory = hasattr(train_ds, "tensors")
    num_classes = int(getattr(train_ds, "num_classes", cfg.dataset.num_classes) or 0)
    if t.batch_size > n:
        raise ValueError(f"trainer.batch_size={t.batch_size} is larger than the dataset ({n} records): lower it.")
    steps = int(t.steps) if t.steps is not None else steps_for_epochs(n, t.batch_size, t.epochs)
    ckpt = Checkpointer(out / "checkpoints")
    state = load_checkpoint(cfg, ckpt)
    calib_steps, settings = prepare_resume(state, steps, cfg, n_private=n)

    method = make_method(cfg, num_classes=num_classes, data_dim=int(np.prod(shape)), n_private=n,
                         steps=calib_steps, batch_size=t.batch_size, image_shape=shape)
    gen = make_generator(cfg.model.generator, shape, num_classes, cfg.model.code_dim).to(device)
    opt = make_optimizer(t, gen.parameters())
    ema = EMA(gen, t.ema) if t.ema else None
    publisher = Publisher(cfg, out, method, settings)

    if state is not None:
        gen.load_state_dict(state["generator"])
        opt.load_state_dict(state["optimizer"])
        if ema is not None and state.get("ema") is not None:
            ema.model.load_state_dict(state["ema"])
    step = open_run(cfg, state, publisher, method, sampler_gen, noise_gen)
    if state is not None:
        print(f"[dpgen] resumed from {ckpt.path} at step {step} (epsilon spent so far "
              f"{method.epsilon():.4f})")

    def checkpoint():
        publisher.checkpoint(lambda: ckpt.save(run_state(
            cfg, step, sampler_gen, noise_gen, settings, generator=gen.state_dict(), optimizer=opt.state_dict(),
            method=method.state_dict(), ema=ema.model.state_dict() if ema is not None else None)))

    stop_reason = "completed"
    target_steps = stop_step(method, step, steps, method.max_steps)
    if target_steps < steps:
        print(f"[dpgen] the budget allows {target_steps} of the {steps} steps asked: training stops there")
    method.rng = noise_gen  # the mechanism's randomness (also for a release in prepare_data)
    if in_memory:  # the whole set on the device at once
        X_dev, Y_dev = train_ds.tensors[0].to(device), train_ds.tensors[1].to(device)
        # a method may transform the private set once before training (e.g. local privatisation)
        X_dev, Y_dev = method.prepare_data(X_dev, Y_dev, out)
        if step == 0:  # what prepare_data released (e.g. a DP mean) goes into the first checkpoint
            checkpoint()

        def fetch(idx):
            return X_dev[idx], Y_dev[idx]
    else:  # lazy datasets (CelebA): read this step's records only
        if getattr(cfg.method, "center", "none") not in (None, "none"):
            raise ValueError(f"method.center={cfg.method.center} needs an in-memory dataset; "
                             f"{cfg.dataset.name} is read lazily: set method.center=none")

        def fetch(idx):
            items = [train_ds[int(i)] for i in idx.cpu()]
            return (torch.stack([x for x, _ in items]).to(device),
                    torch.as_tensor([int(y) for _, y in items], device=device))
    # what may leave the run: the loss only when the method computes it from released values
    publishes_loss = method.publishes_loss
    last_loss = float("nan")
    bar = tqdm(total=target_steps, initial=step, desc=f"{cfg.method.name} on {cfg.dataset.name}",
               disable=not t.progress, dynamic_ncols=True)
    if hasattr(method, "bind_generator"):  # methods that need the generator (parameter-gradient noise, ...)
        method.bind_generator(gen)
    gen.train()
    while step < target_steps:
        idx = method.sample_batch(n, t.batch_size, sampler_gen)
        idx = idx.to(device) if in_memory else idx
        if idx.numel() == 0 and not method.private:  # an empty batch: nothing to learn from, no privacy
            step += 1
            bar.update(1)
            continue
        fake, y_fake = gen.sample(t.batch_size, device=device)
        if idx.numel() == 0:  # an empty Poisson batch: the mechanism still releases its noise
            if not hasattr(method, "empty_batch_loss"):
                raise TrainingError(f"{cfg.method.name} drew an empty batch but has no empty_batch_loss: its "
                                    "Poisson mechanism must release noise on an empty batch too")
            loss = method.empty_batch_loss(fake)
        else:
            real, y_real = fetch(idx)
            loss = method.loss(fake, y_fake, real, y_real)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        # the stop test reads a released quantity: the loss where it is published, else the gradient
        # the mechanism released (post-processing of the noisy release)
        finite = bool(torch.isfinite(loss)) if publishes_loss else finite_gradients(gen.parameters())
        if not finite:
            method.account()  # the mechanism ran: keep the ledger honest
            publisher.persist()
            what = f"loss is {loss.item()}" if publishes_loss else "the released gradient is not finite"
            raise TrainingError(
                f"{what} at step {step + 1}: training stopped. The last good checkpoint ({ckpt.path}) is kept "
                f"and the privacy ledger ({publisher.ledger.path}) counts the failed step; lower trainer.lr or "
                "check the data.")
        opt.step()
        if ema is not None:
            ema.update(gen)
        method.account()
        step += 1
        bar.update(1)
        if step % t.log_every == 0 or step == target_steps:
            rec = {"step": step}
            if publishes_loss:
                last_loss = float(loss.item())
                rec["loss"] = last_loss
                bar.set_postfix(loss=f"{last_loss:.4g}")
            if method.private and (step % (t.log_every * 10) == 0 or step == target_steps):
                rec["epsilon"] = method.epsilon()
            publisher.publish(rec, step)
        if step % t.checkpoint_every == 0 or step == target_steps:
            checkpoint()
    bar.close()
    if target_steps < steps:
        stop_reason = f"privacy budget: the next step would exceed epsilon={cfg.privacy.epsilon}"
    train_time = time.time() - t_start

    # ---- evaluation on the real test split (never used during training) ----------------------
    if ema is not None:  # evaluate (and release) the averaged weights: post-processing, no privacy cost
        gen = ema.model
    gen.eval()
    metrics: Dict[str, Any] = {
        "method": cfg.method.name,
        "dataset": cfg.dataset.name,
        "steps": step,
        "steps_requested": steps,
        "stop_reason": stop_reason,
        "final_loss": (last_loss if publishes_loss else
                       "withheld: computed from clean private records (only the noisy gradient is released)"),
        "generator": type(gen).__name__,
        "generator_parameters": count_parameters(gen),
        "n_private": n,
        "batch_size": t.batch_size,
        "device": str(device),
        "privacy": {**method.privacy_report(), "mechanism_randomness": (
            "OS entropy: batch sampling, directions and noise are unpredictable from the public seed"
            if cfg.privacy.secret_randomness else
            "seeded from `seed` (reproducible): the guarantee holds only while the seed stays secret")},
        "train_seconds": round(train_time, 2),
        "checkpoint": str(ckpt.path),
    }
    with torch.no_grad():
        # 8 rows; with labels, column j shows class j
        ncol = num_classes if num_classes else 8
        y_grid = torch.arange(num_classes, device=device).repeat(8) if num_classes else None
        xg, _ = gen.sample(8 * ncol, y=y_grid, generator=torch.Generator(device=device).manual_seed(cfg.seed + 1),
                           device=device)
        if len(shape) == 3:
            save_grid(xg, out / "samples.png", nrow=ncol)
            metrics["samples_png"] = str(out / "samples.png")
    task = cfg.task
    if task.eval_models:
        metrics["downstream"] = evaluate_generator(cfg, gen, shape, device, n_private=n)
    if task.fid:
        metrics.update(fid_of_generator(cfg, gen, shape, device))
    metrics["wall_seconds"] = round(time.time() - t_start, 2)
    write_json(out / "metrics.json", metrics)
    publisher.finish()
    return metrics


def evaluate_generator(cfg, gen, shape, device, n_private: int) -> Dict[str, Any]:
    """Downstream classifiers trained on synthetic samples, tested on the real test split."""
    from dpgen.data import as_tensors, load_dataset
    from dpgen.eval import evaluate_downstream

    task = cfg.task
    ds_opts = dict(cfg.dataset.options or {})
    test_ds = load_dataset(cfg.dataset.name, "test", data_root=cfg.dataset.data_root,
                           download=cfg.dataset.download, **ds_opts)
    X_test, Y_test = as_tensors(test_ds)
    n_syn = int(task.n_synthetic) if task.n_synthetic else min(60000, 10 * n_private)
    xs, ys = [], []
    g = torch.Generator(device=device).manual_seed(cfg.seed + 2)
    with torch.no_grad():
        for i in range(0, n_syn, 1000):
            x, y = gen.sample(min(1000, n_syn - i), generator=g, device=device)
            xs.append(x.cpu())
            ys.append(y.cpu())
    x_syn, y_syn = torch.cat(xs), torch.cat(ys)
    res = evaluate_downstream(x_syn, y_syn, X_test, Y_test, models=tuple(task.eval_models),
                              image_shape=tuple(shape) if len(shape) == 3 else None,
                              max_epochs=task.eval_max_epochs, seed=cfg.seed, device=str(device))
    res["n_synthetic"] = n_syn
    res["n_test"] = int(X_test.shape[0])
    return res


def fid_of_generator(cfg, gen, shape, device) -> Dict[str, Any]:
    """{"fid": value} or {"fid": None, "fid_missing": reason}; real statistics cached per dataset."""
    from dpgen.data import as_tensors, load_dataset
    from dpgen.eval.fid import FIDUnavailable, compute_fid, real_statistics
    from dpgen.utils.io import outputs_dir

    if len(shape) != 3:
        return {"fid": None, "fid_missing": f"FID needs images; {cfg.dataset.name} rows have shape {shape}"}
    n = int(cfg.task.fid_samples)
    try:
        test = load_dataset(cfg.dataset.name, "test", data_root=cfg.dataset.data_root,
                            **dict(cfg.dataset.options or {}))
        n_real = min(n, len(test))
        stats = real_statistics(f"{cfg.dataset.name}_test", lambda: as_tensors(test, n_real)[0],
                                outputs_dir() / "fid_stats", n=n_real, device=str(device))
        g = torch.Generator(device=device).manual_seed(cfg.seed + 3)
        with torch.no_grad():
            fake = torch.cat([gen.sample(min(500, n - i), generator=g, device=device)[0].cpu()
                              for i in range(0, n, 500)])
        return {"fid": compute_fid(fake, real_stats=stats, device=str(device)), "fid_samples": n,
                "fid_real_images": n_real}
    except FIDUnavailable as e:
        return {"fid": None, "fid_missing": " ".join(str(e).split())}
