"""``task=classification method=dpsgd``: a CNN trained with DP-SGD, three accountants side by side.

The loop (separate from the generative trainer, with the same guarantees):

* ``trainer.device=auto`` (CUDA when present), ``seed`` for the model and the public randomness; the
  mechanism's randomness (Poisson batches, the pair examples, the noise) from OS entropy unless
  ``privacy.secret_randomness=false`` (see ``dpgen.train.trainer.mechanism_generators``);
* Poisson batches at ``q = trainer.batch_size / N``; ``trainer.epochs`` (or ``trainer.steps``) with one
  epoch = ``ceil(N / B)`` steps; tqdm progress;
* noise: ``method.noise_multiplier`` or, when null, calibrated so that the moments accountant reaches
  ``privacy.epsilon`` at ``privacy.delta`` after the planned steps; with a fixed noise the run stops before
  the step that would exceed the budget (``stop_reason`` says so);
* checkpoints (``trainer.checkpoint_every`` steps and at the end, atomic): model, optimizer, RNG states,
  step, and the state of *every* accountant, so ``resume=true`` never under-counts; steps after the last
  checkpoint are discarded on resume together with their log lines;
* ``metrics.jsonl`` (and ``logger=csv|tensorboard|wandb``): ``step, epoch`` and the epsilon of each accountant
  (``eps_moments``, ``eps_bdp``, ``eps_wdp``) every ``trainer.log_every`` steps and at the end of each epoch;
  the batch loss only for the non-private baseline (DP-SGD's loss is computed from clean records and never
  leaves the run; a non-finite step is detected on the released noisy gradient). The ledger is on disk before
  a line goes out and a resume keeps the checkpoint's noise (dpgen.train.publication); ``metrics.json`` at the end:
  test accuracy (the test split is used once, after training: no model selection, no early stopping on
  it), epsilons, deltas, attack probabilities ``1/(1+exp(-eps))``, sigma, C, q, steps, timings
  (``timing_ms_per_step``: DP-SGD step, pair distances, each accountant) and wall time.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Dict

import torch
import torch.nn.functional as F

from dpgen.methods.dpsgd import DPSGD, FRAMEWORK, attack_probability


def make_dpsgd(cfg, n: int, steps: int) -> DPSGD:
    """The method object of a run: calibrated (or given) noise and the configured accountants."""
    from dpgen.privacy.ledger import Ledger

    m, t, p = cfg.method, cfg.trainer, cfg.privacy
    q = t.batch_size / n
    common = dict(clip=m.clip, sample_rate=q, expected_batch_size=q * n, batch_size=t.batch_size,
                  chunk_size=m.chunk_size)
    if not m.private:
        return DPSGD(private=False, **common)
    # the ledger: the moments accountant (the WDP paper's DP column) calibrates and keeps the budget
    ledger = Ledger(epsilon=p.epsilon, delta=p.delta, sampling="poisson", sample_rate=q, accountant="moments",
                    rel_tol=p.rel_tol)
    z = ledger.calibrate(steps) if m.noise_multiplier is None else ledger.use_noise(m.noise_multiplier)
    return DPSGD(noise_multiplier=z, accountants=list(m.accountants), delta=p.delta, bdp_delta=m.bdp_delta,
                 wdp_delta=m.wdp_delta, wdp_order=m.wdp_order, wdp_beta=m.wdp_beta, pair_examples=m.pair_examples,
                 total_steps=steps, ledger=ledger, **common)


@torch.no_grad()
def accuracy(model: torch.nn.Module, X: torch.Tensor, Y: torch.Tensor, device, batch_size: int = 1000) -> float:
    model.eval()
    correct = 0
    for i in range(0, X.shape[0], batch_size):
        xb, yb = X[i:i + batch_size].to(device), Y[i:i + batch_size].to(device)
        correct += int((model(xb).argmax(1) == yb).sum())
    model.train()
    return 100.0 * correct / max(1, X.shape[0])


def train_classifier(cfg, output_dir) -> Dict[str, Any]:
    """Train ``cfg.method`` (dpsgd) on ``cfg.dataset``; test once; write the run's files. Returns metrics."""
    from tqdm.auto import tqdm

    from dpgen.data import as_tensors, load_dataset
    from dpgen.models.classifiers import make_classifier
    from dpgen.models.generators import count_parameters
    from dpgen.privacy.calibration import steps_for_epochs
    from dpgen.train.checkpoint import Checkpointer
    from dpgen.train.publication import Publisher, finite_gradients, stop_step
    from dpgen.train.trainer import (EMA, TrainingError, load_checkpoint, make_optimizer, mechanism_generators,
                                     open_run, prepare_resume, resolve_device, run_state, seed_everything)
    from dpgen.utils.io import write_json

    if cfg.method.name != "dpsgd":
        raise ValueError(f"task=classification trains method=dpsgd, not method={cfg.method.name!r}: "
                         "use method=dpsgd (method.private=false for the non-private baseline).")
    t_start = time.time()
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t = cfg.trainer
    device = resolve_device(t.device)
    seed_everything(cfg.seed)
    sampler_gen, noise_gen = mechanism_generators(cfg, device)

    ds_opts = dict(cfg.dataset.options or {})
    train_ds = load_dataset(cfg.dataset.name, "train", data_root=cfg.dataset.data_root,
                            download=cfg.dataset.download, **ds_opts)
    X, Y = as_tensors(train_ds)
    X, Y = X.float().to(device), Y.long().to(device)
    n = int(X.shape[0])
    shape = tuple(X.shape[1:])
    num_classes = int(getattr(train_ds, "num_classes", 0) or cfg.dataset.num_classes or int(Y.max()) + 1)
    if t.batch_size > n:
        raise ValueError(f"trainer.batch_size={t.batch_size} is larger than the dataset ({n} records): lower it.")
    steps_per_epoch = math.ceil(n / t.batch_size)
    steps = int(t.steps) if t.steps is not None else steps_for_epochs(n, t.batch_size, t.epochs)

    ckpt = Checkpointer(out / "checkpoints")
    state = load_checkpoint(cfg, ckpt)
    calib_steps, settings = prepare_resume(state, steps, cfg, n_private=n)
    method = make_dpsgd(cfg, n, calib_steps)
    stop_reason = "completed"
    max_steps = None  # the steps the budget allows in total
    if method.private and cfg.method.noise_multiplier is not None:
        max_steps = method.ledger.max_steps()
        if max_steps == 0:
            raise ValueError(f"privacy.epsilon={cfg.privacy.epsilon} at delta={cfg.privacy.delta} is spent by not even one "
                             f"step with method.noise_multiplier={method.noise_multiplier} at q={method.sample_rate:.4g}: "
                             "raise the noise or the budget (or set method.noise_multiplier=null to calibrate it).")
    elif method.private:  # calibrated so that calib_steps steps reach the budget
        max_steps = calib_steps
    model = make_classifier(shape, num_classes, arch=cfg.task.model, norm=cfg.task.norm).to(device)
    opt = make_optimizer(t, model.parameters())
    publisher = Publisher(cfg, out, method, settings)
    # trainer.ema: a moving average of the model, tested instead of the last iterate (post-processing)
    ema = EMA(model, t.ema) if t.ema else None

    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        if ema is not None and state.get("ema") is not None:
            ema.model.load_state_dict(state["ema"])
    step = open_run(cfg, state, publisher, method, sampler_gen, noise_gen)
    if state is not None:
        print(f"[dpgen] resumed from {ckpt.path} at step {step} (DP epsilon so far {method.epsilon():.4f})")
    target_steps = stop_step(method, step, steps, max_steps)
    if target_steps < steps:
        print(f"[dpgen] the budget allows {target_steps} of the {steps} steps asked: training stops there")

    def checkpoint():
        publisher.checkpoint(lambda: ckpt.save(run_state(
            cfg, step, sampler_gen, noise_gen, settings, model=model.state_dict(), optimizer=opt.state_dict(),
            method=method.state_dict(), ema=ema.model.state_dict() if ema is not None else None)))

    perm, pos = None, 0  # non-private: shuffled epochs
    last_loss = float("nan")
    bar = tqdm(total=target_steps, initial=step, desc=f"dpsgd{'' if method.private else ' (non-private)'} on "
               f"{cfg.dataset.name}", disable=not t.progress, dynamic_ncols=True)
    model.train()
    while step < target_steps:
        t0 = time.perf_counter()
        if method.private:
            idx = torch.nonzero(torch.rand(n, generator=sampler_gen) < method.sample_rate).flatten()
            pair_idx = method.pair_indices(idx.numel(), sampler_gen)
            idx = idx.to(device)
            opt.zero_grad(set_to_none=True)
            t_pairs = method.timing["pairs"]
            loss, dist = method.private_gradient(model, X[idx], Y[idx], noise_gen=noise_gen, pair_idx=pair_idx)
            # the stop test reads the released (noisy) gradient, never the clean loss
            finite = finite_gradients(model.parameters())
            if finite:
                opt.step()
                if ema is not None:
                    ema.update(model)
            # plain DP-SGD's time: the step minus the pair distances (timed apart, an accountant cost)
            method.timing["sgd"] += time.perf_counter() - t0 - (method.timing["pairs"] - t_pairs)
            method.account(dist)
            method.timed_steps += 1
        else:
            if perm is None or pos >= n:
                perm, pos = torch.randperm(n, generator=sampler_gen).to(device), 0
            idx = perm[pos:pos + t.batch_size]
            pos += t.batch_size
            opt.zero_grad(set_to_none=True)
            lt = F.cross_entropy(model(X[idx]), Y[idx])
            lt.backward()
            loss = float(lt.detach())
            finite = math.isfinite(loss)
            if finite:
                opt.step()
                if ema is not None:
                    ema.update(model)
                last_loss = loss
            method.timing["sgd"] += time.perf_counter() - t0
            method.timed_steps += 1
        step += 1
        bar.update(1)
        if not finite:
            publisher.persist()  # the mechanism ran: the ledger counts the failed step
            what = "the released gradient is not finite" if method.private else f"loss is {loss}"
            raise TrainingError(f"{what} at step {step}: training stopped. The last good checkpoint ({ckpt.path}) "
                                f"is kept and the privacy ledger ({publisher.ledger.path}) counts the failed step; "
                                "lower trainer.lr.")
        end_epoch = step % steps_per_epoch == 0 or step == target_steps
        if step % t.log_every == 0 or end_epoch:
            rec = {"step": step, "epoch": round(step / steps_per_epoch, 4)}
            if method.publishes_loss:
                rec["loss"] = last_loss
                bar.set_postfix(loss=f"{last_loss:.4g}")
            else:  # every log line: the figure of epsilon against the epoch
                rec.update({f"eps_{a}": e for a, e in method.epsilons().items()})
                bar.set_postfix(eps=f"{method.epsilon():.3g}")
            publisher.publish(rec, step)
        if step % t.checkpoint_every == 0 or step == target_steps:
            checkpoint()
    bar.close()
    if target_steps < steps:
        stop_reason = f"privacy budget: the next step would exceed epsilon={cfg.privacy.epsilon} (moments accountant)"
    train_time = time.time() - t_start

    # ---- the real test split, once, after training -------------------------------------------
    test_ds = load_dataset(cfg.dataset.name, "test", data_root=cfg.dataset.data_root,
                           download=cfg.dataset.download, **ds_opts)
    X_test, Y_test = as_tensors(test_ds)
    test_acc = accuracy(ema.model if ema is not None else model, X_test.float(), Y_test.long(), device,
                        cfg.task.eval_batch_size)
    ts = max(1, method.timed_steps)
    timing = {k: round(1000.0 * v / ts, 3) for k, v in method.timing.items() if v > 0}
    privacy: Dict[str, Any] = {"private": method.private}
    if method.private:
        eps = method.epsilons()
        privacy.update({
            "noise_multiplier": method.noise_multiplier, "clip": method.clip, "noise_std": method.noise_std,
            "sample_rate": method.sample_rate, "sampling": "poisson", "steps_accounted": method.steps,
            "neighbouring_relation": "add/remove one record (Poisson sampling at rate q)",
            "not_covered": ("the BDP and WDP epsilons (eps_bdp, eps_wdp) are computed from private gradient pairs "
                            "and are not themselves released privately (as in the BDP/WDP papers); the DP "
                            "(moments) epsilon is data-independent; the test accuracy reads the public test split"),
            "epsilon_budget": cfg.privacy.epsilon, "epsilon_spent": method.epsilon(), "delta": cfg.privacy.delta,
            "pair_examples": method.pair_examples if method.pairwise else None,
            "pairs_per_step": method.pair_examples * (method.pair_examples - 1) // 2 if method.pairwise else None,
            "accountants": {a: {"framework": FRAMEWORK[a], "epsilon": e, "delta": method.deltas[a],
                                "attack_probability": attack_probability(e)} for a, e in eps.items()},
            "mechanism_randomness": ("OS entropy" if cfg.privacy.secret_randomness else
                                     "seeded from `seed` (reproducible): private only while the seed stays secret"),
        })
        if "wdp" in eps:
            privacy["accountants"]["wdp"].update(order=cfg.method.wdp_order, beta=cfg.method.wdp_beta)
        # cross-check of the DP ledger by independent accountants on the same (sigma, q, steps)
        from dpgen.privacy.accountants import epsilon_for

        cross = {}
        for name in cfg.privacy.cross_check:
            if name == "moments" or method.steps == 0:
                continue
            try:
                cross[name] = epsilon_for(method.noise_multiplier, method.sample_rate, method.steps,
                                          cfg.privacy.delta, sampling="poisson", accountant=name)
            except Exception as e:  # an optional library missing: say so, do not fail the run
                cross[name] = f"unavailable: {e}"
        privacy["cross_check"] = cross
    # per-step overhead of the pairwise accountants over plain DP-SGD (pairs + accountant arithmetic)
    if method.private and method.pairwise and "sgd" in timing:
        extra = {a: timing.get("pairs", 0.0) + timing.get(a, 0.0) for a in method.pairwise}
        timing["overhead_vs_dpsgd_percent"] = {a: round(100.0 * v / timing["sgd"], 2) for a, v in extra.items()}
    metrics: Dict[str, Any] = {
        "method": "dpsgd" if method.private else "sgd (non-private)",
        "dataset": cfg.dataset.name,
        "model": type(model).__name__ + f" ({model.arch}, norm={cfg.task.norm})",
        "model_parameters": count_parameters(model),
        "n_train": n, "n_test": int(X_test.shape[0]),
        "batch_size": t.batch_size, "optimizer": t.optimizer, "lr": t.lr,
        "steps": step, "steps_requested": steps, "epochs": round(step / steps_per_epoch, 4),
        "stop_reason": stop_reason,
        "final_loss": (last_loss if method.publishes_loss else
                       "withheld: the clean batch loss is computed from private records"),
        "test_acc": test_acc,
        "ema": t.ema,
        "privacy": privacy,
        "timing_ms_per_step": timing,
        "device": str(device),
        "train_seconds": round(train_time, 2),
        "steps_per_second": round(method.timed_steps / max(1e-9, sum(method.timing.values())), 3),
        "checkpoint": str(ckpt.path),
        "wall_seconds": round(time.time() - t_start, 2),
    }
    write_json(out / "metrics.json", metrics)
    publisher.finish()
    return metrics


def run_classification(cfg, output_dir: Path | None = None) -> Dict[str, Any]:
    from dpgen.utils.run_dir import start_run_dir

    out = start_run_dir(cfg, output_dir, "classification")
    m = train_classifier(cfg, out)
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
    return m
