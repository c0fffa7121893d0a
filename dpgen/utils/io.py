"""Atomic result files: JSON, CSV and Markdown tables, PNG figures under ``outputs/``.

Every writer writes to a temporary file in the destination folder and renames it into place,
so an interrupted run never leaves a half-written result behind.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]
#: a checkout (pip install -e or a clone) keeps its data/ and outputs/ beside the code; an installed package
#: (site-packages) uses the working directory's instead, a folder the user owns
IN_CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "dpgen").is_dir()


def project_root() -> Path:
    """The checkout's root, or for an installed package the working directory."""
    return REPO_ROOT if IN_CHECKOUT else Path.cwd()


def outputs_dir() -> Path:
    """Root of result files: ``$DPGEN_OUTPUTS`` or ``<repo>/outputs``."""
    return Path(os.environ.get("DPGEN_OUTPUTS", project_root() / "outputs"))


def tables_dir() -> Path:
    p = outputs_dir() / "tables"
    p.mkdir(parents=True, exist_ok=True)
    return p


def figures_dir() -> Path:
    p = outputs_dir() / "figures"
    p.mkdir(parents=True, exist_ok=True)
    return p


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path, data: bytes) -> Path:
    """Write ``path`` through a temporary file and a rename (a reader never sees half a file); the file
    gets the modes the umask gives (mkstemp's own 0600 would hide results from a group on a cluster)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def _jsonable(obj):
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item):
        try:
            return _jsonable(obj.item())
        except (TypeError, ValueError):
            pass
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def write_json(path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(_jsonable(obj), indent=2, sort_keys=False) + "\n")


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e6):
            return f"{v:.4g}"
        return f"{v:.4g}" if abs(v) < 1 else f"{v:.4f}".rstrip("0").rstrip(".")
    return str(v)


def write_csv(path, rows: Sequence[Dict[str, Any]], columns: Sequence[str]) -> Path:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in columns})
    return atomic_write_text(path, buf.getvalue())


def markdown_table(rows: Sequence[Dict[str, Any]], columns: Sequence[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def write_table(
    name: str,
    rows: Sequence[Dict[str, Any]],
    columns: Sequence[str],
    title: str = "",
    notes: Iterable[str] = (),
    md_columns: Optional[Sequence[str]] = None,
    directory: Optional[Path] = None,
    echo: bool = True,
) -> Dict[str, Path]:
    """Write ``<name>.csv`` and ``<name>.md`` (title, table, notes) under ``outputs/tables``.

    Returns the two paths. With ``echo`` the Markdown is printed, so ``make <table>`` shows the
    paper's numbers beside ours on the terminal.
    """
    d = Path(directory) if directory is not None else tables_dir()
    csv_path = write_csv(d / f"{name}.csv", rows, columns)
    text = f"# {title}\n\n" if title else ""
    text += markdown_table(rows, md_columns or columns)
    notes = list(notes)
    if notes:
        text += "\n## Notes\n\n" + "".join(f"- {n}\n" for n in notes)
    md_path = atomic_write_text(d / f"{name}.md", text)
    if echo:
        print(text)
        print(f"[dpgen] wrote {csv_path} and {md_path}")
    return {"csv": csv_path, "md": md_path}


def save_figure(fig, name: str, directory: Optional[Path] = None, echo: bool = True, close: bool = True) -> Path:
    """Save a matplotlib figure atomically as ``outputs/figures/<name>.png`` (then close it)."""
    d = Path(directory) if directory is not None else figures_dir()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    path = atomic_write_bytes(d / f"{name}.png", buf.getvalue())
    if close:
        import matplotlib.pyplot as plt

        plt.close(fig)
    if echo:
        print(f"[dpgen] wrote {path}")
    return path


def label_axes(ax, xlabel: str, ylabel: str, title: Optional[str] = None, grid: str = "major",
               legend: bool = True) -> None:
    """The figures' axis style: labels, optional title, a light grid (``grid`` = major | both), a small legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    ax.grid(alpha=0.3, which=grid)
    if legend:
        ax.legend(fontsize=8)

