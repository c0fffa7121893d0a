"""Metric loggers: none (default), csv, wandb (offline by default: no account or network), tensorboard."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Dict


class NullLogger:
    def log(self, metrics: Dict[str, Any], step: int) -> None:
        pass

    def finish(self) -> None:
        pass


class CSVLogger(NullLogger):
    def __init__(self, output_dir) -> None:
        self.path = Path(output_dir) / "metrics.csv"
        self.columns = None

    def log(self, metrics, step):
        row = {"step": step, **{k: v for k, v in metrics.items() if isinstance(v, (int, float, str))}}
        new = not self.path.exists()
        if self.columns is None:
            self.columns = list(row)
        with open(self.path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerow(row)


class WandbLogger(NullLogger):
    def __init__(self, output_dir, project: str, mode: str, config: Dict[str, Any]) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ImportError("logger=wandb needs wandb: pip install -e '.[wandb]'") from e
        self.run = wandb.init(project=project, mode=mode, dir=str(output_dir), config=config)

    def log(self, metrics, step):
        self.run.log(metrics, step=step)

    def finish(self):
        self.run.finish()


class TensorBoardLogger(NullLogger):
    """Event files under ``<run>/tensorboard`` (``tensorboard --logdir outputs``); needs the
    ``tensorboard`` package (``pip install -e '.[tensorboard]'``)."""

    def __init__(self, output_dir) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError("logger=tensorboard needs tensorboard: pip install -e '.[tensorboard]'") from e
        self.writer = SummaryWriter(log_dir=str(Path(output_dir) / "tensorboard"))

    def log(self, metrics, step):
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and k != "step":
                self.writer.add_scalar(k, v, step)

    def finish(self):
        self.writer.close()


def make_logger(cfg, output_dir, config_dict=None):
    name = cfg.logger.name
    if name == "none":
        return NullLogger()
    if name == "csv":
        return CSVLogger(output_dir)
    if name == "wandb":
        return WandbLogger(output_dir, cfg.logger.project, cfg.logger.mode, config_dict or {})
    if name == "tensorboard":
        return TensorBoardLogger(output_dir)
    raise ValueError(f"logger={name!r} is unknown: choose none, csv, wandb or tensorboard")
