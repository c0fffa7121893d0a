"""Data loaders (dpgen.data): tiny files in each on-disk format, the real ../shared files, synthetic sets."""

import bz2
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch.utils.data import DataLoader

from dpgen.data import DATASETS, ArrayDataset, CelebADataset, as_tensors, dataset_info, load_dataset, read_idx, write_idx
from dpgen.data.base import resolve_data_root
from dpgen.data.images import mnist10k_split
from dpgen.utils.io import REPO_ROOT
from dpgen.utils.paper import shared_dir

SHARED_MNIST = shared_dir() / "data" / "mnist" / "t10k-images-idx3-ubyte.gz"
SHARED_USPS = shared_dir() / "data" / "usps" / "usps.h5"
needs_shared_mnist = pytest.mark.skipif(not SHARED_MNIST.exists(), reason="../shared/data/mnist absent")
needs_shared_usps = pytest.mark.skipif(not SHARED_USPS.exists(), reason="../shared/data/usps absent")


@pytest.fixture
def root(tmp_path, monkeypatch):
    """An empty data root, with no shared/ fallback (so only what a test writes is found)."""
    monkeypatch.setenv("DPGEN_SHARED", str(tmp_path / "no_shared"))
    monkeypatch.delenv("DPGEN_DATA_ROOT", raising=False)
    d = tmp_path / "data"
    d.mkdir()
    return d


def _check_items(ds, n, shape, num_classes, unit=True):
    assert len(ds) == n
    assert tuple(ds.shape) == tuple(shape)
    assert ds.num_classes == num_classes
    x, y = ds[0]
    assert x.dtype == torch.float32 and tuple(x.shape) == tuple(shape)
    assert torch.as_tensor(y).dtype == torch.int64
    X, Y = as_tensors(ds)
    assert X.shape == (n, *shape) and Y.shape == (n,) and Y.dtype == torch.int64
    if unit:
        assert float(X.min()) >= 0.0 and float(X.max()) <= 1.0
    return X, Y


# ------------------------------------------------------------------------------------------------
# registry, errors, data_root
# ------------------------------------------------------------------------------------------------


def test_unknown_dataset_names_it_and_lists_choices():
    with pytest.raises(ValueError, match="'nope'") as e:
        load_dataset("nope")
    assert "mnist10k" in str(e.value) and "digits" in str(e.value)
    with pytest.raises(ValueError, match="'nope'"):
        dataset_info("nope")


def test_unknown_option_and_split():
    with pytest.raises(ValueError, match="bogus"):
        load_dataset("digits", bogus=1)
    with pytest.raises(ValueError, match="split='validation'"):
        load_dataset("digits", split="validation")


def test_registry_matches_dataset_configs():
    confs = {p.stem: yaml.safe_load(p.read_text()) for p in (REPO_ROOT / "conf" / "dataset").glob("*.yaml")}
    # domain-adaptation problems (da_*) pair two registered datasets: tests/tasks/test_domain_adaptation.py
    problems = {k: v for k, v in confs.items() if k.startswith("da_")}
    confs = {k: v for k, v in confs.items() if k not in problems}
    assert set(confs) == set(DATASETS)
    for name, cfg in problems.items():
        assert {cfg["source"], cfg["target"]} <= set(DATASETS), name
    # the facts are in one place, the loader's entry: the YAMLs do not repeat them, the config reads them
    from dpgen.config import ConfigError, compose_config

    for name, cfg in confs.items():
        assert not {"shape", "dim", "num_classes"} & set(cfg), name
        if name in ("office31", "folder", "npz"):
            continue  # needs its domain option / your own data's path (tests/data/test_own_data.py)
        info = dataset_info(name)
        d = compose_config([f"dataset={name}"]).dataset
        assert (tuple(d.shape), d.dim, d.num_classes) == (tuple(info["shape"]), info["dim"], info["num_classes"]), name
    # they follow the options, and a stated value that disagrees with the loader is refused with the fix
    assert compose_config(["dataset=gaussians", "+dataset.options.d=12"]).dataset.dim == 12
    assert compose_config(["dataset=usps", "+dataset.options.resize=20", "+dataset.options.pad=4"]).dataset.shape == [1, 28, 28]
    with pytest.raises(ConfigError, match="dataset.num_classes=5 disagrees with mnist's loader.*leave dataset.num_classes out"):
        compose_config(["dataset=mnist", "dataset.num_classes=5"])


def test_dataset_info_follows_options():
    assert dataset_info("usps", resize=28)["shape"] == (1, 28, 28)
    assert dataset_info("usps", resize=20, pad=4)["shape"] == (1, 28, 28)
    assert dataset_info("gaussians")["shape"] == (5,)
    assert dataset_info("gaussians", d=50)["dim"] == 50
    assert dataset_info("celeba")["in_memory"] is False


def test_data_root_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv("DPGEN_DATA_ROOT", raising=False)
    assert resolve_data_root(None) == REPO_ROOT / "data"
    monkeypatch.setenv("DPGEN_DATA_ROOT", str(tmp_path))
    assert resolve_data_root(None) == tmp_path
    assert resolve_data_root(tmp_path / "x") == tmp_path / "x"
    assert resolve_data_root("data") in (REPO_ROOT / "data", (Path.cwd() / "data").resolve())


@pytest.mark.parametrize(
    "name, expected",
    [
        ("mnist", "MNIST/raw/train-images-idx3-ubyte"),
        ("fashion_mnist", "FashionMNIST/raw/train-images-idx3-ubyte"),
        ("mnist10k", "mnist/t10k-images-idx3-ubyte"),
        ("usps", "usps/usps.h5"),
        ("cifar10", "cifar-10-batches-py/data_batch_1"),
        ("svhn", "svhn/train_32x32.mat"),
        ("celeba", "celeba/list_attr_celeba.txt"),
        ("celeba32", "celeba/img_align_celeba"),
        ("visda", "visda/validation.npz"),
        ("office31", "office31/dslr.npz"),
    ],
)
def test_missing_files_name_the_expected_path(root, name, expected):
    with pytest.raises(FileNotFoundError) as e:
        load_dataset(name, data_root=root)
    msg = str(e.value)
    assert str(root / expected) in msg
    assert "docs/DATA.md" in msg


def test_missing_files_via_env_data_root(root, monkeypatch):
    monkeypatch.setenv("DPGEN_DATA_ROOT", str(root))
    with pytest.raises(FileNotFoundError, match="download=true"):
        load_dataset("mnist", split="test")


# ------------------------------------------------------------------------------------------------
# digits (embedded)
# ------------------------------------------------------------------------------------------------


def test_digits_split_and_range():
    tr, te = load_dataset("digits", "train"), load_dataset("digits", "test")
    Xtr, ytr = _check_items(tr, 1437, (1, 8, 8), 10)
    Xte, yte = _check_items(te, 360, (1, 8, 8), 10)
    assert isinstance(tr, ArrayDataset) and tr.name == "digits"
    assert float(Xtr.max()) == 1.0  # 16 / 16
    assert torch.bincount(yte, minlength=10).min() >= 35  # stratified
    assert torch.equal(load_dataset("digits").tensors[0], Xtr)  # deterministic
    batch = next(iter(DataLoader(tr, batch_size=7)))
    assert batch[0].shape == (7, 1, 8, 8) and batch[1].dtype == torch.int64


def test_digits_resize_and_helpers():
    ds = load_dataset("digits", "test", resize=16)
    assert ds.shape == (1, 16, 16)
    X, y = as_tensors(ds, max_items=5)
    assert X.shape == (5, 1, 16, 16) and y.shape == (5,)
    moved = ds.to("cpu")
    assert moved.name == "digits" and len(moved) == 360


# ------------------------------------------------------------------------------------------------
# idx files: mnist10k, MNIST, FashionMNIST
# ------------------------------------------------------------------------------------------------


def _fake_digits(n, seed=0, side=28):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, side, side), dtype=np.uint8), (np.arange(n) % 10).astype(np.uint8)


def test_idx_roundtrip_and_bad_magic(tmp_path):
    imgs, labels = _fake_digits(3)
    write_idx(tmp_path / "a.gz", imgs)
    write_idx(tmp_path / "b", labels)
    assert np.array_equal(read_idx(tmp_path / "a.gz"), imgs)
    assert np.array_equal(read_idx(tmp_path / "b"), labels)
    (tmp_path / "bad").write_bytes(b"\x12\x34\x08\x01\x00\x00\x00\x01\x00")
    with pytest.raises(ValueError, match="idx"):
        read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 9, 1, 2]))
    with pytest.raises(ValueError, match="truncated"):
        read_idx(tmp_path / "short")


def test_mnist10k_from_fake_gz_files(root):
    imgs, labels = _fake_digits(20)
    (root / "mnist").mkdir()
    write_idx(root / "mnist" / "t10k-images-idx3-ubyte.gz", imgs)
    write_idx(root / "mnist" / "t10k-labels-idx1-ubyte.gz", labels)
    tr = load_dataset("mnist10k", "train", data_root=root)
    te = load_dataset("mnist10k", "test", data_root=root)
    Xtr, ytr = _check_items(tr, 16, (1, 28, 28), 10)
    Xte, yte = _check_items(te, 4, (1, 28, 28), 10)
    itr, ite = mnist10k_split(20)
    assert np.intersect1d(itr, ite).size == 0 and len(itr) + len(ite) == 20
    assert torch.allclose(Xtr[:, 0], torch.from_numpy(imgs[itr]).float() / 255)
    assert torch.equal(yte, torch.from_numpy(labels[ite]).long())


def test_mnist10k_from_torchvision_raw_layout(root):
    imgs, labels = _fake_digits(10)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    write_idx(raw / "t10k-images-idx3-ubyte", imgs)  # uncompressed, as torchvision extracts them
    write_idx(raw / "t10k-labels-idx1-ubyte", labels)
    assert len(load_dataset("mnist10k", "train", data_root=root)) == 8


def test_mnist_and_fashion_mnist_torchvision_layout(root):
    for folder, name in (("MNIST", "mnist"), ("FashionMNIST", "fashion_mnist")):
        raw = root / folder / "raw"
        raw.mkdir(parents=True)
        for prefix, n in (("train", 12), ("t10k", 5)):
            imgs, labels = _fake_digits(n, seed=n)
            write_idx(raw / f"{prefix}-images-idx3-ubyte", imgs)
            write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", labels)
        X, y = _check_items(load_dataset(name, "train", data_root=root), 12, (1, 28, 28), 10)
        assert torch.equal(y, torch.arange(12) % 10)
        _check_items(load_dataset(name, "test", data_root=root), 5, (1, 28, 28), 10)
        assert load_dataset(name, "test", data_root=root, resize=32).shape == (1, 32, 32)


def test_download_true_goes_through_torchvision(root, monkeypatch):
    """download=True calls torchvision's class with download=True, then reads what it wrote."""
    import torchvision.datasets as tvd

    calls = []

    class FakeMNIST:
        def __init__(self, root, train=True, download=False):
            calls.append((root, train, download))
            raw = Path(root) / "MNIST" / "raw"
            raw.mkdir(parents=True, exist_ok=True)
            imgs, labels = _fake_digits(6)
            write_idx(raw / "t10k-images-idx3-ubyte", imgs)
            write_idx(raw / "t10k-labels-idx1-ubyte", labels)

    monkeypatch.setattr(tvd, "MNIST", FakeMNIST)
    with pytest.raises(FileNotFoundError):
        load_dataset("mnist", "test", data_root=root)  # download=False never calls it
    assert calls == []
    ds = load_dataset("mnist", "test", data_root=root, download=True)
    assert len(ds) == 6 and calls == [(str(root), False, True)]


@needs_shared_mnist
def test_mnist10k_real_shared_file(tmp_path, monkeypatch):
    monkeypatch.delenv("DPGEN_SHARED", raising=False)
    tr = load_dataset("mnist10k", "train", data_root=tmp_path)
    te = load_dataset("mnist10k", "test", data_root=tmp_path)
    Xtr, ytr = _check_items(tr, 8000, (1, 28, 28), 10)
    Xte, yte = _check_items(te, 2000, (1, 28, 28), 10)
    assert float(Xtr.max()) == 1.0 and float(Xtr.min()) == 0.0
    assert set(ytr.unique().tolist()) == set(range(10)) == set(yte.unique().tolist())
    assert torch.bincount(ytr).sum() + torch.bincount(yte).sum() == 10000
    again = load_dataset("mnist10k", "train", data_root=tmp_path)
    assert torch.equal(again.tensors[0], Xtr) and torch.equal(again.tensors[1], ytr)
    # the two parts are disjoint: no test image equals a train image with the same index set
    itr, ite = mnist10k_split(10000)
    assert np.intersect1d(itr, ite).size == 0
    assert str(SHARED_MNIST.parent) == tr.source


# ------------------------------------------------------------------------------------------------
# USPS
# ------------------------------------------------------------------------------------------------


def _write_usps_h5(path, n_train=9, n_test=4):
    import h5py

    rng = np.random.default_rng(1)
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        for g, n in (("train", n_train), ("test", n_test)):
            grp = f.create_group(g)
            grp.create_dataset("data", data=rng.uniform(0, 1, size=(n, 256)).astype(np.float32))
            grp.create_dataset("target", data=(np.arange(n) % 10).astype(np.int32))


def test_usps_h5(root):
    _write_usps_h5(root / "usps" / "usps.h5")
    tr = load_dataset("usps", "train", data_root=root)
    X, y = _check_items(tr, 9, (1, 16, 16), 10)
    assert tr.source == str(root / "usps" / "usps.h5")
    _check_items(load_dataset("usps", "test", data_root=root), 4, (1, 16, 16), 10)
    big = load_dataset("usps", "train", data_root=root, resize=28)
    _check_items(big, 9, (1, 28, 28), 10)
    framed = load_dataset("usps", "train", data_root=root, resize=20, pad=4)
    Xf, _ = _check_items(framed, 9, (1, 28, 28), 10)
    Xf = torch.as_tensor(Xf)
    assert float(Xf[..., :4, :].abs().max()) == 0.0 and float(Xf[..., -4:].abs().max()) == 0.0  # the border
    assert torch.allclose(Xf[..., 4:24, 4:24], as_tensors(load_dataset("usps", "train", data_root=root, resize=20))[0])
    with pytest.raises(ValueError, match="pad=-1 is invalid"):
        load_dataset("usps", "train", data_root=root, pad=-1)


def test_usps_torchvision_bz2(root):
    rng = np.random.default_rng(0)
    (root / "usps").mkdir()
    for fname, n in (("usps.bz2", 5), ("usps.t.bz2", 3)):
        lines = []
        for i in range(n):
            vals = rng.uniform(-1, 1, size=256)
            lines.append(f"{i % 10 + 1} " + " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(vals)))
        with bz2.open(root / "usps" / fname, "wt") as f:
            f.write("\n".join(lines) + "\n")
    X, y = _check_items(load_dataset("usps", "train", data_root=root), 5, (1, 16, 16), 10)
    assert torch.equal(y, torch.arange(5))
    _check_items(load_dataset("usps", "test", data_root=root), 3, (1, 16, 16), 10)


@needs_shared_usps
def test_usps_real_shared_file(tmp_path, monkeypatch):
    monkeypatch.delenv("DPGEN_SHARED", raising=False)
    tr = load_dataset("usps", "train", data_root=tmp_path)
    te = load_dataset("usps", "test", data_root=tmp_path)
    _, ytr = _check_items(tr, 7291, (1, 16, 16), 10)
    _, yte = _check_items(te, 2007, (1, 16, 16), 10)
    assert set(ytr.unique().tolist()) == set(range(10))
    assert load_dataset("usps", "test", data_root=tmp_path, resize=28).shape == (1, 28, 28)


# ------------------------------------------------------------------------------------------------
# CIFAR-10 and SVHN
# ------------------------------------------------------------------------------------------------


def test_cifar10_python_batches(root):
    d = root / "cifar-10-batches-py"
    d.mkdir()
    rng = np.random.default_rng(0)
    for i, name in enumerate([f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]):
        entry = {"data": rng.integers(0, 256, size=(2, 3072), dtype=np.uint8), "labels": [i % 10, (i + 1) % 10],
                 "batch_label": name}
        with open(d / name, "wb") as f:
            pickle.dump(entry, f)
    X, y = _check_items(load_dataset("cifar10", "train", data_root=root), 10, (3, 32, 32), 10)
    with open(d / "data_batch_1", "rb") as f:
        first = pickle.load(f)
    assert torch.allclose(X[0], torch.from_numpy(first["data"][0].reshape(3, 32, 32)).float() / 255)
    _check_items(load_dataset("cifar10", "test", data_root=root), 2, (3, 32, 32), 10)


def test_svhn_mat(root):
    from scipy.io import savemat

    (root / "svhn").mkdir()
    rng = np.random.default_rng(0)
    X = rng.integers(0, 256, size=(32, 32, 3, 4), dtype=np.uint8)
    savemat(root / "svhn" / "test_32x32.mat", {"X": X, "y": np.array([[10], [1], [2], [10]], dtype=np.uint8)})
    ds = load_dataset("svhn", "test", data_root=root)
    Xt, y = _check_items(ds, 4, (3, 32, 32), 10)
    assert y.tolist() == [0, 1, 2, 0]
    assert torch.allclose(Xt[1, 2], torch.from_numpy(X[:, :, 2, 1]).float() / 255)


# ------------------------------------------------------------------------------------------------
# CelebA
# ------------------------------------------------------------------------------------------------


def _write_celeba(root, n=6):
    from PIL import Image

    base = root / "celeba"
    (base / "img_align_celeba").mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"{i + 1:06d}.jpg" for i in range(n)]
    for nm in names:
        Image.fromarray(rng.integers(0, 256, size=(218, 178, 3), dtype=np.uint8)).save(base / "img_align_celeba" / nm)
    attrs = ["5_o_Clock_Shadow", "Male", "Smiling"]
    male = [1, -1, 1, -1, 1, 1][:n]
    with open(base / "list_attr_celeba.txt", "w") as f:
        f.write(f"{n}\n" + " ".join(attrs) + " \n")
        for nm, m in zip(names, male):
            f.write(f"{nm}  -1  {m:2d}  1\n")
    parts = [0, 0, 0, 1, 2, 2][:n]
    with open(base / "list_eval_partition.txt", "w") as f:
        f.writelines(f"{nm} {p}\n" for nm, p in zip(names, parts))
    return male, parts


def test_celeba_lazy_64_and_32(root):
    male, parts = _write_celeba(root)
    ds = load_dataset("celeba", "train", data_root=root)
    assert isinstance(ds, CelebADataset) and not hasattr(ds, "tensors")
    X, y = _check_items(ds, 3, (3, 64, 64), 2)
    assert y.tolist() == [1, 0, 1]
    assert len(load_dataset("celeba", "valid", data_root=root)) == 1
    te = load_dataset("celeba32", "test", data_root=root)
    _, yte = _check_items(te, 2, (3, 32, 32), 2)
    assert yte.tolist() == [1, 1] and te.name == "celeba32"
    assert len(load_dataset("celeba32", "all", data_root=root)) == 6
    smile = load_dataset("celeba32", "train", data_root=root, attribute="Smiling")
    assert as_tensors(smile)[1].tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="Bald"):
        load_dataset("celeba", data_root=root, attribute="Bald")
    batch = next(iter(DataLoader(ds, batch_size=2)))
    assert batch[0].shape == (2, 3, 64, 64)


# ------------------------------------------------------------------------------------------------
# pre-extracted features
# ------------------------------------------------------------------------------------------------


def test_feature_sets_npz_and_domains(root):
    rng = np.random.default_rng(0)
    (root / "visda").mkdir()
    (root / "office31").mkdir()
    f_real = rng.normal(size=(7, 2048)).astype(np.float32) * 3
    np.savez(root / "visda" / "validation.npz", features=f_real, labels=np.arange(7) % 12)
    np.savez(root / "visda" / "train.npz", features=f_real[:3], labels=np.array([11, 0, 1]))
    for dom, n in (("amazon", 5), ("dslr", 4), ("webcam", 3)):
        np.savez(root / "office31" / f"{dom}.npz", features=rng.normal(size=(n, 2048)).astype(np.float32),
                 labels=np.arange(n) + 26)
    ds = load_dataset("visda", data_root=root)  # default domain: validation (real)
    X, y = _check_items(ds, 7, (2048,), 12, unit=False)
    assert torch.equal(X, torch.from_numpy(f_real))  # returned as stored, not rescaled
    assert ds.domain == "validation"
    assert len(load_dataset("visda", data_root=root, domain="synthetic")) == 3
    assert len(load_dataset("office31", data_root=root)) == 4  # default dslr
    assert len(load_dataset("office31", "test", data_root=root, domain="A")) == 5
    assert load_dataset("office31", data_root=root, domain="webcam").num_classes == 31
    with pytest.raises(ValueError, match="domain='clipart'"):
        load_dataset("office31", data_root=root, domain="clipart")


def test_feature_sets_other_formats_and_bad_labels(root):
    d = root / "office31"
    d.mkdir()
    feats = np.ones((3, 2048), np.float32)
    np.save(d / "amazon_features.npy", feats)
    np.save(d / "amazon_labels.npy", np.array([0, 1, 2]))
    torch.save({"features": torch.zeros(2, 2048), "labels": torch.tensor([3, 4])}, d / "webcam.pt")
    np.savetxt(d / "dslr.csv", np.hstack([feats, np.array([[5.0], [6.0], [7.0]])]), delimiter=",")
    assert as_tensors(load_dataset("office31", data_root=root, domain="amazon"))[1].tolist() == [0, 1, 2]
    assert as_tensors(load_dataset("office31", data_root=root, domain="webcam"))[1].tolist() == [3, 4]
    X, y = as_tensors(load_dataset("office31", data_root=root, domain="dslr"))
    assert X.shape == (3, 2048) and y.tolist() == [5, 6, 7]
    (root / "visda").mkdir()
    np.savez(root / "visda" / "validation.npz", features=feats, labels=np.array([0, 1, 12]))
    with pytest.raises(ValueError, match="0..11"):
        load_dataset("visda", data_root=root)


# ------------------------------------------------------------------------------------------------
# synthetic
# ------------------------------------------------------------------------------------------------


def test_gaussians_shape_mean_and_determinism():
    ds = load_dataset("gaussians", n=4000, mean=0.7)
    X, y = _check_items(ds, 4000, (5,), 0, unit=False)
    assert torch.all(y == 0)
    assert abs(float(X.mean()) - 0.7) < 0.05 and abs(float(X.std()) - 1.0) < 0.05
    assert torch.equal(load_dataset("gaussians", n=4000, mean=0.7).tensors[0], X)
    assert not torch.equal(load_dataset("gaussians", "test", n=4000, mean=0.7).tensors[0], X)
    assert not torch.equal(load_dataset("gaussians", n=4000, mean=0.7, seed=1).tensors[0], X)
    assert load_dataset("gaussians", d=50, n=10).shape == (50,)
    with pytest.raises(ValueError, match="d="):
        load_dataset("gaussians", d=0)


def test_manifolds_lie_on_their_curves():
    hc = load_dataset("manifolds", n=2000)
    X, y = _check_items(hc, 2000, (2,), 0, unit=False)
    r = X.norm(dim=1)
    assert torch.allclose(r, torch.ones_like(r), atol=1e-5) and float(X[:, 1].min()) >= -1e-6
    theta = torch.atan2(X[:, 1], X[:, 0])
    assert abs(float(theta.mean()) - np.pi / 2) < 0.1  # uniform in angle = uniform in arc length

    el = load_dataset("manifolds", shape="ellipse", n=2000, a=1.0, b=0.5).tensors[0]
    assert torch.allclose((el[:, 0] / 1.0) ** 2 + (el[:, 1] / 0.5) ** 2, torch.ones(2000), atol=1e-3)
    # uniform in arc length: the flat ends (|x| < 0.5) hold more than their share of the angle range
    assert 0.25 < float((el[:, 0].abs() < 0.5).float().mean()) < 0.5

    rect = load_dataset("manifolds", shape="rectangle", n=3000, width=1.5, height=1.0).tensors[0]
    on_v = torch.isclose(rect[:, 0].abs(), torch.tensor(0.75), atol=1e-5)
    on_h = torch.isclose(rect[:, 1].abs(), torch.tensor(0.5), atol=1e-5)
    assert bool(torch.all(on_v | on_h))
    assert abs(float(on_h.float().mean()) - 0.6) < 0.05  # horizontal sides: 3 of the 5 perimeter units

    a = load_dataset("manifolds", shape="ellipse", n=50, seed=3).tensors[0]
    assert torch.equal(a, load_dataset("manifolds", shape="ellipse", n=50, seed=3).tensors[0])
    noisy = load_dataset("manifolds", n=500, noise=0.1).tensors[0]
    assert float((noisy.norm(dim=1) - 1).abs().max()) > 0.05
    with pytest.raises(ValueError, match="shape='square'"):
        load_dataset("manifolds", shape="square")
