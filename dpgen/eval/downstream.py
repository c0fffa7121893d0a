"""Downstream classifiers: train on synthetic (x, y), report accuracy on the real test set.

Protocol of DP-Sinkhorn (Cao et al., App. D.2), also the downstream task of DP-SWD (Table 2):

* ``logreg``: scikit-learn ``LogisticRegression`` (L-BFGS, ``max_iter=5000``) on flattened
  inputs, fitted on the WHOLE synthetic set (the paper uses a holdout only for the MLP and CNN),
  so its ``holdout_acc`` is ``None`` and ``epochs`` is ``None`` (``iterations`` gives L-BFGS's).
  By default its objective and scipy call run with the loss and gradient in fused float32 products
  (``logreg_solver="fused"``, :mod:`dpgen.eval.logreg`: the same model to L-BFGS's tolerance,
  2.2-4.3 x faster on 2 cores); ``logreg_solver="sklearn"`` is scikit-learn's own fit.
* ``mlp``: flattened input -> Linear(100) -> ReLU -> Linear(n_classes); Adam with default
  parameters (lr 1e-3).
* ``cnn``: Conv(32, 3x3, padding 1) -> ReLU -> MaxPool(2) -> Dropout(0.5) -> Conv(64, 3x3,
  padding 1) -> ReLU -> MaxPool(2) -> Dropout(0.5) -> Linear(n_classes) (dropout "between all
  intermediate layers"); Adam defaults. Works on 1- or 3-channel images of any size >= 8x8
  (8x8 digits -> 2x2x64 features, 28x28 MNIST -> 7x7x64, 32x32 CelebA -> 8x8x64).
* ``resnet``: DPImageBench's ResNet-110 with its own recipe (batch 256, Adam at 0.01 stepped down, averaged weights;
  every epoch run, the one with the best holdout accuracy kept): :mod:`dpgen.eval.dpimagebench`.
* Early stopping (MLP, CNN): ``holdout`` (10%) of the SYNTHETIC set is held out (stratified when
  every class has >= 2 samples); after each epoch the holdout accuracy is measured, the weights
  of the best epoch are kept (ties broken by lower holdout loss), and training stops after
  ``patience`` (10) epochs without improvement or at ``max_epochs``. The real test set is only
  touched once, after training, to report ``test_acc``.

Everything is seeded (``seed``): the holdout split, initialisations, minibatch order, dropout;
torch's global RNG state is restored afterwards. Accuracies are in percent.
"""

from __future__ import annotations

import copy
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from dpgen.eval._common import (as_image_batch, check_unit_range, infer_image_shape,
                                seeded, to_float_tensor, to_numpy)
from dpgen.utils.device import resolve_device
from dpgen.utils.registry import Registry
from dpgen.utils.threads import rebalance_active

MODELS = ("logreg", "mlp", "cnn")

__all__ = ["CLASSIFIERS", "MODELS", "MLP", "MLPStep", "CNN", "accuracy", "estimate_seconds", "evaluate_downstream", "fit_logreg",
           "train_torch_classifier", "train_flops_per_sample", "holdout_split", "flatten_results"]


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------

class MLP(nn.Module):
    """One hidden layer of ``hidden`` (100) ReLU units."""

    def __init__(self, in_features: int, n_classes: int, hidden: int = 100):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_classes))

    def forward(self, x):
        return self.net(x)


class Dropout(nn.Dropout):
    """``nn.Dropout`` with its mask drawn as ``rand >= p`` (the same law: each unit kept with probability
    1 - p, kept units scaled by 1 / (1 - p)). On a CPU this is 5x faster than ``bernoulli_``, which took a
    fifth of the CNN's training time (``make bench``, eval part)."""

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        if self.p >= 1:
            return torch.zeros_like(x)
        return x * (torch.rand_like(x) >= self.p) * (1.0 / (1.0 - self.p))


class CNN(nn.Module):
    """Two 3x3 conv layers (32, 64 filters), ReLU, 2x2 max-pool, dropout 0.5, linear head. Weights and
    activations in channels-last layout (faster convolutions on a CPU; the same function). Each ReLU is applied
    after its max-pool: ReLU is non-decreasing, so max-pool(ReLU(x)) = ReLU(max-pool(x)) and the gradients are
    the same too (the test compares both orders exactly), with the ReLU and its backward on a quarter of the
    values (``make bench``, eval part: the CNN epoch beside the ReLU-then-pool order)."""

    def __init__(self, image_shape: Sequence[int], n_classes: int, dropout: float = 0.5):
        super().__init__()
        c, h, w = (int(s) for s in image_shape)
        if c not in (1, 3):
            raise ValueError(f"CNN expects 1 or 3 channels, got {c}")
        if h < 8 or w < 8:
            raise ValueError(f"CNN expects images of at least 8x8, got {h}x{w}")
        self.image_shape = (c, h, w)
        self.features = nn.Sequential(
            nn.Conv2d(c, 32, kernel_size=3, padding=1), nn.MaxPool2d(2), nn.ReLU(inplace=True),
            Dropout(dropout),
            nn.Conv2d(32, 64, kernel_size=3, padding=1), nn.MaxPool2d(2), nn.ReLU(inplace=True),
            Dropout(dropout),
            nn.Flatten(),
        )
        self.head = nn.Linear(64 * (h // 2 // 2) * (w // 2 // 2), n_classes)
        self.to(memory_format=torch.channels_last)

    def forward(self, x):
        x = x.reshape(x.shape[0], *self.image_shape).contiguous(memory_format=torch.channels_last)
        return self.head(self.features(x))


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------

def _labels(y, name: str) -> np.ndarray:
    y = to_numpy(y, name)
    if y.ndim == 2:  # one-hot / soft labels from a conditional generator
        y = y.argmax(axis=1)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-d integer labels or 2-d one-hot, got shape {y.shape}")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        if not np.all(np.isfinite(y)) or not np.all(np.equal(np.mod(y, 1), 0)):
            raise ValueError(f"{name} must hold integer class labels")
    y = y.astype(np.int64)
    if y.size and y.min() < 0:
        raise ValueError(f"{name} has negative labels")
    return y


def _features(x, name: str, clip: bool) -> torch.Tensor:
    t = to_float_tensor(x, name)
    if t.dim() < 2:
        raise ValueError(f"{name} must be a batch (n, ...), got shape {tuple(t.shape)}")
    if clip:
        t = t.clamp(0.0, 1.0)
    check_unit_range(t, name)
    return t


def holdout_split(y: np.ndarray, frac: float, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """Indices (fit, holdout) with ``round(frac * n)`` holdout samples (>= 1 when frac > 0),
    stratified by class when every class has at least 2 samples."""
    n = len(y)
    rng = np.random.default_rng(seed)
    if frac <= 0:
        return rng.permutation(n), np.empty(0, dtype=np.int64)
    n_hold = max(1, int(round(frac * n)))
    if n_hold >= n:
        raise ValueError(f"holdout={frac} leaves no training samples out of {n}")
    classes, counts = np.unique(y, return_counts=True)
    if counts.min() >= 2 and n_hold >= len(classes) and n - n_hold >= len(classes):
        from sklearn.model_selection import train_test_split
        fit, hold = train_test_split(np.arange(n), test_size=n_hold, stratify=y,
                                     random_state=int(seed) % (2 ** 32))
        return np.asarray(fit), np.asarray(hold)
    perm = rng.permutation(n)
    return perm[n_hold:], perm[:n_hold]


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DownstreamModel:
    """One downstream classifier (``task.eval_models``): its training FLOPs per sample and epoch (forward +
    backward = 3 x forward; a multiply-add = 2; for ``make bench``'s floors and the long-run notice), its
    sustained CPU efficiency relative to 60 GFLOP/s a thread (``make bench``'s eval part, the measurements in
    docs/SPEED.md, "The long-run notice's downstream estimate"; kept so the estimate stays an upper one), the
    repetitions it is estimated at
    (None: the epochs) and its fit: ``fit(sets, options) -> result dict``."""

    flops: Callable[[Tuple[int, ...], int, int], float]
    efficiency: float
    fit: Callable[["_Sets", dict], Dict]
    repetitions: Optional[int] = None


#: ``task.eval_models[]`` -> :class:`DownstreamModel` (filled below the fits)
CLASSIFIERS = Registry("downstream classifier", key="task.eval_models[]")
_LOGREG_ITERS = 300  # a typical L-BFGS length


def _mlp_flops(shape, n_classes, hidden):
    return 3 * 2 * (int(np.prod(shape)) * hidden + hidden * n_classes)


def _cnn_flops(shape, n_classes, hidden):
    if len(shape) != 3:
        return 0.0  # no CNN on flat records
    c, h, w = shape
    return 3 * 2 * (h * w * 32 * 9 * c + (h // 2) * (w // 2) * 64 * 32 * 9 + (h // 4) * (w // 4) * 64 * n_classes)


def _logreg_flops(shape, n_classes, hidden):  # one L-BFGS iteration over the whole set: X W and X^T (P - Y)
    return 2 * 2 * int(np.prod(shape)) * n_classes


def train_flops_per_sample(name: str, image_shape: Sequence[int], n_classes: int = 10, hidden: int = 100) -> float:
    return CLASSIFIERS.lookup(name).flops(tuple(int(s) for s in image_shape), n_classes, hidden)


def estimate_seconds(models: Sequence[str], n: int, image_shape: Sequence[int], max_epochs: int,
                     gflops_per_thread: float = 60.0, device="cpu") -> float:
    """A rough upper estimate of :func:`evaluate_downstream`'s time on a CPU (every epoch run), for the
    long-run notice. An evaluation on another device (CUDA) is not estimated: 0.0. What counts is the
    device the evaluation runs on, not whether the machine has a GPU (``trainer.device=cpu`` on a GPU node
    is estimated)."""
    threads = max(1, torch.get_num_threads())
    if torch.device(device).type != "cpu":
        return 0.0
    rate = gflops_per_thread * 1e9 * threads
    total = 0.0
    for name in models:
        model = CLASSIFIERS.lookup(name)
        reps = model.repetitions or max_epochs
        total += train_flops_per_sample(name, image_shape) * n * reps / (rate * model.efficiency)
    return total


class _Ticker:
    """An elapsed-time progress bar for a call that reports no progress of its own (scikit-learn's
    L-BFGS): a daemon thread refreshes it every second."""

    def __init__(self, desc: str, enabled: bool):
        self.desc, self.enabled = desc, enabled

    def __enter__(self):
        if not self.enabled:
            return self
        import threading

        from tqdm import tqdm

        self.bar = tqdm(desc=self.desc, total=None, bar_format="{desc}: {elapsed} (L-BFGS, no progress count)")
        self.stop = threading.Event()

        def tick():
            while not self.stop.wait(1.0):
                self.bar.refresh()

        self.thread = threading.Thread(target=tick, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.stop.set()
            self.thread.join()
            self.bar.close()


def fit_logreg(x_fit, y_fit: np.ndarray, seed: int = 0, max_iter: int = 5000, progress: bool = False,
               solver: str = "fused", device=None):
    """The protocol's logistic regression (scikit-learn's ``LogisticRegression(solver="lbfgs")``, C = 1) on
    flattened inputs; returns (model, converged). ``solver="fused"`` (the default) runs scikit-learn's objective
    and scipy call with the loss and gradient in fused float32 products (:mod:`dpgen.eval.logreg`; 3 or more
    classes, else scikit-learn's fit); ``"sklearn"`` is scikit-learn's own fit."""
    _choice_solver(solver)
    from threadpoolctl import threadpool_limits

    x2 = x_fit.reshape(len(x_fit), -1)
    # scipy's and numpy's BLAS: one thread for the fused fit, whose BLAS work is L-BFGS-B's own vector updates
    # (7,850 numbers; torch does the products), so that no BLAS thread spins on a core torch's threads need
    # between evaluations; scikit-learn's fit does its products there, with this process's torch thread count
    # (its share of the cores, dpgen/utils/threads.py) instead of every core. Measured on 2 cores, 54,000 MNIST
    # images, two torch threads: the fused fit's first version 27.6 s with the BLAS's own 2 threads, 10.7 s with 1
    fused = solver == "fused" and len(np.unique(y_fit)) >= 3
    # imported before the limit is set: a BLAS loaded inside it (scipy's own, with scipy.optimize) keeps its
    # default threads, which spun beside torch's and made a process's first fused fit 2-3 x slower (measured:
    # 14.7 s against 5.4 s on 54,000 MNIST images, 2 threads)
    from sklearn.linear_model import LogisticRegression

    from dpgen.eval.logreg import fit_logreg_fused
    limit = threadpool_limits(limits=1 if fused else max(1, torch.get_num_threads()), user_api="blas")
    try:
        if fused:
            with _Bar("logreg", progress) as bar:
                clf = fit_logreg_fused(x2, y_fit, max_iter=max_iter, device=device, progress=bar.update)
            return clf, clf.status == 0
        from sklearn.exceptions import ConvergenceWarning
        clf = LogisticRegression(solver="lbfgs", max_iter=max_iter, random_state=seed)
        x2 = x2.numpy() if isinstance(x2, torch.Tensor) else x2
        with warnings.catch_warnings(record=True) as rec, _Ticker("logreg", progress):
            warnings.simplefilter("always", ConvergenceWarning)
            clf.fit(x2, y_fit)
    finally:
        limit.restore_original_limits()
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in rec)
    return clf, converged


LOGREG_SOLVERS = ("fused", "sklearn")


def _choice_solver(solver: str) -> None:
    if solver not in LOGREG_SOLVERS:
        raise ValueError(f"logreg solver must be one of {LOGREG_SOLVERS}, got {solver!r}")


class _Bar:
    """A tqdm bar counting L-BFGS iterations (no total: L-BFGS stops when its gradient is small), or nothing."""

    def __init__(self, desc: str, enabled: bool):
        self.desc, self.enabled, self.bar = desc, enabled, None

    def __enter__(self):
        if self.enabled:
            from tqdm import tqdm
            self.bar = tqdm(desc=self.desc, total=None, unit="it", bar_format="{desc}: {n} L-BFGS iterations, {elapsed}")
        return self

    def update(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()


def classifier_adam(model: nn.Module, lr: float = 1e-3) -> torch.optim.Adam:
    """Adam for the downstream classifiers, with torch's fused kernel where the parameters' device has one
    (CPU, CUDA): one pass over each tensor per step instead of a chain of elementwise ops. At batch 128 the
    MLP's step is small enough for that work to count (``make bench``, eval part: the MLP epoch beside the
    for-loop Adam it replaced). Same update rule; the rounding differs in the last bits."""
    params = list(model.parameters())
    fused = bool(params) and all(p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float64)
                                 for p in params)
    return torch.optim.Adam(params, lr=lr, **({"fused": True} if fused else {}))


class MLPStep:
    """One Adam step of an ``MLP`` with its backward in closed form instead of autograd (the same gradients up
    to rounding; ``tests/eval/test_eval.py`` checks them against autograd). At the protocol's batch of 128 the
    MLP's five matrix products take less than half of an autograd step on a CPU; the rest is building and
    walking the graph, which this skips (``make bench``, eval part: the MLP epoch beside the autograd step).

    For logits z = relu(x W1^T + b1) W2^T + b2 and the mean cross-entropy over the batch of m, the gradient
    with respect to z is (softmax(z) - onehot(y)) / m; the rest is the chain rule through the two layers and
    the ReLU (zero gradient where its input is <= 0, as autograd's)."""

    def __init__(self, model: MLP, opt: torch.optim.Optimizer):
        lin1, lin2 = model.net[1], model.net[3]
        self.w1, self.b1, self.w2, self.b2 = lin1.weight, lin1.bias, lin2.weight, lin2.bias
        self.opt = opt
        self._rows = None
        self._minus_one = None

    @torch.no_grad()
    def __call__(self, xb: torch.Tensor, yb: torch.Tensor) -> None:
        w1, b1, w2, b2 = self.w1, self.b1, self.w2, self.b2
        for p in (w1, b1, w2, b2):
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        m = xb.shape[0]
        if self._rows is None or len(self._rows) < m:
            self._rows = torch.arange(m, device=xb.device)
            self._minus_one = torch.tensor(-1.0, dtype=w2.dtype, device=xb.device)
        xb = xb.reshape(m, -1)
        pre = torch.addmm(b1, xb, w1.t())
        h = pre.clamp_min(0)
        g = torch.softmax(torch.addmm(b2, h, w2.t()), 1)
        g.index_put_((self._rows[:m], yb), self._minus_one, accumulate=True)
        g.div_(m)
        torch.mm(g.t(), h, out=w2.grad)
        torch.sum(g, 0, out=b2.grad)
        gh = torch.mm(g, w2).mul_(pre > 0)
        torch.mm(gh.t(), xb, out=w1.grad)
        torch.sum(gh, 0, out=b1.grad)
        self.opt.step()


@torch.no_grad()
def _evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 2048
              ) -> Tuple[float, float]:
    """(accuracy in %, mean cross-entropy) of ``model`` on (x, y), in eval mode."""
    model.eval()
    correct, loss = 0, 0.0
    for i in range(0, len(x), batch):
        out = model(x[i:i + batch])
        loss += float(F.cross_entropy(out, y[i:i + batch], reduction="sum"))
        correct += int((out.argmax(1) == y[i:i + batch]).sum())
    return 100.0 * correct / len(x), loss / len(x)


def train_torch_classifier(model: nn.Module, x_fit: torch.Tensor, y_fit: torch.Tensor,
                           x_hold: Optional[torch.Tensor], y_hold: Optional[torch.Tensor], *,
                           max_epochs: int = 100, patience: int = 10, batch_size: int = 128,
                           lr: float = 1e-3, seed: int = 0, progress: bool = False,
                           desc: str = "") -> dict:
    """Adam training with early stopping on the holdout (x_hold, y_hold).

    Tensors must already be on the model's device. Returns ``holdout_acc`` (of the kept
    weights), ``best_epoch`` (1-based), ``epochs`` (epochs actually run) and the holdout-accuracy
    ``history``; the best weights are loaded into ``model`` in place. Without a holdout the last
    epoch's weights are kept.
    """
    dev = x_fit.device
    opt = classifier_adam(model, lr)
    mlp_step = MLPStep(model, opt) if type(model) is MLP else None
    gen = torch.Generator().manual_seed(int(seed))
    n = len(x_fit)
    has_hold = x_hold is not None and len(x_hold) > 0
    best = (-1.0, float("inf"))
    best_state, best_epoch, bad, history = None, 0, 0, []
    epochs = range(1, max_epochs + 1)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(epochs, desc=desc or type(model).__name__, unit="epoch")
        epochs = bar
    epoch = 0
    for epoch in epochs:
        rebalance_active()  # this process's share of the cores, re-read between epochs (dpgen.utils.threads)
        model.train()
        perm = torch.randperm(n, generator=gen).to(dev)
        for i in range(0, n, batch_size):
            idx = perm[i:i + batch_size]
            if mlp_step is not None:
                mlp_step(x_fit[idx], y_fit[idx])
                continue
            loss = F.cross_entropy(model(x_fit[idx]), y_fit[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if not has_hold:
            best_epoch = epoch
            continue
        acc, hloss = _evaluate(model, x_hold, y_hold)
        history.append(acc)
        if bar is not None:
            bar.set_postfix(holdout_acc=f"{acc:.2f}")
        if acc > best[0] or (acc == best[0] and hloss < best[1]):
            best, best_epoch, bad = (acc, hloss), epoch, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            bad += 1
            if bad >= patience:
                break
    if bar is not None:
        bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return {"holdout_acc": best[0] if has_hold else None, "best_epoch": best_epoch,
            "epochs": epoch, "history": history}


def evaluate_downstream(x_syn, y_syn, x_test, y_test, models: Sequence[str] = MODELS,
                        image_shape=None, holdout: float = 0.1, max_epochs: int = 100,
                        batch_size: int = 128, patience: int = 10, lr: float = 1e-3,
                        n_classes: Optional[int] = None, seed: int = 0, device="auto",
                        clip: bool = False, progress: bool = False, logreg_solver: str = "fused") -> Dict:
    """Train each of ``models`` on the synthetic (x_syn, y_syn), test on the real (x_test, y_test).

    ``x``: tensors / arrays in [0, 1] shaped (n, C, H, W), (n, H, W, C), (n, H, W) or flattened
    (n, D) (then ``image_shape`` = (C, H, W), or a square image is inferred); ``clip=True`` clamps
    x to [0, 1] first instead of rejecting out-of-range values. ``y``: integer labels (or 2-d
    one-hot, argmax-ed). Returns::

        {"n_train": n_syn, "n_fit": ..., "n_holdout": ..., "n_test": ..., "n_classes": K,
         "image_shape": [C, H, W], "seed": seed, "device": "cpu"|"cuda...",
         "logreg": {"test_acc": %, "holdout_acc": None, "epochs": None, "iterations": int,
                    "converged": bool, "time_s": s},
         "mlp"/"cnn": {"test_acc": %, "holdout_acc": %, "epochs": run, "best_epoch": kept,
                       "time_s": s}}
    """
    models = tuple(models)
    unknown = [m for m in models if m not in CLASSIFIERS]
    if not models or unknown:
        raise ValueError(f"models must be a non-empty subset of {MODELS}, got {models}")
    if not 0 <= holdout < 1:
        raise ValueError(f"holdout must be in [0, 1), got {holdout}")
    if max_epochs < 1 or batch_size < 1 or patience < 1:
        raise ValueError("max_epochs, batch_size and patience must be >= 1")
    from dpgen.utils.allocator import keep_freed_memory

    keep_freed_memory()  # the classifiers' epochs stop page-faulting their buffers in (dpgen/utils/allocator.py)
    sets = _prepare(x_syn, y_syn, x_test, y_test, image_shape, n_classes, clip, "cnn" in models,
                    holdout, seed, device)
    res: Dict = {"n_train": int(len(sets.xs)), "n_fit": int(len(sets.fit_idx)),
                 "n_holdout": int(len(sets.hold_idx)), "n_test": int(len(sets.xt)), "n_classes": sets.k,
                 "image_shape": list(sets.shape) if sets.shape is not None else None, "seed": int(seed),
                 "device": str(sets.device)}
    options = dict(max_epochs=max_epochs, patience=patience, batch_size=batch_size, lr=lr, seed=seed,
                   progress=progress, logreg_solver=logreg_solver)
    for name in models:
        t0 = time.perf_counter()
        res[name] = {**CLASSIFIERS.lookup(name).fit(sets, dict(options, name=name)),
                     "time_s": time.perf_counter() - t0}
    return res


class _Sets(NamedTuple):
    """The checked synthetic and test sets of one evaluation (images when a CNN is asked for)."""

    xs: torch.Tensor
    ys: np.ndarray
    xt: torch.Tensor
    yt: np.ndarray
    shape: Optional[Tuple[int, ...]]
    k: int
    fit_idx: np.ndarray
    hold_idx: np.ndarray
    device: torch.device

    def flat(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(len(x), -1)


def _prepare(x_syn, y_syn, x_test, y_test, image_shape, n_classes, clip, need_img, holdout, seed, device) -> _Sets:
    xs = _features(x_syn, "x_syn", clip)
    xt = _features(x_test, "x_test", clip)
    ys = _labels(y_syn, "y_syn")
    yt = _labels(y_test, "y_test")
    if len(xs) != len(ys):
        raise ValueError(f"x_syn and y_syn have different lengths ({len(xs)} vs {len(ys)})")
    if len(xt) != len(yt):
        raise ValueError(f"x_test and y_test have different lengths ({len(xt)} vs {len(yt)})")
    if len(xt) == 0:
        raise ValueError("the test set is empty")
    if len(np.unique(ys)) < 2:
        raise ValueError(f"y_syn must contain at least 2 classes, got {np.unique(ys).tolist()}")
    if int(np.prod(xs.shape[1:])) != int(np.prod(xt.shape[1:])):
        raise ValueError(f"synthetic and test samples differ in size ({tuple(xs.shape[1:])} vs "
                         f"{tuple(xt.shape[1:])})")
    k = int(max(ys.max(), yt.max())) + 1 if n_classes is None else int(n_classes)
    if ys.max() >= k or yt.max() >= k:
        raise ValueError(f"labels must be < n_classes={k}")
    if need_img:
        shp = infer_image_shape(xs.shape[1:], image_shape)
        xs, xt = as_image_batch(xs, shp), as_image_batch(xt, shp)
    else:
        shp = infer_image_shape(xs.shape[1:], image_shape) if (image_shape is not None or xs.dim() > 2) else None
    fit_idx, hold_idx = holdout_split(ys, holdout, seed)
    return _Sets(xs, ys, xt, yt, shp, k, fit_idx, hold_idx, resolve_device(device))


def _fit_logreg_model(sets: _Sets, o: dict) -> Dict:
    """LogReg on the whole synthetic set (no holdout: the paper's protocol), then the real test set once."""
    clf, converged = fit_logreg(sets.flat(sets.xs), sets.ys, seed=o["seed"], progress=o["progress"],
                                solver=o["logreg_solver"], device=sets.device)
    acc = 100.0 * float((clf.predict(sets.flat(sets.xt).numpy()) == sets.yt).mean())
    return {"test_acc": acc, "holdout_acc": None, "epochs": None, "iterations": int(np.max(clf.n_iter_)),
            "converged": converged}


def _fit_torch_model(sets: _Sets, o: dict) -> Dict:
    """The MLP (flattened input) or the CNN (images), early-stopped on the synthetic holdout; then the real
    test set, once, after training is over."""
    dev, flat = sets.device, o["name"] == "mlp"
    xa, xb = (sets.flat(sets.xs), sets.flat(sets.xt)) if flat else (sets.xs, sets.xt)
    with seeded(o["seed"], dev):
        model = (MLP(xa.shape[1], sets.k) if flat else CNN(sets.shape, sets.k)).to(dev)
        fi, hi = torch.from_numpy(sets.fit_idx), torch.from_numpy(sets.hold_idx)
        y_all = torch.from_numpy(sets.ys)
        out = train_torch_classifier(
            model, xa[fi].to(dev), y_all[fi].to(dev),
            xa[hi].to(dev) if len(hi) else None, y_all[hi].to(dev) if len(hi) else None,
            max_epochs=o["max_epochs"], patience=o["patience"], batch_size=o["batch_size"], lr=o["lr"],
            seed=o["seed"], progress=o["progress"], desc=o["name"])
    acc, _ = _evaluate(model, xb.to(dev), torch.from_numpy(sets.yt).to(dev))
    return {"test_acc": acc, "holdout_acc": out["holdout_acc"], "epochs": out["epochs"],
            "best_epoch": out["best_epoch"]}


CLASSIFIERS.register("logreg", DownstreamModel(_logreg_flops, 0.25, _fit_logreg_model, repetitions=_LOGREG_ITERS))
CLASSIFIERS.register("mlp", DownstreamModel(_mlp_flops, 0.6, _fit_torch_model))
CLASSIFIERS.register("cnn", DownstreamModel(_cnn_flops, 0.75, _fit_torch_model))


def _resnet_flops(shape, n_classes, hidden):
    from dpgen.eval.dpimagebench import resnet_flops

    return resnet_flops(shape, n_classes)


def _fit_resnet(sets: _Sets, o: dict) -> Dict:
    """DPImageBench's ResNet-110 and its own recipe (dpgen.eval.dpimagebench: batch 256, Adam at 0.01 stepped down,
    an averaged copy of the weights; the epoch with the best synthetic-holdout accuracy kept, no early stop)."""
    from dpgen.eval.dpimagebench import fit_resnet

    return fit_resnet(sets, o)


CLASSIFIERS.register("resnet", DownstreamModel(_resnet_flops, 0.3, _fit_resnet))


def flatten_results(res: Dict, prefix: str = "") -> Dict[str, float]:
    """``{"logreg_test_acc": ..., "mlp_test_acc": ..., "mlp_best_epoch": ...}`` for logging."""
    flat = {}
    for name in MODELS:
        if name in res:
            for key, v in res[name].items():
                if v is not None and key != "time_s":
                    flat[f"{prefix}{name}_{key}"] = v
    return flat


@torch.no_grad()
def accuracy(model: torch.nn.Module, X: torch.Tensor, Y: torch.Tensor, device=None, batch_size: int = 1000) -> float:
    """Accuracy (%) of ``model`` on (X, Y), in batches on ``device`` (default: the model's); the
    model's train/eval mode is restored afterwards."""
    if device is None:
        device = next(model.parameters()).device
    was = model.training
    model.eval()
    correct = 0
    for i in range(0, X.shape[0], batch_size):
        xb, yb = X[i:i + batch_size].to(device), Y[i:i + batch_size].to(device)
        correct += int((model(xb).argmax(1) == yb).sum())
    model.train(was)
    return 100.0 * correct / max(1, X.shape[0])

