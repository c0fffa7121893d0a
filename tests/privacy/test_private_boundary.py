"""The boundary between private records and everything that leaves a run (issue 83).

* every split of private records is the one per-record hash: adding a record moves no other record between parts
  (your own data's held-out test part was a permutation over n: one added record moved 9,196 of 60,000);
* one owner of the private records (dpgen.data.private.PrivateData): no size leaves it, and no module outside
  dpgen/data reads a private split directly (counted here);
* one list of what a run folder holds (dpgen.train.publication.RUN_FILES): a run, a selection and a release write
  nothing else, and a file that states a release's privacy for other weights is removed or refused;
* your own data's reports say what is public by construction (the held-out test part, the shape), and their errors
  name no value read from a record.
"""

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
QUICK = ["dataset=digits", "trainer.steps=30", "task.n_synthetic=500", "task.eval_models=[logreg]", "task.fid=false",
         "trainer.progress=false"]


def _records(ds):
    X, y = ds.tensors
    return {(int(label), x.numpy().tobytes()) for x, label in zip(X, y)}


def _write_npz(path, x, y):
    np.savez(path, x=x, y=y)
    from dpgen.data import own

    for cached in (own._npz, getattr(own, "_npz_records", None)):  # a new file at an old path: read it again
        if cached is not None:
            cached.cache_clear()
    return str(path)


@pytest.mark.parametrize("kind", ["npz", "folder"])
def test_adding_one_record_to_own_data_moves_no_other_record(tmp_path, kind):
    """D and D plus one record: every record of D stays in its part (train or the held-out test part); only the new
    one is placed. Fails with a permutation over n (the old split: 16 out and 17 in at 240 images)."""
    from PIL import Image

    from dpgen.data import load_dataset

    rng = np.random.default_rng(0)
    n = 240
    x = rng.integers(0, 255, (n + 1, 8, 8), dtype=np.uint8)
    y = np.arange(n + 1) % 4
    parts = {}
    for name, m in (("D", n), ("D+1", n + 1)):
        if kind == "npz":
            opts = {"path": _write_npz(tmp_path / f"{name}.npz", x[:m], y[:m]), "num_classes": 4}
        else:
            root = tmp_path / name
            for i in range(m):
                (root / f"c{y[i]}").mkdir(parents=True, exist_ok=True)
                Image.fromarray(x[i]).save(root / f"c{y[i]}" / f"{i:04d}.png")
            opts = {"path": str(root)}
        parts[name] = {s: _records(load_dataset(kind, s, **opts)) for s in ("train", "test")}
    new = (int(y[n]), (x[n].astype(np.float32) / 255).reshape(1, 8, 8).tobytes())
    for s in ("train", "test"):
        assert parts["D+1"][s] - {new} == parts["D"][s], s
    assert 5 <= len(parts["D"]["test"]) <= 45  # about a tenth held out (binomial 24 +- 4.6)


def test_every_split_of_private_records_uses_the_one_hash():
    """No split of private records by a permutation, a seeded draw or a position: every module that splits calls
    dpgen.data.holdout.held_out_mask (or holdout_part, built on it)."""
    offenders = []
    for path in (ROOT / "dpgen" / "data").glob("*.py"):
        text = path.read_text()
        if re.search(r"permutation\(|randperm\(", text) and path.name in ("own.py", "holdout.py", "private.py"):
            offenders.append(path.name)
    assert offenders == []
    own = (ROOT / "dpgen" / "data" / "own.py").read_text()
    assert "held_out_mask" in own and "default_rng" not in own


#: reads of a private training or validation split outside dpgen/data/ that are not through PrivateData, allowed
#: with the reason (each a figure of a paper's public benchmark that applies its own local mechanism)
ALLOWED_DIRECT_READS = {
    "dpgen/tables/ldp_common.py": "the entropic-LDP figures privatise each MNIST image once themselves "
                                  "(dpgen.privacy.local), the paper's protocol on a public benchmark",
    "scripts/public_restorer.py": "a post-processing learnt on a public proxy's training split (usps, digits; any "
                                  "other dataset is refused: tests/test_public_restorer.py)",
    "scripts/dpkernel_proxy_snr.py": "reads USPS only, the public proxy, by a fixed name (no dataset option): DP-Kernel's "
                                     "signal and noise measured there to pick its settings",
}


def test_private_records_have_one_owner():
    """Count the direct reads of a private split (load_split / load_dataset of "train" or "validation") outside
    dpgen/data/: every one goes through PrivateData (goal 0; the allowed ones are listed with their reason)."""
    pattern = re.compile(r"load_(?:split|dataset)\([^)]*[\"'](?:train|validation)[\"']")
    found = {}
    for path in [*(ROOT / "dpgen").rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]:
        rel = str(path.relative_to(ROOT))
        if rel.startswith("dpgen/data/"):
            continue
        hits = pattern.findall(path.read_text())
        if hits:
            found[rel] = len(hits)
    assert {k: v for k, v in found.items() if k not in ALLOWED_DIRECT_READS} == {}, found


def test_the_private_data_owner_gives_no_size(tmp_path):
    from dpgen.config import compose_config
    from dpgen.data.private import PrivateData, PrivateSizeError

    cfg = compose_config(["dataset=digits"])
    data = PrivateData(cfg.dataset)
    with pytest.raises(PrivateSizeError, match="use .n, the declared size"):
        len(data)
    assert data.n == 1437 and data.shape == (1, 8, 8) and data.num_classes == 10
    assert "1437" in repr(data)  # the declared n only
    g = torch.Generator().manual_seed(0)
    poisson = type("M", (), {"sampling": "poisson", "sample_rate": 0.0,
                             "sample_batch": lambda self, n, b, gen: torch.zeros(0, dtype=torch.long)})()
    assert data.batch(poisson, 10, g) is None  # an empty Poisson batch
    x, y = data.batch(poisson, 10, g, keep_empty=True)
    assert x.shape == (0, 1, 8, 8) and y.shape == (0,)
    data.refuse_other_size("replace one")  # the declared n is the loaded one: nothing to say
    with pytest.raises(ValueError, match="dataset.n_train=1400 is not the size") as err:
        PrivateData(compose_config(["dataset=digits", "dataset.n_train=1400"]).dataset).refuse_other_size("why")
    assert "1437" not in str(err.value)  # the loaded size is not said


def _run(run_cli, folder, *extra):
    code, out = run_cli("method=dpsinkhorn", *QUICK, *extra, f"hydra.run.dir={folder}")
    assert code == 0, out[-2000:]
    return out


def test_a_run_a_selection_and_a_release_write_only_listed_files_and_a_stale_selection_is_refused(run_cli, tmp_path,
                                                                                                  capsys):
    """Everything the folder holds is in RUN_FILES. A selection made on a dataset.validation run does not outlive
    the weights it was made for: a resume that trains again and a fresh start in the folder (here without a holdout:
    the generator is trained on every record) remove selection.json and the release, and a copy put back is refused
    by `dpgen sample` (2ad157b released it with the selection's epsilon 9.9994 and 'held out ... composes in
    parallel')."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import select_on_validation as sov

    from dpgen.release import release
    from dpgen.tasks.finished_run import ReleaseError
    from dpgen.train.publication import RUN_FILES

    run = tmp_path / "run"
    noise = "method.noise_multiplier=3.0"  # a given noise: the budget leaves room to train on (below)
    _run(run_cli, run, "dataset.validation=0.2", noise)
    assert sov.main([str(run), "--candidates", "0", "8@0.3", "--n-synthetic", "300"]) == 0
    release(run, n=100)
    listed = {f.name for f in RUN_FILES}
    assert {p.name for p in run.iterdir()} <= listed, sorted({p.name for p in run.iterdir()} - listed)
    kept = tmp_path / "selection.json"
    shutil.copy(run / "selection.json", kept)
    # a resume that trains again: the selection and the release described the step-30 weights
    out = _run(run_cli, run, "dataset.validation=0.2", noise, "resume=auto", "trainer.steps=40")
    assert "training continues from step 30: removed" in out and "selection.json" in out
    assert not (run / "selection.json").exists() and not (run / "release").exists()
    # the held-out part stays spent: no second selection on it after the resume
    with pytest.raises(SystemExit):
        sov.main([str(run), "--candidates", "0", "8@0.3", "--n-synthetic", "300"])
    assert "already spent" in capsys.readouterr().err
    shutil.copy(kept, run / "selection.json")
    with pytest.raises(ReleaseError, match="step 30.*step 40"):
        release(run, n=100)
    out = _run(run_cli, run)  # a fresh start in the same folder, every record trained on
    assert not (run / "selection.json").exists() and not (run / "release").exists()
    assert "removed the earlier run's" in out and "selection.json" in out
    shutil.copy(kept, run / "selection.json")
    with pytest.raises(ReleaseError, match="made for other weights"):
        release(run, n=100)


def test_own_data_reports_what_is_public_by_construction(run_cli, tmp_path):
    """Your own data without a test split: the held-out part (its records, size, accuracies) and the shape read from
    the files are listed under not_covered; the counted n is printed only once the run has started."""
    rng = np.random.default_rng(4)
    path = _write_npz(tmp_path / "d.npz", rng.integers(0, 255, (240, 8, 8), dtype=np.uint8), np.arange(240) % 4)
    code, out = run_cli("dataset=npz", f"dataset.path={path}", "dataset.num_classes=4", "dataset.n_train=200",
                        "trainer.steps=10", "task.n_synthetic=200", "task.eval_models=[logreg]", "task.fid=false",
                        "trainer.progress=false")
    assert code == 0, out[-2000:]
    p = json.loads((tmp_path / "run" / "metrics.json").read_text())["privacy"]
    nc = str(p["not_covered"])
    assert "the test split held out of dataset.path" in nc and "its size (downstream n_test)" in nc
    assert "image shape and channels" in nc
    # the release's re-evaluation command finds the own data's test split again (issue 84: it left out dataset.path)
    import shlex

    from dpgen.release import release

    sheet = release(tmp_path / "run", n=200)
    command = shlex.split(sheet["evaluate_again"])
    assert command[:2] == ["python", "run.py"] and f"dataset.path={path}" in command
    code, out = run_cli(*command[2:], "task.eval_models=[logreg]", "trainer.progress=false",
                        f"hydra.run.dir={tmp_path / 'again'}")
    assert code == 0 and (tmp_path / "again" / "metrics.json").exists(), out[-2000:]


def test_own_data_errors_name_no_value_read_from_a_record(run_cli, tmp_path):
    """A transposed x (28, 28, 5000) printed the count as an image side in a raw IndexError and left a folder; a
    label 12 with dataset.num_classes=10 was named as 'num_classes 13'; (5000, 1, 784) trained as 1 x 784 images;
    a run refused after counting printed the count first. Now: the rule and the fix, no dimension, no folder."""
    rng = np.random.default_rng(5)
    for shape in ((28, 28, 517), (517, 1, 784), (517, 784)):
        path = _write_npz(tmp_path / "t.npz", rng.integers(0, 255, shape, dtype=np.uint8), np.arange(shape[0]) % 3)
        folder = tmp_path / f"run_{len(shape)}_{shape[1]}"
        code, out = run_cli("dataset=npz", f"dataset.path={path}", "dataset.num_classes=3", "trainer.steps=5",
                            f"hydra.run.dir={folder}")
        assert code == 2 and "does not read as images" in out and "517" not in out.replace(str(tmp_path), ""), out
        assert "Traceback" not in out and not folder.exists() and "were counted" not in out
    y = np.arange(300) % 10
    y[7] = 12
    path = _write_npz(tmp_path / "l.npz", rng.integers(0, 255, (300, 8, 8), dtype=np.uint8), y)
    code, out = run_cli("dataset=npz", f"dataset.path={path}", "dataset.num_classes=10", "trainer.steps=5",
                        "task.n_synthetic=100", "task.eval_models=[logreg]", "task.fid=false", "trainer.progress=false")
    assert code == 0 and not re.search(r"\b13 classes|num_classes 13|\.\.12\b", out), out[-2000:]  # unsaid
    code, out = run_cli("dataset=npz", f"dataset.path={path}", "trainer.steps=5", f"hydra.run.dir={tmp_path / 'k'}")
    assert code == 2 and "dataset.num_classes=K" in out and not re.search(r"\b13\b", out.replace(str(tmp_path), ""))


def test_an_own_data_checkpoint_of_the_old_split_is_not_resumed(tmp_path):
    """A checkpoint written when your own data's test part was a permutation over n (2ad157b) has no
    dataset.held_out_by: resuming it on the per-record hash split would train on other records, so it is refused
    with the setting named; data with a test split of their own, and dpgen's datasets, carry no such key."""
    from dpgen.config import compose_config
    from dpgen.train.resume import OWN_SPLIT_KEY, check_resume_settings, privacy_settings

    rng = np.random.default_rng(6)
    path = _write_npz(tmp_path / "d.npz", rng.integers(0, 255, (60, 8, 8), dtype=np.uint8), np.arange(60) % 3)
    cfg = compose_config(["dataset=npz", f"dataset.path={path}", "dataset.num_classes=3"])
    now = privacy_settings(cfg, n_private=cfg.dataset.n_train, calibration_steps=10)
    assert now[OWN_SPLIT_KEY[0]] == OWN_SPLIT_KEY[1]
    old = {k: v for k, v in now.items() if k != OWN_SPLIT_KEY[0]}
    with pytest.raises(ValueError, match="dataset.held_out_by: checkpoint None"):
        check_resume_settings(old, now)
    digits = compose_config(["dataset=digits"])
    assert OWN_SPLIT_KEY[0] not in privacy_settings(digits, n_private=1437, calibration_steps=10)
