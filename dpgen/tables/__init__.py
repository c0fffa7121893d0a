"""The paper tables' drivers (``make <table>``, ``make table NAME=<module>``).

The training tables are declarations (``conf/table/``) run by the one runner (:mod:`dpgen.tables.declared`: a grid
of runs through :mod:`dpgen.tables.grid`, or a computed table, the entropic-LDP figures); the notes printed under a
table live beside the drivers as Markdown (``dpgen/tables/notes/<driver>.md``).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

NOTES_DIR = Path(__file__).resolve().parent / "notes"


def table_notes(driver: str, section: Optional[str] = None) -> List[str]:
    """The notes of ``notes/<driver>.md`` (of its ``## <section>`` when given): one per ``- `` bullet, a
    line that does not start a bullet continues the one before it."""
    path = NOTES_DIR / f"{driver}.md"
    notes: List[str] = []
    current = section is None
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            current = line[3:].strip() == section
        elif not current or not line.strip() or line.startswith("<!--"):
            continue
        elif line.startswith("- "):
            notes.append(line[2:].strip())
        elif notes:
            notes[-1] += " " + line.strip()
    if not notes:
        raise KeyError(f"{path} has no notes" + (f" under '## {section}'" if section else ""))
    return notes
