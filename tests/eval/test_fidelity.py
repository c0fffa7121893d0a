"""Fidelity beside accuracy (issue 53): the class-mean baseline, the intra-class spread ratio, precision / recall /
density / coverage (the prdc package against the papers' definitions) and the content-keyed FID feature cache."""

import itertools

import numpy as np
import pytest
import torch

from dpgen.eval.fidelity import class_mean_baseline, intra_class_spread, prdc, set_fidelity, spread_ratio


def _clusters(n_per=50, seed=0, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    y = torch.arange(3).repeat_interleave(n_per)
    return centres[y] + spread * torch.randn(len(y), 2, generator=g), y


def test_class_mean_baseline_is_the_nearest_synthetic_mean():
    x, y = _clusters()
    # synthetic class means exactly at the centres: every well-separated test point is classified right
    means = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    r = class_mean_baseline(means, torch.arange(3), x, y)
    assert r == {"test_acc": 100.0, "classes": 3}
    # class 2's synthetic mean sits on class 1's centre: class 2 is never predicted, class 1 wins ties by index
    bad = torch.tensor([[0.0, 0.0], [3.0, 0.0], [3.0, 0.0]])
    r = class_mean_baseline(bad, torch.arange(3), x, y)
    assert r["test_acc"] == pytest.approx(100.0 * 2 / 3)
    # by hand on four points: means (0, 0) and (2, 0); the test point (0.9, 0) is nearer class 0's mean
    r = class_mean_baseline(torch.tensor([[-1.0, 0], [1, 0], [1, 0], [3, 0]]), torch.tensor([0, 0, 1, 1]),
                            torch.tensor([[0.9, 0.0], [1.1, 0.0]]), torch.tensor([1, 1]))
    assert r["test_acc"] == 50.0
    with pytest.raises(ValueError, match="labels"):
        class_mean_baseline(means, torch.arange(2), x, y)


def test_intra_class_spread_is_the_mean_pairwise_distance():
    x = torch.tensor([[0.0], [1.0], [3.0], [10.0], [10.0]])
    y = torch.tensor([0, 0, 0, 1, 1])
    s = intra_class_spread(x, y)
    assert s[0] == pytest.approx((1 + 3 + 2) / 3) and s[1] == pytest.approx(0.0)
    # a synthetic set that is the real one shrunk by half towards each class mean: ratio 0.5 exactly
    xr, yr = _clusters()
    means = torch.stack([xr[yr == c].mean(0) for c in range(3)])
    xs = means[yr] + 0.5 * (xr - means[yr])
    r = spread_ratio(xs, yr, xr, yr)
    assert r["ratio"] == pytest.approx(0.5) and all(v == pytest.approx(0.5) for v in r["per_class"].values())
    # ten templates (every sample its class mean): spread 0, and their class means alone classify as well
    t = set_fidelity(means[yr], yr, xr, yr)
    assert t["spread_ratio"] == 0.0
    assert t["class_mean"]["test_acc"] == class_mean_baseline(xr, yr, xr, yr)["test_acc"]


def _brute_prdc(real, fake, k):
    """The definitions, loop by loop: Kynkaenniemi et al. 2019 (precision, recall: k-NN balls of the other
    set's samples) and Naeem et al. 2020 (density, coverage: k-NN balls of the real samples)."""
    d = lambda a, b: float(np.linalg.norm(a - b))  # noqa: E731

    def radius(s, i):
        return sorted(d(s[i], s[j]) for j in range(len(s)) if j != i)[k - 1]

    r_real = [radius(real, i) for i in range(len(real))]
    r_fake = [radius(fake, j) for j in range(len(fake))]
    precision = np.mean([any(d(f, real[i]) < r_real[i] for i in range(len(real))) for f in fake])
    recall = np.mean([any(d(r, fake[j]) < r_fake[j] for j in range(len(fake))) for r in real])
    density = np.sum([[d(f, real[i]) < r_real[i] for i in range(len(real))] for f in fake]) / (k * len(fake))
    coverage = np.mean([min(d(real[i], f) for f in fake) < r_real[i] for i in range(len(real))])
    return {"precision": precision, "recall": recall, "density": density, "coverage": coverage}


@pytest.mark.parametrize("k, shift", itertools.product([1, 3], [0.0, 0.7]))
def test_prdc_matches_the_papers_definitions(k, shift):
    rng = np.random.default_rng(k)
    real = rng.normal(size=(23, 4)).astype(np.float32)
    fake = (rng.normal(size=(19, 4)) * 0.6 + shift).astype(np.float32)
    got = prdc(real, fake, k=k)
    want = _brute_prdc(real.astype(np.float64), fake.astype(np.float64), k)
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=1e-9), key


def test_prdc_tells_templates_from_a_matching_distribution():
    rng = np.random.default_rng(0)
    real = rng.normal(size=(400, 8))
    same = prdc(real, rng.normal(size=(400, 8)), k=5)
    templates = prdc(real, np.repeat(rng.normal(size=(10, 8)) * 0.1, 40, axis=0), k=5)
    assert same["recall"] > 0.8 and same["coverage"] > 0.8 and 0.7 < same["density"] < 1.3
    assert templates["recall"] < 0.1 and templates["coverage"] < 0.2
    ident = prdc(real, real, k=5)  # a set against itself: each point in its own ball, k points a ball
    assert ident["precision"] == 1.0 and ident["recall"] == 1.0 and ident["coverage"] == 1.0
    assert ident["density"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="more than k"):
        prdc(real[:5], real[:5], k=5)


def test_real_features_are_cached_by_content(tmp_path):
    from dpgen.eval.fid import InceptionFeatures, content_digest, real_features, real_statistics

    ext = InceptionFeatures("random", device="cpu", batch_size=8)
    x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    a = real_features("digits_test", x, tmp_path, extractor=ext)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and any(f.startswith("fid_features_digits_test_n4_") for f in files)
    assert all(content_digest(x) in f for f in files)
    calls = []
    orig = ext.__call__

    class Spy:  # the second read is the cache's: no feature pass
        def __getattr__(self, name):
            return getattr(ext, name)

        def __call__(self, *args, **kwargs):
            calls.append(1)
            return orig(*args, **kwargs)

    spy = Spy()
    np.testing.assert_allclose(real_features("digits_test", x, tmp_path, extractor=spy), a, rtol=1e-6)
    mu, _ = real_statistics("digits_test", x, tmp_path, extractor=spy)
    assert not calls and mu.shape == (2048,)
    y = x.clone()
    y[0, 0, 0, 0] = 1 - y[0, 0, 0, 0]  # one pixel changed: another file, another feature pass
    real_features("digits_test", y, tmp_path, extractor=spy)
    assert calls and len(list(tmp_path.iterdir())) == 4
    assert content_digest((x * 255).round().to(torch.uint8)) == content_digest((x * 255).round() / 255)


def test_task_fid_is_true_false_or_auto():
    from dpgen.config import compose_config

    assert compose_config([]).task.fid == "auto"
    assert compose_config(["task.fid=false"]).task.fid is False
    with pytest.raises(Exception, match="task.fid"):
        compose_config(["task.fid=sometimes"])
    with pytest.raises(Exception, match="task.fid_samples"):
        compose_config(["task.fid_samples=1"])
