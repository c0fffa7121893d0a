"""``pip install .`` (not editable) into a fresh virtual environment, then the console script from
another folder: the config tree and the paper tables travel inside the package (slow: builds a wheel)."""

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_pip_install_then_dpgen_runs_from_another_folder(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    # dpgen itself from the checkout; its dependencies (torch, ...) from this interpreter's site-packages
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(ROOT)], check=True, timeout=600)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "dpgen_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    r = subprocess.run([str(venv / "bin" / "dpgen"), "task=accounting", "method=dpswd", "dataset=mnist",
                        f"hydra.run.dir={work / 'run'}"], cwd=work, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (work / "run" / "accounting.json").exists() and "epsilon reached" in r.stdout
    r = subprocess.run([str(py), "-c", "import dpgen, dpgen.utils.paper as p; print(dpgen.__file__); "
                        "print(len(p.read_paper_table('dpswd_table4_noise'))); "
                        "from dpgen.tables import table_notes; print(len(table_notes('dpswd_da')))"], cwd=work,
                       capture_output=True, text=True, check=True)
    installed, rows, notes = r.stdout.split()
    assert str(venv) in installed and int(rows) > 0  # the installed copy, not the checkout
    assert int(notes) > 0  # the tables' notes travel with the package
    # data: the working directory's data/ (a folder the user owns), and the error names the installed DATA.md
    r = subprocess.run([str(venv / "bin" / "dpgen"), "dataset=mnist", "trainer.steps=1",
                        f"hydra.run.dir={work / 'run2'}"], cwd=work, capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "DPGEN_DATA_ROOT": ""})
    assert r.returncode == 2 and str(work / "data") in r.stderr, r.stderr[-2000:]
    doc = r.stderr.split("the expected files of every dataset: ")[1].split(")")[0].strip()
    assert str(venv) in doc and Path(doc).is_file(), doc



def test_importing_dpgen_keeps_pots_jax_backend_off():
    """POT imports JAX when installed and JAX reserves 75 % of the GPU: on a CUDA node with JAX (the H200
    image has it) 40 tests ran out of GPU memory. dpgen sets POT's switches unless the environment set them."""
    import os

    code = ("import os, dpgen, ot.backend as b; "
            "print(os.environ['POT_BACKEND_DISABLE_JAX'], os.environ['POT_BACKEND_DISABLE_CUPY'], b.jax is False)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POT_BACKEND_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert out.stdout.split() == ["1", "1", "True"]
    env["POT_BACKEND_DISABLE_JAX"] = "mine"  # the environment's own setting wins
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert out.stdout.split()[0] == "mine"


def test_every_script_that_imports_dpgen_finds_it_without_an_install():
    """``make bench`` on a machine where dpgen is not installed (a GPU machine given the checkout and the
    dependencies only) stopped at ``scripts/bench.py``: ModuleNotFoundError. Each script that imports dpgen
    puts the checkout on ``sys.path`` before its first dpgen import."""
    import ast

    missing = []
    for script in sorted((ROOT / "scripts").glob("*.py")):
        tree = ast.parse(script.read_text())
        first_dpgen = None
        for node in ast.walk(tree):
            mod = (node.module if isinstance(node, ast.ImportFrom) else
                   node.names[0].name if isinstance(node, ast.Import) else None)
            if mod and mod.split(".")[0] == "dpgen":
                first_dpgen = node.lineno if first_dpgen is None else min(first_dpgen, node.lineno)
        if first_dpgen is None:
            continue
        lines = script.read_text().splitlines()[:first_dpgen - 1]
        if not any("sys.path.insert(0" in ln for ln in lines):
            missing.append(f"{script.name} (first dpgen import on line {first_dpgen})")
    assert not missing, "put the checkout on sys.path before importing dpgen in: " + ", ".join(missing)


def test_make_install_asks_for_the_cpu_build_without_a_gpu_and_says_what_it_installed(tmp_path):
    """Without a GPU (no nvidia-smi on PATH) `make install` asks PyTorch's CPU index, falls back to the default build
    with a line saying so, and names the build it installed; CPU=0 never asks, CPU=1 always does (issue 55: a
    machine without a GPU pulled 6.1 GB of CUDA libraries silently)."""
    import os
    import shutil

    if shutil.which("make") is None:
        pytest.skip("no make")
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # no nvidia-smi there on this machine or in CI
    if shutil.which("nvidia-smi", path=env["PATH"]):
        pytest.skip("a GPU machine")

    def dry(*args):
        return subprocess.run(["make", "-n", "install", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                              check=True).stdout

    auto = dry()
    assert "--index-url https://download.pytorch.org/whl/cpu" in auto and "no GPU found by nvidia-smi" in auto
    assert "is not available from" in auto and "installed torch" in auto  # the fallback and the build, said
    assert "--index-url" not in dry("CPU=0").split("pip install -e")[0]
    assert "--index-url https://download.pytorch.org/whl/cpu" in dry("CPU=1")
