"""Public names: ``fairq.__all__`` is complete and resolves, the LocalScheduler
protocol fits all four local schedulers, deprecated names warn and are the
renamed objects (issue 10, item 5)."""

from __future__ import annotations

import importlib
import inspect
import warnings

import pytest

import fairq
from fairq.sched import LocalScheduler

FEATURE_MODULES = ["fairq.drr", "fairq.wfq", "fairq.radix", "fairq.dualphase", "fairq.sched"]
FEATURE_MODULES += ["fairq.dispatch"]


def test_all_resolves_and_is_listed_by_dir() -> None:
    assert len(fairq.__all__) == len(set(fairq.__all__))
    for name in fairq.__all__:
        assert getattr(fairq, name) is not None, name
        assert name in dir(fairq), name


@pytest.mark.parametrize("module", FEATURE_MODULES)
def test_all_holds_every_class_and_factory(module: str) -> None:
    mod = importlib.import_module(module)
    for name in mod.__all__:
        obj = getattr(mod, name)
        if inspect.isclass(obj) or name.startswith("make_"):
            assert name in fairq.__all__, f"{module}.{name} missing from fairq.__all__"
            assert getattr(fairq, name) is obj


def test_cache_bucket_and_dispatcher_factory_at_top_level() -> None:
    assert fairq.CacheBucket("hot", 0).name == "hot"
    d = fairq.make_dispatcher("d2lpm", 2)
    assert isinstance(d, fairq.D2LPM) and isinstance(d, fairq.Dispatcher)


def test_local_scheduler_protocol() -> None:
    tree = fairq.RadixTree()
    for s in (fairq.FCFS(), fairq.LPM(tree), fairq.VTC(), fairq.DLPM(tree, 1.0)):
        assert isinstance(s, LocalScheduler)
        assert isinstance(fairq.make_scheduler(type(s).__name__, tree, **_opts(s)), type(s))
    assert not isinstance(fairq.WFQQueue(), LocalScheduler)
    assert fairq.LocalScheduler is LocalScheduler


def _opts(s: object) -> dict[str, float]:
    return {"quantum": 1.0} if isinstance(s, fairq.DLPM) else {}


@pytest.mark.parametrize("module", ["fairq.sim", "fairq.sim.metrics"])
def test_deprecated_jain_warns_and_is_jain_index(module: str) -> None:
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"{module}\.jain is deprecated.*jain_index"):
        old = mod.jain
    assert old is mod.jain_index
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mod.jain_index([1.0, 1.0]) == 1.0  # the new name does not warn
    with pytest.raises(AttributeError, match="no attribute 'jains'"):
        _ = mod.jains
