"""Tables as configuration: ``dpgen table <name> [--scale smoke|cpu|paper]``.

A table is one YAML, ``conf/table/<name>.yaml`` (or any path), and an extraction function ``(result, cell) -> row``
named by its ``extract`` (default :func:`downstream_row`: accuracies, class-mean baseline, epsilon). This module runs
every cell through the one grid runner (:func:`dpgen.tables.grid.run_cells`: a finished run is read, an interrupted
one resumes with its ledger) and writes ``outputs/tables/<name>.{csv,md}``; a computed table has no cells and names
a ``compute`` function that makes its rows (run on one torch thread), its runs resumed or read back through the loop.

Contract: every training run goes through the one loop (its run folder, ledger and resume); the scale's
``method.<key>`` overrides (and ``--set``'s) reach a cell only when its method has that key. A new table is its
YAML, plus its extraction when the default does not fit: docs/EXTENDING.md, "A table". Every key (a paper table's,
a computed table's) and the command-line options: docs/PAPERS.md, "The table YAML, key by key".
"""

from __future__ import annotations

import argparse
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from dpgen.config import CONFIG_DIR
from dpgen.utils.registry import Registry
from dpgen.privacy.report import PrivacyReport
from dpgen.tables.grid import (FIDELITY_NOTE, PRIVACY_CELLS, Cell, CellResult, add_grid_arguments, fidelity_cells,
                               mean_std, metric_values, run_cells)

TABLE_DIR = CONFIG_DIR / "table"
DEFAULT_EXTRACT = "dpgen.tables.declared.downstream_row"
ACCURACIES = ("logreg", "mlp", "cnn")


#: the tables: every ``conf/table/<name>.yaml``, by name (found on first lookup; a misspelt name gets the closest)
TABLES = Registry("table", key="table", finder=lambda: ((p.stem, p) for p in sorted(TABLE_DIR.glob("*.yaml"))))


def table_path(name: str) -> Path:
    """``name`` itself when it is a YAML file, else the registered ``conf/table/<name>.yaml``; an unknown name gets
    the registry's one error (the choices, and the closest name)."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    return TABLES.lookup(name)


def table_names() -> List[str]:
    return sorted(TABLES.names())


def load_table(name: str, scale: str) -> Dict[str, Any]:
    """The table's YAML with ``scale``'s settings applied: ``common`` extended, ``seeds`` replaced."""
    from omegaconf import OmegaConf

    path = table_path(name)
    spec = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    scales = spec.get("scales") or {}
    if scales and scale not in scales:
        raise ValueError(f"table {path.stem}: scale={scale} is not one of its scales ({', '.join(scales)}) in {path}")
    extra = scales.get(scale) or {}
    for key in ("columns",) if spec.get("compute") else ("cells", "columns"):
        if not spec.get(key):
            raise ValueError(f"table {path.stem}: {path} has no `{key}:` (a table needs its cells and its columns)")
    if spec.get("compute"):  # a computed table: the scale's entry is the compute function's own settings
        return {**spec, "table": spec.get("table") or path.stem, "scale": scale, "path": path, "settings": extra,
                "datasets": list(spec.get("datasets") or [])}
    runs = extra.get("runs") or spec.get("runs")
    seeds = extra.get("seeds") or (list(range(int(runs))) if runs else None) or spec.get("seeds") or [0]
    return {**spec, "table": spec.get("table") or path.stem, "scale": scale, "path": path,
            "common": list(spec.get("common") or []), "scale_overrides": list(extra.get("overrides") or []),
            "seeds": list(seeds), "datasets": list(extra.get("datasets") or spec.get("datasets") or []),
            "generations": extra.get("generations") or spec.get("generations"),
            "rows": list(extra.get("rows") or []), "dataset_overrides": dict(extra.get("dataset_overrides") or {})}


def _fill(value, fill: Dict[str, str]):
    if isinstance(value, str):
        return value.format(**fill)
    if isinstance(value, list):
        return [_fill(v, fill) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, fill) for k, v in value.items()}
    return value


def _has_preset(preset: Optional[str]) -> bool:
    return preset is None or (CONFIG_DIR / "experiment" / f"{preset}.yaml").exists()


def expand_cells(spec: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The table's cells, one per cell and dataset when it names datasets (``{dataset}`` / ``{alias}`` filled;
    a cell whose templated preset this dataset has not is left out). ``base`` keeps the cell's own name."""
    if not spec["datasets"]:
        return [{**c, "base": c["name"]} for c in spec["cells"]]
    aliases = spec.get("aliases") or {}
    fills = spec.get("fills") or {}  # more per-dataset names for the templates, e.g. the paper's row name
    out = []
    for ds in spec["datasets"]:  # dataset-major: a paper table's rows run dataset by dataset
        for c in spec["cells"]:
            fill = {"dataset": ds, "alias": aliases.get(ds, ds), **{k: (m or {}).get(ds, ds) for k, m in fills.items()}}
            cell = {**_fill(c, fill), "dataset": ds, "base": c["name"]}
            if "{" in str(c.get("preset")) and not _has_preset(cell.get("preset")):
                continue  # e.g. the 60,000-record recipe on mnist10k
            out.append(cell)
    return out


def select_cells(cells: List[Dict[str, Any]], rows: Optional[Sequence[str]], table: str) -> List[Dict[str, Any]]:
    """The cells named in ``rows`` (by name, folder-safe name ``slug`` or the cell's ``key``); when ``rows`` is
    empty, every cell but the ``optional`` ones."""
    if not rows:
        return [c for c in cells if not c.get("optional")]
    names = list(dict.fromkeys(c["base"] for c in cells))
    by_slug = {slug(n): n for n in names}
    by_slug.update({str(c["key"]): c["base"] for c in cells if c.get("key")})
    wanted = []
    for r in rows:
        if r not in names and r not in by_slug:
            raise ValueError(f"--rows: {r!r} is not a row of table {table}; rows (name or folder-safe name): "
                             + "; ".join(f"{n!r} ({slug(n)})" for n in names))
        wanted.append(r if r in names else by_slug[r])
    return [c for c in cells if c["base"] in wanted]


@lru_cache(maxsize=None)
def _method_keys(preset: Optional[str]) -> frozenset:
    """The names of the preset's method settings (composed once per process)."""
    from dpgen.config import compose_config, compose_preset

    return frozenset(dir((compose_preset(preset) if preset else compose_config([])).method))


def applicable(preset: Optional[str], overrides: Sequence[str]) -> List[str]:
    """The overrides this preset's method has (a scale's ``method.k`` means nothing to DP-MERF)."""
    if not any(o.startswith("method.") for o in overrides):
        return list(overrides)
    keys = _method_keys(preset)
    return [o for o in overrides if not o.startswith("method.") or o.split("=")[0].split(".")[1] in keys]


def cells_of(spec: Dict[str, Any], rows: Optional[Sequence[str]] = None,
             extra: Sequence[str] = ()) -> "List[tuple[Dict[str, Any], Cell]]":
    """Each selected cell's YAML with its :class:`Cell` (preset, overrides, seeds, run folder)."""
    tag = "_".join([spec["scale"], *extra])
    by_dataset = spec.get("dataset_overrides") or {}  # a scale's overrides for some datasets only
    out = []
    for c in select_cells(expand_cells(spec), rows or spec.get("rows"), spec["table"]):
        folder = (spec.get("run_folder") or "{table}/{tag}/{cell}").format(
            table=spec.get("folder") or spec["table"], scale=spec["scale"], tag=slug(tag),
            dataset=c.get("dataset", ""), cell=c.get("folder") or slug(c["name"]))
        ov = [*applicable(c.get("preset"), [*spec["scale_overrides"], *(by_dataset.get(c.get("dataset")) or [])]),
              *(c.get("overrides") or []), *applicable(c.get("preset"), extra)]
        out.append((c, Cell(c["name"], c.get("preset"), folder, ov, spec["seeds"],
                            seed_folders=spec.get("seed_folders", True), set_seed=spec.get("set_seed", True))))
    return out


def run_dir(name: str, scale: str, row: str, dataset: Optional[str] = None, seed: int = 0,
            extra: Sequence[str] = ()) -> Path:
    """Where the run of cell ``row`` (its name or folder-safe name) of table ``name`` lives (``dataset``: the
    dataset's cell of a paper table; ``extra``: the ``--set`` overrides, which name the folder)."""
    spec = _with_choices(load_table(name, scale), [dataset] if dataset else None, None)
    return cells_of(spec, [row], extra)[0][1].run_dir(seed)


def _number(v):
    """A paper cell as a number when it is one ('80.8' -> 80.8), else as written ('51/80.9')."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return v if v not in (None, "") else None


def _same(a, b) -> bool:
    a, b = _number(a), _number(b)
    return a == b or str(a) == str(b)


def paper_cells(spec: Dict[str, Any], cell: Dict[str, Any]) -> Dict[str, Any]:
    """``<k>_paper`` for each of the paper's columns: the values of the paper's row the cell names (``cell.paper``:
    column -> value), None where the cell names none."""
    from dpgen.utils.paper import read_paper_table

    p = spec.get("paper")
    if not p:
        return {}
    prefix = (p.get("prefix") or {}).get(cell.get("dataset"), "")
    match = cell.get("paper") or {}
    found = next((r for r in read_paper_table(p["table"]) if match and all(_same(r.get(k), v)
                                                                             for k, v in match.items())), {})
    fields = _Blank({k: v for k, v in cell.items() if isinstance(v, str)}, prefix=prefix)
    return {f"{k}_paper": _number(found.get(col.format_map(fields))) for k, col in (p.get("columns") or {}).items()}


def _budget(cell: Cell, data_root: Optional[str], common: Sequence[str]):
    """The cell's epsilon budget ('inf' for a non-private method) from its composed config; None without data."""
    from dpgen.tables.grid import compose_cell

    try:
        cfg = compose_cell(cell, cell.seeds[0] if cell.seeds else 0, common, data_root)
    except FileNotFoundError:
        return None
    eps = float(cfg.privacy.epsilon)
    return (int(eps) if eps.is_integer() else eps) if cfg.method.private else "inf"


def downstream_row(res: CellResult, cell: Dict[str, Any]) -> Dict[str, Any]:
    """The default extraction: per downstream classifier and the class-mean baseline mean / std over the seeds,
    the spread ratio, FID / recall / coverage when measured, and the privacy of the last run (epsilon, noise
    multiplier and noise std, read through :class:`dpgen.privacy.report.PrivacyReport`: n/a when not stated)."""
    row: Dict[str, Any] = {"runs": len(res.runs)}
    for k in (*ACCURACIES, "class_mean"):
        vals = [m["downstream"][k]["test_acc"] for m in res.runs
                if isinstance((m.get("downstream") or {}).get(k), dict)]
        if vals:
            row[k], row[f"{k}_std"] = mean_std(vals)
    spread = [m["downstream"]["spread_ratio"] for m in res.runs
              if isinstance((m.get("downstream") or {}).get("spread_ratio"), (int, float))]
    if spread:
        row["spread_ratio"] = mean_std(spread, 3)[0]
    for k in ("fid", "recall", "coverage"):
        vals = [float(m[k]) for m in res.runs if isinstance(m.get(k), (int, float))]
        if vals:
            row[k], row[f"{k}_std"] = mean_std(vals, 2 if k == "fid" else 3)
    if res.last:  # the typed report: a private report without epsilon_spent is refused, a noise fact not stated is n/a
        row.update(PrivacyReport.of(res.last.get("privacy") or {"private": False}, res.last.get("method")).cells())
    return row


def generation_row(res: CellResult, cell: Dict[str, Any]) -> Dict[str, Any]:
    """The extraction of a one-run cell with ``generations``: the run's result (mean / std over its generations
    of each metric, the run's epsilon, noise multiplier and noise std: :func:`dpgen.tables.grid.evaluate_run`)."""
    return {k: v for k, v in (res.last or {}).items() if not k.endswith("_values")}


def fid_row(res: CellResult, cell: Dict[str, Any]) -> Dict[str, Any]:
    """The extraction of an FID table: the run's FID and privacy; a run that trained but has no FID (weights or
    data for the reference statistics missing) says why in its status, and the other cells still run."""
    m = res.last
    if m is None:
        return {}
    row = {**_privacy_facts(m), "steps": m["steps"], "fid_protocol": (m.get("fid_protocol") or "").split(";")[0]}
    if isinstance(m.get("fid"), (int, float)):
        return {**row, "fid": round(float(m["fid"]), 2)}
    return {**row, "status": "trained; FID missing: " + str(m.get("fid_missing", "unknown"))[:300]}


def _privacy_facts(m: Dict[str, Any]) -> Dict[str, Any]:
    if "privacy" in m:  # a run's metrics.json, read through the typed report
        return PrivacyReport.of(m["privacy"], m.get("method")).cells()
    # evaluate_run's result: the same cells, already written from the typed report ("inf" when not private)
    missing = [k for k in PRIVACY_CELLS if k not in m]
    if missing:
        raise ValueError(f"the run's result has no {', '.join(missing)}: it was written by dpgen before issue 83; "
                         "run the table again with --force (or delete the run's result file) to evaluate it again")
    return {k: m[k] for k in PRIVACY_CELLS}


def pooled_row(res: CellResult, cell: Dict[str, Any]) -> Dict[str, Any]:
    """The extraction of a cell of several runs, each with one or more generations: every accuracy's mean / std
    over all runs x generations, the fidelity columns, the last run's privacy and steps."""
    row: Dict[str, Any] = {"runs": len(res.runs),
                           "generations": min((int(m.get("generations") or 1) for m in res.runs), default=0)}
    for k in ACCURACIES:
        row[k], row[f"{k}_std"] = mean_std([v for m in res.runs for v in metric_values(m, k)])
    if res.runs:
        row.update(fidelity_cells(res.runs))
    if res.last:
        row.update(_privacy_facts(res.last), steps=res.last["steps"])
    return row


def _verdicts(spec, row: Dict[str, Any], results: Sequence[CellResult], extra: Sequence[str]) -> None:
    from dpgen.utils.paper import verdict

    scale = spec["scale"]
    shortened = ", ".join([f"SCALE={scale}"] * (scale != "paper") + list(extra))
    for k in (spec.get("paper") or {}).get("verdicts") or []:
        ours = row.get(k) if isinstance(row.get(k), (int, float)) else None
        # the values behind ours: generations and runs, else the runs (one number per run)
        n = max((sum(len(metric_values(m, k)) for m in r.runs) or len(r.runs) for r in results), default=0)
        paper = row.get(f"{k}_paper")
        row[f"{k}_verdict"] = verdict(ours, paper if isinstance(paper, float) else None, row.get(f"{k}_std"),
                                      row.get(f"{k}_std_paper"), runs=n, shortened=shortened)


def _figure(spec, rows: List[Dict[str, Any]], name: str) -> None:
    """Ours beside the paper's, one panel per metric of ``figure.metrics``."""
    import matplotlib.pyplot as plt
    import numpy as np

    from dpgen.utils.io import save_figure

    fig_spec = spec["figure"]
    metrics, label = fig_spec["metrics"], fig_spec.get("label") or "{cell}"
    ok = [r for r in rows if r.get("status") == "ok"] or rows
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 0.5 * len(ok) + 2), squeeze=False)
    for ax, met in zip(axes[0], metrics):
        y = np.arange(len(ok))
        num = lambda v: v if isinstance(v, (int, float)) else 0.0  # noqa: E731
        ax.barh(y - 0.2, [num(r.get(met)) for r in ok], 0.4, label="dpgen")
        ax.barh(y + 0.2, [num(r.get(f"{met}_paper")) for r in ok], 0.4, label="paper")
        ax.set_yticks(y, [label.format_map(_Blank(r)) for r in ok], fontsize=7)
        ax.set_xlabel(f"{met.upper()} accuracy (%)" if met != "fid" else "FID")
        ax.legend(fontsize=7)
    fig.suptitle(f"{spec.get('title', name).format(scale=spec['scale'])}: dpgen vs paper", fontsize=9)
    save_figure(fig, name)


class _Blank(dict):
    def __missing__(self, key):
        return ""


def _runner_kw(spec, generations: Optional[int], reuse: bool) -> Dict[str, Any]:
    """The grid runner's arguments for a table whose cells evaluate G generations (none for one run's own)."""
    from dpgen.tables.grid import RESULT_FILE, evaluate_run, generations_done

    gens = generations if generations is not None else spec["generations"]
    if gens is not None and int(gens) < 1:
        raise ValueError(f"generations={gens}: give 1 or more (1: each run's own evaluation only)")
    if not gens or (not spec["generations"] and int(gens) == 1):
        return {}
    g = int(gens)
    return dict(runner=lambda cfg, out: evaluate_run(cfg, out, g, reuse=reuse), result_file=RESULT_FILE,
                complete=generations_done(g))


def run_table(name: str, scale: str = "smoke", data_root: Optional[str] = None, reuse: bool = True,
              collect_only: bool = False, *, datasets: Optional[Sequence[str]] = None,
              rows: Optional[Sequence[str]] = None, extra: Sequence[str] = (), generations: Optional[int] = None,
              seeds: Optional[Sequence[int]] = None, progress: bool = True) -> List[Dict[str, Any]]:
    """Run (or read) every cell of table ``name`` at ``scale``; write its CSV and Markdown; return its rows.
    ``datasets``, ``rows`` (cell names), ``extra`` (overrides for every run: they name the run folders and the
    output), ``generations`` and ``seeds`` replace the table's own. A computed table: :func:`run_computed`."""
    from dpgen.utils.objects import import_object

    spec = load_table(name, scale)
    if spec.get("compute"):
        if generations is not None:
            raise ValueError(f"--generations: table {spec['table']} is computed by {spec['compute']}, not a grid of "
                             f"runs; --generations does not apply to it (its sizes per scale are in {spec['path']})")
        return run_computed(with_settings(spec, extra), data_root, collect_only, datasets=datasets, rows=rows,
                            seeds=seeds, progress=progress)
    spec = _with_choices(spec, datasets, seeds)
    kw = _runner_kw(spec, generations, reuse)
    extract: Callable = import_object(spec.get("extract") or (
        "dpgen.tables.declared.generation_row" if spec["generations"] else DEFAULT_EXTRACT), "extract")
    pairs = cells_of(spec, rows, extra)
    results = run_cells([cell for _, cell in pairs], common=spec["common"], data_root=data_root, reuse=reuse,
                        collect_only=collect_only, **kw)
    made = []
    for (c, cell), res in zip(pairs, results):
        row = {spec.get("name_column") or "cell": c["name"],
               **({"dataset": c["dataset"]} if "dataset" in c else {}), **(c.get("row") or {}),
               **paper_cells(spec, c)}
        if "epsilon" in spec["columns"]:
            row["epsilon"] = _budget(cell, data_root, spec["common"])
        row.update(status=res.status, wall_s=round(res.wall_s, 1))
        row.update(extract(res, c))  # an extraction may say more than the runner's status (fid_row)
        made.append((c.get("group"), row, [res]))
        print(f"[dpgen] {c['name']}{' ' + c['dataset'] if 'dataset' in c else ''}: {res.status}", flush=True)
    out = []
    for _, row, group_results in _merge_groups(made):
        _verdicts(spec, row, group_results, extra)
        out.append(row)
    _write(spec, out, extra)
    for hook in spec.get("figures") or []:  # a table's own pictures: fn(spec, rows, cells, results)
        import_object(hook, "figures")(spec, out, pairs, results)
    return out


def with_settings(spec, extra: Sequence[str]) -> Dict[str, Any]:
    """A computed table's ``--set key=value``: the scale's setting ``key`` replaced by ``value`` (read as YAML, e.g.
    ``n_train=20000``, ``lowpass=[10,14]``); the table's files and run folders then carry ``_<key><value>``, so
    that no run of other settings is read back as this one's. A key the scale does not have is refused."""
    if not extra:
        return spec
    import yaml

    settings, tags = dict(spec["settings"]), []
    for item in extra:
        key, _, raw = item.partition("=")
        if key not in settings:
            raise ValueError(f"--set {item}: table {spec['table']} is computed by {spec['compute']}; its settings at "
                             f"scale={spec['scale']} are {', '.join(settings) or '(none)'} ({spec['path']})")
        settings[key] = yaml.safe_load(raw)
        tags.append(key + re.sub(r"[^A-Za-z0-9.]+", "-", raw).strip("-"))
    return {**spec, "settings": settings, "table": spec["table"] + "_" + "_".join(tags)}


def run_computed(spec, data_root: Optional[str] = None, collect_only: bool = False, *,
                 datasets: Optional[Sequence[str]] = None, rows: Optional[Sequence[str]] = None,
                 seeds: Optional[Sequence[int]] = None, progress: bool = True) -> List[Dict[str, Any]]:
    """A computed table (``compute:``, docs/PAPERS.md, "A computed table"), once per dataset (none: once); ``rows``:
    the shell patterns of the run folders this process trains, ``collect_only``: none. Returns every dataset's rows."""
    table = spec["table"]
    if (rows or collect_only) and not spec.get("split_runs"):
        raise ValueError(f"table {table} cannot split its runs over processes (its YAML has no `split_runs: "
                         "true`): run it without --rows / --collect-only")
    if datasets and not spec["datasets"]:
        raise ValueError(f"--datasets {','.join(datasets)}: table {table} reads no dataset; leave --datasets out")
    if seeds is not None and len(seeds) != 1:
        raise ValueError(f"--seeds {','.join(map(str, seeds))}: table {table} is computed from one seed; give one, "
                         "e.g. --seeds 0")
    first = spec["datasets"][0] if spec["datasets"] else None  # the YAML's own dataset keeps the bare file names
    spec = _with_choices(spec, datasets, None)
    out: List[Dict[str, Any]] = []
    seed = int(seeds[0]) if seeds else 0
    for dataset in spec["datasets"] or [None]:
        # a seed other than 0 gets its own run folders, table and figure: seed 0's finished runs would otherwise be
        # read back (resume=auto) as this seed's, beside a release drawn with this seed
        suffix = ("" if dataset == first else f"_{dataset}") + (f"_seed{seed}" if seed else "")
        out += _compute(spec, dataset, suffix, data_root, seed, progress, RunSelection(rows, collect_only))
    return out


def _compute(spec, dataset: Optional[str], suffix: str, data_root: Optional[str], seed: int, progress: bool,
             select: "RunSelection") -> List[Dict[str, Any]]:
    """One dataset's computed table: ``compute`` on one thread, the table with its notes, the figures."""
    import time

    from dpgen.utils.io import outputs_dir, save_figure, write_table
    from dpgen.utils.objects import import_object

    t0 = time.time()
    name, scale, settings = spec["table"] + suffix, spec["scale"], spec["settings"]
    run_root = outputs_dir() / "runs" / name / scale
    rows, pictures = _one_thread(import_object(spec["compute"], "compute"), settings, run_root=run_root,
                                 data_root=data_root, seed=seed, progress=progress, dataset=dataset, select=select)
    if select.seen and len(select.missing) == len(select.seen):
        raise ValueError(f"table {name}: no run has finished in {run_root} (not yet: {', '.join(select.missing)}); "
                         "run it without --collect-only, or with --rows naming the runs to train")
    notes = import_object(spec["notes_from"], "notes_from")(rows, settings, scale, dataset) \
        if spec.get("notes_from") else []
    wall = [] if select.collect_only else [f"Wall time {time.time() - t0:.0f} s (1 thread, CPU)."]
    title = (spec.get("title") or spec["table"]).format_map(_Blank(scale=scale, dataset=dataset or ""))
    write_table(name, rows, spec["columns"], title=title, notes=[*notes, *select.note(), *wall])
    for figure, hook in (spec.get("plots") or {}).items():
        save_figure(import_object(hook, "plots")(rows, pictures, settings, dataset), figure + suffix)
    print(f"[dpgen] table {name} ({scale}) took {time.time() - t0:.1f} s", flush=True)
    return rows


def _one_thread(fn, *args, **kwargs):
    """``fn`` on one torch thread (the machines these tables run on are shared), then the count restored."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn(*args, **kwargs)
    finally:
        torch.set_num_threads(n)


class RunSelection:
    """Which of a computed table's runs this process trains: all (the default), those ``only`` names (run-folder
    names or shell patterns: ``--rows``), or none (``collect_only``). A run it does not train is read back when it
    has finished (its ``metrics.json`` exists, written last by the loop) and skipped otherwise, never touched:
    another process may be training it. :attr:`missing` lists the skipped runs, in order."""

    def __init__(self, only: Optional[Sequence[str]] = None, collect_only: bool = False):
        self.only = list(only or [])
        self.collect_only = bool(collect_only)
        self.missing: List[str] = []
        self.seen: List[str] = []

    def check(self, names: Sequence[str]) -> None:
        """Every ``only`` pattern must name at least one of the table's runs ``names``."""
        from fnmatch import fnmatch

        bad = [p for p in self.only if not any(fnmatch(n, p) for n in names)]
        if bad:
            raise ValueError(f"--rows {' '.join(bad)} names none of this table's runs at this scale: "
                             f"{', '.join(names)}")

    def wants(self, name: str, run_dir) -> bool:
        """True: run ``name`` in ``run_dir`` (train it, or read it back if it has finished); False: skip it."""
        from fnmatch import fnmatch

        self.seen.append(name)
        selected = not self.collect_only and (not self.only or any(fnmatch(name, p) for p in self.only))
        if selected or (Path(run_dir) / "metrics.json").exists():
            return True
        self.missing.append(name)
        return False

    def note(self) -> List[str]:
        """A table note when runs are missing (else none)."""
        if not self.missing:
            return []
        return [f"Partial: {len(self.seen) - len(self.missing)} of {len(self.seen)} runs have finished; not yet: "
                f"{', '.join(self.missing)}. No verdict until every run exists (the same command without "
                "--collect-only / --rows trains the rest, resuming any interrupted run)."]


def _merge_groups(made):
    """Cells of one ``group`` (e.g. a dataset's non-private and private runs) make one row: the first cell's row
    with what the later ones add, the first status that is not ok, the wall times summed."""
    out: List[list] = []
    index: Dict[Any, int] = {}
    for key, row, results in made:
        if key is None or key not in index:
            if key is not None:
                index[key] = len(out)
            out.append([key, dict(row), list(results)])
            continue
        entry = out[index[key]]
        first = entry[1]
        first.update({k: v for k, v in row.items() if v is not None and k not in ("status", "wall_s")})
        first["wall_s"] = round(float(first.get("wall_s") or 0) + float(row.get("wall_s") or 0), 1)
        if first.get("status") == "ok":
            first["status"] = row.get("status")
        entry[2].extend(results)
    return out


def _with_choices(spec, datasets, seeds) -> Dict[str, Any]:
    if datasets:
        allowed = spec.get("dataset_choices") or spec["datasets"]
        bad = [d for d in datasets if d not in allowed]
        if bad:
            raise ValueError(f"--datasets: {bad[0]!r} is not one of {', '.join(allowed)} (table {spec['table']})")
        spec = {**spec, "datasets": list(datasets)}
    return {**spec, "seeds": list(seeds)} if seeds is not None else spec


def _write(spec, rows: List[Dict[str, Any]], extra: Sequence[str]) -> None:
    from dpgen.utils.io import write_table
    from dpgen.utils.paper import VERDICT_NOTE

    name = spec["table"] + ("_" + slug("_".join(extra)) if extra else "")  # one file per setting
    ov = [*spec["common"], *spec["scale_overrides"], *extra]
    notes = [f"scale={spec['scale']}: {ov or 'the presets unchanged'} on every run (a cell's own overrides win); "
             f"seeds {spec['seeds']}; table {_shown(spec['path'])}", *(spec.get("notes") or [])]
    if spec.get("notes_file"):  # notes kept as Markdown beside the drivers (dpgen/tables/notes/<name>.md)
        from dpgen.tables import table_notes

        notes += table_notes(spec["notes_file"])
    if any(k in spec["columns"] for k in ("fid", "class_mean", "spread_ratio")) and spec.get("fidelity_note", True):
        notes.append(FIDELITY_NOTE)
    if (spec.get("paper") or {}).get("verdicts"):
        notes.append(VERDICT_NOTE)
    title = (spec.get("title") or spec["table"]).format(scale=spec["scale"])
    for out in [name, *([f"{name}_{spec['scale']}"] if spec.get("copy_per_scale") else [])]:  # scales kept apart
        write_table(out, rows, spec["columns"], title=title, notes=notes)
    if spec.get("figure"):
        _figure(spec, rows, name)


def _shown(path: Path) -> str:
    """conf/table/<name>.yaml for a built-in table, else the path as given."""
    try:
        return str(Path("conf") / path.resolve().relative_to(CONFIG_DIR.resolve()))
    except ValueError:
        return str(path)


def slug(text: str) -> str:
    """A cell's folder-safe name: ``DP-SWD-c (rows unbounded)`` -> ``DP_SWD_c_rows_unbounded``."""
    return re.sub(r"[^A-Za-z0-9.]+", "_", str(text)).strip("_") or "cell"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="dpgen table", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", nargs="?", help="a table of conf/table/ or a YAML file (none: list the tables)")
    ap.add_argument("--scale", default="smoke", help="one of the table's scales (default smoke)")
    ap.add_argument("--datasets", default=None, help="comma-separated datasets (default: the table's)")
    ap.add_argument("--rows", "--only", nargs="+", default=None, metavar="ROW",
                    help="these cells only (name or folder name); a computed table: train only these runs (run-folder "
                         "names, shell patterns, e.g. 's0.05_*'), read back the others that have finished")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides for every run, e.g. trainer.epochs=10 (they name the run folders and the output)")
    ap.add_argument("--generations", type=int, default=None, metavar="G",
                    help="synthetic sets evaluated per trained run (default: the table's; 1: the run's own)")
    ap.add_argument("--no-progress", action="store_true",
                    help="no progress bars in a computed table's runs (a grid table's runs never show them)")
    add_grid_arguments(ap, runs=True)
    args = ap.parse_args(argv)
    if not args.name:
        print("tables (conf/table/): " + (", ".join(table_names()) or "(none)"))
        return 0
    bad = [o for o in args.set if "=" not in o]
    if bad:
        ap.error(f"--set: {bad[0]!r} is not KEY=VALUE (e.g. trainer.epochs=10)")
    seeds = args.seeds if args.seeds is not None else (list(range(args.runs)) if args.runs else None)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()] if args.datasets else None
    try:
        run_table(args.name, args.scale, args.data_root, args.reuse, args.collect_only, datasets=datasets,
                  rows=args.rows, extra=args.set, generations=args.generations, seeds=seeds,
                  progress=not args.no_progress)
    except ValueError as e:
        print(f"dpgen: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
