"""dpgen's additions to DP-SWD: frame directions (exact sensitivity), the tensor label embedding,
noisy copies of generated rows, and EMA of the generator's weights."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from dpgen.config import ConfigError, compose_config
from dpgen.methods.dpswd import bound_rows, compared_rows
from dpgen.privacy.projection import (
    calibrate_dpswd_sigma,
    dpswd_epsilon,
    frame_bound,
    orthogonal_directions,
    sensitivity_bound,
)

ROOT = Path(__file__).resolve().parents[2]


def _cfg(*overrides):
    """The validated config of ``python run.py`` with small evaluation settings and ``overrides``."""
    pin = [] if any(o.startswith("method=") for o in overrides) else ["method=dpswd"]  # the default before issue 25
    return compose_config([*pin, "trainer.progress=false", "task.n_synthetic=500", "task.eval_max_epochs=3", *overrides])


@pytest.mark.parametrize("d,k", [(10, 10), (10, 25), (64, 1000), (640, 640), (100, 7)])
def test_frame_sensitivity_is_exact_and_never_exceeded(d, k):
    g = torch.Generator().manual_seed(d * 1000 + k)
    u = orthogonal_directions(d, k, generator=g, dtype=torch.float64)
    assert u.shape == (d, k)
    torch.testing.assert_close(u.norm(dim=0), torch.ones(k, dtype=torch.float64))
    # the worst neighbour direction: the top eigenvector of U U^T
    top = torch.linalg.eigvalsh(u @ u.T).max().item()
    assert top <= frame_bound(k, d) + 1e-9
    if k % d == 0:  # a tight frame: U U^T = (k/d) I, the bound is attained by every z
        torch.testing.assert_close(u @ u.T, (k / d) * torch.eye(d, dtype=torch.float64))
        assert top == pytest.approx(k / d)
    # simulation: random unit z, and unit z in the top eigendirection
    z = torch.randn(2000, d, generator=g, dtype=torch.float64)
    z = z / z.norm(dim=1, keepdim=True)
    assert ((z @ u) ** 2).sum(1).max().item() <= frame_bound(k, d) + 1e-9


def test_frame_directions_are_uniform_on_the_sphere():
    # a column of a Haar-random orthonormal block: its squared first coordinate is Beta(1/2, (d-1)/2)
    from scipy import stats

    d = 5
    u = orthogonal_directions(d, 4000 * d, generator=np.random.default_rng(0))
    x = u[0] ** 2
    assert stats.kstest(x, stats.beta(0.5, (d - 1) / 2).cdf).pvalue > 1e-3
    assert abs(u.mean()) < 0.01  # signs fixed so that no direction is preferred


def test_torch_frames_are_haar_like_the_sign_fixed_qr_of_a_gaussian():
    """The torch path draws the Householder reflectors directly (no QR): its blocks must follow the
    Haar law on O(n). Diaconis-Shahshahani: E tr Q = 0 and E (tr Q)^2 = E tr(Q^2) = 1 for n >= 2; the
    QR of a Gaussian matrix without the sign fix has E tr Q = -1/2 at n = 3, which this test catches."""
    from dpgen.privacy.projection import haar_columns

    g = torch.Generator().manual_seed(3)
    n, reps = 3, 20000
    qs = torch.stack([haar_columns(n, n, g) for _ in range(reps)])
    eye = torch.eye(n, dtype=torch.float64)
    assert (qs.transpose(1, 2) @ qs - eye).abs().max() < 1e-13
    tr = qs.diagonal(dim1=1, dim2=2).sum(1)
    se = 1 / math.sqrt(reps)  # Var tr Q = 1
    assert abs(tr.mean().item()) < 4 * se
    assert abs((tr ** 2).mean().item() - 1) < 0.05
    assert abs((qs @ qs).diagonal(dim1=1, dim2=2).sum(1).mean().item() - 1) < 0.05
    # the first column is uniform on the sphere: q_00^2 ~ Beta(1/2, (n-1)/2)
    from scipy import stats

    assert stats.kstest(qs[:, 0, 0].numpy() ** 2, stats.beta(0.5, (n - 1) / 2).cdf).pvalue > 1e-3
    # a truncated block is the first columns of such a matrix: orthonormal, float64-exact
    q = haar_columns(640, 360, g)
    assert q.shape == (640, 360) and (q.T @ q - torch.eye(360, dtype=torch.float64)).abs().max() < 1e-13


def test_frame_calibration_spends_no_delta_on_the_bound():
    cal = calibrate_dpswd_sigma(epsilon=10, delta=1e-5, k=640, d=640, n=1437, batch_size=100, steps=450,
                                bound="frame")
    assert cal["delta_bound"] == 0.0 and cal["delta_rdp"] == 1e-5
    assert cal["squared_sensitivity"] == 1.0
    assert cal["sigma"] == pytest.approx(cal["noise_multiplier"])
    # inverse round trip, and the frame bound beats Bernstein at the same k, d
    eps = dpswd_epsilon(cal["sigma"], 1e-5, 640, 640, 1437, 100, steps=450, bound="frame")
    assert eps == pytest.approx(10, rel=2e-3)
    assert sensitivity_bound(640, 640, 5e-6, "bernstein") > frame_bound(640, 640)
    cal2 = calibrate_dpswd_sigma(epsilon=10, delta=1e-5, k=1280, d=640, n=1437, batch_size=100, steps=450,
                                 bound="frame")
    assert cal2["sigma"] == pytest.approx(math.sqrt(2) * cal2["noise_multiplier"])


def test_tensor_rows_put_pixels_in_their_class_block():
    x = torch.rand(50, 1, 8, 8) * 2
    y = torch.randint(0, 10, (50,))
    rows = compared_rows(x, y, 10, 4.0, label_mode="tensor")
    assert rows.shape == (50, 640)
    torch.testing.assert_close(rows.norm(dim=1), x.flatten(1).norm(dim=1))  # no norm spent on the label
    blocks = rows.view(50, 64, 10)
    for i in range(50):
        torch.testing.assert_close(blocks[i, :, y[i]], x[i].flatten())
        assert blocks[i].abs().sum() == pytest.approx(x[i].abs().sum().item(), rel=1e-5)
    b = bound_rows(rows, "clip")
    assert torch.all(b.norm(dim=1) <= 0.5 + 1e-6)


def test_default_run_uses_frame_tensor_rows_and_reports_them(tmp_path):
    from dpgen.tasks import run as run_task

    cfg = _cfg("trainer.epochs=null", "trainer.steps=3", "task.eval_models=[]")
    m = run_task(cfg, tmp_path)
    p = m["privacy"]
    assert p["bound"] == "frame" and p["delta_bound"] == 0.0
    assert p["label_mode"] == "tensor" and p["compare_dim"] == 64 * 10
    assert "orthonormal" in p["directions"]
    assert p["private_steps"] == 3 and 0 < p["epsilon_spent"] < 10


def test_fake_copies_leave_the_private_release_unchanged(monkeypatch):
    """The private side's noise is the same Gaussian mechanism whatever fake_copies is."""
    import dpgen.methods.dpswd as mod

    seen = {}

    def spy(x, y, **kw):
        seen["real"], seen["fake"], seen["sigma"] = x.shape, (y.shape[0] * kw["y_copies"], y.shape[1]), kw["sigma"]
        return (x.sum() + y.sum()) * 0

    monkeypatch.setattr(mod, "sliced_wasserstein", spy)
    cfg = _cfg("method.fake_copies=4", "method.k=64")
    meth = mod.DPSWD(cfg, num_classes=10, data_dim=64, n_private=1000, steps=100, batch_size=50)
    meth.rng = torch.Generator().manual_seed(0)
    y = torch.randint(0, 10, (50,))
    meth.loss(torch.rand(50, 1, 8, 8), y, torch.rand(50, 1, 8, 8), y)
    assert seen["real"] == (50, 640) and seen["fake"] == (200, 640)
    assert seen["sigma"] == meth.sigma > 0


def test_ema_is_checkpointed_and_bad_values_are_named(tmp_path):
    from dpgen.tasks import run as run_task

    cfg = _cfg("trainer.epochs=null", "trainer.steps=3", "task.eval_models=[]", "trainer.ema=0.9")
    run_task(cfg, tmp_path)
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert state["ema"] is not None
    ema_w = next(iter(state["ema"].values()))
    gen_w = next(iter(state["models"].values()))
    assert not torch.equal(ema_w, gen_w)  # the average lags the iterate
    with pytest.raises(ConfigError, match="trainer.ema=1.5"):
        _cfg("trainer.ema=1.5")
    with pytest.raises(ConfigError, match="method.fake_copies"):
        _cfg("method.fake_copies=0")
    with pytest.raises(ConfigError, match="method.label_mode"):
        _cfg("method.label_mode=outer")


def _dpswd(*overrides, n=1000, steps=100, batch=50):
    import dpgen.methods.dpswd as mod

    cfg = _cfg(*overrides)
    meth = mod.DPSWD(cfg, num_classes=10, data_dim=64, n_private=n, steps=steps, batch_size=batch,
                     image_shape=(1, 8, 8))
    meth.rng = torch.Generator().manual_seed(1)
    return meth


def test_dp_mean_center_noise_std_and_ledger():
    meth = _dpswd("method.center=dp_mean", "method.center_noise_multiplier=3.0")
    x = torch.rand(1000, 1, 8, 8)
    draws = []
    for _ in range(200):
        meth.center = None
        meth.accountant.history.clear()
        meth.prepare_data(x, None)
        draws.append(meth.center.flatten() - x.flatten(1).mean(0))
    d = torch.stack(draws)
    expected = 3.0 * 2 * 8.0 / 1000  # z * 2R / N with R = sqrt(64)
    assert meth.center_info["center_noise_std"] == pytest.approx(expected)
    assert d.std().item() == pytest.approx(expected, rel=0.05)
    assert abs(d.mean().item()) < 5 * expected / math.sqrt(d.numel())
    # the release is one full-batch Gaussian step in the ledger, counted in epsilon
    assert meth.accountant.history == [{"noise_multiplier": 3.0, "sample_rate": 1.0, "num_steps": 1}]
    assert meth.epsilon() > 0


def test_dp_mean_calibration_keeps_the_total_within_budget():
    with_c = _dpswd("method.center=dp_mean", steps=300)
    without = _dpswd("method.center=none", steps=300)
    assert with_c.noise_multiplier > without.noise_multiplier  # the center costs a little
    assert with_c.max_steps >= 300 and without.max_steps >= 300  # both calibrated for the run
    from dpgen.privacy.accountants import WangWORAccountant

    acc = WangWORAccountant()  # independent cross-check of the composed ledger
    acc.step(noise_multiplier=with_c.prefix, sample_rate=1.0)
    acc.step(noise_multiplier=with_c.noise_multiplier, sample_rate=with_c.sample_rate, num_steps=with_c.max_steps)
    assert acc.get_epsilon(with_c.delta_rdp) <= 10 * (1 + 1e-3)
    acc.step(noise_multiplier=with_c.noise_multiplier, sample_rate=with_c.sample_rate)
    assert acc.get_epsilon(with_c.delta_rdp) > 10 - 0.05
    # a center noise so small that it alone exceeds the budget is refused, naming the setting
    with pytest.raises(ValueError, match="center_noise_multiplier"):
        _dpswd("method.center=dp_mean", "method.center_noise_multiplier=0.05", "privacy.epsilon=1.0")


def test_tensorboard_logger_writes_events(tmp_path):
    pytest.importorskip("tensorboard")
    from dpgen.tasks import run as run_task

    cfg = _cfg("trainer.epochs=null", "trainer.steps=2", "trainer.log_every=1", "task.eval_models=[]",
               "logger=tensorboard", "method.center=none")
    run_task(cfg, tmp_path)
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


# ---- structured frames (method.directions=structured, the default) ----------------------------

@pytest.mark.parametrize("d,k", [(10, 10), (10, 25), (64, 1000), (640, 640), (100, 7), (7840, 30)])
def test_structured_frame_is_orthonormal_blocks_with_the_frame_sensitivity(d, k):
    from dpgen.privacy.projection import StructuredFrame

    g = torch.Generator().manual_seed(d * 1000 + k)
    f = StructuredFrame.draw(d, k, g)
    u = f.matrix()
    assert u.shape == (d, k) and f.k == k
    for j in range(0, k, d):  # each block exactly orthonormal
        blk = u[:, j:j + d]
        torch.testing.assert_close(blk.T @ blk, torch.eye(blk.shape[1], dtype=torch.float64), atol=1e-12, rtol=0)
    # the operator is the matrix: rows -> rows @ U (float32 rows come back float32)
    x = torch.randn(5, d, generator=g)
    got = f(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), x.double() @ u, atol=1e-5, rtol=1e-5)
    # sensitivity by simulation: random unit z and the top eigendirection of U U^T never exceed the bound
    z = torch.randn(500, d, generator=g, dtype=torch.float64)
    z = z / z.norm(dim=1, keepdim=True)
    assert (f(z) ** 2).sum(1).max().item() <= frame_bound(k, d) + 1e-9
    if d <= 640:
        top = torch.linalg.eigvalsh(u @ u.T).max().item()
        assert top <= frame_bound(k, d) + 1e-9
        if k % d == 0:
            torch.testing.assert_close(u @ u.T, (k / d) * torch.eye(d, dtype=torch.float64))


def _fourth_moment_ratios(d, rounds, reps, seed=0):
    """E (z.u)^4 over the frame's columns, divided by the uniform law's 3 / (d (d + 2)), for sparse, dense,
    random and block (tensor-label-like) unit z; and E (z.u)^2 d (the uniform law: 1)."""
    from dpgen.privacy.projection import StructuredFrame

    g = torch.Generator().manual_seed(seed)
    e1 = torch.eye(d, dtype=torch.float64)[0]
    ones = torch.ones(d, dtype=torch.float64) / math.sqrt(d)
    rnd = torch.randn(d, generator=g, dtype=torch.float64)
    blk = torch.zeros(d, dtype=torch.float64)
    blk[: max(1, d // 10)] = 1.0
    z = torch.stack([e1, ones, rnd / rnd.norm(), blk / blk.norm()])
    m2, m4 = torch.zeros(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    for _ in range(reps):
        p = StructuredFrame.draw(d, d, g, rounds=rounds)(z)
        m2 += (p ** 2).mean(1)
        m4 += (p ** 4).mean(1)
    return (m2 / reps * d).tolist(), (m4 / reps * d * (d + 2) / 3).tolist()


@pytest.mark.parametrize("d", [64, 784])
def test_structured_directions_have_the_moments_of_uniform_directions(d):
    """A column u of a structured frame against u uniform on S^{d-1}: E (z.u)^2 = 1/d exactly (an
    orthonormal block), E (z.u)^4 = 3 / (d (d + 2)) within 3 %, for a coordinate vector, the flat
    vector, a random vector and a block vector (the tensor-label rows). One round (one sign diagonal
    and one Hartley transform) fails it (a coordinate vector gives 1/3 of the uniform value): the test
    can fail."""
    m2, m4 = _fourth_moment_ratios(d, rounds=3, reps=400 if d == 64 else 40)
    assert m2 == pytest.approx([1.0] * 4, abs=1e-9)
    assert m4 == pytest.approx([1.0] * 4, abs=0.03)
    _, m4_one = _fourth_moment_ratios(d, rounds=1, reps=50)
    assert m4_one[0] < 0.4


def test_dpswd_uses_structured_frames_by_default_and_haar_on_request():
    from dpgen.methods.dpswd import DPSWD
    from dpgen.privacy.projection import StructuredFrame

    for kind in ("structured", "haar"):
        cfg = _cfg("method=dpswd", f"method.directions={kind}", "method.k=50")
        m = DPSWD(cfg, num_classes=10, data_dim=64, n_private=1000, steps=10, batch_size=10, image_shape=(1, 8, 8))
        m.rng = torch.Generator().manual_seed(0)
        assert m.privacy_report()["directions"].startswith(f"stacked random orthonormal blocks ({kind}")
        x = torch.rand(10, 1, 8, 8)
        y = torch.randint(0, 10, (10,))
        fake = torch.rand(10, 1, 8, 8, requires_grad=True)
        m.loss(fake, y, x, y).backward()
        assert torch.isfinite(fake.grad).all()
    assert compose_config(["method=dpswd"]).method.directions == "structured"
    with pytest.raises(ConfigError, match="method.directions"):
        compose_config(["method=dpswd", "method.directions=hadamard"])
    assert isinstance(__import__("dpgen.privacy.projection", fromlist=["x"]).frame_directions(8, 3, torch.Generator()),
                      StructuredFrame)
