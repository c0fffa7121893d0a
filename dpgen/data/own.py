"""Your own data: ``dataset=folder dataset.path=<dir>`` and ``dataset=npz dataset.path=<file>``.

* ``folder``: torchvision's ImageFolder layout, one sub-folder per class (``<dir>/<class>/<image>``), or
  ``<dir>/train/<class>/...`` with ``<dir>/test/<class>/...`` beside it. Class names are the sub-folders' names in
  sorted order (label 0, 1, ...). Every image is read as grey (1 channel) when the first one is grey, else RGB.
* ``npz``: arrays ``x`` (``[n, H, W]``, ``[n, H, W, C]`` or ``[n, C, H, W]``; uint8 0..255 or floats in [0, 1]) and
  ``y`` (integers 0..K-1), and ``x_test`` / ``y_test`` when the file has a test split.

Without a test split, a tenth of the records (``held_out``) is held out as the test split the downstream classifiers
are scored on; the rest is the private training set. Which records are held out is decided per record, by the one
salted hash every split of private records uses (dpgen.data.holdout.held_out_mask): adding or removing a record moves
no other record between the parts. The test split, held out or given, is treated as public as the papers' test
splits are: its records, its size and the accuracies measured on it leave the run, and epsilon does not cover them
(the run's report says so under ``not_covered``, and so does a release's datasheet). The image size and channels come
from the first image of a folder (its size and mode; the report lists this under ``not_covered``) or an npz's x shape,
``size=S`` resizing every image to S x S; the class count from the class folders or, for an npz, the declared
``dataset.num_classes`` (never the labels). The training record count sets q = B / n: ``dataset.n_train`` declares it,
or 0 counts it once (the report says it is treated as public).

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


def _not_held_out(X: np.ndarray, y: np.ndarray, held_out: float, split: str) -> np.ndarray:
    """The records of ``split`` when the data have no test split: a record is in the held-out test part when its
    salted hash (dpgen.data.holdout.held_out_mask, the one split of private records, with the test salt) falls
    below ``held_out``; "train" is the rest. A record's part depends on that record alone: adding or removing one
    moves no other record between the parts."""
    from dpgen.data.holdout import TEST_SALT, held_out_mask

    test = held_out_mask(X, y, float(held_out), TEST_SALT)
    return np.flatnonzero(test if split == "test" else ~test)


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


@lru_cache(maxsize=4)
def _read_images(path: str, split: str, size: Optional[int]):
    """(X float32 [n, C, H, W], y int64, classes) of every image of the ``split`` folder ("train": the training
    folder, all of it); read once per run (cached): the held-out split needs every record's pixels."""
    classes, files = folder_layout(path)
    pairs = files[split]
    first, mode = _open(pairs[0][0], None)
    want = (size, size) if size else first.size
    X = np.empty((len(pairs), 1 if mode == "L" else 3, want[1], want[0]), dtype=np.float32)
    for i, (f, _) in enumerate(pairs):
        im = _open(f, mode)[0]
        if im.size != want:
            if not size:
                raise ValueError(f"dataset.path={path}: its images are not all of one size (the first is "
                                 f"{want[0]} x {want[1]}; the others' names and sizes are withheld: private). Give "
                                 "+dataset.options.size=<S> to resize every image to S x S")
            from PIL import Image

            im = im.resize(want, Image.BILINEAR)
        a = np.asarray(im, dtype=np.float32) / 255.0
        X[i] = a[None] if a.ndim == 2 else a.transpose(2, 0, 1)
    y = np.array([label for _, label in pairs], dtype=np.int64)
    X.setflags(write=False)
    y.setflags(write=False)
    return X, y, len(classes)


def _folder_arrays(path: str, split: str, size: Optional[int], held_out: float):
    _, files = folder_layout(path)
    if "test" in files:  # a test folder of its own: each split is its folder
        return _read_images(path, split, size)
    X, y, k = _read_images(path, "train", size)  # no test folder: a held-out part of the training folder
    idx = _not_held_out(X, y, held_out, split)
    return X[idx], y[idx], k


def load_folder(root: Path, split: str = "train", download: bool = False, *, path: Optional[str] = None,
                size: Optional[int] = None, held_out: float = HELD_OUT) -> ArrayDataset:
    """``dataset=folder``: class sub-folders of images (module text)."""
    check_split("folder", split)
    X, y, k = _folder_arrays(str(_need_path(path, "folder")), split, int(size) if size else None, _fraction(held_out))
    # copies: the cached arrays stay as read
    return ArrayDataset(torch.from_numpy(np.array(X)), torch.from_numpy(np.array(y)), name="folder", num_classes=k,
                        split=split,
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


#: the smallest and largest image side an npz's x may have: an x whose sides fall outside was laid out wrongly
#: (records not first, flattened images): its shape is refused at configuration time
MIN_SIDE, MAX_SIDE = 4, 4096
#: the most one side may exceed the other (a transposed [H, W, n] array reads as n = H images of W x n)
MAX_RATIO = 8
LAYOUTS = ("[n, H, W], [n, H, W, C] or [n, C, H, W] (n records first, C 1 or 3, H and W from {lo} to {hi}, neither "
           "more than 8 times the other)")


def npz_layout(shape, path: str) -> Tuple[str, int, int, int]:
    """(layout "nhw" | "nhwc" | "nchw", C, H, W) of an npz's x of ``shape``, or a ValueError that names the rule
    and the fix but no dimension (one of them may be the record count, which is private)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) == 3:
        layout, (c, h, w) = "nhw", (1, *shape[1:])
    elif len(shape) == 4 and shape[-1] in (1, 3) and shape[1] not in (1, 3):
        layout, (h, w, c) = "nhwc", shape[1:]
    elif len(shape) == 4 and shape[1] in (1, 3):
        layout, (c, h, w) = "nchw", shape[1:]
    else:
        layout, c, h, w = "", 0, 0, 0
    if not layout or not (MIN_SIDE <= h <= MAX_SIDE and MIN_SIDE <= w <= MAX_SIDE) or max(h, w) > MAX_RATIO * min(h, w):
        raise ValueError(f"dataset.path={path}: x does not read as images: give {LAYOUTS.format(lo=MIN_SIDE, hi=MAX_SIDE)}"
                         " (its shape is not printed: one of its dimensions may be the record count). A transposed "
                         "array: x = x.transpose(2, 0, 1); flattened images: x = x.reshape(n, H, W). `python -m "
                         "dpgen.data.own <file>` prints the shape for you, outside any run")
    return layout, int(c), int(h), int(w)


def _chw(x: np.ndarray, path: str) -> np.ndarray:
    """Images as float32 ``[n, C, H, W]`` in [0, 1]."""
    layout = npz_layout(x.shape, path)[0]
    x = x[:, None] if layout == "nhw" else x.transpose(0, 3, 1, 2) if layout == "nhwc" else x
    if x.dtype == np.uint8:
        return x.astype(np.float32) / 255.0
    x = x.astype(np.float32)
    if not np.isfinite(x).all() or x.min() < 0 or x.max() > 1:
        raise ValueError(f"dataset.path={path}: x holds floats outside [0, 1] (or not finite): give uint8 0..255 "
                         "or floats in [0, 1]")
    return x


def _labels(y, path: str) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"dataset.path={path}: y must be a 1-d array of integer labels 0..K-1")
    return y


def npz_classes(path: str, declared: Optional[int] = None) -> int:
    """The class count: ``declared`` (dataset.num_classes), a public fact. Never read from the labels: the largest
    private label is a value computed from the records (a record labelled 12 would make 13 classes)."""
    if not declared:
        raise ValueError(f"dataset=npz dataset.path={path}: declare the number of classes, dataset.num_classes=K (a "
                         "public fact; it is not read from the labels, which are private)")
    _labels(_npz(str(path))["y"], str(path))
    return int(declared)


@lru_cache(maxsize=4)
def _npz_records(path: str, split: str, held_out: float):
    """(x float32 [n, C, H, W] in [0, 1], y) of ``split``: x_test / y_test for "test" when the file has them, else
    the part of x, y the per-record hash puts in ``split``. Read once per run (cached)."""
    a = _npz(path)
    if len(a["x"]) != len(a["y"]) or ("x_test" in a and len(a["x_test"]) != len(a.get("y_test", ()))):
        raise ValueError(f"dataset.path={path}: x and y hold different numbers of records (the numbers are withheld: "
                         "private): the labels must belong to the images")
    if "x_test" in a and "y_test" in a:
        x, y = (a["x"], a["y"]) if split == "train" else (a["x_test"], a["y_test"])
        return _chw(np.asarray(x), path), _labels(y, path)
    x, y = _chw(np.asarray(a["x"]), path), _labels(a["y"], path)
    idx = _not_held_out(x, y, held_out, split)
    return x[idx], y[idx]


def load_npz(root: Path, split: str = "train", download: bool = False, *, path: Optional[str] = None,
             size: Optional[int] = None, held_out: float = HELD_OUT,
             num_classes: Optional[int] = None) -> ArrayDataset:
    """``dataset=npz``: arrays x, y (and x_test, y_test) of one file (module text). Labels outside 0..K-1 are not
    refused here (a refusal would tell a set from the same set plus such a record): a private method gives such a
    record a zero contribution (dpgen.utils.labels), a non-private run refuses them."""
    check_split("npz", split)
    path = str(_need_path(path, "npz"))
    k = npz_classes(path, num_classes)
    if k < 2:
        raise ValueError(f"dataset.num_classes={k}: a conditional generator needs two classes at least")
    x, y = _npz_records(path, split, _fraction(held_out))
    X = torch.from_numpy(np.array(x, dtype=np.float32))  # a copy: the cached arrays stay as read
    X = resize_images(X, int(size) if size else None)
    return ArrayDataset(X, torch.from_numpy(y.astype(np.int64)), name="npz", num_classes=k, split=split,
                        source=path)


def _fraction(held_out) -> float:
    f = float(HELD_OUT if held_out is None else held_out)
    if not 0.0 < f < 1.0:
        raise ValueError(f"dataset.options.held_out={held_out!r}: give the fraction of the records held out as the "
                         "test split when the data have none, in (0, 1) (default 0.1)")
    return f


def own_shape(kind: str):
    """The records' shape ``(C, H, W)`` from the options (``path``, ``size``): a folder's first image's mode and
    size (the report lists this under not_covered), an npz's x shape (checked: :func:`npz_layout`); with ``size``,
    S x S."""

    def shape(opts: dict) -> Tuple[int, ...]:
        path, size = opts.get("path"), opts.get("size")
        if not path:
            return (1, int(size or 28), int(size or 28))  # composing without a path: the run says what is missing
        if kind == "folder":
            _, files = folder_layout(str(path))
            im, mode = _open(files["train"][0][0], None)
            c, (w, h) = (1 if mode == "L" else 3), im.size
        else:
            _, c, h, w = npz_layout(_npz(str(path))["x"].shape, str(path))
        return (c, int(size or h), int(size or w))

    return shape


def own_classes(kind: str):
    def classes(opts: dict) -> Optional[int]:
        if not opts.get("path"):
            return 10
        if kind == "folder":
            return len(folder_layout(str(opts["path"]))[0])
        # an npz: the declared dataset.num_classes (None: the config must declare it)
        return int(opts["num_classes"]) if opts.get("num_classes") else None

    return classes


def own_count(kind: str):
    """The training record count, counted once (``dataset.n_train=0``): treated as public, the report says so.
    Without a test split of their own, the held-out part is decided per record by its hash, so the count reads
    every record (once: the loader reuses what it read)."""

    def count(opts: dict) -> int:
        path, held_out = str(opts["path"]), _fraction(opts.get("held_out"))
        if kind == "folder":
            _, files = folder_layout(path)
            if "test" in files:
                return len(files["train"])
            size = int(opts["size"]) if opts.get("size") else None
            return len(_folder_arrays(path, "train", size, held_out)[1])
        a = _npz(path)
        if "x_test" in a and "y_test" in a:
            return len(a["y"])
        return len(_npz_records(path, "train", held_out)[1])

    return count


def has_test_split(kind: str, path: str) -> bool:
    """Whether your own data at ``path`` bring a test split of their own (else a part is held out as the test
    split): a public fact of the layout (a test folder; x_test / y_test in the npz)."""
    if kind == "folder":
        return "test" in folder_layout(str(path))[1]
    if kind == "npz":
        a = _npz(str(path))
        return "x_test" in a and "y_test" in a
    return True


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
                shape_fn=own_shape(kind), classes_fn=own_classes(kind), count_fn=own_count(kind),
                declared_options=("num_classes",) if kind == "npz" else ()))


_register()

if __name__ == "__main__":
    sys.exit(check(sys.argv[1]) if len(sys.argv) == 2 else print("usage: python -m dpgen.data.own <dir or file.npz>"))
