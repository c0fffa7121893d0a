"""The shared trainer with DP-SWD: ledger, budget, resume after SIGKILL, NaN, row bounds."""

import contextlib
import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dpgen.config import compose_config
from dpgen.methods.dpswd import bound_rows, compared_rows

ROOT = Path(__file__).resolve().parents[2]


def _cfg(*overrides):
    """The validated config of ``python run.py`` with small evaluation settings and ``overrides``."""
    pin = [] if any(o.startswith("method=") for o in overrides) else ["method=dpswd"]  # the default before issue 25
    return compose_config([*pin, "trainer.progress=false", "task.n_synthetic=500", "task.eval_max_epochs=3", *overrides])


def test_rows_are_bounded_as_lemma_2_needs():
    x = torch.rand(300, 1, 8, 8) * 3
    y = torch.randint(0, 10, (300,))
    rows = compared_rows(x, y, 10, 1.0)
    assert rows.shape == (300, 64 + 10)
    for how, max_norm in (("clip", 1.0), ("scale", (3 ** 2 * 64 + 1) ** 0.5)):
        b = bound_rows(rows, how, max_norm)
        assert torch.all(b.norm(dim=1) <= 0.5 + 1e-6), how
    # any two bounded rows differ by at most 1
    b = bound_rows(rows, "clip")
    assert torch.cdist(b, b).max() <= 1 + 1e-5
    small = torch.full((2, 4), 0.01)
    torch.testing.assert_close(bound_rows(small, "clip"), small)  # rows inside the ball untouched


def test_accountant_counts_every_private_batch(tmp_path):
    from dpgen.tasks import run as run_task

    cfg = _cfg("trainer.epochs=null", "trainer.steps=7", "trainer.log_every=1", "task.eval_models=[]")
    m = run_task(cfg, tmp_path)
    assert m["steps"] == 7
    assert m["privacy"]["private_steps"] == 7
    assert 0 < m["privacy"]["epsilon_spent"] <= 10
    # a second, independent accountant on the same ledger agrees
    assert m["privacy"]["epsilon_cross_check"]["wang_wor"] == pytest.approx(m["privacy"]["epsilon_spent"], rel=1e-3)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(l)["step"] for l in lines] == list(range(1, 8))
    assert (tmp_path / "checkpoints" / "last.pt").exists()
    assert "l2 norm <= 1/2" in m["privacy"]["row_bound"]


def test_run_refuses_to_exceed_the_budget(tmp_path):
    from dpgen.tasks import run as run_task

    cfg = _cfg("privacy.epsilon=1.0", "trainer.epochs=null", "trainer.steps=100000", "task.eval_models=[]",
               "method.k=50", "method.noise_multiplier=2.0", "method.center=none")
    m = run_task(cfg, tmp_path)
    assert 0 < m["steps"] < 100000
    assert m["stop_reason"].startswith("privacy budget")
    assert m["privacy"]["epsilon_spent"] <= 1.0
    assert m["steps"] == m["privacy"]["max_steps_in_budget"]
    # a given noise with which not one step fits is refused before anything is trained (issue 83: the run used to
    # train 0 steps and release the untrained generator)
    from dpgen.privacy.validation import PrivacyParameterError

    cfg = _cfg("privacy.epsilon=0.3", "trainer.epochs=null", "trainer.steps=100000", "task.eval_models=[]",
               "method.k=50", "method.noise_multiplier=2.0", "method.center=none")
    with pytest.raises(PrivacyParameterError, match="would train 0 steps"):
        run_task(cfg, tmp_path / "zero")
    assert not (tmp_path / "zero" / "metrics.json").exists()


def _nan_loss_at_step(monkeypatch, k: int) -> None:
    """DP-SWD's loss turns NaN at its k-th call (a released value, so the loop's finite test sees it)."""
    from dpgen.methods.dpswd import DPSWD

    real_loss = DPSWD.loss
    calls = {"n": 0}

    def flaky(self, *a):
        calls["n"] += 1
        out = real_loss(self, *a)
        return out * float("nan") if calls["n"] == k else out

    monkeypatch.setattr(DPSWD, "loss", flaky)


def test_nan_loss_stops_with_step_and_keeps_checkpoint(tmp_path, monkeypatch):
    from dpgen.tasks import run as run_task
    from dpgen.train import TrainingError

    _nan_loss_at_step(monkeypatch, 4)
    cfg = _cfg("trainer.epochs=null", "trainer.steps=10", "trainer.checkpoint_every=1", "task.eval_models=[]")
    with pytest.raises(TrainingError, match="step 4"):
        run_task(cfg, tmp_path)
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert state["step"] == 3
    # the failed step's mechanism ran: the ledger on disk counts it (a resume continues from it)
    ledger = json.loads((tmp_path / "checkpoints" / "ledger.json").read_text())
    assert ledger["steps"] == 5
    hist = ledger["ledger"]["accountant"]["history"]
    assert sum(h["num_steps"] for h in hist if h["sample_rate"] < 1) == 4
    assert sum(h["num_steps"] for h in hist if h["sample_rate"] == 1) == 1  # the DP mean, released once


def test_unknown_generator_and_oversized_batch_are_named():
    with pytest.raises(Exception, match="model.generator"):
        _cfg("model.generator=transformer")
    from dpgen.tasks import run as run_task

    cfg = _cfg("trainer.batch_size=5000", "task.eval_models=[]")
    with pytest.raises(ValueError, match="batch_size=5000"):
        run_task(cfg, "/tmp/dpgen-never-written")


def test_merf_conv_upsample_modes():
    """model.upsample: nearest repeats each pixel of the 7 x 7 map, bilinear (DP-MERF's generator) interpolates
    with aligned corners; both give 28 x 28 images in [0, 1] from the same parameters, and another generator
    refuses the setting by name."""
    import torch
    import torch.nn.functional as F
    from omegaconf import OmegaConf

    from dpgen.config import ModelConfig
    from dpgen.models import generator_from_config

    cfgs = {m: OmegaConf.structured(ModelConfig(generator="auto", code_dim=10, dct_size=10, upsample=m))
            for m in ("nearest", "bilinear")}
    near, bil = (generator_from_config(cfgs[m], (1, 28, 28), 10) for m in ("nearest", "bilinear"))
    bil.load_state_dict(near.state_dict())
    x = torch.arange(4.0).view(1, 1, 2, 2)
    assert torch.equal(near._up(x)[0, 0, :2, :2], torch.zeros(2, 2))  # nearest: one value repeated
    torch.testing.assert_close(bil._up(x)[0, 0, 0], torch.tensor([0.0, 1 / 3, 2 / 3, 1.0]))  # corners aligned
    assert torch.equal(bil._up(x), F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True))
    near.eval(), bil.eval()
    z, y = torch.randn(6, 10), torch.arange(6) % 10
    a, b = near(z, y), bil(z, y)
    assert a.shape == b.shape == (6, 1, 28, 28) and 0 <= float(b.min()) and float(b.max()) <= 1
    assert not torch.allclose(a, b)
    with pytest.raises(ValueError, match="model.upsample=bilinear applies to the merf_conv"):
        generator_from_config(OmegaConf.create({**cfgs["bilinear"], "generator": "mlp"}), (1, 28, 28), 10)
    with pytest.raises(Exception, match="model.upsample"):
        _cfg("model.upsample=cubic")


def _run(out, *args, **kw):
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), f"hydra.run.dir={out}", "trainer.progress=false",
         "task.eval_models=[]", *([] if any(a.startswith("method=") for a in args) else ["method=dpswd"]), *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def test_sigkill_then_resume_gives_the_uninterrupted_ledger(tmp_path, run_cli):
    steps = 300
    args = ["trainer.epochs=null", f"trainer.steps={steps}", "trainer.checkpoint_every=50", "trainer.log_every=10",
            "method.k=100", "method.fake_copies=1", "task.eval_models=[]"]  # the default DP mean is kept
    # the uninterrupted run's ledger, from public numbers: task=accounting builds the same method for the
    # same steps (the DP mean included) and charges them, without training
    code, text = run_cli("method=dpswd", "task=accounting", *args[:-1])
    assert code == 0, text
    ref = json.loads((tmp_path / "run" / "accounting.json").read_text())
    assert ref["steps"] == steps

    # the same command twice, as a job requeued after its time limit runs it (resume=auto: continue the
    # folder's checkpoint when there is one; the killed process's lock is stale and is taken over)
    run_dir = tmp_path / "killed"
    args = [*args, "resume=auto"]
    p = _run(run_dir, *args)
    ckpt = run_dir / "checkpoints" / "last.pt"
    deadline = time.time() + 300
    while time.time() < deadline:
        if ckpt.exists():
            lines = (run_dir / "metrics.jsonl").read_text().splitlines() if (run_dir / "metrics.jsonl").exists() else []
            if lines and json.loads(lines[-1])["step"] >= 125:
                break
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not (run_dir / "metrics.json").exists(), "the run finished before it could be killed"
    state = torch.load(ckpt, weights_only=False)  # never a torn checkpoint
    assert 0 < state["step"] < steps
    # every published log line was accounted before it went out: the ledger on disk covers them
    published = max(json.loads(l)["step"] for l in (run_dir / "metrics.jsonl").read_text().splitlines()
                    if l.strip().endswith("}"))
    on_disk = json.loads((run_dir / "checkpoints" / "ledger.json").read_text())["steps"] - 1  # minus the DP mean
    assert on_disk >= published >= state["step"]

    r = _run(run_dir, *args)
    log = r.communicate(timeout=600)[0]
    assert r.returncode == 0, log
    assert "resumed from" in log
    m = json.loads((run_dir / "metrics.json").read_text())
    # the same ledger as the uninterrupted run: the steps published after the last checkpoint stay
    # charged, so the resumed run takes that many fewer training steps instead of spending more
    assert m["privacy"]["private_steps"] == steps
    assert m["privacy"]["epsilon_spent"] == pytest.approx(ref["epsilon_reached"], rel=1e-9)
    assert m["steps"] == steps - (on_disk - state["step"])
    steps = [json.loads(l)["step"] for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == m["steps"]  # no duplicated or discarded-step lines


def test_two_runs_started_together_write_two_folders(tmp_path):
    """Two runs with the same folder (the default outputs/<date>/<H-M-S> of runs started in the same
    second): one claims it, the other moves to <folder>-1; both complete, neither loses results."""
    args = ["trainer.epochs=null", "trainer.steps=100", "method.k=100", "method.fake_copies=1"]
    runs = [_run(tmp_path / "same", *args) for _ in range(2)]
    logs = [r.communicate(timeout=600)[0] for r in runs]
    assert [r.returncode for r in runs] == [0, 0], logs
    assert any("in use by another live run" in log for log in logs)
    done = sorted(p.parent.name for p in tmp_path.glob("*/metrics.json"))
    assert done == ["same", "same-1"]
    for name in done:
        m = json.loads((tmp_path / name / "metrics.json").read_text())
        steps = [json.loads(l)["step"] for l in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        assert m["steps"] == 100 and steps == sorted(set(steps))  # one run's lines only
        assert not (tmp_path / name / ".lock").exists()  # given back at exit


@contextlib.contextmanager
def _held_by_another_process(folder):
    """While open, a live process other than this one holds ``folder``'s run lock (killed at exit)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; from dpgen.utils.run_dir import claim_run_dir; "
                          f"claim_run_dir({str(folder)!r}, False); print('held', flush=True); time.sleep(60)"],
                         cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        yield
    finally:
        p.kill()
        p.wait()


def test_resume_refuses_a_folder_a_live_run_holds(tmp_path):
    from dpgen.utils.run_dir import RunDirBusy, claim_run_dir

    with _held_by_another_process(tmp_path):
        with pytest.raises(RunDirBusy, match="held by another live run"):
            claim_run_dir(tmp_path, "auto")
        assert claim_run_dir(tmp_path, False) == tmp_path.with_name(tmp_path.name + "-1")
    assert claim_run_dir(tmp_path, True) == tmp_path  # the holder died: its lock is stale


def test_a_run_started_without_the_cli_takes_the_folder_lock_too(tmp_path):
    """Table drivers and the Python API train through ``dpgen.tasks.run``, not the CLI: a second process
    resuming a folder that a live run holds (two shells running the same table cell) is refused before it
    reads or writes anything there, and a finished in-process run gives the lock back."""
    from dpgen.tasks import run as run_config
    from dpgen.utils.run_dir import RunDirBusy

    cfg = _cfg("trainer.epochs=null", "trainer.steps=20", "method.k=50", "method.fake_copies=1", "resume=auto")
    busy = tmp_path / "busy"
    with _held_by_another_process(busy):
        with pytest.raises(RunDirBusy, match="held by another live run"):
            run_config(cfg, busy)
        assert sorted(x.name for x in busy.iterdir()) == [".lock"]  # no config, ledger or checkpoint written
    m = run_config(cfg, busy)  # the holder died: its lock is stale, the run takes it
    assert m["steps"] == 20 and not (busy / ".lock").exists()
    with pytest.raises(ValueError, match="holds no checkpoint"):  # a mistyped folder: nothing created
        run_config(dataclasses.replace(cfg, resume=True), tmp_path / "typo")
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("args,named", [
    (["dataset=mnist"], "MNIST/raw/train-images-idx3-ubyte"),
    (["trainer.batch_size=5000"], "trainer.batch_size=5000"),
    (["method=dpswd", "method.k=0"], "method.k=0"),
])
def test_cli_bad_input_gives_a_clear_error(run_cli, monkeypatch, tmp_path, args, named):
    monkeypatch.setenv("DPGEN_DATA_ROOT", str(tmp_path / "nodata"))
    monkeypatch.setenv("DPGEN_SHARED", str(tmp_path / "noshared"))
    code, text = run_cli(*args)
    assert code == 2
    assert "dpgen: error:" in text and named in text


def test_unbounded_rows_are_reported_as_not_private(tmp_path):
    from dpgen.tasks import run as run_task

    with pytest.warns(UserWarning, match="does NOT hold"):
        cfg = _cfg("method.row_bound=none", "trainer.epochs=null", "trainer.steps=2", "task.eval_models=[]")
    m = run_task(cfg, tmp_path)
    assert m["privacy"]["guarantee_holds"] is False
    assert "does NOT hold" in m["privacy"]["row_bound"]


def test_compression_to_compare_dim_is_a_contraction():
    from dpgen.methods.dpswd import OrthoCompression

    P = OrthoCompression(74, 30, seed=3)
    M = P(torch.eye(74))  # (74, 30): the map's matrix, transposed
    assert torch.linalg.matrix_norm(M, ord=2) <= 1 + 1e-5
    x = bound_rows(torch.randn(200, 74) * 5, "clip")
    y = P(x)
    assert y.shape == (200, 30) and torch.all(y.norm(dim=1) <= 0.5 + 1e-6)
    assert torch.cdist(y, y).max() <= 1 + 1e-5
    torch.testing.assert_close(P(x), OrthoCompression(74, 30, seed=3)(x))  # fixed, data-independent
    big = OrthoCompression(12288, 8192)
    z = torch.randn(3, 12288)
    assert torch.all(big(z).norm(dim=1) <= z.norm(dim=1) + 1e-4)


def test_compare_dim_sets_the_accounted_dimension(tmp_path):
    from dpgen.tasks import run as run_task

    cfg = _cfg("method.compare_dim=32", "trainer.epochs=null", "trainer.steps=2", "task.eval_models=[]")
    m = run_task(cfg, tmp_path)
    assert m["privacy"]["compare_dim"] == 32


def test_mechanism_randomness_is_secret_by_default(tmp_path):
    """Subsampling and noise must not be predictable from the public seed (nor kept in checkpoints)."""
    from dpgen.tasks import run as run_task

    args = ("trainer.epochs=null", "trainer.steps=3", "task.eval_models=[]", "method.k=20")
    a = run_task(_cfg(*args), tmp_path / "a")
    b = run_task(_cfg(*args), tmp_path / "b")
    assert a["final_loss"] != b["final_loss"]  # same seed, different batches and noise
    assert "mechanism_rng" not in torch.load(tmp_path / "a" / "checkpoints" / "last.pt", weights_only=False)
    c = run_task(_cfg(*args, "privacy.secret_randomness=false"), tmp_path / "c")
    d = run_task(_cfg(*args, "privacy.secret_randomness=false"), tmp_path / "d")
    assert c["final_loss"] == d["final_loss"]  # reproducible on request


def test_a_seeded_run_moved_between_devices_resumes_on_a_fresh_noise_stream():
    """A seeded run (privacy.secret_randomness=false) trained on a GPU and resumed on a CPU: the checkpoint's
    noise generator state is a CUDA Philox state (16 bytes: seed, offset), which a CPU generator refuses
    ("Expected a CPUGeneratorImplState of size 5056"). The stream continues from a seed derived from the
    run's seed and step: reproducible, and not the first steps' noise again."""
    from dpgen.train.run_folder import restore_noise_stream

    same = torch.Generator().manual_seed(7)
    saved = same.get_state()
    expected = torch.randn(5, generator=same)
    g = torch.Generator()
    assert restore_noise_stream(g, saved, seed=0, step=10) is True
    assert torch.equal(torch.randn(5, generator=g), expected)  # same device: the stream goes on exactly

    cuda_like = torch.zeros(16, dtype=torch.uint8)  # what torch.Generator("cuda").get_state() holds
    a, b = torch.Generator(), torch.Generator()
    assert restore_noise_stream(a, cuda_like, seed=0, step=10) is False
    assert restore_noise_stream(b, cuda_like, seed=0, step=10) is False
    xa = torch.randn(1000, generator=a)
    assert torch.equal(xa, torch.randn(1000, generator=b))  # reproducible
    c = torch.Generator()
    restore_noise_stream(c, cuda_like, seed=0, step=11)
    assert not torch.equal(xa, torch.randn(1000, generator=c))  # another step, another stream
    first = torch.randn(1000, generator=torch.Generator().manual_seed(0 + 2_000_003))  # the run's own start
    assert not torch.equal(xa, first)


def test_fid_missing_weights_is_reported_not_fatal(tmp_path, monkeypatch, fake_data_root):
    from dpgen.tasks import run as run_task

    monkeypatch.setenv("DPGEN_FID_WEIGHTS", str(tmp_path / "no-weights"))
    monkeypatch.setattr("torch.hub.get_dir", lambda: str(tmp_path / "hub"))
    cfg = _cfg("dataset=mnist", f"dataset.data_root={fake_data_root}", "dataset.n_train=1000", "trainer.epochs=null",
               "trainer.steps=2", "task.eval_models=[]", "task.fid=true", "task.fid_samples=20")
    m = run_task(cfg, tmp_path / "run")
    assert m["fid"] is None and "pt_inception" in m["fid_missing"]


@pytest.mark.parametrize("logger", ["csv", "tensorboard", "wandb"])
def test_generation_loop_takes_every_logger_and_ema(tmp_path, logger, monkeypatch):
    """The one loop gives every task the loggers and the EMA (classification and DA: their test files)."""
    from dpgen.tasks import run as run_task

    pytest.importorskip(logger)
    monkeypatch.setenv("WANDB_MODE", "offline")
    m = run_task(_cfg("trainer.epochs=null", "trainer.steps=4", "trainer.log_every=2", "task.eval_models=[]",
                              f"logger={logger}", "trainer.ema=0.5"), tmp_path)
    assert m["ema"] == 0.5 and m["steps"] == 4
    ck = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    k = next(k for k, v in ck["ema"].items() if k.startswith("generator.") and v.is_floating_point())
    assert not torch.equal(ck["ema"][k], ck["models"][k])  # the average lags the iterate
    if logger == "csv":
        rows = (tmp_path / "metrics.csv").read_text().splitlines()
        assert rows[0].startswith("step,loss") and len(rows) == 3  # header + steps 2, 4
    elif logger == "tensorboard":
        assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    else:
        assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_a_nan_between_log_lines_is_found_before_anything_is_published(tmp_path, monkeypatch):
    """The finite test stays on the device (no host sync per step) and is read before each log line and
    checkpoint: a NaN at step 4 with log and checkpoint every 5 steps stops the run at step 5, names step 4,
    keeps the step-0 checkpoint (nothing computed from the NaN went out) and charges the 5 steps that ran."""
    from dpgen.tasks import run as run_task
    from dpgen.train import TrainingError

    _nan_loss_at_step(monkeypatch, 4)
    cfg = _cfg("trainer.epochs=null", "trainer.steps=10", "trainer.checkpoint_every=5", "trainer.log_every=5",
               "task.eval_models=[]")
    with pytest.raises(TrainingError, match="not finite at step 4: training stopped at step 5"):
        run_task(cfg, tmp_path)
    assert torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)["step"] == 0
    assert not (tmp_path / "metrics.jsonl").exists() or not (tmp_path / "metrics.jsonl").read_text().strip()
    ledger = json.loads((tmp_path / "checkpoints" / "ledger.json").read_text())
    assert ledger["steps"] == 5 + 1  # 5 steps and the DP mean


def test_a_requeued_slurm_job_takes_over_its_earlier_attempts_lock_from_another_node(tmp_path, monkeypatch):
    """A hard-killed job requeued to another node finds the lock its first attempt left (another host: its
    process cannot be checked). The same job's earlier attempt is stale; another job's lock, or one of the
    same attempt, is still refused."""
    import json

    from dpgen.utils.run_dir import LOCK_NAME, RunDirBusy, claim_run_dir

    def plant(folder, **holder):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "node-a", **holder}))

    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    plant(tmp_path / "a", slurm_job="77_3", slurm_attempt=0)
    assert claim_run_dir(tmp_path / "a", "auto") == tmp_path / "a"
    held = json.loads((tmp_path / "a" / LOCK_NAME).read_text())
    assert held["slurm_job"] == "77_3" and held["slurm_attempt"] == 1
    plant(tmp_path / "b", slurm_job="77_4", slurm_attempt=0)  # another task of the array: alive
    with pytest.raises(RunDirBusy, match="held by another live run"):
        claim_run_dir(tmp_path / "b", "auto")
    plant(tmp_path / "c", slurm_job="77_3", slurm_attempt=1)  # the same attempt elsewhere: alive
    with pytest.raises(RunDirBusy):
        claim_run_dir(tmp_path / "c", "auto")
    plant(tmp_path / "d")  # no SLURM record, another host: alive, as before
    with pytest.raises(RunDirBusy):
        claim_run_dir(tmp_path / "d", True)
