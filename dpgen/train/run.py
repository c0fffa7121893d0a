"""A run and its home: :class:`Run` owns one run folder and everything that happens to it.

The folder (created with its ``config.yaml``; its lock is held by ``fit``), the device, seeds and the
mechanism's generators, the task's data, the method and its networks, the optimizer, the EMA, the ledger file,
the checkpoints, resuming (the privacy settings check, the noise stream, a ledger carried from an attempt that
died before its first checkpoint), publication and the final ``metrics.json``.

Its one invariant: **the ledger is on disk before anything from a step is published** (a ``metrics.jsonl`` line,
a logger record, a checkpoint, ``metrics.json``): every write goes through :class:`~dpgen.train.publication.Publisher`,
which persists the ledger first, and a step is accounted (``method.account()``) before :meth:`Run.after_step`
publishes it. ``tests/privacy/test_ledger_faults.py`` checks the invariant in one place, on every path (resume,
crash, kill, requeue, full batch).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, Optional

import torch

from dpgen.train.checkpoint import Checkpointer, rng_state, set_rng_state
from dpgen.train.publication import (Publisher, calibration_steps, carried_ledger, check_resume_settings,
                                     privacy_settings, remove_run_artefacts, stop_step)
from dpgen.train.run_record import read_run, remove_final_results
from dpgen.train.state import EMA, TrainingError, make_optimizer, mechanism_generators, seed_everything
from dpgen.utils.device import resolve_device
from dpgen.utils.io import atomic_write_text, write_json


# ---- checkpoints and resuming -------------------------------------------------------------------------------
def load_checkpoint(cfg, ckpt):
    """The checkpoint's state when ``resume=true|auto`` and one exists, else None (a fresh start)."""
    if cfg.resume and ckpt.exists():
        return ckpt.load()
    # (resume=true without a checkpoint or a ledger file was refused before the folder was touched:
    # dpgen.train.loop.refuse_resume_without_checkpoint; resume=auto starts quietly)
    return None


def prepare_resume(state, requested_steps: int, cfg, **settings_kw):
    """(steps to calibrate the noise for, privacy settings of the run). A resumed run keeps its
    checkpoint's calibration (its noise was released) and refuses changed privacy settings."""
    steps = calibration_steps(state, requested_steps)
    settings = privacy_settings(cfg, calibration_steps=steps, **settings_kw)
    if state is not None:
        check_resume_settings(state["privacy_settings"], settings)
    return steps, settings


def restore_noise_stream(noise_gen: torch.Generator, saved: torch.Tensor, seed: int, step: int) -> bool:
    """Continue a seeded run's noise stream from a checkpoint's generator state ``saved``; True when it
    did. A state saved on another kind of device (a CUDA generator's 16-byte Philox seed and offset
    against a CPU generator's Mersenne Twister state, or the reverse) cannot be set: the stream then
    restarts from a seed derived from the run's seed and ``step`` (False). A restart from the run's own
    seed would be the wrong choice: on the same device it replays the noise of the first steps, and
    noise used twice cancels in the difference of the two releases."""
    if saved.numel() == noise_gen.get_state().numel():
        noise_gen.set_state(saved)
        return True
    import hashlib

    digest = hashlib.sha256(f"dpgen noise stream, seed {int(seed)}, resumed at step {int(step)}".encode()).digest()
    noise_gen.manual_seed(int.from_bytes(digest[:8], "little") & (2 ** 63 - 1))
    return False


def open_run(cfg, state, publisher, method, sampler_gen, noise_gen, carried=None) -> int:
    """Start or continue a run; returns its step. With a checkpoint ``state`` (the caller has loaded
    its modules): the run's RNG (and, when not secret, the mechanism's) restored, ``metrics.jsonl``
    cut back to its step, the method's state loaded and its ledger brought up to the newest one on
    disk (steps published after the checkpoint count). Without a checkpoint but with ``carried``, the
    ledger file of an attempt that died before its first checkpoint
    (:func:`dpgen.train.publication.carried_ledger`): training starts at step 0 and the ledger
    continues from it, so what that attempt published stays charged. Otherwise a fresh start (the
    caller has removed what an earlier run left in the folder: :func:`fresh_folder`)."""
    if state is None:
        if carried is not None:
            method.load_ledger_state(carried["ledger"])
            print(f"[dpgen] {publisher.ledger.path} holds {method.spent_steps()} mechanism steps of an attempt that "
                  "stopped before its first checkpoint: training starts over and the ledger continues from them "
                  f"(epsilon spent so far {method.epsilon():.4f})")
        return 0
    set_rng_state(state["rng"])
    if not cfg.privacy.secret_randomness and "mechanism_rng" in state:
        sampler_gen.set_state(state["mechanism_rng"]["sampler"])
        if not restore_noise_stream(noise_gen, state["mechanism_rng"]["noise"], cfg.seed, int(state["step"])):
            print(f"[dpgen] the checkpoint's mechanism noise was drawn on another kind of device than this run's "
                  f"{noise_gen.device.type} (a run moved between a GPU and a CPU): its generator state cannot "
                  "continue here, so the noise continues from a new stream seeded from the seed and the step (no "
                  "earlier draw is replayed); the run is not bit-identical to an uninterrupted one")
    _truncate_jsonl(publisher.jsonl, int(state["step"]))
    method.load_state_dict(state["method"])
    publisher.ledger.reconcile(method)
    return int(state["step"])


def fresh_folder(output_dir) -> None:
    """A fresh start: remove what an earlier run published in ``output_dir`` together with its ledger
    (:func:`dpgen.train.publication.remove_run_artefacts`), before any logger opens its files, so that
    nothing in the folder outlives the ledger that charged it."""
    removed = remove_run_artefacts(output_dir)
    if removed:
        print(f"[dpgen] a fresh start in {output_dir}: removed the earlier run's {', '.join(removed)}")


def run_state(cfg, step: int, sampler_gen, noise_gen, settings, **parts) -> dict:
    """A checkpoint: ``parts`` (state dicts), the privacy settings its ledger was spent under, the
    run's RNG state and step, and the mechanism's RNG only when it is not secret (reproducible runs)."""

    return {**parts, "rng": rng_state(), "step": step, "privacy_settings": settings,
            **({} if cfg.privacy.secret_randomness else
               {"mechanism_rng": {"sampler": sampler_gen.get_state(), "noise": noise_gen.get_state()}})}


def _truncate_jsonl(path: Path, max_step: int) -> None:
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line).get("step", 0) <= max_step:
                keep.append(line)
        except json.JSONDecodeError:
            break  # a torn last line from a kill: drop it and what follows
    atomic_write_text(path, "".join(l + "\n" for l in keep))


def _loggable(v) -> Any:
    return float(v) if isinstance(v, torch.Tensor) else v


def check_declared_size(cfg, method, task) -> None:
    """The dataset size n is public: ``dataset.n_train`` declares it, and q = B / n, the steps of an epoch,
    the calibrated noise, ``n_synthetic`` and every published count take that number, never the loaded one.

    * Poisson methods (add/remove one record): sampling each loaded record at the declared q is
      add/remove-DP whatever the loaded size, so the loaded size is never compared with n. Refusing a run
      whose set has another size would itself tell D (n records) from D plus one record with certainty.
    * Replace-one methods (fixed-size batches without replacement, full-batch releases): neighbours have the
      same size, so a set of another size than the declared n is refused (the refusal tells no two
      neighbours apart); the message does not say the loaded size.
    * Local mechanisms (``local = True``: each record privatised once, entropic-LDP): their guarantee
      does not involve n, so nothing is compared.

    A held-out part (``dataset.validation``) composes with the run in parallel only under add/remove, so every
    private method whose neighbours replace one record is refused with it: the replace-one methods above (a
    full-batch release such as DP-MERF's mean included) and the local ones (a replaced record that moves to the
    held-out part is no longer released at all, which its "any two values of one record" does not cover)."""
    holdout = float(getattr(cfg.dataset, "validation", 0.0) or 0.0)
    if holdout > 0 and method.private and method.sampling != "poisson":
        raise ValueError(
            f"dataset.validation={holdout:g} with {cfg.method.name}, whose neighbours replace one record (it "
            "samples without replacement, releases the whole set once, or privatises each record locally): a "
            "replaced record may move between the training and the validation part, so the two parts would not "
            "compose in parallel. Use a Poisson-sampling method (method.sampling=poisson where it has one), or set "
            "dataset.validation=0.")
    if not method.private or method.sampling == "poisson" or getattr(method, "local", False):
        return
    declared = int(cfg.dataset.n_train)
    if int(task.n_records) != declared:
        raise ValueError(
            f"dataset.n_train={declared} is not the size of the private set dataset={cfg.dataset.name} loaded. "
            f"{cfg.method.name}'s guarantee (replace one record: batches of a fixed size drawn without replacement "
            "from n records, or one release of the whole set) computes its sampling rate or its sensitivity from the "
            "declared n: set dataset.n_train to the number of records in the files (the loaded size is not printed: "
            "it is computed from the private data).")


def size_is_public(report: Dict[str, Any], method, n: int) -> Dict[str, Any]:
    """Every private report says how it treats the dataset size n (which its q, steps and noise depend on)."""
    if not report.get("private"):
        return report
    poisson = method.sampling == "poisson"
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


#: what a report does not cover when the record count was counted from the data rather than declared
COUNTED_N_NOT_COVERED = ("the record count n = {n}: counted from dataset.path={path} (dataset.n_train=0), not "
                         "declared, and published as public; a set with one record more or less counts another n. "
                         "Declare dataset.n_train=<n> to keep the count out of the data")


#: what a run trained beside a validation split says (dataset.validation)
HOLDOUT_TEXT = ("dataset.validation={f:g}: the records whose public hash (dpgen.data.holdout) falls below {f:g} are "
                "held out and never read by this run; it trains on the rest. A selection mechanism that reads only "
                "the held-out part (scripts/select_on_validation.py) composes with this run in parallel under "
                "add/remove: the pair's epsilon is the larger of the two, which its selection.json states")


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
        if getattr(cfg.dataset, "n_train_counted", False):  # your own data, dataset.n_train=0
            report = add_not_covered(report, COUNTED_N_NOT_COVERED.format(n=int(n), path=cfg.dataset.path))
        holdout = float(getattr(cfg.dataset, "validation", 0.0) or 0.0)
        if holdout > 0:
            report = {**report, "validation_holdout": HOLDOUT_TEXT.format(f=holdout)}
    return {**within_budget(selection_not_covered(report, cfg)), "mechanism_randomness": (
        "OS entropy: batch sampling, directions and noise are unpredictable from the public seed"
        if cfg.privacy.secret_randomness else
        "seeded from `seed` (reproducible): the guarantee holds only while the seed stays secret")}


class Run:
    """One run, fresh or resumed, from its folder to its ``metrics.json``.

    Built in the order a run must happen: the folder, the data, the checkpoint (if resuming), the method
    calibrated for the run's steps, the state restored, the release before training and the step-0
    checkpoint. Then :meth:`finished` (a finished run resumed without more steps), the loop
    (:func:`dpgen.train.loop.fit`: :meth:`after_step` after each accounted step) and :meth:`finish`."""

    def __init__(self, cfg, task, output_dir, threads) -> None:
        from dpgen.utils.run_dir import start_run_dir

        self.t_start = time.time()
        self.cfg, self.task, self.threads = cfg, task, threads
        self.out = start_run_dir(cfg, output_dir, task.name)  # created, with the run's config.yaml
        t = cfg.trainer
        task.cfg = cfg
        self.device = resolve_device(t.device)
        seed_everything(cfg.seed)  # models, generated codes and labels, public batches: from the seed
        self.sampler_gen, self.noise_gen = mechanism_generators(cfg, self.device)
        task.setup(cfg, self.device)
        if t.batch_size > task.n_private:  # the declared (public) size
            raise ValueError(f"trainer.batch_size={t.batch_size} is larger than the private set (dataset.n_train="
                             f"{task.n_private} records): lower trainer.batch_size.")
        self.steps = task.requested_steps(cfg)
        self.ckpt = Checkpointer(self.out / "checkpoints")
        self.state = load_checkpoint(cfg, self.ckpt)
        # no checkpoint: an earlier attempt's ledger that counts steps is continued, else the folder starts over
        self.carried = carried_ledger(cfg, self.out) if self.state is None else None
        if self.state is None and self.carried is None:
            fresh_folder(self.out)
        calib_steps, self.settings = prepare_resume(self.state if self.state is not None else self.carried,
                                                    self.steps, cfg, n_private=task.n_private,
                                                    task_keys=task.task_keys)
        self.method, self.models = task.build(cfg, calib_steps, self.device)
        check_declared_size(cfg, self.method, task)
        self.method.rng = self.noise_gen  # the mechanism's randomness (also for a release before training)
        self.nets = torch.nn.ModuleDict(self.models)
        self.params = list(self.nets.parameters()) + list(self.method.parameters())
        self.opt = make_optimizer(t, self.params)
        self.ema = EMA(self.nets, t.ema) if t.ema else None
        self.publisher = Publisher(cfg, self.out, self.method, self.settings)  # its logger opens at the first record
        self._restore()
        # the earlier attempts' clocks and last published record: a resumed run's metrics cover the whole run
        self.before = dict((self.state or {}).get("elapsed") or {})
        self.loop_t0: Optional[float] = None
        self.step0 = self.step
        self.last_logs: Dict[str, Any] = {}
        task.prepare(self.method, self.out)  # a release before training (a DP mean), if the method makes one
        # a checkpoint at step 0 for every task, before anything is published (what was released before training
        # is in it): a run killed before its next checkpoint resumes with its ledger, and what it published stays
        # charged
        if self.state is None:
            self.checkpoint()
        # after the releases before training: the steps left are computed from the ledger's whole history
        self.target_steps = stop_step(self.method, self.step, self.steps, self.method.max_steps)

    def _restore(self) -> None:
        state = self.state
        if state is not None:
            self.nets.load_state_dict(state["models"])
            self.opt.load_state_dict(state["optimizer"])
            if self.ema is not None and state.get("ema") is not None:
                self.ema.model.load_state_dict(state["ema"])
        self.step = open_run(self.cfg, state, self.publisher, self.method, self.sampler_gen, self.noise_gen,
                             carried=self.carried)
        if state is not None:
            print(f"[dpgen] resumed from {self.ckpt.path} at step {self.step} (epsilon spent so far "
                  f"{self.method.epsilon():.4f})")

    # ---- before the loop --------------------------------------------------------------------------------------
    @property
    def evaluated(self) -> torch.nn.Module:
        """What is evaluated and released: the EMA (post-processing of the iterates, no privacy cost), else the
        trained networks."""
        return self.ema.model if self.ema is not None else self.nets

    def finished(self) -> Optional[Dict[str, Any]]:
        """A finished run resumed without more steps: its ``metrics.json`` (left as it is), else None. A resume
        that trains again removes what the earlier sitting wrote at its end (it describes older weights)."""
        step, out = self.step, self.out
        if self.state is not None:
            if self.target_steps <= step:
                done = read_run(out, state=self.state).metrics
                if done is not None:
                    print(f"[dpgen] {out} has finished (step {step}, epsilon spent {self.method.epsilon():.4f}): "
                          "there is nothing left to train" + ("" if step >= self.steps else " within the budget")
                          + ", so its results are left as they are. Raise trainer.steps to train longer; "
                          "`dpgen sample` and task=evaluate evaluate a released set again.")
                    self.evaluated.eval()  # as after training: a caller may sample from it
                    return done
            else:
                removed = remove_final_results(out)
                if removed:
                    print(f"[dpgen] training continues from step {step}: removed {', '.join(removed)} (written when "
                          "an earlier sitting ended, they describe older weights; this run writes its own when it "
                          "ends)")
        if self.target_steps < self.steps:
            print(f"[dpgen] the budget allows {self.target_steps} of the {self.steps} steps asked: training stops "
                  "there")
        self.publisher.logger  # opened before the first step: a logger that cannot start stops the run first
        return None

    def start_loop(self) -> None:
        self.nets.train()
        self.loop_t0, self.step0 = time.time(), self.step

    # ---- each step -------------------------------------------------------------------------------------------
    def after_step(self, logs: Dict[str, Any], guard, stop, bar) -> None:
        """After a step has run and been accounted: count it, then (ledger first) publish its record and write
        the checkpoint when due; the non-finite guard is read before either; a stop request hands over after
        the checkpoint."""
        t = self.cfg.trainer
        self.step += 1
        bar.update(1)
        step = self.step
        last = step == self.target_steps
        publish = step % t.log_every == 0 or last or self.task.should_log(step)
        due = step % t.checkpoint_every == 0 or last or stop.requested
        if publish or due:
            guard.check(self, logs)  # the one host read of the step's finiteness, at log and checkpoint steps only
        if publish:
            self.last_logs = ({k: _loggable(v) for k, v in logs.items()} if self.method.publishes_loss else {})
            rec = {"step": step, **self.last_logs,
                   **self.task.log_fields(step, last, self.method, self.evaluated)}
            self.publisher.publish(rec, step)
            if "loss" in self.last_logs:
                bar.set_postfix(loss=f"{self.last_logs['loss']:.4g}")
        if due:
            self.checkpoint(full=last or stop.requested)
        if stop.requested and not last:  # a cluster's time-limit warning: the checkpoint is written, hand over
            self.hand_over(stop, bar)

    def skip_step(self, bar) -> None:
        """A step with nothing to learn from and no mechanism to run (an empty non-private batch)."""
        self.step += 1
        bar.update(1)

    def hand_over(self, stop, bar) -> None:
        bar.close()
        stop.hand_over(self.step, self.ckpt.path, f"resume=auto hydra.run.dir={self.out}")

    def stop_training(self, what: str, first_bad: int) -> None:
        """A released value was not finite: the ledger keeps every step that ran; the last good checkpoint stays."""
        self.publisher.persist()
        raise TrainingError(
            f"{what} is not finite at step {first_bad}: training stopped at step {self.step}. The last good "
            f"checkpoint ({self.ckpt.path}) is kept and the privacy ledger ({self.publisher.ledger.path}) counts "
            "every step that ran; lower trainer.lr or check the data.")

    # ---- records ---------------------------------------------------------------------------------------------
    def elapsed(self) -> Dict[str, Any]:
        """This attempt's clocks added to the earlier attempts'."""
        before, now = self.before, time.time()
        loop_s = now - self.loop_t0 if self.loop_t0 is not None else 0.0
        return {"train_seconds": before.get("train_seconds", 0.0) + now - self.t_start,
                "loop_seconds": before.get("loop_seconds", 0.0) + loop_s,
                "loop_steps": before.get("loop_steps", 0) + self.step - self.step0,
                "last_logs": self.last_logs or before.get("last_logs", {}), "attempts": before.get("attempts", 0) + 1}

    def privacy(self) -> Dict[str, Any]:
        return privacy_block(self.cfg, self.method, self.task.n_private)

    def checkpoint(self, full: bool = True) -> None:
        """The ledger, then ``checkpoints/last.pt`` with the privacy of its weights (what a release, a sweep row
        or a table cell states: dpgen.train.run_record), computed after the ledger has counted the step. A
        periodic checkpoint records the step count only (the whole report costs an accountant call, and only
        the last step's weights are released; an interrupted run's epsilon is computed from its ledger when
        read)."""
        m = self.method
        record = (self.privacy() if full else
                  {"partial": True, "private": bool(m.private), "private_steps": m.spent_steps()})
        self.publisher.checkpoint(lambda: self.ckpt.save(run_state(
            self.cfg, self.step, self.sampler_gen, self.noise_gen, self.settings, models=self.nets.state_dict(),
            optimizer=self.opt.state_dict(), method=m.state_dict(),
            ema=self.ema.model.state_dict() if self.ema is not None else None,
            elapsed=self.elapsed(), privacy=record)))

    def finish(self) -> Dict[str, Any]:
        """Evaluate what is released and write ``metrics.json`` (the ledger is final: no step follows)."""
        cfg, method, task, t = self.cfg, self.method, self.task, self.cfg.trainer
        whole = self.elapsed()  # this attempt and the earlier ones
        self.last_logs = last_logs = whole["last_logs"]
        steps, step = self.steps, self.step
        done = self.target_steps >= steps or (method.private and method.accounts_steps
                                              and method.spent_steps() >= steps)
        evaluated = self.evaluated
        evaluated.eval()
        metrics: Dict[str, Any] = {
            "task": task.name, "method": cfg.method.name, "dataset": cfg.dataset.name,
            "steps": step, "steps_requested": steps,
            "epochs": round(step / max(1, -(-task.n_private // t.batch_size)), 4),
            "stop_reason": ("completed" if done else
                            f"privacy budget: the next step would exceed epsilon={cfg.privacy.epsilon}"),
            "final_loss": (last_logs.get("loss", float("nan")) if method.publishes_loss else
                           "withheld: computed from clean private records (only the noisy gradient is released)"),
            "final_logs": last_logs,
            "n_private": task.n_private,  # the declared size (public)
            "batch_size": t.batch_size, "ema": t.ema, "seed": cfg.seed, "device": str(self.device),
            "privacy": self.privacy(),
            "train_seconds": round(whole["train_seconds"], 2),
            "loop_seconds": round(whole["loop_seconds"], 2),
            "steps_per_second": (round(whole["loop_steps"] / whole["loop_seconds"], 3)
                                 if whole["loop_seconds"] > 0 and whole["loop_steps"] > 0 else None),
            "attempts": whole["attempts"],
            "checkpoint": str(self.ckpt.path),
        }
        self.threads.rebalance()
        t_eval = time.time()
        metrics.update(task.evaluate(cfg, evaluated, method, self.device, self.out))
        metrics["eval_seconds"] = round(time.time() - t_eval, 2)
        metrics["threads"] = self.threads.describe()
        metrics["wall_seconds"] = round(self.before.get("train_seconds", 0.0) + time.time() - self.t_start, 2)
        write_json(self.out / "metrics.json", metrics)
        self.publisher.finish(metrics)
        return metrics


__all__ = ["Run", "WALL_CLOCK_NOT_COVERED", "check_declared_size", "privacy_block"]
