#!/usr/bin/env python
"""Choose a finished run's contrast curve (model.sharpen) on the validation split held out from its private training
set, under its own accounting. Where no public proxy exists (Fashion-MNIST here), this is how a post-processing
setting is picked without the test split.

    python scripts/select_on_validation.py <run folder> [--candidates 0 4@0.3 8@0.3 8@0.5] [--epsilon 1]
        [--n-synthetic 10000] [--k 3] [--seed S]

The run must have been trained with ``dataset.validation=f`` (f > 0): the records whose public hash falls below f
(dpgen.data.holdout) were never read by it. Each candidate ``K@T`` (slope K at centre T, 0: no curve) is applied
to one set of ``--n-synthetic`` samples of the run's generator. Each held-out record then contributes to each
candidate's score 1 if a LogReg trained on that candidate's samples classifies it correctly (utility) plus 1 if
it lies in the samples' pixel-space k-NN manifold (recall, Kynkaanniemi et al. 2019: diversity), clipped to
[0, 2]. The exponential mechanism (dpgen.privacy.selection; Gumbel noise seeded from OS entropy) draws one
candidate: ``--epsilon``-DP for the held-out part, add/remove one record. The run trained on the other part, so the
pair composes in parallel: its epsilon is max(run, selection), the run's own when ``--epsilon`` is no larger
(larger is refused). Only the chosen candidate leaves: the scores, the part's size and its records stay in memory.

Writes ``<run>/selection.json`` (atomically; a second selection on the same run is refused, since two would add
up) and prints the commands that measure the chosen curve. ``dpgen sample <run>`` then releases through the chosen
curve, and its datasheet states the selection and the pair's epsilon.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SCORE = ("per held-out record: 1 if LogReg trained on the candidate's samples classifies it correctly, plus 1 if it "
         "lies inside the samples' pixel-space k-NN manifold (recall, Kynkaanniemi et al. 2019); clipped to [0, 2]")
BOUND = 2.0


def parse_candidate(text: str):
    """``K@T`` -> (K, T); ``K`` alone: centre 0.5; ``0``: no curve. A bad value: ValueError naming it."""
    from dpgen.config import curve_problem

    slope, _, at = str(text).partition("@")
    try:
        k, t = float(slope), float(at) if at else 0.5
    except ValueError:
        raise ValueError(f"candidate {text!r}: write a slope and a centre as K@T (e.g. 8@0.3), or 0 for no curve") \
            from None
    problem = curve_problem(k, t)
    if problem:
        raise ValueError(f"candidate {text!r}: {problem}")
    return (k, t) if k else (0.0, 0.5)


def select(run: Path, candidates, epsilon: float, n_synthetic: int, k: int, seed=None, rng=None,
           progress: bool = True) -> dict:
    import numpy as np

    from dpgen.data.private import PrivateData
    from dpgen.eval.downstream import fit_logreg
    from dpgen.eval.fidelity import recall_indicators
    from dpgen.models.generators import sharpen
    from dpgen.privacy.selection import bounded_scores, exponential_choice, parallel_epsilon
    from dpgen.privacy.validation import check_epsilon
    from dpgen.tasks.finished_run import ReleaseError, load_generator
    from dpgen.tasks.generation import synthetic_set
    from dpgen.utils.io import atomic_write_text

    epsilon = check_epsilon(epsilon, "--epsilon")
    run = Path(run)
    out_path = run / "selection.json"
    if out_path.exists():
        raise ReleaseError(f"{out_path} exists: this run's held-out part was already spent on a selection (a second "
                           "one would add its epsilon). Keep that choice, or train a run with a new holdout.")
    cfg, metrics, gen, shape, classes, privacy = load_generator(run, "cpu", sharpen=(0.0, 0.5))
    holdout = float(cfg.dataset.get("validation", 0.0) or 0.0)
    if holdout <= 0:
        raise ReleaseError(f"{run} was trained on its whole private set (dataset.validation=0): nothing is held out "
                           "to choose on. Train with dataset.validation=0.05 (for example) and select on that run.")
    if not privacy.get("private"):
        raise ReleaseError(f"{run} is not a private run: choose its settings any way you like")
    budget = float(privacy["epsilon_budget"])
    if epsilon > budget:
        raise ReleaseError(f"--epsilon {epsilon:g} is above the run's budget {budget:g}: the pair would cost "
                           f"{epsilon:g}; use --epsilon <= {budget:g}")
    if classes < 3:
        raise ReleaseError(f"{run}: the score needs a classifier of 3 or more classes ({classes} here)")
    candidates = [parse_candidate(c) for c in candidates]
    if len(set(candidates)) != len(candidates) or len(candidates) < 2:
        raise ValueError("--candidates: give two or more different candidates")

    t0 = time.time()
    seed = int(cfg.seed) + 3 if seed is None else int(seed)
    x_raw, y_syn = synthetic_set(gen, int(n_synthetic), seed, "cpu")  # one draw, every curve applied to it
    x_val, y_val = PrivateData(cfg.dataset, "validation").whole()  # private: stays in this function
    contributions = np.zeros((len(x_val), len(candidates)))
    for j, (slope, at) in enumerate(candidates):
        x = sharpen(x_raw, slope, at) if slope else x_raw
        clf, _ = fit_logreg(x.reshape(len(x), -1), y_syn.numpy(), progress=False)
        correct = clf.predict(x_val.reshape(len(x_val), -1).numpy()) == y_val.numpy()
        covered = recall_indicators(x_val, x, k=k)
        contributions[:, j] = correct.astype(np.float64) + covered.astype(np.float64)
        if progress:
            print(f"[select] candidate {j + 1}/{len(candidates)} scored", file=sys.stderr, flush=True)
    chosen = exponential_choice(bounded_scores(contributions, BOUND), BOUND, epsilon, rng=rng)
    del contributions, x_val, y_val
    slope, at = candidates[chosen]
    run_eps = float(privacy["epsilon_spent"])
    result = {
        "run": str(run),
        "candidates": [{"sharpen": s, "sharpen_at": t} for s, t in candidates],
        "chosen": {"sharpen": slope, "sharpen_at": at},
        "held_out": f"dataset.validation={holdout:g}: the records whose public hash (dpgen.data.holdout) falls below "
                    f"{holdout:g}; the run trained on the others",
        "score": SCORE,
        "samples": {"n_synthetic": int(n_synthetic), "seed": seed, "k": int(k)},
        "mechanism": "exponential mechanism (Gumbel-max, noise from OS entropy): candidate j with probability "
                     "proportional to exp(epsilon * score_j / (2 * sensitivity))",
        "sensitivity": BOUND,
        "epsilon": epsilon,
        "delta": 0.0,
        "neighbouring_relation": "add/remove one record",
        "composition": "parallel: the run read only the training part, the selection only the held-out part, and "
                       "one record lies in one part; the pair's epsilon is the larger of the two",
        "checkpoint_step": privacy.get("checkpoint_step"),
        "run_id": privacy.get("run_id"),
        "run_epsilon_spent": run_eps,
        "run_delta": privacy.get("delta"),
        "epsilon_total": parallel_epsilon(run_eps, epsilon),
        "not_covered": "wall-clock time (seconds), which grows with the held-out part's size; the scores and that "
                       "size are never written",
        "seconds": round(time.time() - t0, 1),
    }
    atomic_write_text(out_path, json.dumps(result, indent=2) + "\n")
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("run", type=Path, help="a finished generation run trained with dataset.validation > 0")
    parser.add_argument("--candidates", nargs="+", default=["0", "4@0.3", "8@0.3", "4@0.5", "8@0.5", "16@0.5"],
                        help="contrast curves K@T (slope K at centre T; 0: none)")
    parser.add_argument("--epsilon", type=float, default=1.0,
                        help="the selection's epsilon on the held-out part (at most the run's budget)")
    parser.add_argument("--n-synthetic", type=int, default=10000, help="samples drawn once, every curve applied")
    parser.add_argument("--k", type=int, default=3, help="neighbours of the recall manifold's radii")
    parser.add_argument("--seed", type=int, default=None, help="the samples' seed (default: the run's seed + 3)")
    args = parser.parse_args(argv)
    if args.n_synthetic <= args.k:
        parser.error(f"--n-synthetic {args.n_synthetic} must exceed --k {args.k}")
    try:
        res = select(args.run, args.candidates, args.epsilon, args.n_synthetic, args.k, args.seed)
    except ValueError as err:
        parser.exit(2, f"select_on_validation: {err}\n")
    c = res["chosen"]
    print(json.dumps({"chosen": c, "epsilon": res["epsilon"], "epsilon_total": res["epsilon_total"]}))
    curve = f"--sharpen {c['sharpen']:g} --sharpen-at {c['sharpen_at']:g}"
    print(f"measure it: python scripts/fidelity_of_run.py {args.run} {curve}\n"
          f"or: python run.py task=evaluate task.run={args.run} task.sharpen={c['sharpen']:g} "
          f"task.sharpen_at={c['sharpen_at']:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
