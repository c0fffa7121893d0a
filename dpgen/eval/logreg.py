"""The downstream protocol's logistic regression, fitted as scikit-learn fits it, at its matrix products' speed.

The papers' LogReg is scikit-learn's ``LogisticRegression(solver="lbfgs")`` with its defaults: the multinomial
model ``softmax(x W^T + b)`` over the classes present in the fitted labels, minimising

    f(W, b) = mean_i [logsumexp(x_i W^T + b) - (x_i W^T + b)_{y_i}] + ||W||^2 / (2 C n),    C = 1

(the intercept is not penalised) by scipy's L-BFGS-B from zero, with ``gtol = tol = 1e-4``, ``ftol = 64 eps``,
``maxls = 50`` and ``max_iter`` iterations. :func:`fit_logreg_fused` runs that same scipy call on that same
objective, in scikit-learn's parameter layout; only the evaluation of f and its gradient differs. Both do their
two products (``X W^T`` and ``(P - Y)^T X``, 10 columns each) in float32 on the float32 input; scikit-learn runs
them as two passes over the whole set through numpy's BLAS with its Cython loss between them, here they are fused
over blocks of rows, so each block is read from memory once per evaluation and the second product finds it in
cache, through torch's BLAS, with the softmax, the loss and the sums in float64. On 2 cores (``make bench``, eval
part, 54,000 x 784, 2 threads): 34 ms an evaluation against scikit-learn's 57 ms, the FLOP floor of the two
products at the machine's square-sgemm rate being 9.2 ms; the two products alone, unfused, take 37 ms at these
skinny shapes, so the floor this BLAS reaches for them is about 4 x the FLOP floor. Whole fits on 54,000 real
MNIST / Fashion-MNIST images: 10.1 s / 28.4 s against 24.7 s / 59.3 s. The fitted model is scikit-learn's to
the tolerance the solver stops at: its predictions differ from scikit-learn's on 0.3-0.45 % of the test images,
as much as scikit-learn's own fit moves when given float64 instead of float32 input
(``tests/eval/test_logreg.py``: objective, gradient, coefficients and predictions on real digits);
``task.logreg_solver=sklearn`` keeps scikit-learn's own fit.

Two classes take scikit-learn's fit: it uses the binomial model there, another objective.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

__all__ = ["FusedLogisticRegression", "LogRegObjective", "fit_logreg_fused"]

#: rows per block: 1,024 x 784 float32 = 3.2 MB, inside this CPU's 32 MB L3 with room for the products' buffers
#: (measured idle on 54,000 x 784, one / two threads: 1,024 rows 46.6 / 35.9 ms an evaluation, 2,048 rows
#: 48.0 / 48.0 ms, 4,096 rows 52.7 / 57.6 ms)
BLOCK_ROWS = 1024


class LogRegObjective:
    """scikit-learn's L2-penalised multinomial logistic loss and its gradient, for scipy.

    ``x``: (n, d) float tensor (any device; float32 kept as it is); ``codes``: (n,) class indices in
    ``[0, n_classes)``; ``l2``: the penalty's strength, scikit-learn's ``1 / (C n)``. The parameter vector is
    scikit-learn's: the (n_classes, d + 1) matrix ``[W | b]`` ravelled in Fortran order, i.e. read as a
    (d + 1, n_classes) C-ordered array whose last row is the intercept.
    """

    def __init__(self, x: torch.Tensor, codes: np.ndarray, n_classes: int, l2: float,
                 block_rows: int = BLOCK_ROWS):
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
        self.codes = torch.from_numpy(codes).to(self.x.device)
        self._cols = torch.arange(min(self.block, self.n), device=self.x.device)
        self.evaluations = 0

    def __call__(self, w: np.ndarray):
        d, k, x = self.d, self.k, self.x
        coef = np.asarray(w, dtype=np.float64).reshape(d + 1, k)  # row j: feature j's weight for each class
        w_kd = torch.from_numpy(np.ascontiguousarray(coef[:d].T)).to(x.device)  # (k, d) float64
        w_lo = w_kd.to(x.dtype)
        b = torch.from_numpy(coef[d].copy()).to(x.device).unsqueeze(1)  # (k, 1) float64
        grad_w = torch.zeros(k, d, dtype=x.dtype, device=x.device)
        grad_b = torch.zeros(k, 1, dtype=torch.float64, device=x.device)
        loss = torch.zeros((), dtype=torch.float64, device=x.device)
        for i in range(0, self.n, self.block):
            xb = x[i:i + self.block]
            m = xb.shape[0]
            z = torch.mm(w_lo, xb.t()).double().add_(b)  # (k, m) logits, float64 from here
            lse = torch.logsumexp(z, 0)
            cols, yb = self._cols[:m], self.codes[i:i + m]
            loss += lse.sum() - z[yb, cols].sum()
            p = z.sub_(lse).exp_()  # softmax, in place
            p[yb, cols] -= 1.0  # d loss_i / d z_i = p_i - onehot(y_i)
            grad_b += p.sum(1, keepdim=True)
            grad_w.addmm_(p.to(x.dtype), xb)  # the block is still in cache
        self.evaluations += 1
        n = float(self.n)
        value = float(loss) / n + 0.5 * self.l2 * float((w_kd * w_kd).sum())
        g = np.empty((d + 1, k), dtype=np.float64)
        g[:d] = (grad_w.double() / n + self.l2 * w_kd).t().cpu().numpy()
        g[d] = (grad_b / n).squeeze(1).cpu().numpy()
        return value, g.ravel()


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
                     device: Optional[torch.device] = None, progress=None) -> FusedLogisticRegression:
    """Fit scikit-learn's multinomial ``LogisticRegression(C, tol, max_iter, solver="lbfgs")`` (three classes or
    more; see the module docstring). ``x``: (n, ...) array or tensor, flattened; ``y``: labels.
    ``progress``: a callable called once per L-BFGS iteration (a tqdm bar's ``update``), or None."""
    from scipy import optimize

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
    f = LogRegObjective(xt, codes, len(classes), l2=1.0 / (C * n))
    callback = (lambda *_: progress()) if progress is not None else None
    res = optimize.minimize(f, np.zeros((d + 1) * len(classes)), method="L-BFGS-B", jac=True, callback=callback,
                            options={"maxiter": max_iter, "maxls": 50, "gtol": tol,
                                     "ftol": 64 * np.finfo(float).eps})
    coef = np.asarray(res.x, dtype=np.float64).reshape(d + 1, len(classes))
    return FusedLogisticRegression(classes, np.ascontiguousarray(coef[:d].T), coef[d].copy(),
                                   int(res.nit), int(res.status), res.message, float(res.fun))
