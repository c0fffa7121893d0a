"""Pre-extracted ResNet-50 features (2048-d) of VisDA-2017 and Office-31 (DP-SWD domain adaptation).

Layout (one file per domain, first match wins)::

    <data_root>/visda/{train,validation}.npz          train = synthetic renderings, validation = real photos
    <data_root>/office31/{amazon,dslr,webcam}.npz

Each ``.npz`` holds ``features`` float32 ``[n, 2048]`` and ``labels`` int ``[n]`` (0-based). Also
accepted, in this order: ``<domain>.pt`` (a dict with the same two keys), the pair
``<domain>_features.npy`` + ``<domain>_labels.npy``, and ``<domain>.csv`` (one row per image: the
2,048 features then the label, as in the ResNet-50 feature files of jindongwang/transferlearning).
A split-specific file ``<domain>_<split>.<ext>`` is preferred when present; otherwise every split
returns the whole domain (the transductive domain-adaptation protocol of the paper, whose configs
have ``n_test: 0``).

The features are returned as stored (float32, *not* rescaled to [0, 1]).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from dpgen.data.base import ArrayDataset, check_split, missing_files_error

FEATURE_SETS: Dict[str, dict] = {
    "visda": {
        "folder": "visda",
        "num_classes": 12,
        "domains": ("train", "validation"),
        "default": "validation",
        "aliases": {"synthetic": "train", "source": "train", "real": "validation", "val": "validation",
                    "target": "validation"},
    },
    "office31": {
        "folder": "office31",
        "num_classes": 31,
        "domains": ("amazon", "dslr", "webcam"),
        "default": "dslr",
        "aliases": {"a": "amazon", "d": "dslr", "w": "webcam"},
    },
}

FEATURE_DIM = 2048


def _candidates(folder: Path, stem: str) -> List[Tuple[str, Path]]:
    return [("npz", folder / f"{stem}.npz"), ("pt", folder / f"{stem}.pt"),
            ("npy", folder / f"{stem}_features.npy"), ("csv", folder / f"{stem}.csv")]


def _read(kind: str, path: Path, name: str) -> Tuple[np.ndarray, np.ndarray]:
    if kind == "npz":
        with np.load(path) as z:
            if "features" not in z or "labels" not in z:
                raise ValueError(f"{name}: {path} must hold arrays 'features' and 'labels' (has {', '.join(z.files)})")
            return np.asarray(z["features"]), np.asarray(z["labels"])
    if kind == "pt":
        obj = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(obj, dict) or "features" not in obj or "labels" not in obj:
            raise ValueError(f"{name}: {path} must be a dict with keys 'features' and 'labels'")
        return np.asarray(obj["features"]), np.asarray(obj["labels"])
    if kind == "npy":
        lab = path.with_name(path.name.replace("_features.npy", "_labels.npy"))
        if not lab.exists():
            raise FileNotFoundError(f"{name}: {path} found but its labels file {lab} is missing")
        return np.load(path), np.load(lab)
    table = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    return table[:, :-1], table[:, -1]


def load_features(name: str, root: Path, split: str = "train", download: bool = False, *,
                  domain: Optional[str] = None) -> ArrayDataset:
    spec = FEATURE_SETS[name]
    check_split(name, split, ("train", "test", "all"))
    domain = spec["default"] if domain is None else str(domain)
    domain = spec["aliases"].get(domain.lower(), domain.lower())
    if domain not in spec["domains"]:
        raise ValueError(f"dataset {name!r}: domain={domain!r} is invalid: choose one of "
                         f"{', '.join(spec['domains'])}.")
    folder = root / spec["folder"]
    cands = _candidates(folder, f"{domain}_{split}") + _candidates(folder, domain)
    found = next(((k, p) for k, p in cands if p.exists()), None)
    if found is None:
        raise missing_files_error(
            name, [p for _, p in _candidates(folder, domain)],
            f"These are pre-extracted ImageNet ResNet-50 features (no automatic download): save each domain "
            f"as {folder}/<domain>.npz with arrays 'features' [n, {FEATURE_DIM}] and 'labels' [n]",
        )
    kind, path = found
    feats, labels = _read(kind, path, name)
    feats = np.asarray(feats, dtype=np.float32)
    labels = np.asarray(labels).reshape(-1)
    if feats.ndim != 2 or len(feats) != len(labels):
        raise ValueError(f"{name}: {path}: the features (dimension {feats.shape[1:] if feats.ndim == 2 else '?'}) "
                         "and the labels do not match: features must be [n, d] and labels [n] (the counts are not "
                         "printed: they may be private)")
    if not np.all(np.equal(np.mod(labels, 1), 0)):
        raise ValueError(f"{name}: {path}: labels must be integers")
    labels = labels.astype(np.int64)
    if len(labels) and (labels.min() < 0 or labels.max() >= spec["num_classes"]):
        raise ValueError(f"{name}: {path}: some labels lie outside 0..{spec['num_classes'] - 1} (the values found "
                         "are not printed: they are private); relabel them 0-based")
    ds = ArrayDataset(torch.from_numpy(feats), torch.from_numpy(labels), name=name,
                      num_classes=spec["num_classes"], split=split, source=str(path))
    ds.domain = domain
    return ds


def load_visda(root: Path, split: str = "train", download: bool = False, *,
               domain: Optional[str] = None) -> ArrayDataset:
    """VisDA-2017 ResNet-50 features; ``domain`` = train (synthetic) or validation (real, default)."""
    return load_features("visda", root, split, download, domain=domain)


def load_office31(root: Path, split: str = "train", download: bool = False, *,
                  domain: Optional[str] = None) -> ArrayDataset:
    """Office-31 ResNet-50 features; ``domain`` = amazon, dslr (default) or webcam."""
    return load_features("office31", root, split, download, domain=domain)
