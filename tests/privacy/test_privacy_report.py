"""One typed privacy report (issue 83, "Two names for noise").

``sigma`` was the noise MULTIPLIER in DP-Sinkhorn's report and the noise STANDARD DEVIATION in DP-MERF's, DP-SWD's,
DP-DANN's and DP-SGD's; a YAML table read it with ``p.get("sigma", 0.0)`` and printed ``sigma 0`` for a new method.
Every private method now states ``noise_multiplier`` (z) and ``noise_std`` (z x the release's sensitivity, in the
released quantity's units), and every reader goes through :class:`dpgen.privacy.report.PrivacyReport`, which
refuses a private report without its epsilon or delta and writes n/a, never 0, for a noise fact not stated.
"""

import math

import pytest
import torch

from dpgen.config import compose_config
from dpgen.methods.registry import DataInfo
from dpgen.privacy.report import PrivacyReport, PrivacyReportError

N = 1000  # the declared n of the builds below (public)


def _build(overrides, info, task=None, **extra):
    from dpgen.methods.registry import build

    return build(compose_config(["trainer.progress=false", *overrides]), info, 10, task, **extra)


def _generation(*overrides):
    return _build(["dataset=digits", "task.eval_models=[]", "trainer.batch_size=50", *overrides],
                  DataInfo(N, (1, 8, 8), 10))


def _da(*overrides):
    from dpgen.models.da_nets import make_da_nets

    torch.manual_seed(0)
    _, _, disc, feat = make_da_nets("auto", (1, 28, 28), 10)
    return _build(["task=domain_adaptation", "trainer.batch_size=8", *overrides],
                  DataInfo(N, (1, 28, 28), 10, feat_dim=feat), "domain_adaptation", disc=disc)


# each private method: how to build it, its release's l2 sensitivity and the std its mechanism draws, both read
# from the method's own mechanism (not from its report)
CASES = {
    "dpsinkhorn (batch clip: 2C)": (lambda: _generation("method=dpsinkhorn", "method.clip_mode=batch"),
                                    lambda m: 2 * m.mechanism.clip, lambda m: m.mechanism.noise_std),
    "dpsinkhorn (per-record clip: C)": (lambda: _generation("method=dpsinkhorn", "method.clip_mode=per_sample"),
                                        lambda m: m.mechanism.clip, lambda m: m.mechanism.noise_std),
    "dpsinkhorn_param": (lambda: _generation("method=dpsinkhorn_param", "model.generator=mlp"),
                         lambda m: m.mechanism.sensitivity, lambda m: m.mechanism.noise_std),
    "dpsinkhorn_adv": (lambda: _generation("method=dpsinkhorn_adv", "model.generator=mlp"),
                       lambda m: 2 * m.mechanism.clip, lambda m: m.mechanism.noise_std),
    "dpswd": (lambda: _generation("method=dpswd"),
              lambda m: math.sqrt(m.calibration["squared_sensitivity"]), lambda m: m.sigma),
    "dpswd (bernstein)": (lambda: _generation("method=dpswd", "method.bound=bernstein"),
                          lambda m: math.sqrt(m.calibration["squared_sensitivity"]), lambda m: m.sigma),
    "dpmerf (replace one: 2 / n)": (lambda: _generation("method=dpmerf"), lambda m: 2.0 / N, lambda m: m.noise_std),
    "entropic_ldp (gaussian: diameter 2r)": (lambda: _generation("method=entropic_ldp", "method.mechanism=gaussian"),
                                             lambda m: 2 * m.radius, lambda m: m.noise_scale),
    "dpsgd (C)": (lambda: _build(["task=classification", "method=dpsgd", "dataset=digits", "trainer.batch_size=50"],
                                 DataInfo(N, (1, 8, 8), 10)), lambda m: m.clip, lambda m: m.noise_std),
    "dpdann (C)": (lambda: _da("method=dpdann", "method.noise_multiplier=1.3"),  # given z: no PLD calibration
                   lambda m: m.clip, lambda m: m.noise_multiplier * m.clip),
    "dpswd on domain adaptation": (lambda: _da("method=dpswd"),
                                   lambda m: math.sqrt(m.calibration["squared_sensitivity"]), lambda m: m.sigma),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_private_method_states_its_noise_multiplier_and_its_noise_std(case):
    build, sensitivity, drawn = CASES[case]
    method = build()
    rep = method.privacy_report()
    assert rep["private"] is True and "sigma" not in rep, case  # one name meant two things: gone
    z, std = rep["noise_multiplier"], rep["noise_std"]
    assert isinstance(z, float) and isinstance(std, float) and z > 0 and std > 0, case
    # noise_std is the Gaussian's std in the released quantity's units: z x the release's sensitivity
    assert std == pytest.approx(z * sensitivity(method), rel=1e-9), case
    assert std == pytest.approx(drawn(method), rel=1e-9), case  # and the std the mechanism draws with
    typed = PrivacyReport.of(rep, method.name)
    assert (typed.noise_multiplier, typed.noise_std) == (z, std) and typed.epsilon == rep["epsilon_spent"]
    assert typed.delta == rep["delta"] and typed.relation and typed.private


def test_the_std_a_report_states_is_the_std_the_release_draws():
    """Simulation: DP-Sinkhorn's batch-clipped image gradient released on a zero gradient is its noise alone;
    its empirical std is the report's noise_std (2 C z), not its noise multiplier z."""
    method = _generation("method=dpsinkhorn", "method.clip_mode=batch", "method.clip=0.25")
    rep = method.privacy_report()
    out = method.mechanism.privatize(torch.zeros(200, 1, 8, 8), generator=torch.Generator().manual_seed(0))
    assert out.numel() == 12_800
    assert float(out.std()) == pytest.approx(rep["noise_std"], rel=0.03)  # 12,800 draws: se 0.6 %
    assert abs(rep["noise_std"] - rep["noise_multiplier"]) > 0.2 * rep["noise_multiplier"]  # 2C = 0.5: they differ


def test_a_laplace_release_states_no_gaussian_noise_rather_than_0():
    rep = _generation("method=entropic_ldp", "method.mechanism=laplace").privacy_report()
    assert rep["noise_multiplier"] is None and rep["noise_std"] is None and rep["noise_scale"] > 0
    assert PrivacyReport.of(rep, "entropic_ldp").cells()["noise_std"] == "n/a"


# ---- PrivacyReport.of: no silent 0 -----------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["epsilon_spent", "delta"])
def test_a_private_report_without_its_epsilon_or_delta_is_refused(missing):
    rep = {"private": True, "epsilon_spent": 3.0, "delta": 1e-5, "noise_multiplier": 1.1}
    rep.pop(missing)
    with pytest.raises(PrivacyReportError, match=f"states no {missing}"):
        PrivacyReport.of(rep, "my_method")
    with pytest.raises(PrivacyReportError, match="does not say whether the run is private"):
        PrivacyReport.of({"epsilon_spent": 3.0, "delta": 1e-5})
    with pytest.raises(PrivacyReportError, match="noise_multiplier='1.1', which is not a number"):
        PrivacyReport.of({"private": True, "epsilon_spent": 3.0, "delta": 1e-5, "noise_multiplier": "1.1"})


def test_a_non_private_report_has_infinite_epsilon_and_no_noise():
    typed = PrivacyReport.of({"private": False, "epsilon_spent": 0.0})  # the base class's report
    assert typed.epsilon == math.inf and typed.delta is None and not typed.guarantee_holds
    assert typed.cells() == {"epsilon_spent": "inf", "noise_multiplier": "n/a", "noise_std": "n/a"}


def test_reports_of_older_dpgen_map_sigma_by_the_method_that_wrote_it():
    base = {"private": True, "epsilon_spent": 9.9, "delta": 1e-5}
    # DP-Sinkhorn's sigma was the multiplier: the std follows from the sensitivity it stated
    old = PrivacyReport.of({**base, "sigma": 1.1, "sensitivity": 1.0}, "dpsinkhorn")
    assert (old.noise_multiplier, old.noise_std) == (1.1, 1.1)
    old = PrivacyReport.of({**base, "sigma": 0.8, "clip": 0.5}, "dpsinkhorn_adv")  # no sensitivity: std unknown
    assert (old.noise_multiplier, old.noise_std) == (0.8, None)
    # the other methods' sigma was the std (DP-SWD: z sqrt(w), with the ledger's z beside it)
    old = PrivacyReport.of({**base, "noise_multiplier": 0.7, "sigma": 2.2, "squared_sensitivity_bound": 10.0}, "dpswd")
    assert (old.noise_multiplier, old.noise_std) == (0.7, 2.2)
    old = PrivacyReport.of({**base, "sigma": 1e-3, "sensitivity": 2e-3}, "dpmerf")
    assert old.noise_std == 1e-3 and old.noise_multiplier == pytest.approx(0.5)
    # a method dpgen does not know: its sigma is not read (it could be either), and nothing becomes 0
    new = PrivacyReport.of({**base, "noise_multiplier": 1.1, "sigma": 1.1}, "dp_mean_match")
    assert (new.noise_multiplier, new.noise_std) == (1.1, None)
    assert new.cells() == {"epsilon_spent": 9.9, "noise_multiplier": 1.1, "noise_std": "n/a"}
    assert PrivacyReport.of({**base, "sigma": 1.1}).cells()["noise_multiplier"] == "n/a"


def test_a_tiny_noise_std_is_not_rounded_to_0():
    """DP-MERF at n = 60,000: std z 2 / n ~ 1.7e-5, which a 4-decimal round wrote as 0."""
    typed = PrivacyReport.of({"private": True, "epsilon_spent": 10.0, "delta": 1e-5, "noise_multiplier": 0.5,
                              "noise_std": 0.5 * 2 / 60000})
    assert typed.cells()["noise_std"] == pytest.approx(1.667e-5) and typed.cells()["noise_std"] > 0


# ---- the readers: a new method without noise facts reads n/a, never 0 --------------------------------------------

NEW = {"method": "my_new_method", "dataset": "digits", "steps": 20, "stop_reason": "completed", "train_seconds": 1.0,
       "device": "cpu", "privacy": {"private": True, "epsilon_spent": 3.0, "delta": 1e-5, "epsilon_budget": 3.0,
                                    "neighbouring_relation": "add/remove one record", "sample_rate": 0.05},
       "downstream": {"logreg": {"test_acc": 50.0}, "n_test": 360, "n_synthetic": 300}}


def _cell_result(m):
    from dpgen.tables.grid import Cell, CellResult

    return CellResult(Cell("new", None, "new"), runs=[m])


def test_a_table_row_of_a_new_method_without_noise_facts_prints_n_a_never_0():
    from dpgen.tables import declared
    from dpgen.tables.dpswd_da import da_row
    from dpgen.tables.grid import _Generations

    row = declared.downstream_row(_cell_result(NEW), {})
    assert row["epsilon_spent"] == 3.0 and row["noise_multiplier"] == "n/a" and row["noise_std"] == "n/a"
    assert "sigma" not in row
    assert declared.fid_row(_cell_result(NEW), {})["noise_std"] == "n/a"
    gens = _Generations.__new__(_Generations)
    gens.wall, gens.per_gen, gens.fid_note, gens.protocol = 1.0, {"logreg": [50.0]}, None, None
    summary = gens.summary(NEW)
    assert (summary["noise_multiplier"], summary["noise_std"], summary["epsilon_spent"]) == ("n/a", "n/a", 3.0)
    assert declared.fid_row(_cell_result({**summary, "steps": 20}), {})["noise_multiplier"] == "n/a"
    da = {**NEW, "target_acc": 50.0, "privacy": {**NEW["privacy"], "bound": "frame", "row_bound": "clip: ..."}}
    assert da_row(_cell_result(da), {})["noise_std"] == "n/a"


def test_a_table_refuses_a_private_run_whose_report_lacks_its_epsilon():
    from dpgen.tables import declared

    broken = {**NEW, "privacy": {"private": True, "delta": 1e-5}}
    with pytest.raises(PrivacyReportError, match="epsilon_spent"):
        declared.downstream_row(_cell_result(broken), {})


def test_the_run_summary_says_what_the_report_does_not_state(capsys, tmp_path):
    from dpgen.tasks.generation import GenerationTask

    GenerationTask.summary(GenerationTask.__new__(GenerationTask), NEW, tmp_path / "run")
    line = next(x for x in capsys.readouterr().out.splitlines() if "privacy:" in x)
    assert "noise: not stated by the report" in line and "sigma" not in line and "epsilon spent 3.0000" in line
    from dpgen.tasks.domain_adaptation import DomainAdaptationTask

    da = {**NEW, "problem": "U-M", "source": "usps", "target": "mnist", "target_acc": 50.0, "source_acc": 90.0,
          "privacy": {**NEW["privacy"], "noise_multiplier": 0.7, "noise_std": 2.2, "bound": "frame",
                      "guarantee_holds": True}}
    DomainAdaptationTask.summary(DomainAdaptationTask.__new__(DomainAdaptationTask), da, tmp_path / "run")
    line = next(x for x in capsys.readouterr().out.splitlines() if "privacy (target only)" in x)
    assert "noise multiplier 0.7, noise std 2.2" in line and "sigma" not in line


def test_collect_reads_the_typed_report(tmp_path):
    import json

    from dpgen import sweeps

    job = tmp_path / "sweep" / "0"
    job.mkdir(parents=True)
    (job / "metrics.json").write_text(json.dumps(NEW))
    (row,) = sweeps.collect(tmp_path / "sweep")
    assert row["epsilon"] == 3.0 and row["noise_multiplier"] == "n/a" and row["noise_std"] == "n/a"
    (job / "metrics.json").write_text(json.dumps({**NEW, "privacy": {"private": False, "epsilon_spent": 0.0}}))
    (row,) = sweeps.collect(tmp_path / "sweep")
    assert row["epsilon"] == "inf"  # a non-private run spent no budget: it has no guarantee, not epsilon 0


def test_the_datasheet_states_both_noise_facts_or_null(tmp_path):
    from dpgen import release

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.pt").write_bytes(b"weights")
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"seed": 0, "dataset": {"shape": [1, 8, 8], "num_classes": 10, "path": None},
                            "model": {}})  # config.yaml
    files = {"npz": str(tmp_path / "synthetic.npz")}
    sheet = release.datasheet(cfg, NEW, run, 10, 2, "cpu", files, {**NEW["privacy"], "checkpoint_step": 20})
    assert sheet["noise_multiplier"] is None and sheet["noise_std"] is None and sheet["epsilon_spent"] == 3.0
    assert "| noise multiplier / noise std | n/a / n/a |" in release._markdown(sheet)
    known = {**NEW["privacy"], "noise_multiplier": 1.1, "noise_std": 0.55, "checkpoint_step": 20}
    sheet = release.datasheet(cfg, {**NEW, "method": "dpsinkhorn"}, run, 10, 2, "cpu", files, known)
    assert (sheet["noise_multiplier"], sheet["noise_std"]) == (1.1, 0.55)
    assert "| noise multiplier / noise std | 1.1 / 0.55 |" in release._markdown(sheet)
    assert sheet["settings_chosen_on_other_records"] is None and "other records" not in release._markdown(sheet)
    # a preset whose settings were chosen on another data set's records (privacy.selected_on) says so
    elsewhere = {**known, "settings_chosen_on_other_records": "chosen on mnist's records; this run trains on usps's"}
    sheet = release.datasheet(cfg, NEW, run, 10, 2, "cpu", files, elsewhere)
    assert "| settings chosen on other records | chosen on mnist's records; this run trains on usps's |" in \
        release._markdown(sheet)
    with pytest.raises(PrivacyReportError, match="epsilon_spent"):
        release.datasheet(cfg, NEW, run, 10, 2, "cpu", files, {"private": True, "delta": 1e-5})
