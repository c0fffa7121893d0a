"""trainer.threads: a dpgen process uses its share of the cores (dpgen/utils/threads.py)."""

import os
import subprocess
import sys

import pytest
import torch

from dpgen.config import ConfigError, compose_config
from dpgen.utils import threads as T


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(T, "cores_available", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_auto_shares_the_cores_with_the_other_live_runs(tmp_path, two_cores):
    other = _sleeper()
    torch.set_num_threads(3)
    before = torch.get_num_threads()
    try:
        with T.ThreadShare("auto", folder=tmp_path) as share:
            assert share.share() == 2 and torch.get_num_threads() == 2  # alone
            (tmp_path / str(other.pid)).write_text("auto")  # a second auto run starts
            share._last = -1e9
            share.rebalance()
            assert torch.get_num_threads() == 1
            (tmp_path / str(other.pid)).write_text("2")  # a run holding both cores (OMP_NUM_THREADS=2)
            assert share.share() == 1
            other.kill()
            other.wait()
            share._last = -1e9
            share.rebalance()  # the other run ended: its mark is removed, the cores come back
            assert torch.get_num_threads() == 2 and not (tmp_path / str(other.pid)).exists()
        assert not (tmp_path / str(os.getpid())).exists()  # this run's mark is gone at its end
        assert torch.get_num_threads() == before  # and the caller's thread count is back
    finally:
        other.kill()


def test_the_downstream_classifiers_give_cores_back_between_epochs(tmp_path, two_cores):
    """A process that entered its share alone (2 threads) and then evaluates for minutes re-reads the share
    between the classifiers' epochs (rebalance_active), so a second run started meanwhile gets its core."""
    from dpgen.eval.downstream import MLP, train_torch_classifier

    other = _sleeper()
    try:
        T.rebalance_active()  # no open share: nothing to do
        with T.ThreadShare("auto", folder=tmp_path, every_s=0.0) as share:
            assert torch.get_num_threads() == 2 and T._ACTIVE[-1] is share
            (tmp_path / str(other.pid)).write_text("auto")  # a second run starts during the evaluation
            x, y = torch.rand(64, 784), torch.randint(0, 10, (64,))
            train_torch_classifier(MLP(784, 10), x, y, None, None, max_epochs=1)
            assert torch.get_num_threads() == 1
        assert not T._ACTIVE
    finally:
        other.kill()


def test_a_fixed_count_and_omp_num_threads_win_over_auto(tmp_path, two_cores, monkeypatch):
    with T.ThreadShare("1", folder=tmp_path) as share:
        assert torch.get_num_threads() == 1 and share.share() == 1
        assert (tmp_path / str(os.getpid())).read_text() == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    with T.ThreadShare("auto", folder=tmp_path) as share:
        assert not share.managed and "OMP_NUM_THREADS" in share.describe()


@pytest.mark.parametrize("bad", ["0", "-1", "many"])
def test_bad_thread_counts_are_refused_by_name(bad):
    with pytest.raises(ConfigError, match="trainer.threads"):
        compose_config([f"trainer.threads={bad}"])
    with pytest.raises(ValueError, match="trainer.threads"):
        T.ThreadShare(bad)
