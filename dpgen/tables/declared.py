"""Tables as configuration: ``dpgen table <name> [--scale smoke|cpu|paper]``.

A table is one YAML, ``conf/table/<name>.yaml`` (or any path), and an extraction function: its cells (a row's
preset, overrides and name), its seeds, the overrides every run gets, per-scale settings, its columns, title
and notes, and ``extract``, the dotted name of a function ``(result, cell) -> row`` (default
:func:`downstream_row`: accuracies, class-mean baseline, epsilon). This module runs every cell through the one
grid runner (:func:`dpgen.tables.grid.run_cells`: a finished run is read, an interrupted one resumes with its
ledger) and writes ``outputs/tables/<name>.{csv,md}``. A new table is its YAML, plus its extraction when the
default one does not fit: ``docs/EXTENDING.md`` "A table".

    table: eps_sweep                       # the output's name (default: the file's)
    title: DP-SWD on digits at two budgets
    common: [method=dpswd, task.eval_models=[logreg]]
    seeds: [0, 1]
    cells:
      - {name: epsilon 3, overrides: [privacy.epsilon=3]}
      - {name: epsilon 10, preset: null, overrides: [privacy.epsilon=10]}
    scales:                                # added to `common`; `seeds` / `datasets` here replace the table's
      smoke: {overrides: [trainer.epochs=null, trainer.steps=20], seeds: [0]}
    columns: [cell, runs, logreg, logreg_std, class_mean, epsilon_spent, sigma, status]

Two more keys make a paper table: ``datasets`` (a row per cell and dataset; ``{dataset}`` and ``{alias}`` in a
cell's name, preset, overrides and folder are replaced, ``aliases:`` maps a dataset to its presets' short name,
e.g. fashion_mnist: fmnist) and ``generations: G`` (each cell is one run whose generator is evaluated on G
synthetic sets, the papers' "5 runs of generation": :func:`dpgen.tables.grid.evaluate_run`; the row is its
mean / std, :func:`generation_row`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from dpgen.config import CONFIG_DIR
from dpgen.tables.grid import Cell, CellResult, add_grid_arguments, mean_std, run_cells

TABLE_DIR = CONFIG_DIR / "table"
DEFAULT_EXTRACT = "dpgen.tables.declared.downstream_row"


def table_path(name: str) -> Path:
    """``conf/table/<name>.yaml``, or ``name`` itself when it is a file; a clear error naming the choices."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    found = TABLE_DIR / f"{name}.yaml"
    if not found.exists():
        raise ValueError(f"table {name!r} is neither a YAML file nor one of conf/table/: choose one of "
                         f"{', '.join(table_names()) or '(none)'}")
    return found


def table_names() -> List[str]:
    return sorted(p.stem for p in TABLE_DIR.glob("*.yaml"))


def load_table(name: str, scale: str) -> Dict[str, Any]:
    """The table's YAML with ``scale``'s settings applied: ``common`` extended, ``seeds`` replaced."""
    from omegaconf import OmegaConf

    path = table_path(name)
    spec = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    scales = spec.get("scales") or {}
    if scales and scale not in scales:
        raise ValueError(f"table {path.stem}: scale={scale} is not one of its scales ({', '.join(scales)}) in {path}")
    extra = scales.get(scale) or {}
    for key in ("cells", "columns"):
        if not spec.get(key):
            raise ValueError(f"table {path.stem}: {path} has no `{key}:` (a table needs its cells and its columns)")
    return {**spec, "table": spec.get("table") or path.stem, "scale": scale,
            "common": [*(spec.get("common") or []), *(extra.get("overrides") or [])],
            "seeds": list(extra.get("seeds") or spec.get("seeds") or [0]),
            "datasets": list(extra.get("datasets") or spec.get("datasets") or []),
            "generations": extra.get("generations") or spec.get("generations")}


def expand_cells(spec: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The table's cells, one per cell and dataset when it names datasets (``{dataset}`` / ``{alias}`` filled)."""
    if not spec["datasets"]:
        return [dict(c) for c in spec["cells"]]
    aliases = spec.get("aliases") or {}
    out = []
    for c in spec["cells"]:
        for ds in spec["datasets"]:
            fill = {"dataset": ds, "alias": aliases.get(ds, ds)}
            out.append({**{k: (v.format(**fill) if isinstance(v, str) else
                               [x.format(**fill) for x in v] if isinstance(v, list) else v) for k, v in c.items()},
                        "dataset": ds})
    return out


def downstream_row(res: CellResult, cell: Dict[str, Any]) -> Dict[str, Any]:
    """The default extraction: per downstream classifier and the class-mean baseline mean / std over the seeds,
    the spread ratio, FID / recall / coverage when measured, and the privacy of the last run (epsilon, sigma)."""
    row: Dict[str, Any] = {"cell": cell["name"], **({"dataset": cell["dataset"]} if "dataset" in cell else {}),
                           "runs": len(res.runs)}
    for k in ("logreg", "mlp", "cnn", "class_mean"):
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
    p = (res.last or {}).get("privacy") or {}
    if p.get("private"):
        row.update(epsilon_spent=round(float(p["epsilon_spent"]), 4), sigma=round(float(p.get("sigma", 0.0)), 4))
    elif res.last:
        row["epsilon_spent"] = "inf"
    return row


def generation_row(res: CellResult, cell: Dict[str, Any]) -> Dict[str, Any]:
    """The extraction of a table with ``generations``: the cell's result (mean / std over its generations of
    each metric, the run's epsilon and sigma: :func:`dpgen.tables.grid.evaluate_run`)."""
    row = {"cell": cell["name"], **({"dataset": cell["dataset"]} if "dataset" in cell else {})}
    if res.last:
        row.update({k: v for k, v in res.last.items() if not k.endswith("_values")})
    return row


def run_table(name: str, scale: str = "smoke", data_root: Optional[str] = None, reuse: bool = True,
              collect_only: bool = False) -> List[Dict[str, Any]]:
    """Run (or read) every cell of table ``name`` at ``scale``; write its CSV and Markdown; return its rows."""
    from dpgen.utils.io import write_table
    from dpgen.utils.objects import import_object

    from dpgen.tables.grid import RESULT_FILE, evaluate_run, generations_done

    spec = load_table(name, scale)
    gens = spec["generations"]
    extract: Callable = import_object(spec.get("extract") or (
        "dpgen.tables.declared.generation_row" if gens else DEFAULT_EXTRACT), "extract")
    folder = spec.get("folder") or spec["table"]
    specs = expand_cells(spec)
    cells = [Cell(c["name"], c.get("preset"), f"{folder}/{scale}/{c.get('folder') or _slug(c['name'])}",
                  list(c.get("overrides") or []), spec["seeds"]) for c in specs]
    kw = {} if not gens else dict(runner=lambda cfg, out: evaluate_run(cfg, out, int(gens), reuse=reuse),
                                  result_file=RESULT_FILE, complete=generations_done(int(gens)))
    results = run_cells(cells, common=spec["common"], data_root=data_root, reuse=reuse, collect_only=collect_only,
                        **kw)
    rows = []
    for c, res in zip(specs, results):
        row = {**extract(res, c), "status": res.status, "wall_s": round(res.wall_s, 1)}
        rows.append(row)
    notes = [f"scale={scale}: {spec['common']} on every run; seeds {spec['seeds']}; table {_shown(table_path(name))}",
             *(spec.get("notes") or [])]
    write_table(spec["table"], rows, spec["columns"], title=spec.get("title") or spec["table"], notes=notes)
    return rows


def _shown(path: Path) -> str:
    """conf/table/<name>.yaml for a built-in table, else the path as given."""
    try:
        return str(Path("conf") / path.resolve().relative_to(CONFIG_DIR.resolve()))
    except ValueError:
        return str(path)


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_") or "cell"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="dpgen table", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", nargs="?", help="a table of conf/table/ or a YAML file (none: list the tables)")
    ap.add_argument("--scale", default="smoke", help="one of the table's scales (default smoke)")
    add_grid_arguments(ap, runs=False)
    args = ap.parse_args(argv)
    if not args.name:
        print("tables (conf/table/): " + (", ".join(table_names()) or "(none)"))
        return 0
    try:
        run_table(args.name, args.scale, args.data_root, args.reuse, args.collect_only)
    except ValueError as e:
        print(f"dpgen: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
