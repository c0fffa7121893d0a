"""One summary per sweep: ``sweep_summary.csv`` + ``.md`` (and a PNG when one swept value is numeric).

After every multirun (``python run.py -m ...``, any launcher, SLURM included) Hydra calls
:class:`SweepSummary` in the launching process, which reads every job folder of the sweep and writes the
summary beside them. ``dpgen collect <sweep dir>`` rebuilds it from the folders alone (after a crash, or
while a SLURM sweep still runs). A row per job: its folder, its overrides, its status (done, stopped by the
budget, interrupted with a checkpoint, failed), the epsilon spent (the one recorded in the job's checkpoint, which
its weights spent), the task's headline metrics, the wall time. Everything in it was already in the job's own
files (``metrics.json``, ``accounting.json``, ``checkpoints/last.pt``); a metrics.json that describes another step
than the checkpoint (a resumed job that has not finished) is not read as a result.
``<sweep>/by_overrides/<key=value,...>`` links each job folder under its swept values.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

try:  # hydra is a dependency; the import stays optional so that `dpgen collect` works without it
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover
    Callback = object

from dpgen.privacy.report import PrivacyReport

SUMMARY = "sweep_summary"


def _overrides(job: Path) -> List[str]:
    f = job / ".hydra" / "overrides.yaml"
    if not f.exists():
        return []
    from omegaconf import OmegaConf

    return [str(o) for o in OmegaConf.load(f)]


def _error_line(job: Path, sweep: Path) -> str:
    """The last ``dpgen: error:`` line a job wrote (its log, or submitit's .err files), if any."""
    files = list(job.glob("*.log")) + list((sweep / ".submitit").glob(f"*_{job.name}/*.err"))
    for f in files:
        try:
            lines = [l for l in f.read_text(errors="replace").splitlines() if "dpgen: error:" in l]
        except OSError:
            continue
        if lines:
            return lines[-1].split("dpgen: error:", 1)[1].strip()
    return ""


def headline(rec: Dict[str, Any]) -> Dict[str, Any]:
    """The task's headline numbers from a job's metrics.json / accounting.json."""
    out: Dict[str, Any] = {}
    task = rec.get("task")
    if task == "accounting":
        for k in ("epsilon", "epsilon_reached", "calibrated_noise_multiplier", "noise_multiplier", "noise_std",
                  "sigma"):  # task=accounting's sigma: DP-SWD's noise std z sqrt(w), as its paper names it
            if isinstance(rec.get(k), (int, float)):
                out[k] = rec[k]
        return out
    for name, r in (rec.get("downstream") or {}).items():
        if isinstance(r, dict) and "test_acc" in r:
            out[f"{name}_acc"] = r["test_acc"]
    if isinstance((rec.get("downstream") or {}).get("spread_ratio"), (int, float)):
        out["spread_ratio"] = rec["downstream"]["spread_ratio"]
    for k in ("test_acc", "target_acc", "fid", "precision", "recall", "density", "coverage"):
        if isinstance(rec.get(k), (int, float)):
            out[k] = rec[k]
    return out


def job_row(job: Path, sweep: Path) -> Dict[str, Any]:
    """A job's row. Its epsilon is the one its weights spent (the checkpoint's own record: dpgen.train.run_record),
    and it is ``done`` only when its metrics.json describes those weights."""
    from dpgen.train.run_record import read_run

    row: Dict[str, Any] = {"job": job.name, "overrides": " ".join(_overrides(job)), "folder": str(job)}
    name = "metrics.json" if (job / "metrics.json").exists() or not (job / "accounting.json").exists() \
        else "accounting.json"
    rec = read_run(job, name)
    resume = f"re-run the sweep's command with hydra.sweep.dir={sweep} to resume it"
    if rec.status == "finished":
        m = rec.result
        p = rec.privacy or m.get("privacy") or {}
        stop = str(m.get("stop_reason", "completed"))
        row["status"] = "done" if stop == "completed" else f"done ({stop})"
        if p:  # a training run's report, typed: a private one without its epsilon or delta is refused, not read as 0
            rep = PrivacyReport.of(p, m.get("method"))
            cells = rep.cells()  # epsilon "inf" when not private; noise "n/a" when the report does not state it
            row["epsilon"] = cells.pop("epsilon_spent")
            row.update(cells)
        else:  # task=accounting's record: what the settings would spend
            eps = m.get("epsilon", m.get("epsilon_reached"))
            row["epsilon"] = eps if isinstance(eps, (int, float)) else None
        row["steps"] = m.get("steps")
        row.update(headline(m))
        row["wall_s"] = m.get("wall_seconds", m.get("train_seconds"))
        return row
    if rec.status == "evaluating":  # trained; the evaluation stopped: its finished parts are in the row
        m = rec.result
        if rec.privacy or m.get("privacy"):
            row["epsilon"] = PrivacyReport.of(rec.privacy or m["privacy"], m.get("method")).cells()["epsilon_spent"]
        row.update(steps=m.get("steps"), **headline(m))
        row["status"] = f"trained, evaluation interrupted: {resume}"
        return row
    if rec.status in ("stale", "interrupted"):
        if rec.checkpoint_step is not None:
            where = f"checkpoint at step {rec.checkpoint_step}"
        else:
            where = f"ledger at {rec.ledger_steps} steps"
        stale = " (its metrics.json describes an earlier step and is not used)" if rec.status == "stale" else ""
        row["status"] = f"interrupted ({where}){stale}: {resume}"
        row["epsilon"] = rec.epsilon()
        row["steps"] = rec.checkpoint_step
        return row
    err = _error_line(job, sweep)
    row["status"] = f"failed: {err}" if err else "failed or not started (no result, no checkpoint)"
    return row


def collect(sweep_dir) -> List[Dict[str, Any]]:
    """One row per job folder (``<sweep>/<n>/``, in job order)."""
    sweep = Path(sweep_dir)
    if not sweep.is_dir():
        raise FileNotFoundError(f"{sweep} is not a folder: give a sweep's folder (hydra.sweep.dir, by default "
                                "outputs/multirun/<date>_<time>)")
    jobs = [d for d in sweep.iterdir() if d.is_dir() and not d.name.startswith(".") and
            ((d / ".hydra").exists() or (d / "metrics.json").exists() or (d / "accounting.json").exists()
             or (d / "checkpoints").exists())]
    jobs.sort(key=lambda d: (int(d.name.split("_")[0]) if d.name.split("_")[0].isdigit() else 1 << 30, d.name))
    return [job_row(j, sweep) for j in jobs]


def _swept(rows: Sequence[Dict[str, Any]]) -> Dict[str, List[str]]:
    """The override keys whose values differ between jobs, with each job's value."""
    per_job = [dict(o.split("=", 1) for o in r["overrides"].split() if "=" in o) for r in rows]
    keys = sorted({k for d in per_job for k in d})
    return {k: [d.get(k, "") for d in per_job] for k in keys if len({d.get(k, "") for d in per_job}) > 1}


def write_summary(sweep_dir, rows: List[Dict[str, Any]]) -> Dict[str, Path]:
    from dpgen.utils.io import write_table

    sweep = Path(sweep_dir)
    metric_cols = sorted({k for r in rows for k in r} - {"job", "overrides", "status", "epsilon", "steps", "wall_s",
                                                          "folder"})
    cols = ["job", "overrides", "status", "epsilon", "steps", *metric_cols, "wall_s", "folder"]
    done = sum(1 for r in rows if str(r.get("status", "")).startswith("done"))
    write_table(SUMMARY, rows, cols, directory=sweep, echo=False,
                title=f"Sweep {sweep.name}: {done} of {len(rows)} jobs done",
                notes=[f"rebuilt from the job folders by `dpgen collect {sweep}`; a job that did not finish is "
                       "resumed by running the sweep's command again with the same hydra.sweep.dir"])
    files = {"csv": sweep / f"{SUMMARY}.csv", "md": sweep / f"{SUMMARY}.md"}
    named = link_by_overrides(sweep, rows)
    if named is not None:
        files["by_overrides"] = named
    png = _plot(sweep, rows, metric_cols)
    if png is not None:
        files["png"] = png
    return files


def link_by_overrides(sweep: Path, rows) -> Optional[Path]:
    """``<sweep>/by_overrides/<key=value,...>`` -> ``../<job>``: each job folder under the values that were
    swept (Hydra numbers the folders; a name with every override could exceed the file system's limit)."""
    import os

    swept = _swept(rows)
    if not swept:
        return None
    folder = sweep / "by_overrides"
    folder.mkdir(exist_ok=True)
    for i, r in enumerate(rows):
        name = ",".join(f"{k}={v[i]}" for k, v in swept.items()).replace("/", "_")[:200] or r["job"]
        link = folder / name
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(os.path.join("..", r["job"]), link)
    return folder


def _plot(sweep: Path, rows, metric_cols) -> Optional[Path]:
    """Each headline metric and the epsilon spent against the one swept value, when there is one and it
    is numeric."""
    swept = _swept(rows)
    if len(swept) != 1:
        return None
    (key, values), = swept.items()
    try:
        xs = [float(v) for v in values]
    except ValueError:
        return None
    series = {m: [(x, r[m]) for x, r in zip(xs, rows) if isinstance(r.get(m), (int, float))]
              for m in [*metric_cols, "epsilon"]}
    series = {m: sorted(v) for m, v in series.items() if v}
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpgen.utils.io import atomic_write_bytes

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    acc = {m: pts for m, pts in series.items() if m != "epsilon"}
    for m, pts in acc.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-",
                label="class-mean baseline" if m == "class_mean" else m)
    ax.set_xlabel(key)
    ax.set_ylabel("accuracy (%)" if any("acc" in m or m in ("logreg", "mlp", "cnn") for m in acc) else "metric")
    handles, labels = ax.get_legend_handles_labels()
    if "epsilon" in series:  # epsilon on its own axis: a budget of 10 beside accuracies of 90 % reads as a flat line
        ax2 = ax.twinx()
        pts = series["epsilon"]
        line, = ax2.plot([p[0] for p in pts], [p[1] for p in pts], "s--", color="0.35", label="epsilon spent")
        ax2.set_ylabel("epsilon spent")
        ax2.set_ylim(bottom=0)
        handles, labels = handles + [line], labels + ["epsilon spent"]
    ax.set_title(f"{len(rows)} runs over {key} (folder {sweep.name})", fontsize=9)
    ax.legend(handles, labels, fontsize=8)
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    path = sweep / f"{SUMMARY}.png"
    atomic_write_bytes(path, buf.getvalue())
    return path


def print_summary(rows: List[Dict[str, Any]], files: Dict[str, Path]) -> None:
    for r in rows:
        nums = ", ".join(f"{k} {v:.4g}" for k, v in r.items()
                         if isinstance(v, float) and k not in ("wall_s",))
        print(f"[dpgen] job {r['job']} [{r['overrides']}]: {r['status']}" + (f"; {nums}" if nums else ""))
    print(f"[dpgen] sweep summary: {files['md']}" + (f", {files['png']}" if "png" in files else ""))


class SweepSummary(Callback):
    """Hydra callback (``hydra.callbacks.sweep_summary`` in conf/config.yaml): the summary after a multirun."""

    def on_multirun_end(self, config, **kwargs) -> None:
        try:
            sweep = Path(str(config.hydra.sweep.dir))
            rows = collect(sweep)
            print_summary(rows, write_summary(sweep, rows))
        except Exception as e:  # a summary must never turn a finished sweep into a failure
            print(f"[dpgen] the sweep summary could not be written ({e}); `dpgen collect <sweep dir>` retries",
                  file=sys.stderr)


def main(argv: Sequence[str]) -> int:
    """``dpgen collect <sweep dir>``."""
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print("usage: dpgen collect <sweep dir>\n\n" + __doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    try:
        rows = collect(argv[0])
    except FileNotFoundError as e:
        print(f"dpgen: error: {e}", file=sys.stderr)
        return 2
    print_summary(rows, write_summary(argv[0], rows))
    return 0


__all__ = ["SweepSummary", "collect", "write_summary"]
