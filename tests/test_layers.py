"""The package's floors: the privacy library imports nothing above it (it is what every method builds on,
and what a reader checks first), and the lower floors do not import the floors that use them."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "dpgen"

#: package -> the dpgen packages it may import (besides itself)
ALLOWED = {
    "utils": set(),
    "losses": {"utils"},
    "privacy": {"utils", "losses"},
}


def _dpgen_imports(path: Path):
    """(line, module) of every ``dpgen...`` import in ``path``, function-level imports included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name == "dpgen" or name.startswith("dpgen."):
                yield node.lineno, name


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_lower_floor_imports_nothing_above_it(package):
    bad = []
    for path in sorted((PKG / package).rglob("*.py")):
        for line, module in _dpgen_imports(path):
            parts = module.split(".")
            target = parts[1] if len(parts) > 1 else "dpgen"
            if target != package and target not in ALLOWED[package]:
                bad.append(f"{path.relative_to(PKG.parent)}:{line} imports {module}")
    assert not bad, f"dpgen/{package} may import only {sorted(ALLOWED[package]) or 'nothing else of dpgen'}:\n" + \
        "\n".join(bad)
