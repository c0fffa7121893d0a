#!/usr/bin/env python
"""Choose a finished run's contrast curve (model.sharpen), or one of several runs and its curve, on the validation
split held out from the private training set, under its own accounting. Where no public proxy exists
(Fashion-MNIST here), this is how a post-processing setting, or a training setting, is picked without the test split.

    python scripts/select_on_validation.py <run folder> [<run folder> ...] [--candidates 0 4@0.3 8@0.3 8@0.5]
        [--epsilon 1] [--n-synthetic 10000] [--k 3] [--seed S]

Each run must have been trained with ``dataset.validation=f`` (f > 0): the records whose public hash falls below f
(dpgen.data.holdout) were never read by it. Each candidate ``K@T`` (slope K at centre T, 0: no curve) is applied
to one set of ``--n-synthetic`` samples of the run's generator. Each held-out record then contributes to each
candidate's score 1 if a LogReg trained on that candidate's samples classifies it correctly (utility) plus 1 if
it lies in the samples' pixel-space k-NN manifold (recall, Kynkaanniemi et al. 2019: diversity), clipped to
[0, 2]. The exponential mechanism (dpgen.privacy.selection; Gumbel noise seeded from OS entropy) draws one
candidate: ``--epsilon``-DP for the held-out part, add/remove one record. One run trained on the other part, so the
pair composes in parallel: its epsilon is max(run, selection), the run's own when ``--epsilon`` is no larger
(larger is refused). Only the chosen candidate leaves: the scores, the part's size and its records stay in memory.

Several runs (trained with different settings, e.g. method.repel, beside the same data set and held-out fraction)
are scored together: the candidates are every run times every curve. The draw depends on every scored generator, so
releasing the chosen run discloses all of them for a training record: its epsilon is the runs' trainings composed
(PLD at their delta, dpgen.privacy.selection.scored_runs_epsilon), or the selection's if that is larger. Runs of
other data settings or deltas, or one run named twice, are refused.

Where the runs' settings were themselves chosen by earlier mechanisms on these records (a preset's
``privacy.selection_cost``, e.g. ``dpsinkhorn_best_mnist``'s curve), the release composes those too, sequentially:
every training counted and every selection's epsilon added, this draw's included (stated under ``carried``).
``--restate <run>`` raises an older file's ``epsilon_total`` to that figure without a new draw.

Every draw is recorded in the data set's register, ``<outputs>/held_out/<data set>.json``
(dpgen.privacy.held_out_registry), before any selection file: the held-out part is one public hash for every run at
one fraction, so a draw beside another folder reads the same records. A new draw on the data set composes the
draws recorded there (their scored runs' trainings, each run once, their epsilons, the earlier costs they carried),
stated under ``carried`` and ``earlier_draws``, unless the scored runs' settings (``privacy.selection_cost``)
already state at least that cost. ``--record <run>`` adds a selection made before the register existed.

Writes ``selection.json`` into each scored run (atomically; a second selection on any of them is refused, since two
would add up) and prints the commands that measure the choice. ``dpgen sample <chosen run>`` then releases through
the chosen curve, and its datasheet states the selection and the release's epsilon; the other runs' releases are
refused (the selection drew another).
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
#: the record, kept by a resume (which removes selection.json with the weights it described), that the run's held-out
#: part was spent: the epsilons and the steps of its selections; a fresh start in the folder removes it with the ledger
SPENT = "checkpoints/held_out_spent.json"


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


def _scored_run(run: Path, epsilon: float):
    """One run to score: (cfg, generator, classes, privacy, its held-out fraction), refused with the fix when it
    cannot be scored (already selected on, nothing held out, not private, below the selection's epsilon)."""
    from dpgen.tasks.finished_run import ReleaseError, load_generator

    out_path = run / "selection.json"
    if out_path.exists():
        raise ReleaseError(f"{out_path} exists: this run's held-out part was already spent on a selection (a second "
                           "one would add its epsilon). Keep that choice, or train a run with a new holdout.")
    if (run / SPENT).exists():  # selection.json went with the weights it described; the held-out part stays spent
        raise ReleaseError(f"{run / SPENT} records that this run's held-out part was already spent on a selection, "
                           "before the run trained on (a second one would add its epsilon). Release the run with its "
                           "own settings, or train a run with a new holdout.")
    cfg, metrics, gen, shape, classes, privacy = load_generator(run, "cpu", sharpen=(0.0, 0.5))
    holdout = float(cfg.dataset.get("validation", 0.0) or 0.0)
    if holdout <= 0:
        raise ReleaseError(f"{run} was trained on its whole private set (dataset.validation=0): nothing is held out "
                           "to choose on. Train with dataset.validation=0.05 (for example) and select on that run.")
    if not privacy.get("private"):
        raise ReleaseError(f"{run} is not a private run: choose its settings any way you like")
    budget = float(privacy["epsilon_budget"])
    if epsilon > budget:
        raise ReleaseError(f"--epsilon {epsilon:g} is above the run's budget {budget:g} ({run}): the pair would cost "
                           f"{epsilon:g}; use --epsilon <= {budget:g}")
    if classes < 3:
        raise ReleaseError(f"{run}: the score needs a classifier of 3 or more classes ({classes} here)")
    return cfg, gen, classes, privacy, holdout


def _same_held_out_part(runs, loaded) -> None:
    """Several runs are scored on one held-out part only if they hold out the same records (the same data set and
    fraction, so the same public hashes) and are different trainings."""
    from omegaconf import OmegaConf

    from dpgen.tasks.finished_run import ReleaseError

    first = runs[0]
    cfg0, _, _, p0, _ = loaded[0]
    data0 = OmegaConf.to_container(cfg0.dataset, resolve=True)
    for run, (cfg, _, _, p, _) in zip(runs[1:], loaded[1:]):
        if OmegaConf.to_container(cfg.dataset, resolve=True) != data0:
            raise ReleaseError(f"{run} and {first} were trained on different data settings (dataset.*): they do not "
                               "hold out the same records. Score runs of one dataset.validation split together")
        if p.get("delta") != p0.get("delta"):
            raise ReleaseError(f"{run} (delta {p.get('delta')}) and {first} (delta {p0.get('delta')}): score runs "
                               "of one delta together, so that their composition is stated at it")
    ids = [p.get("run_id") for _, _, _, p, _ in loaded]
    if len(set(map(str, runs))) != len(runs) or len(set(ids)) != len(ids):
        raise ReleaseError(f"{[str(r) for r in runs]}: a run is named twice (or two folders hold one training's "
                           "checkpoint): name each run once")
    for run, (_, _, _, p, _) in zip(runs, loaded):
        if not p.get("composition"):
            raise ReleaseError(f"{run}'s privacy report records no training groups ('composition'), so its share "
                               "of the composed epsilon cannot be stated: score it alone")


CARRIED_COMPOSITION = (
    "sequential: the scored runs' settings were chosen by earlier mechanisms on these records (their "
    "privacy.selection_cost, under 'carried'), perhaps on this held-out part too, so the release composes the scored "
    "runs' trainings with those earlier trainings (PLD at the runs' delta) plus every selection's epsilon, this "
    "draw's included: an upper bound for every record, whichever part it lies in (conservative where this draw "
    "re-chooses the very setting an earlier one chose)")


def carried_cost(cfgs) -> dict:
    """The earlier choices the scored runs' settings carry (``privacy.selection_cost`` of each run's config), as
    one cost: each distinct run's cost once, different ones all counted (conservative). Empty when none is stated."""
    from dpgen.privacy.selection import selection_cost_groups

    costs = []
    for cfg in cfgs:
        cost = selection_cost_groups(cfg.privacy, getattr(cfg, "dataset", None))
        if (cost[0] or cost[1]) and cost not in costs:
            costs.append(cost)
    if not costs:
        return {}
    return {"trainings": [list(t) for c in costs for t in c[0]], "pure_epsilon": sum(c[1] for c in costs),
            "from": "privacy.selection_cost of the scored runs' settings (their presets): the earlier runs whose "
                    "output chose a setting, as [noise multiplier, sample rate, steps], and the selections' epsilon"}


def held_out_register(cfg):
    """The register of every draw on this run's data set's held-out records (``<outputs>/held_out/<data set>.json``,
    dpgen.privacy.held_out_registry) and the draws it holds."""
    from dpgen.privacy.held_out_registry import dataset_key, read_draws, registry_path
    from dpgen.utils.io import outputs_dir

    path = registry_path(outputs_dir(), dataset_key(cfg.dataset.name, cfg.dataset.get("path", None)))
    return path, read_draws(path)


def with_earlier_draws(carried: dict, draws, run_ids, register) -> tuple:
    """``carried`` with the register's earlier draws on this data set's held-out records composed in, unless the
    scored runs' settings already state at least their cost: (carried, what was done, for the file; None: no draw)."""
    from dpgen.privacy.held_out_registry import covers, earlier_cost

    if not draws:
        return carried, None
    # what the recorded draws cost: to be covered, the runs' stated cost must reach all of it (a preset that states
    # the same earlier cost as a recorded draw counts that cost, not that draw's runs); composed, the cost the runs
    # state already is not counted twice
    whole = earlier_cost(draws, run_ids)
    trainings, pure = earlier_cost(draws, run_ids, carried)
    listed = [{"when": d.get("when"), "runs": [r.get("run") for r in d.get("runs", ())], "epsilon": d.get("epsilon"),
               "validation": d.get("validation")} for d in draws]
    stated_t, stated_p = (carried or {}).get("trainings", ()), float((carried or {}).get("pure_epsilon", 0.0))
    if not trainings and not pure:
        return carried, None
    if carried and covers(stated_t, stated_p, *whole):
        return carried, {"register": str(register), "draws": listed,
                         "counted": "already: the scored runs' settings state at least their cost"}
    merged = {"trainings": [*map(list, stated_t), *map(list, trainings)], "pure_epsilon": stated_p + pure,
              "from": ((carried["from"] + "; and ") if carried else "") +
              f"the earlier draws on this data set's held-out records recorded in {register} (their scored runs' "
              "trainings, each run once, their epsilons and the earlier costs they carried): they read the same "
              "records, a larger fraction's part holding a smaller one's, so they are composed, an upper bound where "
              "they did not inform this draw"}
    return merged, {"register": str(register), "draws": listed, "counted": "composed in (under 'carried')"}


def _held_selection(run, option: str):
    """(run, its selection.json, the selection) for ``option``, refused when there is none or it was made for other
    weights than the run's checkpoint."""
    from dpgen.tasks.finished_run import ReleaseError, check_describes_checkpoint

    run = Path(run)
    path = run / "selection.json"
    if not path.exists():
        raise ReleaseError(f"{path} does not exist: {option} takes a run that holds a selection")
    sel = json.loads(path.read_text())
    check_describes_checkpoint(run, sel, path)
    return run, path, sel


def restate(run: Path) -> dict:
    """Rewrite the epsilon_total of ``run``'s selection.json (and of every run scored beside it) when it is below
    what the release discloses as recomputed now (the earlier choices the runs' settings carry included): no new
    draw, no private record read, never lowered. Returns the run's restated record."""
    from omegaconf import OmegaConf

    from dpgen.privacy.selection import scored_runs_epsilon
    from dpgen.tasks.finished_run import ReleaseError
    from dpgen.train.run_record import load_checkpoint_file
    from dpgen.utils.io import atomic_write_text

    run, path, sel = _held_selection(run, "--restate")
    folders = [Path(r["run"]) for r in sel["runs"]] if "runs" in sel else [run]
    if run.resolve() not in [f.resolve() for f in folders]:
        raise ReleaseError(f"{path} lists the runs {[str(f) for f in folders]}, and not {run}: restate it from the "
                           "folder the selection wrote it in")
    missing = [str(f / "config.yaml") for f in folders if not (f / "config.yaml").exists()]
    if missing:
        raise ReleaseError(f"{missing}: every scored run's config.yaml is needed to restate the selection")
    carried = carried_cost([OmegaConf.load(f / "config.yaml") for f in folders])
    if "runs" in sel:
        groups = [r["composition"] for r in sel["runs"]]
    else:
        groups = [load_checkpoint_file(run / "checkpoints" / "last.pt").get("privacy", {}).get("composition")]
    if carried and not all(groups):
        raise ReleaseError(f"{path}: a scored run records no training groups, so the earlier choices cannot be "
                           "composed with it; move the selection away to release the run with its own settings")
    old = float(sel["epsilon_total"])
    new = (scored_runs_epsilon(groups, float(sel["epsilon"]), float(sel["run_delta"]), carried.get("trainings", ()),
                               carried.get("pure_epsilon", 0.0)) if carried or "runs" in sel else old)
    if new <= old + 1e-12:
        return sel
    out = sel
    for folder in folders:
        f = folder / "selection.json"
        rec = json.loads(f.read_text()) if f.exists() else {}
        if rec.get("chosen") != sel["chosen"] or rec.get("candidates") != sel.get("candidates"):
            continue  # that folder no longer holds this selection's file (a resume removed it, or another's)
        was = float(rec["epsilon_total"])
        if was >= new - 1e-12:
            continue  # it states at least this already
        rec.update({**({"carried": carried, "composition": CARRIED_COMPOSITION} if carried else {}),
                    "epsilon_total": new,
                    "restated": f"epsilon_total {was:.4f} -> {new:.4f} ({time.strftime('%Y-%m-%d')}, "
                                "scripts/select_on_validation.py --restate: it stated less than the scored runs and "
                                "the earlier choices their settings carry compose; no new draw)"})
        if "runs" not in sel:
            rec["run_composition"] = groups[0]
        atomic_write_text(f, json.dumps(rec, indent=2) + "\n")
        out = rec if folder.resolve() == run.resolve() else out
    return out


def record(run: Path) -> tuple:
    """Add ``run``'s selection.json (a draw made before the register existed) to its data set's register; nothing is
    drawn and no private record is read. Returns (the register, whether the draw was added)."""
    from omegaconf import OmegaConf

    from dpgen.privacy.held_out_registry import draw_entry, record_draw
    from dpgen.tasks.finished_run import ReleaseError
    from dpgen.train.run_record import load_checkpoint_file

    run, path, sel = _held_selection(run, "--record")
    cfg = OmegaConf.load(run / "config.yaml")
    if "runs" in sel:
        scored = [(r["run"], r.get("run_id"), r.get("composition") or ()) for r in sel["runs"]]
    else:
        comp = sel.get("run_composition") or load_checkpoint_file(run / "checkpoints" / "last.pt").get(
            "privacy", {}).get("composition") or ()
        scored = [(str(run), sel.get("run_id"), comp)]
    if not all(t for _, _, t in scored):
        raise ReleaseError(f"{path}: a scored run records no training groups, so the register could not count its "
                           "training; train with a current dpgen, or state the cost in the presets that follow")
    register, _ = held_out_register(cfg)
    # the cost its settings stated (a file that composed the register's draws lists them under 'carried' too)
    stated = carried_cost([cfg]) if sel.get("earlier_draws") else (sel.get("carried") or {})
    entry = draw_entry(register.stem, float(cfg.dataset.get("validation", 0.0) or 0.0), scored, float(sel["epsilon"]),
                       {k: v for k, v in stated.items() if k in ("trainings", "pure_epsilon")},
                       float(sel["epsilon_total"]), sel["chosen"])
    entry["recorded"] = "afterwards, from the run's selection.json (--record); 'when' is the day it was recorded"
    return register, record_draw(register, entry)


def stale_releases(run: Path, epsilon_total: float) -> list:
    """The release datasheets inside ``run``'s folder that state less than ``epsilon_total`` (drawn before a
    restate): each ``(folder, the epsilon it states, its n)``, for a release drawn again."""
    stale = []
    for sheet in sorted(Path(run).glob("**/datasheet.json")):
        try:
            d = json.loads(sheet.read_text())
            eps = float(d["epsilon_spent"])
        except (ValueError, KeyError, TypeError, OSError):
            continue
        if eps < float(epsilon_total) - 1e-9:
            stale.append((sheet.parent, eps, d.get("n")))
    return stale


def select(runs, candidates, epsilon: float, n_synthetic: int, k: int, seed=None, rng=None,
           progress: bool = True) -> dict:
    """Draw one of (run, curve) for every given run (one run: its curve) on the held-out part; write the choice into
    every scored run's folder and return the chosen run's record."""
    import numpy as np

    from dpgen.data.private import PrivateData
    from dpgen.eval.downstream import fit_logreg
    from dpgen.eval.fidelity import recall_indicators
    from dpgen.models.generators import sharpen
    from dpgen.privacy.selection import bounded_scores, exponential_choice, parallel_epsilon, scored_runs_epsilon
    from dpgen.privacy.validation import check_epsilon
    from dpgen.tasks.generation import synthetic_set
    from dpgen.utils.io import atomic_write_text

    epsilon = check_epsilon(epsilon, "--epsilon")
    runs = [Path(r) for r in ([runs] if isinstance(runs, (str, Path)) else runs)]
    if not runs:
        raise ValueError("give one or more runs")
    curves = [parse_candidate(c) for c in candidates]
    if len(set(curves)) != len(curves) or len(curves) * len(runs) < 2:
        raise ValueError("--candidates: give two or more different candidates (or one curve and two or more runs)")
    loaded = [_scored_run(run, epsilon) for run in runs]
    many = len(runs) > 1
    if many:
        _same_held_out_part(runs, loaded)
    # the data set's register of earlier draws, read (or refused) before any private record is
    register, draws = held_out_register(loaded[0][0])
    pairs = [(i, c) for i in range(len(runs)) for c in curves]

    t0 = time.time()
    seeds = [int(cfg.seed) + 3 if seed is None else int(seed) for cfg, *_ in loaded]
    x_val, y_val = PrivateData(loaded[0][0].dataset, "validation").whole()  # private: stays in this function
    contributions = np.zeros((len(x_val), len(pairs)))
    j = 0
    for i, (cfg, gen, *_rest) in enumerate(loaded):
        x_raw, y_syn = synthetic_set(gen, int(n_synthetic), seeds[i], "cpu")  # one draw per run, every curve on it
        for slope, at in curves:
            x = sharpen(x_raw, slope, at) if slope else x_raw
            clf, _ = fit_logreg(x.reshape(len(x), -1), y_syn.numpy(), progress=False)
            correct = clf.predict(x_val.reshape(len(x_val), -1).numpy()) == y_val.numpy()
            covered = recall_indicators(x_val, x, k=k)
            contributions[:, j] = correct.astype(np.float64) + covered.astype(np.float64)
            j += 1
            if progress:
                print(f"[select] candidate {j}/{len(pairs)} scored", file=sys.stderr, flush=True)
    chosen = exponential_choice(bounded_scores(contributions, BOUND), BOUND, epsilon, rng=rng)
    del contributions, x_val, y_val
    winner, (slope, at) = pairs[chosen]
    privs = [p for _, _, _, p, _ in loaded]
    run_eps = float(privs[winner]["epsilon_spent"])
    stated = carried_cost([cfg for cfg, *_ in loaded])  # what the runs' settings say chose them
    carried, registered = with_earlier_draws(stated, draws, [p.get("run_id") for p in privs], register)
    if carried:
        total = scored_runs_epsilon([p["composition"] for p in privs], epsilon, float(privs[winner]["delta"]),
                                    carried["trainings"], carried["pure_epsilon"])
        composition = (CARRIED_COMPOSITION + (f" ({len(runs)} scored runs)" if many else "") +
                       ("; the earlier draws on this data set's held-out records in its register are composed too "
                        "(under 'earlier_draws')" if registered and registered["counted"].startswith("composed") else ""))
    elif many:
        total = scored_runs_epsilon([p["composition"] for p in privs], epsilon, float(privs[winner]["delta"]))
        composition = (f"the {len(runs)} scored runs trained on the same training part and the draw depends on each "
                       "generator, so for a training record the chosen run's release discloses them all: their "
                       "trainings composed (PLD at the runs' delta); the selection read only the held-out part, and "
                       "one record lies in one part: the release's epsilon is the larger of the two")
    else:
        total = parallel_epsilon(run_eps, epsilon)
        composition = ("parallel: the run read only the training part, the selection only the held-out part, and "
                       "one record lies in one part; the pair's epsilon is the larger of the two")

    def cand(i, s, t):
        c = {"sharpen": s, "sharpen_at": t}
        return {"run": str(runs[i]), "run_id": privs[i].get("run_id"), **c} if many else c

    holdout = loaded[0][4]
    common = {
        "candidates": [cand(i, s, t) for i, (s, t) in pairs],
        "chosen": cand(winner, slope, at),
        "held_out": f"dataset.validation={holdout:g}: the records whose public hash (dpgen.data.holdout) falls below "
                    f"{holdout:g}; the run{'s' if many else ''} trained on the others",
        "score": SCORE,
        "samples": {"n_synthetic": int(n_synthetic), "seed": seeds[winner], "k": int(k)},
        "mechanism": "exponential mechanism (Gumbel-max, noise from OS entropy): candidate j with probability "
                     "proportional to exp(epsilon * score_j / (2 * sensitivity))",
        "sensitivity": BOUND,
        "epsilon": epsilon,
        "delta": 0.0,
        "neighbouring_relation": "add/remove one record",
        "composition": composition,
        **({"runs": [{"run": str(r), "run_id": p.get("run_id"), "epsilon_spent": float(p["epsilon_spent"]),
                      "composition": p["composition"]} for r, p in zip(runs, privs)]} if many else {}),
        "run_delta": privs[winner].get("delta"),
        **({"carried": carried} if carried else {}),
        **({"earlier_draws": registered} if registered else {}),
        "epsilon_total": total,
        "not_covered": "wall-clock time (seconds), which grows with the held-out part's size; the scores and that "
                       "size are never written",
        "seconds": round(time.time() - t0, 1),
    }
    records = []
    for i, run in enumerate(runs):  # each scored folder says what its held-out part was spent on, for its weights
        rec = {"run": str(run), **common, "checkpoint_step": privs[i].get("checkpoint_step"),
               "run_id": privs[i].get("run_id"), "run_epsilon_spent": float(privs[i]["epsilon_spent"]),
               **({"run_composition": privs[i]["composition"]} if carried and not many else {})}
        records.append(rec)
    # the data set's register first: a stop after it overstates nothing that a later draw relies on (it counts this
    # draw); then every held-out part marked spent before any choice is written: a stop between two writes leaves no
    # run that could be scored again; then the chosen run's file first
    from dpgen.privacy.held_out_registry import draw_entry, record_draw

    record_draw(register, draw_entry(register.stem, holdout, [(str(r), p.get("run_id"), p.get("composition") or ())
                                                             for r, p in zip(runs, privs)],
                                     epsilon, stated, total, common["chosen"]))  # its own cost: the others are there
    for i, run in enumerate(runs):
        spent = {"held_out": common["held_out"], "epsilon": epsilon, "delta": 0.0, "run_id": privs[i].get("run_id"),
                 "checkpoint_step": privs[i].get("checkpoint_step"), "chosen_run": common["chosen"].get("run", str(run))}
        atomic_write_text(run / SPENT, json.dumps({"selections": [spent]}, indent=2) + "\n")
    for i in [winner] + [i for i in range(len(runs)) if i != winner]:
        atomic_write_text(runs[i] / "selection.json", json.dumps(records[i], indent=2) + "\n")
    return records[winner]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("runs", type=Path, nargs="+", metavar="run",
                        help="a finished generation run trained with dataset.validation > 0; several runs of one "
                             "held-out split are scored together and one (run, curve) is drawn")
    parser.add_argument("--candidates", nargs="+", default=["0", "4@0.3", "8@0.3", "4@0.5", "8@0.5", "16@0.5"],
                        help="contrast curves K@T (slope K at centre T; 0: none)")
    parser.add_argument("--epsilon", type=float, default=1.0,
                        help="the selection's epsilon on the held-out part (at most the run's budget)")
    parser.add_argument("--n-synthetic", type=int, default=10000, help="samples drawn once, every curve applied")
    parser.add_argument("--k", type=int, default=3, help="neighbours of the recall manifold's radii")
    parser.add_argument("--seed", type=int, default=None, help="the samples' seed (default: the run's seed + 3)")
    parser.add_argument("--record", action="store_true",
                        help="no draw: add each run's selection.json to its data set's register of draws (a "
                             "selection made before the register existed), so that later draws count it")
    parser.add_argument("--restate", action="store_true",
                        help="no draw: raise the epsilon_total of each run's selection.json (and of the runs scored "
                             "beside it) to what the release discloses as counted now (the earlier choices the runs' "
                             "settings carry); never lowers it, reads no private record")
    args = parser.parse_args(argv)
    if args.record:
        try:
            for run in args.runs:
                path, added = record(run)
                print(json.dumps({"run": str(run), "register": str(path),
                                  "recorded": "added" if added else "there already"}))
        except (ValueError, KeyError, OSError) as err:
            parser.exit(2, f"select_on_validation: {err}\n")
        return 0
    if args.restate:
        try:
            for run in args.runs:
                rec = restate(run)
                print(json.dumps({"run": str(run), "epsilon_total": rec["epsilon_total"],
                                  "restated": rec.get("restated", "unchanged: it already states at least this")}))
                for folder, eps, n in stale_releases(run, rec["epsilon_total"]):
                    print(f"{folder} is a release whose datasheet states epsilon {eps:.4f}, below "
                          f"{rec['epsilon_total']:.4f}: draw it again (dpgen sample {run} n={n} "
                          f"out={folder}), or remove it")
        except (ValueError, KeyError, OSError) as err:
            parser.exit(2, f"select_on_validation: {err}\n")
        return 0
    if args.n_synthetic <= args.k:
        parser.error(f"--n-synthetic {args.n_synthetic} must exceed --k {args.k}")
    try:
        res = select(args.runs, args.candidates, args.epsilon, args.n_synthetic, args.k, args.seed)
    except ValueError as err:
        parser.exit(2, f"select_on_validation: {err}\n")
    c = res["chosen"]
    print(json.dumps({"chosen": c, "epsilon": res["epsilon"], "epsilon_total": res["epsilon_total"]}))
    curve = f"--sharpen {c['sharpen']:g} --sharpen-at {c['sharpen_at']:g}"
    run = c.get("run", str(args.runs[0]))
    print(f"measure it: python scripts/fidelity_of_run.py {run} {curve}\n"
          f"or: python run.py task=evaluate task.run={run} task.sharpen={c['sharpen']:g} "
          f"task.sharpen_at={c['sharpen_at']:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
