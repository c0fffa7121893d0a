"""``task=domain_adaptation``: DP-SWD, SWD, DANN and DP-DANN (dp-swd.txt section 4 and 6.2).

A public labelled source and a private unlabelled target (``dataset=da_<problem>``, a
:class:`~dpgen.config.DADatasetConfig` preset); a feature extractor g and classifier h (appendix
8.5.2, :mod:`dpgen.models.da_nets`) trained with Adam on the source classification loss plus the
method's adaptation term, by the one loop (``dpgen.train.loop.fit``: budget, checkpoints and
resume, loggers, EMA, the ledger before anything is published). This task gives it the domains,
the networks, the batches (a public source batch from the public seed; the private target batch
as the method samples it: :class:`dpgen.methods.da_base.DABatch`) and the evaluation.
``task.k`` and the method's settings (``method.target_grad``, ...) change the mechanism: a resume refuses them changed.
``metrics.json``: target accuracy, epsilon spent, sigma, bound, how target rows were bounded,
what the guarantee covers (the target only). A method outside dpgen: ``method.target``.

Evaluation: accuracy of h(g(x)) on the whole target set, whose labels are read only for this
final evaluation (the transductive protocol of the paper: the unlabelled target set is also the
test set); nothing is selected or stopped on it. That accuracy is NOT private (it reads the
private target records and labels outside the mechanism): the privacy report says so, and the
guarantee covers what the networks release. An epoch is ceil(N_target / B) steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import torch

from dpgen.methods.da_base import DABatch
from dpgen.tasks.registry import trainable
from dpgen.train.loop import Task


def _load_domain(cfg, which: str):
    from dpgen.data import load_dataset

    ds = cfg.dataset
    name, split, opts = ((ds.source, ds.source_split, ds.source_options) if which == "source" else
                         (ds.target, ds.target_split, ds.target_options))
    opts = dict(opts or {})
    try:
        return load_dataset(name, split, data_root=ds.data_root, download=ds.download, **opts)
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"the {which} domain of problem {ds.problem} ({name}, split {split}"
            f"{', ' + str(opts) if opts else ''}) is missing: {' '.join(str(e).split())}"
        ) from None


def load_domains(cfg) -> Dict[str, Any]:
    """Source (X, y) and target (X, y) tensors of the problem, with clear errors for bad input."""
    from dpgen.data import as_tensors

    ds = cfg.dataset
    if not ds.domain_pair:
        raise ValueError(
            f"task=domain_adaptation needs a domain-adaptation problem preset, not dataset={ds.name}: "
            "choose dataset=da_usps_mnist, da_mnist_usps, da_visda or da_office31_<s><t> (e.g. da_office31_dw)."
        )
    src, tgt = _load_domain(cfg, "source"), _load_domain(cfg, "target")
    Xs, Ys = as_tensors(src)
    Xt, Yt = as_tensors(tgt)
    if tuple(Xs.shape[1:]) != tuple(Xt.shape[1:]):
        raise ValueError(
            f"problem {ds.problem}: the source ({ds.source}) and target ({ds.target}) records have different "
            f"dimensions {tuple(Xs.shape[1:])} and {tuple(Xt.shape[1:])}: both domains must live in the same "
            "input space (resize the images, e.g. source_options: {resize: 28}, or use features of the same extractor)."
        )
    cs, ct = int(src.num_classes), int(tgt.num_classes)
    if cs != ct or cs != int(ds.num_classes):
        raise ValueError(
            f"problem {ds.problem}: class counts do not match: source {ds.source} has {cs}, target {ds.target} "
            f"has {ct}, dataset.num_classes={ds.num_classes}: use domains that share their label set "
            "and set dataset.num_classes to it."
        )
    for nm, y in (("source", Ys), ("target", Yt)):
        if len(y) and (int(y.min()) < 0 or int(y.max()) >= cs):
            raise ValueError(f"problem {ds.problem}: some {nm} labels lie outside 0..{cs - 1} (the values found are "
                             "not printed: the target's are private); check the label file or dataset.num_classes")
    return {"Xs": Xs, "Ys": Ys, "Xt": Xt, "Yt": Yt, "shape": tuple(Xs.shape[1:]), "num_classes": cs,
            "source_file": src.source, "target_file": tgt.source}


@trainable
class DomainAdaptationTask(Task):
    name = "domain_adaptation"
    task_keys = ("k",)  # task.* fields that change the mechanism (the method's own are under method.*)

    def setup(self, cfg, device) -> None:
        from dpgen.data import ArrayDataset
        from dpgen.data.private import PrivateData

        self.domains = d = load_domains(cfg)
        self.Xs, self.Ys = d["Xs"].to(device), d["Ys"].to(device)
        # the private target: its batches come from its owner (dpgen.data.private); its labels are read by the
        # papers' target accuracy only (published: the reports say so)
        self.data = PrivateData.holding(ArrayDataset(d["Xt"], d["Yt"], name=cfg.dataset.target,
                                                     num_classes=d["num_classes"]),
                                        n=int(cfg.dataset.n_train), name=cfg.dataset.target, device=device)
        self.Xt, self.Yt = self.data.whole()
        # the private target's declared size (public: q, epochs)
        self.n_private, self.n_source = self.data.n, len(self.Xs)
        if cfg.trainer.batch_size > self.n_source:
            raise ValueError(f"trainer.batch_size={cfg.trainer.batch_size} is larger than the source "
                             f"({self.n_source} records): lower trainer.batch_size.")
        self.device = device

    def build(self, cfg, steps: int, device):
        from dpgen.methods.registry import DataInfo, build, method_class
        from dpgen.models.da_nets import make_da_nets

        method_class(cfg, "domain_adaptation")  # a method this task trains, before the networks are built
        g, h, disc, feat_dim = make_da_nets("auto", self.domains["shape"], self.domains["num_classes"])
        info = DataInfo(self.n_private, tuple(self.domains["shape"]), self.domains["num_classes"], feat_dim=feat_dim)
        method = build(cfg, info, steps, "domain_adaptation", disc=disc.to(device))
        return method, {"g": g.to(device), "h": h.to(device)}

    def next_batch(self, method, sampler_gen, step: int, target_steps: int) -> DABatch:
        b = self.cfg.trainer.batch_size
        xt, _ = self.data.batch(method, b, sampler_gen, keep_empty=True)
        idx_s = torch.randperm(self.n_source)[:b].to(self.device)  # public source: the public seed is fine
        return DABatch(self.Xs[idx_s], self.Ys[idx_s], xt, step / max(1, target_steps))

    def log_fields(self, step: int, last: bool, method, models) -> Dict[str, Any]:
        rec = super().log_fields(step, last, method, models)
        ev = self.cfg.task.eval_every
        if ev and step % ev == 0:  # monitoring only, never used to select or stop; NOT private
            rec["target_acc"] = self.accuracy(models, self.Xt, self.Yt)
        return rec

    @staticmethod
    def accuracy(models, x, y) -> float:
        from dpgen.eval import accuracy

        return accuracy(torch.nn.Sequential(models["g"], models["h"]), x, y)

    def evaluate(self, cfg, models, method, device, output_dir: Path) -> Dict[str, Any]:
        ds, d = cfg.dataset, self.domains
        return {
            "problem": ds.problem,
            "source": f"{ds.source} ({ds.source_split}, {self.n_source} records, {d['source_file']})",
            "target": f"{ds.target} ({ds.target_split}, {self.n_private} records, {d['target_file']})",
            "n_source": self.n_source,
            "n_target": self.n_private,
            "target_acc": self.accuracy(models, self.Xt, self.Yt),
            "source_acc": self.accuracy(models, self.Xs, self.Ys),
            "evaluation": ("accuracy on the whole target set (labels read only here; the paper's transductive "
                           "protocol, kept for reproduction). NOT private: it is computed from the private target "
                           "records and labels, outside the mechanism"),
            "lr": cfg.trainer.lr,
            "adapt_weight": cfg.task.adapt_weight,
            "feature_dim": method.feat_dim,
        }

    def summary(self, m: Dict[str, Any], out: Path) -> None:
        p = m["privacy"]
        print(f"\n{m['method']} on {m['problem']} ({m['source']} -> {m['target']}): {m['steps']} steps "
              f"({m['stop_reason']}), {m['train_seconds']:.1f} s on {m['device']}")
        print(f"  target accuracy {m['target_acc']:.2f}% (source {m['source_acc']:.2f}%; the target accuracy reads "
              "the private target labels: not private)")
        from dpgen.privacy.report import PrivacyReport

        rep = PrivacyReport.of(p, m.get("method"))  # a private report without epsilon_spent or delta is refused
        if rep.private:
            print(f"  privacy (target only): epsilon spent {rep.epsilon:.4f} of {p['epsilon_budget']} at "
                  f"delta {rep.delta:.3g}; {rep.noise_text()}; {p['bound']}; {rep.relation}; "
                  f"guarantee holds: {rep.guarantee_holds}")
        else:
            print("  privacy: none (non-private baseline)")
        print(f"  files: {out / 'metrics.json'}")
