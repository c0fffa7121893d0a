"""privacy.secure_rng: the mechanisms' randomness from the OS CSPRNG (dpgen.utils.noise).

The secure source cannot be seeded, so the statistical tests draw fresh numbers each run: every bound is
5 standard errors (or a KS p-value above 1e-6), a false failure about once in a million runs."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats

from dpgen.utils import noise
from dpgen.utils.noise import SecureGenerator, SecureRNGError, gaussian, permutation, randint, uniform

N = 1_000_000


def test_secure_gaussian_is_standard_normal():
    z = gaussian(N, generator=SecureGenerator(), dtype=torch.float64).numpy()
    assert abs(z.mean()) < 5 / math.sqrt(N)
    assert abs(z.std() - 1) < 5 / math.sqrt(2 * N)  # the sample std's standard error is 1 / sqrt(2n)
    assert stats.kstest(z, "norm").pvalue > 1e-6
    tail = np.mean(np.abs(z) > 3)  # the tails, where a wrong construction shows first
    p3 = 2 * stats.norm.sf(3)
    assert abs(tail - p3) < 5 * math.sqrt(p3 * (1 - p3) / N)


def test_secure_gaussian_is_four_box_muller_draws_over_two(monkeypatch):
    """The construction, recomputed from the same OS bytes: 53-bit uniforms, Box-Muller with both outputs,
    the sum of SECURE_DRAWS = 4 normals divided by 2 (Holohan & Braghin's mitigation with n = 2, as opacus)."""
    src = np.random.default_rng(0)
    taken = []

    def fake_urandom(k):
        b = src.bytes(k)
        taken.append(b)
        return b

    monkeypatch.setattr(noise.os, "urandom", fake_urandom)
    n = 5
    z = gaussian(n, generator=SecureGenerator(), dtype=torch.float64).numpy()
    (raw,) = taken
    words = np.frombuffer(raw, dtype=np.uint64)
    assert len(words) == 4 * n  # 4 normals per output, 2 normals per pair of uniforms
    u = (words & np.uint64((1 << 53) - 1)).astype(np.float64) / 2.0 ** 53
    m = 2 * n
    r, theta = np.sqrt(-2 * np.log(1 - u[:m])), 2 * np.pi * u[m:]
    normals = np.concatenate([r * np.cos(theta), r * np.sin(theta)])
    np.testing.assert_allclose(z, normals.reshape(4, n).sum(0) / 2, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("word", [0, 2 ** 64 - 1])
def test_extreme_words_give_finite_gaussians_and_uniforms_below_one(monkeypatch, word):
    """All-zero or all-one entropy (the extremes of the uniforms): log(1 - u) stays finite, and a uniform
    cast to float32 or half never rounds up to 1."""
    monkeypatch.setattr(noise.os, "urandom", lambda k: np.full(k // 8, word, dtype=np.uint64).tobytes())
    g = SecureGenerator()
    assert torch.isfinite(gaussian(10, generator=g, dtype=torch.float64)).all()
    for dt in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        u = uniform(10, generator=g, dtype=dt)
        assert u.dtype == dt and bool((u >= 0).all()) and bool((u < 1).all()), dt
    assert int(randint(7, (10,), generator=g).max()) <= 6


def test_secure_uniform_is_uniform_on_the_unit_interval():
    u = uniform(N, generator=SecureGenerator())
    assert u.dtype == torch.float64  # 53 random bits by default: u < q has probability q to 2^-53
    u = u.numpy()
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / N)
    assert stats.kstest(u, "uniform").pvalue > 1e-6


def test_secure_integers_and_permutations():
    g = SecureGenerator()
    k = randint(10, (100_000,), generator=g)
    counts = torch.bincount(k, minlength=10).numpy()
    assert counts.sum() == 100_000 and stats.chisquare(counts).pvalue > 1e-6
    p = permutation(1000, generator=g)
    assert sorted(p.tolist()) == list(range(1000)) and p.tolist() != list(range(1000))
    # the position of element 0 over many permutations of 5 is uniform
    first = [int(torch.nonzero(permutation(5, generator=g) == 0)) for _ in range(5000)]
    assert stats.chisquare(np.bincount(first, minlength=5)).pvalue > 1e-6


def test_two_draws_and_two_generators_differ():
    a, b = SecureGenerator(), SecureGenerator()
    x, y, z = gaussian(1000, generator=a), gaussian(1000, generator=a), gaussian(1000, generator=b)
    assert not torch.equal(x, y) and not torch.equal(x, z)
    assert not torch.equal(uniform(1000, generator=a), uniform(1000, generator=a))


def test_secure_generator_cannot_be_seeded_or_checkpointed():
    g = SecureGenerator()
    for call in (g.get_state, lambda: g.set_state(torch.zeros(5, dtype=torch.uint8)), lambda: g.manual_seed(0),
                 g.initial_seed):
        with pytest.raises(SecureRNGError, match="privacy.secure_rng"):
            call()


def test_a_torch_generator_draws_exactly_what_torch_did():
    """A seeded run (privacy.secure_rng=false) draws the same stream as before the routing."""
    def two(seed):
        return torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)

    a, b = two(3)
    assert torch.equal(gaussian((4, 5), generator=a, dtype=torch.float64), torch.randn(4, 5, generator=b,
                                                                                        dtype=torch.float64))
    assert torch.equal(uniform(7, generator=a), torch.rand(7, generator=b))
    assert torch.equal(randint(9, (6,), generator=a), torch.randint(0, 9, (6,), generator=b))
    assert torch.equal(permutation(11, generator=a), torch.randperm(11, generator=b))


def test_output_lands_on_the_requested_device_and_dtype():
    g = SecureGenerator("cpu")
    assert gaussian((2, 3), generator=g).dtype == torch.get_default_dtype()
    assert gaussian((2, 3), generator=g, dtype=torch.float64).shape == (2, 3)
    assert uniform(4, generator=g, dtype=torch.float32).dtype == torch.float32
    assert permutation(4, generator=g).dtype == torch.int64


# ---------------------------------------------------------------------------------------------
# the mechanisms, given a SecureGenerator
# ---------------------------------------------------------------------------------------------
def _assert_std(x: torch.Tensor, std: float):
    n = x.numel()
    assert abs(float(x.double().std()) - std) < 5 * std / math.sqrt(2 * n)
    assert abs(float(x.double().mean())) < 5 * std / math.sqrt(n)


def test_per_sample_and_image_gradient_mechanisms_release_the_right_std():
    from dpgen.privacy.image_gradient import ImageGradientMechanism, PerSampleGradientMechanism

    g = SecureGenerator()
    per = PerSampleGradientMechanism(clip=0.7, noise_multiplier=1.3, sample_rate=0.01)
    (out,) = per.noise_sum([torch.zeros(200, 500)], generator=g)
    _assert_std(out, 0.7 * 1.3)
    img = ImageGradientMechanism(clip=0.5, noise_multiplier=1.1, sample_rate=0.01)
    _assert_std(img.privatize(torch.zeros(200, 500), generator=g), 2 * 0.5 * 1.1)


def test_dpsgd_step_and_poisson_sampling_with_the_secure_source():
    from dpgen.methods.dpsgd import DPSGD

    g = SecureGenerator()
    m = DPSGD(clip=1.0, noise_multiplier=2.0, sample_rate=0.01, expected_batch_size=10, accountants=["moments"])
    model = torch.nn.Linear(500, 200)
    m.private_gradient(model, torch.zeros(0, 500), torch.zeros(0, dtype=torch.long), noise_gen=g)  # noise only
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    _assert_std(grads, 1.0 * 2.0 / 10)  # N(0, (C sigma)^2) / expected batch size
    n, q = 200_000, 0.01
    idx = m.sample_batch(n, 10, g)
    assert abs(idx.numel() - n * q) < 5 * math.sqrt(n * q * (1 - q))
    assert idx.unique().numel() == idx.numel()


def test_base_sampling_both_ways_with_the_secure_source():
    from dpgen.methods.base import Method

    g = SecureGenerator()
    n, q = 200_000, 0.02
    idx = Method.sample_batch(SimpleNamespace(sampling="poisson", sample_rate=q), n, 0, g)
    assert abs(idx.numel() - n * q) < 5 * math.sqrt(n * q * (1 - q))
    wor = Method.sample_batch(SimpleNamespace(sampling="without_replacement", sample_rate=None), 1000, 64, g)
    assert wor.numel() == 64 and wor.unique().numel() == 64 and int(wor.max()) < 1000


@pytest.mark.parametrize("kind", ["structured", "haar"])
def test_dpswd_directions_and_noise_with_the_secure_source(kind):
    from dpgen.losses.sliced import random_projections, sliced_wasserstein
    from dpgen.privacy.projection import frame_directions, gaussian_mechanism, random_directions

    g = SecureGenerator()
    u = frame_directions(40, 100, g, kind=kind, dtype=torch.float64)
    u = u if isinstance(u, torch.Tensor) else u.matrix(torch.float64)
    torch.testing.assert_close(u[:, :40].T @ u[:, :40], torch.eye(40, dtype=torch.float64), atol=1e-10, rtol=0)
    for v in (random_directions(40, 100, g), random_projections(40, 100, g)):
        torch.testing.assert_close(v.norm(dim=0), torch.ones(100))
    x = torch.zeros(300, 40)
    _assert_std(gaussian_mechanism(x, random_directions(40, 50, g), 0.8, generator=g), 0.8)
    assert torch.isfinite(sliced_wasserstein(x, x, n_projections=20, sigma=0.5, generator=g))


def test_config_and_generators():
    from dpgen.config import ConfigError, compose_config
    from dpgen.train.state import mechanism_generators

    cfg = compose_config(["privacy.secure_rng=true"])
    sampler, noise_gen = mechanism_generators(cfg, torch.device("cpu"))
    assert isinstance(sampler, SecureGenerator) and isinstance(noise_gen, SecureGenerator)
    plain = mechanism_generators(compose_config([]), torch.device("cpu"))
    assert all(isinstance(x, torch.Generator) for x in plain)
    with pytest.raises(ConfigError, match="privacy.secret_randomness=true"):
        compose_config(["privacy.secure_rng=true", "privacy.secret_randomness=false"])


# a checkpoint from before privacy.secure_rng resumes only as not secure: tests/train/test_migrations.py


@pytest.mark.parametrize("what", ["default", "dpsgd"])
def test_a_secure_run_trains_checkpoints_no_mechanism_rng_and_resumes(tmp_path, fake_data_root, what):
    from dpgen.config import compose_config
    from dpgen.tasks import run as run_task

    ov = {"default": ["task.n_synthetic=100", "task.fid=false", "task.eval_models=[]"],  # DP-Sinkhorn on digits
          "dpsgd": ["task=classification", "method=dpsgd", "dataset=mnist", f"dataset.data_root={fake_data_root}",
                    "dataset.n_train=1000", "trainer.batch_size=20", "method.accountants=[moments]"]}[what]
    # a fixed noise level, so that the resumed run has budget left for its two more steps; RDP: the budget's
    # step count found in milliseconds
    base = [*ov, "privacy.secure_rng=true", "method.noise_multiplier=1.1", "privacy.epsilon=50", "privacy.accountant=rdp",
            "trainer.progress=false", "trainer.epochs=null"]
    m = run_task(compose_config([*base, "trainer.steps=3"]), tmp_path)
    assert m["steps"] == 3 and m["privacy"]["epsilon_spent"] > 0
    assert "privacy.secure_rng" in m["privacy"]["mechanism_randomness"]
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert "mechanism_rng" not in state and state["privacy_settings"]["privacy.secure_rng"] is True
    m = run_task(compose_config([*base, "trainer.steps=5", "resume=true"]), tmp_path)
    assert m["steps"] == 5
