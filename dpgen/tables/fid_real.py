"""FID of real data: the training split against the test split (DP-Sinkhorn's Table 1 "Real data" row: FID 1.6
on MNIST, 2.5 on Fashion-MNIST, 60,000 training vs 10,000 test images), with dpgen's FID pipeline: an external
check of the feature pass, the resize and the Frechet distance.

    dpgen table fid_real_data --scale smoke|paper [--datasets mnist,fashion_mnist] [--data-root DIR]
                                                  -> outputs/tables/fid_real_data[_<dataset>].{csv,md}
    dpgen table fid_real_lowpass ...              -> outputs/tables/fid_real_lowpass[_<dataset>].{csv,md}
    dpgen table fid_real_data_tf1_resize ...      -> outputs/tables/fid_real_data_tf1_resize[_<dataset>].{csv,md}

Three computed tables (``conf/table/fid_real*.yaml``, ``make fid-real-data``), one per data set (the YAML's first,
mnist, keeps the bare file name): the scale's ``n_train`` (the paper: 60,000), ``chunk``, ``lowpass``, ``resize``,
and for a smoke run ``n_test`` (the first test images; default the whole split) and ``weights: random``
(:mod:`dpgen.eval.fid`'s seeded random Inception: no weight file, a FID comparable to nothing, no paper value beside).

``lowpass: [K, ...]``: the training images projected onto their K x K lowest DCT frequencies and clamped to
[0, 1] first (dpgen.utils.dct.lowpass: the real images' orthogonal projections onto the band that the ``dct``
generator's fixed decode draws in at ``model.dct_size=K``, clamped as it clamps), so the table shows what the band
limit alone does to the real images in Inception space. It is not a floor for a generator behind the barrier: FID
is not L2, and a generator's smooth samples can score better than the real images' band-limited versions, which
ring. A diagnostic of the design, measured on the private training split like the paper's row: not a basis for
choosing K (choose K on a public proxy or on a held-out part under its own accounting).

``resize: tf1``: the images reach 299 x 299 and [-1, 1] as in the TensorFlow 1 FID code (Heusel et
al.'s original, TTUR): tf.image.resize_bilinear's legacy sampling (output pixel i
reads input position i * 28 / 299, no half-pixel centres) and (255 x - 128) / 128, in place of pytorch-fid's
half-pixel bilinear resize and 2 x - 1 (dpgen.eval.fid.RESIZES). Same weights, same Frechet distance: the
table shows how much of a published FID the resize convention alone moves. The test split's features are
cached under their own key (the extractor's weights name ends in ``+tf1-resize``).

The test split's features are cached (outputs/fid_stats, as every generation run's FID reads them). The training
split is the private set: its features are held in memory only, never cached; the FID is computed after every
``chunk`` training images (the first n of the file), so the table shows how FID falls with n; a data set's
table is written when its pass ends. This number is a statistic of the training set itself, not a
differentially private release: a reference for the pipeline, as the paper's row is.
"""

from __future__ import annotations

import time
from typing import Dict, List

import numpy as np

from dpgen.utils.paper import read_paper_table

PAPER_COLUMN = {"mnist": "MNIST_FID", "fashion_mnist": "FMNIST_FID"}


def compute(settings, run_root=None, data_root=None, seed=0, progress=True, dataset="mnist", select=None):
    """One row per band of ``lowpass`` (none: the images themselves) and count of training images (every
    ``chunk``): FID(first n training images, test split) of ``dataset``. ``settings``: the scale's ``n_train``,
    ``chunk``, ``lowpass``, ``resize`` (pytorch | tf1), ``n_test`` and ``weights`` (module doc). Deterministic:
    ``seed``, ``run_root`` and ``select`` are unused. Pictures: none."""
    import torch

    from dpgen.config import compose_config
    from dpgen.data import as_tensors, load_split
    from dpgen.data.private import PrivateData
    from dpgen.eval.fid import RANDOM, fid_from_activations, get_extractor, real_features
    from dpgen.utils.dct import lowpass as project
    from dpgen.utils.io import outputs_dir

    n_train, chunk, bands, resize, weights, n_test = _settings(settings)
    paper = {r["method"]: r for r in read_paper_table("dpsinkhorn_table1_mnist_fmnist")}["Real data"]
    # the paper's row beside ours: of the images themselves, with the real FID weights
    paper_fid = float(paper[PAPER_COLUMN[dataset]]) if dataset in PAPER_COLUMN and weights != RANDOM else None
    ext = get_extractor(weights, device="cpu" if not torch.cuda.is_available() else "cuda", resize=resize)
    cfg = compose_config([f"dataset={dataset}", *([f"dataset.data_root={data_root}"] if data_root else [])])
    rows: List[Dict] = []
    for k in bands:
        t0 = time.time()
        x_test = as_tensors(load_split(cfg.dataset, "test"))[0][:n_test]  # n_test None: the whole split
        real = real_features(f"{dataset}_test", x_test, outputs_dir() / "fid_stats", extractor=ext, progress=progress)
        x_train = PrivateData(cfg.dataset).whole()[0][:n_train]  # the real-data row: train images against test
        if k is not None:
            x_train = project(x_train.float(), k)
        band = f", low-passed to {k} x {k} DCT" if k is not None else ""
        feats = []
        for i in range(0, len(x_train), chunk):
            feats.append(ext(x_train[i:i + chunk], progress=progress,
                             name=f"{dataset} train{band} {i:,}-{i + chunk:,}"))
            a = np.concatenate(feats)
            fid = fid_from_activations(a, real)  # = frechet_distance of the two sets' (mu, sigma)
            rows.append({"dataset": dataset, "lowpass": k or "", "n_train": len(a), "n_test": len(real),
                         "fid": round(fid, 3), "fid_paper": paper_fid if k is None else None,
                         "paper_sizes": len(a) == 60000 and len(real) == 10000,
                         "seconds": round(time.time() - t0, 1)})
    return rows, {}


def _settings(s):
    """The scale's settings, checked: (n_train, chunk, bands, resize, weights, n_test)."""
    from dpgen.eval.fid import RANDOM, RESIZES

    n_train, chunk, n_test = s.get("n_train", 60000), s.get("chunk", 10000), s.get("n_test")
    for key, v in (("n_train", n_train), ("chunk", chunk), ("n_test", 2 if n_test is None else n_test)):
        if not isinstance(v, int) or v < 2:
            raise ValueError(f"{key}={v!r} in the table's scale: give an integer of at least 2")
    lowpass = s.get("lowpass")
    if lowpass is not None and (not lowpass or not all(isinstance(k, int) and k >= 1 for k in lowpass)):
        raise ValueError(f"lowpass={lowpass!r} in the table's scale: give a list of integers K >= 1, e.g. [10, 14]")
    resize, weights = s.get("resize", "pytorch"), s.get("weights")
    if resize not in RESIZES:
        raise ValueError(f"resize={resize!r} in the table's scale: give one of {', '.join(RESIZES)}")
    if weights not in (None, RANDOM):
        raise ValueError(f"weights={weights!r} in the table's scale: leave it out (the FID weights) or give {RANDOM}")
    return n_train, chunk, list(lowpass) if lowpass else [None], resize, weights, n_test


def notes_for(rows, settings, scale=None, dataset=None) -> List[str]:
    """What the table measures, its protocol (resize, counts), the band limit's and the resize's meaning."""
    from dpgen.eval.fid import RANDOM

    resize = settings.get("resize", "pytorch")
    notes = [__doc__.split("\n\n")[0].replace("\n", " "),
             "Protocol: pytorch-fid's FID Inception v3 (weights from `make fid-weights`), grayscale "
             "repeated to 3 channels, "
             + ("bilinear resize 28 -> 299 (half-pixel centres, pytorch-fid's) and 2 x - 1"
                if resize == "pytorch" else
                "TensorFlow 1's legacy bilinear resize 28 -> 299 (input position i * 28 / 299) and "
                "(255 x - 128) / 128, as the TF FID code")
             + ", first n_train training images in file order vs the "
             + ("whole test split" if settings.get("n_test") is None else f"first {settings['n_test']} test images")
             + ". NOT PRIVATE: a statistic of the training set."]
    if settings.get("weights") == RANDOM:
        notes.append("weights: random (a seeded random Inception, a smoke run): these FIDs are comparable to "
                     "nothing, the paper's value is not shown.")
    if settings.get("lowpass"):
        notes.append(__doc__.split("\n\n")[3].replace("\n", " ").replace("``", "`"))
    if resize != "pytorch":
        notes.append(__doc__.split("\n\n")[4].replace("\n", " ").replace("``", "`"))
    return notes
