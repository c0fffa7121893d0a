"""Shared pieces of the data loaders: the in-memory dataset class, data_root resolution, errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from dpgen.utils.io import IN_CHECKOUT, project_root

PathLike = Union[str, os.PathLike]

#: where the file layouts are written down: docs/DATA.md, which the package carries as dpgen/DATA.md
DOCS_HINT = "the expected files of every dataset: " + str(
    project_root() / "docs" / "DATA.md" if IN_CHECKOUT else Path(__file__).resolve().parents[1] / "DATA.md")


class ArrayDataset(TensorDataset):
    """An in-memory dataset: ``.tensors == (X, y)`` with X float32 ``[n, *shape]`` and y int64 ``[n]``.

    Items are ``(x, y)`` like :class:`torch.utils.data.TensorDataset`; training code may move
    ``X, y = ds.tensors`` to a device at once (or call :meth:`to`).
    """

    def __init__(self, X: torch.Tensor, y: torch.Tensor, *, name: str, num_classes: int,
                 split: str = "train", source: Optional[str] = None) -> None:
        X = torch.as_tensor(X, dtype=torch.float32)
        y = torch.as_tensor(y, dtype=torch.int64)
        if X.shape[0] != y.shape[0]:
            raise ValueError(f"{name}: the numbers of inputs and labels differ (the counts are not printed: they may be "
                             "private); check that the label file belongs to the input file")
        super().__init__(X, y)
        self.name = name
        self.num_classes = int(num_classes)
        self.split = split
        #: where the data came from (a path, or a description for embedded/synthetic sets)
        self.source = source

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.tensors[0].shape[1:])

    @property
    def X(self) -> torch.Tensor:
        return self.tensors[0]

    @property
    def y(self) -> torch.Tensor:
        return self.tensors[1]

    def to(self, device) -> "ArrayDataset":
        """A copy whose tensors live on ``device``."""
        return ArrayDataset(self.X.to(device), self.y.to(device), name=self.name,
                            num_classes=self.num_classes, split=self.split, source=self.source)

    def __repr__(self) -> str:
        return (f"ArrayDataset(name={self.name!r}, split={self.split!r}, n={len(self)}, "
                f"shape={self.shape}, num_classes={self.num_classes})")


def as_tensors(dataset: Dataset, max_items: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(X, y)`` of a dataset (its first ``max_items`` items); free for in-memory datasets."""
    if isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2:  # an ArrayDataset: (X, y) in memory
        X, y = dataset.tensors
        if max_items is not None:
            X, y = X[:max_items], y[:max_items]
        return X, y
    n = len(dataset) if max_items is None else min(int(max_items), len(dataset))
    if n == 0:
        shape = tuple(getattr(dataset, "shape", ()))  # any torch Dataset, read item by item: it may not say
        return torch.empty((0, *shape), dtype=torch.float32), torch.empty(0, dtype=torch.int64)
    xs, ys = zip(*(dataset[i] for i in range(n)))
    return torch.stack([torch.as_tensor(x) for x in xs]), torch.as_tensor([int(v) for v in ys],
                                                                            dtype=torch.int64)


def resolve_data_root(data_root: Optional[PathLike] = None) -> Path:
    """``data_root``, else ``$DPGEN_DATA_ROOT``, else ``<checkout>/data`` (an installed package: the
    working directory's ``data/``, never a folder inside site-packages).

    A relative path is taken from the working directory when it exists there, otherwise from the
    checkout's root (so the configs' default ``data`` means ``<checkout>/data`` wherever you run from).
    """
    if data_root is None or str(data_root) == "":
        env = os.environ.get("DPGEN_DATA_ROOT")
        data_root = env if env else project_root() / "data"
    p = Path(data_root).expanduser()
    if not p.is_absolute():
        p = p.resolve() if p.exists() else (project_root() / p)
    return p


def missing_files_error(name: str, paths: Sequence[PathLike], how: str) -> FileNotFoundError:
    """A FileNotFoundError naming every path that was looked for and how to obtain the files."""
    listed = "\n".join(f"  - {p}" for p in paths)
    return FileNotFoundError(
        f"dataset {name!r}: files not found. Looked for:\n{listed}\n{how} "
        f"(the data root is dataset.data_root or $DPGEN_DATA_ROOT; {DOCS_HINT})."
    )


def download_hint(root: PathLike) -> str:
    return (f"Run with dataset.download=true (load_dataset(..., download=True)) on a machine with network "
            f"access to fetch them into {root}, or copy the files to the path(s) above")


def first_existing(paths: Iterable[Path]) -> Optional[Path]:
    for p in paths:
        if p.exists():
            return p
    return None


def check_split(name: str, split: str, choices: Sequence[str] = ("train", "test")) -> str:
    if split not in choices:
        raise ValueError(f"dataset {name!r}: split={split!r} is invalid: choose one of {', '.join(choices)}.")
    return split


def resize_images(X: torch.Tensor, size: Optional[int]) -> torch.Tensor:
    """Bilinear resize of ``[n, C, H, W]`` images to ``size x size`` (values clamped to [0, 1])."""
    if size is None or int(size) == X.shape[-1] and int(size) == X.shape[-2]:
        return X
    size = int(size)
    if size <= 0:
        raise ValueError(f"resize={size} is invalid: it must be a positive image side")
    out = torch.nn.functional.interpolate(X, size=(size, size), mode="bilinear", align_corners=False,
                                          antialias=size < X.shape[-1])
    return out.clamp_(0.0, 1.0)


def uint8_to_float(a: np.ndarray) -> torch.Tensor:
    a = np.asarray(a)
    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.array(a, copy=True, order="C")
    return torch.from_numpy(a).to(torch.float32).div_(255.0)
