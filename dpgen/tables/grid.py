"""The one grid runner of the training tables.

A table is a list of :class:`Cell` (a row's preset, its overrides, its seeds and its run folder) and
an extraction that turns each :class:`CellResult` into the row's columns. :func:`run_cells` runs every
cell the same way for every table:

* each seed in its own folder under ``outputs/runs/`` (two cells never share one);
* a run folder holds the cell's run only: one made there with other settings (an older preset, other
  overrides; :data:`NEUTRAL_SETTINGS` aside) stops the table with an error naming the settings, instead of
  being read as the cell's result or resumed with the new ones;
* a finished run (its result file, ``metrics.json`` by default) is read instead of run again
  (``reuse``; without it the run resumes at its end and is evaluated again: a run folder's budget is
  never spent twice), and an interrupted one resumes from its checkpoint, ledger included (``resume=auto``),
  so a paper-length table is assembled over several sessions by running the same command again;
* ``collect_only`` runs nothing: it reads what has finished and says which seeds have not;
* a cell whose data files are absent is ``skipped:`` with the reason (the data loader's message), and
  the other cells still run;
* :func:`mean_std` gives the mean and std over the finished runs.

Each run is composed from its preset (``compose_preset``) and run by :func:`dpgen.tasks.run`, or by
the table's own ``runner``: :func:`evaluate_run` evaluates more synthetic sets of one trained generator
(the generation tables' ``--generations``), each kept as it finishes.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from dpgen.train.run_record import FINAL_RESULTS, read_run
from dpgen.utils.io import outputs_dir

#: what every table run adds to its cell's overrides
RUN_OVERRIDES = ("trainer.progress=false", "resume=auto")


@dataclass
class Cell:
    """One row's runs: ``preset`` (``experiment=<preset>``; None: the default config) + ``overrides`` once
    per seed, in ``outputs/runs/<folder>/seed<k>`` (or ``outputs/runs/<folder>`` when ``seed_folders`` is
    false: a cell of one run)."""

    name: str
    preset: Optional[str]
    folder: str
    overrides: Sequence[str] = ()
    seeds: Sequence[int] = (0,)
    seed_folders: bool = True
    #: the seed is passed as ``seed=<k>`` (false: the preset's own seed, as DP-Sinkhorn's tables do)
    set_seed: bool = True

    def run_dir(self, seed: int) -> Path:
        base = outputs_dir() / "runs" / self.folder
        return base / f"seed{seed}" if self.seed_folders else base


@dataclass
class CellResult:
    cell: Cell
    runs: List[Dict[str, Any]] = field(default_factory=list)  # the finished runs' results, in seed order
    missing: List[int] = field(default_factory=list)  # seeds with no finished run (collect_only)
    skipped: Optional[str] = None  # "skipped: <why>" when the cell's data are absent
    wall_s: float = 0.0  # the runs' own wall times (also when reused)

    @property
    def last(self) -> Optional[Dict[str, Any]]:
        return self.runs[-1] if self.runs else None

    @property
    def status(self) -> str:
        if self.skipped:
            return self.skipped
        if self.missing and not self.runs:
            return "not run (--collect-only)"
        if self.missing:
            return (f"partial: {len(self.runs)} of {len(self.runs) + len(self.missing)} runs finished (seeds "
                    f"{', '.join(map(str, self.missing))} not run yet)")
        return "ok"

    def values(self, get: Callable[[Dict[str, Any]], Any]) -> List[float]:
        return [float(get(m)) for m in self.runs]


def mean_std(values: Sequence[float], nd: int = 2):
    """``(mean, std)`` rounded to ``nd`` places; std 0.0 for one value, ``(None, None)`` for none."""
    if not values:
        return None, None
    return round(statistics.mean(values), nd), (round(statistics.stdev(values), nd) if len(values) > 1 else 0.0)



#: the privacy columns of a run's table result (:meth:`dpgen.privacy.report.PrivacyReport.cells`)
PRIVACY_CELLS = ("epsilon_spent", "noise_multiplier", "noise_std")

#: a cell's table result beside its run when the table evaluates several generations (train + every
#: generation's evaluation), read when the table runs again
RESULT_FILE = "table_result.json"  # removed with GENERATIONS_DIR when the run trains again (run_record)
assert RESULT_FILE in FINAL_RESULTS

#: one file per evaluated generation (``<g>.json``), so an interrupted evaluation keeps the generations it finished
GENERATIONS_DIR = "table_generations"
assert GENERATIONS_DIR in FINAL_RESULTS

#: the metrics a generation can have; each one's per-generation values are kept as ``<metric>_values``
GENERATION_METRICS = ("fid", "precision", "recall", "density", "coverage", "class_mean", "spread_ratio", "logreg",
                      "mlp", "cnn")
#: what each generation table says about its fidelity columns
FIDELITY_NOTE = ("Fidelity beside accuracy: fid / precision / recall / density / coverage (k = 5) of the generated "
                 "images against the whole real test split in pytorch-fid's Inception features (fid_protocol names "
                 "the counts; n/a: the Inception weights are not installed, `make fid-weights`); class_mean: the "
                 "accuracy of a nearest-class-mean classifier built from the synthetic samples' class means (pixels) "
                 "on the real test split: a LogReg / MLP / CNN number at or below it shows nothing beyond ten class "
                 "templates; spread_ratio: mean within-class pairwise distance of the synthetic samples over the real "
                 "test split's (1: as varied as real digits, near 0: templates).")


def metric_values(m: Dict[str, Any], k: str) -> List[float]:
    """Metric ``k``'s values (one per generation) in one run's result: ``evaluate_run``'s (``<k>_values``) or the
    run's own ``metrics.json`` (classifiers and the class-mean baseline under ``downstream``, FID and
    precision / recall / density / coverage at its top level); [] when the run has none."""
    if f"{k}_values" in m:
        return [float(v) for v in m[f"{k}_values"]]
    ds = m.get("downstream") or {}
    v = ds.get(k, m.get(k))
    if isinstance(v, dict):
        v = v.get("test_acc")
    return [float(v)] if isinstance(v, (int, float)) and not isinstance(v, bool) else []


#: the fidelity columns of a generation table, beside its classifiers' (FIDELITY_NOTE says what they are)
FIDELITY_COLUMNS = ["fid", "fid_std", "precision", "recall", "density", "coverage", "class_mean", "spread_ratio",
                    "fid_protocol"]


def fidelity_cells(results: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The fidelity columns of one table row from its runs' results (mean over every run and generation)."""
    row: Dict[str, Any] = {}
    for k in GENERATION_METRICS:
        if k in ("logreg", "mlp", "cnn"):
            continue
        vals = [v for m in results for v in metric_values(m, k)]
        mean, std = mean_std(vals, 2 if k in ("fid", "class_mean") else 4)
        if vals:
            row[k] = mean
            if k == "fid":
                row["fid_std"] = std
    if "fid" not in row:
        notes = [m.get("fid") for m in results if isinstance(m.get("fid"), str)]
        notes += [f"n/a: {m['fid_missing']}"[:86] for m in results if m.get("fid_missing")]
        row["fid"] = notes[0] if notes else "n/a"
    protocols = [m.get("fid_protocol") for m in results if m.get("fid_protocol")]
    if protocols:
        row["fid_protocol"] = protocols[0].split(";")[0]
    return row


def _config_key(cfg) -> str:
    """A digest of the composed run config (settings only, nothing computed from records): a generation's saved
    result is read back only for the config that made it."""
    import dataclasses
    import hashlib

    text = json.dumps(dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else cfg, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _Generations:
    """The generations of one run folder: saved one by one (``table_generations/<g>.json``, atomically, keyed by
    the run's settings), read back with ``reuse``, and collected into per-metric lists and the cell's wall time
    (each generation's own; the first one's includes training)."""

    def __init__(self, run_dir: Path, key: str, reuse: bool, generations: int) -> None:
        self.dir, self.key, self.reuse, self.generations = run_dir / GENERATIONS_DIR, key, reuse, generations
        self.wall = 0.0
        self.per_gen: Dict[str, List[float]] = {k: [] for k in GENERATION_METRICS}
        self.fid_note: Optional[str] = None
        self.protocol: Optional[str] = None
        self.count = 0

    def saved(self, g: int) -> Optional[Dict]:
        f = self.dir / f"{g}.json"
        if not self.reuse or not f.exists():
            return None
        rec = json.loads(f.read_text())
        if rec.get("config_key") != self.key:
            return None
        self.wall += float(rec.get("wall_s") or 0.0)
        return rec["metrics"]

    def save(self, g: int, metrics: Dict, since: float, seconds: Optional[float] = None) -> None:
        from dpgen.utils.io import atomic_write_text

        self.dir.mkdir(parents=True, exist_ok=True)
        dt = time.time() - since if seconds is None else seconds  # one reading: the file and the sum hold it
        self.wall += dt
        atomic_write_text(self.dir / f"{g}.json", json.dumps({"config_key": self.key, "generation": g,
                                                              "wall_s": round(dt, 1), "metrics": metrics},
                                                             indent=2, default=str))

    def collect(self, metrics: Dict) -> None:
        """One generation's numbers, and a line for it (the tables run without progress bars)."""
        self.count += 1
        ds = metrics.get("downstream") or {}
        got = [f"{k} {r['test_acc']:.2f} %" + (f" ({r['time_s']:.0f} s)" if r.get("time_s") is not None else "")
               for k, r in ds.items() if isinstance(r, dict) and "test_acc" in r]
        print(f"[dpgen] generation {self.count} of {self.generations}: " + (", ".join(got) or "no classifier"),
              flush=True)
        for k in ("logreg", "mlp", "cnn", "class_mean"):
            r = ds.get(k)
            if isinstance(r, dict) and "test_acc" in r:
                self.per_gen[k].append(float(r["test_acc"]))
        if isinstance(ds.get("spread_ratio"), (int, float)):
            self.per_gen["spread_ratio"].append(float(ds["spread_ratio"]))
        if metrics.get("fid") is not None:
            for k in ("fid", "precision", "recall", "density", "coverage"):
                if isinstance(metrics.get(k), (int, float)):
                    self.per_gen[k].append(float(metrics[k]))
            self.protocol = metrics.get("fid_protocol") or self.protocol
        elif "fid_missing" in metrics:
            self.fid_note = metrics["fid_missing"]

    def summary(self, m: Dict) -> Dict[str, Any]:
        """The row: the run's facts (``m``: its metrics.json) and mean / std / values of each metric."""
        from dpgen.privacy.report import PrivacyReport

        per_gen = self.per_gen
        out = {"steps": m["steps"], "stop_reason": m["stop_reason"], "wall_s": round(self.wall, 1),
               "train_s": m["train_seconds"], "steps_per_s": round(m["steps"] / max(m["train_seconds"], 1e-9), 3),
               # epsilon ("inf" when not private), noise multiplier and noise std ("n/a" when not stated)
               **PrivacyReport.of(m["privacy"], m.get("method")).cells(),
               "generations": max(len(v) for v in per_gen.values()) if any(per_gen.values()) else 0}
        for k, v in per_gen.items():
            out[k], std = mean_std(v, 2 if k in ("fid", "class_mean", "logreg", "mlp", "cnn") else 4)
            if v:
                out[f"{k}_std"] = std
                out[f"{k}_values"] = [round(x, 4) for x in v]
            else:
                out.pop(k)
        if "fid" not in out:
            out["fid"] = "n/a: " + (self.fid_note or "FID not computed at this scale (task.fid=false)")[:80]
        else:
            out["fid_protocol"] = self.protocol
        return out


def _first_generation(cfg, run_dir: Path, gens: _Generations, t0: float) -> "tuple[Dict, int]":
    """(the run's metrics, the first generation still to evaluate): the run trained (or resumed) here, its
    generation 1 read back, or a finished run's own evaluation taken as generation 1 (``reuse``); without
    ``reuse`` a finished run is not trained again but its generation 1 is evaluated again (first 0)."""
    from dpgen.tasks import run as run_config

    m = gens.saved(0)
    finished = read_run(run_dir).metrics if m is None else None  # metrics.json of the checkpoint's weights
    if finished is not None and gens.reuse:  # a finished run (the caller checked the folder's settings)
        gens.save(0, finished, t0, float(finished.get("wall_seconds") or 0.0))
        print(f"[dpgen] generation 1 of {gens.generations}: the finished run's own evaluation", flush=True)
        return finished, 1
    if finished is not None:
        return finished, 0
    if m is None:  # train (or resume) the run; its own evaluation is generation 0
        m = run_config(cfg, run_dir)
        gens.save(0, m, t0, m.get("wall_seconds"))  # the run's own: every sitting of a resumed run, not only this
    else:
        print(f"[dpgen] generation 1 of {gens.generations}: read from {gens.dir / '0.json'}", flush=True)
    return m, 1


def evaluate_run(cfg, run_dir: Path, generations: int, reuse: bool = True) -> Dict[str, Any]:
    """Train ``cfg`` in ``run_dir`` (or resume it), evaluate ``generations`` synthetic sets of its generator (the
    papers' "5 runs of generation"); metrics mean / std / per-generation values and the run's facts, also
    written to ``run_dir/table_result.json``.

    Each generation's metrics are saved as it finishes (``run_dir/table_generations/<g>.json``, atomically), and
    with ``reuse`` a later call reads them instead of evaluating that generation again: an evaluation interrupted
    at generation 3 of 5 resumes at generation 3, and asking for more generations evaluates only the new ones. A
    run that finished without this (its ``metrics.json``: the run's own evaluation) gives generation 1 as it is."""
    from dpgen.tasks.evaluate import RunGenerations
    from dpgen.utils.io import atomic_write_text

    run_dir = Path(run_dir)
    gens = _Generations(run_dir, _config_key(cfg), reuse, generations)
    m, first = _first_generation(cfg, run_dir, gens, time.time())
    if first == 1:
        gens.collect(m)
    sets = RunGenerations(cfg, run_dir)  # task=evaluate's: generation g of the run's evaluated weights
    for g in range(first, generations):  # more synthetic sets from the same generator
        extra = gens.saved(g) if g > 0 else None
        if extra is None:
            print(f"[dpgen] generation {g + 1} of {generations}: sampling and evaluating", flush=True)
            t_g = time.time()
            extra = sets.evaluate(g)
            if g == 0:  # the run's own facts (privacy, steps) with its generation 1 evaluated again
                extra = {**m, **extra}
            gens.save(g, extra, t_g)
        else:
            print(f"[dpgen] generation {g + 1} of {generations}: read from {gens.dir / f'{g}.json'}", flush=True)
        gens.collect(extra)
    out = gens.summary(m)
    atomic_write_text(run_dir / RESULT_FILE, json.dumps(out, indent=2))
    return out


def generations_done(generations: int) -> Callable[[Dict[str, Any]], bool]:
    """``run_cell``'s ``complete`` for a table of ``generations`` generations: a finished result that holds fewer
    is extended (its generations are read back, the new ones evaluated); one written before its privacy cells
    (:data:`PRIVACY_CELLS`) is summarised again from its saved generations."""
    return lambda m: int(m.get("generations") or 0) >= generations and all(k in m for k in PRIVACY_CELLS)


def skip_reason(err: BaseException, limit: int = 300) -> str:
    return "skipped: " + " ".join(str(err).split())[:limit]


def compose_cell(cell: Cell, seed: int, common: Sequence[str] = (), data_root: Optional[str] = None):
    """The validated config of one run of ``cell``."""
    from dpgen.config import compose_config, compose_preset

    ov = [*common, *cell.overrides, *([f"seed={seed}"] if cell.set_seed else []), *RUN_OVERRIDES]
    if data_root:
        ov.append(f"dataset.data_root={data_root}")
    return compose_preset(cell.preset, ov) if cell.preset else compose_config(ov)


#: settings that do not change a run's result (where and how fast it runs): a finished run made with other
#: values of these is still the cell's run
NEUTRAL_SETTINGS = ("trainer.threads", "trainer.progress", "trainer.device", "model.memory_format", "dataset.data_root",
                    "resume", "logger")


def _flat(d, prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def changed_settings(cfg, run_dir: Path) -> List[str]:
    """``key: old -> new`` for each setting of ``cfg`` that differs from the ``config.yaml`` of the run already in
    ``run_dir`` (none when there is no run there; settings the older file lacks and :data:`NEUTRAL_SETTINGS`
    are not compared)."""
    from omegaconf import OmegaConf

    f = Path(run_dir) / "config.yaml"
    if not f.exists():
        return []
    from dpgen.train.resume import normalise_settings

    # privacy.accountant as the ledger it stands for (a DP-SWD run made when `rdp` was the default is the same run)
    old = normalise_settings(_flat(OmegaConf.to_container(OmegaConf.load(f))))
    new = normalise_settings(_flat(OmegaConf.to_container(OmegaConf.create(OmegaConf.to_yaml(
        OmegaConf.structured(cfg))))))
    neutral = lambda k: any(k == n or k.startswith(n + ".") for n in NEUTRAL_SETTINGS)  # noqa: E731
    return [f"{k}: {old[k]!r} -> {new[k]!r}" for k in sorted(new) if k in old and old[k] != new[k] and not neutral(k)]


def refuse_changed_settings(cfg, run_dir: Path) -> None:
    """A table cell's folder holds one run: a run made there with other settings (an older preset, other
    overrides) is neither read as this cell's result nor continued with the new settings."""
    diff = changed_settings(cfg, run_dir)
    if diff:
        shown = "; ".join(diff[:6]) + (f"; and {len(diff) - 6} more" if len(diff) > 6 else "")
        raise ValueError(f"{run_dir} holds a run made with other settings than this cell's ({shown}): its result "
                         "is not this cell's, and resuming it would mix the two. Remove that folder to run the cell "
                         "afresh (or move it away to keep it), or run with the settings it was made with.")


def _check_data(cfg) -> None:
    """Raise FileNotFoundError when the run's data files are absent (what a run would raise first)."""
    if cfg.task.name == "domain_adaptation":
        from dpgen.tasks.domain_adaptation import load_domains

        load_domains(cfg)
    else:
        from dpgen.data.private import PrivateData

        PrivateData(cfg.dataset)  # reads the private records (their owner): a missing file raises here


def wall_of(m: Dict[str, Any]) -> Optional[float]:
    """A result's wall time: a run's ``metrics.json`` says ``wall_seconds``, a table result (a row) ``wall_s``."""
    return m.get("wall_s", m.get("wall_seconds"))


def run_cell(cell: Cell, common: Sequence[str] = (), data_root: Optional[str] = None, reuse: bool = True,
             collect_only: bool = False, runner: Optional[Callable[[Any, Path], Dict[str, Any]]] = None,
             result_file: str = "metrics.json",
             complete: Optional[Callable[[Dict[str, Any]], bool]] = None) -> CellResult:
    """Every seed of ``cell``: read (``reuse``), resumed or trained; see the module's text. ``complete``: whether
    a finished result holds all the table asks of it (e.g. :func:`generations_done`); one that does not goes to
    ``runner`` again (which extends it), except with ``collect_only``."""
    from dpgen.tasks import run as run_config

    res = CellResult(cell)
    try:
        for seed in cell.seeds:
            out = cell.run_dir(seed)
            cfg = compose_cell(cell, seed, common, data_root)
            refuse_changed_settings(cfg, out)
            # a result counts only when it describes the checkpoint's weights (not a resumed, unfinished run's)
            m = read_run(out, result_file).metrics if (reuse or collect_only) else None
            if m is not None and (collect_only or complete is None or complete(m)):
                print(f"[dpgen] {cell.name} seed {seed}: reusing the finished run in {out}", flush=True)
            else:
                if collect_only:
                    _check_data(cfg)  # "skipped" when the data are absent, else "not run yet"
                    res.missing.append(seed)
                    continue
                t0 = time.time()
                m = (runner or run_config)(cfg, out)
                if wall_of(m) is None:
                    m["wall_seconds"] = time.time() - t0
            res.wall_s += float(wall_of(m) or 0.0)
            res.runs.append(m)
    except FileNotFoundError as e:
        res.skipped = skip_reason(e)
    return res


def run_cells(cells: Sequence[Cell], **kw) -> List[CellResult]:
    """:func:`run_cell` on each cell, in order; a cell whose data are absent does not stop the others."""
    return [run_cell(c, **kw) for c in cells]


def flag(text: str) -> bool:
    """argparse type of the drivers' true/false flags (``--reuse false``)."""
    low = str(text).lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not true or false")


def seed_list(text: str) -> List[int]:
    """argparse type of ``--seeds 0,1,2``."""
    try:
        return [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{text!r} is not a comma-separated list of seeds (e.g. 0,1,2)") from None


def add_grid_arguments(ap, runs: bool = True) -> None:
    """The arguments every training table takes, with one meaning and one default."""
    ap.add_argument("--data-root", default=None, help="where the datasets are (default: $DPGEN_DATA_ROOT)")
    if runs:
        ap.add_argument("--runs", type=int, default=None, help="runs (seeds 0..runs-1) per cell (default: the scale's)")
        ap.add_argument("--seeds", type=seed_list, default=None, metavar="0,1,...",
                        help="run these seeds only (e.g. 3,4): split a cell over processes; the table counts "
                             "the seeds it ran or read")
    ap.add_argument("--reuse", type=flag, default=True, metavar="{true,false}",
                    help="read finished runs' results (default true); false runs every cell through the loop "
                         "again: a finished run resumes at its end (evaluated again, nothing trained or charged "
                         "twice), an interrupted one continues; remove a run's folder to train it afresh")
    ap.add_argument("--collect-only", action="store_true",
                    help="assemble the table from finished runs; run nothing")
