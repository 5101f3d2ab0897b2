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


def _public_classes() -> list[type]:
    import fairq._core as core

    return [
        obj for name, obj in vars(core).items() if not name.startswith("_") and inspect.isclass(obj)
    ]


@pytest.mark.parametrize("cls", _public_classes(), ids=lambda c: c.__name__)
def test_every_public_class_and_member_is_documented(cls: type) -> None:
    """``help(fairq.X)`` shows the contract: the class and every public
    method and property of the extension carry a docstring (issue 10, item 6)."""
    assert (cls.__doc__ or "").strip(), f"{cls.__name__} has no docstring"
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        assert (getattr(member, "__doc__", None) or "").strip(), f"{cls.__name__}.{name}"


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("FCFS", ["arrival order", "exactly once", "KeyError"]),
        ("LPM", ["longest", "skipped"]),
        ("VTC", ["smallest counter", "Lift", "w_in"]),
        ("DLPM", ["deficit", "quantum", "Theorem 4.1"]),
        ("D2LPM", ["worker_quantum", "least-loaded", "on_evict"]),
        ("RadixTree", ["page_size", "evict", "namespace"]),
    ],
)
def test_policy_docstrings_state_the_contract(name: str, words: list[str]) -> None:
    doc = getattr(fairq, name).__doc__
    for word in words:
        assert word in doc, f"help(fairq.{name}) does not mention {word!r}"


def test_engine_options_live_in_one_module_and_keep_their_old_paths() -> None:
    """The engines' shared options (issue 23, item 7): one module,
    ``fairq.engineopts``; the old import paths re-export it, and each
    engine's ``FairOptions`` is the shared class with its own parameters."""
    from fairq import engineopts
    from fairq.sglang import tenants as sg
    from fairq.transformers import policies as tf_policies
    from fairq.vllm import persist
    from fairq.vllm import tenants as vl

    for name in tf_policies.__all__:
        assert getattr(tf_policies, name) is getattr(engineopts, name), name
    assert vl.STATE_KEYS is engineopts.STATE_KEYS
    assert vl.state_options is engineopts.state_options
    assert persist.DEFAULT_INTERVAL_S == engineopts.DEFAULT_INTERVAL_S
    for engine, policies in ((vl, vl.FAIR_POLICIES), (sg, sg.POLICIES)):
        assert issubclass(engine.FairOptions, engineopts.FairOptions)
        assert engine.FairOptions.ENGINE_POLICIES == policies
        assert engine.FairOptions.RESOLVER is engine.TenantResolver
        assert isinstance(engine.FairOptions("lpm").tenant, engine.TenantResolver)
    assert type(sg.make_options("fairq-lpm")) is sg.FairOptions
    assert vl.FairOptions.ENGINE_KEYS == ("dual_phase", *engineopts.STATE_KEYS)
    with pytest.raises(TypeError, match="tenant resolver"):
        engineopts.FairOptions.from_mapping("lpm", {})
    # the resolvers' repr is the shared rule's (fairq.tenancy.SourceOrder)
    assert repr(sg.TenantResolver(order=["rid"], separator="/")) == (
        "TenantResolver(order=['rid'], label_key='tenant', separator='/', default='default')"
    )
    assert repr(vl.TenantResolver()).startswith(
        "TenantResolver(order=['header', 'extra_args', 'lora', "
    )
    assert repr(vl.TenantResolver()).endswith(
        "extra_args_key='tenant', separator=':', default='default')"
    )
