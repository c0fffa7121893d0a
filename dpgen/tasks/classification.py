"""``task=classification method=dpsgd``: a CNN trained with DP-SGD, three accountants side by side.

The one loop (``dpgen.train.loop.fit``) trains it; this task gives it the data, the model, the
batches and the evaluation:

* Poisson batches at ``q = trainer.batch_size / N`` (shuffled epochs for the non-private baseline);
  ``trainer.epochs`` (or ``trainer.steps``) with one epoch = ``ceil(N / B)`` steps;
* noise: ``method.noise_multiplier`` or, when null, calibrated so that the ledger's accountant
  (``privacy.accountant``: default dp-accounting's PLD; the WDP presets pin the moments accountant) reaches
  ``privacy.epsilon`` at ``privacy.delta`` after the planned steps; with a fixed noise the run stops before
  the step that would exceed the budget (``stop_reason`` says so);
* checkpoints (the loop's): model, optimizer, RNG states, step, and the state of *every* accountant;
* ``metrics.jsonl`` (and ``logger=csv|tensorboard|wandb``): ``step, epoch`` and the epsilon of each accountant
  (``eps_<ledger>``, ``eps_moments``, ``eps_bdp``, ``eps_wdp``) every ``trainer.log_every`` steps and at the end of each epoch;
  the batch loss only for the non-private baseline (DP-SGD's loss is computed from clean records and never
  leaves the run; a non-finite step is detected on the released noisy gradient). The ledger is on disk before
  a line goes out and a resume keeps the checkpoint's noise (dpgen.train.publication); ``metrics.json`` at the end:
  test accuracy (the test split is used once, after training: no model selection, no early stopping on
  it), epsilons, deltas, attack probabilities ``1/(1+exp(-eps))``, sigma, C, q, steps, timings
  (``timing_ms_per_step``: DP-SGD step, pair distances, each accountant) and wall time.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict

from dpgen.methods.dpsgd import ClassificationBatch
from dpgen.tasks.registry import trainable
from dpgen.train.loop import Task


@trainable
class ClassificationTask(Task):
    name = "classification"

    def setup(self, cfg, device) -> None:
        from dpgen.data.private import PrivateData
        from dpgen.methods.registry import method_class

        method_class(cfg, "classification")  # a method this task trains, before any data is read
        # the private records: only through their owner (dpgen.data.private), which hands out batches, never sizes
        self.data = PrivateData(cfg.dataset, "train", device)
        self.n_private = self.data.n  # declared, public: q, epochs (dpgen.train.loop)
        self.shape = self.data.shape
        # never derived from the private labels (their maximum would be a value computed from private records)
        self.num_classes = self.data.num_classes
        if self.num_classes < 2:
            raise ValueError(f"task=classification needs the number of classes of dataset={cfg.dataset.name}: set "
                             "dataset.num_classes (it is not derived from the private labels)")
        # private: an out-of-range label is a zero contribution (dpgen.utils.labels), refusing would tell D from D
        # plus such a record; the non-private baseline is refused (the values stay in memory)
        if not cfg.method.private and not self.data.labels_in_range():
            raise ValueError(f"{cfg.dataset.name}: some labels lie outside [0, {self.num_classes - 1}] "
                             f"({self.num_classes} classes): check dataset.num_classes or the label file")
        self.steps_per_epoch = math.ceil(self.n_private / cfg.trainer.batch_size)
        self.device = device

    def build(self, cfg, steps: int, device):
        from dpgen.models.classifiers import make_classifier

        from dpgen.methods.registry import DataInfo, build

        method = build(cfg, DataInfo(self.n_private, self.shape, self.num_classes), steps, "classification")
        model = make_classifier(self.shape, self.num_classes, arch=cfg.task.model, norm=cfg.task.norm).to(device)
        return method, {"model": model}

    def next_batch(self, method, sampler_gen, step: int, target_steps: int):
        return ClassificationBatch(*self.data.batch(method, self.cfg.trainer.batch_size, sampler_gen, keep_empty=True))

    def should_log(self, step: int) -> bool:
        return step % self.steps_per_epoch == 0  # every epoch's end: the figure of epsilon against the epoch

    def log_fields(self, step: int, last: bool, method, models) -> Dict[str, Any]:
        rec: Dict[str, Any] = {"epoch": round(step / self.steps_per_epoch, 4)}
        if method.private:
            rec.update({f"eps_{a}": e for a, e in method.epsilons().items()})
        return rec

    def evaluate(self, cfg, models, method, device, output_dir: Path) -> Dict[str, Any]:
        """The real test split, once, after training (no model selection, no early stopping on it)."""
        from dpgen.data import as_tensors, load_split
        from dpgen.eval import accuracy
        from dpgen.models.generators import count_parameters

        test_ds = load_split(cfg.dataset, "test")
        X_test, Y_test = as_tensors(test_ds)
        model = models["model"]
        timing = method.timing_ms_per_step()
        return {
            "method": "dpsgd" if method.private else "sgd (non-private)",
            "model": type(model).__name__ + f" ({model.arch}, norm={cfg.task.norm})",
            "model_parameters": count_parameters(model),
            "n_train": self.n_private, "n_test": int(X_test.shape[0]),
            "optimizer": cfg.trainer.optimizer, "lr": cfg.trainer.lr,
            "test_acc": accuracy(model, X_test.float(), Y_test.long(), device=device,
                                 batch_size=cfg.task.eval_batch_size),
            "timing_ms_per_step": timing,
        }

    def summary(self, m: Dict[str, Any], out: Path) -> None:
        print(f"\n{m['method']} on {m['dataset']}: {m['steps']} steps ({m['stop_reason']}), "
              f"{m['train_seconds']:.1f} s training on {m['device']}; test accuracy {m['test_acc']:.2f}%")
        p = m["privacy"]
        if p.get("private"):
            print(f"  sigma {p['noise_multiplier']:.4g}, C {p['clip']}, q {p['sample_rate']:.4g}")
            for a, r in p["accountants"].items():
                print(f"  {r['framework']:>3} ({a}): epsilon {r['epsilon']:.4f} at delta {r['delta']:.0e} "
                      f"(attack success <= {r['attack_probability']:.3f})")
        else:
            print("  privacy: none (non-private baseline)")
        print(f"  ms per step: {m['timing_ms_per_step']}")
        print(f"  files: {out / 'metrics.json'}")
