"""FID of several independent draws from one finished generation run: how much a table's FID cell moves with the
draw alone (no retraining), so two cells a few FID apart can be read against it.

Each draw is ``--n`` images from the run's generator (read as ``dpgen sample`` reads it: ``checkpoints/last.pt``,
the EMA when the run kept one), seeded ``--seed + 1000 x i``, measured against the whole real test split of the
run's dataset (its Inception features cached under outputs/fid_stats) with precision / recall (k = 5). Only
generated images and the public test split are measured: post-processing of the released generator.

    python scripts/fid_draws.py <run folder> [<run folder> ...] [--draws 3] [--n 2000] [--out F.json]
        [--sharpen K [--sharpen-at T]] [--data-root DIR]

``--sharpen K`` draws through model.sharpen's contrast curve of slope K (0: none) in place of the run's own (the
curve its selection.json chose on held-out records, else its model.sharpen).

Prints one line per draw, then each run's mean and sample std, and writes a JSON list (``--out``, atomically,
after every draw).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def fid_of_draw(gen, cfg, n: int, seed: int, device: str = "cpu", progress: bool = True) -> dict:
    from dpgen.tasks.generation import fid_of_generator

    return fid_of_generator(cfg, gen, tuple(int(s) for s in cfg.dataset.shape), device, progress, n=n, seed=seed)


def summary(fids) -> dict:
    fids = [float(f) for f in fids if f is not None]
    return {"fid_mean": statistics.fmean(fids) if fids else None,
            "fid_std": statistics.stdev(fids) if len(fids) > 1 else None, "n_draws": len(fids)}


def main(argv=None):
    from dpgen.tasks.finished_run import add_data_root_argument, add_sharpen_arguments, sharpen_from_args

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--draws", type=int, default=3, help="independent draws per run (default 3)")
    ap.add_argument("--n", type=int, default=2000, help="generated images per draw (default 2000)")
    ap.add_argument("--seed", type=int, default=1, help="draw i is seeded seed + 1000 i (default 1)")
    ap.add_argument("--device", default="cpu")
    add_sharpen_arguments(ap)
    add_data_root_argument(ap)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    sharpen = sharpen_from_args(ap, args)
    if args.draws < 1 or args.n < 2:
        ap.error(f"--draws {args.draws} / --n {args.n}: need at least 1 draw of at least 2 images")
    from dpgen.eval.fid import get_extractor
    from dpgen.release import load_generator
    from dpgen.tasks.finished_run import run_curve
    from dpgen.utils.io import atomic_write_text
    from dpgen.utils.threads import ThreadShare

    get_extractor(device=args.device)  # FIDUnavailable names the missing weights before anything is drawn
    results = []
    with ThreadShare("auto"):
        for run in args.runs:
            curve, _ = run_curve(run, sharpen)  # the run's selected curve, as released, unless --sharpen
            cfg, _, gen, _, _, _ = load_generator(run, args.device, sharpen=curve, data_root=args.data_root)
            draws = []
            for i in range(args.draws):
                t0 = time.time()
                r = fid_of_draw(gen, cfg, args.n, args.seed + 1000 * i, args.device)
                draws.append({"seed": args.seed + 1000 * i, "fid": r["fid"], "precision": r.get("precision"),
                              "recall": r.get("recall"), "seconds": round(time.time() - t0, 1)})
                print(json.dumps({"run": str(run), **draws[-1]}), flush=True)
                row = {"run": str(run), "n": args.n, "sharpen": curve, "draws": draws,
                       **summary(d["fid"] for d in draws)}
                results = [*[x for x in results if x["run"] != str(run)], row]
                if args.out:
                    atomic_write_text(args.out, json.dumps(results, indent=2, default=str))
            print(json.dumps({k: v for k, v in results[-1].items() if k != "draws"}), flush=True)
    return results


if __name__ == "__main__":
    main()
