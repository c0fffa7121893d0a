"""SLURM's time-limit warning (SIGUSR2 through submitit): the loop finishes its step, writes a checkpoint with
the ledger, then hands over to the handler that was there (submitit's requeue); the resumed run ends with the
epsilon of an uninterrupted one and spends no step twice."""

import json
import signal

import pytest

from dpgen.config import compose_config
from dpgen.tasks import run as run_task
from dpgen.train.signals import EXIT_REQUEUE

ARGS = ["trainer.progress=false", "trainer.epochs=null", "trainer.steps=12", "task.eval_models=[]",
        "trainer.checkpoint_every=1000", "trainer.log_every=1000"]


def test_usr2_checkpoints_at_the_step_boundary_then_calls_submitits_handler(tmp_path, monkeypatch, signal_at):
    ref = run_task(compose_config(ARGS), tmp_path / "ref")
    calls = []

    class Requeued(Exception):
        pass

    def submitit_handler(signum, frame):  # what submitit installs: requeue, then exit
        calls.append(signum)
        raise Requeued

    previous = signal.signal(signal.SIGUSR2, submitit_handler)
    try:
        signal_at(5)
        with pytest.raises(Requeued):
            run_task(compose_config(ARGS), tmp_path / "run")
        assert calls == [signal.SIGUSR2]
        assert signal.getsignal(signal.SIGUSR2) is submitit_handler  # restored
    finally:
        signal.signal(signal.SIGUSR2, previous)
    ledger = json.loads((tmp_path / "run" / "checkpoints" / "ledger.json").read_text())
    assert ledger["private_steps"] == 6  # the step the signal came in finished, then the checkpoint
    monkeypatch.undo()
    m = run_task(compose_config([*ARGS, "resume=auto"]), tmp_path / "run")
    assert m["steps"] == 12 and m["privacy"]["private_steps"] == 12  # no step spent twice
    assert m["privacy"]["epsilon_spent"] == ref["privacy"]["epsilon_spent"]


@pytest.mark.parametrize("signum", [signal.SIGUSR2, signal.SIGTERM], ids=["USR2", "TERM"])
def test_a_signal_without_a_cluster_handler_exits_75_after_the_checkpoint(tmp_path, monkeypatch, signum, signal_at):
    """Outside submitit (and for SIGTERM, which SLURM sends KillWait seconds before killing a requeued or
    cancelled job): checkpoint at the end of the step, exit 75."""
    previous = signal.signal(signum, signal.SIG_DFL)
    try:
        signal_at(3, signum)
        with pytest.raises(SystemExit) as e:
            run_task(compose_config(ARGS), tmp_path / "run")
        assert e.value.code == EXIT_REQUEUE
        assert signal.getsignal(signum) == signal.SIG_DFL  # restored
    finally:
        signal.signal(signum, previous)
    assert json.loads((tmp_path / "run" / "checkpoints" / "ledger.json").read_text())["private_steps"] == 4


def test_resume_true_refuses_a_folder_without_a_checkpoint_and_auto_starts_there(tmp_path, run_cli):
    """resume=true on a mistyped folder once started a fresh run there (a fresh budget spent by mistake)."""
    with pytest.raises(ValueError, match=r"resume=true, but .*holds no checkpoint.*resume=auto"):
        run_task(compose_config([*ARGS, "resume=true"]), tmp_path / "typo")
    assert not (tmp_path / "typo").exists()  # nothing written
    code, text = run_cli(*ARGS, "resume=true")
    assert code == 2 and "dpgen: error: resume=true, but" in text
    m = run_task(compose_config([*ARGS, "resume=auto"]), tmp_path / "auto")
    assert m["steps"] == 12
