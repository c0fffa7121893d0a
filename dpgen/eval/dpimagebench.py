"""DPImageBench's evaluation protocol (Gong et al., CCS 2025), beside the papers' (``task.protocol=dpimagebench``).

What DPImageBench (github.com/2019ChenGong/DPImageBench) does on MNIST and Fashion-MNIST, read from its code
(``evaluation/evaluator.py``, ``data/dataset_loader.py``, ``evaluation/classifier/resnet.py``, the ``fld`` package it
calls); this module re-implements it, it copies none of it:

* **60,000 synthetic images** (``gen.data_num``), one set for every metric.
* **FID against the sensitive TRAINING set** (pytorch-fid's Inception pool features; ``fld``'s FID uses a random
  50,000 of the generated images against every training record), and **precision / recall** (Kynkaanniemi et al.
  2019) with ``num_neighbors=4``: a point's k-NN radius is its 4th smallest distance to the points of its own set,
  ITSELF INCLUDED (distance 0), i.e. its 3rd nearest other point; precision is the share of generated points inside
  the training records' balls, recall the share of training records inside the generated points' balls, both
  strict (<), on every point of both sets.
* **Classifiers trained on the synthetic set, tested on the real test split**: a seeded permutation of the 60,000,
  the first 55,000 to train and the other 5,000 to validate; 50 epochs, batch 256, Adam (lr 0.01), the step size
  times 0.2 every 20 epochs, an exponential moving average of the weights (decay min(0.9999, (1 + t) / (10 + t))
  after step t) evaluated each epoch on the validation part, inputs scaled to [-1, 1]. The epoch kept is the last
  one with the best validation accuracy; the reported accuracy is the test accuracy of that epoch. Their
  classifiers are a ResNet (depth 110, CIFAR layout: 16 / 32 / 64 channels), WRN-40-4 and ResNeXt-29; this module
  has the ResNet (``resnet`` in the downstream registry, dpgen.eval.downstream).
* **delta = 1 / (N ln N)** for their N training records (``privacy.delta=${dpgen.delta_n_ln_n:${dataset.n_train}}``,
  dpgen.config.delta_n_ln_n).

Their default (``eval.mode=val``) holds out 5,000 of the 60,000 training records and keeps the epoch with the best
accuracy on those records, without noise (a Laplace-noised choice is computed beside it, but the clean one is the
number they list). dpgen keeps the epoch on the SYNTHETIC validation part (their ``eval.mode=syn``): no private
record and no test image is read to choose it. The test split is read once, after training.

Privacy: FID, precision and recall here are computed FROM THE PRIVATE TRAINING RECORDS. They are the statistics the
benchmark publishes, not covered by the run's guarantee; the run's privacy report lists them under ``not_covered``
(dpgen.privacy.report.TRAIN_SPLIT_FIDELITY_NOT_COVERED), and nothing of them chooses a setting or stops training.
The training records' Inception features stay in memory (never cached to a file) and no count read from them is
written: a count written is a declared one (``dataset.n_train``) or one asked for in the config.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from dpgen.eval._common import seeded
from dpgen.utils.threads import rebalance_active


@dataclass(frozen=True)
class Theirs:
    """DPImageBench's settings for 28 x 28 grey images (MNIST, Fashion-MNIST): the protocol's defaults."""

    n_synthetic: int = 60000
    #: FID: generated images (fld's random subset) against every training record
    fid_generated: int = 50000
    #: the validation part of the synthetic set: 5,000 of the 60,000
    val_fraction: float = 5000 / 60000
    #: precision / recall: the k-NN radius is the k-th smallest distance within a set, the point itself counted
    nearest_k: int = 4
    epochs: int = 50
    depth: int = 110
    batch_size: int = 256
    lr: float = 0.01
    lr_step: int = 20
    lr_gamma: float = 0.2
    ema: float = 0.9999


THEIRS = Theirs()
PROTOCOL = ("DPImageBench (Gong et al., CCS 2025) with the epoch chosen on synthetic validation (their eval.mode=syn): "
            "FID and precision / recall (k = 4, the point itself counted) of the synthetic set against the private "
            "training records; a ResNet trained on the synthetic set (epoch kept on its synthetic validation part), "
            "accuracy on the real test split")


# ---- the classifier ------------------------------------------------------------------------------------------------

class _Block(nn.Module):
    """Two 3x3 convolutions with batch norm, added to the input (a 1x1 projection with batch norm when the width or
    the resolution changes), then ReLU: He et al. 2016's basic block."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True),
            nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out))
        self.skip = (nn.Identity() if stride == 1 and c_in == c_out else
                     nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)))

    def forward(self, x):
        return F.relu(self.body(x) + self.skip(x))


class ResNet(nn.Module):
    """The CIFAR-layout ResNet DPImageBench trains on 28 x 28 images (He et al. 2016, section 4.2): a 3x3
    convolution to 16 channels, three stages of m basic blocks at 16, 32 and 64 channels (the last two halve the
    resolution), global average pooling, a linear head; depth = 6 m + 2 (theirs: 110, m = 18). Convolutions start
    from N(0, 2 / (9 x out channels)) (He initialisation, fan-out), batch-norm gains 1, biases 0. Any image of at
    least 4 x 4 pixels with 1 or 3 channels (8 x 8 digits: 8, 4, 2; 28 x 28: 28, 14, 7)."""

    def __init__(self, image_shape: Sequence[int], n_classes: int, depth: int = THEIRS.depth):
        super().__init__()
        c, h, w = (int(s) for s in image_shape)
        if (depth - 2) % 6 or depth < 8:
            raise ValueError(f"ResNet depth={depth}: use 6 m + 2 with m >= 1 (8, 14, 20, ..., 110)")
        if min(h, w) < 4:
            raise ValueError(f"ResNet expects images of at least 4 x 4, got {h} x {w}")
        m = (depth - 2) // 6
        layers: List[nn.Module] = [nn.Conv2d(c, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True)]
        c_in = 16
        for stage, width in enumerate((16, 32, 64)):
            for i in range(m):
                layers.append(_Block(c_in, width, 2 if stage > 0 and i == 0 else 1))
                c_in = width
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(64, n_classes)
        self.image_shape, self.depth = (c, h, w), depth
        for mod in self.modules():
            if isinstance(mod, nn.Conv2d):
                nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(mod, nn.BatchNorm2d):
                nn.init.ones_(mod.weight)
                nn.init.zeros_(mod.bias)

    def forward(self, x):
        x = x.reshape(x.shape[0], *self.image_shape)
        return self.head(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def resnet_flops(shape, n_classes: int = 10, depth: int = THEIRS.depth) -> float:
    """Training FLOPs per sample and epoch (3 x the forward's; a multiply-add = 2), for the long-run estimate."""
    if len(shape) != 3:
        return 0.0
    c, h, w = shape
    m, total = (depth - 2) // 6, 2.0 * h * w * 16 * 9 * c
    for stage, width in enumerate((16, 32, 64)):
        h, w = (h, w) if stage == 0 else (-(-h // 2), -(-w // 2))
        total += m * 2 * (2.0 * h * w * width * width * 9)
    return 3 * (total + 2.0 * 64 * n_classes)


class _Average:
    """The exponential moving average DPImageBench evaluates: after optimizer step t the average moves towards the
    weights with decay min(d, (1 + t) / (10 + t)), so that it follows them closely over the first steps."""

    def __init__(self, model: nn.Module, decay: float):
        self.decay, self.t = float(decay), 0
        self.params = [p.detach().clone() for p in model.parameters()]

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.t += 1
        d = min(self.decay, (1 + self.t) / (10 + self.t))
        for a, p in zip(self.params, model.parameters()):
            a.mul_(d).add_(p.detach(), alpha=1 - d)

    def state(self, model: nn.Module) -> Dict[str, torch.Tensor]:
        """The model's state with the averaged parameters (its own batch-norm statistics, as theirs)."""
        st = {k: v.detach().clone() for k, v in model.state_dict().items()}
        for (name, _), a in zip(model.named_parameters(), self.params):
            st[name] = a.clone()
        return st


def _scaled(x: torch.Tensor) -> torch.Tensor:
    return x * 2.0 - 1.0  # their classifiers read pixels in [-1, 1]


@torch.no_grad()
def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device, batch: int = 1000) -> float:
    model.eval()
    correct = 0
    for i in range(0, len(x), batch):
        out = model(_scaled(x[i:i + batch].to(device)))
        correct += int((out.argmax(1) == y[i:i + batch].to(device)).sum())
    return 100.0 * correct / max(1, len(x))


def train_selected(model: nn.Module, x_fit: torch.Tensor, y_fit: torch.Tensor, x_val: torch.Tensor,
                   y_val: torch.Tensor, *, epochs: int = THEIRS.epochs, batch_size: int = THEIRS.batch_size,
                   lr: float = THEIRS.lr, lr_step: int = THEIRS.lr_step, lr_gamma: float = THEIRS.lr_gamma,
                   ema: float = THEIRS.ema, seed: int = 0, device="cpu", progress: bool = False) -> Dict[str, Any]:
    """Train ``model`` by DPImageBench's recipe (module doc) on (x_fit, y_fit) for ``epochs`` epochs, evaluate the
    averaged weights on (x_val, y_val) after each, and load the weights of the last epoch with the best validation
    accuracy. Only the synthetic fit and validation parts are passed in: nothing here can read a test split.
    Returns ``best_epoch`` (1-based), ``val_acc`` (of the kept epoch) and the validation ``history``."""
    device = torch.device(device)
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=lr_step, gamma=lr_gamma)
    avg = _Average(model, ema)
    gen = torch.Generator().manual_seed(int(seed))
    xf, yf = x_fit.to(device), y_fit.to(device)
    best, best_epoch, best_state, history = -1.0, 0, None, []
    it = range(1, int(epochs) + 1)
    if progress:
        from tqdm import tqdm
        it = tqdm(it, desc="resnet", unit="epoch")
    for epoch in it:
        rebalance_active()  # this process's share of the cores, re-read between epochs (dpgen.utils.threads)
        model.train()
        perm = torch.randperm(len(xf), generator=gen).to(device)
        for i in range(0, len(xf), batch_size):
            idx = perm[i:i + batch_size]
            loss = F.cross_entropy(model(_scaled(xf[idx])), yf[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            avg.update(model)
        sched.step()
        live = copy.deepcopy(model.state_dict())
        model.load_state_dict(avg.state(model))
        acc = _accuracy(model, x_val, y_val, device)
        history.append(acc)
        if acc >= best:  # ties: the later epoch, as theirs
            best, best_epoch, best_state = acc, epoch, copy.deepcopy(model.state_dict())
        model.load_state_dict(live)
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return {"best_epoch": best_epoch, "val_acc": best, "history": history}


def split_synthetic(y: torch.Tensor, seed: int, val_fraction: float = THEIRS.val_fraction
                    ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(fit indices, validation indices) of a synthetic set of labels ``y``: a seeded permutation, its last
    round(fraction x n) (at least 1) to validate, as theirs (55,000 + 5,000 of 60,000)."""
    n = len(y)
    n_val = max(1, int(round(val_fraction * n)))
    if n_val >= n:
        raise ValueError(f"task.dpimagebench.n_synthetic={n} leaves no synthetic image to train on after the "
                         f"{n_val} of the validation part: use at least 2")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    return perm[:n - n_val], perm[n - n_val:]


def classify(x_syn: torch.Tensor, y_syn: torch.Tensor, read_test: Callable[[], Tuple[torch.Tensor, torch.Tensor]],
             *, n_classes: int, image_shape: Sequence[int], epochs: int = THEIRS.epochs, depth: int = THEIRS.depth,
             seed: int = 0, device="cpu", progress: bool = False) -> Dict[str, Any]:
    """Their ResNet on the synthetic set: trained on its fit part, the epoch kept on its validation part
    (:func:`train_selected`), then ``read_test()`` called once for the real test split's accuracy."""
    t0 = time.perf_counter()
    x_syn, y_syn = torch.as_tensor(x_syn).float(), torch.as_tensor(y_syn).long().reshape(-1)
    fit, val = split_synthetic(y_syn, seed)
    device = torch.device(device)
    with seeded(seed, device):
        model = ResNet(image_shape, n_classes, depth)
        sel = train_selected(model, x_syn[fit], y_syn[fit], x_syn[val], y_syn[val], epochs=epochs, seed=seed,
                             device=device, progress=progress)
    x_test, y_test = read_test()  # the real test split: once, after the epoch is chosen
    acc = _accuracy(model, torch.as_tensor(x_test).float(), torch.as_tensor(y_test).long().reshape(-1), device)
    return {"test_acc": acc, "val_acc": sel["val_acc"], "best_epoch": sel["best_epoch"], "epochs": int(epochs),
            "val_history": [round(a, 2) for a in sel["history"]], "depth": int(depth), "n_fit": int(len(fit)),
            "n_val": int(len(val)), "n_test": int(len(x_test)), "batch_size": THEIRS.batch_size, "lr": THEIRS.lr,
            "selection": "the last epoch with the best accuracy on the synthetic validation part (EMA weights)",
            "time_s": round(time.perf_counter() - t0, 2)}


def fit_resnet(sets, o: dict) -> Dict[str, Any]:
    """``resnet`` of the downstream registry (dpgen.eval.downstream.CLASSIFIERS): their ResNet and recipe for
    ``max_epochs`` epochs on the synthetic fit part, the epoch kept on the synthetic holdout, then the test split
    once. The registry's batch size, learning rate and patience are the papers' CNN's: this recipe keeps its own."""
    fi, hi = torch.from_numpy(sets.fit_idx), torch.from_numpy(sets.hold_idx)
    if sets.shape is None:
        raise ValueError("resnet trains on images: pass them as (n, C, H, W), or flattened with image_shape=(C, H, W)")
    if len(hi) == 0:
        raise ValueError("resnet keeps the epoch with the best accuracy on a synthetic holdout: use holdout > 0")
    y = torch.from_numpy(sets.ys)
    with seeded(o["seed"], sets.device):
        model = ResNet(sets.shape, sets.k)
        sel = train_selected(model, sets.xs[fi], y[fi], sets.xs[hi], y[hi], epochs=o["max_epochs"], seed=o["seed"],
                             device=sets.device, progress=o["progress"])
    acc = _accuracy(model, sets.xt, torch.from_numpy(sets.yt), sets.device)
    return {"test_acc": acc, "holdout_acc": sel["val_acc"], "epochs": o["max_epochs"], "best_epoch": sel["best_epoch"]}


# ---- fidelity against the training records -------------------------------------------------------------------------

def _radii(feat: torch.Tensor, k: int, chunk: int) -> torch.Tensor:
    """Each point's k-th smallest distance to the points of ``feat``, itself included (distance 0)."""
    return torch.cat([torch.cdist(feat[i:i + chunk], feat).kthvalue(k, dim=1).values
                      for i in range(0, len(feat), chunk)])


def _share_inside(points: torch.Tensor, centres: torch.Tensor, radii: torch.Tensor, chunk: int) -> float:
    inside = 0
    for i in range(0, len(points), chunk):
        inside += int((torch.cdist(points[i:i + chunk], centres) < radii[None, :]).any(dim=1).sum())
    return inside / len(points)


def knn_precision_recall(real, fake, k: int = THEIRS.nearest_k, device="cpu", chunk: int = 2048
                         ) -> Dict[str, float]:
    """Precision (share of ``fake`` inside the real points' k-NN balls) and recall (share of ``real`` inside the
    fake points' balls) as DPImageBench computes them: a radius is the k-th smallest distance within a set, the
    point itself counted (k = 4: the 3rd nearest other point), strict inequality, every point, float32 on
    ``device``."""
    r = torch.as_tensor(np.asarray(real, dtype=np.float32), device=device)
    f = torch.as_tensor(np.asarray(fake, dtype=np.float32), device=device)
    if min(len(r), len(f)) < k:
        raise ValueError(f"precision / recall at k={k} need at least {k} points a side")
    return {"precision": _share_inside(f, r, _radii(r, k, chunk), chunk),
            "recall": _share_inside(r, f, _radii(f, k, chunk), chunk)}


def inception_features(images: torch.Tensor, image_shape, device, progress: bool = False,
                       name: str = "images") -> np.ndarray:
    """Inception pool features (dpgen.eval.fid, pytorch-fid's weights), in memory only: no file (private records'
    features are never written). ``progress``: a bar over these images, for generated ones only (over private
    records it would show how many there are). Raises FIDUnavailable without the weights."""
    from dpgen.eval.fid import get_extractor

    return get_extractor(device=str(device))(images, tuple(image_shape), progress=bool(progress), name=name)


#: the salt of the per-record hash that picks a smaller task.dpimagebench.fid_real's training records
FID_SUBSET_SALT = b"dpgen-dpimagebench-fid-real-v1"


def seeded_rows(n_rows: int, m: int, seed: int) -> torch.Tensor:
    """``m`` of ``n_rows`` rows, a seeded subset in their order (all of them when ``m`` is not smaller)."""
    if m >= n_rows:
        return torch.arange(n_rows)
    return torch.randperm(n_rows, generator=torch.Generator().manual_seed(int(seed)))[:m].sort().values


def train_split_fidelity(fake: torch.Tensor, private: torch.Tensor, image_shape, device, seed: int = 0,
                         features: Optional[Callable] = None, progress: bool = False) -> Dict[str, Any]:
    """FID of a seeded ``THEIRS.fid_generated`` of the generated images ``fake`` and precision / recall
    (:func:`knn_precision_recall`) of all of them, against the training records ``private`` (already the seeded
    subset a smaller ``task.dpimagebench.fid_real`` asks for). Only the three statistics leave this function.
    ``progress``: a bar over the generated images' features; the records' pass gets a fixed line instead, since a
    bar would count them."""
    from dpgen.eval.fid import activation_statistics, frechet_distance

    features = features or inception_features
    act_fake = features(fake, image_shape, device, progress=progress, name="synthetic (dpimagebench)")
    if progress:
        print("[dpimagebench] Inception features of the training records: no progress bar (it would count the "
              "records)", file=sys.stderr, flush=True)
    # the loaders hold pixels in [0, 1] already; clamped so that the range check's error (which names the minimum and
    # maximum it found) can never quote a private value
    act_real = features(private.clamp(0.0, 1.0), image_shape, device)
    sub = seeded_rows(len(act_fake), THEIRS.fid_generated, seed).numpy()
    fid = frechet_distance(*activation_statistics(act_fake[sub]), *activation_statistics(act_real))
    return {"fid": float(fid), **knn_precision_recall(act_real, act_fake, THEIRS.nearest_k, device)}


# ---- the protocol in a generation run ------------------------------------------------------------------------------

def below_theirs(counts: Dict[str, int]) -> List[str]:
    """The counts of this evaluation below DPImageBench's, in words (empty: all theirs)."""
    theirs = {"n_synthetic": THEIRS.n_synthetic, "epochs": THEIRS.epochs, "depth": THEIRS.depth}
    return [f"{k} {v:,} (theirs {theirs[k]:,})" for k, v in counts.items() if k in theirs and v < theirs[k]]


def evaluate(cfg, gen, shape, device, n_private: int, test, synthetic_set: Callable, fid_on: bool,
             progress: bool = False) -> Dict[str, Any]:
    """The protocol on a trained generator (``test``: the real test split (x, y), read by the task already). FID
    and precision / recall against the private training records when ``fid_on`` (task.fid); the ResNet always."""
    from dpgen.config import delta_n_ln_n

    p = cfg.task.dpimagebench
    n_syn, shape = int(p.n_synthetic), tuple(int(s) for s in shape)
    x_syn, y_syn = synthetic_set(gen, n_syn, cfg.seed + 2, device)
    k = int(gen.num_classes or cfg.dataset.num_classes or 0)
    out: Dict[str, Any] = {"protocol": PROTOCOL, "n_synthetic": n_syn, "n_synthetic_theirs": THEIRS.n_synthetic}
    if k and len(shape) == 3:
        out["resnet"] = classify(x_syn, y_syn, lambda: test, n_classes=k, image_shape=shape, epochs=int(p.epochs),
                                 depth=int(p.depth), seed=cfg.seed, device=device, progress=progress)
    else:
        out["resnet"] = {"test_acc": None, "missing": "their ResNet needs labelled images"}
    n_real = min(int(p.fid_real), int(n_private)) if p.fid_real else int(n_private)  # declared or asked: public
    out.update({"fid_generated": min(THEIRS.fid_generated, n_syn), "prdc_generated": n_syn, "fid_real": n_real,
                "fid_real_of": f"the private training split (dataset.n_train={int(n_private):,}, declared)",
                "nearest_k": THEIRS.nearest_k,
                "nearest_k_means": "the k-th smallest distance within a set, the point itself counted"})
    if fid_on and len(shape) == 3:
        from dpgen.data.private import PrivateData
        from dpgen.eval.fid import FIDUnavailable

        try:
            X, y = PrivateData(cfg.dataset, "train", "cpu").whole()[:2]  # the raw records, not a method's transform
            if p.fid_real and n_real < int(n_private):
                # about n_real of the declared n, each record kept by its own hash position (the one split of
                # private records: adding or removing a record changes whether it is kept, and nothing else)
                from dpgen.data.holdout import held_out_mask

                keep = held_out_mask(X, y, n_real / int(n_private), salt=FID_SUBSET_SALT)
                X = X[torch.as_tensor(keep)]
            out.update(train_split_fidelity(x_syn, X, shape, device, seed=cfg.seed + 3, progress=progress))
        except FIDUnavailable as e:
            out.update({"fid": None, "fid_missing": " ".join(str(e).split())})
    else:
        out.update({"fid": None, "fid_missing": "task.fid=false" if len(shape) == 3 else "not images"})
    delta, theirs = float(cfg.privacy.delta), delta_n_ln_n(int(n_private))
    out["delta"] = {"run": delta, "one_over_n_ln_n": theirs, "equal": math.isclose(delta, theirs, rel_tol=1e-6),
                    "how": "privacy.delta='${dpgen.delta_n_ln_n:${dataset.n_train}}' sets 1 / (N ln N)"}
    counts = {"n_synthetic": n_syn, "epochs": int(p.epochs), "depth": int(p.depth)}
    out["below_theirs"] = below_theirs(counts) + ([f"fid_real {n_real:,} (theirs: every training record)"]
                                                  if p.fid_real and n_real < int(n_private) else [])
    return out


def estimate_seconds(p, shape, n_private: int, fid_on: bool, gflops_per_thread: float = 75.0) -> Tuple[float, str]:
    """(rough seconds on this CPU, what) of the protocol with counts ``p`` (task.dpimagebench): the ResNet's epochs
    at ``gflops_per_thread`` a thread, its training FLOPs' effective rate with batch norm, the validation passes
    and the small convolutions (measured 2026-12-05 on the 2-core CPU: ResNet-20 for 10 epochs on 4,583 images, its
    validation and test passes included, in 119 s on one thread = 75 GFLOP/s), and the Inception pass over the
    synthetic set and the training records."""
    shape = tuple(int(s) for s in shape)
    rate = gflops_per_thread * 1e9 * max(1, torch.get_num_threads())
    n_fit = int(p.n_synthetic) - max(1, int(round(THEIRS.val_fraction * int(p.n_synthetic))))
    secs = resnet_flops(shape, 10, int(p.depth)) * n_fit * int(p.epochs) / rate
    what = (f"DPImageBench's ResNet-{int(p.depth)} for {int(p.epochs)} epochs on {n_fit:,} synthetic images "
            "(task.dpimagebench.depth, .epochs, .n_synthetic change that)")
    if fid_on and len(shape) == 3:
        from dpgen.eval.fid import estimate_seconds as fid_seconds

        n_real = min(int(p.fid_real), n_private) if p.fid_real else n_private
        secs += fid_seconds(int(p.n_synthetic) + n_real)
        what += f", and FID / precision / recall of {int(p.n_synthetic):,} vs {n_real:,} training records"
    return secs, what


def summary_lines(b: Dict[str, Any]) -> List[str]:
    """What a run's summary says of the protocol's block (metrics.json ``dpimagebench``)."""
    lines = []
    r = b.get("resnet") or {}
    if r.get("test_acc") is not None:
        lines.append(f"  DPImageBench: ResNet-{r['depth']} {r['test_acc']:.2f}% on the real test split ({r['n_test']} "
                     f"records), trained on {r['n_fit']:,} synthetic images for {r['epochs']} epochs, epoch "
                     f"{r['best_epoch']} kept on {r['n_val']:,} synthetic validation images")
    if b.get("fid") is not None:
        lines.append(f"  DPImageBench: FID {b['fid']:.2f} ({b['fid_generated']:,} generated vs {b['fid_real']:,} "
                     f"training records), precision {b['precision']:.3f}, recall {b['recall']:.3f} (k = "
                     f"{b['nearest_k']}, {b['prdc_generated']:,} generated)")
        lines.append("  DPImageBench: FID, precision and recall are computed from the private training records: "
                     "published as the benchmark does, NOT covered by the run's guarantee (privacy.not_covered)")
    elif b.get("fid_missing"):
        lines.append(f"  DPImageBench: FID n/a ({b['fid_missing'].split(';')[0]})")
    d = b.get("delta") or {}
    if d and not d.get("equal"):
        lines.append(f"  DPImageBench: delta {d['run']:.3g}; theirs, 1 / (N ln N) = {d['one_over_n_ln_n']:.3g} "
                     f"({d['how']})")
    if b.get("below_theirs"):
        lines.append("  DPImageBench: counts below theirs: " + "; ".join(b["below_theirs"])
                     + ": not comparable with their table")
    return lines


__all__ = ["PROTOCOL", "THEIRS", "ResNet", "Theirs", "below_theirs", "classify", "estimate_seconds", "evaluate",
           "fit_resnet", "inception_features", "knn_precision_recall", "resnet_flops", "seeded_rows", "split_synthetic",
           "summary_lines", "train_selected", "train_split_fidelity"]
