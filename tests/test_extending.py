"""docs/EXTENDING.md's worked examples run as written: private methods (one with a one-shot release), a dataset, tables."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```[a-z]*\n# file: (?P<name>\S+)\n(?P<body>.*?)```", re.S)


def _write_blocks(tmp_path: Path) -> dict:
    doc = (ROOT / "docs" / "EXTENDING.md").read_text()
    files = {m["name"]: m["body"] for m in BLOCK.finditer(doc)}
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    return files


def _bash(script: str, cwd: Path) -> str:
    # the checkout first, then the caller's path (a machine whose packages are on PYTHONPATH keeps them)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    r = subprocess.run(["bash", script], cwd=cwd, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "DPGEN_ROOT": str(ROOT), "PYTHONPATH": path,  # `python` = this one
                            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"})
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_the_toy_method_of_extending_md_trains_and_reports_its_ledger(tmp_path):
    files = _write_blocks(tmp_path)
    assert {"toy_methods/dp_mean_match.py", "conf/method/dp_mean_match.yaml", "run.sh"} <= set(files)
    printed = _bash("run.sh", tmp_path)
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    p = m["privacy"]
    assert m["method"] == "dp_mean_match" and m["steps"] == 20
    assert p["private_steps"] == 20 and 9.0 < p["epsilon_spent"] <= 10.0  # calibrated to the budget
    assert p["neighbouring_relation"].startswith("replace one")
    assert p["clip"] == 0.5  # the method's own setting, from its YAML through its Settings dataclass
    # both noise facts (issue 83): the std of the released mean is z x its sensitivity 2C/B
    assert p["noise_std"] == pytest.approx(p["noise_multiplier"] * p["sensitivity"]) and "sigma" not in p
    assert p["epsilon_cross_check"]["wang_wor"] > 0
    assert json.loads((tmp_path / "run" / "checkpoints" / "ledger.json").read_text())["steps"] == 20
    assert "loss" in json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    # task=accounting builds the outside method from the dataset's size and prints its own report
    acct = json.loads((tmp_path / "acct" / "accounting.json").read_text())
    assert acct["method"] == "dp_mean_match" and acct["neighbouring_relation"].startswith("replace one")
    assert acct["epsilon"] == p["epsilon_spent"]  # the same 20 steps at the same noise as the run
    assert "dp_mean_match on digits" in printed and "base on" not in printed  # the user's name, not the base's


def test_an_outside_methods_settings_are_validated_by_its_class(tmp_path, monkeypatch, run_cli):
    """method.clip of the outside method is checked by its Settings dataclass: a bad value and an unknown
    key are refused with the key named (exit 2, no traceback)."""
    _write_blocks(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "toy_methods"))
    base = ["method=dp_mean_match", f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "task=accounting"]
    for extra, named in (("method.clip=-1", "method.clip=-1.0 must be > 0"), ("+method.clipp=3", "clipp")):
        code, text = run_cli(*base, extra)
        assert code == 2 and named in text and "Traceback" not in text, text
    code, text = run_cli(*base, "method.clip=2")
    assert code == 0 and "l2 sensitivity 0.04" in text, text  # its declared 2C / B, C = 2.0, B = 100


def test_the_dp_gan_of_extending_md_trains_accounts_and_passes_the_audit(tmp_path):
    """DP-SGD on a discriminator through the privacy library's per-sample helper: a private method in one
    file and one YAML, with its own settings, through run.py, task=accounting and the canary audit (which
    must catch the quarter-noise control)."""
    import csv

    files = _write_blocks(tmp_path)
    assert {"toy_methods/dp_gan.py", "conf/method/dp_gan.yaml", "run_gan.sh"} <= set(files)
    _bash("run_gan.sh", tmp_path)
    m = json.loads((tmp_path / "gan" / "metrics.json").read_text())
    p = m["privacy"]
    assert m["method"] == "dp_gan" and m["steps"] == 30 and p["private_steps"] == 30
    assert 9.0 < p["epsilon_spent"] <= 10.0 and p["neighbouring_relation"].startswith("add/remove")
    assert m["downstream"]["logreg"]["test_acc"] > 0
    acct = json.loads((tmp_path / "gan_acct" / "accounting.json").read_text())
    assert acct["epsilon"] == pytest.approx(p["epsilon_spent"]) and acct["neighbouring_relation"].startswith("add/remove")
    rows = {r["audit"] if "audit" in r else r["variant"]: r
            for r in csv.DictReader((tmp_path / "gan_audit" / "privacy_audit.csv").open())}
    verdicts = sorted(r["verdict"] for r in rows.values())
    assert verdicts == ["caught", "pass", "pass"], rows


def _analytic_gaussian_epsilon(z: float, delta: float) -> float:
    """Epsilon of one Gaussian release with noise std z x its l2 sensitivity, by the analytic Gaussian mechanism
    (Balle & Wang 2018, Theorem 8): the smallest eps with Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) - eps z) <= delta,
    found by bisection (the left side decreases in eps). Written here from the formula, not from dpgen."""
    import math

    phi = lambda x: 0.5 * math.erfc(-x / math.sqrt(2))  # noqa: E731
    gap = lambda e: phi(1 / (2 * z) - e * z) - math.exp(e) * phi(-1 / (2 * z) - e * z) - delta  # noqa: E731
    lo, hi = 0.0, 100.0
    for _ in range(200):
        lo, hi = (lo, (lo + hi) / 2) if gap((lo + hi) / 2) <= 0 else ((lo + hi) / 2, hi)
    return hi


def test_the_one_shot_method_of_extending_md_releases_once_and_trains_for_free(tmp_path):
    """DP class means: one Gaussian release before training (a OneShotGaussian, accounts_steps = False), then
    post-processing. Its epsilon is the analytic Gaussian mechanism's at the declared noise multiplier, the same
    at 50 and 5,000 steps, and the run's ledger holds that one release and no step (before base.account() skipped
    accounts_steps = False, the base class charged every step in the one-shot ledger and the run crashed)."""
    files = _write_blocks(tmp_path)
    assert {"toy_methods/dp_class_means.py", "conf/method/dp_class_means.yaml", "run_one_shot.sh"} <= set(files)
    printed = _bash("run_one_shot.sh", tmp_path)
    z, delta = 1.0, 1e-5  # the YAML's method.noise_multiplier; privacy.delta's default
    assert "noise_multiplier: 1.0" in files["conf/method/dp_class_means.yaml"]
    exact = _analytic_gaussian_epsilon(z, delta)
    assert 4.3 < exact < 4.5  # the value the page states ("about 4.4")
    m = json.loads((tmp_path / "means" / "metrics.json").read_text())
    p = m["privacy"]
    assert m["method"] == "dp_class_means" and m["steps"] == 50 and m["stop_reason"] == "completed"
    assert p["epsilon_spent"] == pytest.approx(exact, rel=1e-4) and p["delta"] == delta
    assert p["noise_multiplier"] == z and p["private_steps"] == 0
    assert p["sensitivity"] == pytest.approx(2 * 4.0 / 1437)  # 2C / n: C the default clip, n digits' n_train
    assert p["noise_std"] == pytest.approx(z * p["sensitivity"]) and p["neighbouring_relation"].startswith("replace")
    ledger = json.loads((tmp_path / "means" / "checkpoints" / "ledger.json").read_text())
    assert ledger["ledger"]["accountant"]["history"] == [{"noise_multiplier": z, "sample_rate": 1.0, "num_steps": 1}]
    assert ledger["ledger"]["prefix_releases"] == 1 and ledger["private_steps"] == 0
    assert "loss" in json.loads((tmp_path / "means" / "metrics.jsonl").read_text().splitlines()[-1])
    assert m["downstream"]["logreg"]["test_acc"] > 50  # the release carries the classes (chance: 10 %)
    # task=accounting: one Gaussian's epsilon, independent of trainer.steps, equal to what the run charged
    accts = [json.loads((tmp_path / f"means_acct_{s}" / "accounting.json").read_text()) for s in (50, 5000)]
    assert accts[0]["epsilon"] == accts[1]["epsilon"] == p["epsilon_spent"]
    assert accts[0]["epsilon_cross_check"]["analytic_gaussian"] == pytest.approx(exact, rel=1e-6)
    assert all(a["noise_multiplier"] == z and a["neighbouring_relation"].startswith("replace") for a in accts)
    assert printed.count("dp_class_means on digits: released once") == 2


def test_the_toy_dataset_of_extending_md_trains_dpswd_through_its_loader(tmp_path):
    files = _write_blocks(tmp_path)
    assert {"toy_data/blobs.py", "conf/dataset/blobs.yaml", "run_dataset.sh"} <= set(files)
    _bash("run_dataset.sh", tmp_path)
    m = json.loads((tmp_path / "run_blobs" / "metrics.json").read_text())
    assert m["dataset"] == "blobs" and m["n_private"] == 400 and m["steps"] == 30
    assert 0 < m["privacy"]["epsilon_spent"] <= 10.0
    assert m["downstream"]["n_test"] == 400 and 0 <= m["downstream"]["logreg"]["test_acc"] <= 100
    assert "loader: blobs.load_blobs" in (tmp_path / "run_blobs" / "config.yaml").read_text()


def _run_table_block(tmp_path, files, script, out, table):
    """Write EXTENDING's blocks, run ``script``, return the rows of ``<out>/tables/<table>.csv``."""
    import csv

    assert set(files) <= set(_write_blocks(tmp_path))
    _bash(script, tmp_path)
    return list(csv.DictReader(open(tmp_path / out / "tables" / f"{table}.csv")))


def test_the_yaml_table_of_extending_md_runs_with_no_python(tmp_path):
    """A table as configuration: one YAML, run by dpgen.tables.declared through the grid runner."""
    rows = _run_table_block(tmp_path, {"tables/eps_budgets.yaml", "run_yaml_table.sh"}, "run_yaml_table.sh",
                            "yaml_out", "eps_budgets")
    assert [(r["cell"], r["runs"]) for r in rows] == [("epsilon 3", "2"), ("epsilon 10", "2")]
    for k in ("noise_multiplier", "noise_std"):  # the typed report's two noise facts (issue 83: not one sigma)
        assert float(rows[0][k]) > float(rows[1][k]) > 0  # less budget, more noise
    assert float(rows[0]["epsilon_spent"]) <= 3 and float(rows[1]["epsilon_spent"]) <= 10
    assert all(r["status"] == "ok" and float(r["class_mean"]) > 0 for r in rows)
    runs = tmp_path / "yaml_out" / "runs" / "eps_budgets" / "smoke"
    assert all((runs / c / f"seed{s}" / "config.yaml").exists() for c in ("epsilon_3", "epsilon_10") for s in (0, 1))


def test_the_toy_table_of_extending_md_writes_one_run_folder_per_cell(tmp_path):
    rows = _run_table_block(tmp_path, {"toy_tables/eps_sweep.py", "run_table.sh"}, "run_table.sh", "out",
                            "eps_sweep")
    out = tmp_path / "out"
    assert [r["epsilon"] for r in rows] == ["3", "10"] and [r["runs"] for r in rows] == ["2", "2"]
    for k in ("noise_multiplier", "noise_std"):  # the typed report's two noise facts (issue 83: not one sigma)
        assert float(rows[0][k]) > float(rows[1][k]) > 0  # less budget, more noise
    for r in rows:
        assert float(r["epsilon_spent"]) <= float(r["epsilon"]) and r["status"] == "ok"
    for eps in (3, 10):
        for seed in (0, 1):
            assert (out / "runs" / "eps_sweep" / f"eps{eps}" / f"seed{seed}" / "config.yaml").exists()
