"""docs/ is a manual whose references hold.

A page of docs/ answers one question in its present tense; dated measurements live as records under
experiments/ (experiments/README.md). These tests keep that shape and keep every reference working:
no page heading carries a date or an issue number, every relative link resolves, and every named
docs/ page, experiments/ file and quoted section ("docs/X.md, \"Heading\"") exists, wherever the
reference is written (README, docs, experiments, dpgen's strings, conf comments, scripts, tests). A quoted
section is a heading or the first words of a paragraph (a bold lead such as **The next lent session**). A module
whose docstring is a contract keeps it short and names the page that holds the derivation.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
RECORDS = sorted((ROOT / "experiments").rglob("*.md"))

DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
ISSUE = re.compile(r"\bissues? \d+|#\d+\b", re.IGNORECASE)
LINK = re.compile(r"\]\(([^)\s]+)\)|src=\"([^\"]+)\"")
DOC_NAME = re.compile(r"docs/([A-Za-z_]+\.md)")
# `docs/X.md, "Heading"` or (docs/X.md, "Heading"): the quoted words start a heading of X.
QUOTED = re.compile(r"docs/([A-Za-z_]+\.md)`?\)?,? \"([^\"]+)\"")
# a file under experiments/ named in full (no pattern such as {a,b}, <ds> or *)
RECORD_PATH = re.compile(r"(?<![\w./])experiments/[\w./-]+\.(?:md|json|csv|png)\b")


def _sources() -> list:
    """Every text file a reference may be written in."""
    files = [ROOT / "README.md", ROOT / "Makefile", *DOCS, *RECORDS]
    for folder, pattern in (("dpgen", "*.py"), ("conf", "*.yaml"), ("scripts", "*"), ("tests", "*.py")):
        files += [p for p in (ROOT / folder).rglob(pattern) if p.is_file() and "__pycache__" not in p.parts]
    return [f for f in files if f != Path(__file__).resolve()]


def _headings(path: Path) -> list:
    """The headings of a markdown file, outside fenced code blocks."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.append(line.lstrip("#").strip())
    return out


def _anchors(path: Path) -> list:
    """What a quoted section may name: the headings, and the first words of every paragraph."""
    lines = path.read_text(encoding="utf-8").splitlines()
    leads = [line for before, line in zip([""] + lines, lines) if not before.strip() and line.strip()]
    return _headings(path) + leads


def _plain(text: str) -> str:
    return " ".join(text.replace("`", "").replace("*", "").lower().split())


def test_page_headings_carry_no_dates_or_issue_numbers():
    bad = [f"{p.name}: {h}" for p in DOCS for h in _headings(p) if DATE.search(h) or ISSUE.search(h)]
    assert not bad, "move the dated or numbered part into a record under experiments/: " + "; ".join(bad)


def test_relative_links_resolve():
    broken = []
    for page in [ROOT / "README.md", *DOCS, *RECORDS]:
        for match in LINK.finditer(page.read_text(encoding="utf-8")):
            target = (match.group(1) or match.group(2)).split("#")[0]
            if not target or re.match(r"[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "links to nothing (fix the path): " + "; ".join(broken)


def test_named_pages_records_and_sections_exist():
    missing = []
    for src in _sources():
        try:
            text = src.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        where = src.relative_to(ROOT)
        for name in set(DOC_NAME.findall(text)):
            if not (ROOT / "docs" / name).exists():
                missing.append(f"{where}: docs/{name}")
        for path in set(RECORD_PATH.findall(text)):
            if not (ROOT / path).exists():
                missing.append(f"{where}: {path}")
        for name, quoted in QUOTED.findall(text):
            page = ROOT / "docs" / name
            if page.exists() and not any(_plain(h).startswith(_plain(quoted)) for h in _anchors(page)):
                missing.append(f"{where}: docs/{name}, \"{quoted}\"")
    assert not missing, "references to nothing (point them at the page, record or heading that holds it): " + \
        "; ".join(sorted(missing))


def test_every_record_is_linked_from_a_page():
    """A record nobody links is a diary page again: each one under experiments/{fidelity,runs} has a docs/ page."""
    pages = "\n".join(p.read_text(encoding="utf-8") for p in DOCS)
    orphans = [str(r.relative_to(ROOT)) for r in RECORDS
               if r.parent.name in ("fidelity", "runs") and f"{r.parent.name}/{r.name}" not in pages]
    assert not orphans, "link these records from the docs/ page that uses them: " + "; ".join(orphans)


def test_dpsinkhorn_module_docstring_is_a_contract():
    """What the module does and its contract, in at most 12 lines; the derivation lives in docs/DPSINKHORN.md."""
    doc = ast.get_docstring(ast.parse((ROOT / "dpgen/methods/dpsinkhorn.py").read_text(encoding="utf-8")))
    assert len(doc.splitlines()) <= 12, f"{len(doc.splitlines())} lines: move the derivation to docs/DPSINKHORN.md"
    assert "docs/DPSINKHORN.md" in doc


#: modules whose docstring is a contract (what the module does, what it guarantees, what callers must do) and the
#: docs/ page that holds the rest (derivations, lists of keys, measured rows)
CONTRACT_DOCSTRINGS = {
    "dpgen/train/loop.py": "docs/TRAINING.md",
    "dpgen/methods/dpkernel.py": "docs/DPKERNEL.md",
    "dpgen/tables/declared.py": "docs/PAPERS.md",
    "dpgen/methods/dpsgd.py": "docs/PAPERS.md",
    "dpgen/privacy/projection.py": "docs/DPSWD.md",
    "dpgen/audit/one_run.py": "docs/PRIVACY_AUDIT.md",
    "dpgen/methods/dpswd.py": "docs/DPSWD.md",
}


@pytest.mark.parametrize("module", sorted(CONTRACT_DOCSTRINGS))
def test_module_docstring_is_a_contract(module):
    """At most 15 lines, naming the docs/ page the rest moved to."""
    doc = ast.get_docstring(ast.parse((ROOT / module).read_text(encoding="utf-8")))
    page = CONTRACT_DOCSTRINGS[module]
    assert len(doc.splitlines()) <= 15, f"{module}: {len(doc.splitlines())} lines: move the rest to {page}"
    assert page in doc, f"{module}: its docstring should point at {page}"
