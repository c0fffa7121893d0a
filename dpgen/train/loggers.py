"""Metric loggers: none (default), csv, wandb (offline by default: no account or network), tensorboard.

Each gets every record the loop publishes (``metrics.jsonl``'s: step, epsilon, the published loss, ...), and,
when the run ends, its final metrics (``metrics.json``, flattened to dotted keys), its hyper-parameters and
its sample grid: tensorboard as ``final/*`` scalars, hparams and an image; wandb as the run's summary,
config and an image; csv as ``metrics_final.csv`` (key, value; the grid's path). Nothing else reaches them.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Dict, Optional

from dpgen.utils.registry import Registry


def flatten(d: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Nested dicts to dotted keys, keeping numbers, strings and booleans."""
    out: Dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[key] = v
    return out


class NullLogger:
    def log(self, metrics: Dict[str, Any], step: int) -> None:
        pass

    def finish(self, final: Optional[Dict[str, Any]] = None, images: Optional[Dict[str, Path]] = None) -> None:
        pass


class CSVLogger(NullLogger):
    """``metrics.csv``: a row per published record; a record with a field the header lacks (epsilon after
    a first record without it) rewrites the file with the wider header. ``metrics_final.csv`` at the end."""

    def __init__(self, output_dir) -> None:
        self.path = Path(output_dir) / "metrics.csv"
        self.final_path = Path(output_dir) / "metrics_final.csv"

    def _rows(self):
        if not self.path.exists():
            return [], []
        with open(self.path, newline="") as f:
            r = csv.DictReader(f)
            return list(r.fieldnames or []), list(r)

    def log(self, metrics, step):
        row = {"step": step, **{k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool))}}
        columns, rows = self._rows()
        wider = [*columns, *(k for k in row if k not in columns)]
        if wider != columns:  # a new field (or the first row): write the whole file with the wider header
            from dpgen.utils.io import atomic_write_text

            buf = io.StringIO()
            w = csv.DictWriter(buf, fieldnames=wider)
            w.writeheader()
            w.writerows([*rows, row])
            atomic_write_text(self.path, buf.getvalue())
            return
        with open(self.path, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=columns).writerow(row)

    def finish(self, final=None, images=None):
        if final is None:
            return
        from dpgen.utils.io import atomic_write_text

        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["key", "value"])
        for k, v in {**flatten(final), **{f"{n}_png": str(p) for n, p in (images or {}).items()}}.items():
            w.writerow([k, v])
        atomic_write_text(self.final_path, buf.getvalue())


class WandbLogger(NullLogger):
    def __init__(self, output_dir, project: str, mode: str, config: Dict[str, Any]) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ImportError("logger=wandb needs wandb: pip install -e '.[wandb]'") from e
        self.wandb = wandb
        self.run = wandb.init(project=project, mode=mode, dir=str(output_dir), config=config)

    def log(self, metrics, step):
        self.run.log(metrics, step=step)

    def finish(self, final=None, images=None):
        if final is not None:
            self.run.summary.update({k: v for k, v in flatten(final).items() if v is not None})
        for name, path in (images or {}).items():
            self.run.log({name: self.wandb.Image(str(path))})
        self.run.finish()


class TensorBoardLogger(NullLogger):
    """Event files under ``<run>/tensorboard`` (``tensorboard --logdir outputs``); needs the
    ``tensorboard`` package (``pip install -e '.[tensorboard]'``)."""

    def __init__(self, output_dir, config: Optional[Dict[str, Any]] = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError("logger=tensorboard needs tensorboard: pip install -e '.[tensorboard]'") from e
        self.writer = SummaryWriter(log_dir=str(Path(output_dir) / "tensorboard"))
        self.config = config or {}
        self.step = 0

    def log(self, metrics, step):
        self.step = step
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step":
                self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def finish(self, final=None, images=None):
        if final is not None:
            scalars = {k: v for k, v in flatten(final).items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)}
            for k, v in scalars.items():
                self.writer.add_scalar(f"final/{k}", v, self.step)
            hparams = {k: v for k, v in flatten(self.config).items() if isinstance(v, (int, float, str, bool))}
            self.writer.add_hparams(hparams, {f"hparam/{k}": v for k, v in scalars.items()}, run_name=".")
        for name, path in (images or {}).items():
            import numpy as np
            from PIL import Image

            arr = np.asarray(Image.open(path).convert("RGB"))
            self.writer.add_image(name, arr, self.step, dataformats="HWC")
        self.writer.close()


#: ``logger=`` -> a function (cfg, output_dir, config_dict) -> logger
LOGGERS = Registry("logger", key="logger")
LOGGERS.register("none", lambda cfg, output_dir, config_dict: NullLogger())
LOGGERS.register("csv", lambda cfg, output_dir, config_dict: CSVLogger(output_dir))
LOGGERS.register("wandb", lambda cfg, output_dir, config_dict: WandbLogger(output_dir, cfg.logger.project,
                                                                           cfg.logger.mode, config_dict or {}))
LOGGERS.register("tensorboard", lambda cfg, output_dir, config_dict: TensorBoardLogger(output_dir, config_dict))


def make_logger(cfg, output_dir, config_dict=None):
    return LOGGERS.build(cfg.logger.name, cfg, output_dir, config_dict)
