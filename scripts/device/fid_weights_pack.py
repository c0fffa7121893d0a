#!/usr/bin/env python
"""Carry pytorch-fid's FID Inception weights to a GPU machine inside the device tool's 64 MiB working-tree limit.

The fp32 file is 91 MiB. ``pack`` keeps what the 2048-d pool features need: the 94 convolutions' weights rounded to
float16 (byte-shuffled, xz-compressed: about 35 MiB), the batch-norm tensors in float32, and not the unused
1008-way classifier. ``unpack`` rebuilds a float32 state dict that ``dpgen.eval.fid`` loads as it is (the
classifier zero: it is not on the feature path). The rounding is NOT exact: on this CPU it moved the features of
300 + 300 MNIST images by 0.20 % (relative L2) and their FID from 28.433 to 28.465 (+0.11 %), measured
2026-11-29 (docs/SPEED.md); FIDs from unpacked weights say so.

    python scripts/device/fid_weights_pack.py pack   <fp32 .pth> <folder>     # here
    python scripts/device/fid_weights_pack.py unpack <folder> <out .pth>      # there
"""

from __future__ import annotations

import json
import lzma
import sys
from pathlib import Path

import numpy as np
import torch

HALF = ".conv.weight"


def pack(src: str, folder: str) -> None:
    state = torch.load(src, map_location="cpu", weights_only=True)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    meta, halves, rest = [], [], {}
    for k, v in state.items():
        if k.startswith("fc."):
            meta.append({"key": k, "shape": list(v.shape), "kind": "zero"})
        elif k.endswith(HALF):
            a = v.to(torch.float16).numpy().ravel().view(np.uint8).reshape(-1, 2)
            halves.append(a)
            meta.append({"key": k, "shape": list(v.shape), "kind": "f16", "n": int(v.numel())})
        else:
            rest[k] = v
            meta.append({"key": k, "shape": list(v.shape), "kind": "rest"})
    b = np.concatenate(halves)
    (out / "conv16.bin.xz").write_bytes(lzma.compress(np.concatenate([b[:, 1], b[:, 0]]).tobytes(), preset=9))
    torch.save(rest, out / "rest.pt")
    (out / "meta.json").write_text(json.dumps(meta))


def unpack(folder: str, dst: str) -> None:
    f = Path(folder)
    meta = json.loads((f / "meta.json").read_text())
    rest = torch.load(f / "rest.pt", map_location="cpu", weights_only=True)
    raw = np.frombuffer(lzma.decompress((f / "conv16.bin.xz").read_bytes()), np.uint8)
    n = raw.size // 2
    b = np.empty((n, 2), np.uint8)
    b[:, 1], b[:, 0] = raw[:n], raw[n:]
    h = b.reshape(-1).view(np.float16)
    state, i = {}, 0
    for m in meta:
        if m["kind"] == "f16":
            state[m["key"]] = torch.from_numpy(h[i:i + m["n"]].astype(np.float32)).reshape(m["shape"])
            i += m["n"]
        elif m["kind"] == "zero":
            state[m["key"]] = torch.zeros(m["shape"])
        else:
            state[m["key"]] = rest[m["key"]]
    assert i == n, (i, n)
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, dst)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("pack", "unpack"):
        sys.exit(__doc__)
    (pack if sys.argv[1] == "pack" else unpack)(sys.argv[2], sys.argv[3])
