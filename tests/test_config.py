"""The Hydra config tree: every group composes, every experiment runs, bad input is named."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from dpgen.config import ConfigError, register_configs, validate
from dpgen.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
METHODS = sorted(p.stem for p in (CONF / "method").glob("*.yaml"))
DATASETS = sorted(p.stem for p in (CONF / "dataset").glob("*.yaml"))

register_configs()


def _compose(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def test_groups_exist():
    for group in ("method", "dataset", "task", "privacy", "logger", "experiment", "debug"):
        assert (CONF / group).is_dir(), group
    assert {"dpswd", "swd", "dpsinkhorn", "sinkhorn", "entropic_ldp", "dpsgd"} <= set(METHODS)
    assert {"digits", "mnist", "fashion_mnist", "celeba", "usps", "visda", "office31", "mnist10k"} <= set(DATASETS)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dataset", ["digits", "mnist"])
def test_every_method_composes_and_validates(method, dataset):
    conf = validate(_compose([f"method={method}", f"dataset={dataset}"]))
    assert conf.method.name == method
    assert conf.dataset.name == dataset


@pytest.mark.parametrize("dataset", DATASETS)
def test_every_dataset_validates(dataset):
    if dataset in ("folder", "npz"):  # your own data: a clear error without its path (tests/data/test_own_data.py)
        from dpgen.config import ConfigError

        with pytest.raises(ConfigError, match=f"dataset={dataset} reads your own data: give dataset.path="):
            validate(_compose([f"dataset={dataset}"]))
        return
    conf = validate(_compose([f"dataset={dataset}"]))
    assert conf.dataset.n_train > 0 and conf.dataset.dim > 0


def _experiment_task(experiment):
    """The task the preset composes to (a preset may inherit it from another preset in its defaults)."""
    return _compose([f"experiment={experiment}"]).task.name


def _fake_size(overrides):
    """``dataset.n_train=<size of its fake_data_root training split>`` for the dataset ``overrides`` pick."""
    from conftest import FAKE_TRAIN_SIZES

    name = validate(_compose(overrides)).dataset.name
    return f"dataset.n_train={FAKE_TRAIN_SIZES[name]}" if name in FAKE_TRAIN_SIZES else "seed=0"


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_runs(experiment, tmp_path, fake_data_root):
    """Each preset runs: accounting presets in full, training presets for one step on tiny files."""
    if "override /task: classification" in (CONF / "experiment" / f"{experiment}.yaml").read_text():
        # DP-SGD presets (WDP Table 2): two steps on tiny files (cifar10/svhn have none: on fake MNIST files)
        extra = ["dataset=mnist"] if any(d in experiment for d in ("cifar10", "svhn")) else []
        ov = [f"experiment={experiment}", *extra, "trainer.epochs=null", "trainer.steps=2",
              "trainer.batch_size=8", "method.pair_examples=4", "trainer.progress=false",
              f"dataset.data_root={fake_data_root}"]
        conf = validate(_compose([*ov, _fake_size(ov)]))
        assert conf.experiment_name == experiment
        metrics = TASKS[conf.task.name](conf, output_dir=tmp_path)
        assert metrics["steps"] == 2 and metrics["privacy"]["steps_accounted"] == 2
        assert set(metrics["privacy"]["accountants"]) == {"moments", "bdp", "wdp"}
        return
    if _experiment_task(experiment) == "domain_adaptation":  # one step of each: tests/tasks/test_domain_adaptation.py
        assert validate(_compose([f"experiment={experiment}"])).task.name == "domain_adaptation"
        return
    if _experiment_task(experiment) == "generation":
        ov = [f"experiment={experiment}", "debug=default", "trainer.steps=1", "trainer.batch_size=4",
              "task.eval_models=[]", f"dataset.data_root={fake_data_root}"]
        conf = validate(_compose([*ov, _fake_size(ov)]))
        assert conf.experiment_name == experiment
        metrics = TASKS[conf.task.name](conf, output_dir=tmp_path)
        assert metrics["steps"] == 1
        assert json.loads((tmp_path / "metrics.json").read_text())["steps"] == 1
        if conf.method.private and metrics["privacy"].get("depends_on_steps") is False:
            assert metrics["privacy"]["training_steps"] == 1  # one release before training (DP-MERF, entropic LDP)
        elif conf.method.private:
            assert metrics["privacy"]["private_steps"] == 1
        return
    conf = validate(_compose([f"experiment={experiment}", "task.cross_check=false"]))
    assert conf.experiment_name == experiment
    # the preset's values win over the top-level defaults
    import yaml

    preset = yaml.safe_load((CONF / "experiment" / f"{experiment}.yaml").read_text())
    for key, value in (preset.get("trainer") or {}).items():
        assert getattr(conf.trainer, key) == value, (experiment, key)
    record = TASKS[conf.task.name](conf, output_dir=tmp_path)
    saved = json.loads((tmp_path / "accounting.json").read_text())
    assert saved["method"] == conf.method.name
    if conf.method.name == "dpswd":
        assert saved["sigma"] > 0 and saved["epsilon_reached"] <= conf.privacy.epsilon * 1.0001
    if conf.method.name == "dpsinkhorn":
        assert saved["steps_to_budget"] > 0
    assert record["delta"] == conf.privacy.delta


def test_debug_config_composes():
    conf = validate(_compose(["debug=default", "method=dpsinkhorn", "task=accounting"]))
    assert conf.trainer.steps == 2


@pytest.mark.parametrize(
    "override,named",
    [
        ("privacy.epsilon=0", "privacy.epsilon"),
        ("privacy.epsilon=-3", "privacy.epsilon"),
        ("privacy.delta=1", "privacy.delta"),
        ("privacy.delta=0", "privacy.delta"),
        ("method.k=0", "method.k"),
        ("method.bound=chebyshev", "method.bound"),
        ("trainer.batch_size=0", "trainer.batch_size"),
        ("privacy.accountant=magic", "privacy.accountant"),
        ("model.sharpen=-1", "model.sharpen"),
        ("model.sharpen_at=1", "model.sharpen_at"),
    ],
)
def test_invalid_values_are_named(override, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        validate(_compose(["method=dpswd", override]))


@pytest.mark.parametrize("override", ["task.sharpen=-1", "task.sharpen_at=0"])
def test_evaluate_curve_values_are_named(override):
    with pytest.raises(ConfigError, match=r"task\.sharpen"):
        validate(_compose(["task=evaluate", "task.run=somewhere", "task.sharpen=16", override]))


def test_unknown_key_is_named():
    with pytest.raises(Exception, match="nosuchkey"):
        _compose(["privacy.nosuchkey=1"])


def _run(*args):
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, env={**__import__("os").environ, "DPGEN_OUTPUTS": "/tmp/dpgen-test-outputs"})


@pytest.mark.parametrize(
    "args,named",
    [
        (["method=nosuchmethod"], "method=nosuchmethod is not a choice of method/"),
        (["dataset=nosuchdata"], "dataset=nosuchdata is not a choice of dataset/"),
        (["task=nosuchtask"], "task=nosuchtask is not a choice of task/"),
        (["privacy.delta=2"], "privacy.delta=2"),
        (["privacy.epsilon=0"], "privacy.epsilon=0"),
    ],
)
def test_cli_errors_name_the_bad_value(run_cli, args, named):
    code, text = run_cli(*args)
    assert code != 0
    assert named in text


def test_cli_error_in_a_fresh_interpreter():
    """The one smoke test through ``python run.py`` itself (the others run the same CLI in-process)."""
    r = _run("privacy.delta=2")
    assert r.returncode == 2
    assert "dpgen: error: privacy.delta=2" in r.stderr


def test_cli_accounting_prints_sigma_and_budget_split(run_cli):
    code, text = run_cli("task=accounting", "method=dpswd", "dataset=mnist", "privacy.epsilon=10",
                         "privacy.delta=1e-5", "method.bound=bernstein", "method.label_mode=concat",
                         "method.center=none")  # the paper's DP-SWD
    assert code == 0, text
    assert "calibrated sigma" in text and "delta split" in text
    code, text = run_cli("task=accounting", "method=dpswd", "dataset=digits")  # dpgen's DP-SWD variant
    assert code == 0, text
    assert "frame sensitivity bound" in text and "DP mean release" in text
    assert "epsilon reached = 9.99" in text


@pytest.mark.parametrize("overrides,noise", [
    (["method=dpswd"], None), (["method=dpsinkhorn"], None), (["method=dpsinkhorn_param"], None),
    (["method=dpsinkhorn_adv", "dataset=celeba32"], None), (["method=dpsgd", "dataset=mnist"], None),
    # DP-DANN on U-M (q = 128 / 10,000, 7,900 steps) at (10, 1e-5): the default ledger's (dp-accounting PLD) noise
    # multiplier 0.8565, autodp RDP's 0.9331 (what the domain-adaptation presets pin)
    (["method=dpdann", "dataset=da_usps_mnist", "trainer.batch_size=128", "trainer.epochs=100"], 0.8565),
    (["method=dpdann", "dataset=da_usps_mnist", "trainer.batch_size=128", "trainer.epochs=100",
      "privacy.accountant=rdp"], 0.9331),
    (["method=entropic_ldp"], None)])
def test_accounting_covers_every_private_method(tmp_path, overrides, noise):
    conf = validate(_compose(["task=accounting", *overrides]))
    record = TASKS["accounting"](conf, output_dir=tmp_path)
    assert record["method"] == conf.method.name and (tmp_path / "accounting.json").exists()
    sigma = record.get("calibrated_noise_multiplier", record.get("sigma", record.get("scale")))
    assert sigma is not None and sigma > 0
    if noise is not None:
        assert record["calibrated_noise_multiplier"] == pytest.approx(noise, abs=2e-3)
    for v in (record.get("epsilon_cross_check") or {}).values():  # every cross-check is a number
        assert v == v and v > 0


def test_a_bad_dotted_path_names_its_key_and_value():
    """method.target and dataset.loader are read by Hydra's get_object; a bad one is named with the fix."""
    from types import SimpleNamespace

    from dpgen.data import load_split
    from dpgen.methods import load_class

    assert load_class("dpgen.methods.dpswd.DPSWD").__name__ == "DPSWD"
    with pytest.raises(ValueError, match=r"method\.target='nope\.Mod' cannot be imported.*package\.module\.Class"):
        load_class("nope.Mod")
    ds = SimpleNamespace(loader="dpgen.data.no_such_loader", options=None, data_root=None, download=False,
                         validation=0.0, path=None)
    with pytest.raises(ValueError, match=r"dataset\.loader='dpgen\.data\.no_such_loader'.*package\.module\.function"):
        load_split(ds)


def test_accountant_choices_come_from_the_accountant_registry():
    """privacy.accountant and privacy.cross_check offer the registry's ledger accountants, stated once there: a new
    one registered is accepted, an internal surrogate (wang_wor) and a non-ledger accountant (bdp) are not."""
    from dpgen.config import PrivacyConfig
    from dpgen.privacy.accountants import ACCOUNTANTS, RDPAccountant, ledger_accountant_names

    assert ledger_accountant_names() == ("rdp", "opacus_rdp", "opacus_prv", "moments", "pld")
    for bad in ("wang_wor", "bdp"):
        with pytest.raises(ConfigError, match=f"privacy.accountant='{bad}'"):
            PrivacyConfig(accountant=bad)
    with pytest.raises(ConfigError, match="Did you mean pld"):  # a typo is told the nearest name
        PrivacyConfig(accountant="pdl")

    class Mine(RDPAccountant):
        name = "mine"

    ACCOUNTANTS.register("mine", Mine)
    try:
        assert PrivacyConfig(accountant="mine", cross_check=["mine"]).accountant == "mine"
    finally:
        ACCOUNTANTS.unregister("mine")
    with pytest.raises(ConfigError, match="privacy.cross_check"):
        PrivacyConfig(cross_check=["mine"])
