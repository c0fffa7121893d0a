"""In-memory image datasets: digits, MNIST/FashionMNIST (idx), mnist10k, USPS, CIFAR-10, SVHN.

Every loader returns an :class:`~dpgen.data.base.ArrayDataset` with X float32 ``[n, C, H, W]`` in
[0, 1] and y int64. The files are read by small parsers of the official formats (so a partial or
re-packed copy still loads); torchvision is used only to *download* them (``download=True``), into
the same layout torchvision itself uses.
"""

from __future__ import annotations

import gzip
import zlib
import pickle
import struct
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from dpgen.data.base import (
    ArrayDataset,
    check_split,
    download_hint,
    first_existing,
    missing_files_error,
    resize_images,
    uint8_to_float,
)
from dpgen.utils.paper import shared_dir

# ------------------------------------------------------------------------------------------------
# digits (scikit-learn, embedded)
# ------------------------------------------------------------------------------------------------


def load_digits_dataset(root: Path, split: str = "train", download: bool = False, *,
                        resize: Optional[int] = None, test_size: float = 0.2, seed: int = 0) -> ArrayDataset:
    """scikit-learn's ``load_digits`` (1,797 8x8 digits, values 0..16 divided by 16), stratified
    80/20 split with ``random_state=seed`` (1,437 train / 360 test). Needs no file."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    check_split("digits", split)
    bunch = load_digits()
    X = bunch.images.astype(np.float32) / 16.0
    y = bunch.target.astype(np.int64)
    idx_train, idx_test = train_test_split(np.arange(len(y)), test_size=test_size, stratify=y,
                                           random_state=seed)
    idx = idx_train if split == "train" else idx_test
    Xt = resize_images(torch.from_numpy(X[idx]).unsqueeze(1), resize)
    return ArrayDataset(Xt, torch.from_numpy(y[idx]), name="digits", num_classes=10, split=split,
                        source="sklearn.datasets.load_digits")


# ------------------------------------------------------------------------------------------------
# idx format (MNIST, FashionMNIST)
# ------------------------------------------------------------------------------------------------

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path) -> np.ndarray:
    """Parse an idx file (``.gz`` or uncompressed): magic ``00 00 <dtype> <ndim>``, big-endian dims."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise
    except (EOFError, OSError, zlib.error) as e:  # a truncated or corrupt .gz (BadGzipFile is an OSError)
        raise ValueError(f"{path} cannot be read ({type(e).__name__}; the details are not printed: they may count records): the file is truncated or corrupt. "
                         "Download it again (docs/DATA.md gives the sources) and compare its checksum") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise ValueError(f"{path} is not an idx file (bad magic number {data[:4].hex()})")
    ndim = data[3]
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    count = int(np.prod(dims)) if dims else 1
    offset = 4 + 4 * ndim
    if len(data) - offset < count * dtype.itemsize:
        raise ValueError(f"{path} is truncated: it holds fewer bytes than its header announces (the sizes are not "
                         "printed: they count private records); download the file again and check its checksum")
    return np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(dims)


def write_idx(path, array: np.ndarray) -> None:
    """Write a uint8 array in idx format (gzip when ``path`` ends in .gz); used by tests and tools."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(header + array.tobytes())


def _find_idx(dirs: Sequence[Path], images: str, labels: str) -> Tuple[Optional[Tuple[Path, Path]], List[Path]]:
    """First directory holding both files (uncompressed or .gz); also every path looked at."""
    looked: List[Path] = []
    for d in dirs:
        cand_i = [d / images, d / f"{images}.gz"]
        cand_l = [d / labels, d / f"{labels}.gz"]
        looked.extend([d / f"{images}[.gz]", d / f"{labels}[.gz]"])
        pi, pl = first_existing(cand_i), first_existing(cand_l)
        if pi is not None and pl is not None:
            return (pi, pl), looked
    return None, looked


def _idx_names(split: str) -> Tuple[str, str]:
    prefix = "train" if split == "train" else "t10k"
    return f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"


def _read_idx_pair(paths: Tuple[Path, Path], name: str) -> Tuple[torch.Tensor, torch.Tensor]:
    images, labels = read_idx(paths[0]), read_idx(paths[1])
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(f"{name}: {paths[0]} and {paths[1]} do not match (images must be [n, H, W] and labels [n]; "
                         "the sizes are not printed: they count private records); download both files again")
    return uint8_to_float(images).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def _torchvision_download(cls_name: str, root: Path, **kwargs) -> None:
    import torchvision.datasets as tvd

    getattr(tvd, cls_name)(root=str(root), download=True, **kwargs)  # by name: torchvision imported only here


def _load_mnist_like(name: str, folder: str, tv_class: str, root: Path, split: str, download: bool,
                     resize: Optional[int], extra_dirs: Sequence[Path] = ()) -> ArrayDataset:
    check_split(name, split)
    images, labels = _idx_names(split)
    dirs = [root / folder / "raw", root / folder.lower(), *extra_dirs]
    found, looked = _find_idx(dirs, images, labels)
    if found is None and download:
        _torchvision_download(tv_class, root, train=(split == "train"))
        found, looked = _find_idx(dirs, images, labels)
    if found is None:
        raise missing_files_error(name, looked, download_hint(root / folder / "raw"))
    X, y = _read_idx_pair(found, name)
    return ArrayDataset(resize_images(X, resize), y, name=name, num_classes=10, split=split,
                        source=str(found[0].parent))


def load_mnist(root: Path, split: str = "train", download: bool = False, *,
               resize: Optional[int] = None) -> ArrayDataset:
    """MNIST from ``root/MNIST/raw`` (torchvision layout) or ``root/mnist``: 60,000 / 10,000."""
    extra = [shared_dir() / "data" / "mnist"] if split == "test" else []
    return _load_mnist_like("mnist", "MNIST", "MNIST", root, split, download, resize, extra)


def load_fashion_mnist(root: Path, split: str = "train", download: bool = False, *,
                       resize: Optional[int] = None) -> ArrayDataset:
    """FashionMNIST from ``root/FashionMNIST/raw`` (torchvision layout) or ``root/fashionmnist``."""
    return _load_mnist_like("fashion_mnist", "FashionMNIST", "FashionMNIST", root, split, download, resize)


def mnist10k_split(n: int, seed: int = 0, test_fraction: float = 0.2) -> Tuple[np.ndarray, np.ndarray]:
    """Indices (each sorted) of the mnist10k train / test parts: a fixed permutation of ``n`` items
    (``numpy.random.default_rng(seed)``), the first ``n - n_test`` train, the rest test."""
    n_test = int(round(n * test_fraction))
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[: n - n_test]), np.sort(perm[n - n_test:])


def load_mnist10k(root: Path, split: str = "train", download: bool = False, *,
                  resize: Optional[int] = None, seed: int = 0) -> ArrayDataset:
    """The official MNIST *test* files (t10k, 10,000 images) split into 8,000 train / 2,000 test by
    a fixed permutation (seed 0, not stratified). Searched in ``root/mnist``, ``root/MNIST/raw``,
    then ``<shared>/data/mnist``."""
    check_split("mnist10k", split)
    images, labels = _idx_names("test")
    dirs = [root / "mnist", root / "MNIST" / "raw", shared_dir() / "data" / "mnist"]
    found, looked = _find_idx(dirs, images, labels)
    if found is None and download:
        _torchvision_download("MNIST", root, train=False)
        found, looked = _find_idx(dirs, images, labels)
    if found is None:
        raise missing_files_error("mnist10k", looked, download_hint(root / "MNIST" / "raw"))
    X, y = _read_idx_pair(found, "mnist10k")
    idx_train, idx_test = mnist10k_split(len(y), seed=seed)
    idx = torch.from_numpy(idx_train if split == "train" else idx_test)
    return ArrayDataset(resize_images(X[idx], resize), y[idx], name="mnist10k", num_classes=10,
                        split=split, source=str(found[0].parent))


# ------------------------------------------------------------------------------------------------
# USPS
# ------------------------------------------------------------------------------------------------


def usps_h5_candidates(root: Path) -> List[Path]:
    return [root / "usps" / "usps.h5", shared_dir() / "data" / "usps" / "usps.h5"]


def load_usps(root: Path, split: str = "train", download: bool = False, *,
              resize: Optional[int] = None, pad: int = 0, train_limit: Optional[int] = None) -> ArrayDataset:
    """USPS 16x16 (7,291 train / 2,007 test), from ``usps.h5`` (``root/usps/usps.h5`` then
    ``<shared>/data/usps/usps.h5``) or torchvision's ``root/usps/usps.bz2`` / ``usps.t.bz2``.
    ``resize`` rescales (bilinear) the 16x16 digits; ``pad`` then adds that many zero pixels on each
    side. ``resize=20, pad=4`` gives MNIST's framing (a digit in a centred 20x20 box of a 28x28
    image; the MNIST<->USPS presets use it), ``resize=28`` stretches the digit over the whole frame.
    ``train_limit`` keeps the first that many training records (the test split stays whole)."""
    check_split("usps", split)
    h5_paths = usps_h5_candidates(root)
    bz2_path = root / "usps" / ("usps.bz2" if split == "train" else "usps.t.bz2")
    h5 = first_existing(h5_paths)
    if h5 is not None:
        import h5py

        try:
            with h5py.File(h5, "r") as f:
                if split not in f:
                    raise ValueError(f"usps: {h5} has no group {split!r} (groups: {', '.join(f.keys())})")
                data = np.asarray(f[split]["data"], dtype=np.float32)
                target = np.asarray(f[split]["target"]).astype(np.int64).reshape(-1)
        except (OSError, KeyError) as e:  # truncated or not an HDF5 file, or a group without data / target
            raise ValueError(f"usps: {h5} cannot be read ({type(e).__name__}; details withheld: they may count records): the file is truncated or "
                             "corrupt. Download usps.h5 again (docs/DATA.md) and compare its checksum") from None
        X = torch.from_numpy(np.clip(data, 0.0, 1.0).reshape(-1, 1, 16, 16))
        y = torch.from_numpy(target)
        source = str(h5)
    else:
        if not bz2_path.exists() and download:
            _torchvision_download("USPS", root / "usps", train=(split == "train"))
        if not bz2_path.exists():
            raise missing_files_error("usps", [*h5_paths, bz2_path], download_hint(root / "usps"))
        import torchvision.datasets as tvd

        tv = tvd.USPS(root=str(root / "usps"), train=(split == "train"), download=False)
        X = uint8_to_float(tv.data).unsqueeze(1)
        y = torch.as_tensor(np.asarray(tv.targets), dtype=torch.int64)
        source = str(bz2_path)
    pad = int(pad or 0)
    if pad < 0:
        raise ValueError(f"usps: pad={pad} is invalid: it is a number of pixels >= 0 added on each side")
    if train_limit is not None and split == "train":
        if int(train_limit) < 1:
            raise ValueError(f"usps: train_limit={train_limit} is invalid: give a number of records >= 1")
        X, y = X[:int(train_limit)], y[:int(train_limit)]
    X = resize_images(X, resize)
    if pad:
        X = torch.nn.functional.pad(X, (pad, pad, pad, pad))
    return ArrayDataset(X, y, name="usps", num_classes=10, split=split, source=source)



def load_usps8(root: Path, split: str = "train", download: bool = False) -> ArrayDataset:
    """USPS at digits' size (8 x 8, the first 1,437 training records; the whole test split): the public proxy on
    which the embedded default's settings were picked (``dataset=usps8``)."""
    ds = load_usps(root, split, download, resize=8, train_limit=1437)
    ds.name = "usps8"
    return ds

# ------------------------------------------------------------------------------------------------
# CIFAR-10 (python pickle batches) and SVHN (.mat)
# ------------------------------------------------------------------------------------------------

CIFAR_FOLDER = "cifar-10-batches-py"


def load_cifar10(root: Path, split: str = "train", download: bool = False, *,
                 resize: Optional[int] = None) -> ArrayDataset:
    """CIFAR-10 python batches: ``root/cifar-10-batches-py/{data_batch_1..5,test_batch}`` (torchvision
    layout; ``root/cifar10/cifar-10-batches-py`` is also accepted)."""
    check_split("cifar10", split)
    names = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
    dirs = [root / CIFAR_FOLDER, root / "cifar10" / CIFAR_FOLDER]

    def find():
        for d in dirs:
            if all((d / n).exists() for n in names):
                return d
        return None

    folder = find()
    if folder is None and download:
        _torchvision_download("CIFAR10", root, train=(split == "train"))
        folder = find()
    if folder is None:
        raise missing_files_error("cifar10", [d / n for d in dirs for n in names], download_hint(root))
    xs, ys = [], []
    for n in names:
        with open(folder / n, "rb") as f:
            entry = pickle.load(f, encoding="latin1")
        xs.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(entry["labels"] if "labels" in entry else entry["fine_labels"], dtype=np.int64))
    X = uint8_to_float(np.concatenate(xs))
    y = torch.from_numpy(np.concatenate(ys))
    return ArrayDataset(resize_images(X, resize), y, name="cifar10", num_classes=10, split=split,
                        source=str(folder))


def load_svhn(root: Path, split: str = "train", download: bool = False, *,
              resize: Optional[int] = None) -> ArrayDataset:
    """SVHN cropped digits: ``root/svhn/{train,test,extra}_32x32.mat`` (torchvision layout with
    ``root=<data_root>/svhn``); label 10 is mapped to 0 as torchvision does."""
    check_split("svhn", split, ("train", "test", "extra"))
    fname = f"{split}_32x32.mat"
    paths = [root / "svhn" / fname, root / fname]
    path = first_existing(paths)
    if path is None and download:
        _torchvision_download("SVHN", root / "svhn", split=split)
        path = first_existing(paths)
    if path is None:
        raise missing_files_error("svhn", paths, download_hint(root / "svhn"))
    from scipy.io import loadmat

    mat = loadmat(str(path))
    X = np.transpose(np.asarray(mat["X"], dtype=np.uint8), (3, 2, 0, 1))  # [32,32,3,n] -> [n,3,32,32]
    y = np.asarray(mat["y"], dtype=np.int64).reshape(-1)
    y[y == 10] = 0
    return ArrayDataset(resize_images(uint8_to_float(X), resize), torch.from_numpy(y), name="svhn",
                        num_classes=10, split=split, source=str(path))
