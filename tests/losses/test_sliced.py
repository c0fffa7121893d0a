"""dpgen.losses.sliced: the empirical SWD_p^p (Eq. 4) and the DP_sigma SWD of Algorithm 1."""

import math

import pytest
import torch

from dpgen.losses.sliced import random_projections, sliced_wasserstein

ot = pytest.importorskip("ot")


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _samples(n=200, m=200, d=6, shift=0.5, seed=0, dtype=torch.float64):
    g = _gen(seed)
    x = torch.randn(n, d, generator=g, dtype=dtype)
    y = torch.randn(m, d, generator=g, dtype=dtype) + shift
    return x, y, random_projections(d, 50, g, dtype=dtype)


def test_random_projections_are_unit_columns():
    u = random_projections(7, 300, _gen())
    assert u.shape == (7, 300)
    assert torch.allclose(u.norm(dim=0), torch.ones(300), atol=1e-6)
    # uniform on the sphere: E[u u^T] = I / d
    assert torch.allclose(u @ u.T / 300, torch.eye(7) / 7, atol=0.03)


@pytest.mark.parametrize("p", [1, 2])
def test_symmetric_and_zero_on_identical_samples(p):
    x, y, u = _samples()
    assert sliced_wasserstein(x, y, projections=u, p=p).item() == pytest.approx(
        sliced_wasserstein(y, x, projections=u, p=p).item(), rel=1e-12)
    # fresh directions from the same seed: symmetric too
    a = sliced_wasserstein(x, y, n_projections=40, p=p, generator=_gen(3))
    b = sliced_wasserstein(y, x, n_projections=40, p=p, generator=_gen(3))
    assert a.item() == pytest.approx(b.item(), rel=1e-12)
    assert sliced_wasserstein(x, x, projections=u, p=p).item() == 0.0
    assert sliced_wasserstein(x, x.clone(), n_projections=40, p=p, generator=_gen(1)).item() == 0.0
    assert sliced_wasserstein(x, y, projections=u, p=p).item() > 0.0


@pytest.mark.parametrize("p", [1, 2])
def test_equals_direct_computation_with_fixed_projections(p):
    x, y, u = _samples(n=150, m=150)
    sx, _ = torch.sort(x @ u, dim=0)
    sy, _ = torch.sort(y @ u, dim=0)
    direct = ((sx - sy).abs() ** p).mean(dim=0).mean()  # average over samples, then directions
    assert sliced_wasserstein(x, y, projections=u, p=p).item() == pytest.approx(direct.item(), rel=1e-12)
    # one direction: the 1-D W_p^p between the projected samples
    e = torch.zeros(x.shape[1], 1, dtype=x.dtype)
    e[0, 0] = 1.0
    w1d = ((torch.sort(x[:, 0])[0] - torch.sort(y[:, 0])[0]).abs() ** p).mean()
    assert sliced_wasserstein(x, y, projections=e, p=p).item() == pytest.approx(w1d.item(), rel=1e-12)


def test_projected_noise_has_std_sigma():
    """Noise on one side of all-zero samples: SWD_2^2 = mean(V^2) -> sigma^2, SWD_1 = mean|V| -> sigma sqrt(2/pi)."""
    n, d, k = 1000, 3, 250  # 2.5e5 noise entries: relative std of both estimates ~ 0.15 %
    zeros = torch.zeros(n, d, dtype=torch.float64)
    for sigma in (0.5, 3.0):
        for noise_x in (True, False):
            kw = dict(n_projections=k, sigma=sigma, noise_x=noise_x, noise_y=not noise_x)
            sq = sliced_wasserstein(zeros, zeros, p=2, generator=_gen(1), **kw).item()
            ab = sliced_wasserstein(zeros, zeros, p=1, generator=_gen(2), **kw).item()
            assert math.sqrt(sq) == pytest.approx(sigma, rel=0.01)
            assert ab == pytest.approx(sigma * math.sqrt(2 / math.pi), rel=0.01)
    # no noise asked for: exactly zero; noise on both sides: two independent noise samples, much
    # closer to each other (in W_2) than either is to 0
    assert sliced_wasserstein(zeros, zeros, n_projections=k, sigma=1.0, noise_x=False, noise_y=False).item() == 0.0
    both = sliced_wasserstein(zeros, zeros, n_projections=k, sigma=1.0, generator=_gen(4)).item()
    assert 0.0 < both < 0.05


def test_noise_is_added_after_projection_and_is_fresh():
    x, y, u = _samples(n=400, m=400)
    a = sliced_wasserstein(x, y, projections=u, sigma=1.0, generator=_gen(0))
    b = sliced_wasserstein(x, y, projections=u, sigma=1.0, generator=_gen(0))
    c = sliced_wasserstein(x, y, projections=u, sigma=1.0, generator=_gen(1))
    assert a.item() == b.item() and a.item() != c.item()
    # the noise std does not depend on d (it is on the k projections, not on the d coordinates)
    z = torch.zeros(500, 2000, dtype=torch.float64)
    sq = sliced_wasserstein(z, z, n_projections=200, p=2, sigma=2.0, noise_y=False, generator=_gen(5)).item()
    assert sq == pytest.approx(4.0, rel=0.02)


@pytest.mark.parametrize("p", [1, 2])
def test_matches_pot_with_the_same_projections(p):
    # POT returns (mean over directions of W_p^p) ** (1/p): dpgen's SWD_p^p is POT's value ** p
    x, y, u = _samples(n=300, m=300, d=10)
    ours = sliced_wasserstein(x, y, projections=u, p=p).item()
    pot = ot.sliced_wasserstein_distance(x, y, projections=u, p=p).item() ** p
    assert ours == pytest.approx(pot, rel=1e-10)
    # float32, as in training
    x32, y32, u32 = x.float(), y.float(), u.float()
    pot32 = ot.sliced_wasserstein_distance(x32, y32, projections=u32, p=p).item() ** p
    assert sliced_wasserstein(x32, y32, projections=u32, p=p).item() == pytest.approx(pot32, rel=1e-5)


def test_sw2_between_shifted_gaussians_is_c_squared():
    # N(0, I) vs N(c 1, I): W_2^2 of the projections on u is (c u.1)^2, and E[(u.1)^2] = ||1||^2 / d = 1
    g = _gen(7)
    d, n, k = 5, 1000, 800
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    z = torch.randn(n, d, generator=g, dtype=torch.float64)
    u = random_projections(d, k, g, dtype=torch.float64)
    # Monte Carlo over the k directions: (u.1)^2 has std sqrt(2 (d-1)/(d+2)) ~ 1.07, so its
    # average over k = 800 directions is within ~3.8 % (1 std) of 1
    mc = (u.sum(dim=0) ** 2).mean().item()
    assert mc == pytest.approx(1.0, rel=0.09)
    for c in (0.0, 1.0, 2.0):
        sw = sliced_wasserstein(x, z + c, projections=u, p=2).item()
        # sampling error: the sample means differ by ~ N(0, 2/n) per coordinate (~ 4 % of c^2 at
        # c = 1), plus the finite-sample W_2^2 between two samples of one law (~ 5e-3 here)
        assert sw == pytest.approx(c * c, rel=0.15, abs=1e-2), c
    # exact identity once both samples are centred: W_2^2(a + t, b) = t^2 + W_2^2(a, b) for 1-D
    # samples of equal means, so SWD_2^2 = c^2 mean_u (u.1)^2 + SWD_2^2(x, z)
    x, z = x - x.mean(dim=0), z - z.mean(dim=0)
    base = sliced_wasserstein(x, z, projections=u, p=2).item()
    assert 0 < base < 1e-2
    for c in (0.5, 1.0, 2.0):
        sw = sliced_wasserstein(x, z + c, projections=u, p=2).item()
        assert sw == pytest.approx(c * c * mc + base, rel=1e-9), c


def test_unequal_sample_sizes():
    x, y, u = _samples(n=300, m=500, d=5, shift=0.3)
    x.requires_grad_(True)
    y.requires_grad_(True)
    sw = sliced_wasserstein(x, y, projections=u)
    sw.backward()
    assert torch.isfinite(sw) and sw.item() > 0
    assert x.grad.shape == x.shape and y.grad.shape == y.shape
    assert x.grad.abs().sum() > 0 and y.grad.abs().sum() > 0
    # quantile functions compared at max(n, m) levels (linear interpolation): close to the exact 1-D
    # OT between the empirical measures (POT), not equal
    pot = ot.sliced_wasserstein_distance(x.detach(), y.detach(), projections=u, p=2).item() ** 2
    assert sw.item() == pytest.approx(pot, rel=0.03)
    assert sliced_wasserstein(y, x, projections=u).item() == pytest.approx(sw.item(), rel=1e-12)
    # sigma > 0 works with unequal sizes too
    assert torch.isfinite(sliced_wasserstein(x, y, projections=u, sigma=1.0, generator=_gen()))


def test_gradient_is_correct():
    x, y, u = _samples(n=12, m=12, d=3, seed=2)
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a: sliced_wasserstein(a, y, projections=u, p=2), (x,))
    assert torch.autograd.gradcheck(lambda a: sliced_wasserstein(a, y, projections=u, p=1), (x,))


def test_bad_input_raises_value_error():
    x, y, u = _samples(n=20, m=20, d=4)
    with pytest.raises(ValueError, match="p=3"):
        sliced_wasserstein(x, y, p=3)
    with pytest.raises(ValueError, match="p=0"):
        sliced_wasserstein(x, y, p=0)
    with pytest.raises(ValueError, match="sigma"):
        sliced_wasserstein(x, y, sigma=-0.1)
    for k in (0, -5):
        with pytest.raises(ValueError, match="n_projections"):
            sliced_wasserstein(x, y, n_projections=k)
    with pytest.raises(ValueError, match="same dimension"):
        sliced_wasserstein(x, torch.randn(20, 5, dtype=x.dtype))
    with pytest.raises(ValueError):
        random_projections(4, 0)
    with pytest.raises(ValueError):
        random_projections(0, 10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_cpu_sort_equals_torch_sort_in_value_and_gradient(dtype):
    from dpgen.losses.sliced import sort_columns

    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 70, generator=g, dtype=dtype, requires_grad=True)
    w = torch.randn(300, 70, generator=g, dtype=dtype)
    ours = sort_columns(x)
    ref = torch.sort(x, dim=0).values
    assert torch.equal(ours, ref)
    (ga,) = torch.autograd.grad((ours * w).sum(), x)
    (gb,) = torch.autograd.grad((ref * w).sum(), x)
    assert torch.equal(ga, gb)
    # non-contiguous input, and no gradient needed (the private side is detached)
    xt = torch.randn(70, 300, generator=g, dtype=dtype).T
    assert torch.equal(sort_columns(xt), torch.sort(xt, dim=0).values)


def test_the_threaded_cpu_sort_of_a_large_batch_equals_torch_sort():
    from dpgen.losses.sliced import sort_columns

    x = torch.randn(900, 640, generator=torch.Generator().manual_seed(1))  # DP-SWD's default: 100 + 800 rows
    assert torch.equal(sort_columns(x), torch.sort(x, dim=0).values)


def test_y_copies_equal_repeating_the_rows():
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(30, 12, generator=g), torch.randn(20, 12, generator=g, requires_grad=True)
    u = random_projections(12, 40, generator=g)
    a = sliced_wasserstein(x, y, projections=u, sigma=0.7, generator=torch.Generator().manual_seed(5), y_copies=4)
    b = sliced_wasserstein(x, y.repeat(4, 1), projections=u, sigma=0.7, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(a, b)
    (ga,), (gb,) = torch.autograd.grad(a, y), torch.autograd.grad(b, y)
    torch.testing.assert_close(ga, gb)
