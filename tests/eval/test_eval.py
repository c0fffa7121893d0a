"""Evaluators: Frechet distance, FID feature path (random-init Inception, no network), cached
real statistics, downstream classifiers on scikit-learn digits, W2 between point clouds."""

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from dpgen.eval import (FID_WEIGHTS_FILE, WEIGHTS_ENV, FIDUnavailable, InceptionFeatures,
                        activation_statistics, compute_fid, evaluate_downstream,
                        fid_from_activations, find_fid_weights, flatten_results,
                        frechet_distance, holdout_split, load_statistics, real_statistics,
                        stats_cache_path, w2_distance, w2_distance_with_method)
from dpgen.eval.fid import content_digest


@pytest.fixture(scope="module", autouse=True)
def _single_thread():
    """One intra-op thread: on a busy 2-core machine, 2 torch/BLAS threads are ~10x slower."""
    from threadpoolctl import threadpool_limits
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(n)


# ------------------------------------------------------------------------------------------
# Frechet distance
# ------------------------------------------------------------------------------------------

def _rand_cov(rng, d):
    a = rng.normal(size=(d, d))
    return a @ a.T + 0.1 * np.eye(d)


def test_frechet_known_answers():
    rng = np.random.default_rng(0)
    d = 6
    mu, s = rng.normal(size=d), _rand_cov(rng, d)
    assert frechet_distance(mu, s, mu, s) == pytest.approx(0.0, abs=1e-8)
    m = rng.normal(size=d)
    assert frechet_distance(np.zeros(d), np.eye(d), m, np.eye(d)) == pytest.approx(m @ m)
    a, b = rng.uniform(0.1, 3, d), rng.uniform(0.1, 3, d)
    want = float(((np.sqrt(a) - np.sqrt(b)) ** 2).sum() + m @ m)
    assert frechet_distance(m, np.diag(a), np.zeros(d), np.diag(b)) == pytest.approx(want)
    # 1-d: (m1 - m2)^2 + (s1 - s2)^2 with standard deviations s
    assert frechet_distance(1.0, 4.0, -1.0, 9.0) == pytest.approx(4.0 + 1.0)


def _reference_frechet(mu1, s1, mu2, s2):
    """pytorch-fid's Frechet distance where it runs; where it does not (it calls
    ``scipy.linalg.sqrtm(..., disp=False)``, a keyword newer scipy removed), the same formula with
    scipy's sqrtm called without it: tr sqrtm(S1 S2), a route independent of dpgen's eigenvalues."""
    import scipy.linalg

    try:
        from pytorch_fid.fid_score import calculate_frechet_distance

        return calculate_frechet_distance(mu1, s1, mu2, s2)
    except TypeError as e:
        if "disp" not in str(e):
            raise
    diff = mu1 - mu2
    covmean = scipy.linalg.sqrtm(s1 @ s2)
    return float(diff @ diff + np.trace(s1) + np.trace(s2) - 2.0 * np.trace(covmean).real)


def test_frechet_matches_pytorch_fid_and_is_symmetric():
    rng = np.random.default_rng(1)
    d = 8
    mu1, mu2 = rng.normal(size=d), rng.normal(size=d)
    s1, s2 = _rand_cov(rng, d), _rand_cov(rng, d)
    ours = frechet_distance(mu1, s1, mu2, s2)
    assert ours == pytest.approx(_reference_frechet(mu1, s1, mu2, s2), rel=1e-6)
    assert ours == pytest.approx(frechet_distance(mu2, s2, mu1, s1), rel=1e-8)
    # rank-deficient covariances (fewer samples than dimensions)
    a1, a2 = rng.normal(size=(3, d)), rng.normal(size=(4, d))
    r1, r2 = activation_statistics(a1), activation_statistics(a2)
    assert frechet_distance(*r1, *r2) == pytest.approx(_reference_frechet(*r1, *r2), rel=1e-4)
    assert frechet_distance(*r1, *r1) == pytest.approx(0.0, abs=1e-9)


def test_reference_frechet_survives_a_scipy_without_disp(monkeypatch):
    """The CUDA machine's newer scipy broke pytorch-fid's sqrtm call; dpgen's FID never used it."""
    import scipy.linalg

    real = scipy.linalg.sqrtm

    def sqrtm_without_disp(a, **kw):
        if "disp" in kw:
            raise TypeError("sqrtm() got an unexpected keyword argument 'disp'")
        return real(a, **kw)

    monkeypatch.setattr(scipy.linalg, "sqrtm", sqrtm_without_disp)
    rng = np.random.default_rng(3)
    mu1, mu2, s1, s2 = rng.normal(size=5), rng.normal(size=5), _rand_cov(rng, 5), _rand_cov(rng, 5)
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(_reference_frechet(mu1, s1, mu2, s2), rel=1e-6)


@pytest.mark.parametrize("n1,n2,d", [(7, 12, 40), (60, 50, 5)])
def test_fid_from_activations_equals_statistics_route(n1, n2, d):
    rng = np.random.default_rng(2)
    a1 = rng.normal(size=(n1, d))
    a2 = rng.normal(size=(n2, d)) * 1.5 + 0.3
    want = frechet_distance(*activation_statistics(a1), *activation_statistics(a2))
    assert fid_from_activations(a1, a2) == pytest.approx(want, rel=1e-7, abs=1e-9)
    assert fid_from_activations(a1, a1) == pytest.approx(0.0, abs=1e-9)


def test_frechet_bad_inputs():
    with pytest.raises(ValueError):
        frechet_distance(np.zeros(3), np.eye(3), np.zeros(2), np.eye(2))
    with pytest.raises(ValueError):
        frechet_distance(np.zeros(2), np.eye(2), np.zeros(2), np.full((2, 2), np.nan))
    with pytest.raises(ValueError):
        activation_statistics(np.zeros((1, 4)))


# ------------------------------------------------------------------------------------------
# Inception feature path (random weights: no download, no weights file)
# ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rand_ext():
    return InceptionFeatures("random", device="cpu", batch_size=4, seed=0)


def test_feature_path_gray_and_rgb_shapes(rand_ext):
    g = torch.Generator().manual_seed(0)
    gray = torch.rand(3, 1, 28, 28, generator=g)        # MNIST-like, NCHW
    rgb = torch.rand(3, 32, 32, 3, generator=g).numpy()  # CelebA32-like, channels-last numpy
    flat = torch.rand(2, 64, generator=g)               # flattened 8x8 digits
    a1, a2, a3 = rand_ext(gray), rand_ext(rgb), rand_ext(flat)
    assert a1.shape == (3, 2048) and a2.shape == (3, 2048) and a3.shape == (2, 2048)
    for a in (a1, a2, a3):
        assert np.all(np.isfinite(a)) and a.std() > 0
    assert rand_ext.metric_name == "fid_random_init" and not rand_ext.pretrained
    fid = fid_from_activations(a1, a2)
    assert math.isfinite(fid) and fid > 0
    assert fid_from_activations(a1, a1) == pytest.approx(0.0, abs=1e-6 * max(1.0, fid))
    # a grayscale image gives the same features as its 3-channel repetition
    np.testing.assert_allclose(rand_ext(gray[:1]), rand_ext(gray[:1].repeat(1, 3, 1, 1)),
                               rtol=1e-5, atol=1e-6)


def test_feature_path_matches_pytorch_fid_inceptionv3(rand_ext, monkeypatch):
    """Our pool3 path == pytorch_fid.inception.InceptionV3 (resize 299, [-1,1], block 3)."""
    import pytorch_fid.inception as pfi
    monkeypatch.setattr(pfi, "fid_inception_v3", lambda: rand_ext.inception)
    ref = pfi.InceptionV3([3]).eval()
    x = torch.rand(2, 3, 20, 24, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = ref(x)[0].flatten(1).double().numpy()
    np.testing.assert_allclose(rand_ext(x), want, rtol=1e-5, atol=1e-6)


def test_compute_fid_self_is_zero_and_stats_route(rand_ext, tmp_path):
    x = torch.rand(3, 1, 16, 16, generator=torch.Generator().manual_seed(4))  # USPS-sized
    assert compute_fid(x, x, extractor=rand_ext) == pytest.approx(0.0, abs=1e-6)
    mu, sigma = real_statistics("usps_test", x, tmp_path, extractor=rand_ext)
    assert compute_fid(x, real_stats=(mu, sigma), extractor=rand_ext) == pytest.approx(0.0,
                                                                                       abs=1e-6)
    with pytest.raises(ValueError):
        compute_fid(x, extractor=rand_ext)
    with pytest.raises(ValueError):
        compute_fid(x, x, real_stats=(mu, sigma), extractor=rand_ext)


def test_real_statistics_cache_round_trip(rand_ext, tmp_path):
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(5))
    mu, sigma = real_statistics("digits/test", x, tmp_path, extractor=rand_ext)
    path = stats_cache_path("digits/test", 3, rand_ext.weights_name, tmp_path, content_digest(x))
    assert path.is_file() and path.parent == tmp_path
    assert "digits_test" in path.name and "n3" in path.name and "random-init-seed0" in path.name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left
    mu_l, sigma_l, meta = load_statistics(path)
    np.testing.assert_array_equal(mu, mu_l)
    np.testing.assert_array_equal(sigma, sigma_l)
    assert meta == {"name": "digits/test", "n": 3, "weights": "random-init-seed0", "digest": content_digest(x)}
    # statistics from other weights are refused
    other = tmp_path / "other.npz"
    np.savez(other, mu=mu, sigma=sigma, weights=np.str_(FID_WEIGHTS_FILE))
    with pytest.raises(ValueError, match="weights"):
        compute_fid(x, real_stats=other, extractor=rand_ext)
    assert compute_fid(x, real_stats=path, extractor=rand_ext) == pytest.approx(0.0, abs=1e-6)


def test_an_interrupted_feature_pass_continues_from_its_saved_chunks(rand_ext, tmp_path):
    """resume_dir: features saved every chunk; a second call reads the saved chunks instead of computing them
    again (a saved chunk of sentinel values comes back as it was), computes the rest, equals the plain pass, and
    leaves nothing behind; other images (another digest) or a chunk of the wrong shape are not read."""
    x = torch.rand(10, 1, 8, 8, generator=torch.Generator().manual_seed(6))
    want = rand_ext(x)
    part = tmp_path / "fid_partial"
    np.testing.assert_array_equal(rand_ext(x, resume_dir=part, chunk=4), want)
    assert not part.exists()  # removed once complete

    key = f"{content_digest(x)}_{rand_ext.weights_name}"
    (part / key).mkdir(parents=True)
    np.save(part / key / "0.npy", np.full((4, 2048), 7.0, np.float32))   # "computed before the interruption"
    np.save(part / key / "4.npy", np.full((3, 2048), 9.0, np.float32))   # a chunk of the wrong length: ignored
    got = rand_ext(x, resume_dir=part, chunk=4)
    assert (got[:4] == 7.0).all()                      # read back, not recomputed
    np.testing.assert_array_equal(got[4:], want[4:])   # the rest computed
    assert not part.exists()

    (part / key).mkdir(parents=True)
    np.save(part / key / "0.npy", np.full((4, 2048), 7.0, np.float32))
    np.testing.assert_array_equal(rand_ext(x[1:], resume_dir=part, chunk=4), want[1:])  # other images
    assert (part / key / "0.npy").is_file()            # another pass's chunks are left alone


def test_feature_path_bad_inputs(rand_ext):
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        rand_ext(torch.rand(2, 1, 8, 8) * 2 - 1)
    with pytest.raises(ValueError, match="channel"):
        rand_ext(torch.rand(2, 2, 8, 8))
    with pytest.raises(ValueError):
        rand_ext(torch.rand(0, 1, 8, 8))
    with pytest.raises(ValueError):
        rand_ext(torch.rand(2, 1, 8, 8).fill_(float("nan")))


def test_missing_weights_raise_fid_unavailable(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    hub = tmp_path / "hub"
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(hub))
    monkeypatch.setenv(WEIGHTS_ENV, str(empty))
    with pytest.raises(FIDUnavailable) as ei:
        find_fid_weights()
    msg = str(ei.value)
    assert isinstance(ei.value, RuntimeError)
    assert FID_WEIGHTS_FILE in msg and str(empty) in msg and str(hub / "checkpoints") in msg
    assert WEIGHTS_ENV in msg and "http" in msg
    with pytest.raises(FIDUnavailable, match=FID_WEIGHTS_FILE):
        InceptionFeatures(device="cpu")
    with pytest.raises(FIDUnavailable, match=FID_WEIGHTS_FILE):
        compute_fid(torch.rand(2, 1, 8, 8), torch.rand(2, 1, 8, 8), device="cpu")
    with pytest.raises(FIDUnavailable, match=FID_WEIGHTS_FILE):
        find_fid_weights(tmp_path / "nowhere.pth")


def test_weights_lookup_order(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    (hub / "checkpoints").mkdir(parents=True)
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(hub))
    monkeypatch.delenv(WEIGHTS_ENV, raising=False)
    in_hub = hub / "checkpoints" / FID_WEIGHTS_FILE
    in_hub.write_bytes(b"x")
    assert find_fid_weights() == in_hub
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    (env_dir / FID_WEIGHTS_FILE).write_bytes(b"x")
    monkeypatch.setenv(WEIGHTS_ENV, str(env_dir))
    assert find_fid_weights() == env_dir / FID_WEIGHTS_FILE
    explicit = tmp_path / "my.pth"
    explicit.write_bytes(b"x")
    assert find_fid_weights(explicit) == explicit


@pytest.mark.slow
def test_pretrained_loading_path_with_saved_state_dict(rand_ext, tmp_path, monkeypatch):
    """A state dict saved under the FID file name in the hub cache is found and loaded."""
    ckpt = tmp_path / "hub" / "checkpoints"
    ckpt.mkdir(parents=True)
    torch.save(rand_ext.inception.state_dict(), ckpt / FID_WEIGHTS_FILE)
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    monkeypatch.delenv(WEIGHTS_ENV, raising=False)
    ext = InceptionFeatures(device="cpu")
    assert ext.pretrained and ext.metric_name == "fid" and ext.weights_name == FID_WEIGHTS_FILE
    x = torch.rand(2, 1, 8, 8)
    np.testing.assert_allclose(ext(x), rand_ext(x), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------
# Downstream classifiers (digits: real train split stands in for the synthetic set)
# ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    return train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)


def test_digits_accuracies(digits):
    xtr, xte, ytr, yte = digits
    res = evaluate_downstream(xtr, ytr, xte, yte, max_epochs=15, patience=5, batch_size=64,
                              seed=0, device="cpu")
    assert res["n_train"] == len(xtr) and res["n_test"] == len(xte) and res["n_classes"] == 10
    assert res["n_holdout"] == round(0.1 * len(xtr)) and res["n_fit"] + res["n_holdout"] == len(xtr)
    assert res["image_shape"] == [1, 8, 8]
    assert res["logreg"]["test_acc"] > 90 and res["logreg"]["converged"]
    assert res["mlp"]["test_acc"] > 85
    assert res["cnn"]["test_acc"] > 80
    for m in ("mlp", "cnn"):
        assert 1 <= res[m]["best_epoch"] <= res[m]["epochs"] <= 15
        assert 0 <= res[m]["holdout_acc"] <= 100
    flat = flatten_results(res)
    assert flat["mlp_test_acc"] == res["mlp"]["test_acc"] and "logreg_holdout_acc" not in flat
    print({m: round(res[m]["test_acc"], 2) for m in ("logreg", "mlp", "cnn")})


def test_test_set_never_influences_training(digits):
    """Shuffled test labels / permuted test inputs: identical holdout curve and kept epoch."""
    xtr, xte, ytr, yte = digits
    kw = dict(models=("mlp",), max_epochs=30, patience=2, batch_size=64, seed=3, device="cpu")
    a = evaluate_downstream(xtr, ytr, xte, yte, **kw)
    rng = np.random.default_rng(0)
    b = evaluate_downstream(xtr, ytr, xte[rng.permutation(len(xte))], rng.permutation(yte), **kw)
    for key in ("holdout_acc", "epochs", "best_epoch"):
        assert a["mlp"][key] == b["mlp"][key]
    assert b["mlp"]["test_acc"] < 30 < a["mlp"]["test_acc"]  # labels broken -> ~chance
    # early stopping happened (patience 2) and the kept epoch is within patience of the end
    assert a["mlp"]["epochs"] - a["mlp"]["best_epoch"] <= 2


def test_deterministic_and_rng_state_restored(digits):
    xtr, xte, ytr, yte = digits
    kw = dict(models=("mlp", "cnn"), max_epochs=2, patience=5, batch_size=128, seed=7,
              device="cpu")
    state = torch.get_rng_state()
    a = evaluate_downstream(torch.from_numpy(xtr), torch.from_numpy(ytr), xte, yte, **kw)
    assert torch.equal(state, torch.get_rng_state())
    b = evaluate_downstream(xtr.reshape(-1, 1, 8, 8), ytr, xte.reshape(-1, 8, 8), yte, **kw)
    for m in ("mlp", "cnn"):
        assert a[m]["test_acc"] == b[m]["test_acc"]
        assert a[m]["holdout_acc"] == b[m]["holdout_acc"]


def test_holdout_split_is_stratified_and_disjoint():
    y = np.repeat(np.arange(5), 20)
    fit, hold = holdout_split(y, 0.1, seed=0)
    assert len(hold) == 10 and len(fit) == 90
    assert set(fit).isdisjoint(hold) and set(fit) | set(hold) == set(range(100))
    assert sorted(np.bincount(y[hold]).tolist()) == [2] * 5


def test_cnn_rgb_and_onehot_labels():
    g = np.random.default_rng(0)
    x = g.uniform(size=(40, 3, 16, 16)).astype(np.float32)
    y = np.eye(3)[g.integers(0, 3, 40)]  # one-hot labels
    y[:3] = np.eye(3)  # all classes present
    res = evaluate_downstream(x, y, x[:10], y[:10].argmax(1), models=("cnn",), max_epochs=1,
                              device="cpu")
    assert res["image_shape"] == [3, 16, 16] and res["n_classes"] == 3
    assert 0 <= res["cnn"]["test_acc"] <= 100 and res["cnn"]["epochs"] == 1


def test_downstream_bad_inputs(digits):
    xtr, xte, ytr, yte = digits
    ok = dict(models=("logreg",), device="cpu")
    with pytest.raises(ValueError, match="different lengths"):
        evaluate_downstream(xtr, ytr[:-1], xte, yte, **ok)
    with pytest.raises(ValueError, match="different lengths"):
        evaluate_downstream(xtr, ytr, xte, yte[:-1], **ok)
    with pytest.raises(ValueError, match="at least 2 classes"):
        evaluate_downstream(xtr, np.zeros_like(ytr), xte, yte, **ok)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        evaluate_downstream(xtr * 16, ytr, xte, yte, **ok)
    with pytest.raises(ValueError, match="differ in size"):
        evaluate_downstream(xtr, ytr, xte[:, :32], yte, **ok)
    with pytest.raises(ValueError, match="subset"):
        evaluate_downstream(xtr, ytr, xte, yte, models=("svm",))
    with pytest.raises(ValueError, match="n_classes"):
        evaluate_downstream(xtr, ytr, xte, yte, n_classes=5, **ok)
    with pytest.raises(ValueError, match="integer"):
        evaluate_downstream(xtr, ytr + 0.5, xte, yte, **ok)
    with pytest.raises(ValueError, match="holdout"):
        evaluate_downstream(xtr, ytr, xte, yte, holdout=1.0, **ok)
    with pytest.raises(ValueError, match="8x8"):
        evaluate_downstream(np.zeros((10, 1, 4, 4)), np.arange(10) % 2, np.zeros((4, 1, 4, 4)),
                            np.arange(4) % 2, models=("cnn",), device="cpu")
    with pytest.raises(ValueError, match="image"):
        evaluate_downstream(np.zeros((10, 50)), np.arange(10) % 2, np.zeros((4, 50)),
                            np.arange(4) % 2, models=("cnn",), device="cpu")


# ------------------------------------------------------------------------------------------
# W2 between point clouds
# ------------------------------------------------------------------------------------------

def test_w2_exact_and_gaussian():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 3))
    shift = np.array([1.0, -2.0, 0.5])
    # translation: exact and gaussian both give ||shift||
    v, meth = w2_distance_with_method(x, x + shift)
    assert meth == "exact" and v == pytest.approx(np.linalg.norm(shift), rel=1e-6)
    assert w2_distance(x, x + shift, method="gaussian") == pytest.approx(np.linalg.norm(shift))
    # permutation invariance, zero on itself
    assert w2_distance(x, x[rng.permutation(50)]) == pytest.approx(0.0, abs=1e-6)
    # Gelbrich: the Gaussian value is a lower bound on the exact empirical W2
    y = rng.exponential(size=(50, 3))
    assert w2_distance(x, y, method="gaussian") <= w2_distance(x, y, method="exact") + 1e-9
    # 1-d equal-size clouds: exact W2^2 = mean squared gap of sorted samples
    a, b = rng.normal(size=30), rng.uniform(size=30)
    want = math.sqrt(np.mean((np.sort(a) - np.sort(b)) ** 2))
    assert w2_distance(a[:, None], b[:, None]) == pytest.approx(want, rel=1e-6)
    assert w2_distance_with_method(x, y, exact_max=10)[1] == "gaussian"
    with pytest.raises(ValueError):
        w2_distance(x, y[:, :2])
    with pytest.raises(ValueError):
        w2_distance(x, y, method="sinkhorn")


def test_the_cnn_dropout_keeps_each_unit_with_probability_one_minus_p():
    from dpgen.eval.downstream import Dropout

    torch.manual_seed(0)
    d = Dropout(0.5)
    x = torch.ones(200_000)
    out = d(x)
    kept = (out != 0).float().mean().item()
    assert abs(kept - 0.5) < 4 * (0.25 / 200_000) ** 0.5  # binomial, 4 standard errors
    assert set(torch.unique(out).tolist()) <= {0.0, 2.0}  # kept units scaled by 1 / (1 - p)
    assert abs(out.mean().item() - 1.0) < 0.01
    d.eval()
    assert torch.equal(d(x), x)
    assert torch.equal(Dropout(1.0)(x), torch.zeros_like(x)) and torch.equal(Dropout(0.0)(x), x)


def test_classifier_adam_is_fused_adam_with_the_same_update():
    """The downstream classifiers' optimizer is torch's fused Adam on CPU, and its steps follow the same
    rule as the for-loop Adam it replaced (to float rounding)."""
    from dpgen.eval.downstream import MLP, classifier_adam

    torch.manual_seed(0)
    a, b = MLP(20, 3, hidden=8), MLP(20, 3, hidden=8)
    b.load_state_dict(a.state_dict())
    opt_a, opt_b = classifier_adam(a, lr=1e-2), torch.optim.Adam(b.parameters(), lr=1e-2)
    assert opt_a.defaults["fused"] is True
    x, y = torch.randn(64, 20), torch.randint(0, 3, (64,))
    for _ in range(20):
        for m, o in ((a, opt_a), (b, opt_b)):
            o.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(m(x), y).backward()
            o.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-4, atol=1e-5)


def test_cnn_pools_before_its_relu_with_the_same_outputs_and_gradients():
    """The CNN applies each ReLU after its max-pool (a quarter of the values); as ReLU is non-decreasing this is
    the protocol's Conv -> ReLU -> MaxPool exactly: the same outputs and gradients in training mode (dropout
    masks from the same seed) as the ReLU-first order, bit for bit."""
    from dpgen.eval.downstream import CNN

    torch.manual_seed(0)
    a = CNN((1, 28, 28), 10)
    b = copy.deepcopy(a)
    f = b.features
    f[1], f[2], f[5], f[6] = nn.ReLU(inplace=True), nn.MaxPool2d(2), nn.ReLU(inplace=True), nn.MaxPool2d(2)
    assert isinstance(a.features[1], nn.MaxPool2d) and isinstance(a.features[2], nn.ReLU)
    x = torch.rand(16, 1, 28, 28) - 0.5  # negative pixels: windows whose maximum the ReLU clips to 0
    outs = []
    for m in (a, b):
        m.train()
        torch.manual_seed(1)
        out = m(x)
        out.square().sum().backward()
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa.grad, pb.grad)


def test_mlp_closed_form_step_matches_autograd():
    """The MLP's closed-form backward (``MLPStep``) gives autograd's gradients, including a unit whose ReLU
    input is exactly 0, a repeated sample and a short last batch, and twenty of its Adam steps follow
    autograd's to rounding; a wrong sign or a missing 1 / m in the softmax gradient fails the first check."""
    from types import SimpleNamespace

    from dpgen.eval.downstream import MLP, MLPStep, classifier_adam

    torch.manual_seed(0)
    a, b = MLP(20, 3, hidden=8), MLP(20, 3, hidden=8)
    x, y = torch.randn(64, 20), torch.randint(0, 3, (64,))
    x[1] = x[0]
    with torch.no_grad():  # a hidden unit whose pre-activation is exactly 0 for every sample
        a.net[1].weight[0] = 0.0
        a.net[1].bias[0] = 0.0
    b.load_state_dict(a.state_dict())
    for m in (64, 37):
        MLPStep(a, SimpleNamespace(step=lambda: None))(x[:m], y[:m])  # gradients only
        b.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(b(x[:m]), y[:m]).backward()
        for pa, pb in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-5, atol=1e-7)

    opt_a, opt_b = classifier_adam(a, lr=1e-2), classifier_adam(b, lr=1e-2)
    step = MLPStep(a, opt_a)
    for i in range(20):
        m = 64 if i % 2 == 0 else 37
        step(x[:m], y[:m])
        opt_b.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(b(x[:m]), y[:m]).backward()
        opt_b.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-4, atol=1e-5)


def test_holdout_evaluation_builds_no_autograd_graph():
    """The per-epoch holdout evaluation runs without autograd (a misplaced decorator once dropped it)."""
    from dpgen.eval.downstream import MLP, _evaluate

    seen = []
    model = MLP(4, 2, hidden=3)
    model.register_forward_hook(lambda m, i, o: seen.append(o.requires_grad))
    acc, loss = _evaluate(model, torch.randn(10, 4), torch.randint(0, 2, (10,)))
    assert seen == [False] and 0 <= acc <= 100 and loss > 0
def test_inception_pass_runs_without_tf32_and_restores_the_settings():
    """On a GPU, TF32 convolutions (torch's default) round the products' inputs to ~1e-3 relative: the pass turns
    TF32 off for itself and puts the user's settings back, an exception included."""
    import torch

    from dpgen.eval.fid import full_float32

    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        with full_float32():
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
        with pytest.raises(RuntimeError):
            with full_float32():
                raise RuntimeError("inside")
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


# ------------------------------------------------------------------------------------------
# The TF1 FID code's resize (dpgen table fid_real_data_tf1_resize)
# ------------------------------------------------------------------------------------------

def test_tf1_resize_matrix_is_tensorflow_1s_legacy_bilinear():
    """Output pixel i reads input position i * n_in / n_out (no half-pixel centres), its upper neighbour clamped:
    checked against the closed form of a 2x upsample and against grid_sample at those positions (another code
    path: torch's sampler with align_corners=True reads pixel p at normalised 2 p / (n - 1) - 1)."""
    import torch.nn.functional as F

    from dpgen.eval.fid import tf1_resize_matrix

    a = tf1_resize_matrix(3, 6)
    x = torch.tensor([1.0, 5.0, 7.0], dtype=torch.float64)
    torch.testing.assert_close(a @ x, torch.tensor([1.0, 3.0, 5.0, 6.0, 7.0, 7.0], dtype=torch.float64))
    torch.testing.assert_close(tf1_resize_matrix(7, 7), torch.eye(7, dtype=torch.float64))
    for n_in, n_out in [(28, 299), (8, 299), (32, 17)]:
        a = tf1_resize_matrix(n_in, n_out)
        torch.testing.assert_close(a.sum(1), torch.ones(n_out, dtype=torch.float64))
        img = torch.rand(1, 1, n_in, n_in, generator=torch.Generator().manual_seed(n_in), dtype=torch.float64)
        pos = torch.arange(n_out, dtype=torch.float64) * n_in / n_out
        g = 2 * pos / (n_in - 1) - 1
        grid = torch.stack(torch.meshgrid(g, g, indexing="xy"), -1)[None]
        want = F.grid_sample(img, grid, mode="bilinear", padding_mode="border", align_corners=True)
        torch.testing.assert_close(a @ img[0, 0] @ a.T, want[0, 0])
    # 28 -> 299 is not pytorch-fid's half-pixel resize: the two conventions differ by whole grey levels
    img = torch.rand(1, 1, 28, 28, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    a = tf1_resize_matrix(28, 299)
    half = F.interpolate(img, size=(299, 299), mode="bilinear", align_corners=False)[0, 0]
    assert (a @ img[0, 0] @ a.T - half).abs().max() > 0.1
    with pytest.raises(ValueError, match="n_in=0"):
        tf1_resize_matrix(0, 299)


def test_tf1_extractor_resizes_and_scales_as_tf_and_keys_its_cache_apart(rand_ext):
    """resize="tf1": the same network fed tf1_resize_matrix's images scaled by (255 x - 128) / 128; its weights
    name (the cache key of the test split's features) differs from the default extractor's."""
    from dpgen.eval.fid import tf1_resize_matrix

    ext = InceptionFeatures("random", device="cpu", batch_size=4, seed=0, resize="tf1")
    assert ext.weights_name == rand_ext.weights_name + "+tf1-resize"
    x = torch.rand(2, 1, 28, 28, generator=torch.Generator().manual_seed(5))
    a = tf1_resize_matrix(28, 299).float()
    big = torch.einsum("ph,nchw,qw->ncpq", a, x.repeat(1, 3, 1, 1), a)
    with torch.no_grad():
        want = rand_ext.model.blocks((255 * big - 128) / 128).flatten(1).double().numpy()
    np.testing.assert_allclose(ext(x), want, rtol=1e-4, atol=1e-5)
    assert np.abs(ext(x) - rand_ext(x)).max() > 1e-3
    with pytest.raises(ValueError, match="resize='bicubic'"):
        InceptionFeatures("random", device="cpu", resize="bicubic")
