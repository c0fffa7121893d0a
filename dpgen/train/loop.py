"""The one training loop: ``fit(cfg, task, output_dir)`` for every task and every method.

A *task* (``dpgen.tasks``: generation, classification, domain_adaptation) says what the data are,
which networks are trained, how a step's batch is built, how the result is evaluated and what is
summarised (:class:`Task`). A *method* (``dpgen.methods``) implements one contract
(:class:`dpgen.methods.base.Method`): ``sample_batch`` (the sampling its accountant assumes),
``step(models, batch)`` (sets the gradients, the privacy mechanism inside; returns what it may
publish), ``account()`` and its ledger. This loop alone owns the rest:

* ``trainer.device=auto`` (CUDA when present), ``seed`` for models and public randomness; the
  mechanism's randomness (which records a batch holds, directions, noise) from OS entropy unless
  ``privacy.secret_randomness=false`` (:func:`dpgen.train.state.mechanism_generators`);
* the budget: a private method's ledger knows how many steps its (epsilon, delta) allows; the run
  stops before a step that would exceed it, counting the steps its ledger already holds, and
  records why it stopped (``stop_reason``);
* a non-finite step stops the run with the step number: the test reads a released quantity (the
  published loss, else the released gradient), kept on the device and read before the next log
  line or checkpoint (no host sync per step); every step that ran is charged in the ledger file
  and the last good checkpoint is kept;
* ``trainer.ema``: an average of the trained networks, evaluated instead of the last iterate
  (post-processing of the released iterates: no privacy cost);
* publication (:mod:`dpgen.train.publication`): the ledger is on disk before a line reaches
  ``metrics.jsonl`` or the csv / tensorboard / wandb logger, and before each checkpoint; a method
  whose loss is computed from clean private records publishes none;
* a checkpoint at step 0 (every task; after a release made before training), then every
  ``trainer.checkpoint_every`` steps and at the end, atomic: the networks, the
  optimizer, the EMA, the method (its ledger), RNG states, the privacy settings the ledger was spent
  under; ``resume=true|auto`` continues with the checkpoint's noise and refuses changed privacy
  settings, naming them; ``resume=true|auto`` without a checkpoint continues the ledger file of an
  attempt that died before its first checkpoint (its published steps stay charged); a fresh start
  removes what an earlier run published in the folder with its ledger; a resume that trains again
  removes the earlier sitting's final results (``metrics.json``, ...: dpgen.train.run_record) before its
  first step, and a finished run resumed without more steps is left as it is (no second evaluation);
* every checkpoint holds the privacy report of its weights (``privacy``), which a release states;
* SIGINT (Ctrl-C), SIGTERM and SLURM's SIGUSR2 end the current step, write a checkpoint with its
  ledger and exit (dpgen.train.signals): no step is charged that the checkpoint does not hold;
* values read from the device only at log and checkpoint steps.

The run folder, whoever calls ``fit`` (``run.py``, a table driver, a figure): ``config.yaml``, ``metrics.jsonl``,
``metrics.json`` (the task's evaluation + the common fields below), ``checkpoints/``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, Optional

import torch

from dpgen.train.checkpoint import Checkpointer
from dpgen.train.publication import Publisher, carried_ledger, stop_step
from dpgen.train.run_record import read_run, remove_final_results
from dpgen.train.state import (EMA, TrainingError, fresh_folder, load_checkpoint, make_optimizer,
                                 mechanism_generators, open_run, prepare_resume, run_state, seed_everything)
from dpgen.utils.device import resolve_device
from dpgen.utils.io import write_json


class Task:
    """What a trainable task gives the loop. Subclasses set ``name`` and implement the hooks."""

    name = "task"
    #: ``task.*`` fields that change the mechanism (refused on resume when changed)
    task_keys: tuple = ()
    #: the private set's size n as DECLARED (``dataset.n_train``: public; set by ``setup``): q = B / n, the
    #: steps of an epoch, the noise, ``n_synthetic`` and every published count use it
    n_private: int = 0
    #: how many records were loaded (set by ``setup``): used to index them (a Poisson batch samples each
    #: at the declared q) and to refuse a replace-one run whose set differs from n; never published
    n_records: int = 0

    # ---- hooks ---------------------------------------------------------------------------------
    def setup(self, cfg, device) -> None:
        """Load the data onto ``device``; set ``n_private`` (the declared size) and ``n_records`` (loaded)."""
        raise NotImplementedError

    def requested_steps(self, cfg) -> int:
        """``trainer.steps``, else ``trainer.epochs`` epochs of ceil(n_private / B) steps."""
        from dpgen.privacy.calibration import steps_for_epochs

        t = cfg.trainer
        return int(t.steps) if t.steps is not None else steps_for_epochs(self.n_private, t.batch_size, t.epochs)

    def build(self, cfg, steps: int, device):
        """(method, {name: trained network}) for a run whose noise is calibrated for ``steps``."""
        raise NotImplementedError

    def prepare(self, method, output_dir: Path) -> bool:
        """Before the first step: put the data where training reads them, and make the method's release
        before training if it has one (e.g. a DP mean; the step-0 checkpoint holds it). True when the
        data were transformed or released here."""
        return False

    def next_batch(self, method, sampler_gen: torch.Generator, step: int, target_steps: int):
        """This step's batch (the method samples the private records), or None to skip the step."""
        raise NotImplementedError

    def should_log(self, step: int) -> bool:
        """Extra log points besides every ``trainer.log_every`` steps (e.g. each epoch's end)."""
        return False

    def log_fields(self, step: int, last: bool, method, models) -> Dict[str, Any]:
        """Fields a log line adds (default: epsilon every tenth line and at the end)."""
        every = self.cfg.trainer.log_every * 10
        return {"epsilon": method.epsilon()} if method.private and (step % every == 0 or last) else {}

    def evaluation_estimate(self, cfg) -> "tuple[float, str]":
        """(rough seconds, a description) of what ``evaluate`` will do, for the long-run notice."""
        return 0.0, ""

    #: the overrides the long-run notice suggests for a quick run of this task
    quick_overrides = "trainer.steps=<fewer>"

    def evaluate(self, cfg, models, method, device, output_dir: Path) -> Dict[str, Any]:
        """The task's metrics of the trained (or averaged) networks, after training."""
        return {}

    def summary(self, metrics: Dict[str, Any], output_dir: Path) -> None:
        """Print what a user reads at the end of a run."""

    # ---- running -------------------------------------------------------------------------------
    @classmethod
    def run(cls, cfg, output_dir: Optional[Path] = None) -> Dict[str, Any]:
        """Run the task in a fresh (or resumed) run folder with ``config.yaml``; print the summary."""
        out = Path(output_dir) if output_dir is not None else Path("outputs") / cls.name
        task = cls()
        metrics = fit(cfg, task, out)
        task.summary(metrics, out)
        return metrics


def _loggable(v) -> Any:
    return float(v) if isinstance(v, torch.Tensor) else v


def check_declared_size(cfg, method, task: Task) -> None:
    """The dataset size n is public: ``dataset.n_train`` declares it, and q = B / n, the steps of an epoch,
    the calibrated noise, ``n_synthetic`` and every published count take that number, never the loaded one.

    * Poisson methods (add/remove one record): sampling each loaded record at the declared q is
      add/remove-DP whatever the loaded size, so the loaded size is never compared with n. Refusing a run
      whose set has another size would itself tell D (n records) from D plus one record with certainty.
    * Replace-one methods (fixed-size batches without replacement, full-batch releases): neighbours have the
      same size, so a set of another size than the declared n is refused (the refusal tells no two
      neighbours apart); the message does not say the loaded size.
    * Local mechanisms (``accounts_steps = False``: each record privatised once, entropic-LDP): their guarantee
      does not involve n, so nothing is compared."""
    if not method.private or method.sampling == "poisson" or not method.accounts_steps:
        return
    declared = int(cfg.dataset.n_train)
    if int(task.n_records) != declared:
        raise ValueError(
            f"dataset.n_train={declared} is not the size of the private set dataset={cfg.dataset.name} loaded. "
            f"{cfg.method.name}'s guarantee (replace one record: batches of a fixed size drawn without replacement "
            "from n records) computes its sampling rate from the declared n: set dataset.n_train to the number of "
            "records in the files (the loaded size is not printed: it is computed from the private data).")


def size_is_public(report: Dict[str, Any], method, n: int) -> Dict[str, Any]:
    """Every private report says how it treats the dataset size n (which its q, steps and noise depend on)."""
    if not report.get("private"):
        return report
    poisson = getattr(method, "sampling", None) == "poisson"
    return {**report, "dataset_size": (
        f"n = {int(n)} records, declared as dataset.n_train and treated as public: "
        + ("q = B / n, the epochs, the steps, the noise and every published count use this declared n, never the "
           "size of the loaded set; each loaded record is sampled independently at rate q, which is add/remove-DP "
           "whatever that size is (a set with one record more or less runs the same way)" if poisson else
           "replace-one neighbours have the same n (the relation fixes it; a set of another size is refused); q, "
           "the epochs, the steps and the noise depend on it"))}


#: what no privacy report covers: the time a step takes depends on its realised (Poisson) batch
WALL_CLOCK_NOT_COVERED = ("wall-clock timings (train_seconds, loop_seconds, steps_per_second, the long-run notice, "
                          "the progress bar's rate, eval_seconds): a step's time grows with the size of its sampled "
                          "batch, so they depend slightly on the private data")


def add_not_covered(report: Dict[str, Any], extra: str) -> Dict[str, Any]:
    """``report`` with ``extra`` appended to its ``not_covered`` (a list or a string)."""
    nc = report.get("not_covered")
    if isinstance(nc, list):
        nc = [*nc, extra]
    else:
        nc = f"{nc}; {extra}" if nc else extra
    return {**report, "not_covered": nc}


def selection_not_covered(report: Dict[str, Any], cfg) -> Dict[str, Any]:
    """A run whose settings were chosen on the private data or its test split (``privacy.selected_on_private``,
    set by a conf/tuned/ preset) says so under not_covered: that selection is charged to no ledger."""
    note = getattr(cfg.privacy, "selected_on_private", None)
    if not report.get("private") or not note:
        return report
    return {**add_not_covered(report, f"the choice of this run's settings: {note} (charged to no ledger)"),
            "settings_selected_on_private_data": note}


def within_budget(report: Dict[str, Any]) -> Dict[str, Any]:
    """A privacy report that says the guarantee does not hold when the ledger ended above its budget (no path
    of the loop lets that happen; this is the last line of defence)."""
    spent, budget = report.get("epsilon_spent"), report.get("epsilon_budget")
    if isinstance(spent, (int, float)) and isinstance(budget, (int, float)) and spent > budget * (1 + 1e-9):
        report = dict(report)
        report["guarantee_holds"] = False
        report["guarantee_caveats"] = [*(report.get("guarantee_caveats") or []),
                                       f"the ledger spent epsilon {spent:.6g}, above the budget {budget:g}"]
    return report


def privacy_block(cfg, method, n: int) -> Dict[str, Any]:
    """The privacy report a run states, the same in ``metrics.json`` and in every checkpoint (whose record a
    release, a sweep row and a table cell read: dpgen.train.run_record): the method's report, how it treats
    the dataset size ``n`` (the declared one), what it does not cover, and where its randomness comes from."""
    report = size_is_public(method.privacy_report(), method, n)
    if report.get("private"):
        report = add_not_covered(report, WALL_CLOCK_NOT_COVERED)
    return {**within_budget(selection_not_covered(report, cfg)), "mechanism_randomness": (
        "OS entropy: batch sampling, directions and noise are unpredictable from the public seed"
        if cfg.privacy.secret_randomness else
        "seeded from `seed` (reproducible): the guarantee holds only while the seed stays secret")}


#: a run expected to take longer than this (training left + evaluation) says so after its first steps
LONG_RUN_S = 600.0
#: the long-run notice times NOTICE_STEPS steps after the first NOTICE_WARMUP (one-time costs: CUDA context, caches)
NOTICE_WARMUP, NOTICE_STEPS = 10, 20


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def long_run_notice(cfg, task: "Task", steps_left: int, s_per_step: float) -> Optional[str]:
    """The notice printed after a run's first steps when it will take more than :data:`LONG_RUN_S`:
    the steps left at the measured speed, the evaluation that follows, the quick-run overrides.
    Timing and step counts only (public): nothing computed from the private records."""
    train_s = steps_left * s_per_step
    eval_s, eval_what = task.evaluation_estimate(cfg)
    if train_s + eval_s <= LONG_RUN_S:
        return None
    return (f"[dpgen] this run will take about {(train_s + eval_s) / 60:.0f} min: {steps_left:,} more steps at "
            f"{s_per_step:.3g} s/step (measured) = {train_s / 60:.1f} min of training"
            + (f", then {eval_what}" + (f" (about {eval_s / 60:.1f} min)" if eval_s else " (its time is estimated "
                                          "on a CPU only)") if eval_what else "")
            + f". A quick run: {task.quick_overrides}; "
            "a long run survives interruptions with resume=auto (README, Quick runs).")


def fit(cfg, task: Task, output_dir) -> Dict[str, Any]:
    """Train ``cfg.method`` on ``task``; evaluate; write the run's files. Returns ``metrics.json``."""
    from dpgen.utils.run_dir import holding_run_dir, run_folder
    from dpgen.utils.threads import ThreadShare

    refuse_resume_without_checkpoint(cfg, output_dir)  # before the lock creates the folder
    # one live process per run folder, however the run was started (the CLI claimed it already)
    with holding_run_dir(run_folder(output_dir, task.name)), ThreadShare(cfg.trainer.threads) as threads:
        return _fit(cfg, task, output_dir, threads)


def refuse_resume_without_checkpoint(cfg, output_dir) -> None:
    """``resume=true`` continues a run: a folder with neither a checkpoint nor a ledger file (a mistyped
    folder) is refused before anything is written, so that no fresh budget is spent by mistake there;
    ``resume=auto`` is the lenient one (it starts a run where there is none)."""
    from dpgen.train.publication import LEDGER_NAME

    if cfg.resume is not True or output_dir is None:
        return
    ckpts = Path(output_dir) / "checkpoints"
    if not (ckpts / "last.pt").exists() and not (ckpts / LEDGER_NAME).exists():
        raise ValueError(f"resume=true, but {output_dir} holds no checkpoint ({ckpts / 'last.pt'}): there is no run "
                         "to continue. Give the run's folder (hydra.run.dir=<its folder>), or use resume=auto, which "
                         "starts a new run where there is none.")


def _fit(cfg, task: Task, output_dir, threads) -> Dict[str, Any]:
    from tqdm.auto import tqdm

    from dpgen.train.signals import StopRequest
    from dpgen.utils.run_dir import start_run_dir

    t_start = time.time()
    out = start_run_dir(cfg, output_dir, task.name)  # created, with the run's config.yaml
    t = cfg.trainer
    task.cfg = cfg
    device = resolve_device(t.device)
    seed_everything(cfg.seed)  # models, generated codes and labels, public batches: from the seed
    sampler_gen, noise_gen = mechanism_generators(cfg, device)
    task.setup(cfg, device)
    if t.batch_size > task.n_private:  # the declared (public) size
        raise ValueError(f"trainer.batch_size={t.batch_size} is larger than the private set (dataset.n_train="
                         f"{task.n_private} records): lower trainer.batch_size.")
    steps = task.requested_steps(cfg)
    ckpt = Checkpointer(out / "checkpoints")
    state = load_checkpoint(cfg, ckpt)
    # no checkpoint: an earlier attempt's ledger that counts steps is continued, else the folder starts over
    carried = carried_ledger(cfg, out) if state is None else None
    if state is None and carried is None:
        fresh_folder(out)
    calib_steps, settings = prepare_resume(state if state is not None else carried, steps, cfg,
                                           n_private=task.n_private, task_keys=task.task_keys)
    method, models = task.build(cfg, calib_steps, device)
    check_declared_size(cfg, method, task)
    method.rng = noise_gen  # the mechanism's randomness (also for a release before training)
    nets = torch.nn.ModuleDict(models)
    params = list(nets.parameters()) + list(method.parameters())
    opt = make_optimizer(t, params)
    ema = EMA(nets, t.ema) if t.ema else None
    publisher = Publisher(cfg, out, method, settings)  # its logger opens at the first record
    if state is not None:
        nets.load_state_dict(state["models"])
        opt.load_state_dict(state["optimizer"])
        if ema is not None and state.get("ema") is not None:
            ema.model.load_state_dict(state["ema"])
    step = open_run(cfg, state, publisher, method, sampler_gen, noise_gen, carried=carried)
    if state is not None:
        print(f"[dpgen] resumed from {ckpt.path} at step {step} (epsilon spent so far {method.epsilon():.4f})")
    # the earlier attempts' clocks and last published record: a resumed run's metrics cover the whole run
    before = dict((state or {}).get("elapsed") or {})
    clock = {"loop_t0": None, "step0": step}

    def elapsed() -> Dict[str, Any]:
        loop_s = time.time() - clock["loop_t0"] if clock["loop_t0"] is not None else 0.0
        return {"train_seconds": before.get("train_seconds", 0.0) + time.time() - t_start,
                "loop_seconds": before.get("loop_seconds", 0.0) + loop_s,
                "loop_steps": before.get("loop_steps", 0) + step - clock["step0"],
                "last_logs": last_logs or before.get("last_logs", {}), "attempts": before.get("attempts", 0) + 1}

    def checkpoint(full: bool = True):
        # the privacy of these weights goes into the same file (what a release, a sweep row or a table cell
        # states: dpgen.train.run_record), computed after the ledger has counted the step; a periodic checkpoint
        # records the step count only (the whole report costs an accountant call, ~0.7 s under PLD, and only the
        # last step's weights are released; an interrupted run's epsilon is computed from its ledger when read)
        record = (privacy_block(cfg, method, task.n_private) if full else
                  {"partial": True, "private": bool(method.private), "private_steps": method.spent_steps()})
        publisher.checkpoint(lambda: ckpt.save(run_state(
            cfg, step, sampler_gen, noise_gen, settings, models=nets.state_dict(), optimizer=opt.state_dict(),
            method=method.state_dict(), ema=ema.model.state_dict() if ema is not None else None,
            elapsed=elapsed(), privacy=record)))

    task.prepare(method, out)  # a release before training (a DP mean), if the method makes one
    # a checkpoint at step 0 for every task, before anything is published (what was released before training is
    # in it): a run killed before its next checkpoint resumes with its ledger, and what it published stays charged
    last_logs: Dict[str, Any] = {}
    if state is None:
        checkpoint()
    # after the releases before training: the steps left are computed from the ledger's whole history
    target_steps = stop_step(method, step, steps, method.max_steps)
    if state is not None:
        if target_steps <= step:  # a finished run resumed without more steps: its results stay as they are
            done = read_run(out, state=state).metrics
            if done is not None:
                print(f"[dpgen] {out} has finished (step {step}, epsilon spent {method.epsilon():.4f}): there is "
                      "nothing left to train" + ("" if step >= steps else " within the budget") + ", so its results "
                      "are left as they are. Raise trainer.steps to train longer; `dpgen sample` and task=evaluate "
                      "evaluate a released set again.")
                (ema.model if ema is not None else nets).eval()  # as after training: a caller may sample from it
                return done
        else:  # training continues: what the earlier sitting wrote at its end describes older weights
            removed = remove_final_results(out)
            if removed:
                print(f"[dpgen] training continues from step {step}: removed {', '.join(removed)} (written when an "
                      "earlier sitting ended, they describe older weights; this run writes its own when it ends)")
    if target_steps < steps:
        print(f"[dpgen] the budget allows {target_steps} of the {steps} steps asked: training stops there")
    publisher.logger  # opened before the first step: a logger that cannot start stops the run before it spends
    bar = tqdm(total=target_steps, initial=step, desc=f"{cfg.method.name} on {cfg.dataset.name}",
               disable=not t.progress, dynamic_ncols=True)
    nets.train()
    logs: Dict[str, Any] = {}
    first_bad = torch.zeros((), dtype=torch.long, device=device)
    step0, t_loop = step, time.time()
    clock.update(loop_t0=t_loop, step0=step)
    warned, t_warm = False, None
    # SIGUSR2 (SLURM's time-limit / preemption warning through submitit), SIGTERM and Ctrl-C are held until the
    # step ends; the checkpoint (and its ledger) is written, then the run hands over
    resume_hint = f"resume=auto hydra.run.dir={out}"
    with StopRequest() as stop:
        while step < target_steps:
            threads.rebalance()
            # the run's own speed, timed over steps 10-30 after its start: the first steps carry one-time costs
            # (on an H200 timing from step 0 said 0.031 s/step for a run that trained at 0.0035). One device
            # synchronisation at each end of that window, once per run, so that queued GPU work is counted.
            if t_warm is None and step - step0 >= NOTICE_WARMUP:
                _sync(device)
                t_warm, s_warm = time.time(), step
            elif not warned and t_warm is not None and step - s_warm >= NOTICE_STEPS:
                warned = True
                _sync(device)
                note = long_run_notice(cfg, task, target_steps - step, (time.time() - t_warm) / (step - s_warm))
                if note:
                    bar.write(note)
            batch = task.next_batch(method, sampler_gen, step, target_steps)
            if batch is None:  # nothing to learn from and no mechanism to run (an empty non-private batch)
                step += 1
                bar.update(1)
                continue
            opt.zero_grad(set_to_none=True)
            logs = method.step(models, batch)
            # the first step whose released value was not finite, kept on the device (no host sync per step)
            ok = method.released_finite(logs, params).to(first_bad.device, non_blocking=True)
            first_bad = torch.where(ok | (first_bad > 0), first_bad, torch.full_like(first_bad, step + 1))
            opt.step()
            if ema is not None:
                ema.update(nets)
            method.account()  # the mechanism ran, finite or not: the ledger counts it
            step += 1
            bar.update(1)
            last = step == target_steps
            publish = step % t.log_every == 0 or last or task.should_log(step)
            if (publish or step % t.checkpoint_every == 0 or stop.requested) and int(first_bad) > 0:  # read first
                publisher.persist()
                what = ("the published loss" if method.publishes_loss and "loss" in logs else "the released gradient")
                raise TrainingError(
                    f"{what} is not finite at step {int(first_bad)}: training stopped at step {step}. The last good "
                    f"checkpoint ({ckpt.path}) is kept and the privacy ledger ({publisher.ledger.path}) counts every "
                    "step that ran; lower trainer.lr or check the data.")
            if publish:
                last_logs = {k: _loggable(v) for k, v in logs.items()} if method.publishes_loss else {}
                rec = {"step": step, **last_logs,
                       **task.log_fields(step, last, method, ema.model if ema is not None else nets)}
                publisher.publish(rec, step)
                if "loss" in last_logs:
                    bar.set_postfix(loss=f"{last_logs['loss']:.4g}")
            if step % t.checkpoint_every == 0 or last or stop.requested:
                checkpoint(full=last or stop.requested)
            if stop.requested and not last:  # a cluster's time-limit warning: the checkpoint is written, hand over
                bar.close()
                stop.hand_over(step, ckpt.path, resume_hint)
    if stop.requested:  # it came during the last step: the final checkpoint is written, hand over
        bar.close()
        stop.hand_over(step, ckpt.path, resume_hint)
    bar.close()
    whole = elapsed()  # this attempt and the earlier ones
    last_logs = whole["last_logs"]
    done = target_steps >= steps or (method.private and method.accounts_steps and method.spent_steps() >= steps)
    stop_reason = ("completed" if done else
                   f"privacy budget: the next step would exceed epsilon={cfg.privacy.epsilon}")
    evaluated = ema.model if ema is not None else nets  # the average: post-processing, no privacy cost
    evaluated.eval()
    metrics: Dict[str, Any] = {
        "task": task.name,
        "method": cfg.method.name,
        "dataset": cfg.dataset.name,
        "steps": step,
        "steps_requested": steps,
        "epochs": round(step / max(1, -(-task.n_private // t.batch_size)), 4),
        "stop_reason": stop_reason,
        "final_loss": (last_logs.get("loss", float("nan")) if method.publishes_loss else
                       "withheld: computed from clean private records (only the noisy gradient is released)"),
        "final_logs": last_logs,
        "n_private": task.n_private,  # the declared size (public)
        "batch_size": t.batch_size,
        "ema": t.ema,
        "seed": cfg.seed,
        "device": str(device),
        "privacy": privacy_block(cfg, method, task.n_private),
        "train_seconds": round(whole["train_seconds"], 2),
        "loop_seconds": round(whole["loop_seconds"], 2),
        "steps_per_second": (round(whole["loop_steps"] / whole["loop_seconds"], 3)
                             if whole["loop_seconds"] > 0 and whole["loop_steps"] > 0 else None),
        "attempts": whole["attempts"],
        "checkpoint": str(ckpt.path),
    }
    threads.rebalance()
    t_eval = time.time()
    metrics.update(task.evaluate(cfg, evaluated, method, device, out))
    metrics["eval_seconds"] = round(time.time() - t_eval, 2)
    metrics["threads"] = threads.describe()
    metrics["wall_seconds"] = round(before.get("train_seconds", 0.0) + time.time() - t_start, 2)
    write_json(out / "metrics.json", metrics)
    publisher.finish(metrics)
    return metrics


__all__ = ["Task", "fit"]
