"""``dpgen sample``: a synthetic-data release from a trained run's checkpoint (post-processing, no private
data read), its datasheet, and ``task=evaluate`` on the released set giving the training-time accuracy."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from dpgen import release
from dpgen.privacy.report import PrivacyReport

QUICK = ["dataset=digits", "trainer.steps=60", "task.n_synthetic=2000", "task.eval_models=[logreg,mlp]",
         "task.eval_max_epochs=5", "trainer.progress=false"]


def _files_line(out: str) -> Path:
    return Path(re.search(r"files: (\S+?metrics\.json)", out).group(1)).parent


def test_sample_then_evaluate_gives_the_training_time_accuracy(run_cli, monkeypatch, capsys):
    code, out = run_cli("method=dpsinkhorn", *QUICK)
    assert code == 0, out[-2000:]
    run = _files_line(out)
    trained = json.loads((run / "metrics.json").read_text())

    # sampling is post-processing: it must not read any split of the private data set
    import dpgen.data

    def no_data(*a, **k):
        raise AssertionError("dpgen sample read the data set")

    with monkeypatch.context() as m:
        m.setattr(dpgen.data, "load_split", no_data)
        m.setattr(dpgen.data, "load_dataset", no_data)
        assert release.main([str(run)]) == 0
    printed = capsys.readouterr().out
    assert "released 2,000 samples of dpsinkhorn on digits" in printed
    rel = run / "release"
    with np.load(rel / "synthetic.npz") as f:
        x, y = f["x"], f["y"]
    assert x.shape == (2000, 1, 8, 8) and x.dtype == np.float32 and y.shape == (2000,) and y.dtype == np.int64
    assert set(np.unique(y)) <= set(range(10)) and 0.0 <= x.min() and x.max() <= 1.0
    assert (rel / "samples.png").stat().st_size > 1000
    sheet = json.loads((rel / "datasheet.json").read_text())
    p = trained["privacy"]
    assert sheet["epsilon_spent"] == p["epsilon_spent"] and sheet["delta"] == p["delta"]
    assert sheet["neighbouring_relation"] == p["neighbouring_relation"]
    assert sheet["not_covered"] == list(PrivacyReport.of(p, "dpsinkhorn").not_covered)  # the typed report's list
    assert (sheet["noise_multiplier"], sheet["noise_std"]) == (p["noise_multiplier"], p["noise_std"])
    assert sheet["accountant"] == p["accountant"] and sheet["method"] == "dpsinkhorn"
    assert len(sheet["checkpoint_sha256"]) == 64 and sheet["is_the_training_time_evaluation_set"]
    md = (rel / "DATASHEET.md").read_text()
    assert "neighbouring relation" in md and "checkpoint SHA-256" in md and "task=evaluate" in md

    # the papers' protocol on the released set: the run's own downstream accuracy again
    code, out = run_cli("task=evaluate", f"task.synthetic={rel / 'synthetic.npz'}", "dataset=digits", "seed=0",
                        f"hydra.run.dir={run.parent / 'eval'}",
                        "task.eval_models=[logreg,mlp]", "task.eval_max_epochs=5", "trainer.progress=false")
    assert code == 0, out[-2000:]
    ev = json.loads((_files_line(out) / "metrics.json").read_text())
    for name in ("logreg", "mlp"):
        assert ev["downstream"][name]["test_acc"] == pytest.approx(trained["downstream"][name]["test_acc"], abs=1e-9)


def test_release_refusals(run_cli, tmp_path):
    code, out = run_cli("method=swd", *QUICK, "task.eval_models=[logreg]")
    assert code == 0, out[-2000:]
    run = _files_line(out)
    with pytest.raises(release.ReleaseError, match="not differentially private.*allow_non_private=true"):
        release.release(run)
    sheet = release.release(run, n=50, out=tmp_path / "rel", allow_non_private=True)
    assert not sheet["private"] and "NOT PRIVATE" in (tmp_path / "rel" / "DATASHEET.md").read_text()
    assert not sheet["is_the_training_time_evaluation_set"]
    with pytest.raises(release.ReleaseError, match="config.yaml is missing: give the folder of a finished generation run"):
        release.release(tmp_path)
    assert release.main([str(run), "m=3"]) == 2


def test_evaluate_uses_the_threads_it_is_given(run_cli, tmp_path, monkeypatch):
    """task=evaluate trains its classifiers on trainer.threads threads, as a training run's evaluation does (it used
    torch's default, every core, and took 100x longer beside another job)."""
    import torch

    import dpgen.eval

    x = np.random.default_rng(0).random((60, 1, 8, 8), dtype=np.float32)
    np.savez(tmp_path / "set.npz", x=x, y=np.arange(60) % 10)
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # what the process had (the test workers run on one thread each)
    seen = []
    real = dpgen.eval.evaluate_downstream
    monkeypatch.setattr(dpgen.eval, "evaluate_downstream",
                        lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    code, out = run_cli("task=evaluate", f"task.synthetic={tmp_path / 'set.npz'}", "dataset=digits",
                        "trainer.threads=1", "task.eval_models=[logreg]")
    assert code == 0, out[-1500:]
    assert seen == [1] and torch.get_num_threads() == 2  # the share ends with the evaluation
    torch.set_num_threads(before)


def test_evaluate_refuses_a_bad_set(run_cli, tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, images=np.zeros((3, 1, 8, 8)))
    code, out = run_cli("task=evaluate", f"task.synthetic={bad}", "dataset=digits")
    assert code == 2 and "needs arrays x (samples) and y" in out
    code, out = run_cli("task=evaluate", f"task.synthetic={tmp_path / 'none.npz'}", "dataset=digits")
    assert code == 2 and "no such file" in out and "dpgen sample" in out


def test_a_release_samples_on_the_device_the_run_evaluated_on(run_cli, tmp_path, monkeypatch):
    """A CUDA and a CPU random generator draw different samples: a run trained (and evaluated) on CUDA is
    released on CUDA where there is one, and a release on another device says it is not the training-time
    set (it claimed it was, and task=evaluate gave another accuracy on a CUDA node)."""
    code, out = run_cli("method=dpsinkhorn", *QUICK, "task.eval_models=[logreg]")
    assert code == 0, out[-2000:]
    run = _files_line(out)
    metrics = json.loads((run / "metrics.json").read_text())
    here = metrics["device"]
    assert release.sampling_device(metrics) == ("cuda" if here.startswith("cuda") else "cpu")
    sheet = release.release(run, out=tmp_path / "own")  # the default: the run's device
    assert sheet["device"] == release.sampling_device(metrics) and sheet["is_the_training_time_evaluation_set"]
    # a run evaluated on CUDA, released on a machine without one: sampled on the CPU, and said to differ
    metrics["device"] = "cuda:0"
    (run / "metrics.json").write_text(json.dumps(metrics))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert release.sampling_device(metrics) == "cpu"
    sheet = release.release(run, out=tmp_path / "cpu")
    assert sheet["device"] == "cpu" and not sheet["is_the_training_time_evaluation_set"]
    assert "no (another n, seed or device)" in (tmp_path / "cpu" / "DATASHEET.md").read_text()


def test_evaluate_draws_more_generations_of_a_finished_run(run_cli):
    """task=evaluate task.run=<run> task.generations=G: G synthetic sets of the run's generator by its own protocol
    (the papers' "5 runs of generation"; the tables' generation runs use the same code): generation 0 is the run's
    own evaluation again, the privacy is the weights' (nothing charged)."""
    code, out = run_cli("method=dpsinkhorn", *QUICK)
    assert code == 0, out[-2000:]
    run = _files_line(out)
    trained = json.loads((run / "metrics.json").read_text())
    code, out = run_cli("task=evaluate", f"task.run={run}", "task.generations=2", f"hydra.run.dir={run.parent / 'eval'}")
    assert code == 0, out[-2000:]
    ev = json.loads((_files_line(out) / "metrics.json").read_text())
    assert ev["generations"] == 2 and len(ev["per_generation"]) == 2
    first, second = ev["per_generation"]
    assert first["logreg"] == pytest.approx(trained["downstream"]["logreg"]["test_acc"], abs=1e-9)
    assert first != second  # another synthetic set
    assert ev["summary"]["logreg"]["mean"] == pytest.approx((first["logreg"] + second["logreg"]) / 2, abs=1e-3)
    assert ev["privacy"]["epsilon_spent"] == trained["privacy"]["epsilon_spent"]
    assert ev["eval_models"] == ["logreg", "mlp"] and "mlp" in first  # null: the run's own classifiers
    # other classifiers than the run's own: the same synthetic set (generation 0), only LogReg trained
    code, out = run_cli("task=evaluate", f"task.run={run}", "task.eval_models=[logreg]",
                        f"hydra.run.dir={run.parent / 'eval1'}")
    assert code == 0, out[-2000:]
    ev1 = json.loads((_files_line(out) / "metrics.json").read_text())
    assert ev1["eval_models"] == ["logreg"] and "mlp" not in ev1["per_generation"][0]
    assert ev1["per_generation"][0]["logreg"] == pytest.approx(first["logreg"], abs=1e-9)
    code, out = run_cli("task=evaluate", f"task.run={run}", "task.eval_models=[]", f"hydra.run.dir={run.parent / 'e3'}")
    assert code == 2 and "task.eval_models=[]" in out and "leave it null" in out
    code, out = run_cli("task=evaluate", f"hydra.run.dir={run.parent / 'eval2'}")
    assert code == 2 and "give one of the two" in out
    # its own run's folder is not an evaluation's: refused before anything there is overwritten
    before = (run / "metrics.json").read_bytes()
    code, out = run_cli("task=evaluate", f"task.run={run}", f"hydra.run.dir={run}")
    assert code == 2 and "holds another run's results (checkpoints/)" in out and "its own folder" in out
    assert (run / "metrics.json").read_bytes() == before


def test_a_run_whose_config_predates_the_newer_keys_samples_as_with_their_defaults(run_cli, tmp_path):
    """An older run's config.yaml lacks model.upsample, init, dct_project, sharpen(_at), memory_format and
    dataset.path, validation: load_generator fills each with its schema default (the one place an older config
    is read raw), so the generator draws exactly what it draws with the keys written out, and the release's
    command is built."""
    import torch
    import yaml

    from dpgen.tasks.finished_run import load_generator

    code, out = run_cli("method=swd", *QUICK, "task.eval_models=[logreg]")
    assert code == 0, out[-2000:]
    run = _files_line(out)
    draw = lambda: load_generator(run)[2].sample(20, generator=torch.Generator().manual_seed(5))[0]  # noqa: E731
    new = draw()
    saved = yaml.safe_load((run / "config.yaml").read_text())
    for key in ("upsample", "init", "dct_project", "sharpen", "sharpen_at", "memory_format"):
        saved["model"].pop(key)
    for key in ("path", "validation", "n_train_counted"):
        saved["dataset"].pop(key)
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert torch.equal(draw(), new)
    sheet = release.release(run, n=50, out=tmp_path / "rel", allow_non_private=True)
    assert "dataset.path" not in sheet["evaluate_again"] and "dataset=digits" in sheet["evaluate_again"]


def test_evaluate_reads_a_run_with_loader_options_added_by_plus(tmp_path):
    """A run trained with ``+dataset.options.resize=20 +dataset.options.pad=4`` (USPS framed as MNIST, the band
    proxy) is read back by task=evaluate task.run=<run> with those options (the composed tree's struct flag had
    refused them: "Key 'resize' is not in struct"), while a key no schema declares is still refused."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError

    from dpgen.config import compose_raw
    from dpgen.tasks.evaluate import _run_config

    cfg = compose_raw(["method=dpsinkhorn", "dataset=usps", "task=generation", "+dataset.options.resize=20",
                       "+dataset.options.pad=4"])
    OmegaConf.save(cfg, tmp_path / "config.yaml")
    rcfg = _run_config(tmp_path)
    assert dict(rcfg.dataset.options) == {"resize": 20, "pad": 4} and rcfg.dataset.name == "usps"
    bad = OmegaConf.to_container(cfg)
    bad["trainer"]["stepz"] = 1
    OmegaConf.save(OmegaConf.create(bad), tmp_path / "config.yaml")
    with pytest.raises(ConfigKeyError, match="stepz"):  # the struct flag still holds outside dataset.options
        _run_config(tmp_path)


def test_a_release_through_a_public_restorer_names_its_public_data(run_cli, tmp_path):
    """``restorer=<file.pt>``: the band samples pass through a restorer learnt on a public set; the datasheet says
    "with public data" and names the file; a restorer learnt on the run's own set, for another band or frame, or
    on a set that is not a public proxy, is refused by name before anything is written."""
    import torch

    from dpgen.models.restorer import Restorer

    code, out = run_cli("method=dpsinkhorn", *QUICK, "task.eval_models=[logreg]", "model.generator=dct",
                        "model.dct_size=4")
    assert code == 0, out[-2000:]
    run = _files_line(out)

    def restorer_file(name, **over):
        torch.manual_seed(0)
        saved = {"state": Restorer(8, 3).state_dict(), "width": 8, "depth": 3, "band": 4, "public_dataset": "usps8",
                 "blur": 1.0, "size": 8, "inner": 0, **over}
        torch.save(saved, tmp_path / name)
        return tmp_path / name

    good = restorer_file("good.pt")
    import dpgen.data

    def no_data(*a, **k):
        raise AssertionError("a restored release read the data set")

    with pytest.MonkeyPatch.context() as m:  # post-processing of the weights and of public weights: no data read
        m.setattr(dpgen.data, "load_split", no_data)
        m.setattr(dpgen.data, "load_dataset", no_data)
        sheet = release.release(run, n=300, out=tmp_path / "rel", restorer=good)
    assert sheet["public_data"].startswith("usps8") and sheet["restorer"]["sha256"] and sheet["restorer"]["band"] == 4
    assert "restorer learnt on the public set usps8" in sheet["post_processing"]
    assert not sheet["is_the_training_time_evaluation_set"] and sheet["epsilon_spent"] == release.release(
        run, n=10, out=tmp_path / "plain")["epsilon_spent"]  # post-processing: the privacy is the run's
    md = (tmp_path / "rel" / "DATASHEET.md").read_text()
    assert "| public data | usps8" in md and "(of the run's own samples (through its contrast curve)" in md
    with np.load(tmp_path / "rel" / "synthetic.npz") as f:
        x = f["x"]
    assert x.shape == (300, 1, 8, 8) and 0.0 <= x.min() and x.max() <= 1.0
    # the same draw without the restorer: the band (no curve), which the restorer changed
    from dpgen.models.restorer import load_restorer
    from dpgen.tasks.finished_run import load_generator

    cfg, _, gen, shape, _, _ = load_generator(run, sharpen=(0.0, 0.5))
    band, _ = release.draw(gen, 300, int(cfg.seed) + 2)
    net, _ = load_restorer(good, "digits", shape, 4)
    with torch.no_grad():
        assert np.allclose(x, net(band).clamp(0, 1).numpy(), atol=1e-5)

    for bad, why in ((restorer_file("own.pt", public_dataset="digits"), "learnt on digits, the run's own data set"),
                     (restorer_file("mnist.pt", public_dataset="mnist"), "'mnist', which is not a public proxy"),
                     (restorer_file("band.pt", band=3), "learnt band 3, the run draws band 4"),
                     (restorer_file("size.pt", size=16), "learn one with --size 8"),
                     (tmp_path / "missing.pt", "no such file")):
        with pytest.raises(release.ReleaseError, match=why):
            release.release(run, n=10, out=tmp_path / "refused", restorer=bad)
    assert not (tmp_path / "refused").exists()
    assert release.main([str(run), f"restorer={tmp_path / 'missing.pt'}"]) == 2
    # a curve chosen on held-out records (selection.json for these very weights): the restorer would replace it
    from dpgen.train.run_record import load_checkpoint_file

    state = load_checkpoint_file(run / "checkpoints" / "last.pt")
    chosen = {"sharpen": 4.0, "sharpen_at": 0.5}
    (run / "selection.json").write_text(json.dumps({"chosen": chosen, "candidates": [chosen], "epsilon": 1.0,
                                                    "epsilon_total": 1.0, "run_id": state.get("run_id"),
                                                    "checkpoint_step": state.get("step")}))
    with pytest.raises(release.ReleaseError, match="chosen on its held-out records .selection.json."):
        release.release(run, n=10, out=tmp_path / "refused", restorer=good)
    code, out = run_cli("task=evaluate", f"task.run={run}", f"task.restorer={good}", f"hydra.run.dir={tmp_path / 's'}")
    assert code == 2 and "use one or the other" in out, out[-800:]
    assert not (tmp_path / "refused").exists()
    (run / "selection.json").unlink()

    # task=evaluate task.run=<run> task.restorer=<file>: the run's protocol on the restored generator, generation 0
    # the released set's draw; with DPImageBench's protocol beside it, whose train-split numbers are not covered
    code, out = run_cli("task=evaluate", f"task.run={run}", f"task.restorer={good}", "task.eval_models=[logreg]",
                        "task.protocol=dpimagebench", "task.dpimagebench.n_synthetic=120", "task.dpimagebench.epochs=1",
                        "task.dpimagebench.depth=8", "task.dpimagebench.fid_real=60",
                        f"hydra.run.dir={tmp_path / 'ev'}")
    assert code == 0, out[-2000:]
    ev = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert ev["restorer"]["public_dataset"] == "usps8" and ev["public_data"].startswith("usps8") and ev["sharpen"] is None
    assert ev["protocol"] == "dpimagebench" and "dpimagebench_resnet" in ev["per_generation"][0]
    block = ev["dpimagebench"][0]  # the protocol's own block, its counts and what is below theirs
    assert (block["n_synthetic"], block["resnet"]["epochs"], block["resnet"]["depth"]) == (120, 1, 8)
    assert block["below_theirs"] and "DPImageBench: ResNet-8" in out
    assert "dpimagebench protocol's FID" in str(ev["privacy"]["not_covered"])
    assert "with public data" in out and "epsilon does not cover them" in out
    assert 0.0 <= ev["per_generation"][0]["logreg"] <= 100.0
    for bad, why in ((["task.synthetic=x.npz", f"task.restorer={good}"], "applies to task.run=<run folder>"),
                     ([f"task.run={run}", f"task.restorer={good}", "task.sharpen=4"], "give one of the two"),
                     ([f"task.run={run}", "task.protocol=theirs"], "task.protocol"),
                     ([f"task.run={run}", "task.fid_samples=5"], "FID needs at least 12 images")):
        code, out = run_cli("task=evaluate", *bad, f"hydra.run.dir={tmp_path / 'bad'}")
        assert code == 2 and why in out, out[-800:]
