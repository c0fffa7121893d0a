"""The protocol's LogReg fitted with fused products (dpgen/eval/logreg.py) is scikit-learn's model: the same
objective and gradient (against scikit-learn's own loss), the same solution to L-BFGS's tolerance, the same
labels; two classes go to scikit-learn; the solver is a validated setting; the BLAS limit is given back."""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.linear_model._linear_loss import LinearModelLoss
from sklearn._loss.loss import HalfMultinomialLoss

from dpgen.eval.downstream import evaluate_downstream, fit_logreg
import dpgen.eval.logreg as logreg_mod
from dpgen.eval.logreg import (PATHS, FusedLogisticRegression, LogRegObjective, _onednn_works,
                               fit_logreg_fused)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def digits():
    x, y = load_digits(return_X_y=True)
    return (x / 16.0).astype(np.float32), y.astype(np.int64)


def _sk_objective(w, x, codes, k):
    loss = LinearModelLoss(base_loss=HalfMultinomialLoss(n_classes=k), fit_intercept=True)
    return loss.loss_gradient(w, x.astype(np.float64), codes.astype(np.float64), None, 1.0 / len(x), 1)


def _skip_unless_runs(path):
    works = _onednn_works()
    if path != "blas" and not works["packed" if path == "packed" else "linear"]:
        pytest.skip(f"oneDNN's {path} inner product does not run here (not an x86 CPU build of torch): "
                    f"the BLAS path is used")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("block_rows", [1, 97, 1024, 5000])
def test_objective_and_gradient_are_scikit_learns(digits, block_rows, path):
    x, y = digits
    k, d = 10, x.shape[1]
    rng = np.random.default_rng(block_rows)
    w = rng.normal(size=(d + 1) * k) * 0.3  # scikit-learn's layout: (k, d + 1) ravelled in Fortran order
    ref_f, ref_g = _sk_objective(w, x, y, k)
    _skip_unless_runs(path)
    obj = LogRegObjective(torch.from_numpy(x), y, k, l2=1.0 / len(x), block_rows=block_rows, path=path)
    assert obj.path == path
    f, g = obj(w)
    assert obj(w)[0] == f  # the packed path's reused buffers leave nothing behind
    assert f == pytest.approx(ref_f, rel=1e-7)
    np.testing.assert_allclose(g, ref_g, rtol=0, atol=1e-5 * np.abs(ref_g).max())  # float32 products and sums
    # float64 input: the products in float64 too, agreement to rounding
    f64, g64 = LogRegObjective(torch.from_numpy(x.astype(np.float64)), y, k, l2=1.0 / len(x))(w)
    assert f64 == pytest.approx(ref_f, rel=1e-12)
    np.testing.assert_allclose(g64, ref_g, rtol=0, atol=1e-12)


def test_zero_start_is_log_k_and_penalty_spares_the_intercept(digits):
    x, y = digits
    k, d = 10, x.shape[1]
    f, _ = LogRegObjective(torch.from_numpy(x), y, k, l2=0.5)(np.zeros((d + 1) * k))
    assert f == pytest.approx(np.log(k), rel=1e-7)
    w = np.zeros((d + 1, k))
    w[d] = 3.0  # the intercept alone: the same logit for every class -> loss log k, no penalty
    f, g = LogRegObjective(torch.from_numpy(x), y, k, l2=0.5)(w.ravel())
    assert f == pytest.approx(np.log(k), rel=1e-7)


@pytest.mark.parametrize("path", PATHS)
def test_fit_is_scikit_learns_model(digits, path):
    x, y = digits
    xf, yf, xt, yt = x[:1400], y[:1400], x[1400:], y[1400:]
    sk = LogisticRegression(solver="lbfgs", max_iter=5000).fit(xf, yf)
    _skip_unless_runs(path)
    fu = fit_logreg_fused(xf, yf, path=path)
    assert isinstance(fu, FusedLogisticRegression) and fu.status == 0 and fu.n_iter_[0] > 10
    wf = np.concatenate([fu.coef_, fu.intercept_[:, None]], 1).ravel(order="F")
    ws = np.concatenate([sk.coef_, sk.intercept_[:, None]], 1).ravel(order="F")
    f_fused, g_fused = _sk_objective(wf, xf, yf, 10)
    f_sk, _ = _sk_objective(ws, xf, yf, 10)
    # both stop where L-BFGS-B's projected gradient is below tol = 1e-4 (measured by scikit-learn's own gradient)
    assert np.abs(g_fused).max() <= 1.5e-4
    assert f_fused == pytest.approx(f_sk, rel=1e-3)
    np.testing.assert_allclose(fu.coef_, sk.coef_, atol=0.05 * np.abs(sk.coef_).max())
    assert (fu.predict(xt) == sk.predict(xt)).mean() >= 0.99
    assert abs((fu.predict(xt) == yt).mean() - (sk.predict(xt) == yt).mean()) <= 0.01


def test_labels_are_kept_and_missing_classes_are_not_invented(digits):
    x, y = digits
    keep = np.isin(y, [2, 5, 7, 9])
    xs, ys = x[keep], np.array([2, 5, 7, 9])[np.searchsorted([2, 5, 7, 9], y[keep])] * 10 + 3  # labels 23, 53, 73, 93
    fu = fit_logreg_fused(torch.from_numpy(xs), ys)
    sk = LogisticRegression(solver="lbfgs", max_iter=5000).fit(xs, ys)
    np.testing.assert_array_equal(fu.classes_, sk.classes_)
    assert fu.coef_.shape == sk.coef_.shape == (4, x.shape[1])
    assert set(np.unique(fu.predict(xs))) <= {23, 53, 73, 93}
    assert (fu.predict(xs) == sk.predict(xs)).mean() >= 0.99


def test_two_classes_take_scikit_learns_binomial_fit(digits):
    x, y = digits
    keep = y < 2
    clf, converged = fit_logreg(x[keep], y[keep], solver="fused")
    assert isinstance(clf, LogisticRegression) and converged
    with pytest.raises(ValueError, match="3 or more classes"):
        fit_logreg_fused(x[keep], y[keep])


def test_solver_setting_and_progress(digits, capsys):
    from threadpoolctl import threadpool_info
    x, y = digits
    before = [(i["filepath"], i["num_threads"]) for i in threadpool_info()]
    res = {s: evaluate_downstream(x[:1400], y[:1400], x[1400:], y[1400:], models=("logreg",), logreg_solver=s,
                                  progress=(s == "fused")) for s in ("fused", "sklearn")}
    assert [(i["filepath"], i["num_threads"]) for i in threadpool_info()] == before  # the BLAS limit is given back
    assert res["fused"]["logreg"]["converged"] and res["sklearn"]["logreg"]["converged"]
    assert abs(res["fused"]["logreg"]["test_acc"] - res["sklearn"]["logreg"]["test_acc"]) <= 1.0
    assert "L-BFGS iterations" in capsys.readouterr().err
    with pytest.raises(ValueError, match="logreg solver must be one of"):
        evaluate_downstream(x[:200], y[:200], x[1400:], y[1400:], models=("logreg",), logreg_solver="newton")


def test_config_names_a_bad_solver():
    from dpgen.config import GenerationTaskConfig
    with pytest.raises(Exception, match="task.logreg_solver"):
        GenerationTaskConfig(logreg_solver="newton")


def test_path_is_chosen_and_checked(digits, monkeypatch):
    x, y = digits
    x32 = torch.from_numpy(x)
    # float64 input takes the BLAS (oneDNN's inner product is float32 here), and asking for oneDNN says why not
    assert LogRegObjective(x32.double(), y, 10, l2=0.1).path == "blas"
    with pytest.raises(ValueError, match="path='packed' needs oneDNN's inner product on a CPU with float32"):
        LogRegObjective(x32.double(), y, 10, l2=0.1, path="packed")
    with pytest.raises(ValueError, match="path='gpu' is invalid: choose one of packed, onednn, blas"):
        LogRegObjective(x32, y, 10, l2=0.1, path="gpu")
    works = _onednn_works()
    if not works["linear"]:
        assert LogRegObjective(x32, y, 10, l2=0.1).path == "blas"
        return
    assert LogRegObjective(x32, y, 10, l2=0.1).path == ("packed" if works["packed"] else "onednn")
    # above the size limit the two packed copies are not made: the blocked oneDNN path instead
    monkeypatch.setattr(logreg_mod, "PACK_MAX_BYTES", x32.numel() * 4 - 1)
    assert LogRegObjective(x32, y, 10, l2=0.1).path == "onednn"
