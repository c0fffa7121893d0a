"""The checkpoint and ledger-file formats (dpgen/train/migrations.py): a file of each older format, laid out as the
dpgen of its date wrote it (``git show <commit>:dpgen/train/...``), is brought to the current format or refused by
name; two kinds of run (DP-SWD with its DP mean, DP-MERF's one release) resume from older checkpoints through the
real path and end at the epsilon of the uninterrupted run; the current format round-trips unchanged."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from dpgen.train import migrations
from dpgen.train.migrations import CHECKPOINT, FORMAT, LEDGER_FILE, migrate

BASE = ["trainer.progress=false", "task.n_synthetic=100", "task.eval_models=[]", "task.fid=false",
        "trainer.epochs=null", "trainer.checkpoint_every=3", "trainer.log_every=1", "privacy.epsilon=50"]
#: a fixed noise, so that the interrupted run and the uninterrupted one charge the same mechanism
DPSWD = ["method=dpswd", "method.k=16", "method.fake_copies=1", "method.noise_multiplier=2.0"]
DPMERF = ["method=dpmerf", "method.noise_multiplier=1.0"]

#: the privacy settings each format lacks (the step that brought them)
ADDED = {5: ("dataset.n_train_counted",), 6: ("dataset.validation",), 9: ("privacy.secure_rng",)}
CONV = ("method.conv_channels", "method.conv_share", "method.conv_pool")


def _fit(out, *overrides):
    from dpgen.config import compose_config
    from dpgen.tasks import run as run_task

    return run_task(compose_config([*BASE, *overrides]), out)


def _old_settings(settings, fmt):
    s = {k: v for k, v in settings.items() if not any(fmt < to and k in keys for to, keys in ADDED.items())}
    if s.get("method.name") == "dpmerf" and fmt < 7:
        s = {k: v for k, v in s.items() if k not in CONV}
    return s


def _old_ledger(led, fmt, dpmerf):
    """A ledger state as format ``fmt`` wrote it: no prefix_releases before 3; DP-MERF's under autodp's RDP
    (RDPAccountant.state_dict: name, history, sampling) before 8."""
    led = copy.deepcopy(led)
    if fmt < 3:
        led.pop("prefix_releases")
    if dpmerf and fmt < 8:
        led["accountant"] = {"name": "rdp", "history": led["accountant"]["history"], "sampling": "without_replacement"}
    return led


def old_checkpoint(state, fmt):
    """A current checkpoint laid out as the dpgen of format ``fmt`` (2..9, unversioned) wrote it."""
    dpmerf = state["privacy_settings"]["method.name"] == "dpmerf"
    old = {k: v for k, v in state.items() if k != migrations.FORMAT_KEY}
    old["privacy_settings"] = _old_settings(state["privacy_settings"], fmt)
    keep = {k: v for k, v in state["method"].items() if k not in ("accountant", "prefix_releases")}
    led = _old_ledger({k: state["method"][k] for k in ("accountant", "prefix_releases")}, fmt, dpmerf)
    old["method"] = {**led, **keep}
    if dpmerf:  # its release settings named the conv features only when on (before issue 85); none before 7
        old["method"]["settings"] = {k: v for k, v in state["method"]["settings"].items() if not k.startswith("conv_")}
        if fmt < 7:
            del old["method"]["conv_weights"], old["method"]["conv_shape"]
    # what the checkpoint gained later besides its privacy: run_id (002a310, 12-05), its privacy record (3d17b5b,
    # 11-28), the clocks (8dba800, 11-25)
    old.pop("run_id")
    if fmt < 4:
        old.pop("privacy")
    if fmt < 3:
        old.pop("elapsed")
    return old


def old_ledger_file(doc, fmt):
    """A current ledger file laid out as format ``fmt`` (1..9) wrote it (no private_steps before 4)."""
    dpmerf = doc["privacy_settings"]["method.name"] == "dpmerf"
    old = {"ledger": _old_ledger(doc["ledger"], fmt, dpmerf), "steps": doc["steps"],
           "privacy_settings": _old_settings(doc["privacy_settings"], fmt)}
    if fmt >= 4:
        old["private_steps"] = doc["private_steps"]
    return old


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    return a == b


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """DP-SWD and DP-MERF on digits: 3 steps (checkpointed at step 3) and 6 steps uninterrupted."""
    out = {}
    for name, ov in (("dpswd", DPSWD), ("dpmerf", DPMERF)):
        three, six = tmp_path_factory.mktemp(f"{name}3"), tmp_path_factory.mktemp(f"{name}6")
        _fit(three, *ov, "trainer.steps=3")
        out[name] = {"three": three, "six": _fit(six, *ov, "trainer.steps=6"), "overrides": ov,
                     "state": torch.load(three / "checkpoints" / "last.pt", map_location="cpu", weights_only=False),
                     "ledger": json.loads((three / "checkpoints" / "ledger.json").read_text())}
    return out


def _folder_with(tmp_path, checkpoint=None, ledger=None):
    ck = tmp_path / "checkpoints"
    ck.mkdir(parents=True)
    if checkpoint is not None:
        torch.save(checkpoint, ck / "last.pt")
    if ledger is not None:
        (ck / "ledger.json").write_text(json.dumps(ledger))
    return tmp_path


# ---- the map itself ----------------------------------------------------------------------------------------------
def test_the_steps_are_in_order_each_says_what_changed_and_when():
    assert [s.to for s in migrations.STEPS] == sorted({s.to for s in migrations.STEPS}) and FORMAT == 10
    for s in migrations.STEPS:
        assert s.what and "\n\n" not in s.what and s.since, s.name
        assert set(s.kinds) <= {CHECKPOINT, LEDGER_FILE}


def test_the_current_format_round_trips_unchanged(runs, tmp_path):
    from dpgen.train.checkpoint import Checkpointer
    from dpgen.train.publication import LedgerFile

    for run in runs.values():
        state, ledger = run["state"], run["ledger"]
        assert state[migrations.FORMAT_KEY] == FORMAT == ledger[migrations.FORMAT_KEY]
        assert _same(migrate(copy.deepcopy(state), CHECKPOINT), state)
        assert migrate(copy.deepcopy(ledger), LEDGER_FILE) == ledger
        # and through the writers and readers: what is read is what was written
        assert _same(Checkpointer(run["three"] / "checkpoints").load(), state)
        assert LedgerFile(run["three"]).load() == ledger


def test_an_unversioned_file_is_read_from_its_keys():
    assert migrations.format_of({"step": 3}, CHECKPOINT) == 0
    assert migrations.format_of({"privacy_settings": {"a": 1}, "generator": {}}, CHECKPOINT) == 1
    assert migrations.format_of({"privacy_settings": {"a": 1}, "models": {}}, CHECKPOINT) == 2
    assert migrations.format_of({"privacy_settings": {"a": 1}, "ledger": {}}, LEDGER_FILE) == 2
    assert migrations.format_of({"privacy_settings": {"a": 1}, "format": 7}, LEDGER_FILE) == 7


# ---- every older format, migrated ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", range(2, FORMAT))
def test_a_checkpoint_of_each_older_format_becomes_the_current_one(runs, fmt):
    for name, run in runs.items():
        state = run["state"]
        got = migrate(old_checkpoint(state, fmt), CHECKPOINT, "last.pt")
        assert got["privacy_settings"] == state["privacy_settings"], (name, fmt)
        assert got["method"]["prefix_releases"] == state["method"]["prefix_releases"] == 1  # DP mean / the release
        assert got["method"]["accountant"] == state["method"]["accountant"], (name, fmt)
        if name == "dpmerf":
            assert got["method"]["settings"] == state["method"]["settings"]
            assert got["method"]["conv_weights"] is None and got["method"]["conv_shape"] is None


@pytest.mark.parametrize("fmt", range(1, FORMAT))
def test_a_ledger_file_of_each_older_format_becomes_the_current_one(runs, fmt):
    for name, run in runs.items():
        doc = run["ledger"]
        got = migrate(old_ledger_file(doc, fmt), LEDGER_FILE, "ledger.json")
        if name == "dpmerf" and fmt < 4:
            # its one full-batch entry may have been a step (the file did not say): counted as one, so a dead
            # attempt's ledger is carried, as carried_ledger did for such a file
            assert got.pop("private_steps") == 1 and doc["private_steps"] == 0
            got["private_steps"] = 0
        assert got == doc, (name, fmt)


# ---- two kinds of run resume from older checkpoints through the real path -----------------------------------------
@pytest.mark.parametrize("fmt", [2, 6, 9])
@pytest.mark.parametrize("method", ["dpswd", "dpmerf"])
def test_an_older_checkpoint_resumes_to_the_uninterrupted_epsilon(runs, tmp_path, method, fmt):
    """DP-SWD: format 2 has no prefix_releases (the DP mean's release is inferred from method.center=dp_mean).
    DP-MERF: formats 2 and 6 predate its convolutional features and its PLD ledger (a resume of them was refused
    before this map: method.conv_channels, checkpoint None, now 0); 9 is today's, unversioned."""
    run = runs[method]
    folder = _folder_with(tmp_path, old_checkpoint(run["state"], fmt), old_ledger_file(run["ledger"], fmt))
    m = _fit(folder, *run["overrides"], "trainer.steps=6", "resume=true")
    six = run["six"]
    assert m["steps"] == six["steps"] == 6
    assert m["privacy"]["epsilon_spent"] == pytest.approx(six["privacy"]["epsilon_spent"], rel=1e-9)
    assert m["privacy"]["private_steps"] == six["privacy"]["private_steps"]
    # the next save writes the current format
    saved = torch.load(folder / "checkpoints" / "last.pt", map_location="cpu", weights_only=False)
    assert saved[migrations.FORMAT_KEY] == FORMAT and "dataset.validation" in saved["privacy_settings"]


@pytest.mark.parametrize("fmt", [1, 3])
def test_an_older_ledger_file_of_a_dead_attempt_is_carried_as_the_current_one(runs, tmp_path, fmt):
    """An attempt that died before its first checkpoint left only its ledger file (format 1: no prefix_releases,
    format 3: no private_steps): resume=auto continues that ledger exactly as it continues today's file."""
    run = runs["dpswd"]
    now = _fit(_folder_with(tmp_path / "now", ledger=run["ledger"]), *DPSWD, "trainer.steps=6", "resume=auto")
    old = _fit(_folder_with(tmp_path / "old", ledger=old_ledger_file(run["ledger"], fmt)), *DPSWD, "trainer.steps=6",
               "resume=auto")
    assert old["privacy"]["private_steps"] == now["privacy"]["private_steps"] == 6  # 3 carried, 3 trained
    assert old["privacy"]["epsilon_spent"] == pytest.approx(now["privacy"]["epsilon_spent"], rel=1e-9)
    assert old["privacy"]["epsilon_spent"] > run["six"]["privacy"]["epsilon_spent"]  # the DP mean released twice


# ---- the ledger's steps, unit by unit --------------------------------------------------------------------------
def _ledger_file(led, **settings):
    return {"ledger": led, "steps": 0, "privacy_settings": {"method.name": "x", **settings}}


def test_releases_before_training_are_inferred_at_most_one_per_declared_release():
    from dpgen.privacy.ledger import Ledger

    def loaded(led, prefix, **settings):
        doc = migrate(_ledger_file(led, **settings), LEDGER_FILE)
        ledger = Ledger(epsilon=50, delta=1e-5, sampling="without_replacement", sample_rate=1.0, prefix=prefix)
        ledger.load_state_dict(doc["ledger"])
        return ledger

    # the DP mean and 3 full-batch steps at its noise: one history entry of 4; one of them is the release
    acc = {"name": "rdp", "sampling": "without_replacement",
           "history": [{"noise_multiplier": 5.0, "sample_rate": 1.0, "num_steps": 4}]}
    assert loaded({"accountant": acc}, (5.0,), **{"method.center": "dp_mean"}).private_steps() == 3
    assert loaded(acc, (5.0,), **{"method.center": "dp_mean"}).private_steps() == 3  # a bare accountant state
    # no release declared: every full-batch entry is a step
    assert loaded({"accountant": acc}, (), **{"method.center": "none"}).private_steps() == 4


def test_an_older_ledger_file_says_its_private_steps_as_carried_ledger_counted_them():
    def steps(history, total):
        acc = {"name": "rdp", "history": [dict(zip(("noise_multiplier", "sample_rate", "num_steps"), h))
                                          for h in history]}
        return migrate({**_ledger_file({"accountant": acc}), "steps": total}, LEDGER_FILE)["private_steps"]

    assert steps([(5.0, 1.0, 1), (1.0, 0.1, 4)], 5) == 4  # the entries below sample rate 1
    assert steps([(5.0, 1.0, 1)], 1) == 1  # all at rate 1: maybe steps, so carried (as before)
    assert migrate({"ledger": {"accountants": {}}, "steps": 2, "privacy_settings": {"a": 1}},
                   LEDGER_FILE)["private_steps"] == 2  # DP-SGD's accountants: its steps


def test_a_one_shot_ledger_kept_by_rdp_is_charged_its_exact_pld_epsilon():
    """DP-MERF's ledger was autodp's RDP before 2d541d4: its one full-batch release is charged under PLD now; a
    ledger of another method is never renamed (its steps' epsilon depends on the accountant)."""
    from dpgen.privacy.accountants import RDPAccountant

    from tests.privacy.test_one_shot import _dpmerf, _pld_one_gaussian

    old = RDPAccountant(sampling="without_replacement")
    old.step(noise_multiplier=0.5679, sample_rate=1.0)
    doc = migrate(_ledger_file({"accountant": old.state_dict(), "prefix_releases": 1}, **{"method.name": "dpmerf"}),
                  LEDGER_FILE)
    given = _dpmerf("privacy.epsilon=10", "method.noise_multiplier=0.5679")
    given.load_ledger_state(doc["ledger"])
    assert given.ledger.epsilon() == pytest.approx(_pld_one_gaussian(0.5679, 1e-5), abs=1e-4)  # 8.555
    other = migrate(_ledger_file({"accountant": old.state_dict(), "prefix_releases": 1}, **{"method.name": "dpswd"}),
                    LEDGER_FILE)
    assert other["ledger"]["accountant"]["name"] == "rdp"


# ---- settings added later: the old behaviour, and nothing else ----------------------------------------------------
@pytest.mark.parametrize("key, before, other", [("dataset.n_train_counted", False, True),
                                                ("dataset.validation", 0.0, 0.1),
                                                ("privacy.secure_rng", False, True)])
def test_a_setting_added_later_resumes_only_at_the_value_that_reproduces_the_old_run(key, before, other):
    from dpgen.train.resume import check_resume_settings

    now = {"dataset.n_train": 1437, "privacy.epsilon": 10.0, "method.private": True,
           "dataset.n_train_counted": False, "dataset.validation": 0.0, "privacy.secure_rng": False}
    old = {k: v for k, v in now.items() if k != key}
    saved = migrate({"privacy_settings": old, "models": {}, "method": {}}, CHECKPOINT)["privacy_settings"]
    assert saved[key] == before
    check_resume_settings(saved, now)
    with pytest.raises(ValueError, match=f"changed privacy settings.*{key}: checkpoint {before!r}, now {other!r}"):
        check_resume_settings(saved, {**now, key: other})


def test_a_reworded_dataset_description_resumes_and_any_record_setting_does_not():
    """The description is prose (it names no record): changing it resumes; the declared size still may not change."""
    from dpgen.train.resume import check_resume_settings

    saved = {"dataset.n_train": 1437, "dataset.description": "digits", "method.private": True}
    check_resume_settings(saved, {**saved, "dataset.description": "sklearn's 8x8 digits"})
    with pytest.raises(ValueError, match="dataset.n_train: checkpoint 1437, now 1000"):
        check_resume_settings(saved, {**saved, "dataset.n_train": 1000})


# ---- refused -----------------------------------------------------------------------------------------------------
def test_a_checkpoint_without_privacy_settings_is_refused_naming_the_file(runs, tmp_path):
    state = {k: v for k, v in runs["dpswd"]["state"].items() if k not in ("privacy_settings", "format")}
    folder = _folder_with(tmp_path, state)
    with pytest.raises(ValueError, match="last.pt records no privacy settings.*cannot be continued safely.*"
                                         r"resume=false, or a new hydra.run.dir"):
        _fit(folder, *DPSWD, "trainer.steps=6", "resume=true")
    with pytest.raises(ValueError, match="ledger.json records no privacy settings"):
        migrate({"ledger": {}, "steps": 1}, LEDGER_FILE, tmp_path / "ledger.json")


def test_a_checkpoint_from_before_the_one_loop_is_refused_by_name(runs, tmp_path):
    """Format 1 (9f12c84..1c6e6ed) kept the generator under its own key: the resume read state["models"] and
    stopped with a KeyError; it is refused with the fix."""
    state = dict(runs["dpswd"]["state"])
    state.pop("format", None)
    state["generator"] = state.pop("models")
    folder = _folder_with(tmp_path, state)
    with pytest.raises(ValueError, match="before the one training loop.*Start a new run"):
        _fit(folder, *DPSWD, "trainer.steps=6", "resume=true")


def test_a_file_of_a_newer_format_is_refused():
    with pytest.raises(ValueError, match="newer than this dpgen"):
        migrate({"format": FORMAT + 1, "privacy_settings": {"a": 1}}, LEDGER_FILE, "ledger.json")
