import logging
import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("MPLBACKEND", "Agg")
# The suite runs as on a bare clone, whatever this machine has installed: FID weights that `make fid-weights` put in
# the torch hub cache (or $DPGEN_FID_WEIGHTS) would turn every preset with task.fid=true into a real Inception pass
# on the CPU. Tests that need weights name them (a file, or weights="random").
os.environ["TORCH_HOME"] = str(Path(tempfile.gettempdir()) / "dpgen-tests-torch-home")  # empty: no cached weights
os.environ.pop("DPGEN_FID_WEIGHTS", None)
import dpgen  # noqa: E402,F401  (before any test imports POT: it keeps POT's JAX backend off, dpgen/__init__.py)


def pytest_configure(config):
    """Under pytest-xdist (``make test`` runs ``-n auto``) each worker gets its share of the cores: torch
    and the BLAS pools of N workers would otherwise start N x cores threads and oversubscribe them.
    OMP_NUM_THREADS carries the share to the subprocesses the tests start (a set value wins)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and not os.environ.get("OMP_NUM_THREADS"):
        from dpgen.utils.threads import cores_available

        n = max(1, cores_available() // workers)
        os.environ["OMP_NUM_THREADS"] = str(n)
        import torch

        torch.set_num_threads(n)


@pytest.fixture
def outputs_tmp(tmp_path, monkeypatch):
    """Send every result file of the code under test to a temporary folder."""
    monkeypatch.setenv("DPGEN_OUTPUTS", str(tmp_path))
    return tmp_path


@pytest.fixture
def run_cli(monkeypatch, capsys, tmp_path):
    """``python run.py <args>`` in this process (Hydra, validation and the ``dpgen: error:`` path, without
    an interpreter start): returns (exit code, stdout + stderr). The run folder is a temporary one."""
    from hydra.core.global_hydra import GlobalHydra

    def run(*args):
        from dpgen.cli import main

        monkeypatch.setenv("DPGEN_OUTPUTS", str(tmp_path))
        # no logging.config.dictConfig in-process: it closes every handler, and some (absl) then close
        # the stream under them, here pytest's capture file
        folder = [] if any(a.startswith("hydra.run.dir=") for a in args) else [f"hydra.run.dir={tmp_path / 'run'}"]
        monkeypatch.setattr(sys, "argv", ["run.py", *args, *folder,
                                          "hydra/job_logging=none", "hydra/hydra_logging=none"])
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        GlobalHydra.instance().clear()
        code = 0
        try:
            main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            GlobalHydra.instance().clear()
            root.handlers[:] = handlers
            root.setLevel(level)
        out = capsys.readouterr()
        return code, out.out + out.err

    return run


#: the training split sizes of ``fake_data_root``: a Poisson (add/remove) method runs only on a set of the
#: declared, public size dataset.n_train, so tests on these files declare it
FAKE_TRAIN_SIZES = {"mnist": 1000, "fashion_mnist": 1000, "mnist10k": 80, "usps": 200, "celeba": 6, "celeba32": 6}


@pytest.fixture(scope="session")
def fake_data_root(tmp_path_factory):
    """A data_root holding tiny files in each real on-disk layout (MNIST, FashionMNIST, USPS, CelebA)."""
    import numpy as np
    from PIL import Image

    from dpgen.data.images import write_idx

    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    for folder in ("MNIST", "FashionMNIST"):
        raw = root / folder / "raw"
        raw.mkdir(parents=True)
        for prefix, n in (("train", 1000), ("t10k", 100)):
            write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
            write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", (np.arange(n) % 10).astype(np.uint8))
    import h5py

    (root / "usps").mkdir()
    with h5py.File(root / "usps" / "usps.h5", "w") as f:  # the real file's layout: 16x16 rows in [0, 1]
        for split, n in (("train", 200), ("test", 50)):
            grp = f.create_group(split)
            grp["data"] = rng.random((n, 256), dtype=np.float32)
            grp["target"] = np.arange(n) % 10
    base = root / "celeba"
    (base / "img_align_celeba").mkdir(parents=True)
    names = [f"{i + 1:06d}.jpg" for i in range(8)]
    for nm in names:
        Image.fromarray(rng.integers(0, 256, (218, 178, 3), dtype=np.uint8)).save(base / "img_align_celeba" / nm)
    with open(base / "list_attr_celeba.txt", "w") as f:
        f.write("8\nMale Smiling \n")
        f.writelines(f"{nm}  {1 if i % 2 else -1:2d}  1\n" for i, nm in enumerate(names))
    with open(base / "list_eval_partition.txt", "w") as f:
        f.writelines(f"{nm} {0 if i < 6 else 2}\n" for i, nm in enumerate(names))
    return root


@pytest.fixture(autouse=True, scope="session")
def _share_the_gpu():
    """On a CUDA machine several pytest workers (and other users) share one GPU: cap what this
    process may allocate (DPGEN_TEST_GPU_FRACTION, default 0.2 of the card, less with more than four
    xdist workers so that together they fit), so a test that needs more fails in place with an
    out-of-memory error naming it instead of starving its neighbours."""
    import torch

    if torch.cuda.is_available():
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        default = min(0.2, 0.9 / workers)
        torch.cuda.set_per_process_memory_fraction(float(os.environ.get("DPGEN_TEST_GPU_FRACTION", default)))
    yield


@pytest.fixture(autouse=True)
def _release_cached_gpu_memory():
    """Give cached CUDA blocks back after each test (the caching allocator keeps them otherwise)."""
    yield
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module of small-tensor tests (idle intra-op threads spin; on a busy 2-core machine the
    per-record backward passes ran 100x slower with 2 threads)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def signal_at(monkeypatch):
    """``signal_at(step, signum, task=GenerationTask)``: send this process ``signum`` when the training loop asks
    ``task`` for the batch of ``step`` (the handler then sees it mid-run, as a cluster's or a user's signal would)."""
    import signal as _signal

    def arm(at_step, signum=_signal.SIGUSR2, task=None):
        if task is None:
            from dpgen.tasks.generation import GenerationTask as task
        original = task.next_batch

        def next_batch(self, method, sampler_gen, step, target_steps):
            if step == at_step:
                os.kill(os.getpid(), signum)
            return original(self, method, sampler_gen, step, target_steps)

        monkeypatch.setattr(task, "next_batch", next_batch)

    return arm
