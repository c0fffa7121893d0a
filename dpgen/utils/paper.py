"""The papers' tables, shipped with the package (``dpgen/paper_tables/*.csv``, ``#`` comment lines).

They are facts from the papers, so they live inside the package: a bare clone and a
``pip install dpgen`` read them the same way (``importlib.resources``). ``../shared/paper-tables``
beside a checkout holds the same files; ``tests/tables/test_tables.py`` checks that they agree.
``shared_dir()`` is the optional source of real data (``$DPGEN_SHARED`` or ``<repo>/../shared``).
"""

from __future__ import annotations

import csv
import os
from importlib import resources
from pathlib import Path
from typing import Dict, List, Optional

from dpgen.utils.io import REPO_ROOT


def shared_dir() -> Path:
    """``$DPGEN_SHARED`` or ``<repo>/../shared`` (real data for tests and benchmarks, when present)."""
    return Path(os.environ.get("DPGEN_SHARED", REPO_ROOT.parent / "shared"))


def paper_table_path(name: str):
    """The packaged CSV of paper table ``name`` (an importlib.resources traversable)."""
    fname = name if name.endswith(".csv") else f"{name}.csv"
    return resources.files("dpgen.paper_tables") / fname


def paper_table_names() -> List[str]:
    return sorted(p.name[:-4] for p in resources.files("dpgen.paper_tables").iterdir() if p.name.endswith(".csv"))


def _lines(name: str) -> List[str]:
    path = paper_table_path(name)
    if not path.is_file():
        raise FileNotFoundError(f"paper table {name!r} is not shipped with dpgen: choose one of "
                                f"{', '.join(paper_table_names())}")
    return path.read_text().splitlines(keepends=True)


def read_paper_table(name: str) -> List[Dict[str, str]]:
    """Rows of a paper table as dicts of strings; a clear error for an unknown name."""
    lines = [ln for ln in _lines(name) if ln.strip() and not ln.lstrip().startswith("#")]
    return list(csv.DictReader(lines))


def paper_table_comments(name: str) -> List[str]:
    return [ln.lstrip("# ").rstrip() for ln in _lines(name) if ln.lstrip().startswith("#")]


#: how far (accuracy points) ours may lie from a paper's number that gives no spread, and still count as
#: reproduced: the papers print integers or one decimal, and one training run moves by about this much
VERDICT_TOLERANCE = 1.0


def verdict(ours, paper, ours_std=None, paper_std=None, runs: Optional[int] = None,
            tolerance: float = VERDICT_TOLERANCE, shortened: str = "") -> str:
    """One table cell against the paper, by one rule for every table: "reproduced" when ours lies within
    ``max(paper_std, ours_std, tolerance)`` of the paper's number, else "not reproduced" and by how much above or
    below. ``runs`` of 1 is said (no spread of ours); ``shortened`` names how the cell differs from the paper's
    setting (e.g. ``trainer.epochs=10``), and the verdict then says it is not on the paper's setting."""
    if paper is None or paper == "":
        return "no paper number"
    if ours is None or ours == "":
        return "not run"
    ours, paper = float(ours), float(paper)
    diff = ours - paper
    within = max(float(paper_std or 0.0), float(ours_std or 0.0), tolerance)
    if abs(diff) <= within:
        text = f"reproduced ({diff:+.1f}, within {within:.1f})"
    else:
        text = f"not reproduced: {abs(diff):.1f} {'above' if diff > 0 else 'below'}"
    if runs == 1:
        text += "; 1 run"
    if shortened:
        text += f"; at {shortened}, not the paper's setting"
    return text


#: the notes line of every table with a verdict column
VERDICT_NOTE = ("Verdict: reproduced when ours lies within max(the paper's std, ours, "
                f"{VERDICT_TOLERANCE:g} point) of the paper's number, else how far above or below; '1 run' means "
                "ours has no spread; a cell not at the paper's setting (another SCALE, shortened runs) says so.")
