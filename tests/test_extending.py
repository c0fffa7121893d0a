"""docs/EXTENDING.md's worked example runs as written: a private method in one file plus one YAML."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```[a-z]*\n# file: (?P<name>\S+)\n(?P<body>.*?)```", re.S)


def test_the_toy_method_of_extending_md_trains_and_reports_its_ledger(tmp_path):
    doc = (ROOT / "docs" / "EXTENDING.md").read_text()
    files = {m["name"]: m["body"] for m in BLOCK.finditer(doc)}
    assert {"toy_methods/dp_mean_match.py", "conf/method/dp_mean_match.yaml", "run.sh"} <= set(files)
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    r = subprocess.run(["bash", "run.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "DPGEN_ROOT": str(ROOT),  # `python` = this interpreter
                            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"})
    assert r.returncode == 0, r.stdout + r.stderr
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    p = m["privacy"]
    assert m["method"] == "dp_mean_match" and m["steps"] == 20
    assert p["private_steps"] == 20 and 9.0 < p["epsilon_spent"] <= 10.0  # calibrated to the budget
    assert p["neighbouring_relation"].startswith("replace one")
    assert p["epsilon_cross_check"]["wang_wor"] > 0
    assert json.loads((tmp_path / "run" / "checkpoints" / "ledger.json").read_text())["steps"] == 20
    assert "loss" in json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
