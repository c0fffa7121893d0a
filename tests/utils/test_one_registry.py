"""One registry primitive for every named thing: the same calls, the same error, discovery without an import
list."""

import sys
import textwrap

import pytest

from dpgen.utils.registry import Registry


def test_register_lookup_build_names_and_one_error():
    r = Registry("widget", key="model.widget", extra=("auto",))

    @r.register("small")
    class Small:
        def __init__(self, size=1):
            self.size = size

    r.register("large", lambda: "L")
    assert r.names() == ("small", "large") and list(r) == ["small", "large"] and len(r) == 2
    assert "small" in r and "tiny" not in r and r.get("tiny") is None
    assert r.lookup("small") is Small and r["small"] is Small
    assert r.build("small", size=3).size == 3 and r.build("large") == "L"
    with pytest.raises(ValueError) as e:
        r.lookup("smal")
    msg = str(e.value)
    assert "model.widget='smal'" in msg and "did you mean small?" in msg and "auto, small or large" in msg
    r.register("small", Small)  # the same object again: fine
    with pytest.raises(ValueError, match="registered twice"):
        r.register("small", object)
    assert r.unregister("large")() == "L" and r.names() == ("small",)


def test_the_error_type_is_the_registrys():
    class Bad(ValueError):
        pass

    with pytest.raises(Bad, match="choose one of"):
        Registry("accountant", error=Bad).lookup("x")


def test_discovery_imports_every_module_of_its_package(tmp_path, monkeypatch):
    """A new module in the package is found with no list to extend; modules starting with _ are skipped."""
    pkg = tmp_path / "zz_regpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from dpgen.utils.registry import Registry\n"
                                     "THINGS = Registry('thing', package='zz_regpkg')\n")
    for name in ("alpha", "beta"):
        (pkg / f"{name}.py").write_text(textwrap.dedent(f"""
            from zz_regpkg import THINGS
            THINGS.register({name!r}, {name.upper()!r})
        """))
    (pkg / "_private.py").write_text("raise RuntimeError('a private module is not imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import zz_regpkg

        assert zz_regpkg.THINGS.names() == ("alpha", "beta")
        assert zz_regpkg.THINGS.lookup("beta") == "BETA"
    finally:
        for m in [m for m in sys.modules if m.startswith("zz_regpkg")]:
            del sys.modules[m]


def test_a_finder_fills_a_registry_on_first_lookup():
    """Entries found elsewhere than in a package's modules (the YAML files of conf/table/): found once, lazily."""
    calls = []

    def find():
        calls.append(1)
        return [("alpha", 1), ("beta", 2)]

    r = Registry("table", finder=find)
    assert calls == []
    assert r.names() == ("alpha", "beta") and r.lookup("beta") == 2 and calls == [1]
    with pytest.raises(ValueError, match="did you mean alpha"):
        r.lookup("alpah")
    assert calls == [1]


def test_every_named_thing_of_dpgen_has_a_registry():
    """Methods, datasets, generators, classifiers, loggers, accountants, tasks and tables: the same primitive."""
    from dpgen.data import DATASETS
    from dpgen.eval.downstream import CLASSIFIERS
    from dpgen.methods.registry import REGISTRY
    from dpgen.models.generators import GENERATORS
    from dpgen.privacy.accountants import ACCOUNTANTS
    from dpgen.tables.declared import TABLES
    from dpgen.tasks import TASKS, TRAINABLE
    from dpgen.train.loggers import LOGGERS

    for r in (DATASETS, CLASSIFIERS, GENERATORS, ACCOUNTANTS, TASKS, TRAINABLE, LOGGERS, TABLES, *REGISTRY.values()):
        assert isinstance(r, Registry) and len(r) > 0, r
    assert {"dpsinkhorn", "dpswd", "dpmerf"} <= set(REGISTRY["generation"])
    assert set(TASKS) == {"generation", "classification", "domain_adaptation", "accounting", "evaluate"}
    # methods sit below tasks, so the tasks that train are named once in dpgen.methods.registry: they must be the
    # trainable task registry's, neither more nor fewer
    from dpgen.methods.registry import TASK_NAMES

    assert set(TASK_NAMES) == set(TRAINABLE)
    assert set(CLASSIFIERS) == {"logreg", "mlp", "cnn", "resnet"}
    assert {"dct", "dcgan", "merf_conv"} <= set(GENERATORS) and {"pld", "rdp", "bdp", "wdp"} <= set(ACCOUNTANTS)


def test_the_built_in_methods_need_no_import_list():
    """``dpgen.methods`` imports no method module itself: the registry's discovery finds them all."""
    import dpgen.methods as pkg
    from pathlib import Path

    text = Path(pkg.__file__).read_text()
    assert "import_module" not in text and "dpsinkhorn" not in text


def test_an_abbreviated_name_is_suggested_in_full(run_cli):
    """dataset=fmnist suggested mnist (the closest spelling); the name it abbreviates is fashion_mnist (issue 84).
    The same rule serves a registry's error and the command line's."""
    from dpgen.utils.suggest import abbreviations, closest

    assert abbreviations("fashion_mnist") == ["fmnist", "fm"] and abbreviations("mnist") == []
    assert closest("fmnist", ["mnist", "fashion_mnist", "mnist10k"]) == "fashion_mnist"
    assert closest("mnistt", ["mnist", "fashion_mnist"]) == "mnist"
    code, out = run_cli("dataset=fmnist")
    assert code == 2 and "did you mean fashion_mnist?" in out, out
