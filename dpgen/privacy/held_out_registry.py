"""Every draw on a data set's held-out records, across run folders: the record a new draw composes with.

A held-out part is one public hash (dpgen.data.holdout): every run of one data set at one ``dataset.validation``
fraction holds out the same records, and the part at a smaller fraction lies inside the part at a larger one. A
selection's marker in its own run folder (``checkpoints/held_out_spent.json``) stops a second draw on that run; it
cannot see a draw made beside another run. This registry can: ``<outputs>/held_out/<data set>.json`` lists each
draw made on the data set's records (the scored runs' training groups, the draw's epsilon, the earlier cost it
carried), whatever folder and fraction it used, and a new draw on the same data set composes with them
(:func:`earlier_cost`) unless the scored runs' settings already state at least that cost (:func:`covers`).

It holds public settings and mechanism outputs only: folder names the user chose, run ids, noise multipliers, sample
rates, steps, epsilons, the chosen candidate and the date. No count, score or size computed from private records.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

from dpgen.utils.io import atomic_write_text

#: the registry's folder under the outputs root
FOLDER = "held_out"

Training = Tuple[float, float, int]

#: data sets whose records are another's (a subset, or the same records at another size): their draws read that
#: data set's people, so they share its register (``usps8``: USPS's first 1,437 training records at 8 x 8;
#: ``celeba32``: CelebA at 32 x 32). ``mnist10k`` is MNIST's t10k file, none of MNIST's training records: its own.
SAME_RECORDS = {"usps8": "usps", "celeba32": "celeba"}


def dataset_key(name: str, path: Optional[str] = None) -> str:
    """The registry's name for a data set: its ``dataset.name`` (the data set whose records it holds, where
    :data:`SAME_RECORDS` names one), and for your own data (``dataset.path``) a digest of the path you gave (a
    setting, not a record)."""
    name = SAME_RECORDS.get(str(name), name)
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)) or "dataset"
    if path:
        base += "-" + hashlib.sha256(str(Path(str(path)).expanduser().resolve()).encode()).hexdigest()[:12]
    return base


def registry_path(outputs: Path, key: str) -> Path:
    return Path(outputs) / FOLDER / f"{key}.json"


def read_draws(path: Path) -> List[dict]:
    """The draws recorded at ``path`` (none when the file does not exist); a file that cannot be read is refused,
    naming it: a draw must never go ahead as if no earlier one were recorded."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        draws = json.loads(path.read_text())["draws"]
        if not isinstance(draws, list):
            raise TypeError
        return draws
    except (ValueError, KeyError, TypeError, OSError):
        raise ValueError(f"{path} (the register of draws on this data set's held-out records) cannot be read: "
                         "restore it from a backup, or remove it only if no draw was ever made on this data "
                         "set's held-out records (a draw would then not count the earlier ones)") from None


def _run_ids(draw: dict) -> frozenset:
    return frozenset(str(r.get("run_id")) for r in draw.get("runs", ()))


def record_draw(path: Path, draw: dict) -> bool:
    """Add ``draw`` to the register at ``path`` (atomically); a draw of the same scored runs is kept once. Returns
    whether it was added."""
    draws = read_draws(path)
    if any(_run_ids(d) == _run_ids(draw) and d.get("chosen") == draw.get("chosen") for d in draws):
        return False
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"about": __doc__.split("\n\n")[0], "draws": [*draws, draw]}, indent=2) + "\n")
    return True


def draw_entry(dataset: str, validation: float, runs: Sequence[Tuple[str, str, Sequence[Sequence[float]]]],
               epsilon: float, carried: dict, epsilon_total: float, chosen: dict) -> dict:
    """One register entry: ``runs`` as (folder, run id, training groups) of every scored run."""
    return {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "dataset": dataset,
            "validation": float(validation),
            "runs": [{"run": str(r), "run_id": str(i), "trainings": [list(map(float, g[:2])) + [int(g[2])] for g in t]}
                     for r, i, t in runs],
            "epsilon": float(epsilon),
            "carried": {"trainings": [list(t) for t in (carried or {}).get("trainings", ())],
                        "pure_epsilon": float((carried or {}).get("pure_epsilon", 0.0))},
            "epsilon_total": float(epsilon_total), "chosen": chosen}


def _carried_key(c: dict) -> Tuple[tuple, float]:
    return (tuple(sorted((float(t[0]), float(t[1]), int(t[2])) for t in c.get("trainings", ()))),
            round(float(c.get("pure_epsilon", 0.0)), 12))


def earlier_cost(draws: Iterable[dict], exclude_runs: Iterable[str] = (), already: Optional[dict] = None
                 ) -> Tuple[List[Training], float]:
    """What the recorded draws cost these records, counted once each: every distinct scored run's trainings (by run
    id, leaving out ``exclude_runs``), every draw's epsilon, and every distinct earlier cost the draws carried (a
    preset's ``privacy.selection_cost``), leaving out one equal to ``already`` (the new draw's own carried cost)."""
    skip = {str(r) for r in exclude_runs}
    seen_runs, seen_carried = set(skip), set()
    if already:
        seen_carried.add(_carried_key(already))
    trainings: List[Training] = []
    pure = 0.0
    for d in draws:
        for r in d.get("runs", ()):
            rid = str(r.get("run_id"))
            if rid not in seen_runs:
                seen_runs.add(rid)
                trainings += [(float(g[0]), float(g[1]), int(g[2])) for g in r.get("trainings", ())]
        pure += float(d.get("epsilon", 0.0))
        c = d.get("carried") or {}
        key = _carried_key(c)
        if (key[0] or key[1]) and key not in seen_carried:
            seen_carried.add(key)
            trainings += list(key[0])
            pure += key[1]
    return trainings, pure


def covers(stated: Sequence[Sequence[float]], stated_pure: float, trainings: Sequence[Sequence[float]],
           pure: float) -> bool:
    """Whether a stated cost (a preset's ``privacy.selection_cost``) counts at least ``trainings`` and ``pure``: each
    training matched one to one by a stated one of the same sample rate and steps and no larger noise multiplier
    (so it costs at least as much), and at least the pure epsilon."""
    if float(stated_pure) < float(pure) - 1e-9:
        return False
    free = [(float(t[0]), float(t[1]), int(t[2])) for t in stated]
    for z, q, n in sorted(((float(t[0]), float(t[1]), int(t[2])) for t in trainings), reverse=True):
        # the largest noise first, each matched by the stated one of the same (q, steps) with the largest noise <= z
        fits = [s for s in free if abs(s[1] - q) <= 1e-12 * max(1.0, q) and s[2] == n and s[0] <= z + 1e-12]
        if not fits:
            return False
        free.remove(max(fits))
    return True


__all__ = ["FOLDER", "covers", "dataset_key", "draw_entry", "earlier_cost", "read_draws", "record_draw",
           "registry_path"]
