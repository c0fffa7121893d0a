#!/usr/bin/env python
"""Issue 86's headline rows, trained and evaluated under both protocols by one command, then tabled.
At a budget other than 10, a preset with settings chosen at that budget's noise (conf/experiment/<preset>_eps1.yaml)
runs in the preset's place.

For each preset (ours, DP-MERF, DP-Kernel on MNIST and Fashion-MNIST, and DP-Kernel with the settings picked on the
public proxy) and seed:
  1. train it, resumable (``resume=auto``), with its own evaluation under the papers' protocol (LogReg / MLP / CNN
     on synthetic samples, FID and precision / recall of 10,000 generated vs the 10,000 test images);
  2. evaluate its generator under DPImageBench's protocol (``task.protocol=dpimagebench``): at ``--scale paper``
     their counts (60,000 synthetic, ResNet-110 for 50 epochs, FID vs the whole training split: a GPU's work), at
     ``--scale cpu`` a CPU's (5,000 synthetic, ResNet-20 for 10 epochs, FID vs 5,000 training records);
  3. with ``--restorer <file.pt>``, the MNIST OT row again through that public-data restorer, both protocols in
     one evaluation (its row says "with public data");
then ``scripts/headline_table.py`` writes ``<out>/headline.{csv,md}``. A step whose run has finished (its
evaluation included) is skipped, and one cut off in training or in its evaluation resumes, so the command goes on
where it stopped. Nothing here selects anything: every setting is the preset's (each preset's comment says where
it was chosen).

    DPGEN_DATA_ROOT=../shared/data python scripts/headline_runs.py [--scale cpu|paper] [--datasets mnist]
        [--only dpkernel_mnist,...] [--seeds 0] [--epsilons 10,1] [--restorer outputs/restorer/usps_as_mnist_band14_blur1.0.pt]
        [--out outputs/headline] [--dry-run]
    make headline SCALE=cpu DATA_ROOT=../shared/data

Measured on this 2-core CPU beside other jobs: dpsinkhorn_best_mnist 150 min of training (one thread; 36 min at
epsilon 1 since its per-record release stopped forming the records' gradients, one thread beside a second run;
60 min at its 120,000 steps since 2026-12-06, two threads, a third of it beside make test; 61 min with its
14 x 14 band, two threads, its first 23 min beside a proxy run),
dpmerf_best_mnist 8 min, dpkernel_mnist 116 min, dpkernel_proxy_mnist 137 min over three sittings; the papers'
evaluation 15-36 min a row, the DPImageBench one at CPU counts about 20 min a row. On two idle threads:
dpkernel_proxy_fmnist 90 min, evaluations 11-17 min each. make bench projects 64 (120,000 steps, band 14) / 4.5 /
141 / 186 min of training for ours / DP-MERF / DP-Kernel / DP-Kernel with the proxy's pick on a day this CPU ran
sgemm at 172 GFLOP/s (docs/SPEED.md, docs/RUNS.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dpgen.train.run_record import read_run  # noqa: E402  (a step is done when its folder says finished)

#: ours, DP-MERF, DP-Kernel at DPImageBench's settings, and DP-Kernel with the settings the USPS proxy picked
#: (docs/DPKERNEL.md, "Settings that can learn, picked on the public proxy"; carried over to Fashion-MNIST without a clothing proxy)
PRESETS = {"mnist": ("dpsinkhorn_best_mnist", "dpmerf_best_mnist", "dpkernel_mnist", "dpkernel_proxy_mnist"),
           "fashion_mnist": ("dpsinkhorn_best_fmnist", "dpmerf_best_fmnist", "dpkernel_fmnist", "dpkernel_proxy_fmnist")}
#: the OT preset a public restorer applies to (its band and frame: MNIST's)
RESTORED = "dpsinkhorn_best_mnist"
DIB_COUNTS = {"cpu": ["task.dpimagebench.n_synthetic=5000", "task.dpimagebench.fid_real=5000",
                      "task.dpimagebench.depth=20", "task.dpimagebench.epochs=10"],
              "paper": []}  # their counts are the defaults (conf/task/evaluate.yaml)


def steps(scale: str, datasets: List[str], seeds: List[int], out: Path, only: Optional[List[str]] = None,
          restorer: Optional[str] = None, epsilons: Tuple[float, ...] = (10.0,)) -> List[Tuple[str, List[str], Path]]:
    """(what, run.py arguments, the step's run folder: done when its run reads "finished"), in the order to run them."""
    if scale not in DIB_COUNTS:
        raise SystemExit(f"--scale {scale!r} is invalid: use cpu (a CPU's DPImageBench counts) or paper (theirs)")
    unknown = [d for d in datasets if d not in PRESETS]
    if unknown:
        raise SystemExit(f"--datasets {unknown} are not headline data sets: choose from {sorted(PRESETS)}")
    presets = [p for d in datasets for p in PRESETS[d]]
    if only:
        bad = [p for p in only if p not in presets]
        if bad:
            raise SystemExit(f"--only {bad}: not headline presets of {datasets}; choose from {presets}")
        presets = [p for p in presets if p in only]
    restorer = str(Path(restorer).resolve()) if restorer else None
    if restorer and not Path(restorer).is_file():
        raise SystemExit(f"--restorer {restorer}: no such file; build it with make restorer (public USPS) or leave "
                         "--restorer out")
    dib = ["task.protocol=dpimagebench", *DIB_COUNTS[scale]]
    plan = []
    for eps in epsilons:
        if not eps > 0:
            raise SystemExit(f"--epsilons {eps}: every budget must be > 0, e.g. 10,1")
    # one training and its evaluations per (budget, preset, seed); the presets' own budget is 10
    for preset, seed, eps in ((p, s, e) for e in epsilons for p in presets for s in seeds):
        tag = "" if eps == 10 else f"_eps{eps:g}"
        run = out / f"{preset}{tag}_seed{seed}"
        # a budget with settings of its own (chosen at its noise: conf/experiment/<preset>_eps<budget>.yaml) uses them
        own = f"{preset}{tag}" if tag and (ROOT / "conf" / "experiment" / f"{preset}{tag}.yaml").is_file() else preset
        plan.append((f"train {own} seed {seed} at epsilon {eps:g} (+ the papers' protocol)",
                     [f"experiment={own}", f"seed={seed}", f"privacy.epsilon={eps:g}", "resume=auto",
                      "task.fid_samples=10000", f"hydra.run.dir={run}"], run))
        plan.append((f"DPImageBench's protocol ({scale} counts), {preset}{tag} seed {seed}",
                     # 300 images for the papers' FID here: its 10,000-image FID is the training run's own
                     ["task=evaluate", f"task.run={run}", "task.eval_models=[logreg]", "task.fid_samples=300", *dib,
                      f"hydra.run.dir={run}_dib_{scale}"], Path(f"{run}_dib_{scale}")))
        if restorer and preset == RESTORED:
            plan.append((f"{preset}{tag} seed {seed} through the public restorer, both protocols",
                         ["task=evaluate", f"task.run={run}", f"task.restorer={restorer}",
                          "task.eval_models=[logreg,mlp,cnn]", "task.fid_samples=10000", *dib,
                          f"hydra.run.dir={run}_restored_{scale}"], Path(f"{run}_restored_{scale}")))
    return plan


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", default="cpu", help="cpu (DPImageBench at a CPU's counts) or paper (theirs)")
    ap.add_argument("--datasets", default="mnist,fashion_mnist")
    ap.add_argument("--only", default="", help="comma list of presets (default: all of the data sets')")
    ap.add_argument("--seeds", default="0", help="comma list of seeds")
    ap.add_argument("--epsilons", default="10", help="comma list of budgets (the issue states 10 and 1)")
    ap.add_argument("--restorer", default=None, help="a public restorer (.pt) for the MNIST OT row")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("DPGEN_OUTPUTS", "outputs")) / "headline")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    plan = steps(args.scale, [d for d in args.datasets.split(",") if d], [int(s) for s in args.seeds.split(",")],
                 args.out.resolve(), [p for p in args.only.split(",") if p] or None, args.restorer,
                 tuple(float(e) for e in args.epsilons.split(",")))
    for what, argv_run, done in plan:
        cmd = [sys.executable, str(ROOT / "run.py"), *argv_run]
        status = read_run(done).status
        if status == "finished":
            print(f"[headline] done already: {what} ({done})", flush=True)
            continue
        if status in ("evaluating", "stale", "interrupted"):
            print(f"[headline] resuming ({status}): {what} ({done})", flush=True)
        print(f"[headline] {what}:\n  {' '.join(cmd)}", flush=True)
        if not args.dry_run:
            rc = subprocess.run(cmd, cwd=ROOT).returncode
            if rc:
                raise SystemExit(f"[headline] {what} stopped with exit status {rc}; the same command resumes it "
                                 f"(its folder: {done})")
    if not args.dry_run:
        sys.path.insert(0, str(ROOT / "scripts"))
        import headline_table

        headline_table.main([str(args.out), "--out", str(args.out / "headline")])


if __name__ == "__main__":
    main()
