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
from typing import Dict, List

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
