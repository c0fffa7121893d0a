#!/usr/bin/env python
"""The speed table of ``make bench`` on whatever device is here (CUDA when available, else CPU).

Each hot path is timed beside its floor or its peer in the same process, interleaved, median of
repeats, with a CUDA synchronize around every timed call on a GPU:

  swd_loss          DP-SWD loss forward+backward (n = 1000, d = 784, k = 1000 and n = 60,000 on a GPU)
                    | floor: matmul + torch.sort + mean | peer: POT's sliced_wasserstein_distance
  sinkhorn_loss     Sinkhorn divergence forward+backward, d = 784 + 10 labels, eps 0.05, batch 50 / 500 /
                    2000 (5000 on a GPU) | dpgen's static log-domain loop vs geomloss tensorized (the peer)
  dpswd_mnist       DP-SWD at MNIST size (d = 7840, k = 1000, B = 100): loss fwd+bwd with structured frames
                    (dpgen's default) vs Haar frames | floor: fixed dense directions; training s/step
  eval              downstream evaluation at the papers' size: MLP / CNN training epoch on 54,000 samples and the
                    L-BFGS LogReg | floor: training FLOPs / sgemm rate measured in the same run | peer (MLP,
                    LogReg): their own matrix products timed alone at their shapes; the MLP's autograd step
                    (before its closed-form backward, MLPStep); the CNN with each ReLU before its max-pool
  fid               FID's Inception feature pass, 50 images | floor: its FLOPs / sgemm rate measured in the same
                    run | peer: the same network in the contiguous layout (before issue 53)
  frame_draw        bound=frame Haar directions d = 7840, k = 1000 | the Householder reflectors drawn directly
                    (dpgen) vs the sign-fixed QR of a Gaussian matrix (the previous way, same law)
  dpsinkhorn_steps  DP-Sinkhorn training steps/s, batch 50, DCGAN on 28 x 28, image-gradient clip + noise,
                    accountant step included | backend static vs tensorized (geomloss); the batch padded to
                    151 rows (trainer.static_shapes); on a GPU the step captured in a CUDA graph
                    (trainer.cuda_graph); on a CPU the
                    generator's contiguous layout (before model.memory_format=auto) | floor: the DCGAN's
                    forward + backward FLOPs / sgemm rate measured in the same run
  param_per_sample  dpsinkhorn_param per-sample clipping, batch 50, DCGAN: one record_grads call
                    | per-record backward loop vs batched (vmap) backward | floor: 50 x one backward
  secure_noise      privacy.secure_rng's cost: 1e6 N(0, 1) draws and DP-Sinkhorn's per-record release (batch 50, 10 x 10
                    DCT of 28 x 28) | torch.randn from a torch.Generator vs the OS CSPRNG (dpgen.utils.noise)
  da_steps          domain adaptation U-M steps/s (DP-SWD frame, DP-DANN) on the preset's networks
  headline_training issue 86's generators side by side (dpsinkhorn_best_mnist, dpmerf_best_mnist, dpkernel_mnist,
                    dpkernel_proxy_mnist),
                    each in its own child process on 60,000 random MNIST-sized records: s/step, the full preset's
                    training time projected, peak memory (resident / CUDA allocator) | floor: one step's matrix-
                    product FLOPs (torch's FlopCounterMode) / sgemm rate measured in the same run
  allocator         non-private Sinkhorn training step (DCGAN, batch 500, the Table 1 preset) and one CNN
                    evaluation epoch, each in a child process with glibc's malloc as it comes vs dpgen's
                    kept freed memory (dpgen/utils/allocator.py) | kernel (sys) CPU seconds of each beside it

    python scripts/bench_speed.py [--repeats 5] [--quick]   -> outputs/bench/speed_<device>.{json,md}

``--quick`` drops the largest sizes (a smoke run of the script). Timings are the machine's at that
moment: the JSON records the device, torch version, thread count and load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def timed(fns, repeats, warmup=1):
    """{name: median seconds} of the no-argument callables in ``fns``, interleaved."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    sync()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def fb(loss_fn, x, *args):
    """forward + backward in x."""
    def run():
        x.grad = None
        loss_fn(x, *args).backward()
    return run


def bench_swd(repeats, quick):
    import ot

    from dpgen.losses.sliced import sliced_wasserstein, sort_columns

    out = []
    sizes = [(1000, 784)] + ([] if quick or DEV.type != "cuda" else [(60000, 794)])
    for n, d in sizes:
        g = torch.Generator(device=DEV).manual_seed(0)
        x = torch.randn(n, d, device=DEV, generator=g).requires_grad_()
        y = torch.randn(n, d, device=DEV, generator=g) + 0.5
        u = torch.randn(d, 1000, device=DEV, generator=g)
        u = u / u.norm(dim=0, keepdim=True)

        def floor(a, b, w):  # the same sort dpgen uses (numpy's on a CPU, torch.sort on a GPU)
            return ((sort_columns(a @ w) - sort_columns(b @ w)) ** 2).mean()

        t = timed({"dpgen": fb(lambda a, b, w: sliced_wasserstein(a, b, projections=w), x, y, u),
                   "floor (matmul + sort)": fb(floor, x, y, u),
                   "matmul + torch.sort": fb(lambda a, b, w: ((torch.sort(a @ w, dim=0).values
                                                               - torch.sort(b @ w, dim=0).values) ** 2).mean(), x, y, u),
                   "POT": fb(lambda a, b, w: ot.sliced_wasserstein_distance(a, b, projections=w, p=2) ** 2, x, y, u)},
                  repeats)
        out.append({"what": f"DP-SWD loss fwd+bwd, n = {n}, d = {d}, k = 1000", "unit": "ms",
                    **{k: 1e3 * v for k, v in t.items()}})
    return out


def bench_sinkhorn(repeats, quick):
    from dpgen.losses.sinkhorn import conditional_rows, row_box_diameter, sinkhorn_divergence

    out = []
    sizes = [50, 500] + ([] if quick else [2000]) + ([5000] if DEV.type == "cuda" and not quick else [])
    diameter = row_box_diameter(784, 0.0, 1.0, 10, 15.0)
    for n in sizes:
        g = torch.Generator(device=DEV).manual_seed(n)
        lab = torch.randint(0, 10, (n,), device=DEV, generator=g)
        x = conditional_rows(torch.rand(n, 784, device=DEV, generator=g), lab, 10, 15.0).requires_grad_()
        y = conditional_rows(torch.rand(n, 784, device=DEV, generator=g) ** 2, lab.flip(0), 10, 15.0)
        reps = repeats if n <= 500 or DEV.type == "cuda" else max(2, repeats // 2)
        t = timed({"dpgen static": fb(lambda a, b: sinkhorn_divergence(a, b, 0.05, backend="static",
                                                                       diameter=diameter), x, y),
                   "geomloss tensorized": fb(lambda a, b: sinkhorn_divergence(a, b, 0.05, backend="tensorized",
                                                                              diameter=diameter), x, y)}, reps)
        out.append({"what": f"Sinkhorn divergence fwd+bwd, n = {n}, d = 794, eps 0.05 (same schedule)", "unit": "ms",
                    **{k: 1e3 * v for k, v in t.items()}})
    return out


def bench_frame(repeats):
    from dpgen.privacy.projection import orthogonal_directions

    g = torch.Generator(device=DEV).manual_seed(0)

    def qr_way():  # the previous implementation: float64 normals, Householder QR, signs fixed
        m = torch.randn(7840, 1000, generator=g, dtype=torch.float64, device=DEV)
        q, r = torch.linalg.qr(m)
        return (q * torch.sign(torch.diagonal(r))).float()

    t = timed({"dpgen (reflectors drawn directly)": lambda: orthogonal_directions(7840, 1000, generator=g,
                                                                                   device=DEV),
               "QR of a Gaussian matrix": qr_way}, max(2, repeats // 2))
    return [{"what": "bound=frame directions, d = 7840, k = 1000", "unit": "ms", **{k: 1e3 * v for k, v in t.items()}}]


def bench_dpswd_mnist(repeats, steps):
    """dpgen's DP-SWD at MNIST size: rows pixels (outer) one-hot label (d = 7,840), k = 1,000, batch 100,
    8 noisy copies of each generated row. The loss fwd+bwd with structured frames (dpgen's default)
    and Haar frames, beside the floor: the same loss with a fixed dense direction matrix (the direction
    draw free). Then whole training steps (generator, loss, accountant) with each."""
    import tempfile

    from dpgen.config import compose_config
    from dpgen.methods.dpswd import DPSWD
    from dpgen.tasks import run as run_task

    def method(kind):
        cfg = compose_config(["method=dpswd", "dataset=mnist", f"method.directions={kind}",
                              "method.noise_multiplier=1.0"])
        m = DPSWD(cfg, num_classes=10, data_dim=784, n_private=60000, steps=100, batch_size=100,
                  image_shape=(1, 28, 28))
        m.rng = torch.Generator(device=DEV).manual_seed(0)
        return m

    g = torch.Generator(device=DEV).manual_seed(0)
    real = torch.rand(100, 1, 28, 28, device=DEV, generator=g)
    fake = torch.rand(100, 1, 28, 28, device=DEV, generator=g).requires_grad_()
    y = torch.randint(0, 10, (100,), device=DEV, generator=g)
    ms = {k: method(k) for k in ("structured", "haar")}
    fixed = torch.randn(7840, 1000, device=DEV, generator=g)
    fixed = fixed / fixed.norm(dim=0, keepdim=True)
    floor_m = method("haar")
    floor_m.frame = False  # i.i.d. directions path, with the directions handed in below

    def floor_loss(a):
        from dpgen.losses.sliced import sliced_wasserstein
        return sliced_wasserstein(floor_m.rows(real, y).detach(), floor_m.rows(a, y), projections=fixed,
                                  sigma=floor_m.sigma, generator=floor_m.rng, y_copies=8)

    t = timed({"structured frame (dpgen)": fb(lambda a: ms["structured"].loss(a, y, real, y), fake),
               "Haar frame": fb(lambda a: ms["haar"].loss(a, y, real, y), fake),
               "floor (fixed dense directions)": fb(floor_loss, fake)}, max(2, repeats // 2))
    rows = [{"what": "DP-SWD loss fwd+bwd at MNIST size: d = 7840 (pixels x one-hot), k = 1000, B = 100, "
                     "8 copies", "unit": "ms", **{k: 1e3 * v for k, v in t.items()}}]
    row = {"what": "DP-SWD training on MNIST-size data (dpgen's default method, B = 100, k = 1000, d = 7840)",
           "unit": "s/step"}
    with tempfile.TemporaryDirectory() as tmp:
        root = _mnist_like_root(Path(tmp))
        for kind in ("structured", "haar"):
            cfg = compose_config(["method=dpswd", "dataset=mnist", f"dataset.data_root={root}", "dataset.n_train=8000",
                                  "trainer.epochs=null",
                                  f"trainer.steps={steps}", "trainer.progress=false", "task.eval_models=[]",
                                  f"trainer.device={DEV.type}", f"method.directions={kind}",
                                  f"trainer.checkpoint_every={10 * steps}", f"trainer.log_every={steps}"])
            m = run_task(cfg, Path(tmp) / f"run_{kind}")
            row[kind] = 1.0 / m["steps_per_second"]
    row["goal"] = 0.3
    rows.append(row)
    return rows


def _epoch_of(model, x, y, opt=None, autograd=False):
    """One training epoch (batch 128, Adam) of ``model`` on (x, y), as a no-argument callable: dpgen's
    optimizer (``classifier_adam``: fused Adam) unless ``opt`` is given, and for an ``MLP`` dpgen's step
    (``MLPStep``: the backward in closed form) unless ``autograd``."""
    import torch.nn.functional as F

    from dpgen.eval.downstream import MLP, MLPStep, classifier_adam

    opt = classifier_adam(model) if opt is None else opt
    step = MLPStep(model, opt) if type(model) is MLP and not autograd else None

    def epoch():
        model.train()
        for i in range(0, len(x), 128):
            if step is not None:
                step(x[i:i + 128], y[i:i + 128])
                continue
            loss = F.cross_entropy(model(x[i:i + 128]), y[i:i + 128])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return epoch


def _mlp_products_seconds(n, repeats, batch=128, d=784, hidden=100, k=10):
    """Seconds of the matrix products of one MLP training epoch (``n`` samples, batches of ``batch``), timed
    alone at the step's own shapes: forward X W1 and H W2, backward G^T H, G W2^T and D^T X. Products this
    small (128 rows) run well below the square sgemm rate, more so with several threads: this is the floor
    the MLP's epoch can reach without changing the protocol's batch."""
    x, h, g = (torch.rand(batch, c, device=DEV) for c in (d, hidden, k))
    w1, w2 = torch.rand(d, hidden, device=DEV), torch.rand(hidden, k, device=DEV)

    def fifty():
        for _ in range(50):
            x @ w1, h @ w2, g.t() @ h, g @ w2.t(), h.t() @ x
    return timed({"p": fifty}, repeats)["p"] / 50 * -(-n // batch)


def bench_eval(repeats, quick):
    """Downstream evaluation on MNIST-size synthetic data (the papers' protocol: 60,000 samples, 10 % held
    out): one training epoch of the MLP and of the CNN (batch 128, Adam) and the L-BFGS LogReg fit, each beside
    its FLOP floor = training FLOPs / this CPU's (or GPU's) sgemm rate measured in the same process."""
    from dpgen.eval.downstream import CNN, MLP, train_flops_per_sample

    n = 6000 if quick else 54000
    g = torch.Generator().manual_seed(0)
    means = torch.rand(10, 1, 28, 28, generator=g) ** 3
    y = torch.randint(0, 10, (n,), generator=g)
    x = (means[y] + 0.3 * torch.randn(n, 1, 28, 28, generator=g)).clamp(0, 1)
    a = torch.randn(2048, 2048, device=DEV)
    t = timed({"sgemm": lambda: a @ a}, 5)["sgemm"]
    rate = 2 * 2048 ** 3 / t
    rows = []
    xd, yd = x.to(DEV), y.to(DEV)

    def before_cnn():  # the CNN before issue 25: torch's nn.Dropout (bernoulli_ masks), contiguous layout
        nn = torch.nn
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.5),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.5),
                             nn.Flatten(), nn.Linear(3136, 10))

    def relu_first_cnn():  # dpgen's CNN with each ReLU before its max-pool, as it was until 2026-11-27
        m = CNN((1, 28, 28), 10)
        f = m.features
        f[1], f[2], f[5], f[6] = torch.nn.ReLU(inplace=True), torch.nn.MaxPool2d(2), torch.nn.ReLU(inplace=True), \
            torch.nn.MaxPool2d(2)
        return m

    def epoch_of(model, opt=None, autograd=False):
        return _epoch_of(model, xd, yd, opt, autograd)

    for name in ("mlp", "cnn"):
        torch.manual_seed(0)
        fns = {"dpgen": epoch_of((MLP(784, 10) if name == "mlp" else CNN((1, 28, 28), 10)).to(DEV))}
        if name == "mlp":  # the same MLP and fused Adam with autograd's backward, dpgen's step before MLPStep
            fns["autograd step (before)"] = epoch_of(MLP(784, 10).to(DEV), autograd=True)
        if name == "cnn":
            fns["ReLU before max-pool (before)"] = epoch_of(relu_first_cnn().to(DEV))
            fns["before issue 25"] = epoch_of(before_cnn().to(DEV))
        t = timed(fns, max(1, repeats // 2 if name == "cnn" else repeats))
        floor = train_flops_per_sample(name, (1, 28, 28)) * n / rate
        row = {"what": f"{name.upper()} one training epoch on {n:,} 28 x 28 samples, batch 128 (30 epochs "
                       f"max in the protocol)", "unit": "s", **t, "floor (FLOPs / sgemm rate)": floor,
               "x floor": t["dpgen"] / floor, "sgemm GFLOP/s": rate / 1e9}
        if name == "mlp":  # the peer: the step's five products at their own shapes, at this BLAS's speed
            row["its products at BLAS speed"] = _mlp_products_seconds(n, repeats)
            row["x products"] = t["dpgen"] / row["its products at BLAS speed"]
        rows.append(row)
    rows += _bench_logreg(x.reshape(n, -1), y, rate, repeats)
    return rows


def _bench_logreg(x, y, rate, repeats):
    """LogReg of the protocol: one loss-and-gradient evaluation (the work of an L-BFGS iteration) of dpgen's fused
    objective beside scikit-learn's (``LinearModelLoss.loss_gradient``, what its fit calls, on the float32 input as
    its fit gets it), the two products' FLOP floor and the two products at this BLAS's speed; then both whole
    fits (``task.logreg_solver=fused`` / ``sklearn``) with their iterations, each under the BLAS thread limit
    the evaluation sets."""
    import numpy as np
    from sklearn._loss.loss import HalfMultinomialLoss
    from sklearn.linear_model._linear_loss import LinearModelLoss
    from threadpoolctl import threadpool_limits

    from dpgen.eval.downstream import fit_logreg, train_flops_per_sample
    from dpgen.eval.logreg import LogRegObjective

    n, d = x.shape
    xs, yn = x.numpy(), y.numpy()
    w = np.random.default_rng(0).normal(size=(d + 1) * 10) * 0.01
    fused = LogRegObjective(x.to(DEV), yn, 10, l2=1.0 / n)  # the path a fit takes here (packed on a CPU)
    peers = {}
    if fused.path == "packed":  # the blocked paths, its peers: X W^T by oneDNN's / the BLAS's product
        peers = {f"fused over blocks, X W^T by {name}": LogRegObjective(x, yn, 10, l2=1.0 / n, path=path)
                 for name, path in (("oneDNN", "onednn"), ("the BLAS", "blas"))}
    sk = LinearModelLoss(base_loss=HalfMultinomialLoss(n_classes=10), fit_intercept=True)
    y32 = yn.astype(np.float32)
    threads = torch.get_num_threads()
    wt, gmat = np.ones((d, 10), np.float32), np.ones((n, 10), np.float32)
    t = {}
    # each under the BLAS thread limit its fit runs with (fit_logreg): 1 beside torch's products, the torch
    # thread count for scikit-learn's products; timed apart, since spinning BLAS threads left by one slow the next
    with threadpool_limits(limits=1, user_api="blas"):
        t.update(timed({"dpgen (fused float32 products)": lambda: fused(w),
                        **{name: (lambda o=o: o(w)) for name, o in peers.items()}}, repeats))
    with threadpool_limits(limits=threads, user_api="blas"):
        t.update(timed({"scikit-learn's loss_gradient": lambda: sk.loss_gradient(w, xs, y32, None, 1.0 / n, threads),
                        "products": lambda: (xs @ wt, xs.T @ gmat)}, repeats))
    floor = train_flops_per_sample("logreg", (1, 28, 28)) * n / rate
    rows = [{"what": f"LogReg loss + gradient, one evaluation on {n:,} x {d} (an L-BFGS iteration's work)",
             "unit": "s", "dpgen": t["dpgen (fused float32 products)"],
             "path": fused.path, **{name: t[name] for name in peers},
             "peer: scikit-learn's loss_gradient": t["scikit-learn's loss_gradient"],
             "floor (FLOPs / sgemm rate)": floor, "x floor": t["dpgen (fused float32 products)"] / floor,
             "peer x floor": t["scikit-learn's loss_gradient"] / floor,
             "its products at BLAS speed": t["products"],
             "x products": t["dpgen (fused float32 products)"] / t["products"]}]
    fit_logreg(xs[:1000], yn[:1000], solver="sklearn")  # imports scikit-learn and scipy outside the timing
    fits = {}
    for solver in ("fused", "sklearn"):
        t0 = time.perf_counter()
        clf, _ = fit_logreg(x, yn, solver=solver, device=DEV)
        sec = time.perf_counter() - t0
        fits[solver] = (sec, int(np.max(clf.n_iter_)))
    (sf, itf), (ss, its) = fits["fused"], fits["sklearn"]
    # the objective's set-up, once per fit (the packed path packs X twice): on this easy data, a few iterations
    # long, it is a large part of the fit; a real set's fit runs 200-650 iterations (docs/SPEED.md)
    with threadpool_limits(limits=1, user_api="blas"):
        setup = timed({"setup": lambda: LogRegObjective(x.to(DEV), yn, 10, l2=1.0 / n)}, 3)["setup"]
    rows.append({"what": f"LogReg fit on {n:,} samples (L-BFGS to scikit-learn's tolerance): fused {itf} / "
                         f"scikit-learn {its} iterations", "unit": "s", "dpgen": sf, "peer: scikit-learn's fit": ss,
                 "per iteration": sf / max(itf, 1), "peer per iteration": ss / max(its, 1),
                 "floor (FLOPs / sgemm rate)": floor * itf, "x floor": sf / (floor * itf),
                 "set-up (packing X, once per fit)": setup,
                 "x floor without the set-up": (sf - setup) / (floor * itf)})
    return rows


def _mnist_like_root(tmp: Path, n: int = 8000) -> Path:
    import numpy as np

    from dpgen.data.images import write_idx

    raw = tmp / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, k in (("train", n), ("t10k", 100)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (k, 28, 28), dtype=np.uint8))
        write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", (np.arange(k) % 10).astype(np.uint8))
    return tmp / "data"


def _dcgan_step_flops(batch: int = 50) -> float:
    """FLOPs of the paper recipe's generator (DCGAN, 28 x 28) forward + backward at ``batch``: each transposed
    convolution's 2 B Cin Hin Win Cout k^2 multiply-adds counted three times (forward, input gradient, weight
    gradient); batch norm, ReLU, tanh and the Sinkhorn loss at batch 50 are left out (small against these)."""
    from dpgen.models import make_generator

    gen = make_generator("dcgan", (1, 28, 28), 10, 12)
    total = []

    def hook(m, inp, out):
        x = inp[0]
        total.append(2 * x.shape[0] * m.in_channels * x.shape[2] * x.shape[3] * m.out_channels
                     * m.kernel_size[0] * m.kernel_size[1])
    for m in gen.modules():
        if isinstance(m, torch.nn.ConvTranspose2d):
            m.register_forward_hook(hook)
    with torch.no_grad():
        gen(*gen.draw(batch))
    return 3.0 * sum(total)


def bench_dpsinkhorn(steps):
    import tempfile

    from dpgen.config import compose_config
    from dpgen.tasks import run as run_task

    row = {"what": "DP-Sinkhorn training, batch 50 (Poisson), DCGAN 28 x 28, clip + noise + accountant",
           "unit": "steps/s"}
    # the peer on a CPU: dpgen's static loop with the generator's weights contiguous, its layout until 2026-11-27
    # (model.memory_format=auto makes them channels-last there; on a GPU auto is contiguous already)
    kinds = [("tensorized (geomloss)", "tensorized", "auto", []), ("static (dpgen)", "static", "auto", []),
             # every Poisson batch padded to 151 rows with a mask: the shapes the CUDA graph needs, its cost alone
             ("static, padded batch (trainer.static_shapes)", "static", "auto", ["trainer.static_shapes=true"])]
    if DEV.type == "cuda":  # the whole step captured once and replayed (dpgen/train/cuda_graph.py)
        kinds.append(("static + CUDA graph (trainer.cuda_graph)", "static", "auto",
                      ["trainer.static_shapes=true", "trainer.cuda_graph=true"]))
    if DEV.type == "cpu":
        kinds.append(("static, contiguous layout (before)", "static", "contiguous", []))
    with tempfile.TemporaryDirectory() as tmp:
        root = _mnist_like_root(Path(tmp))
        for i, (name, backend, layout, extra) in enumerate(kinds * 2):  # twice each: the first run warms up
            cfg = compose_config(["experiment=dpsinkhorn_mnist", f"dataset.data_root={root}", "dataset.n_train=8000",
                                  "trainer.epochs=null",
                                  f"trainer.steps={steps}", "trainer.progress=false", "task.eval_models=[]",
                                  "task.fid=false", f"trainer.device={DEV.type}", f"method.backend={backend}",
                                  f"model.memory_format={layout}",
                                  f"trainer.checkpoint_every={10 * steps}", f"trainer.log_every={steps}", *extra])
            m = run_task(cfg, Path(tmp) / f"run_{i % len(kinds)}")
            row[name] = m["steps_per_second"]
    # the floor: the generator's forward + backward FLOPs at this device's sgemm rate, measured here
    a = torch.randn(2048, 2048, device=DEV)
    rate = 2 * 2048 ** 3 / timed({"sgemm": lambda: a @ a}, 5)["sgemm"]
    row["floor (generator FLOPs / sgemm rate)"] = rate / _dcgan_step_flops()
    row["floor / dpgen"] = row["floor (generator FLOPs / sgemm rate)"] / row["static (dpgen)"]
    row["sgemm GFLOP/s"] = rate / 1e9
    row["note"] = ("the training loop alone (the run's loop_seconds), second run of each; the floor counts the "
                   "DCGAN's transposed convolutions only, forward + both gradients")
    return [row]


def bench_param_per_sample(repeats):
    from dpgen.config import compose_config
    from dpgen.methods.registry import DataInfo, build
    from dpgen.models.dcgan import DCGANGenerator

    cfg = compose_config(["method=dpsinkhorn_param", "dataset=mnist10k", "trainer.batch_size=50",
                          "method.noise_multiplier=1.1", "trainer.steps=100", "trainer.epochs=null"])
    gen = DCGANGenerator(code_dim=12, num_classes=10, out_shape=(1, 28, 28)).to(DEV)
    m = build(cfg, DataInfo(8000, (1, 28, 28), 10), 100, "generation")
    m.bind_generator(gen)
    real = torch.rand(50, 1, 28, 28, device=DEV)
    y = torch.randint(0, 10, (50,), device=DEV)
    params = list(gen.parameters())

    def grads(batched):
        def run():
            fake, yf = gen.sample(50, device=DEV)
            m.record_grads(fake, yf, real, y, batched=batched)
        return run

    def floor():  # what any exact per-record method pays at least: 50 backward passes through the generator
        fake, _ = gen.sample(50, device=DEV)
        cot = torch.randn_like(fake)
        for _ in range(50):
            torch.autograd.grad(fake, params, grad_outputs=cot, retain_graph=True)

    t = timed({"per-record loop": grads(False), "batched (vmap)": grads(True), "floor (50 backward)": floor},
              max(2, repeats // 2))
    return [{"what": f"dpsinkhorn_param per-sample clipping, batch 50, DCGAN ({torch.get_num_threads()} threads)",
             "unit": "s/step", **t}]


def bench_per_record_image_gradient(repeats):
    """DP-Sinkhorn's per-record image gradient (clip_mode=per_sample) at MNIST's DCT recipe (batch 50, 10 x 10
    coefficients): the closed form for the DCT decode beside the autograd path it replaces, the paper's batch
    clip (its peer: one backward through the Sinkhorn divergence) and the floor (the cost matrix alone); at the
    headline preset's batch of 500, the release beside the one that formed the records' gradients, and
    method.repel's push, which a step adds to the release."""
    from dpgen.config import compose_config
    from dpgen.losses.sinkhorn import record_terms
    from dpgen.tasks.generation import GenerationBatch
    from dpgen.methods.registry import DataInfo, build
    from dpgen.models.generators import DCTGenerator
    from dpgen.privacy.clipping import clipped_sum

    base = ["method=dpsinkhorn", "dataset=mnist10k", "trainer.batch_size=50", "trainer.steps=100",
            "trainer.epochs=null"]
    per = build(compose_config([*base, "method.clip_mode=per_sample"]), DataInfo(8000, (1, 28, 28), 10), 100,
                "generation")
    batch_clip = build(compose_config([*base, "method.clip_mode=batch"]), DataInfo(8000, (1, 28, 28), 10), 100,
                       "generation")
    gen = DCTGenerator(code_dim=12, num_classes=10, out_shape=(1, 28, 28), dct_size=10).to(DEV)

    def records(n):
        real, y = torch.rand(n, 1, 28, 28, device=DEV), torch.randint(0, 10, (n,), device=DEV)
        return real, y, GenerationBatch(real, y, n, DEV)

    real, y, batch = records(50)
    # the headline preset's batch (dpsinkhorn_best_*: Poisson batches of 500 against 500 generated)
    real5, y5, batch5 = records(500)

    def release(b):  # the closed form, its clipped gradients summed without forming them (clipped_pair_sum)
        def run():
            code, yf = gen.sample_code(b.size, device=DEV)
            per.release_per_record(gen, code.detach(), yf, b)
        return run

    def floor_of(r, yr):  # the cost matrix alone
        def run():
            code, yf = gen.sample_code(r.shape[0], device=DEV)
            with torch.no_grad():
                record_terms(per.rows(gen.decode(code), yf), per.rows(r, yr), per.epsilon_reg)
        return run

    def autograd_path():
        code, yf = gen.sample_code(50, device=DEV)
        c = code.detach().requires_grad_(True)
        for _ in per.record_gradients(c, gen.decode(c), yf, real, y):
            pass

    def batch_step():
        gen.zero_grad(set_to_none=True)
        batch_clip.step({"generator": gen}, batch)

    def formed_500():  # the release until 2026-12-06: 500 x 500 x 100 gradients formed, each clipped
        code, yf = gen.sample_code(500, device=DEV)
        total = torch.zeros(code.shape, dtype=torch.float64, device=DEV)
        for g in per.record_code_gradients(gen, code.detach(), yf, real5, y5, chunk=per.record_chunk(500, code)):
            total = total + clipped_sum([g], per.mechanism.clip)[0][0]

    def repel_500():  # method.repel's push on the generated batch (post-processing added after the release)
        code, yf = gen.sample_code(500, device=DEV)
        per.repulsion(gen, code.detach(), yf)

    per.repel = 2.0
    t = timed({"closed form (dct)": release(batch), "autograd (any generator)": autograd_path,
               "peer: batch clip step": batch_step, "floor: the cost matrix": floor_of(real, y),
               "batch 500: closed form summed unformed (the release)": release(batch5),
               "batch 500: peer, closed form formed and clipped": formed_500,
               "batch 500: floor, the cost matrix": floor_of(real5, y5),
               "batch 500: method.repel's push (added to the release)": repel_500}, max(5, repeats * 4))
    return [{"what": f"DP-Sinkhorn per-record image gradient, batch 50 (and 500: the headline preset's), 10 x 10 "
                     f"DCT coefficients of 28 x 28 ({torch.get_num_threads()} threads)", "unit": "s/step", **t}]


def bench_secure_noise(repeats):
    """privacy.secure_rng's cost: the same draws from a torch.Generator (torch.randn) and from the OS CSPRNG
    (dpgen.utils.noise.SecureGenerator: os.urandom, 53-bit uniforms, four Box-Muller normals per output, on a GPU
    a host-to-device copy), alone (1e6 float32 Gaussians) and inside DP-Sinkhorn's per-record release (the
    closed form of part per_record_image_gradient, whose noise covers the released gradient's 50 x 100 DCT
    coefficients)."""
    from dpgen.config import compose_config
    from dpgen.methods.registry import DataInfo, build
    from dpgen.tasks.generation import GenerationBatch
    from dpgen.models.generators import DCTGenerator
    from dpgen.utils.noise import SecureGenerator, gaussian

    gens = {"torch.randn (torch.Generator)": torch.Generator(device=DEV).manual_seed(0),
            "secure (OS CSPRNG)": SecureGenerator(DEV)}
    draw = {k: (lambda g=g: gaussian(1_000_000, generator=g, device=DEV)) for k, g in gens.items()}
    t1 = timed(draw, repeats)
    t1["secure / torch"] = t1["secure (OS CSPRNG)"] / t1["torch.randn (torch.Generator)"]
    cfg = compose_config(["method=dpsinkhorn", "dataset=mnist10k", "trainer.batch_size=50", "trainer.steps=100",
                          "trainer.epochs=null", "method.clip_mode=per_sample"])
    per = build(cfg, DataInfo(8000, (1, 28, 28), 10), 100, "generation")
    gen = DCTGenerator(code_dim=12, num_classes=10, out_shape=(1, 28, 28), dct_size=10).to(DEV)
    batch = GenerationBatch(torch.rand(50, 1, 28, 28, device=DEV), torch.randint(0, 10, (50,), device=DEV), 50, DEV)

    def release(g):
        def run():
            per.rng = g
            code, yf = gen.sample_code(50, device=DEV)
            per.release_per_record(gen, code.detach(), yf, batch)
        return run

    t2 = timed({k: release(g) for k, g in gens.items()}, max(5, repeats * 4))
    t2["secure / torch"] = t2["secure (OS CSPRNG)"] / t2["torch.randn (torch.Generator)"]
    threads = torch.get_num_threads()
    return [{"what": f"mechanism noise, 1e6 N(0, 1) float32 ({threads} threads)", "unit": "s", **t1},
            {"what": f"DP-Sinkhorn per-record release, batch 50, 10 x 10 DCT of 28 x 28, its noise from each source "
                     f"({threads} threads)", "unit": "s/step", **t2}]


def bench_dpsgd(repeats, quick):
    """DP-SGD's private gradient on the WDP MNIST CNN (574k parameters): ghost clipping (default) beside the
    torch.func path and the floor, one non-private forward + backward of the same batch."""
    import torch.nn.functional as F

    from dpgen.methods.dpsgd import DPSGD
    from dpgen.models.classifiers import make_classifier

    b = 256 if quick else 1024  # WDP Table 2: batch 1024
    model = make_classifier((1, 28, 28), 10).to(DEV)
    x = torch.rand(b, 1, 28, 28, device=DEV)
    y = torch.randint(0, 10, (b,), device=DEV)
    noise = torch.Generator(device=DEV).manual_seed(0)
    methods = {k: DPSGD(clip=1.0, noise_multiplier=1.0, sample_rate=b / 60000, expected_batch_size=b,
                        accountants=["moments"], per_sample=k, chunk_size=32) for k in ("ghost", "func")}

    def private(kind):
        return lambda: methods[kind].private_gradient(model, x, y, noise_gen=noise)

    def floor():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()

    t = timed({"ghost (default)": private("ghost"), "func (torch.func)": private("func"),
               "floor (non-private fwd+bwd)": floor}, max(2, repeats // 2))
    t["ghost / floor"] = t["ghost (default)"] / t["floor (non-private fwd+bwd)"]
    t["WDP Table 2 private run (1,465 steps), min"] = 1465 * t["ghost (default)"] / 60
    return [{"what": f"DP-SGD private gradient, WDP MNIST CNN, batch {b} ({torch.get_num_threads()} threads)",
             "unit": "s/step", **t}]


def bench_fid(repeats, quick):
    """FID's feature pass (pytorch-fid's Inception v3 at 299 x 299, the bottleneck of every FID on a CPU): one batch
    of 50 MNIST-size images as dpgen runs it (channels-last, inference mode, float32: TF32 off on a GPU) beside the
    contiguous layout it used before issue 53, on a GPU the same pass with TF32 allowed (torch's default, not used),
    and the floor = the network's FLOPs (torch.utils.flop_counter) / this device's sgemm rate.
    The real FID weights when installed, else the same network with random weights (the same FLOPs)."""
    from torch.utils.flop_counter import FlopCounterMode

    from dpgen.eval.fid import FIDUnavailable, InceptionFeatures, full_float32

    try:
        ext, weights = InceptionFeatures(device=DEV, batch_size=50), "FID weights"
    except FIDUnavailable:
        ext, weights = InceptionFeatures("random", device=DEV, batch_size=50), "random weights (same FLOPs)"
    x = torch.rand(50, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as fc:
        with torch.inference_mode():
            ext.model(x[:1].repeat(1, 3, 1, 1).to(DEV))
    flops = fc.get_total_flops()
    contiguous = InceptionFeatures("random", device=DEV, batch_size=50)
    contiguous.model = contiguous.model.to(memory_format=torch.contiguous_format)

    def before():  # the feature pass before issue 53: contiguous tensors, no_grad (float32, as dpgen's)
        with torch.no_grad(), full_float32():
            contiguous.model(x.repeat(1, 3, 1, 1).to(DEV))

    def tf32():  # torch's default on a GPU: TF32 convolutions, inputs rounded to ~1e-3 (not what dpgen runs)
        with torch.inference_mode():
            ext.model(x.repeat(1, 3, 1, 1).to(DEV, memory_format=torch.channels_last))

    a = torch.randn(2048, 2048, device=DEV)
    peers = {"dpgen": lambda: ext(x), "contiguous, no_grad (before)": before, "sgemm": lambda: a @ a}
    if DEV.type == "cuda":
        peers["TF32 allowed (not used)"] = tf32
    t = timed(peers, max(2, repeats // 2 if not quick else 1))
    rate = 2 * 2048 ** 3 / t.pop("sgemm")
    floor = 50 * flops / rate
    return [{"what": f"FID Inception feature pass, 50 images 28 x 28 -> 299 x 299 ({weights}; "
                     f"{flops / 1e9:.2f} GFLOP an image)", "unit": "s", **t, "floor (FLOPs / sgemm rate)": floor,
             "x floor": t["dpgen"] / floor, "images/s (dpgen)": 50 / t["dpgen"], "sgemm GFLOP/s": rate / 1e9}]


def bench_da(steps):
    from bench_da import da_steps_per_second  # scripts/bench_da.py: the one DA step loop of the benchmarks

    row = {"what": "DA U-M training steps (preset networks, B = 128, random 28 x 28 images)", "unit": "steps/s"}
    for name in ("dpswd", "dpdann"):
        row[name] = da_steps_per_second(name, steps, DEV)
    row["U-M paper length (7,900 steps), DP-SWD, min"] = 7900 / row["dpswd"] / 60
    return [row]


def _allocator_child(what: str, steps: int) -> None:
    """One measurement in this (child) process, printed as JSON: the malloc settings are per process."""
    import resource
    import tempfile

    from dpgen.utils.allocator import keep_freed_memory

    kept = keep_freed_memory()
    if what == "nonpriv_step":
        from dpgen.config import compose_config
        from dpgen.tasks import run as run_task

        with tempfile.TemporaryDirectory() as tmp:
            root = _mnist_like_root(Path(tmp))
            cfg = compose_config(["experiment=dpsinkhorn_nonpriv_mnist", f"dataset.data_root={root}",
                                  "dataset.n_train=8000", "trainer.epochs=null", f"trainer.steps={steps}",
                                  "trainer.progress=false", "task.eval_models=[]", "task.fid=false",
                                  "trainer.device=cpu", f"trainer.checkpoint_every={10 * steps}",
                                  f"trainer.log_every={steps}"])
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            m = run_task(cfg, Path(tmp) / "run")
            r1 = resource.getrusage(resource.RUSAGE_SELF)
        value = 1.0 / m["steps_per_second"]
        threads = m.get("threads", torch.get_num_threads())
    else:  # cnn_epoch
        from dpgen.eval.downstream import CNN

        n = 54000
        g = torch.Generator().manual_seed(0)
        x, y = torch.rand(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)
        epoch = _epoch_of(CNN((1, 28, 28), 10), x, y)
        from dpgen.utils.threads import ThreadShare

        with ThreadShare("auto"):  # its share of the cores, as an evaluation in a run gets
            epoch()  # warm-up
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            for _ in range(steps):
                epoch()
            value = (time.perf_counter() - t0) / steps
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            threads = torch.get_num_threads()
    print(json.dumps({"kept_mb": kept, "value": value, "sys": (r1.ru_stime - r0.ru_stime) / steps,
                      "threads": threads}))


def bench_allocator(steps):
    """The two CPU hot paths most bound by page faults, each in a fresh child process with glibc's malloc as
    it comes (DPGEN_MALLOC_KEEP_MB=0) and with dpgen's setting (the default); per step / epoch, plus the
    kernel CPU seconds that go to faulting freed buffers back in."""
    import subprocess

    rows = []
    for what, label, unit, n in (("nonpriv_step", "Non-private Sinkhorn training step (Table 1 preset: DCGAN, batch "
                                  "500, eps 0.05), CPU", "s/step", max(5, steps // 3)),
                                 ("cnn_epoch", "CNN evaluation epoch on 54,000 28 x 28 samples, batch 128, CPU",
                                  "s", 1)):
        row = {"what": label, "unit": unit}
        for name, keep in (("glibc default", "0"), ("dpgen (kept freed memory)", "")):
            env = {**os.environ, "DPGEN_MALLOC_KEEP_MB": keep} if keep else {
                k: v for k, v in os.environ.items() if k != "DPGEN_MALLOC_KEEP_MB"}
            out = subprocess.run([sys.executable, __file__, "--allocator-child", what, "--child-steps", str(n)],
                                 env=env, capture_output=True, text=True, check=True).stdout
            res = json.loads(out.strip().splitlines()[-1])
            row[name] = res["value"]
            row[f"{name} kernel CPU s"] = res["sys"]
            row[f"{name} threads"] = res["threads"]
        row["speed-up"] = row["glibc default"] / row["dpgen (kept freed memory)"]
        rows.append(row)
    return rows

HEADLINE = (("dpsinkhorn_best", "dpsinkhorn_best_mnist"), ("dpmerf_best", "dpmerf_best_mnist"),
            ("dpkernel", "dpkernel_mnist"), ("dpkernel_proxy", "dpkernel_proxy_mnist"))


def _headline_child(experiment: str, steps: int) -> None:
    """One headline preset's training in this (child) process, printed as JSON: its loop's steps/s at the full
    MNIST size (60,000 random records), the setup before the loop, the process' peak memory (resident on a CPU,
    the CUDA allocator's peak on a GPU) and the matrix-product FLOPs of one step (torch's FlopCounterMode over a
    1-step and a 3-step run, the difference halved)."""
    import resource
    import tempfile

    from torch.utils.flop_counter import FlopCounterMode

    from dpgen.config import compose_config
    from dpgen.tasks import run as run_task

    with tempfile.TemporaryDirectory() as tmp:
        root = _mnist_like_root(Path(tmp), n=60000)

        def cfg_of(n_steps):
            # privacy.accountant=rdp: the run's end composes its epsilon once, and a PLD composition's time depends
            # on the step count (a first one took 0.69 s at 30 steps, 0.42 s at 90: as long as 60 of our preset's
            # steps at 0.0125 s), so it would not cancel in the difference below; RDP's does
            return compose_config([f"experiment={experiment}", f"dataset.data_root={root}", "trainer.epochs=null",
                                   f"trainer.steps={n_steps}", "trainer.progress=false", "task.eval_models=[]",
                                   "task.fid=false", f"trainer.device={DEV.type}", "privacy.accountant=rdp",
                                   f"trainer.checkpoint_every={10 * n_steps}", f"trainer.log_every={n_steps}"])

        preset_steps = int(compose_config([f"experiment={experiment}"]).trainer.steps)
        if DEV.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        m = run_task(cfg_of(steps), Path(tmp) / "timed")
        # the loop's time per step from the difference of a 3n- and an n-step run: the fixed work of a run's end
        # (its last log's epsilon, a PLD composition of seconds, and its checkpoint) cancels, as in a long run
        m3 = run_task(cfg_of(3 * steps), Path(tmp) / "timed3")
        per_step = (m3["loop_seconds"] - m["loop_seconds"]) / (2 * steps)
        if not per_step > 0:  # a too-short pair of runs: their difference is noise; the run's own rate then
            per_step = 1.0 / m["steps_per_second"]
        peak_mb = (torch.cuda.max_memory_allocated() / 2 ** 20 if DEV.type == "cuda"
                   else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        flops = []
        for i, n_steps in enumerate((1, 3)):  # the setup's FLOPs cancel in the difference
            with FlopCounterMode(display=False) as fc:
                run_task(cfg_of(n_steps), Path(tmp) / f"flops_{i}")
            flops.append(fc.get_total_flops())
    print(json.dumps({"steps_per_second": 1.0 / per_step, "run_steps_per_second": m["steps_per_second"],
                      "preset_steps": preset_steps,
                      "setup_seconds": m["train_seconds"] - m["loop_seconds"], "peak_mb": peak_mb,
                      "flops_per_step": (flops[1] - flops[0]) / 2, "threads": m.get("threads", torch.get_num_threads())}))


def bench_headline(steps):
    """The headline generators of issue 86 side by side (each the other's peer), each trained in a fresh child
    process so its peak memory is its own: s/step, the preset's full training time projected from it, peak memory,
    and the floor (one step's matrix-product FLOPs at this device's sgemm rate, measured here)."""
    import subprocess

    a = torch.randn(2048, 2048, device=DEV)
    rate = 2 * 2048 ** 3 / timed({"sgemm": lambda: a @ a}, 5)["sgemm"]
    row = {"what": f"Headline generators' training on MNIST-sized data (60,000 random 28 x 28 records; each preset "
                   f"as shipped, {steps} steps; the full preset's time projected)", "unit": "s/step"}
    for name, experiment in HEADLINE:
        out = subprocess.run([sys.executable, __file__, "--headline-child", experiment, "--child-steps", str(steps)],
                             capture_output=True, text=True, check=True).stdout
        res = json.loads(out.strip().splitlines()[-1])
        row[name] = 1.0 / res["steps_per_second"]
        row[f"{name} n-step run, s/step"] = 1.0 / res["run_steps_per_second"]
        row[f"{name} full preset ({res['preset_steps']} steps), min"] = (
            res["setup_seconds"] + res["preset_steps"] / res["steps_per_second"]) / 60
        row[f"{name} peak memory MiB ({'CUDA allocator' if DEV.type == 'cuda' else 'resident'})"] = res["peak_mb"]
        row[f"{name} floor (step FLOPs / sgemm rate)"] = res["flops_per_step"] / rate
        row[f"{name} threads"] = res["threads"]
    row["sgemm GFLOP/s"] = rate / 1e9
    row["note"] = ("s/step: the loop's time per step from the difference of a 3n- and an n-step run (the fixed work "
                   "at a run's end, its last log's epsilon, under RDP for the timing, and checkpoint, cancels); "
                   "'n-step run' is that run's own steps_per_second, that work included; the projection adds the "
                   "setup before the loop (DP-MERF's one release); the floor counts matrix products and convolutions "
                   "only")
    return [row]


def to_markdown(meta, rows):
    lines = [f"# dpgen speed on {meta['device']}", "",
             f"torch {meta['torch']}, {meta['threads']} CPU threads, load average {meta['load_average']}, "
             f"{meta['date']}. Command: `{meta['command']}`.", "",
             "| what | unit | measurements (same run) |", "|---|---|---|"]
    for r in rows:
        vals = "; ".join(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}" for k, v in r.items()
                         if k not in ("what", "unit"))
        lines.append(f"| {r['what']} | {r['unit']} | {vals} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="drop the largest sizes and shorten the training rows")
    ap.add_argument("--out", default=os.environ.get("DPGEN_OUTPUTS", "outputs") + "/bench")
    ap.add_argument("--only", default="", help="comma list of parts to run (default: all)")
    ap.add_argument("--allocator-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--headline-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-steps", type=int, default=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.allocator_child:
        return _allocator_child(args.allocator_child, args.child_steps)
    if args.headline_child:
        return _headline_child(args.headline_child, args.child_steps)
    from dpgen.utils.allocator import keep_freed_memory

    keep_freed_memory()  # as every dpgen run does: the rows below time what a run gets
    from tqdm import tqdm

    from dpgen.utils.io import atomic_write_text

    steps = 10 if args.quick else (200 if DEV.type == "cuda" else 30)
    parts = [("swd_loss", lambda: bench_swd(args.repeats, args.quick)),
             ("sinkhorn_loss", lambda: bench_sinkhorn(args.repeats, args.quick)),
             ("frame_draw", lambda: bench_frame(args.repeats)),
             ("dpswd_mnist", lambda: bench_dpswd_mnist(args.repeats, steps)),
             ("eval", lambda: bench_eval(args.repeats, args.quick)),
             ("fid", lambda: bench_fid(args.repeats, args.quick)),
             ("dpsinkhorn_steps", lambda: bench_dpsinkhorn(steps)),
             ("param_per_sample", lambda: bench_param_per_sample(args.repeats)),
             ("per_record_image_gradient", lambda: bench_per_record_image_gradient(args.repeats)),
             ("dpsgd", lambda: bench_dpsgd(args.repeats, args.quick)),
             ("secure_noise", lambda: bench_secure_noise(args.repeats)),
             ("da_steps", lambda: bench_da(steps * 2)),
             ("headline_training", lambda: bench_headline(steps))]
    if DEV.type == "cpu":
        parts.append(("allocator", lambda: bench_allocator(steps)))
    if args.only:
        unknown = set(args.only.split(",")) - {n for n, _ in parts}
        if unknown:
            ap.error(f"--only: unknown parts {sorted(unknown)}; choose from {[n for n, _ in parts]}")
        parts = [(n, f) for n, f in parts if n in args.only.split(",")]
        stem_extra = "_" + "_".join(n for n, _ in parts)
    else:
        stem_extra = ""
    rows = []
    for name, fn in tqdm(parts, desc=f"speed on {DEV.type}", unit="part"):
        for r in fn():
            rows.append({"part": name, **r})
            tqdm.write(f"{r['what']} [{r['unit']}]: " + ", ".join(
                f"{k} {v:.4g}" for k, v in r.items() if isinstance(v, float)))
    meta = {"device": torch.cuda.get_device_name() if DEV.type == "cuda" else f"CPU ({os.cpu_count()} cores)",
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "date": time.strftime("%Y-%m-%d %H:%M"),
            "command": "python scripts/bench_speed.py" + (" --quick" if args.quick else "")
            + (f" --only {args.only}" if args.only else "")}
    out = Path(args.out)
    stem = f"speed_{DEV.type}" + ("_quick" if args.quick else "") + stem_extra
    atomic_write_text(out / f"{stem}.json", json.dumps({"meta": meta, "rows": rows}, indent=2))
    atomic_write_text(out / f"{stem}.md", to_markdown(meta, [{k: v for k, v in r.items() if k != "part"}
                                                             for r in rows]))
    print(f"wrote {out / (stem + '.json')} and .md")


if __name__ == "__main__":
    main()
