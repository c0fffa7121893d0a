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
the table's own ``runner`` (DP-Sinkhorn's tables evaluate more synthetic sets of one generator).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

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
NEUTRAL_SETTINGS = ("trainer.threads", "trainer.progress", "trainer.device", "dataset.data_root", "resume", "logger")


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
    old = _flat(OmegaConf.to_container(OmegaConf.load(f)))
    new = _flat(OmegaConf.to_container(OmegaConf.create(OmegaConf.to_yaml(OmegaConf.structured(cfg)))))
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
        from dpgen.data import load_dataset

        load_dataset(cfg.dataset.name, "train", data_root=cfg.dataset.data_root,
                     **dict(getattr(cfg.dataset, "options", {}) or {}))


def run_cell(cell: Cell, common: Sequence[str] = (), data_root: Optional[str] = None, reuse: bool = True,
             collect_only: bool = False, runner: Optional[Callable[[Any, Path], Dict[str, Any]]] = None,
             result_file: str = "metrics.json") -> CellResult:
    """Every seed of ``cell``: read (``reuse``), resumed or trained; see the module's text."""
    from dpgen.tasks import run as run_config

    res = CellResult(cell)
    try:
        for seed in cell.seeds:
            out = cell.run_dir(seed)
            done = out / result_file
            cfg = compose_cell(cell, seed, common, data_root)
            refuse_changed_settings(cfg, out)
            if (reuse or collect_only) and done.exists():
                m = json.loads(done.read_text())
                print(f"[dpgen] {cell.name} seed {seed}: reusing the finished run in {out}", flush=True)
            else:
                if collect_only:
                    _check_data(cfg)  # "skipped" when the data are absent, else "not run yet"
                    res.missing.append(seed)
                    continue
                t0 = time.time()
                m = (runner or run_config)(cfg, out)
                m.setdefault("wall_seconds", time.time() - t0)
            res.wall_s += float(m.get("wall_seconds") or 0.0)
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
