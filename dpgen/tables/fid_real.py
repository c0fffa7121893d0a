"""FID of real data: the training split against the test split (DP-Sinkhorn's Table 1 "Real data" row: FID 1.6
on MNIST, 2.5 on Fashion-MNIST, 60,000 training vs 10,000 test images), with dpgen's FID pipeline: an external
check of the feature pass, the resize and the Frechet distance.

    python -m dpgen.tables.fid_real [--datasets mnist,fashion_mnist] [--n-train 60000] [--chunk 10000]
        [--data-root DIR]                                    -> outputs/tables/fid_real_data.{csv,md}
    python -m dpgen.tables.fid_real --lowpass 10,14 ...      -> outputs/tables/fid_real_lowpass.{csv,md}
    python -m dpgen.tables.fid_real --resize tf1 ...         -> outputs/tables/fid_real_data_tf1_resize.{csv,md}

``--lowpass K[,K...]``: the training images projected onto their K x K lowest DCT frequencies and clamped to
[0, 1] first (dpgen.utils.dct.lowpass: the real images' orthogonal projections onto the band that the ``dct``
generator's fixed decode draws in at ``model.dct_size=K``, clamped as it clamps), so the table shows what the band
limit alone does to the real images in Inception space. It is not a floor for a generator behind the barrier: FID
is not L2, and a generator's smooth samples can score better than the real images' band-limited versions, which
ring. A diagnostic of the design, measured on the private training split like the paper's row: not a basis for
choosing K (choose K on a public proxy or on a held-out part under its own accounting).

``--resize tf1``: the images reach 299 x 299 and [-1, 1] as in the TensorFlow 1 FID code (Heusel et
al.'s original, TTUR): tf.image.resize_bilinear's legacy sampling (output pixel i
reads input position i * 28 / 299, no half-pixel centres) and (255 x - 128) / 128, in place of pytorch-fid's
half-pixel bilinear resize and 2 x - 1 (dpgen.eval.fid.RESIZES). Same weights, same Frechet distance: the
table shows how much of a published FID the resize convention alone moves. The test split's features are
cached under their own key (the extractor's weights name ends in ``+tf1-resize``).

The test split's features are cached (outputs/fid_stats, as every generation run's FID reads them). The training
split is the private set: its features are held in memory only, never cached; the FID is computed after every
``--chunk`` training images (the first n of the file), so the table shows how FID falls with n and an
interruption keeps every count finished so far. This number is a statistic of the training set itself, not a
differentially private release: a reference for the pipeline, as the paper's row is.
"""

from __future__ import annotations

import argparse
import time
from typing import Dict, List, Optional

import numpy as np

from dpgen.utils.paper import read_paper_table

COLUMNS = ["dataset", "lowpass", "n_train", "n_test", "fid", "fid_paper", "paper_sizes", "seconds"]
PAPER_COLUMN = {"mnist": "MNIST_FID", "fashion_mnist": "FMNIST_FID"}


def _kept_rows(path, measured: List[tuple]) -> List[Dict]:
    """The rows of an earlier table for (data set, lowpass) pairs this call does not measure (one table for all)."""
    import csv

    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if (r.get("dataset"), str(r.get("lowpass") or "")) not in measured]


def run(datasets: List[str], n_train: int = 60000, chunk: int = 10000, data_root=None,
        lowpass: Optional[List[int]] = None, resize: str = "pytorch") -> List[Dict]:
    import torch

    from dpgen.config import compose_config
    from dpgen.data import as_tensors, load_split
    from dpgen.data.private import PrivateData
    from dpgen.eval.fid import fid_from_activations, get_extractor, real_features
    from dpgen.utils.dct import lowpass as project
    from dpgen.utils.io import outputs_dir, write_table

    paper = {r["method"]: r for r in read_paper_table("dpsinkhorn_table1_mnist_fmnist")}["Real data"]
    ext = get_extractor(device="cpu" if not torch.cuda.is_available() else "cuda", resize=resize)
    bands = [int(k) for k in lowpass] if lowpass else [None]
    table = ("fid_real_lowpass" if lowpass else "fid_real_data") + ("" if resize == "pytorch" else f"_{resize}_resize")
    rows: List[Dict] = _kept_rows(outputs_dir() / "tables" / f"{table}.csv",
                                  [(ds, str(k or "")) for ds in datasets for k in bands])
    for ds, k in [(ds, k) for ds in datasets for k in bands]:
        cfg = compose_config([f"dataset={ds}", *([f"dataset.data_root={data_root}"] if data_root else [])])
        t0 = time.time()
        x_test = as_tensors(load_split(cfg.dataset, "test"))[0]
        real = real_features(f"{ds}_test", x_test, outputs_dir() / "fid_stats", extractor=ext, progress=True)
        x_train = PrivateData(cfg.dataset).whole()[0][:n_train]  # the real-data row: train images against test
        if k is not None:
            x_train = project(x_train.float(), k)
        band = f", low-passed to {k} x {k} DCT" if k is not None else ""
        feats = []
        for i in range(0, len(x_train), chunk):
            feats.append(ext(x_train[i:i + chunk], progress=True, name=f"{ds} train{band} {i:,}-{i + chunk:,}"))
            a = np.concatenate(feats)
            fid = fid_from_activations(a, real)  # = frechet_distance of the two sets' (mu, sigma)
            rows.append({"dataset": ds, "lowpass": k or "", "n_train": len(a), "n_test": len(real),
                         "fid": round(fid, 3),
                         # the paper's row is of the images themselves: nothing beside a low-passed row
                         "fid_paper": float(paper[PAPER_COLUMN[ds]]) if ds in PAPER_COLUMN and k is None else None,
                         "paper_sizes": len(a) == 60000 and len(real) == 10000,
                         "seconds": round(time.time() - t0, 1)})
            print(f"[dpgen] FID({ds} train[:{len(a)}]{band}, test {len(real)}) = {fid:.3f}"
                  + (f" (paper {paper[PAPER_COLUMN[ds]]} at 60,000 vs 10,000)" if ds in PAPER_COLUMN and k is None
                     else ""), flush=True)
            notes = [__doc__.split("\n\n")[0].replace("\n", " "),
                     "Protocol: pytorch-fid's FID Inception v3 (weights from `make fid-weights`), grayscale "
                     "repeated to 3 channels, "
                     + ("bilinear resize 28 -> 299 (half-pixel centres, pytorch-fid's) and 2 x - 1"
                        if resize == "pytorch" else
                        "TensorFlow 1's legacy bilinear resize 28 -> 299 (input position i * 28 / 299) and "
                        "(255 x - 128) / 128, as the TF FID code")
                     + ", first n_train training images in file order vs the whole test split. NOT PRIVATE: a "
                     "statistic of the training set."]
            if lowpass:
                notes.append(__doc__.split("\n\n")[2].replace("\n", " ").replace("``", "`"))
            if resize != "pytorch":
                notes.append(__doc__.split("\n\n")[3].replace("\n", " ").replace("``", "`"))
            write_table(table, rows, COLUMNS, echo=False, notes=notes,
                        title="FID of real data: training split" + (" low-passed to K x K DCT frequencies"
                                                                     if lowpass else "") + " vs test split"
                        + ("" if resize == "pytorch" else f", {resize} resize"))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="mnist,fashion_mnist",
                    help="any image data sets (the paper's value beside mnist and fashion_mnist), e.g. digits")
    ap.add_argument("--n-train", type=int, default=60000, help="training images (the paper: 60,000)")
    ap.add_argument("--chunk", type=int, default=10000, help="FID after every CHUNK training images")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--lowpass", default=None, metavar="K[,K...]",
                    help="low-pass the training images to K x K DCT frequencies first (what the dct generator's band "
                         "limit does to real images)")
    ap.add_argument("--resize", default="pytorch", choices=["pytorch", "tf1"],
                    help="pytorch (pytorch-fid's, every run's FID) or tf1 (the TensorFlow 1 FID code's legacy "
                         "bilinear resize and input scaling)")
    args = ap.parse_args(argv)
    if args.n_train < 2 or args.chunk < 2:
        ap.error("--n-train and --chunk must be at least 2")
    try:
        bands = [int(k) for k in args.lowpass.split(",") if k.strip()] if args.lowpass else None
    except ValueError:
        ap.error(f"--lowpass {args.lowpass!r}: give integers K >= 1, comma-separated, e.g. --lowpass 10,14")
    if bands is not None and (not bands or min(bands) < 1):
        ap.error(f"--lowpass {args.lowpass!r}: give integers K >= 1, comma-separated, e.g. --lowpass 10,14")
    from dpgen.utils.threads import ThreadShare

    with ThreadShare("auto"):
        run([d.strip() for d in args.datasets.split(",") if d.strip()], args.n_train, args.chunk, args.data_root,
            bands, args.resize)


if __name__ == "__main__":
    main()
