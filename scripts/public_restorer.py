"""A restorer learnt on PUBLIC images only, applied to a finished run's released samples (post-processing: no
privacy cost; the result is "with public data", and says so).

A `dct` generator draws images in the band of its k x k lowest DCT frequencies; `model.sharpen` is a fixed
contrast curve on them. This script learns the map band -> image on a public data set instead (a small residual
CNN, input ``lowpass(x, k)``, target ``x``), then draws a run's samples without its curve and passes them through it:

    python scripts/public_restorer.py train --dataset usps --band 8 --out outputs/restorer/usps8.pt
    python scripts/public_restorer.py train --dataset usps --band 10 --size 28 --inner 20 --out <...>/usps_as_mnist.pt
    python scripts/public_restorer.py apply <run folder> outputs/restorer/usps8.pt --n 7291 --out <dir>/synthetic.npz
    dpgen sample <run folder> restorer=<...>/usps_as_mnist.pt   # a release with its datasheet (dpgen.models.restorer)
    python scripts/public_restorer.py fid <dir>/synthetic.npz --dataset usps [--option resize=20 --option pad=4]
    python run.py task=evaluate task.synthetic=<dir>/synthetic.npz dataset=<the run's>   # LogReg / MLP / CNN

``--labelled`` gives the restorer each sample's label as one-hot planes (learnt from the public set's labels; a run's
samples carry the labels they were drawn for). ``--blur s`` trains on inputs blurred by a Gaussian of std s pixels before the band (a generator's samples are
smoother than band-limited real images: FID is not L2, docs/FIDELITY.md). Which variant is used is chosen on the
public proxy, never on the sensitive data's test split. Training reads only the public set's training split.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's dpgen, installed or not

from dpgen.models.restorer import PUBLIC_PROXIES as PUBLIC  # noqa: E402  (after the path line)
from dpgen.models.restorer import NO_CURVE, Restorer, read_restorer  # noqa: E402
from dpgen.models.restorer import blur as _blur  # noqa: E402


def train(args) -> None:
    from dpgen.config import compose_config
    from dpgen.data import as_tensors, load_split
    from dpgen.utils.dct import lowpass

    if args.dataset not in PUBLIC:
        raise SystemExit(f"--dataset {args.dataset}: a restorer learns on a public proxy only ({', '.join(PUBLIC)}); "
                         "learning it on sensitive records would publish them through its weights")
    torch.manual_seed(args.seed)
    cfg = compose_config([f"dataset={args.dataset}"])
    x, labels = as_tensors(load_split(cfg.dataset, "train"))  # the PUBLIC set's training split only
    x = x.float()
    num_classes = int(cfg.dataset.num_classes) if getattr(args, "labelled", False) else 0
    if args.size:  # framed like the sensitive set: resized to inner x inner, padded to size x size
        inner = args.inner or args.size
        x = nn.functional.interpolate(x, size=(inner, inner), mode="bilinear", antialias=True, align_corners=False)
        p = (args.size - inner) // 2
        x = nn.functional.pad(x, (p, args.size - inner - p, p, args.size - inner - p)).clamp(0, 1)
    net = Restorer(args.width, args.depth, num_classes)
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    t0, n = time.time(), len(x)
    for epoch in range(args.epochs):
        perm = torch.randperm(n)
        total = 0.0
        for i in range(0, n, args.batch):
            idx = perm[i:i + args.batch]
            xb, yb = x[idx], (labels[idx] if num_classes else None)
            inp = lowpass(_blur(xb, args.blur * float(torch.rand(())) if args.blur else 0.0), args.band)
            loss = nn.functional.binary_cross_entropy(net(inp, yb), xb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(xb)
        print(f"epoch {epoch + 1}/{args.epochs}: BCE {total / n:.4f} ({time.time() - t0:.0f} s)", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state": net.state_dict(), "width": args.width, "depth": args.depth, "band": args.band,
                "public_dataset": args.dataset, "blur": args.blur, "size": args.size, "inner": args.inner,
                "num_classes": num_classes}, out)
    print(f"wrote {out}")


def apply(args) -> None:
    from dpgen.tasks.finished_run import load_generator

    net, saved = read_restorer(args.restorer)  # unchecked: a proxy run may be the restorer's own public set
    cfg, _, gen, shape, k, privacy = load_generator(Path(args.run), sharpen=NO_CURVE)  # the band, no curve
    g = torch.Generator().manual_seed(args.seed)
    xs, ys = [], []
    with torch.no_grad():
        for i in range(0, args.n, 1000):
            m = min(1000, args.n - i)
            y = torch.randint(0, k, (m,), generator=g) if k else None
            x, y = gen.sample(m, y=y, device="cpu", generator=g)
            xs.append(net(x.float(), y).clamp(0, 1) if not args.no_restore else x.float())
            ys.append(y if y is not None else torch.zeros(m, dtype=torch.long))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, x=torch.cat(xs).numpy().astype(np.float32), y=torch.cat(ys).numpy().astype(np.int64))
    print(f"wrote {out}: {args.n} samples of {args.run} (epsilon {privacy.get('epsilon_spent')}) through "
          f"{'no restorer' if args.no_restore else args.restorer} (public data: {saved['public_dataset']})")


def fid(args) -> None:
    """FID, KID and precision / recall of the first ``--n`` samples of a .npz against a PUBLIC data set's whole test
    split (the proxy's: never the sensitive data's, whose numbers are measured once, after the choice)."""
    import json

    from dpgen.config import compose_config
    from dpgen.data import as_tensors, load_split
    from dpgen.tasks.generation import fid_of_images

    cfg = compose_config([f"dataset={args.dataset}"] + [f"+dataset.options.{o}" for o in args.option])
    x_test = as_tensors(load_split(cfg.dataset, "test"))[0]
    fake = torch.tensor(np.load(args.npz)["x"][: args.n])
    out = fid_of_images(fake, f"{cfg.dataset.name}_test", x_test, "cpu", False, None, tuple(fake.shape[1:]))
    keep = {k: out.get(k) for k in ("fid", "kid", "kid_se", "precision", "recall", "density", "coverage")}
    print(json.dumps({"npz": args.npz, "n": len(fake), "n_test": len(x_test), **keep}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="learn band -> image on a public data set")
    t.add_argument("--dataset", default="usps")
    t.add_argument("--band", type=int, required=True)
    t.add_argument("--blur", type=float, default=0.0)
    t.add_argument("--size", type=int, default=0, help="frame the public images as size x size (0: as they are)")
    t.add_argument("--inner", type=int, default=0, help="the digit's box inside that frame (MNIST: 20 of 28)")
    t.add_argument("--epochs", type=int, default=15)
    t.add_argument("--batch", type=int, default=128)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--width", type=int, default=48)
    t.add_argument("--depth", type=int, default=6)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--labelled", action="store_true",
                   help="give the restorer the sample's label (one-hot planes), learnt from the public set's labels; "
                        "it then restores toward the class a sample was drawn for")
    t.add_argument("--out", required=True)
    a = sub.add_parser("apply", help="draw a run's samples without its curve and restore them")
    a.add_argument("run")
    a.add_argument("restorer")
    a.add_argument("--n", type=int, default=7291)
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("--no-restore", action="store_true", help="write the band samples as they are (a control)")
    a.add_argument("--out", required=True)
    f = sub.add_parser("fid", help="FID / KID / precision-recall of a .npz against a public set's test split")
    f.add_argument("npz")
    f.add_argument("--dataset", default="usps")
    f.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a loader option of that set, repeatable: --option resize=20 --option pad=4 frames USPS as "
                        "MNIST (the test split the samples of a framed proxy run are compared with)")
    f.add_argument("--n", type=int, default=2000)
    args = p.parse_args()
    {"train": train, "apply": apply, "fid": fid}[args.cmd](args)


if __name__ == "__main__":
    main()
