"""scripts/select_on_validation.py: a contrast curve chosen on the held-out part of the private training set by the
exponential mechanism, composed in parallel with the run; and recall_indicators, its diversity term."""

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

QUICK = ["dataset=digits", "trainer.steps=30", "task.n_synthetic=500", "task.eval_models=[logreg]", "task.fid=false",
         "trainer.progress=false"]


def test_recall_indicators_average_to_prdcs_recall():
    from prdc import compute_prdc

    from dpgen.eval.fidelity import recall_indicators

    rng = np.random.default_rng(0)
    real = rng.normal(size=(300, 6)).astype(np.float32)
    fake = (rng.normal(size=(250, 6)) * 0.7 + 0.3).astype(np.float32)
    covered = recall_indicators(real, fake, k=3, chunk=64)
    assert covered.dtype == bool and covered.shape == (300,)
    ref = compute_prdc(real_features=real, fake_features=fake, nearest_k=3)["recall"]
    assert abs(covered.mean() - ref) < 1e-9
    # each real sample's indicator depends on it and the fakes only: dropping other real samples changes nothing
    assert np.array_equal(recall_indicators(real[::2], fake, k=3), covered[::2])


def _run(run_cli, tmp_path, name, *extra):
    code, out = run_cli("method=dpsinkhorn", *QUICK, *extra, f"hydra.run.dir={tmp_path / name}")
    assert code == 0, out[-2000:]
    # a run beside a held-out part says so, and what to do with it
    assert ("held out: dataset.validation=" in out and f"select_on_validation.py {tmp_path / name}" in out) \
        == bool(extra)
    return tmp_path / name


def test_selection_reads_only_the_held_out_part_and_writes_no_score(run_cli, tmp_path, monkeypatch, capsys):
    import select_on_validation as sov

    import dpgen.data

    run = _run(run_cli, tmp_path, "held", "dataset.validation=0.2")
    privacy = json.loads((run / "metrics.json").read_text())["privacy"]
    assert "dataset.validation=0.2" in privacy["validation_holdout"]
    splits = []
    real_load = dpgen.data.load_split
    monkeypatch.setattr(dpgen.data, "load_split", lambda cfg, split="train": splits.append(split)
                        or real_load(cfg, split))
    assert sov.main([str(run), "--candidates", "0", "8@0.3", "16@0.5", "--n-synthetic", "300"]) == 0
    assert splits == ["validation"]  # never the test split, never the training part
    out = capsys.readouterr().out
    sel = json.loads((run / "selection.json").read_text())
    assert sel["chosen"] in sel["candidates"] and len(sel["candidates"]) == 3
    assert sel["epsilon"] == 1.0 and sel["delta"] == 0.0 and sel["sensitivity"] == 2.0
    assert sel["epsilon_total"] == max(privacy["epsilon_spent"], 1.0)
    assert "add/remove" in sel["neighbouring_relation"] and "parallel" in sel["composition"]
    assert set(sel) == {"run", "candidates", "chosen", "held_out", "score", "samples", "mechanism", "sensitivity",
                        "epsilon", "delta", "neighbouring_relation", "composition", "checkpoint_step", "run_id", "run_epsilon_spent",
                        "run_delta", "epsilon_total", "not_covered", "seconds"}  # no scores, no counts
    assert re.search(r"task\.sharpen=\S+ task\.sharpen_at=\S+", out)
    # the release goes through the chosen curve and states the selection and the pair's epsilon
    from dpgen.release import release

    sheet = release(run, n=200)
    c = sel["chosen"]
    assert sheet["selection"]["chosen"] == c and sheet["epsilon_spent"] == sel["epsilon_total"]
    assert sheet["epsilon_of_training"] == privacy["epsilon_spent"]
    assert "exponential mechanism at epsilon 1" in sheet["post_processing"]
    assert ("contrast curve of slope" in sheet["post_processing"]) == bool(c["sharpen"])
    assert "epsilon 1" in (run / "release" / "DATASHEET.md").read_text()
    # task=evaluate of the run draws through the chosen curve too, and states the selection
    code, out = run_cli("task=evaluate", f"task.run={run}", "task.generations=1", "task.eval_models=[logreg]",
                        "trainer.progress=false", f"hydra.run.dir={tmp_path / 'eval'}")
    assert code == 0, out[-2000:]
    ev = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert ev["selection"]["chosen"] == c and "chosen on the run's held-out records at epsilon 1" in out
    assert (ev["sharpen"] or {"slope": 0.0})["slope"] == c["sharpen"]
    # the held-out part is spent once
    with pytest.raises(SystemExit):
        sov.main([str(run), "--n-synthetic", "300"])
    assert "already spent" in capsys.readouterr().err


def test_refusals_name_the_value_and_the_fix(run_cli, tmp_path, capsys):
    import select_on_validation as sov

    whole = _run(run_cli, tmp_path, "whole")
    with pytest.raises(SystemExit):
        sov.main([str(whole), "--n-synthetic", "300"])
    assert "dataset.validation=0.05" in capsys.readouterr().err
    held = _run(run_cli, tmp_path, "held", "dataset.validation=0.2")
    for args, said in ((["--epsilon", "50"], "above the run's budget"), (["--candidates", "0", "8@1.5"], "8@1.5"),
                       (["--candidates", "0", "x@y"], "K@T"), (["--candidates", "0", "0"], "two or more")):
        with pytest.raises(SystemExit):
            sov.main([str(held), "--n-synthetic", "300", *args])
        assert said in capsys.readouterr().err
    assert not (held / "selection.json").exists()


def test_a_release_refuses_an_edited_selection(tmp_path):
    from dpgen.release import read_selection
    from dpgen.tasks.finished_run import ReleaseError

    assert read_selection(tmp_path) is None
    (tmp_path / "selection.json").write_text(json.dumps({"chosen": {"sharpen": 3, "sharpen_at": 0.5}, "epsilon": 1,
                                                         "epsilon_total": 10, "candidates": [{"sharpen": 0,
                                                                                              "sharpen_at": 0.5}]}))
    with pytest.raises(ReleaseError, match="not one of its candidates"):
        read_selection(tmp_path)
    (tmp_path / "selection.json").write_text("{}")
    with pytest.raises(ReleaseError, match="select_on_validation"):
        read_selection(tmp_path)


def test_the_measuring_scripts_draw_through_a_selected_curve(tmp_path, monkeypatch):
    """fid_draws.py and fidelity_of_run.py measure what a release would draw: the selected curve unless --sharpen."""
    import fid_draws

    from dpgen import release

    (tmp_path / "selection.json").write_text(json.dumps({
        "chosen": {"sharpen": 8.0, "sharpen_at": 0.3}, "epsilon": 1.0, "epsilon_total": 9.9,
        "candidates": [{"sharpen": 0.0, "sharpen_at": 0.5}, {"sharpen": 8.0, "sharpen_at": 0.3}]}))
    asked = []

    class Stop(Exception):
        pass

    def fake_load(run, device="cpu", sharpen=None, data_root=None):
        asked.append(sharpen)
        raise Stop

    monkeypatch.setattr(release, "load_generator", fake_load)
    monkeypatch.setattr("dpgen.eval.fid.get_extractor", lambda *a, **k: object())
    for extra in ([], ["--sharpen", "0"]):
        with pytest.raises(Stop):
            fid_draws.main([str(tmp_path), "--draws", "1", "--n", "10", *extra])
    import fidelity_of_run

    with pytest.raises(Stop):
        fidelity_of_run.fidelity_of_run(tmp_path)
    assert asked == [(8.0, 0.3), (0.0, 0.5), (8.0, 0.3)]


def test_several_runs_beside_one_held_out_part_compose_for_the_chosen_release(run_cli, tmp_path, capsys):
    """Two runs of one held-out split scored together: one (run, curve) is drawn, the chosen run's release states the
    two trainings composed (the draw depends on both generators), and the other run's release is refused."""
    import select_on_validation as sov

    from dpgen.privacy.selection import scored_runs_epsilon
    from dpgen.release import read_selection, release
    from dpgen.tasks.finished_run import ReleaseError

    a = _run(run_cli, tmp_path, "a", "dataset.validation=0.2")
    b = _run(run_cli, tmp_path, "b", "dataset.validation=0.2", "method.repel=2")
    pa, pb = (json.loads((r / "metrics.json").read_text())["privacy"] for r in (a, b))
    assert sov.main([str(a), str(b), "--candidates", "0", "8@0.3", "--n-synthetic", "300"]) == 0
    sa, sb = (json.loads((r / "selection.json").read_text()) for r in (a, b))
    assert len(sa["candidates"]) == 4 and {c["run"] for c in sa["candidates"]} == {str(a), str(b)}
    assert sa["chosen"] == sb["chosen"] and sa["chosen"] in sa["candidates"]
    # each file names its own folder's weights, and the release's epsilon composes both trainings
    assert sa["run_id"] != sb["run_id"] and [c["run_id"] for c in sa["candidates"][::2]] == [sa["run_id"], sb["run_id"]]
    total = scored_runs_epsilon([pa["composition"], pb["composition"]], 1.0, pa["delta"])
    assert sa["epsilon_total"] == sb["epsilon_total"] == total > max(pa["epsilon_spent"], pb["epsilon_spent"])
    assert "composed" in sa["composition"] and [r["run"] for r in sa["runs"]] == [str(a), str(b)]
    winner, loser = (a, b) if sa["chosen"]["run"] == str(a) else (b, a)
    assert f"task.run={winner}" in capsys.readouterr().out
    sheet = release(winner, n=100)
    assert sheet["epsilon_spent"] == total and sheet["selection"]["runs"] == sa["runs"]
    assert "2 runs times the curves" in sheet["post_processing"]
    assert read_selection(winner)["chosen"]["run"] == str(winner)  # its file describes its checkpoint
    with pytest.raises(ReleaseError, match="drew another"):
        read_selection(loser)
    with pytest.raises(ReleaseError, match="drew another"):
        release(loser, n=100)
    # a file whose stated epsilon was lowered is refused
    edited = dict(json.loads((winner / "selection.json").read_text()), epsilon_total=1.0)
    (winner / "selection.json").write_text(json.dumps(edited))
    with pytest.raises(ReleaseError, match="was edited"):
        read_selection(winner)
    assert sov.main(["--restate", str(winner)]) == 0  # raised back to the composition, no new draw
    assert read_selection(winner)["epsilon_total"] == total
    assert "restated" not in json.loads((loser / "selection.json").read_text())  # it held the composition already
    # both held-out parts are spent
    for r in (a, b):
        with pytest.raises(SystemExit):
            sov.main([str(r), "--n-synthetic", "300"])
        assert "already spent" in capsys.readouterr().err


def test_runs_scored_together_must_share_the_held_out_part(run_cli, tmp_path, capsys):
    import select_on_validation as sov

    a = _run(run_cli, tmp_path, "a", "dataset.validation=0.2")
    c = _run(run_cli, tmp_path, "c", "dataset.validation=0.3")
    for args, said in (([a, c], "different data settings"), ([a, a], "named twice")):
        with pytest.raises(SystemExit):
            sov.main([*map(str, args), "--candidates", "0", "8@0.3", "--n-synthetic", "300"])
        assert said in capsys.readouterr().err
    assert not (a / "selection.json").exists() and not (c / "selection.json").exists()
    # one curve is a choice among two runs, never among one
    with pytest.raises(SystemExit):
        sov.main([str(a), "--candidates", "0", "--n-synthetic", "300"])
    assert "two or more" in capsys.readouterr().err


def test_scored_runs_epsilon_composes_the_trainings_and_takes_the_larger_part():
    from dpgen.privacy.accountants import pld_epsilon
    from dpgen.privacy.selection import scored_runs_epsilon

    q = 500 / 60000
    one = [(1.6, q, 20000)]
    alone = scored_runs_epsilon([one], 1.0, 1e-5)
    assert abs(alone - pld_epsilon(tuple(one), 1e-5)) < 1e-12
    two = scored_runs_epsilon([one, one], 1.0, 1e-5)
    assert abs(two - pld_epsilon(((1.6, q, 40000),), 1e-5)) < 0.02 * two and two > alone
    # a held-out selection dearer than the trainings sets the epsilon
    assert scored_runs_epsilon([[(50.0, q, 10)]], 3.0, 1e-5) == 3.0
    with pytest.raises(Exception, match="composition"):
        scored_runs_epsilon([one, []], 1.0, 1e-5)


def test_a_draw_among_runs_whose_settings_were_chosen_earlier_composes_that_choice(run_cli, tmp_path, capsys):
    """Runs whose settings were chosen by earlier mechanisms on these records (a preset's privacy.selection_cost)
    carry that choice into a draw among them: every training and every selection's epsilon, sequentially. A file
    written without it states less and is refused; --restate raises it without a new draw, and never lowers it."""
    import select_on_validation as sov

    from dpgen.privacy.selection import carried_epsilon, scored_runs_epsilon
    from dpgen.release import read_selection, release
    from dpgen.tasks.finished_run import ReleaseError

    earlier = (1.6, 0.01, 300)
    cost = ["privacy.selected_on_private=a_test_choice", f"privacy.selection_cost.trainings=[{list(earlier)}]",
            "privacy.selection_cost.pure_epsilon=0.5"]
    a = _run(run_cli, tmp_path, "a", "dataset.validation=0.2", *cost)
    b = _run(run_cli, tmp_path, "b", "dataset.validation=0.2", "method.repel=2", *cost)
    pa, pb = (json.loads((r / "metrics.json").read_text())["privacy"] for r in (a, b))
    delta = pa["delta"]
    assert sov.main([str(a), str(b), "--candidates", "0", "8@0.3", "--n-synthetic", "300"]) == 0
    sa, sb = (json.loads((r / "selection.json").read_text()) for r in (a, b))
    total = carried_epsilon([*pa["composition"], *pb["composition"]], [earlier], 1.5, delta)
    assert abs(scored_runs_epsilon([pa["composition"], pb["composition"]], 1.0, delta, [earlier], 0.5) - total) < 1e-12
    without = scored_runs_epsilon([pa["composition"], pb["composition"]], 1.0, delta)
    assert sa["epsilon_total"] == sb["epsilon_total"] == total > without
    assert total > max(pa["epsilon_with_settings_choice"], pb["epsilon_with_settings_choice"])
    assert sa["carried"]["trainings"] == [list(earlier)] and sa["carried"]["pure_epsilon"] == 0.5
    assert sa["composition"].startswith("sequential")
    winner, loser = (a, b) if sa["chosen"]["run"] == str(a) else (b, a)
    sheet = release(winner, n=100)
    assert sheet["epsilon_spent"] == total and sheet["selection"]["carried"] == sa["carried"]
    assert "chosen by earlier mechanisms" in sheet["post_processing"]
    # a file of an older dpgen (no 'carried', the scored runs alone) is refused, naming the fix
    for r in (a, b):
        old = json.loads((r / "selection.json").read_text())
        old.pop("carried")
        (r / "selection.json").write_text(json.dumps(dict(old, epsilon_total=without)))
    with pytest.raises(ReleaseError, match=f"at least {total:.4f}.*--restate {re.escape(str(winner))}"):
        read_selection(winner)
    ds = winner / "release" / "datasheet.json"  # a release drawn by the older dpgen stated the lower figure
    ds.write_text(json.dumps(dict(json.loads(ds.read_text()), epsilon_spent=without)))
    capsys.readouterr()
    assert sov.main(["--restate", str(winner)]) == 0
    out = capsys.readouterr().out
    assert f'"epsilon_total": {total}' in out
    # that release is named, with the command that draws it again
    assert (f"{winner / 'release'} is a release whose datasheet states epsilon {without:.4f}, below {total:.4f}: "
            f"draw it again (dpgen sample {winner} n=100 out={winner / 'release'})") in out
    for r in (a, b):
        restated = json.loads((r / "selection.json").read_text())
        assert restated["epsilon_total"] == total and restated["carried"] == sa["carried"]
        assert "no new draw" in restated["restated"] and restated["chosen"] == sa["chosen"]
    assert read_selection(winner)["epsilon_total"] == total
    with pytest.raises(ReleaseError, match="drew another"):
        read_selection(loser)
    code, out = run_cli("task=evaluate", f"task.run={winner}", "task.generations=1", "task.eval_models=[logreg]",
                        "trainer.progress=false", f"hydra.run.dir={tmp_path / 'eval'}")
    assert code == 0 and f"the release's epsilon: {total:.4f} (2 scored run(s), the earlier choices" in out
    # never lowered: a file stating more stays as it is
    (winner / "selection.json").write_text(json.dumps(dict(json.loads((winner / "selection.json").read_text()),
                                                           epsilon_total=total + 5)))
    assert sov.main(["--restate", str(winner)]) == 0
    assert json.loads((winner / "selection.json").read_text())["epsilon_total"] == total + 5
    # one run alone beside the same held-out part: its own training, the earlier ones, both selections, and the
    # draw among a and b that the data set's register recorded (its runs' trainings and its epsilon; the cost it
    # carried is this run's own, counted once)
    c = _run(run_cli, tmp_path, "c", "dataset.validation=0.2", *cost)
    pc = json.loads((c / "metrics.json").read_text())["privacy"]
    assert sov.main([str(c), "--candidates", "0", "8@0.3", "--n-synthetic", "300"]) == 0
    sc = json.loads((c / "selection.json").read_text())
    assert sc["epsilon_total"] == carried_epsilon(pc["composition"], [earlier, *pa["composition"],
                                                                      *pb["composition"]], 2.5, delta)
    assert sc["earlier_draws"]["draws"][0]["runs"] == [str(a), str(b)] and "register" in sc["composition"]
    assert sc["run_composition"] == pc["composition"] and read_selection(c)["epsilon_total"] == sc["epsilon_total"]
    (c / "selection.json").write_text(json.dumps(dict(sc, epsilon_total=pc["epsilon_spent"])))
    with pytest.raises(ReleaseError, match="--restate"):
        read_selection(c)


def test_a_draw_beside_another_folder_counts_the_data_sets_earlier_draws(run_cli, tmp_path, capsys):
    """The held-out part is one public hash for every run of a data set (a larger fraction's part holds a smaller
    one's): a draw on a run in a new folder composes the draws the data set's register recorded beside other
    folders, unless the run's settings state at least their cost. --record adds a draw made before the register."""
    import select_on_validation as sov

    from dpgen.privacy.held_out_registry import read_draws
    from dpgen.privacy.selection import carried_epsilon
    from dpgen.release import read_selection

    register = tmp_path / "held_out" / "digits.json"
    a = _run(run_cli, tmp_path, "a", "dataset.validation=0.2")
    pa = json.loads((a / "metrics.json").read_text())["privacy"]
    # a register that cannot be read stops the draw before any held-out record is read: never taken as empty
    register.parent.mkdir(parents=True)
    register.write_text("{not json")
    with pytest.raises(SystemExit):
        sov.main([str(a), "--candidates", "0", "8@0.3", "--n-synthetic", "300"])
    assert "cannot be read" in capsys.readouterr().err and not (a / "selection.json").exists()
    assert not (a / sov.SPENT).exists()
    register.unlink()
    assert sov.main([str(a), "--candidates", "0", "8@0.3", "--n-synthetic", "300"]) == 0
    sa = json.loads((a / "selection.json").read_text())
    assert "carried" not in sa and "earlier_draws" not in sa  # the first draw on the data set: parallel, as before
    (entry,) = read_draws(register)
    assert entry["runs"] == [{"run": str(a), "run_id": sa["run_id"], "trainings": pa["composition"]}]
    assert entry["epsilon"] == 1.0 and entry["epsilon_total"] == sa["epsilon_total"] and entry["validation"] == 0.2
    assert set(entry) == {"when", "dataset", "validation", "runs", "epsilon", "carried", "epsilon_total", "chosen"}
    # a run at another fraction in another folder: its held-out part holds a's, so the draw composes a's
    b = _run(run_cli, tmp_path, "b", "dataset.validation=0.3")
    pb = json.loads((b / "metrics.json").read_text())["privacy"]
    assert sov.main([str(b), "--candidates", "0", "8@0.3", "--n-synthetic", "300"]) == 0
    sb = json.loads((b / "selection.json").read_text())
    total = carried_epsilon(pb["composition"], pa["composition"], 2.0, pb["delta"])
    assert sb["epsilon_total"] == total > pb["epsilon_spent"]
    assert sb["carried"]["trainings"] == pa["composition"] and sb["carried"]["pure_epsilon"] == 1.0
    assert sb["earlier_draws"]["counted"].startswith("composed") and str(register) in sb["carried"]["from"]
    assert read_selection(b)["epsilon_total"] == total
    # a file lowered to the run's own figure is refused: the floor holds it to the cost it lists
    (b / "selection.json").write_text(json.dumps(dict(sb, epsilon_total=pb["epsilon_spent"])))
    with pytest.raises(Exception, match="--restate"):
        read_selection(b)
    assert len(read_draws(register)) == 2
    # settings that state at least the recorded cost count it already: nothing is added twice
    stated = [*pa["composition"], *pb["composition"]]
    cost = ["privacy.selected_on_private=a_test_choice", f"privacy.selection_cost.trainings={stated}",
            "privacy.selection_cost.pure_epsilon=2.0"]
    c = _run(run_cli, tmp_path, "c", "dataset.validation=0.1", *cost)
    pc = json.loads((c / "metrics.json").read_text())["privacy"]
    assert sov.main([str(c), "--candidates", "0", "8@0.3", "--n-synthetic", "300"]) == 0
    sc = json.loads((c / "selection.json").read_text())
    assert sc["epsilon_total"] == carried_epsilon(pc["composition"], stated, 3.0, pc["delta"])
    assert sc["earlier_draws"]["counted"].startswith("already") and len(sc["earlier_draws"]["draws"]) == 2
    # --record: a draw made before the register existed is added once
    register.unlink()
    capsys.readouterr()
    assert sov.main(["--record", str(a), str(c)]) == 0 and sov.main(["--record", str(a)]) == 0
    out = capsys.readouterr().out
    assert out.count('"recorded": "added"') == 2 and '"recorded": "there already"' in out
    assert [d["runs"][0]["run"] for d in read_draws(register)] == [str(a), str(c)]


def test_the_register_counts_each_run_and_cost_once_and_refuses_what_it_cannot_read(tmp_path):
    from dpgen.privacy.held_out_registry import covers, dataset_key, earlier_cost, read_draws, record_draw

    q = 0.01
    d1 = {"runs": [{"run_id": "r1", "trainings": [[1.5, q, 100]]}, {"run_id": "r2", "trainings": [[2.0, q, 50]]}],
          "epsilon": 1.0, "carried": {"trainings": [[1.2, q, 10]], "pure_epsilon": 0.5}, "chosen": {"sharpen": 0}}
    d2 = {"runs": [{"run_id": "r2", "trainings": [[2.0, q, 50]]}, {"run_id": "r3", "trainings": [[1.0, q, 20]]}],
          "epsilon": 0.5, "carried": {"trainings": [[1.2, q, 10]], "pure_epsilon": 0.5}, "chosen": {"sharpen": 8}}
    t, p = earlier_cost([d1, d2])
    assert sorted(t) == sorted([(1.5, q, 100), (2.0, q, 50), (1.2, q, 10), (1.0, q, 20)]) and p == 2.0
    t, p = earlier_cost([d1, d2], exclude_runs=["r1"], already={"trainings": [[1.2, q, 10]], "pure_epsilon": 0.5})
    assert sorted(t) == sorted([(2.0, q, 50), (1.0, q, 20)]) and p == 1.5
    # covering: one to one, same rate and steps, a noise multiplier no larger (costing at least as much)
    assert covers([[1.49, q, 100], [2.0, q, 50]], 1.0, [[1.5, q, 100], [2.0, q, 50]], 1.0)
    assert not covers([[1.51, q, 100], [2.0, q, 50]], 1.0, [[1.5, q, 100], [2.0, q, 50]], 1.0)  # a larger noise
    assert not covers([[1.0, q, 100]], 1.0, [[1.5, q, 100], [2.0, q, 50]], 1.0)  # one stated for two
    assert not covers([[1.0, q, 99], [1.0, q, 50]], 1.0, [[1.5, q, 100], [2.0, q, 50]], 1.0)  # other steps
    assert not covers([[1.5, q, 100], [2.0, q, 50]], 0.9, [[1.5, q, 100], [2.0, q, 50]], 1.0)  # less pure epsilon
    assert covers([[1.0, q, 50], [1.9, q, 50]], 0.0, [[2.0, q, 50], [1.0, q, 50]], 0.0)  # matched in any order
    # kept once; an unreadable register is refused, never read as empty
    path = tmp_path / "held_out" / "x.json"
    assert read_draws(path) == [] and record_draw(path, d1) and not record_draw(path, dict(d1))
    assert record_draw(path, d2) and len(read_draws(path)) == 2
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot be read"):
        read_draws(path)
    assert dataset_key("mnist") == "mnist" and dataset_key("npz", "/a/b.npz") != dataset_key("npz", "/a/c.npz")
    # the same records at another size share one register; MNIST's t10k file (mnist10k) is other records
    from dpgen.data import DATASETS
    from dpgen.privacy.held_out_registry import SAME_RECORDS
    assert dataset_key("usps8") == dataset_key("usps") and dataset_key("celeba32") == dataset_key("celeba")
    assert dataset_key("mnist10k") != dataset_key("mnist")
    assert all(k in DATASETS and v in DATASETS for k, v in SAME_RECORDS.items())
    assert "/" not in dataset_key("own/../x", "/a/b.npz")


def test_a_preset_that_states_an_earlier_cost_does_not_cover_the_draw_made_beside_its_runs(tmp_path):
    """MNIST's case: dpsinkhorn_best_mnist states two earlier trainings and one selection; a draw among two runs of it
    is recorded with that cost carried. A new draw beside a third run of the preset must compose the recorded draw's
    two runs and its epsilon (the preset's two stated trainings are other runs with the same settings), and counts
    the preset's own cost once; dpsinkhorn_best_mnist_push, which states all four trainings and both selections,
    covers it."""
    import select_on_validation as sov

    g = [1.5998948172125125, 500 / 60000, 120000]
    stated_g = [1.5998, 500 / 60000, 120000]
    preset = {"trainings": [stated_g, stated_g], "pure_epsilon": 1.0, "from": "the preset"}
    draw = {"runs": [{"run": "r0", "run_id": "a", "trainings": [g]}, {"run": "r2", "run_id": "b", "trainings": [g]}],
            "epsilon": 1.0, "carried": {"trainings": [stated_g, stated_g], "pure_epsilon": 1.0}}
    merged, said = sov.with_earlier_draws(preset, [draw], ["c"], tmp_path / "mnist.json")
    assert said["counted"].startswith("composed")
    assert sorted(map(tuple, merged["trainings"])) == sorted(map(tuple, [stated_g, stated_g, g, g]))
    assert merged["pure_epsilon"] == 2.0  # the preset's selection and the recorded draw's, each once
    push = {"trainings": [stated_g] * 4, "pure_epsilon": 2.0, "from": "the push preset"}
    same, said = sov.with_earlier_draws(push, [draw], ["c"], tmp_path / "mnist.json")
    assert same is push and said["counted"].startswith("already")
    # the scored runs themselves are never counted as earlier ones
    assert sov.with_earlier_draws({}, [draw], ["a", "b"], tmp_path / "mnist.json")[0]["trainings"] == [stated_g] * 2
