"""Your own data: ``dataset=folder dataset.path=<dir>`` and ``dataset=npz dataset.path=<file>``.

* ``folder``: torchvision's ImageFolder layout, one sub-folder per class (``<dir>/<class>/<image>``), or
  ``<dir>/train/<class>/...`` with ``<dir>/test/<class>/...`` beside it. Class names are the sub-folders' names in
  sorted order (label 0, 1, ...). Every image is read as grey (1 channel) when the first one is grey, else RGB.
* ``npz``: arrays ``x`` (``[n, H, W]``, ``[n, H, W, C]`` or ``[n, C, H, W]``; uint8 0..255 or floats in [0, 1]) and
  ``y`` (integers 0..K-1), and ``x_test`` / ``y_test`` when the file has a test split.

Without a test split, a fixed tenth of the records (``held_out``, drawn with ``seed``) is held out as the test split
the downstream classifiers are scored on; the rest is the private training set. The test split, held out
or given, is treated as public as the papers' test splits are: the accuracies measured on it leave the run and
epsilon does not cover its records. The image size, channels and class
count come from the data's public shape (the first image's size and mode, the class folders; for an npz, the arrays'
shapes and ``dataset.num_classes``, else the largest training label + 1, which is then treated as public like a
counted n); ``size=S`` resizes every image to S x S. The training
record count sets q = B / n: ``dataset.n_train`` declares it, or 0 counts it once (the report says it is treated as
public).

Errors name the folder or file given and the fix, never a private record's name, size or count: ``python -m
dpgen.data.own <dir or file>`` lists what cannot be read, for the data's owner to run outside any run.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from dpgen.data.base import ArrayDataset, check_split, resize_images

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".pgm", ".ppm")
#: the part of the records held out as the test split when the data have none
HELD_OUT = 0.1
CHECK = "python -m dpgen.data.own {path}"


def _need_path(path, kind: str) -> Path:
    if not path:
        raise FileNotFoundError(f"dataset={kind} needs dataset.path=<{'folder of class sub-folders' if kind == 'folder' else 'file.npz'}>"
                                " (README \"Your own data\")")
    p = Path(str(path)).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"dataset.path={path}: no such {'folder' if kind == 'folder' else 'file'}")
    return p


@lru_cache(maxsize=8)
def folder_layout(path: str) -> Tuple[Tuple[str, ...], Dict[str, Tuple[Tuple[str, int], ...]]]:
    """(class names, {"train"|"test": ((file, label), ...)}) of an ImageFolder tree; "test" absent without one."""
    root = _need_path(path, "folder")
    if not root.is_dir():
        raise ValueError(f"dataset.path={path} is a file: dataset=folder reads a folder of class sub-folders "
                         "(dataset=npz reads a file of arrays x, y)")
    tops = {"train": root / "train", "test": root / "test"}
    splits = {s: d for s, d in tops.items() if d.is_dir()} if tops["train"].is_dir() else {"train": root}
    classes = sorted(p.name for p in splits["train"].iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(classes) < 2:
        raise ValueError(f"dataset.path={path}: {'one class folder' if classes else 'no class folder'} found: put each "
                         "class's images in a sub-folder of its own (<dir>/<class>/<image>), two classes at least")
    out = {}
    for split, d in splits.items():
        files = []
        for label, c in enumerate(classes):
            found = sorted(str(f) for f in (d / c).glob("*") if f.suffix.lower() in IMAGE_SUFFIXES) if (d / c).is_dir() else []
            if not found:
                raise ValueError(f"dataset.path={path}: the {split} class folder {c!r} holds no image "
                                 f"({', '.join(IMAGE_SUFFIXES)}): every class needs images in every split")
            files += [(f, label) for f in found]
        out[split] = tuple(files)
    return tuple(classes), out


def _held_out(n: int, held_out: float, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """(train, test) indices: a fixed ``held_out`` part drawn with ``seed`` (public randomness) as the test split."""
    perm = np.random.default_rng(seed).permutation(n)
    k = max(1, int(round(held_out * n)))
    return np.sort(perm[k:]), np.sort(perm[:k])


def _open(file: str, mode: Optional[str]):
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(file) as im:
            im.load()
            if mode is None:
                mode = "L" if im.mode in ("1", "L", "LA", "I", "I;16", "F") else "RGB"
            return im.convert(mode), mode
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise ValueError(f"an image under dataset.path cannot be read ({type(e).__name__}); its name is withheld "
                         f"(private): `{CHECK.format(path='<dataset.path>')}` lists such files for you, then remove "
                         "or fix them") from None


def _folder_arrays(path: str, split: str, size: Optional[int], held_out: float, seed: int):
    classes, files = folder_layout(path)
    pairs = files.get(split)
    if pairs is None:  # no test folder: a held-out part of the training folder
        train, test = _held_out(len(files["train"]), held_out, seed)
        pairs = [files["train"][i] for i in (test if split == "test" else train)]
    elif "test" not in files:
        train, _ = _held_out(len(pairs), held_out, seed)
        pairs = [pairs[i] for i in train]
    first, mode = _open(pairs[0][0], None)
    want = (size, size) if size else first.size
    X = np.empty((len(pairs), 1 if mode == "L" else 3, want[1], want[0]), dtype=np.float32)
    for i, (f, _) in enumerate(pairs):
        im = _open(f, mode)[0]
        if im.size != want:
            if not size:
                raise ValueError(f"dataset.path={path}: its images are not all of one size (the first is "
                                 f"{want[0]} x {want[1]}; the others' names and sizes are withheld: private). Give "
                                 "dataset.options.size=<S> to resize every image to S x S")
            from PIL import Image

            im = im.resize(want, Image.BILINEAR)
        a = np.asarray(im, dtype=np.float32) / 255.0
        X[i] = a[None] if a.ndim == 2 else a.transpose(2, 0, 1)
    y = np.array([label for _, label in pairs], dtype=np.int64)
    return X, y, len(classes)


def load_folder(root: Path, split: str = "train", download: bool = False, *, path: Optional[str] = None,
                size: Optional[int] = None, held_out: float = HELD_OUT, seed: int = 0) -> ArrayDataset:
    """``dataset=folder``: class sub-folders of images (module text)."""
    check_split("folder", split)
    X, y, k = _folder_arrays(str(_need_path(path, "folder")), split, int(size) if size else None, held_out, seed)
    return ArrayDataset(torch.from_numpy(X), torch.from_numpy(y), name="folder", num_classes=k, split=split,
                        source=str(path))


@lru_cache(maxsize=4)
def _npz(path: str) -> Dict[str, np.ndarray]:
    p = _need_path(path, "npz")
    try:
        with np.load(p, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError) as e:
        raise ValueError(f"dataset.path={path} cannot be read as an .npz ({type(e).__name__}): write it with "
                         "numpy.savez(path, x=images, y=labels)") from None
    if "x" not in arrays or "y" not in arrays:
        raise ValueError(f"dataset.path={path} holds arrays {', '.join(sorted(arrays)) or '(none)'}: it needs x "
                         "(images) and y (labels), and x_test / y_test for a test split of its own")
    return arrays


def _chw(x: np.ndarray, path: str) -> np.ndarray:
    """Images as float32 ``[n, C, H, W]`` in [0, 1]."""
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):
        x = x.transpose(0, 3, 1, 2)
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise ValueError(f"dataset.path={path}: x has shape [n, {', '.join(map(str, x.shape[1:]))}]: give [n, H, W], "
                         "[n, H, W, C] or [n, C, H, W] with C 1 or 3")
    if x.dtype == np.uint8:
        return x.astype(np.float32) / 255.0
    x = x.astype(np.float32)
    if not np.isfinite(x).all() or x.min() < 0 or x.max() > 1:
        raise ValueError(f"dataset.path={path}: x holds floats outside [0, 1] (or not finite): give uint8 0..255 "
                         "or floats in [0, 1]")
    return x


def npz_classes(path: str, declared: Optional[int] = None) -> int:
    """The class count: ``declared`` (dataset.num_classes), else the largest training label + 1 (treated as public)."""
    y = _npz(str(path))["y"]
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"dataset.path={path}: y must be a 1-d array of integer labels 0..K-1")
    k = int(declared) if declared else int(y.max()) + 1 if len(y) else 0
    return k


def load_npz(root: Path, split: str = "train", download: bool = False, *, path: Optional[str] = None,
             size: Optional[int] = None, held_out: float = HELD_OUT, seed: int = 0,
             num_classes: Optional[int] = None) -> ArrayDataset:
    """``dataset=npz``: arrays x, y (and x_test, y_test) of one file (module text)."""
    check_split("npz", split)
    a = _npz(str(_need_path(path, "npz")))
    k = npz_classes(path, num_classes)
    if "x_test" in a and "y_test" in a:
        x, y = (a["x"], a["y"]) if split == "train" else (a["x_test"], a["y_test"])
    else:
        train, test = _held_out(len(a["y"]), held_out, seed)
        idx = test if split == "test" else train
        x, y = a["x"][idx], a["y"][idx]
    if len(x) != len(y):
        raise ValueError(f"dataset.path={path}: x and y hold different numbers of records (the numbers are withheld: "
                         "private): the labels must belong to the images")
    y = np.asarray(y)
    if not np.issubdtype(y.dtype, np.integer) or (len(y) and (y.min() < 0 or y.max() >= k)):
        raise ValueError(f"dataset.path={path}: labels must be integers in 0..{k - 1} (K = {k} classes"
                         f"{'' if num_classes else ': the largest training label + 1'}); some {split} labels are not "
                         "(which, and how many, is withheld: private). Give dataset.num_classes=K, or fix the labels")
    if k < 2:
        raise ValueError(f"dataset.path={path}: one class only: a conditional generator needs labels of two classes "
                         "at least")
    X = torch.from_numpy(_chw(np.asarray(x), str(path)))
    X = resize_images(X, int(size) if size else None)
    return ArrayDataset(X, torch.from_numpy(y.astype(np.int64)), name="npz", num_classes=k, split=split,
                        source=str(path))


def own_shape(kind: str):
    """The records' shape ``(C, H, W)`` from the options (``path``, ``size``): the first image's mode and size, or
    the npz's x shape; with ``size``, S x S."""

    def shape(opts: dict) -> Tuple[int, ...]:
        path, size = opts.get("path"), opts.get("size")
        if not path:
            return (1, int(size or 28), int(size or 28))  # composing without a path: the run says what is missing
        if kind == "folder":
            _, files = folder_layout(str(path))
            im, mode = _open(files["train"][0][0], None)
            c, (w, h) = (1 if mode == "L" else 3), im.size
        else:
            x = _npz(str(path))["x"]
            c, h, w = _chw(x[:1], str(path)).shape[1:]
        return (c, int(size or h), int(size or w))

    return shape


def own_classes(kind: str):
    def classes(opts: dict) -> int:
        if not opts.get("path"):
            return 10
        if kind == "folder":
            return len(folder_layout(str(opts["path"]))[0])
        return npz_classes(opts["path"], opts.get("num_classes"))

    return classes


def own_count(kind: str):
    """The training record count, counted once (``dataset.n_train=0``): treated as public, the report says so.
    Counted from the file list or the arrays' length, without reading an image."""

    def count(opts: dict) -> int:
        if kind == "folder":
            _, files = folder_layout(str(opts["path"]))
            n, own_test = len(files["train"]), "test" in files
        else:
            a = _npz(str(opts["path"]))
            n, own_test = len(a["y"]), "x_test" in a and "y_test" in a
        return n if own_test else n - max(1, int(round(float(opts.get("held_out") or HELD_OUT) * n)))

    return count


def check(path: str) -> int:
    """For the data's owner, outside any run: the files under ``path`` that cannot be read, and each size found."""
    p = Path(path)
    if p.suffix == ".npz":
        a = _npz(str(p))
        print(f"{p}: " + ", ".join(f"{k} {v.dtype} {list(v.shape)}" for k, v in a.items()))
        return 0
    bad: List[str] = []
    sizes: Dict[tuple, int] = {}
    for f in sorted(q for q in p.rglob("*") if q.suffix.lower() in IMAGE_SUFFIXES):
        try:
            from PIL import Image

            with Image.open(f) as im:
                sizes[(im.size, im.mode)] = sizes.get((im.size, im.mode), 0) + 1
        except Exception as e:  # noqa: BLE001 - every unreadable file is listed
            bad.append(f"{f}: {type(e).__name__}")
    print("\n".join(f"unreadable: {b}" for b in bad) or "every image can be read")
    print("sizes (width x height, mode: count): " + "; ".join(f"{w} x {h}, {m}: {n}" for ((w, h), m), n in sizes.items()))
    return 1 if bad else 0


def _register() -> None:
    from dpgen.data import DATASETS, DatasetSpec

    for kind, loader, what in (("folder", load_folder, "class sub-folders of images (ImageFolder layout)"),
                               ("npz", load_npz, "an .npz of arrays x, y (and x_test, y_test)")):
        if kind not in DATASETS.names():
            DATASETS.register(kind, DatasetSpec(
                kind, loader, (1, 28, 28), 0, f"your own data: {what} at dataset.path", "dataset.path=<yours>",
                shape_fn=own_shape(kind), classes_fn=own_classes(kind), count_fn=own_count(kind)))


_register()

if __name__ == "__main__":
    sys.exit(check(sys.argv[1]) if len(sys.argv) == 2 else print("usage: python -m dpgen.data.own <dir or file.npz>"))
