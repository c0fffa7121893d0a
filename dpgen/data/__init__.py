"""Data loaders: one call, :func:`load_dataset`, for every dataset of ``conf/dataset/``.

Every dataset yields items ``(x, y)``: x a float32 tensor of the dataset's shape (``C, H, W`` for
images, with values in [0, 1]; ``(D,)`` for features and synthetic points, returned in their own
coordinates), y an int64 label (0 for the unlabelled synthetic sets). Every returned dataset has
``.name``, ``.shape``, ``.num_classes`` and ``.split``. All but CelebA are held in memory as an
:class:`ArrayDataset` whose ``.tensors == (X, y)`` can be moved to a device at once;
:func:`as_tensors` gives ``(X, y)`` of any dataset.

Files are looked for under ``data_root`` (argument, else ``$DPGEN_DATA_ROOT``, else ``<repo>/data``);
the expected layout of each dataset is in ``docs/DATA.md`` and in ``DATASETS[name].files``. A
missing file stops with a :class:`FileNotFoundError` naming the paths looked for.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

from torch.utils.data import Dataset

from dpgen.data.base import ArrayDataset, as_tensors, resolve_data_root
from dpgen.data.celeba import CelebADataset, load_celeba, load_celeba32
from dpgen.data.features import load_office31, load_visda
from dpgen.data.images import (
    load_cifar10,
    load_digits_dataset,
    load_fashion_mnist,
    load_mnist,
    load_mnist10k,
    load_svhn,
    load_usps,
    load_usps8,
    read_idx,
    write_idx,
)
from dpgen.data.synthetic import load_gaussians, load_manifolds
from dpgen.utils.registry import Registry

__all__ = [
    "ArrayDataset",
    "CelebADataset",
    "DATASETS",
    "DatasetSpec",
    "as_tensors",
    "dataset_info",
    "load_dataset",
    "load_split",
    "read_idx",
    "resolve_data_root",
    "write_idx",
]


def _image_shape(channels: int, side: int, option: str = "resize") -> Callable[[dict], Tuple[int, ...]]:
    def shape(opts: dict) -> Tuple[int, ...]:
        s = opts.get(option)
        s = side if s is None else int(s)
        s += 2 * int(opts.get("pad") or 0)
        return (channels, s, s)

    return shape


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    loader: Callable[..., Dataset]
    shape: Tuple[int, ...]
    num_classes: int
    description: str
    #: expected files under data_root (docs/DATA.md has the details)
    files: str
    in_memory: bool = True
    #: shape as a function of the options (resize, d, image_size), default: ``shape``
    shape_fn: Optional[Callable[[dict], Tuple[int, ...]]] = field(default=None, compare=False)
    #: the number of training records the dataset ships with (a public fact; None: it depends on the options),
    #: which ``dataset.n_train`` is compared with when the config is read (a warning, never a refusal)
    n_train: Optional[int] = None
    #: options that change which training records are read (then ``n_train`` is not compared)
    count_options: Tuple[str, ...] = ("n", "split", "domain", "partition")
    #: the class count as a function of the options (your own data: read from the data's public layout)
    classes_fn: Optional[Callable[[dict], int]] = field(default=None, compare=False)
    #: the training record count as a function of the options, for ``dataset.n_train=0`` (counted once, treated as
    #: public: the run's report says so)
    count_fn: Optional[Callable[[dict], int]] = field(default=None, compare=False)
    #: loader options a run's config declares as ``dataset.<key>`` (an npz's ``num_classes``: a public fact that
    #: is never read from the records); :func:`load_split` hands them to the loader
    declared_options: Tuple[str, ...] = ()

    def options(self) -> Dict[str, Any]:
        """The loader's options and their defaults."""
        sig = inspect.signature(self.loader)
        return {k: p.default for k, p in sig.parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}

    def shape_for(self, options: Optional[dict] = None) -> Tuple[int, ...]:
        return tuple(self.shape_fn(options or {})) if self.shape_fn else tuple(self.shape)

    def classes_for(self, options: Optional[dict] = None) -> Optional[int]:
        """The class count for ``options``; None when the run's config must declare it (``dataset.num_classes``)."""
        if not self.classes_fn:
            return int(self.num_classes)
        k = self.classes_fn(options or {})
        return None if k is None else int(k)


#: ``dataset=`` -> its :class:`DatasetSpec`. A new module of dpgen/data registers its own entry
#: (``DATASETS.register(name, DatasetSpec(...))``): the registry imports every module of the package on first
#: lookup. A dataset outside dpgen names its loader in YAML instead (``dataset.loader``: docs/EXTENDING.md).
DATASETS = Registry("dataset", key="dataset", package="dpgen.data")
for _spec_entry in [
        DatasetSpec("digits", load_digits_dataset, (1, 8, 8), 10,
                    "scikit-learn load_digits, stratified 80/20 split (seed 0): 1,437 / 360",
                    "none (shipped inside scikit-learn)", shape_fn=_image_shape(1, 8), n_train=1437),
        DatasetSpec("mnist", load_mnist, (1, 28, 28), 10, "MNIST 60,000 / 10,000",
                    "MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]", shape_fn=_image_shape(1, 28),
                    n_train=60000),
        DatasetSpec("fashion_mnist", load_fashion_mnist, (1, 28, 28), 10, "FashionMNIST 60,000 / 10,000",
                    "FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]",
                    shape_fn=_image_shape(1, 28), n_train=60000),
        DatasetSpec("mnist10k", load_mnist10k, (1, 28, 28), 10,
                    "MNIST t10k file split 8,000 / 2,000 by a fixed permutation (seed 0)",
                    "mnist/t10k-{images-idx3,labels-idx1}-ubyte[.gz] (or MNIST/raw/, or <shared>/data/mnist/)",
                    shape_fn=_image_shape(1, 28), n_train=8000),
        DatasetSpec("usps", load_usps, (1, 16, 16), 10, "USPS 7,291 / 2,007 (resize=20, pad=4: MNIST's 28x28 framing)",
                    "usps/usps.h5 (or <shared>/data/usps/usps.h5), or usps/usps.bz2 + usps/usps.t.bz2",
                    shape_fn=_image_shape(1, 16), n_train=7291),
        DatasetSpec("usps8", load_usps8, (1, 8, 8), 10,
                    "USPS resized to 8x8, its first 1,437 training records / 2,007: the public proxy of digits",
                    "usps/usps.h5 (or <shared>/data/usps/usps.h5), or usps/usps.bz2 + usps/usps.t.bz2", n_train=1437),
        DatasetSpec("cifar10", load_cifar10, (3, 32, 32), 10, "CIFAR-10 50,000 / 10,000",
                    "cifar-10-batches-py/{data_batch_1..5,test_batch}", shape_fn=_image_shape(3, 32), n_train=50000),
        DatasetSpec("svhn", load_svhn, (3, 32, 32), 10, "SVHN 73,257 / 26,032 (split=extra too)",
                    "svhn/{train,test,extra}_32x32.mat", shape_fn=_image_shape(3, 32), n_train=73257),
        DatasetSpec("celeba", load_celeba, (3, 64, 64), 2,
                    "CelebA 64x64 (center crop 140, resize), label Male; lazy",
                    "celeba/{img_align_celeba/, list_attr_celeba.txt, list_eval_partition.txt}", in_memory=False,
                    shape_fn=_image_shape(3, 64, "image_size")),
        DatasetSpec("celeba32", load_celeba32, (3, 32, 32), 2,
                    "CelebA 32x32 (center crop 140, resize), label Male; lazy",
                    "celeba/{img_align_celeba/, list_attr_celeba.txt, list_eval_partition.txt}", in_memory=False,
                    shape_fn=_image_shape(3, 32, "image_size")),
        DatasetSpec("visda", load_visda, (2048,), 12, "VisDA-2017 ResNet-50 features (domain=train|validation)",
                    "visda/{train,validation}.npz with features [n,2048], labels [n]"),
        DatasetSpec("office31", load_office31, (2048,), 31,
                    "Office-31 ResNet-50 features (domain=amazon|dslr|webcam)",
                    "office31/{amazon,dslr,webcam}.npz with features [n,2048], labels [n]"),
        DatasetSpec("gaussians", load_gaussians, (5,), 0, "N(mean * 1_d, I) of DP-SWD section 6.1 (d=5)",
                    "none (synthetic)", shape_fn=lambda o: (int(o.get("d") or 5),)),
        DatasetSpec("manifolds", load_manifolds, (2,), 0,
                    "2-D half_circle / ellipse / rectangle, uniform on the curve", "none (synthetic)"),
]:
    DATASETS.register(_spec_entry.name, _spec_entry)


def _spec(name: str) -> DatasetSpec:
    return DATASETS.lookup(name)


def _check_options(spec: DatasetSpec, options: dict) -> dict:
    allowed = spec.options()
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        choices = ", ".join(allowed) if allowed else "none"
        raise ValueError(f"dataset {spec.name!r}: unknown option(s) {', '.join(unknown)}: its options are {choices}.")
    # None means "the default" (so configs can carry null)
    return {k: v for k, v in options.items() if v is not None}


def dataset_info(name: str, **options) -> Dict[str, Any]:
    """``{"name", "shape", "dim", "num_classes", "in_memory", "description", "files", "options"}``;
    ``shape`` accounts for ``resize`` / ``image_size`` / ``d`` when given."""
    spec = _spec(name)
    opts = _check_options(spec, options)
    shape = spec.shape_for(opts)
    dim = 1
    for s in shape:
        dim *= int(s)
    return {
        "name": spec.name,
        "shape": shape,
        "dim": dim,
        "num_classes": spec.classes_for(opts),
        "in_memory": spec.in_memory,
        "description": spec.description,
        "files": spec.files,
        "options": spec.options(),
    }


def load_dataset(name: str, split: str = "train", data_root=None, download: bool = False, **options) -> Dataset:
    """Load dataset ``name`` (a key of :data:`DATASETS`) for ``split`` ("train" or "test"; CelebA
    also "valid"/"all", SVHN "extra", feature sets "all").

    ``data_root`` defaults to ``$DPGEN_DATA_ROOT`` or ``<repo>/data``. ``download=True`` lets
    torchvision fetch missing MNIST/FashionMNIST/CIFAR-10/SVHN/USPS/CelebA files into the layout
    this module reads. ``options`` are dataset-specific (``DATASETS[name].options()``): ``resize``
    (image sets), ``domain`` (visda, office31), ``d, mean, n, seed`` (gaussians), ``shape, n, seed,
    noise`` (manifolds), ``image_size, crop, attribute`` (celeba).
    """
    spec = _spec(name)
    opts = _check_options(spec, options)
    root = resolve_data_root(data_root)
    return spec.loader(root, split, bool(download), **opts)


def load_split(dataset_cfg, split: str = "train") -> Dataset:
    """The ``split`` of the dataset a run's ``dataset`` config node names: ``dataset.loader`` (a
    dotted path ``package.module.function`` taking ``(data_root, split, download, **options)``: a
    dataset outside dpgen, docs/EXTENDING.md) when given, else :func:`load_dataset`.

    With ``dataset.validation=f > 0`` the private training records are split by a public hash of each record
    (:mod:`dpgen.data.holdout`): ``split="train"`` is the part a run trains on, ``split="validation"`` the part
    held out for a selection mechanism that runs under its own accounting (parallel composition)."""
    from dpgen.data.holdout import check_fraction, holdout_part

    fraction = check_fraction(dataset_cfg.validation)
    if split == "validation" and fraction == 0:
        raise ValueError("split='validation' needs a holdout: set dataset.validation=<fraction>, e.g. 0.05, for the "
                         "run that trains the model too (its training records exclude the held-out ones)")
    if fraction > 0 and split in ("train", "validation"):
        return holdout_part(_load_split(dataset_cfg, "train"), fraction, split)
    return _load_split(dataset_cfg, split)


def _load_split(dataset_cfg, split: str) -> Dataset:
    ds = dataset_cfg
    opts = dict(ds.options or {})
    if ds.path:  # your own data (dataset=folder / npz)
        opts["path"] = ds.path
    spec = DATASETS.get(ds.name) if not ds.loader else None
    for key in (spec.declared_options if spec is not None else ()):
        declared = getattr(ds, key)  # a dataset.<key> field the loader's entry names (an npz's num_classes)
        if opts.get(key) is None and declared:
            opts[key] = declared
    if ds.loader:
        from dpgen.utils.objects import import_object

        fn = import_object(ds.loader, "dataset.loader", "package.module.function")
        return fn(resolve_data_root(ds.data_root), split, bool(ds.download), **opts)
    return load_dataset(ds.name, split, data_root=ds.data_root, download=ds.download, **opts)

