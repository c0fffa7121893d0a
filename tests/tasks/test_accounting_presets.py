"""``task=accounting`` over every preset in conf/experiment/ (issue 52, 5a; README "Running").

Each preset is composed with ``task=accounting`` and accounted in this process, with no dataset files (the
accounting reads public numbers only: a preset whose accounting needed a file would be skipped, naming it; none
does). The presets whose recorded results were measured under RDP or the moments accountant pin it; the default
(``auto``: dp-accounting's PLD for Poisson sampling) prints its epsilon with autodp's RDP as the cross-check.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from dpgen.config import CONFIG_DIR, compose_config

PRESETS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))
#: the presets that calibrate under the default accountant (the tightest valid one); every other preset of a
#: Poisson method pins the accountant its recorded results were measured with
TIGHTEST = {"dpsinkhorn_best_mnist", "dpsinkhorn_best_fmnist", "dpsinkhorn_best_mnist_eps1",
            "dpsinkhorn_best_fmnist_eps1", "dpsinkhorn_best_mnist_push"}


@lru_cache(maxsize=None)
def _compose(preset: str, *extra: str):
    return compose_config([f"experiment={preset}", "task=accounting", *extra])


def _poisson_ledger(cfg) -> bool:
    """Whether the method keeps a Poisson-subsampled Gaussian ledger (the one privacy.accountant=auto makes PLD)."""
    from dpgen.methods.registry import method_class
    from dpgen.tasks.accounting import _home_task

    if not cfg.method.private:
        return False
    cls = method_class(cfg, _home_task(cfg))
    return getattr(cls, "accountant_sampling", cfg.method.sampling) == "poisson" and cfg.method.name != "dpmerf"


def test_every_preset_is_listed():
    assert len(PRESETS) > 50 and "dpsinkhorn_best_mnist" in PRESETS


@pytest.mark.parametrize("preset", PRESETS)
def test_task_accounting_accounts_every_preset(preset, tmp_path, monkeypatch, capsys):
    from dpgen.tasks.accounting import run_accounting

    monkeypatch.setenv("DPGEN_DATA_ROOT", str(tmp_path))  # no dataset files: public numbers only
    cfg = _compose(preset)
    assert cfg.task.name == "accounting"
    try:
        record = run_accounting(cfg)
    except FileNotFoundError as e:  # pragma: no cover - no preset needs one today
        pytest.skip(f"{preset}: its accounting needs a dataset file that is absent ({e})")
    out = capsys.readouterr().out
    assert record["task"] == "accounting" and record["method"] == cfg.method.name
    if not cfg.method.private:
        assert "non-private" in out
        return
    assert "neighbouring relation" in out
    if _poisson_ledger(cfg):
        assert record["accountant"] == ("pld" if cfg.privacy.accountant == "auto" else cfg.privacy.accountant)
        assert f"epsilon after {record['steps']} steps" in out


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_of_poisson_methods_pin_the_accountant_they_were_measured_with(preset):
    """A recorded result stays true when its table reruns: every Poisson-method preset but the tightest ones
    pins rdp or moments (the domain-adaptation presets for method=dpdann, their table's private row)."""
    configs = [_compose(preset)]
    if configs[0].dataset.name.startswith("da_") or hasattr(configs[0].dataset, "target"):
        configs.append(_compose(preset, "method=dpdann"))
    for cfg in configs:
        if not _poisson_ledger(cfg):
            continue
        if preset in TIGHTEST:
            assert cfg.privacy.accountant == "auto" and cfg.method.noise_multiplier is None
        else:
            assert cfg.privacy.accountant in ("rdp", "moments"), (preset, cfg.method.name, cfg.privacy.accountant)
            text = (CONFIG_DIR / "experiment" / f"{preset}.yaml").read_text()
            assert "accountant:" in text or _inherits_pin(text), preset


def _inherits_pin(text: str) -> bool:
    """A preset that extends another one (``defaults: [- <preset>]``) inherits its pin."""
    import yaml

    for entry in (yaml.safe_load(text) or {}).get("defaults", []):
        if isinstance(entry, str) and (CONFIG_DIR / "experiment" / f"{entry}.yaml").exists():
            return "accountant:" in Path(CONFIG_DIR / "experiment" / f"{entry}.yaml").read_text()
    return False


def test_accounting_prints_the_default_accountants_epsilon_with_the_rdp_cross_check(capsys):
    from dpgen.privacy.accountants import autodp_epsilon, pld_epsilon
    from dpgen.tasks.accounting import run_accounting

    record = run_accounting(_compose("dpsinkhorn_best_mnist"))
    out = capsys.readouterr().out
    z, q, steps = record["noise_multiplier"], record["sample_rate"], record["steps"]
    assert record["accountant"] == "pld" and z == pytest.approx(1.5999, abs=5e-4) and q == 500 / 60000
    assert steps == 120000  # the preset's 1,000 epochs
    assert "accountant: dp-accounting PLD (privacy.accountant=auto: the tightest valid accountant" in out
    assert f"epsilon after {steps} steps = {pld_epsilon(((z, q, steps),), 1e-5):.4f} (dp-accounting PLD)" in out
    assert f"cross-check autodp RDP: epsilon = {autodp_epsilon(((z, q, steps),), 1e-5, 'poisson'):.4f}" in out
    assert record["epsilon"] <= 10.0 < record["epsilon_cross_check"]["rdp"]


def test_the_dataset_schema_says_which_task_a_two_task_method_is_accounted_for():
    """dpswd trains generation and domain adaptation: ``task=accounting`` picks by the dataset schema's typed fact
    ``domain_pair`` (DADatasetConfig: a public source and a private target), never by probing for a key."""
    from omegaconf import OmegaConf

    from dpgen.config import DADatasetConfig, DatasetConfig, compose_raw
    from dpgen.tasks.accounting import _home_task

    assert DADatasetConfig.domain_pair is True and DatasetConfig.domain_pair is False
    da = compose_config(["task=accounting", "method=dpswd", "dataset=da_usps_mnist"])
    assert da.dataset.domain_pair and _home_task(da) == "domain_adaptation"
    images = compose_config(["task=accounting", "method=dpswd", "dataset=mnist"])
    assert not images.dataset.domain_pair and _home_task(images) == "generation"
    # a class fact, not a config key: no YAML can set it, and the saved config.yaml does not hold it
    raw = compose_raw(["task=domain_adaptation", "method=dpswd", "dataset=da_usps_mnist"])
    assert "domain_pair" not in OmegaConf.to_container(raw.dataset)
