"""The one owner of a run's private records: :class:`PrivateData`.

Everything that reads private training records goes through this object: the training tasks (a step's batch, a
release of the whole set before training), the selection mechanism on the held-out validation part
(scripts/select_on_validation.py) and the audits. It

* reads the records once (:func:`dpgen.data.load_split`), split by the one per-record hash
  (:func:`dpgen.data.holdout.held_out_mask`: your own data's held-out test part, ``dataset.validation``), so adding
  or removing a record changes no other record's part;
* exposes only public facts: the DECLARED size ``n`` (``dataset.n_train``), the shape and class count the config
  declares, whether the records are held in memory;
* hands out records only to a mechanism: a step's batch drawn by the method's own sampling scheme
  (:meth:`batch`), or the whole set to a method that releases it once under its own ledger (:meth:`whole`);
* never hands out counts, names or sizes: ``len()`` of it is an error, and the two checks that need the loaded size
  (:meth:`refuse_other_size`, :meth:`labels_in_range`) answer without saying it.

``tests/privacy/test_private_boundary.py`` counts the direct reads of private splits outside this module (goal 0).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch


def poisson_capacity(expected: float) -> int:
    """Rows of a padded Poisson batch (:meth:`PrivateData.static_batch`) whose expected size is ``expected`` = q n
    (the declared n: public): mean + 10 std + 30. By Bernstein's inequality a draw exceeds it with probability
    below exp(-t^2 / (2 (s^2 + t / 3))) < 1e-20 for every q n (t = 10 s + 30, s^2 = q n); such a draw runs
    unpadded. The paper's DP-Sinkhorn (q n = 50): 151 rows."""
    import math

    e = max(0.0, float(expected))
    return int(math.ceil(e + 10.0 * math.sqrt(e) + 30.0))


class PrivateSizeError(TypeError):
    """The loaded size of a private set was asked for: it is computed from the private data."""


class PrivateData:
    """The private ``part`` ("train", or "validation" under ``dataset.validation``) of the dataset a run's
    ``dataset`` config node names (module doc)."""

    def __init__(self, dataset_cfg, part: str = "train", device: Optional[torch.device] = None) -> None:
        from dpgen.data import load_split

        if part not in ("train", "validation"):
            raise ValueError(f"PrivateData(part={part!r}): the private parts are train and validation; the test split "
                             "is public (dpgen.data.load_split reads it)")
        self._hold(load_split(dataset_cfg, part), part, int(dataset_cfg.n_train), str(dataset_cfg.name),
                   tuple(dataset_cfg.shape or ()), int(dataset_cfg.num_classes or 0), device)

    @classmethod
    def holding(cls, ds, *, n: int, name: str, part: str = "train", device=None) -> "PrivateData":
        """The owner of records a task read with a loader of its own (a domain-adaptation problem's private
        target), from now on the only holder of them."""
        self = cls.__new__(cls)
        self._hold(ds, part, int(n), str(name), (), 0, device)
        return self

    def _hold(self, ds, part: str, n: int, name: str, shape, num_classes: int, device) -> None:
        self._ds = ds
        self.part = part
        #: the declared size n (public): q = B / n, the epochs, the noise and every published count use it
        self.n = n
        self.name = name
        #: the record shape and class count: the loader's public facts (config-declared where they must be)
        self.shape = tuple(int(s) for s in ds.shape) if hasattr(ds, "shape") else tuple(shape)
        self.num_classes = int(ds.num_classes or num_classes or 0)  # a loader's set (ArrayDataset, CelebA) says it
        self.in_memory = hasattr(ds, "tensors")
        self.device = torch.device("cpu") if device is None else torch.device(device)
        self._X: Optional[torch.Tensor] = None
        self._Y: Optional[torch.Tensor] = None
        if self.in_memory:
            self._X, self._Y = ds.tensors[0].to(self.device), ds.tensors[1].to(self.device)

    def __len__(self) -> int:
        raise PrivateSizeError("the number of private records loaded is computed from the private data: use .n, the "
                               "declared size (dataset.n_train)")

    def __repr__(self) -> str:
        return f"PrivateData({self.name!r}, part={self.part!r}, n declared {self.n}, shape={self.shape})"

    # ---- what a mechanism reads ------------------------------------------------------------------------------
    def _loaded(self) -> int:
        return int(self._X.shape[0]) if self._X is not None else len(self._ds)

    def batch(self, method, batch_size: int, generator: torch.Generator, keep_empty: bool = False
              ) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        """This step's private batch ``(x, y)`` on the device, drawn by ``method.sample_batch`` (the sampling
        scheme its ledger charges); an empty Poisson batch is None, or empty tensors with ``keep_empty``."""
        idx = method.sample_batch(self._loaded(), int(batch_size), generator)
        if idx.numel() == 0 and not keep_empty:
            return None
        return self._rows(idx)  # lazy datasets (CelebA): this step's records only

    def static_batch(self, method, batch_size: int, generator: torch.Generator, capacity: int
                     ) -> Optional[Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]]:
        """This step's batch as :meth:`batch` draws it (the same draw, the same generator calls), padded to
        ``capacity`` rows with a bool ``mask`` of the records (padding: record 0's row, masked, which a masked loss
        replaces by 0 before reading): every step then has the same shapes, what a CUDA graph of the step needs.
        The draw's size is known on the host (Poisson indices are drawn there): a batch above ``capacity`` comes
        unpadded, ``mask`` None (:func:`poisson_capacity` makes that rarer than 1e-20 a step), an empty one is
        None. The padding and the fallback depend on the draw, which nothing publishes."""
        idx = method.sample_batch(self._loaded(), int(batch_size), generator)
        m = int(idx.numel())  # a host tensor's size: no device read
        if m == 0:
            return None
        if m > capacity:
            return (*self._rows(idx), None)
        pad = torch.cat([idx, torch.zeros(capacity - m, dtype=idx.dtype)])
        return (*self._rows(pad), torch.arange(capacity, device=self.device) < m)

    def _rows(self, idx: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        if self._X is not None:
            idx = idx.to(self.device)
            return self._X[idx], self._Y[idx]
        items = [self._ds[int(i)] for i in idx]
        return (torch.stack([x for x, _ in items]).to(self.device),
                torch.as_tensor([int(y) for _, y in items], device=self.device))

    def whole(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """Every record ``(X, y)`` on the device: for a mechanism that releases the whole set once under its own
        ledger (a DP mean, DP-MERF's embedding, a local privatisation) and for the selection mechanism of the
        validation part. A lazily read set cannot give it."""
        if self._X is None:
            raise ValueError(f"{self.name} is read lazily: a method that releases the whole private set at once "
                             "needs an in-memory dataset (e.g. method.center=none)")
        return self._X, self._Y

    def replace(self, X: torch.Tensor, Y: torch.Tensor) -> None:
        """Train on ``(X, Y)`` from now on: the set a method transformed once before training (``prepare_data``:
        centred by a DP mean, privatised locally), one record for one record."""
        self._X, self._Y = X, Y

    # ---- checks that read the loaded size without saying it ---------------------------------------------------
    def refuse_other_size(self, why: str) -> None:
        """Refuse (ValueError) a set whose size is not the declared n, without saying the loaded size: for
        replace-one mechanisms, whose neighbours have the same n (``why`` names the method and the relation)."""
        if self._loaded() != self.n:
            raise ValueError(f"dataset.n_train={self.n} is not the size of the private set dataset={self.name} loaded. "
                             f"{why}: set dataset.n_train to the number of records in the files (the loaded size is "
                             "not printed: it is computed from the private data).")

    def labels_in_range(self) -> bool:
        """Whether every label lies in 0..num_classes-1 (a non-private run refuses otherwise; a private method
        gives such a record a zero contribution instead, since a refusal would tell D from D plus that record)."""
        if self._Y is None or self.num_classes <= 0 or self._Y.numel() == 0:
            return True
        return bool(((self._Y >= 0) & (self._Y < self.num_classes)).all())


__all__ = ["PrivateData", "PrivateSizeError"]
