"""One run from its folder to its ``metrics.json``: :class:`Run` builds it in the order a run must happen and
holds its parts: the folder with its checkpoint and publisher (:class:`dpgen.train.run_folder.RunFolder`), the
training state (networks, optimizer, EMA, the mechanism's generators, the step:
:class:`dpgen.train.state.TrainingState`), the clock, the method and the task; after each step it publishes
and checkpoints (:meth:`Run.after_step`), at the end it evaluates (:meth:`Run.finish`). The checks that refuse a
run before step 0 (:func:`dpgen.privacy.preflight.check_run`) and the report it states
(:func:`privacy_block`, worded by :mod:`dpgen.privacy.report`) are here too.

Its one invariant: **the ledger is on disk before anything from a step is published** (a ``metrics.jsonl`` line,
a logger record, a checkpoint, ``metrics.json``): every write goes through :class:`~dpgen.train.publication.Publisher`,
which persists the ledger first, and a step is accounted (``method.account()``) before :meth:`Run.after_step`
publishes it. ``tests/privacy/test_ledger_faults.py`` checks the invariant in one place, on every path (resume,
crash, kill, requeue, full batch).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Dict, Optional

import torch

from dpgen.privacy.preflight import check_run
from dpgen.train.publication import stop_step
from dpgen.train.run_folder import RunFolder
from dpgen.train.run_record import read_run, remove_final_results
from dpgen.train.state import AttemptClock, TrainingError, mechanism_generators, seed_everything, training_state
from dpgen.utils.device import resolve_device
from dpgen.utils.io import write_json


def _loggable(v) -> Any:
    return float(v) if isinstance(v, torch.Tensor) else v


def privacy_block(cfg, method, task) -> Dict[str, Any]:
    """The privacy report a run states, the same in ``metrics.json`` and in every checkpoint (whose record a
    release, a sweep row and a table cell read: dpgen.train.run_record): the method's report with the run's
    facts in the wording of the privacy library (:func:`dpgen.privacy.report.run_report`), the task's evaluation
    that reads the training records among them."""
    from dpgen.privacy.selection import choice_applies, other_records_note, selection_cost_groups
    from dpgen.privacy.report import RunFacts, run_report

    ds = cfg.dataset
    earlier, earlier_pure = selection_cost_groups(cfg.privacy, ds)
    facts = RunFacts(
        n=int(task.n_private), poisson=method.sampling == "poisson",
        counted_n_from=str(ds.path) if ds.n_train_counted else None,
        validation=float(ds.validation),
        own_data=str(ds.path) if ds.path else None,
        own_test_held_out=bool(ds.path) and not own_test_split(cfg),
        selected_on_private=cfg.privacy.selected_on_private if choice_applies(cfg.privacy, ds) else None,
        selection_trainings=earlier, selection_pure_epsilon=earlier_pure,
        secret_randomness=bool(cfg.privacy.secret_randomness),
        secure_rng=bool(cfg.privacy.secure_rng),
        train_split_fidelity=task.reads_training_records(cfg))
    report = run_report(method.privacy_report(), facts)
    elsewhere = other_records_note(cfg.privacy, ds)
    return {**report, "settings_chosen_on_other_records": elsewhere} if elsewhere else report


def own_test_split(cfg) -> bool:
    """Whether your own data (dataset=folder / npz) bring a test split of their own (else a part is held out)."""
    from dpgen.data.own import has_test_split

    return has_test_split(cfg.dataset.name, str(cfg.dataset.path))


class Run:
    """One run, fresh or resumed, from its folder to its ``metrics.json``: the run's settings (``cfg``, ``task``,
    ``method``, ``device``, ``threads``, the steps asked and allowed), its :class:`RunFolder` (files, checkpoint,
    publisher), its :class:`TrainingState` (networks, optimizer, EMA, generators, step) and its clock.

    Built in the order a run must happen: the folder, the data, the checkpoint (if resuming), the method
    calibrated for the run's steps, the state restored. Then :meth:`start` (the release before training, the
    step-0 checkpoint; a finished run resumed without more steps ends there), the loop
    (:func:`dpgen.train.loop.fit`: :meth:`after_step` after each accounted step) and :meth:`finish`."""

    def __init__(self, cfg, task, output_dir, threads) -> None:
        self.clock = AttemptClock()
        self.cfg, self.task, self.threads = cfg, task, threads
        t = cfg.trainer
        task.cfg = cfg
        self.device = resolve_device(t.device)
        seed_everything(cfg.seed)  # models, generated codes and labels, public batches: from the seed
        sampler_gen, noise_gen = mechanism_generators(cfg, self.device)
        task.setup(cfg, self.device)
        if t.batch_size > task.n_private:  # the declared (public) size; a counted one is not said in an error
            n_said = ("counted from dataset.path" if cfg.dataset.n_train_counted else
                      f"dataset.n_train={task.n_private} records")
            raise ValueError(f"trainer.batch_size={t.batch_size} is larger than the private set ({n_said}): lower "
                             "trainer.batch_size.")
        self.steps = task.requested_steps(cfg)
        # the folder with its config.yaml, the checkpoint (resuming) and the settings the ledger is spent under
        self.folder = RunFolder.open(cfg, output_dir, task, self.steps)
        self.clock.before = self.folder.earlier_clocks
        self.method, models = task.build(cfg, self.folder.calibration_steps, self.device)
        # calibrated or refused before anything is trained or released
        check_run(self.method, method_name=cfg.method.name, holdout=float(cfg.dataset.validation), steps=self.steps,
                  refuse_other_size=lambda why: task.data.refuse_other_size(why))
        if cfg.dataset.n_train_counted:  # said once the data and the method are set up
            print(f"[dpgen] dataset={cfg.dataset.name}: dataset.n_train=0, so the training records at "
                  f"{cfg.dataset.path} were counted: {task.n_private:,}, treated as public (it sets q = B / n; the "
                  "report says so). Declare dataset.n_train=<n> to fix it instead.", file=sys.stderr, flush=True)
        self.method.rng = noise_gen  # the mechanism's randomness (also for a release before training)
        self.state = training_state(t, models, self.method, sampler_gen, noise_gen, self.device)
        self.state.step = self.folder.restore(cfg, self.method, self.state)  # the publisher; a checkpoint loaded
        self.clock.step0 = self.step
        self.last_logs: Dict[str, Any] = {}
        self.target_steps = self.steps  # set by start(), after the releases before training

    # ---- what the loop reads -------------------------------------------------------------------------------
    @property
    def step(self) -> int:
        return self.state.step

    @property
    def out(self):
        return self.folder.out

    @property
    def publisher(self):
        return self.folder.publisher

    @property
    def evaluated(self) -> torch.nn.Module:
        return self.state.evaluated

    # ---- before the loop --------------------------------------------------------------------------------------
    def start(self) -> Optional[Dict[str, Any]]:
        """Before the loop: the method's release before training (a DP mean), if it makes one, then a fresh run's
        step-0 checkpoint; then a finished run resumed without more steps returns its ``metrics.json`` (left as
        it is), else None. A resume that trains again removes what the earlier sitting wrote at its end (it
        describes older weights)."""
        self.task.prepare(self.method, self.out)
        # a checkpoint at step 0 for every task, before anything is published (what was released before training
        # is in it): a run killed before its next checkpoint resumes with its ledger, and what it published stays
        # charged
        if self.folder.saved is None:
            self.checkpoint()
        # after the releases before training: the steps left are computed from the ledger's whole history
        self.target_steps = stop_step(self.method, self.step, self.steps, self.method.max_steps)
        step, out = self.step, self.out
        if self.folder.saved is not None:
            if self.target_steps <= step:
                record = read_run(out, state=self.folder.saved)
                done = record.metrics
                if record.status == "evaluating":  # trained; its evaluation was interrupted: evaluate again
                    print(f"[dpgen] {out} has finished training (step {step}, epsilon spent "
                          f"{self.method.epsilon():.4f}) and its evaluation was interrupted: evaluating again, "
                          "with nothing trained or charged")
                    return None
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
        self.state.nets.train()
        self.clock.start_loop(self.step)

    # ---- each step -------------------------------------------------------------------------------------------
    def after_step(self, logs: Dict[str, Any], guard, stop, bar) -> None:
        """After a step has run and been accounted: count it, then (ledger first) publish its record and write
        the checkpoint when due; the non-finite guard is read before either; a stop request hands over after
        the checkpoint."""
        t = self.cfg.trainer
        self.state.step += 1
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
        self.state.step += 1
        bar.update(1)

    def hand_over(self, stop, bar) -> None:
        bar.close()
        stop.hand_over(self.step, self.folder.ckpt.path, f"resume=auto hydra.run.dir={self.out}")

    def stop_training(self, what: str, first_bad: int) -> None:
        """A released value was not finite: the ledger keeps every step that ran; the last good checkpoint stays."""
        self.publisher.persist()
        raise TrainingError(
            f"{what} is not finite at step {first_bad}: training stopped at step {self.step}. The last good "
            f"checkpoint ({self.folder.ckpt.path}) is kept and the privacy ledger ({self.publisher.ledger.path}) counts "
            "every step that ran; lower trainer.lr or check the data.")

    # ---- records ---------------------------------------------------------------------------------------------
    def elapsed(self) -> Dict[str, Any]:
        """This attempt's clocks added to the earlier attempts'."""
        return self.clock.elapsed(self.step, self.last_logs)

    def privacy(self) -> Dict[str, Any]:
        return privacy_block(self.cfg, self.method, self.task)

    def checkpoint(self, full: bool = True) -> None:
        """The ledger, then ``checkpoints/last.pt`` with the privacy of its weights (what a release, a sweep row
        or a table cell states: dpgen.train.run_record), computed after the ledger has counted the step. A
        periodic checkpoint records the step count only (the whole report costs an accountant call, and only
        the last step's weights are released; an interrupted run's epsilon is computed from its ledger when
        read)."""
        m = self.method
        record = (self.privacy() if full else
                  {"partial": True, "private": bool(m.private), "private_steps": m.spent_steps()})
        self.folder.save(self.cfg, self.state, m, record, self.elapsed)

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
            "checkpoint": str(self.folder.ckpt.path),
        }
        self.threads.rebalance()
        t_eval = time.time()
        resume = f"python run.py <its overrides> resume=auto hydra.run.dir={self.out}"

        def part(done: Dict[str, Any], left: str) -> None:  # written as each part finishes: an interruption keeps it
            write_json(self.out / "metrics.json", {**metrics, **done, "evaluation_complete": False,
                                                   "evaluation_left": f"{left}: {resume} completes it"})

        part({}, "the whole evaluation")  # the weights' facts and privacy, before the first evaluated number
        task.on_part = part
        try:
            metrics.update(task.evaluate(cfg, evaluated, method, self.device, self.out))
        except KeyboardInterrupt:
            print(f"\n[dpgen] evaluation interrupted: the trained weights ({self.folder.ckpt.path}) and the parts already "
                  f"evaluated ({self.out / 'metrics.json'}) are kept; {resume} evaluates the rest (a FID pass "
                  "continues where it stopped)", file=sys.stderr, flush=True)
            raise
        finally:
            task.on_part = None
        metrics["evaluation_complete"] = True
        metrics["eval_seconds"] = round(time.time() - t_eval, 2)
        metrics["threads"] = self.threads.describe()
        metrics["wall_seconds"] = round(self.clock.wall_seconds(), 2)
        write_json(self.out / "metrics.json", metrics)
        self.publisher.finish(metrics)
        return metrics


__all__ = ["Run", "privacy_block"]
