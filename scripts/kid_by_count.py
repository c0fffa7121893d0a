"""KID and FID of one finished run's generator at growing generated counts against the same real test images: the
measurement behind task.fidelity=quick (KID's estimate does not move with the count, FID's falls).

    python scripts/kid_by_count.py <run folder> [--n 3600] [--counts 100,300,1000,1800] [--out <file.json>]

Draws ``--n`` images once (seed 12345), computes their Inception features, splits them into disjoint draws of each
count and prints, per count, the mean and std across draws of FID and KID against the run's test split (all of it;
its features cached as a run caches them). 3,600 images take about 3 minutes on 2 CPU cores.
experiments/fid/kid_vs_fid_sample_size_default_2026-12-05.json was measured so on the default run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def by_count(gen_features: np.ndarray, real_features: np.ndarray, counts) -> dict:
    from dpgen.eval.fid import activation_statistics, frechet_distance
    from dpgen.eval.kid import kid

    rs = activation_statistics(real_features)
    out = {}
    for n in counts:
        draws = len(gen_features) // n
        fids, kids = [], []
        for i in range(draws):
            g = gen_features[i * n:(i + 1) * n]
            fids.append(frechet_distance(*activation_statistics(g), *rs))
            kids.append(kid(g, real_features)["kid"])
        std = (lambda v: float(np.std(v, ddof=1)) if len(v) > 1 else None)
        out[str(n)] = {"draws": draws, "fid_mean": float(np.mean(fids)), "fid_std": std(fids),
                       "kid_mean": float(np.mean(kids)), "kid_std": std(kids)}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run")
    p.add_argument("--n", type=int, default=3600)
    p.add_argument("--counts", default="100,300,1000,1800")
    p.add_argument("--out")
    a = p.parse_args(argv)
    from dpgen.data import as_tensors, load_split
    from dpgen.eval.fid import get_extractor, real_features
    from dpgen.tasks.finished_run import load_generator
    from dpgen.utils.io import outputs_dir, write_json

    cfg, _, gen, shape, _, _ = load_generator(a.run, "cpu")
    g = torch.Generator().manual_seed(12345)
    with torch.no_grad():
        x = torch.cat([gen.sample(min(500, a.n - i), generator=g, device="cpu")[0] for i in range(0, a.n, 500)])
    ext = get_extractor(device="cpu")
    fake = ext(x, tuple(shape), progress=True, name="generated")
    x_test = as_tensors(load_split(cfg.dataset, "test"))[0]
    real = real_features(f"{cfg.dataset.name}_test", x_test, outputs_dir() / "fid_stats", extractor=ext,
                         image_shape=tuple(shape), progress=True)
    res = by_count(fake, real, [int(c) for c in a.counts.split(",")])
    print(json.dumps(res, indent=1))
    if a.out:
        write_json(Path(a.out), {"run": str(a.run), "generated": a.n, "real": len(real), "by_generated_count": res})
    return 0


if __name__ == "__main__":
    sys.exit(main())
