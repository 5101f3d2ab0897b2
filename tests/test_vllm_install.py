"""fairq.vllm.install() and fairq.vllm.scheduler against a fake vLLM.

vLLM is not installed in the test environment; a minimal package with the
module layout and names fairq touches is injected into ``sys.modules``.
"""

from __future__ import annotations

import abc
import enum
import json
import sys
import types
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest

import fairq.vllm as fv
import fairq.vllm.scheduler as fsched
from fairq.vllm import FCFSRequestQueue, PriorityRequestQueue

from reference.vllm import Req


def _fake_vllm() -> dict[str, types.ModuleType]:
    mods = {
        name: types.ModuleType(name)
        for name in (
            "vllm",
            "vllm.v1",
            "vllm.v1.core",
            "vllm.v1.core.sched",
            "vllm.v1.core.sched.request_queue",
            "vllm.v1.core.sched.scheduler",
            "vllm.v1.core.sched.async_scheduler",
        )
    }
    mods["vllm"].__version__ = "0.33.0"  # type: ignore[attr-defined]  # a tested series
    rq = mods["vllm.v1.core.sched.request_queue"]

    class SchedulingPolicy(enum.Enum):
        FCFS = "fcfs"
        PRIORITY = "priority"
        SJF = "sjf"

    class RequestQueue(abc.ABC):  # noqa: B024 - stands in for vLLM's ABC
        pass

    class VllmFCFS(deque, RequestQueue):  # type: ignore[type-arg]
        def add_request(self, r: Any) -> None:
            self.append(r)

    class VllmSJF(VllmFCFS):
        pass

    def create_request_queue(policy: SchedulingPolicy) -> Any:
        if policy == SchedulingPolicy.SJF:
            return VllmSJF()
        if policy in (SchedulingPolicy.FCFS, SchedulingPolicy.PRIORITY):
            return VllmFCFS()
        raise ValueError(f"Unknown scheduling policy: {policy}")

    rq.SchedulingPolicy = SchedulingPolicy  # type: ignore[attr-defined]
    rq.RequestQueue = RequestQueue  # type: ignore[attr-defined]
    rq.VllmFCFS = VllmFCFS  # type: ignore[attr-defined]
    rq.VllmSJF = VllmSJF  # type: ignore[attr-defined]
    rq.create_request_queue = create_request_queue  # type: ignore[attr-defined]

    sm = mods["vllm.v1.core.sched.scheduler"]
    sm.create_request_queue = create_request_queue  # type: ignore[attr-defined]
    sm.SchedulingPolicy = SchedulingPolicy  # type: ignore[attr-defined]
    code = """
class Scheduler:
    def __init__(self, policy="fcfs", queued=()):
        self.policy = SchedulingPolicy(policy)
        self.waiting = create_request_queue(self.policy)
        self.kv_holding_waiting = create_request_queue(self.policy)
        for r in queued:
            self.waiting.add_request(r)

    def temp_queue(self):
        return create_request_queue(self.policy)
"""
    exec(code, sm.__dict__)  # noqa: S102 - module body of the fake
    am = mods["vllm.v1.core.sched.async_scheduler"]

    class AsyncScheduler(sm.Scheduler):  # type: ignore[name-defined,misc]
        pass

    am.AsyncScheduler = AsyncScheduler  # type: ignore[attr-defined]
    return mods


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, types.ModuleType]]:
    mods = _fake_vllm()
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    for name in ("FairqScheduler", "FairqAsyncScheduler"):
        monkeypatch.delitem(fsched.__dict__, name, raising=False)
    monkeypatch.delenv(fsched.ENV_VAR, raising=False)
    yield mods
    fv.uninstall()
    for name in ("FairqScheduler", "FairqAsyncScheduler"):
        fsched.__dict__.pop(name, None)


def _hide_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every ``import vllm...`` fail, even when vLLM is installed and
    already imported by another test (its submodules are cached too)."""
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "vllm", None)


def test_install_without_vllm_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide_vllm(monkeypatch)
    with pytest.raises(ImportError, match=r"fairq.vllm.install\(\) needs vLLM"):
        fv.install()


def test_scheduler_class_without_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide_vllm(monkeypatch)
    monkeypatch.delitem(fsched.__dict__, "FairqScheduler", raising=False)
    with pytest.raises(ImportError, match="needs vLLM"):
        fsched.FairqScheduler  # noqa: B018
    with pytest.raises(AttributeError):
        fsched.Nope  # noqa: B018


def test_install_patches_factory_and_registers(fake_vllm: dict[str, types.ModuleType]) -> None:
    rq = fake_vllm["vllm.v1.core.sched.request_queue"]
    sm = fake_vllm["vllm.v1.core.sched.scheduler"]
    original = rq.create_request_queue
    done = fv.install()
    assert done == [
        "vllm.v1.core.sched.request_queue.RequestQueue.register(fairq.vllm.RequestQueue)",
        "vllm.v1.core.sched.request_queue.create_request_queue",
        "vllm.v1.core.sched.scheduler.create_request_queue",
    ]
    assert issubclass(FCFSRequestQueue, rq.RequestQueue)
    assert isinstance(PriorityRequestQueue(), rq.RequestQueue)
    P = rq.SchedulingPolicy
    assert type(sm.create_request_queue(P.FCFS)) is FCFSRequestQueue
    assert type(rq.create_request_queue(P.PRIORITY)) is PriorityRequestQueue
    # A vLLM policy fairq does not implement falls through to vLLM's factory.
    assert type(sm.create_request_queue(P.SJF)) is rq.VllmSJF
    # Idempotent: the original is kept underneath, not wrapped twice.
    fv.install()
    assert sm.create_request_queue.__fairq_original__ is original
    assert fv.uninstall() == [
        "vllm.v1.core.sched.request_queue.create_request_queue",
        "vllm.v1.core.sched.scheduler.create_request_queue",
    ]
    assert rq.create_request_queue is original and sm.create_request_queue is original


def test_install_with_policy_override(fake_vllm: dict[str, types.ModuleType]) -> None:
    sm = fake_vllm["vllm.v1.core.sched.scheduler"]
    fv.install("priority")
    P = fake_vllm["vllm.v1.core.sched.request_queue"].SchedulingPolicy
    assert type(sm.create_request_queue(P.FCFS)) is PriorityRequestQueue
    with pytest.raises(ValueError, match="Unknown scheduling policy: lifo .*wfq"):
        fv.install("lifo")
    fv.install("WFQ")  # any case, as FAIRQ_VLLM_POLICY
    assert type(sm.create_request_queue(P.FCFS)).__name__ == "WFQRequestQueue"


def test_scheduler_class_refuses_an_untested_vllm(
    fake_vllm: dict[str, types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fake_vllm["vllm"], "__version__", "0.40.0")
    monkeypatch.delenv("FAIRQ_VLLM_ALLOW_UNTESTED", raising=False)
    with pytest.raises(RuntimeError, match=r"tested with vLLM 0\.32\.x, 0\.33\.x, not 0\.40\.0"):
        fsched.FairqScheduler(policy="fcfs")
    monkeypatch.setenv("FAIRQ_VLLM_ALLOW_UNTESTED", "1")
    assert fsched.FairqScheduler(policy="fcfs").fairq_policy.value == "fcfs"


def test_scheduler_default_uses_vllm_policy(fake_vllm: dict[str, types.ModuleType]) -> None:
    cls = fsched.FairqScheduler
    assert issubclass(cls, fake_vllm["vllm.v1.core.sched.scheduler"].Scheduler)
    assert fsched.FairqScheduler is cls  # built once
    s = cls(policy="priority")
    assert type(s.waiting) is PriorityRequestQueue
    assert type(s.kv_holding_waiting) is PriorityRequestQueue
    assert type(s.temp_queue()) is PriorityRequestQueue  # install() ran


def test_async_scheduler_env_policy_moves_queued(
    fake_vllm: dict[str, types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fsched.ENV_VAR, "PRIORITY")
    a, b = Req("a", 5, 0.0), Req("b", 1, 0.0)
    s = fsched.FairqAsyncScheduler(policy="fcfs", queued=[a, b])
    assert isinstance(s, fake_vllm["vllm.v1.core.sched.async_scheduler"].AsyncScheduler)
    assert s.fairq_policy is fv.SchedulingPolicy.PRIORITY
    assert type(s.waiting) is PriorityRequestQueue and list(s.waiting) == [b, a]
    assert type(s.temp_queue()) is FCFSRequestQueue  # vLLM's own policy for temporaries


def test_scheduler_bad_env_policy(
    fake_vllm: dict[str, types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fsched.ENV_VAR, "lifo")
    with pytest.raises(ValueError, match="FAIRQ_VLLM_POLICY='lifo' is not a fairq policy"):
        fsched.FairqScheduler()


def test_replace_queues_skips_missing_attributes() -> None:
    class S:
        waiting = [Req("a", 0, 0.0)]

    s = S()
    assert fsched.replace_queues(s, "fcfs") == ["waiting"]
    assert type(s.waiting) is FCFSRequestQueue and len(s.waiting) == 1


def test_install_passes_queue_options(fake_vllm: dict[str, types.ModuleType]) -> None:
    from fairq.vllm.wfq import WFQRequestQueue

    sm = fake_vllm["vllm.v1.core.sched.scheduler"]
    P = fake_vllm["vllm.v1.core.sched.request_queue"].SchedulingPolicy
    fv.install("wfq", virtual_clock="finish")
    q = sm.create_request_queue(P.FCFS)
    assert type(q) is WFQRequestQueue and q.virtual_clock == "finish"


def test_install_rejects_bad_options_before_patching(
    fake_vllm: dict[str, types.ModuleType],
) -> None:
    sm = fake_vllm["vllm.v1.core.sched.scheduler"]
    original = sm.create_request_queue
    with pytest.raises(ValueError, match="virtual_clock"):
        fv.install("wfq", virtual_clock="sometimes")
    with pytest.raises(TypeError, match="need an explicit policy"):
        fv.install(virtual_clock="finish")
    with pytest.raises(TypeError, match=r"'virtual_clock' for policy 'fcfs' \(options: none\)"):
        fv.install("fcfs", virtual_clock="finish")  # FCFS takes no options
    assert sm.create_request_queue is original


def test_scheduler_env_options(
    fake_vllm: dict[str, types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fairq.vllm.wfq import WFQRequestQueue

    monkeypatch.setenv(fsched.ENV_VAR, "wfq")
    monkeypatch.setenv(fsched.OPTIONS_ENV_VAR, '{"virtual_clock": "finish"}')
    s = fsched.FairqScheduler(policy="fcfs")
    assert type(s.waiting) is WFQRequestQueue and s.waiting.virtual_clock == "finish"


@pytest.mark.parametrize(
    ("policy", "text", "valid"),
    [
        (
            "wfq",
            '{"quantum": 5}',
            "default_weight, dual_phase, flow_key, limits, state_file, state_interval_s, "
            "tenant, tenant_weights, virtual_clock",
        ),
        ("priority", '{"quantum": 5}', "dual_phase, limits, tenant_weights"),
        ("FCFS", '{"state_file": "/tmp/x.json"}', "dual_phase, limits, tenant_weights"),
    ],
)
def test_scheduler_env_options_unknown_lists_the_valid_ones(
    fake_vllm: dict[str, types.ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    policy: str,
    text: str,
    valid: str,
) -> None:
    """``FAIRQ_VLLM_POLICY=wfq FAIRQ_VLLM_OPTIONS='{"quantum":5}'`` names the
    variable, the option and the valid ones, not the queue's ``__new__``
    (issue 20, item 5)."""
    monkeypatch.setenv(fsched.ENV_VAR, policy)
    monkeypatch.setenv(fsched.OPTIONS_ENV_VAR, text)
    key = next(iter(json.loads(text)))
    msg = (
        rf"FAIRQ_VLLM_OPTIONS: unknown option '{key}' for policy '{policy.lower()}' "
        rf"\(options: {valid}\)"
    )
    with pytest.raises(ValueError, match=msg):
        fsched.FairqScheduler()


@pytest.mark.parametrize("text, msg", [("{bad", "not valid JSON"), ("[1]", "JSON object")])
def test_scheduler_bad_env_options(
    fake_vllm: dict[str, types.ModuleType], monkeypatch: pytest.MonkeyPatch, text: str, msg: str
) -> None:
    monkeypatch.setenv(fsched.OPTIONS_ENV_VAR, text)
    with pytest.raises(ValueError, match=msg):
        fsched.FairqScheduler()
