"""Every split of private records: one salted per-record hash (``dataset.validation``, your own data's test part).

:func:`held_out_mask` is the one function that splits private records, whoever asks: the validation split of
``dataset.validation`` (salt :data:`SALT`) and the test part held out of your own data when it has none
(:data:`TEST_SALT`, dpgen.data.own). Each record's part is decided by that record alone: a SHA-256 of a public salt, its label and its pixels, read as a
number in [0, 1); records below ``fraction`` form the validation split, the others the training split. Adding or
removing one record therefore changes one part and leaves every other record where it was, so a mechanism run on
the training part and a mechanism run on the validation part compose in parallel under the add/remove relation:
the pair is (max(eps_1, eps_2), max(delta_1, delta_2))-DP, the second may even read the first's output. Under the
replace-one relation a replaced record may move between the parts, and the costs add: dpgen refuses the holdout
for every private method whose neighbours replace one record (sampling without replacement, a full-batch release
such as DP-MERF's, a local release such as entropic-LDP's; dpgen.privacy.preflight.check_declared_size).

The parts' sizes are computed from the private data: nothing here prints or returns them beyond the datasets
themselves (they stay in memory).
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from dpgen.data.base import ArrayDataset

#: the public salt of the validation split's hash (a new salt draws a new, equally valid partition)
SALT = b"dpgen-validation-v1"
#: the public salt of the test part held out of your own data when it has no test split (dpgen.data.own): another
#: salt than the validation split's, so that the two parts are drawn independently
TEST_SALT = b"dpgen-own-test-v1"
#: the splits ``load_split`` knows for a holdout
PARTS = ("train", "validation")


def check_fraction(fraction) -> float:
    """``dataset.validation`` as a float in [0, 0.5], or a ValueError naming the value and the fix."""
    try:
        f = float(fraction or 0.0)
    except (TypeError, ValueError):
        raise ValueError(f"dataset.validation={fraction!r} is not a number: give the fraction of the private training "
                         "records to hold out as a validation split, e.g. dataset.validation=0.05 (0: none)") from None
    if not (0.0 <= f <= 0.5):
        raise ValueError(f"dataset.validation={fraction!r} is out of range: give a fraction in [0, 0.5] of the private "
                         "training records to hold out (0: none; 0.05 holds out about one record in twenty)")
    return f


def record_positions(X, y, salt: bytes = SALT) -> np.ndarray:
    """Each record's position in [0, 1): SHA-256 of (salt, label, float32 pixels), its first 8 bytes / 2**64.
    ``X``, ``y``: tensors or arrays of the records (a record's position depends on that record alone)."""
    xs = (X.detach().to("cpu", torch.float32).contiguous().numpy() if isinstance(X, torch.Tensor) else
          np.ascontiguousarray(X, dtype=np.float32)).reshape(len(X), -1)
    ys = (y.detach().to("cpu", torch.int64).numpy() if isinstance(y, torch.Tensor) else np.asarray(y, np.int64))
    out = np.empty(len(xs), dtype=np.float64)
    for i in range(len(xs)):
        h = hashlib.sha256(salt)
        h.update(int(ys[i]).to_bytes(8, "little", signed=True))
        h.update(xs[i].tobytes())
        out[i] = int.from_bytes(h.digest()[:8], "little") / 2.0 ** 64
    return out


def held_out_mask(X, y, fraction: float, salt: bytes = SALT) -> np.ndarray:
    """Which records fall in the held-out part (their hash position below ``fraction``): the one split of private
    records. Adding or removing a record changes its own entry and no other."""
    return record_positions(X, y, salt) < float(fraction)


def holdout_part(ds, fraction: float, part: str) -> ArrayDataset:
    """The ``part`` ("train" or "validation") of the in-memory set ``ds`` under ``dataset.validation=fraction``."""
    if part not in PARTS:
        raise ValueError(f"split={part!r}: with dataset.validation the private set has the parts {', '.join(PARTS)}")
    # a loader returns an ArrayDataset (docs/EXTENDING.md) or, for CelebA, a set read lazily from its files
    if not isinstance(ds, ArrayDataset):
        raise ValueError(f"dataset.validation={fraction}: {ds.name} is read lazily, and "
                         "a validation split is carved from in-memory sets only: set dataset.validation=0")
    X, y = ds.tensors
    keep = held_out_mask(X, y, fraction)
    if part == "train":
        keep = ~keep
    idx = torch.from_numpy(np.flatnonzero(keep))
    return ArrayDataset(X[idx], y[idx], name=ds.name, num_classes=ds.num_classes, split=part,
                        source=ds.source)
