"""dpgen/utils/allocator.py: CPU runs keep freed memory in the heap instead of faulting it in every step."""

import os
import subprocess
import sys

import pytest

from dpgen.utils import allocator as A

glibc = pytest.mark.skipif(A._libc() is None, reason="glibc's mallopt is needed (Linux)")

CHILD = """
import resource, torch
from torch import nn
from dpgen.utils.allocator import keep_freed_memory
kept = keep_freed_memory()
torch.set_num_threads(1)
torch.manual_seed(0)
g = nn.Sequential(nn.Linear(22, 128 * 7 * 7), nn.Unflatten(1, (128, 7, 7)), nn.ReLU(),
                  nn.ConvTranspose2d(128, 64, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(64, 1, 4, 2, 1))
def step():  # a small DCGAN-like generator's forward + backward at batch 100
    g(torch.randn(100, 22)).square().mean().backward()
step()
step()
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0)
"""


def _child(**env):
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "DPGEN_MALLOC_KEEP_MB"}
    out = subprocess.run([sys.executable, "-c", CHILD], env={**base, **env}, capture_output=True, text=True,
                         check=True).stdout.split()
    return int(out[0]), int(out[1])


@glibc
def test_kept_memory_is_not_faulted_in_again():
    kept, faults = _child()
    off, faults_off = _child(DPGEN_MALLOC_KEEP_MB="0")
    assert (kept, off) == (A.KEEP_MB, 0)
    # glibc as it comes returns the step's buffers to the kernel and faults their pages in again every step
    assert faults_off > 5 * 1000
    assert faults < faults_off / 5


@glibc
def test_the_users_own_malloc_tuning_is_left_alone():
    assert _child(MALLOC_ARENA_MAX="2")[0] == 0
    assert _child(GLIBC_TUNABLES="glibc.malloc.trim_threshold=0")[0] == 0


def test_a_bad_setting_names_the_value_and_the_fix(monkeypatch):
    monkeypatch.setattr(A, "_applied", None)
    monkeypatch.setenv("DPGEN_MALLOC_KEEP_MB", "lots")
    with pytest.raises(ValueError, match=r"DPGEN_MALLOC_KEEP_MB='lots'.*or 0"):
        A.keep_freed_memory()
