"""One registry, one construction call: every method YAML names a registered class, a wrong task is
refused with the task the method trains, and ``build`` gives the object a run trains."""

from pathlib import Path

import pytest

from dpgen.config import compose_config
from dpgen.methods.registry import REGISTRY, DataInfo, build, method_class, methods_for, register, tasks_of

CONF = Path(__file__).resolve().parents[2] / "dpgen" / "conf" / "method"


def test_every_method_yaml_names_a_registered_class():
    names = sorted(p.stem for p in CONF.glob("*.yaml"))
    missing = [n for n in names if not tasks_of(n)]
    assert not missing, f"conf/method/{missing[0]}.yaml has no @register class"
    assert tasks_of("dpswd") == ("generation", "domain_adaptation")
    assert tasks_of("dpsgd") == ("classification",)


@pytest.mark.parametrize("method,task,fix", [("dann", "generation", "task=domain_adaptation"),
                                             ("dpsgd", "generation", "task=classification"),
                                             ("dpsinkhorn", "classification", "task=generation")])
def test_a_method_on_the_wrong_task_names_the_task_it_trains(method, task, fix):
    cfg = compose_config([f"method={method}"])
    with pytest.raises(ValueError, match=f"method={method} trains .*add {fix}"):
        method_class(cfg, task)


def test_a_name_registered_twice_for_one_task_is_refused():
    class A:
        pass

    register("zz_test_method", tasks=("generation",))(A)
    try:
        register("zz_test_method", tasks=("generation",))(A)  # the same class again: idempotent
        with pytest.raises(ValueError, match="registered twice"):
            register("zz_test_method", tasks=("generation",))(type("B", (), {}))
        with pytest.raises(ValueError, match="unknown task"):
            register("zz", tasks=("generate",))
    finally:
        REGISTRY["generation"].unregister("zz_test_method")


def test_build_gives_the_method_a_run_trains():
    cfg = compose_config(["method=dpsinkhorn", "trainer.batch_size=50"])
    m = build(cfg, DataInfo(1000, (1, 8, 8), 10), 10)
    assert type(m) is methods_for("generation")["dpsinkhorn"] and m.sample_rate == pytest.approx(0.05)
    cfg = compose_config(["task=classification", "method=dpsgd", "dataset=mnist", "trainer.batch_size=100"])
    m = build(cfg, DataInfo(60000, (1, 28, 28), 10), 600)
    assert m.sample_rate == pytest.approx(100 / 60000) and m.max_steps == 600
    assert DataInfo(5, (3, 4)).dim == 12 and DataInfo(5, (), dim=7).dim == 7


def test_a_method_reads_its_ledgers_accountant_never_a_copy():
    """``method.accountant`` is the ledger's when there is one (a copy taken at construction could outlive it), else
    the method's own; no class attribute of a method may shadow it."""
    from types import SimpleNamespace

    from dpgen.methods.base import GenerativeMethod

    class Plain(GenerativeMethod):
        pass

    m = Plain()
    assert m.accountant is None
    own = object()
    m.accountant = own
    assert m.accountant is own
    m.ledger = SimpleNamespace(accountant="the ledger's")
    assert m.accountant == "the ledger's"
