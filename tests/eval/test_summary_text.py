"""A run's summary states what this run measured, in words true for any data, and where to compare: no lab results
(dated reference numbers) in runtime text (issue 85)."""

from pathlib import Path

from dpgen.tasks.generation import COMPARE_WITH, GenerationTask


def _summary(capsys, dataset, k):
    m = {"method": "swd", "dataset": dataset, "steps": 10, "stop_reason": "completed", "train_seconds": 1.0,
         "device": "cpu", "privacy": {"private": False, "epsilon_spent": 0.0},
         "downstream": {"logreg": {"test_acc": 70.0}, "class_mean": {"test_acc": 60.0}, "spread_ratio": 0.5,
                        "n_classes": k, "n_test": 30, "n_synthetic": 100,
                        **({"compare_with": COMPARE_WITH[dataset]} if dataset in COMPARE_WITH else {})}}
    GenerationTask().summary(m, Path("/tmp/x"))
    return capsys.readouterr().out


def test_the_summary_counts_the_classes_it_has_and_names_no_measured_references(capsys):
    out = _summary(capsys, "gaussians", 3)
    assert "beyond 3 class averages" in out and "ten" not in out and "pixels" not in out and "images" not in out
    assert "compare with" not in out and "2026" not in out  # no dated lab numbers
    out = _summary(capsys, "digits", 10)
    assert "compare with: docs/DEFAULT.md" in out and "2026" not in out and "%," not in out.split("compare with")[1]
