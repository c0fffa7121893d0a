"""No host synchronisation inside a training step (speed issue): every loop's ``method.step`` runs with
the tensor-to-Python conversions that force a device sync (``item``, ``tolist``, ``float``, ``int``,
``bool``) made to raise. On a CPU these are not syncs, but the same call sites are on a GPU; the loop
reads the released values only at log and checkpoint steps. (numpy views of CPU tensors are allowed:
the CPU sort of DP-SWD uses them, and on CUDA the same function uses ``torch.sort``.)"""

import pytest
import torch

from dpgen.config import compose_config
from dpgen.methods.registry import REGISTRY, methods_for
from dpgen.methods.dpsgd import DPSGD
from dpgen.tasks import TASKS

HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__")


@pytest.fixture
def guarded_steps(monkeypatch):
    """Patch every method class's ``step`` to refuse host reads while it runs; yields the call count."""
    state = {"inside": 0, "steps": 0}
    originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def refusing(name):
        def read(self, *a, **k):
            if state["inside"]:
                raise AssertionError(f"Tensor.{name} (a host sync on a GPU) inside a training step")
            return originals[name](self, *a, **k)
        return read

    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, refusing(name))

    def guard(step):
        def run(self, *a, **k):
            state["inside"] += 1
            try:
                return step(self, *a, **k)
            finally:
                state["inside"] -= 1
                state["steps"] += state["inside"] == 0  # a super().step call counts once
        return run

    owners = {k for cls in (*(c for t in REGISTRY for c in methods_for(t).values()), DPSGD) for k in cls.__mro__ if "step" in vars(k)}
    for cls in owners:  # every class that defines a step, base classes included
        monkeypatch.setattr(cls, "step", guard(vars(cls)["step"]))
    return state


def _run(overrides, tmp_path):
    cfg = compose_config(["trainer.progress=false", "trainer.epochs=null", "trainer.steps=4", "trainer.log_every=2",
                          *overrides])
    return TASKS[cfg.task.name](cfg, output_dir=tmp_path)


GENERATION = [
    ["method=dpswd", "task.eval_models=[]"],
    ["method=swd", "task.eval_models=[]"],
    ["method=dpmerf", "task.eval_models=[]"],
    ["method=dpsinkhorn", "method.clip_mode=batch", "model.generator=mlp", "trainer.batch_size=40",
     "task.eval_models=[]"],
    ["method=dpsinkhorn", "method.clip_mode=per_sample", "model.generator=dct", "trainer.batch_size=40",
     "task.eval_models=[]"],
    ["method=sinkhorn", "model.generator=mlp", "trainer.batch_size=40", "task.eval_models=[]"],
    ["method=dpsinkhorn_param", "method.clip_mode=batch", "model.generator=mlp", "trainer.batch_size=40", "task.eval_models=[]"],
]


@pytest.mark.parametrize("overrides", GENERATION, ids=lambda o: o[0].split("=")[1] + ("_batch" if "method.clip_mode=batch" in o else "")
                         + ("_per_record" if "method.clip_mode=per_sample" in o else ""))
def test_generation_steps_read_nothing_on_the_host(overrides, tmp_path, guarded_steps):
    _run(overrides, tmp_path)
    assert guarded_steps["steps"] >= 3  # the guarded step ran (an empty Poisson batch may skip one)


@pytest.mark.parametrize("method", ["dpswd", "swd", "dann", "dpdann"])
def test_domain_adaptation_steps_read_nothing_on_the_host(method, fake_data_root, tmp_path, guarded_steps):
    _run(["experiment=da_um", f"method={method}", "trainer.batch_size=16", f"dataset.data_root={fake_data_root}",
          "dataset.n_train=100"], tmp_path)
    assert guarded_steps["steps"] == 4


def test_dpsgd_steps_read_nothing_on_the_host(fake_data_root, tmp_path, guarded_steps):
    _run(["task=classification", "method=dpsgd", "method.accountants=[moments]", "dataset=mnist",
          f"dataset.data_root={fake_data_root}", "dataset.n_train=1000", "trainer.batch_size=30"], tmp_path)
    assert guarded_steps["steps"] >= 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA only: torch.cuda.set_sync_debug_mode")
def test_a_dpswd_step_on_cuda_does_not_synchronise():
    """The DP-SWD loss (projections, noise, sort, backward) on the GPU under sync debug mode "error". The
    frame draw (cuSOLVER's orgqr) is made before: whether it synchronises is not checked here."""
    from dpgen.losses.sliced import sliced_wasserstein
    from dpgen.privacy.projection import orthogonal_directions

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(100, 640, device="cuda")
    y = torch.rand(800, 640, device="cuda", requires_grad=True)
    u = orthogonal_directions(640, 640, generator=g, device="cuda")
    sliced_wasserstein(x, y, projections=u, sigma=1.0, generator=g).backward()  # warm-up
    y.grad = None
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        sliced_wasserstein(x, y, projections=u, sigma=1.0, generator=g).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert y.grad is not None
