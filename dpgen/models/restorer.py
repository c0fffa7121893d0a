"""A restorer learnt on PUBLIC images: band -> image, applied to a band generator's released samples.

A ``dct`` generator (or ``model.dct_project``) draws images in the band of its k x k lowest DCT frequencies. A
restorer is a small residual CNN that learnt the map ``lowpass(x, k) -> x`` on a public data set
(``scripts/public_restorer.py train``); ``dpgen sample <run> restorer=<file.pt>`` passes a run's samples through it
instead of the run's contrast curve. That is post-processing of the generator and of public data: the privacy of
the weights is unchanged, but the set is "with public data" and its datasheet says which. :func:`load_restorer`
refuses a restorer learnt on anything but a public proxy, or on the run's own data set, and one learnt for another
band or frame than the run draws.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

#: the data sets a restorer may learn on: public proxies of the sensitive sets (never the run's own data set: its
#: training split would leave the run through the restorer's weights)
PUBLIC_PROXIES = ("usps", "usps8", "digits")


class Restorer(nn.Module):
    """x_band -> sigmoid(logit(x_band) + f(x_band)): a residual CNN of ``depth`` 3 x 3 layers of ``width`` channels.

    ``num_classes`` > 0 (``public_restorer.py train --labelled``): f also sees the sample's label as that many one-hot
    planes, so that it restores strokes of the class the sample was drawn for instead of the class it resembles."""

    def __init__(self, width: int = 48, depth: int = 6, num_classes: int = 0) -> None:
        super().__init__()
        self.num_classes = int(num_classes)
        layers = [nn.Conv2d(1 + self.num_classes, width, 3, padding=1), nn.ReLU()]
        for _ in range(depth - 2):
            layers += [nn.Conv2d(width, width, 3, padding=1), nn.ReLU()]
        layers.append(nn.Conv2d(width, 1, 3, padding=1))
        self.f = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, y: Optional[torch.Tensor] = None) -> torch.Tensor:
        z = torch.logit(x.clamp(1e-3, 1 - 1e-3))
        inp = x
        if self.num_classes:
            if y is None:
                raise ValueError(f"this restorer was learnt with labels ({self.num_classes} classes): pass the "
                                 "samples' labels (a class-conditional generator's)")
            planes = nn.functional.one_hot(y.long(), self.num_classes).to(x.dtype)[:, :, None, None]
            inp = torch.cat([x, planes.expand(-1, -1, *x.shape[-2:])], dim=1)
        return torch.sigmoid(z + self.f(inp))


def blur(x: torch.Tensor, s: float) -> torch.Tensor:
    """A separable Gaussian blur of std ``s`` pixels (replicate padding; ``s`` <= 0: ``x`` itself)."""
    if s <= 0:
        return x
    r = max(1, int(3 * s))
    t = torch.arange(-r, r + 1, dtype=x.dtype)
    g = torch.exp(-t ** 2 / (2 * s * s))
    g = g / g.sum()
    x = nn.functional.conv2d(nn.functional.pad(x, (r, r, 0, 0), mode="replicate"), g.view(1, 1, 1, -1))
    return nn.functional.conv2d(nn.functional.pad(x, (0, 0, r, r), mode="replicate"), g.view(1, 1, -1, 1))


def run_band(model_cfg, shape) -> int:
    """The k of the k x k band a run's generator draws in; 0 when its generator is not band-limited."""
    if model_cfg.generator != "dct" and not model_cfg.dct_project:
        return 0
    return int(model_cfg.dct_size or min(10, *shape[1:]))


def read_restorer(path) -> Tuple[Restorer, Dict[str, Any]]:
    """The restorer saved at ``path`` (``scripts/public_restorer.py train``) and what its file records, unchecked:
    :func:`load_restorer` checks it against a run."""
    saved = torch.load(Path(path), map_location="cpu", weights_only=True)
    net = Restorer(int(saved["width"]), int(saved["depth"]), int(saved.get("num_classes") or 0))
    net.load_state_dict(saved["state"])
    net.eval()
    return net, {k: saved.get(k) for k in ("public_dataset", "band", "blur", "size", "inner", "width", "depth",
                                           "num_classes")}


def load_restorer(path, dataset: str, shape, band: int, num_classes: Optional[int] = None
                  ) -> Tuple[Restorer, Dict[str, Any]]:
    """The restorer saved at ``path`` and what it learnt, checked against the run it is applied to: ``dataset``
    (the run's data set), ``shape`` (C, H, W), ``band`` (:func:`run_band`) and, for a restorer learnt with labels,
    ``num_classes`` (the run generator's). Raises ValueError naming the mismatch and the fix."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"restorer={path}: no such file (learn one with python scripts/public_restorer.py train "
                         "--dataset usps --band <the run's model.dct_size> --out <file.pt>)")
    net, info = read_restorer(path)
    public = info["public_dataset"]
    if public not in PUBLIC_PROXIES:
        raise ValueError(f"restorer={path} learnt on {public!r}, which is not a public proxy "
                         f"({', '.join(PUBLIC_PROXIES)}): its weights could carry sensitive records")
    if public == dataset or (public, dataset) in (("usps8", "usps"), ("usps", "usps8")):
        raise ValueError(f"restorer={path} learnt on {public}, the run's own data set: its weights carry that "
                         "set's training records outside the privacy accounting. Learn it on another public set")
    if band == 0:
        raise ValueError("this run's generator is not band-limited (model.generator is not dct and "
                         "model.dct_project is false): a restorer maps the band of a dct generator to images")
    if int(info.get("band") or -1) != band:
        raise ValueError(f"restorer={path} learnt band {info.get('band')}, the run draws band {band} "
                         f"(model.dct_size): learn one with --band {band}")
    size = int(info.get("size") or 0)
    if shape[0] != 1 or (size and (size, size) != tuple(shape[1:])):
        raise ValueError(f"restorer={path} restores 1-channel images of {size or 'its data set'}'s size, the run "
                         f"draws {tuple(shape)}: learn one with --size {shape[-1]}")
    if net.num_classes and num_classes is not None and int(num_classes) != net.num_classes:
        raise ValueError(f"restorer={path} learnt with {net.num_classes} class labels, the run's generator draws "
                         f"{num_classes} classes: learn one without --labelled, or on a set of {num_classes} classes")
    return net, info


#: a run's sampling without its curve: the band the restorer learnt to map (load_generator's ``sharpen``)
NO_CURVE = (0.0, 0.5)


def restored(gen: nn.Module, path, dataset: str, model_cfg, shape, device) -> Tuple[nn.Module, Dict[str, Any]]:
    """``gen`` (loaded with ``sharpen=NO_CURVE``) wrapped in the checked restorer at ``path``, on ``device``, and what
    the restorer learnt with its file and SHA-256: the one way a release and an evaluation build it."""
    import hashlib

    net, info = load_restorer(path, dataset, shape, run_band(model_cfg, shape), getattr(gen, "num_classes", None))
    info.update(file=str(path), sha256=hashlib.sha256(Path(path).read_bytes()).hexdigest())
    return RestoredSamples(gen, net.to(device)), info


def beside_selection(path, run) -> str:
    """Why a restorer is refused for a run whose curve was chosen on its held-out records (selection.json)."""
    return (f"restorer={path}: {run}'s contrast curve was chosen on its held-out records (selection.json), and a "
            "restorer replaces the curve: use one or the other (move selection.json aside to use the restorer)")


def public_data_statement(info: Dict[str, Any]) -> str:
    """What a release or an evaluation through the restorer ``info`` (:func:`load_restorer`) says of its public data."""
    return (f"{info.get('public_dataset')} (its training split, through the restorer's weights): results on these "
            "samples are 'with public data'")


class RestoredSamples(nn.Module):
    """A trained generator whose samples pass through a restorer (the inner generator's own draw, then the map)."""

    def __init__(self, inner: nn.Module, restorer: Restorer):
        super().__init__()
        self.inner, self.restorer = inner, restorer
        self.num_classes, self.code_dim, self.out_shape = inner.num_classes, inner.code_dim, inner.out_shape

    def sample(self, n: int, y=None, generator=None, device=None):
        x, y = self.inner.sample(n, y=y, generator=generator, device=device)
        with torch.no_grad():  # the restorer is on the generator's device (:func:`restored`)
            return self.restorer(x.float(), y).clamp(0, 1), y
