"""``task=domain_adaptation``: DP-SWD, SWD, DANN and DP-DANN (dp-swd.txt section 4 and 6.2).

A public labelled source and a private unlabelled target (``dataset=da_<problem>``, a
:class:`~dpgen.config.DADatasetConfig` preset); a feature extractor g and classifier h (appendix
8.5.2, :mod:`dpgen.models.da_nets`) trained with Adam on the source classification loss plus the
method's adaptation term. Its own loop (the generative trainer trains a generator), with the same
guarantees:

* ``trainer.device=auto``; ``seed`` seeds the networks and the (public) source batches; the
  mechanism's randomness (target batches, directions, noise) comes from OS entropy unless
  ``privacy.secret_randomness=false``.
* tqdm progress; atomic checkpoints (g, h, discriminator, optimizer, RNG states, the accountant's
  ledger, step) every ``trainer.checkpoint_every`` steps and at the end; ``resume=true``.
* A private method stops before a step that would exceed its (epsilon, delta) budget, counting the
  steps its ledger already holds; a resume keeps the noise of the checkpoint and refuses changed
  privacy settings; the ledger is on disk before a log line or checkpoint goes out
  (dpgen.train.publication, as in the generative trainer).
* ``metrics.jsonl`` + ``metrics.json`` (target accuracy, epsilon spent, sigma, bound, how target
  rows were bounded, what the guarantee covers: the target only), ``config.yaml``.

Evaluation: accuracy of h(g(x)) on the whole target set, whose labels are read only for this
final evaluation (the transductive protocol of the paper: the unlabelled target set is also the
test set); nothing is selected or stopped on it. That accuracy is NOT private (it reads the
private target records and labels outside the mechanism): the privacy report says so, and the
guarantee covers what the networks release. An epoch is ceil(N_target / B) steps.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict

import numpy as np
import torch

from dpgen.methods.da_dpswd import DADPSWD, DASWD
from dpgen.methods.dann import DANN
from dpgen.methods.dpdann import DPDANN

DA_METHODS = {"dpswd": DADPSWD, "swd": DASWD, "dann": DANN, "dpdann": DPDANN}


def _load_domain(cfg, which: str):
    from dpgen.data import load_dataset

    ds = cfg.dataset
    name = getattr(ds, which)
    split = getattr(ds, f"{which}_split")
    opts = dict(getattr(ds, f"{which}_options") or {})
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
    if not hasattr(ds, "source") or not hasattr(ds, "target"):
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
            raise ValueError(f"problem {ds.problem}: {nm} labels lie in {int(y.min())}..{int(y.max())}, "
                             f"outside 0..{cs - 1}")
    return {"Xs": Xs, "Ys": Ys, "Xt": Xt, "Yt": Yt, "shape": tuple(Xs.shape[1:]), "num_classes": cs,
            "source_file": getattr(src, "source", ""), "target_file": getattr(tgt, "source", "")}


def build(cfg, data: Dict[str, Any], steps: int, device):
    """(g, h, method) for ``cfg.method`` on the problem's data."""
    from dpgen.models.da_nets import make_da_nets

    name = cfg.method.name
    if name not in DA_METHODS:
        raise ValueError(f"method={name!r} cannot run task=domain_adaptation: choose one of {', '.join(DA_METHODS)}")
    g, h, disc, feat_dim = make_da_nets("auto", data["shape"], data["num_classes"])
    g, h, disc = g.to(device), h.to(device), disc.to(device)
    method = DA_METHODS[name](cfg, feat_dim, data["num_classes"], len(data["Xt"]), steps, cfg.trainer.batch_size,
                              disc=disc)
    return g, h, method


def train_domain_adaptation(cfg, output_dir) -> Dict[str, Any]:
    from tqdm.auto import tqdm

    from dpgen.models.da_nets import accuracy
    from dpgen.privacy.calibration import steps_for_epochs
    from dpgen.train.checkpoint import Checkpointer
    from dpgen.train.publication import Publisher, stop_step
    from dpgen.train.trainer import (EMA, TrainingError, load_checkpoint, make_optimizer, mechanism_generators,
                                     open_run, prepare_resume, resolve_device, run_state, seed_everything)
    from dpgen.utils.io import write_json

    t_start = time.time()
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t = cfg.trainer
    device = resolve_device(t.device)
    seed_everything(cfg.seed)
    sampler_gen, noise_gen = mechanism_generators(cfg, device)
    data = load_domains(cfg)
    Xs, Ys = data["Xs"].to(device), data["Ys"].to(device)
    Xt = data["Xt"].to(device)
    n_s, n_t = len(Xs), len(Xt)
    if t.batch_size > n_t or t.batch_size > n_s:
        raise ValueError(f"trainer.batch_size={t.batch_size} is larger than the source ({n_s}) or the target "
                         f"({n_t}) set: lower trainer.batch_size.")
    steps = int(t.steps) if t.steps is not None else steps_for_epochs(n_t, t.batch_size, t.epochs)
    ckpt = Checkpointer(out / "checkpoints")
    state = load_checkpoint(cfg, ckpt)
    calib_steps, settings = prepare_resume(state, steps, cfg, n_private=n_t, task_keys=("k", "target_grad"))
    g, h, method = build(cfg, data, calib_steps, device)
    method.rng = noise_gen
    params = list(g.parameters()) + list(h.parameters()) + method.parameters()
    opt = make_optimizer(t, params)
    publisher = Publisher(cfg, out, method, settings)
    nets = torch.nn.ModuleDict({"g": g, "h": h})
    # trainer.ema: a moving average of the networks, evaluated instead of the last iterate (post-processing)
    ema = EMA(nets, t.ema) if t.ema else None

    if state is not None:
        g.load_state_dict(state["g"])
        h.load_state_dict(state["h"])
        opt.load_state_dict(state["optimizer"])
        if ema is not None and state.get("ema") is not None:
            ema.model.load_state_dict(state["ema"])
    step = open_run(cfg, state, publisher, method, sampler_gen, noise_gen)
    if state is not None:
        print(f"[dpgen] resumed from {ckpt.path} at step {step} (epsilon spent so far {method.epsilon():.4f})")

    def checkpoint():
        publisher.checkpoint(lambda: ckpt.save(run_state(
            cfg, step, sampler_gen, noise_gen, settings, g=g.state_dict(), h=h.state_dict(),
            method=method.state_dict(), optimizer=opt.state_dict(),
            ema=ema.model.state_dict() if ema is not None else None)))

    def evaluated():  # the networks a run reports: the average when trainer.ema is set
        return (ema.model["g"], ema.model["h"]) if ema is not None else (g, h)

    target_steps = stop_step(method, step, steps, method.max_steps)
    if target_steps < steps:
        print(f"[dpgen] the budget allows {target_steps} of the {steps} steps asked: training stops there")
    bar = tqdm(total=target_steps, initial=step, desc=f"{cfg.method.name} on {cfg.dataset.problem}",
               disable=not t.progress, dynamic_ncols=True)
    g.train(), h.train()
    logs: Dict[str, float] = {}
    t_loop = time.time()
    step0 = step
    while step < target_steps:
        idx_t = method.sample_target(n_t, t.batch_size, sampler_gen).to(device)
        idx_s = torch.randperm(n_s)[: t.batch_size].to(device)  # public source: the public seed is fine
        opt.zero_grad(set_to_none=True)
        logs = method.compute_grads(g, h, Xs[idx_s], Ys[idx_s], Xt[idx_t], step / max(1, target_steps))
        if not np.isfinite(logs["loss"]):  # the logged losses are released values (see the methods)
            method.account()  # the mechanism ran: keep the ledger honest
            publisher.persist()
            raise TrainingError(
                f"loss is {logs['loss']} at step {step + 1}: training stopped. The last good checkpoint "
                f"({ckpt.path}) is kept and the privacy ledger ({publisher.ledger.path}) counts the failed step; "
                "lower trainer.lr or check the data."
            )
        opt.step()
        if ema is not None:
            ema.update(nets)
        method.account()
        step += 1
        bar.update(1)
        if step % t.log_every == 0 or step == target_steps:
            rec = {"step": step, **{k: round(v, 6) for k, v in logs.items()}}
            if method.private and (step % (t.log_every * 10) == 0 or step == target_steps):
                rec["epsilon"] = method.epsilon()
            ev = cfg.task.eval_every
            if ev and (step % ev == 0):  # monitoring only, never used to select or stop; NOT private
                rec["target_acc"] = accuracy(*evaluated(), Xt, data["Yt"].to(device))
            publisher.publish(rec, step)
            bar.set_postfix(loss=f"{logs['loss']:.4g}")
        if step % t.checkpoint_every == 0 or step == target_steps:
            checkpoint()
    bar.close()
    loop_s = time.time() - t_loop
    stop_reason = "completed" if target_steps >= steps else \
        f"privacy budget: the next step would exceed epsilon={cfg.privacy.epsilon}"

    Yt = data["Yt"].to(device)
    metrics: Dict[str, Any] = {
        "task": "domain_adaptation",
        "method": cfg.method.name,
        "problem": cfg.dataset.problem,
        "source": f"{cfg.dataset.source} ({cfg.dataset.source_split}, {n_s} records, {data['source_file']})",
        "target": f"{cfg.dataset.target} ({cfg.dataset.target_split}, {n_t} records, {data['target_file']})",
        "n_source": n_s,
        "n_target": n_t,
        "target_acc": accuracy(*evaluated(), Xt, Yt),
        "source_acc": accuracy(*evaluated(), Xs, Ys),
        "ema": t.ema,
        "evaluation": ("accuracy on the whole target set (labels read only here; the paper's transductive "
                       "protocol, kept for reproduction). NOT private: it is computed from the private target "
                       "records and labels, outside the mechanism"),
        "steps": step,
        "steps_requested": steps,
        "epochs": round(step / max(1, -(-n_t // t.batch_size)), 3),
        "stop_reason": stop_reason,
        "batch_size": t.batch_size,
        "lr": t.lr,
        "adapt_weight": cfg.task.adapt_weight,
        "feature_dim": method.feat_dim,
        "seed": cfg.seed,
        "device": str(device),
        "privacy": {**method.privacy_report(), "mechanism_randomness": (
            "OS entropy: target batches, directions and noise are unpredictable from the public seed"
            if cfg.privacy.secret_randomness else
            "seeded from `seed` (reproducible): the guarantee holds only while the seed stays secret")},
        "final_logs": logs,
        "train_seconds": round(loop_s, 2),
        "steps_per_second": round((step - step0) / loop_s, 3) if loop_s > 0 and step > step0 else None,
        "checkpoint": str(ckpt.path),
    }
    metrics["wall_seconds"] = round(time.time() - t_start, 2)
    write_json(out / "metrics.json", metrics)
    publisher.finish()
    return metrics


def run_domain_adaptation(cfg, output_dir: Path | None = None) -> Dict[str, Any]:
    from dpgen.utils.run_dir import start_run_dir

    out = start_run_dir(cfg, output_dir, "domain_adaptation")
    m = train_domain_adaptation(cfg, out)
    p = m["privacy"]
    print(f"\n{m['method']} on {m['problem']} ({m['source']} -> {m['target']}): {m['steps']} steps "
          f"({m['stop_reason']}), {m['train_seconds']:.1f} s on {m['device']}")
    print(f"  target accuracy {m['target_acc']:.2f}% (source {m['source_acc']:.2f}%; the target accuracy reads the "
          "private target labels: not private)")
    if p.get("private"):
        print(f"  privacy (target only): epsilon spent {p['epsilon_spent']:.4f} of {p['epsilon_budget']} at delta "
              f"{p['delta']:.3g}; sigma {p['sigma']:.4g}; {p['bound']}; {p['neighbouring_relation']}; "
              f"guarantee holds: {p['guarantee_holds']}")
    else:
        print("  privacy: none (non-private baseline)")
    print(f"  files: {out / 'metrics.json'}")
    return m
