"""scripts/device/fid_weights_pack.py: what travels to a GPU machine comes back as the state dict it stood for."""

import importlib.util
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device" / "fid_weights_pack.py"


def _module():
    spec = importlib.util.spec_from_file_location("fid_weights_pack", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pack_then_unpack_rounds_convolutions_only(tmp_path):
    g = torch.Generator().manual_seed(0)
    state = {"Conv2d_1a_3x3.conv.weight": torch.randn(32, 3, 3, 3, generator=g) * 0.1,
             "Conv2d_1a_3x3.bn.running_var": torch.rand(32, generator=g) * 1e-6,  # below float16's normal range
             "Conv2d_1a_3x3.bn.num_batches_tracked": torch.tensor(7),
             "Mixed_5b.branch1x1.conv.weight": torch.randn(64, 192, 1, 1, generator=g),
             "fc.weight": torch.randn(10, 4, generator=g), "fc.bias": torch.randn(10, generator=g)}
    torch.save(state, tmp_path / "w.pth")
    mod = _module()
    mod.pack(str(tmp_path / "w.pth"), str(tmp_path / "packed"))
    mod.unpack(str(tmp_path / "packed"), str(tmp_path / "back.pth"))
    back = torch.load(tmp_path / "back.pth", weights_only=True)
    assert list(back) == list(state)
    for k, v in state.items():
        assert back[k].shape == v.shape and back[k].dtype == v.dtype, k
        if k.endswith(".conv.weight"):
            assert torch.equal(back[k], v.half().float()), k  # rounded to float16, nothing else
            assert not torch.equal(back[k], v)
        elif k.startswith("fc."):
            assert torch.count_nonzero(back[k]) == 0  # not on the 2048-d feature path
        else:
            assert torch.equal(back[k], v), k  # batch norm travels in float32
