"""The downstream protocol's logistic regression, fitted as scikit-learn fits it, at its matrix products' speed.

The papers' LogReg is scikit-learn's ``LogisticRegression(solver="lbfgs")`` with its defaults: the multinomial
model ``softmax(x W^T + b)`` over the classes present in the fitted labels, minimising

    f(W, b) = mean_i [logsumexp(x_i W^T + b) - (x_i W^T + b)_{y_i}] + ||W||^2 / (2 C n),    C = 1

(the intercept is not penalised) by scipy's L-BFGS-B from zero, with ``gtol = tol = 1e-4``, ``ftol = 64 eps``,
``maxls = 50`` and ``max_iter`` iterations. :func:`fit_logreg_fused` runs that same scipy call on that same
objective, in scikit-learn's parameter layout; only the evaluation of f and its gradient differs. Both do their
two products (``X W^T`` and ``(P - Y)^T X``, 10 columns each) in float32 on the float32 input. scikit-learn runs
them through numpy's BLAS, which at 10 columns runs at about a quarter of its square-sgemm rate. X does not change
during a fit, so here it is packed once, as the constant weights of oneDNN's inner product (what torch's compiler
lowers a CPU linear layer to), and each product is a 10-row input against it (``path="packed"``, two packed
copies of X beside it: X and X^T); the softmax, the loss and the sums between them run in float64 on the (k, n)
logits, classes along the first axis.
Where that does not run (a GPU, another build, X over ``PACK_MAX_BYTES``), the products are fused over blocks of
rows so that each block is read once per evaluation (``path="onednn"``: X W^T by oneDNN's inner product;
``"blas"``). On 2 idle cores (``make bench``, eval part, 54,000 x 784, 2 threads, 2026-11-27, sgemm 173 GFLOP/s):
16.5 ms an evaluation = 1.68 x the FLOP floor of the two products at the square-sgemm rate (9.8 ms); blocked
28.8 ms (oneDNN) / 31.7 ms (BLAS); scikit-learn's 52.8 ms; the two products alone by the BLAS 41.1 ms. Whole
fits on 54,000 real images, tested on the real 10,000: MNIST 5.9 s against scikit-learn's 24.7 s (2 threads;
8.6 s on one), Fashion-MNIST 13.0 s against 56.3 s. The fitted model is scikit-learn's to the tolerance the solver
stops at: its test predictions agree with scikit-learn's on 99.73 % (MNIST) and 99.62 % (Fashion-MNIST) of the
images; against a fit to tol 1e-7 it agrees on 99.50 % (Fashion-MNIST, 20,000 images), scikit-learn's own fits
on 99.53-99.60 %: at the edge of scikit-learn's spread at that tolerance
(``experiments/runs/2026-11-27_logreg_fused_solver.md``;
``tests/eval/test_logreg.py``: objective, gradient, coefficients and predictions on real digits, every path);
``task.logreg_solver=sklearn`` keeps scikit-learn's own fit.

Two classes take scikit-learn's fit: it uses the binomial model there, another objective.
"""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np
import torch
from scipy import optimize

__all__ = ["FusedLogisticRegression", "LogRegObjective", "PATHS", "fit_logreg_fused"]

#: how an evaluation runs its two products (``LogRegObjective(path=...)``; None picks the first that runs here):
#: ``packed``: oneDNN's inner product over the whole set against X packed once per fit as the product's constant
#: weights (two packed copies of X: X and X^T); ``onednn``: fused over blocks of rows, X W^T by oneDNN's inner
#: product, the second product the BLAS's; ``blas``: fused over blocks, both by the BLAS (a GPU, another build)
PATHS = ("packed", "onednn", "blas")

#: the packed path's limit on X's size: it holds two packed copies of X beside it (1 GiB: 340,000 MNIST-sized rows)
PACK_MAX_BYTES = 1 << 30

#: rows per block: 1,024 x 784 float32 = 3.2 MB, inside this CPU's 32 MB L3 with room for the products' buffers
#: (measured idle on 54,000 x 784, one / two threads, ms an evaluation: 512 rows 51.4 / 33.9, 1,024 rows 47.8 / 29.1,
#: 2,048 rows 48.9 / 27.0, 4,096 rows 50.1 / 29.7)
BLOCK_ROWS = 1024


class LogRegObjective:
    """scikit-learn's L2-penalised multinomial logistic loss and its gradient, for scipy.

    ``x``: (n, d) float tensor (any device; float32 kept as it is); ``codes``: (n,) class indices in
    ``[0, n_classes)``; ``l2``: the penalty's strength, scikit-learn's ``1 / (C n)``. The parameter vector is
    scikit-learn's: the (n_classes, d + 1) matrix ``[W | b]`` ravelled in Fortran order, i.e. read as a
    (d + 1, n_classes) C-ordered array whose last row is the intercept.
    """

    def __init__(self, x: torch.Tensor, codes: np.ndarray, n_classes: int, l2: float,
                 block_rows: int = BLOCK_ROWS, path: Optional[str] = None):
        if x.dim() != 2:
            raise ValueError(f"x must be (n, d), got shape {tuple(x.shape)}")
        self.x = x if x.dtype in (torch.float32, torch.float64) else x.float()
        self.x = self.x.contiguous()
        self.n, self.d = self.x.shape
        self.k = int(n_classes)
        self.l2 = float(l2)
        self.block = max(1, int(block_rows))
        codes = np.asarray(codes, dtype=np.int64)
        if codes.shape != (self.n,):
            raise ValueError(f"codes must have shape ({self.n},), got {codes.shape}")
        codes = torch.from_numpy(codes).to(self.x.device)
        # the labels one-hot in float64, once: the loss's picks and the gradient's subtraction are one op each
        onehot = torch.zeros(self.k, self.n, dtype=torch.float64, device=self.x.device)
        onehot[codes, torch.arange(self.n, device=self.x.device)] = 1.0
        auto = _default_path(self.x)
        path = auto if path is None else path
        if path not in PATHS:
            raise ValueError(f"path={path!r} is invalid: choose one of {', '.join(PATHS)} (or None: the fastest that "
                             f"runs here)")
        if path in ("packed", "onednn") and auto == "blas":
            raise ValueError(f"path={path!r} needs oneDNN's inner product on a CPU with float32 input, which is not "
                             f"what runs here ({self.x.device.type}, {self.x.dtype}): use path='blas' or None")
        if path == "packed" and not _onednn_works()["packed"]:
            raise ValueError("path='packed' needs oneDNN's packed weights, which this torch does not run: use "
                             "path='onednn', 'blas' or None")
        self.path = path
        if path == "packed":
            # X as the inner product's constant weights, packed once for each product: (k, d) @ X^T and (k, n) @ X
            self.packed = (torch.ops.mkldnn._reorder_linear_weight(self.x, self.k),
                           torch.ops.mkldnn._reorder_linear_weight(self.x.t().contiguous(), self.k))
            self.onehot = onehot
            # the softmax's buffers, reused: fresh 4 MB tensors each evaluation fault their pages in again (the softmax
            # took 5.0 ms so, 1.2 ms with these, 54,000 rows)
            self._z = torch.empty(self.k, self.n, dtype=torch.float64)
            self._e = torch.empty(self.k, self.n, dtype=torch.float64)
            self._p = torch.empty(self.k, self.n, dtype=torch.float32)
        else:
            self.onehot = [onehot[:, i:i + self.block].contiguous() for i in range(0, self.n, self.block)]

    def _logits(self, xb: torch.Tensor, w_lo: torch.Tensor) -> torch.Tensor:
        """(k, m) = (xb W^T)^T in float64: oneDNN's inner product on a CPU where it runs (faster than the BLAS's
        product at 10 output columns, ``make bench``), else the BLAS. Classes along the first axis: the softmax
        over them then runs along contiguous columns (7 x faster than along rows of 10 on a CPU)."""
        if self.path == "onednn":
            z = torch.ops.mkldnn._linear_pointwise(xb, w_lo, None, "none", [], "")
            return torch.empty(z.shape[1], z.shape[0], dtype=torch.float64, device=z.device).copy_(z.t())
        return torch.mm(w_lo, xb.t()).double()

    def __call__(self, w: np.ndarray):
        d, k, x = self.d, self.k, self.x
        coef = np.asarray(w, dtype=np.float64).reshape(d + 1, k)  # row j: feature j's weight for each class
        w_kd = torch.from_numpy(np.ascontiguousarray(coef[:d].T)).to(x.device)  # (k, d) float64
        w_lo = w_kd.to(x.dtype)
        b = torch.from_numpy(coef[d].copy()).to(x.device).unsqueeze(1)  # (k, 1) float64
        if self.path == "packed":
            grad_w, grad_b, loss = self._packed(w_lo, b)
        else:
            grad_w, grad_b, loss = self._blocked(w_lo, b)
        n = float(self.n)
        value = float(loss) / n + 0.5 * self.l2 * float((w_kd * w_kd).sum())
        g = np.empty((d + 1, k), dtype=np.float64)
        g[:d] = (grad_w.double() / n + self.l2 * w_kd).t().cpu().numpy()
        g[d] = (grad_b / n).cpu().numpy()
        return value, g.ravel()

    def _packed(self, w_lo: torch.Tensor, b: torch.Tensor):
        """Both products over the whole set by oneDNN's inner product against X packed once (``path="packed"``),
        the softmax between them on the (k, n) logits in float64."""
        px, pxt = self.packed
        z = self._z.copy_(torch.ops.mkldnn._linear_pointwise(w_lo, px, None, "none", [], "")).add_(b)
        z.sub_(z.amax(0))  # log p = z - max - log sum exp(z - max)
        e = torch.exp(z, out=self._e)
        s = e.sum(0)
        loss = s.log().sum() - torch.dot(z.view(-1), self.onehot.view(-1))  # sum_i -log p_i(y_i)
        p = e.div_(s).sub_(self.onehot)  # d loss_i / d z_i = softmax(z_i) - onehot(y_i)
        grad_w = torch.ops.mkldnn._linear_pointwise(self._p.copy_(p), pxt, None, "none", [], "")
        return grad_w, p.sum(1), loss

    def _blocked(self, w_lo: torch.Tensor, b: torch.Tensor):
        """Both products fused over blocks of rows (``path="onednn"`` / ``"blas"``)."""
        x, k, d = self.x, self.k, self.d
        grad_w = torch.zeros(k, d, dtype=x.dtype, device=x.device)
        grad_b = torch.zeros(k, dtype=torch.float64, device=x.device)
        loss = torch.zeros((), dtype=torch.float64, device=x.device)
        for j, i in enumerate(range(0, self.n, self.block)):
            xb = x[i:i + self.block]
            yb = self.onehot[j]  # (k, m)
            z = self._logits(xb, w_lo).add_(b)  # (k, m) logits, float64 from here
            logp = torch.log_softmax(z, 0)
            loss -= torch.dot(logp.view(-1), yb.view(-1))  # sum_i -log p_i(y_i)
            p = logp.exp_().sub_(yb)  # d loss_i / d z_i = softmax(z_i) - onehot(y_i)
            grad_b += p.sum(1)
            grad_w.addmm_(p.to(x.dtype), xb)  # the block is still in cache
        return grad_w, grad_b, loss


def _default_path(x: torch.Tensor) -> str:
    """The fastest evaluation that runs here: ``packed`` on a CPU where oneDNN packs float32 weights and the two
    packed copies of X fit ``PACK_MAX_BYTES`` each, else ``onednn`` where its inner product runs, else ``blas``."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or not torch.backends.mkldnn.is_available():
        return "blas"
    works = _onednn_works()
    if works["packed"] and x.numel() * x.element_size() <= PACK_MAX_BYTES:
        return "packed"
    return "onednn" if works["linear"] else "blas"


@functools.lru_cache(maxsize=None)
def _onednn_works() -> dict:
    """Whether oneDNN's inner product (``torch.ops.mkldnn._linear_pointwise``, what torch's compiler lowers a CPU
    linear layer to) runs here on float32, on plain and on packed weights, and agrees with the BLAS's products;
    probed once per process on small random matrices. Another build or version of torch falls back to the BLAS."""
    g = torch.Generator().manual_seed(0)
    a, w, p = torch.rand(37, 53, generator=g), torch.randn(10, 53, generator=g), torch.randn(10, 37, generator=g)
    lin = torch.ops.mkldnn._linear_pointwise if hasattr(torch.ops, "mkldnn") else None
    works = {}
    for name, run in (("linear", lambda: [(lin(a, w, None, "none", [], ""), a @ w.t())]),
                      ("packed", lambda: [
                          (lin(w, torch.ops.mkldnn._reorder_linear_weight(a, 10), None, "none", [], ""), w @ a.t()),
                          (lin(p, torch.ops.mkldnn._reorder_linear_weight(a.t().contiguous(), 10), None, "none",
                               [], ""), p @ a)])):
        try:
            works[name] = all(bool(torch.allclose(o, r, rtol=1e-4, atol=1e-4)) for o, r in run())
        except (AttributeError, RuntimeError, NotImplementedError, TypeError):
            works[name] = False
    return works


class FusedLogisticRegression:
    """The fitted model, with scikit-learn's attribute names: ``classes_``, ``coef_`` (n_classes, d),
    ``intercept_``, ``n_iter_`` (an array of one) and ``predict``."""

    def __init__(self, classes: np.ndarray, coef: np.ndarray, intercept: np.ndarray, n_iter: int,
                 status: int, message: str, objective: float):
        self.classes_, self.coef_, self.intercept_ = classes, coef, intercept
        self.n_iter_ = np.array([n_iter], dtype=np.int32)
        self.status, self.message, self.objective = int(status), str(message), float(objective)

    def decision_function(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
        return x @ self.coef_.T + self.intercept_

    def predict(self, x) -> np.ndarray:
        return self.classes_[np.argmax(self.decision_function(x), axis=1)]


def fit_logreg_fused(x, y: np.ndarray, C: float = 1.0, tol: float = 1e-4, max_iter: int = 5000,
                     device: Optional[torch.device] = None, progress=None,
                     path: Optional[str] = None) -> FusedLogisticRegression:
    """Fit scikit-learn's multinomial ``LogisticRegression(C, tol, max_iter, solver="lbfgs")`` (three classes or
    more; see the module docstring). ``x``: (n, ...) array or tensor, flattened; ``y``: labels.
    ``progress``: a callable called once per L-BFGS iteration (a tqdm bar's ``update``), or None. ``path``: how
    the products run (:data:`PATHS`; None: the fastest that runs here)."""
    xt = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))
    xt = xt.reshape(len(xt), -1)
    if not xt.is_floating_point():
        xt = xt.float()
    if device is not None:
        xt = xt.to(device)
    classes, codes = np.unique(np.asarray(y), return_inverse=True)
    if len(classes) < 3:
        raise ValueError(f"the fused fit is for 3 or more classes, got {len(classes)}: use scikit-learn's fit")
    n, d = xt.shape
    f = LogRegObjective(xt, codes, len(classes), l2=1.0 / (C * n), path=path)
    callback = (lambda *_: progress()) if progress is not None else None
    res = optimize.minimize(f, np.zeros((d + 1) * len(classes)), method="L-BFGS-B", jac=True, callback=callback,
                            options={"maxiter": max_iter, "maxls": 50, "gtol": tol,
                                     "ftol": 64 * np.finfo(float).eps})
    coef = np.asarray(res.x, dtype=np.float64).reshape(d + 1, len(classes))
    return FusedLogisticRegression(classes, np.ascontiguousarray(coef[:d].T), coef[d].copy(),
                                   int(res.nit), int(res.status), res.message, float(res.fun))
