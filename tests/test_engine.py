"""fairq schedulers inside transformers' continuous batching, on CPU with a tiny model.

Run with:  python -m pytest -m engine tests/test_engine.py
Needs ``pip install '.[engine]'`` (torch + transformers); skipped otherwise.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import namedtuple
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="engine tests need torch (pip install '.[engine]')")
transformers = pytest.importorskip(
    "transformers", reason="engine tests need transformers (pip install '.[engine]')"
)

import fairq  # noqa: E402
from fairq.enginebench import transformers as bench  # noqa: E402
from fairq.enginebench.workload import multi_client_workload  # noqa: E402
from fairq.transformers import model as tf_model  # noqa: E402
from fairq.transformers import scheduler as fs  # noqa: E402

pytestmark = pytest.mark.engine

# ---------------------------------------------------------------------------
# A small, obviously-correct stand-in for fairq's local schedulers (the
# contract in CONTRACT_sched.md), used only where the Rust classes are not
# built yet, so the integration itself is always tested.
Admission = namedtuple("Admission", "request_id client item input_len cached_len extend_len")


class _ContractFake:
    kind = "fcfs"

    def __init__(self, tree: Any = None, **opts: float) -> None:
        self.tree = tree
        self.w_e = float(opts.get("w_in", opts.get("w_e", 1.0)))
        self.w_q = float(opts.get("w_out", opts.get("w_q", 2.0)))
        self.waiting: dict[Any, tuple[int, str, list[int]]] = {}
        self.running: dict[Any, str] = {}
        self.served: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.extend: dict[Any, int] = {}
        self.seq = itertools.count()

    def add(
        self, rid: Any, client: str, tokens: Any, item: Any = None, namespace: Any = None
    ) -> None:
        if rid in self.waiting or rid in self.running:
            raise ValueError(f"duplicate request_id {rid!r}")
        self.waiting[rid] = (next(self.seq), client, list(tokens))
        self.served.setdefault(client, 0.0)

    def remove(self, rid: Any) -> None:
        del self.waiting[rid]

    def __len__(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def _order(self) -> list[Any]:
        if self.kind == "fcfs":
            return sorted(self.waiting, key=lambda r: self.waiting[r][0])
        out = []
        pending = dict(self.waiting)
        served = dict(self.served)
        while pending:  # VTC: least-served client, its oldest request
            rid = min(pending, key=lambda r: (served[pending[r][1]], pending[r][0]))
            served[pending[rid][1]] += len(pending[rid][2])
            out.append(rid)
            del pending[rid]
        return out

    def schedule(
        self, budget: int, max_requests: int | None = None, *, oversize_budget: int | None = None
    ) -> list[Admission]:
        # the oversize rule: nothing fits, a slot is free, something waits ->
        # the same walk for one request with oversize_budget of room
        out = self._walk(budget, max_requests)
        room = float("inf") if oversize_budget is None else oversize_budget
        if not out and max_requests != 0 and self.waiting and room > budget:
            out = self._walk(room, 1)
        return out

    def _walk(self, budget: float, max_requests: int | None) -> list[Admission]:
        out = []
        for rid in self._order():
            if max_requests is not None and len(out) >= max_requests:
                break
            _, client, tokens = self.waiting[rid]
            cached = self.tree.match(tokens) if self.tree is not None else 0
            if len(tokens) - cached > budget:
                break
            budget -= len(tokens) - cached
            del self.waiting[rid]
            self.running[rid] = client
            w = self.weights.get(client, 1.0)
            self.served[client] += self.w_e * (len(tokens) - cached) / w
            self.extend[rid] = len(tokens) - cached
            out.append(Admission(rid, client, None, len(tokens), cached, len(tokens) - cached))
        return out

    def charge_output(self, rid: Any, n: int = 1) -> None:
        client = self.running[rid]
        self.served[client] += self.w_q * n / self.weights.get(client, 1.0)

    def recharge_extend(self, rid: Any, extend_len: int) -> int:
        client = self.running[rid]
        old = self.extend[rid]
        w = self.weights.get(client, 1.0)
        self.served[client] += self.w_e * (extend_len - old) / w
        self.extend[rid] = extend_len
        return old

    def charged_extend(self, rid: Any) -> int:
        return self.extend[rid]

    def finish(self, rid: Any) -> None:
        del self.running[rid]
        del self.extend[rid]

    def service(self, client: str) -> float:
        return self.served.get(client, 0.0)

    def set_weight(self, client: str, w: float) -> None:
        self.weights[client] = w

    def clients(self) -> list[str]:
        return sorted(self.served)


class _FakeFCFS(_ContractFake):
    kind = "fcfs"


class _FakeVTC(_ContractFake):
    kind = "vtc"


def _has(name: str) -> bool:
    try:
        getattr(fairq, name)
    except (AttributeError, ImportError):
        return False
    return True


_REAL = {name: _has(name) for name in ("FCFS", "LPM", "VTC", "DLPM")}
POLICIES = [
    p
    for p, cls in (("fcfs", "FCFS"), ("lpm", "LPM"), ("vtc", "VTC"), ("dlpm", "DLPM"))
    if _REAL[cls]
]


@pytest.fixture
def fake_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Route fairq.FCFS / fairq.VTC (and the scheduler factory's table) to the contract fake."""
    monkeypatch.setitem(vars(fairq), "FCFS", _FakeFCFS)
    monkeypatch.setitem(vars(fairq), "VTC", _FakeVTC)
    monkeypatch.setitem(fairq.sched.POLICIES, "fcfs", _FakeFCFS)
    monkeypatch.setitem(fairq.sched.POLICIES, "vtc", _FakeVTC)


# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model() -> Any:
    return tf_model.build_model("tiny", seed=0)


def _workload() -> list[Any]:
    return multi_client_workload(
        n_clients=3,
        requests_per_client=3,
        flood_factor=4,
        prefix_len=32,
        suffix_len=8,
        max_new_tokens=6,
        vocab_size=256,
        seed=1,
    )


def _run(model: Any, scheduler_type: str, workload: list[Any]) -> bench.EngineRun:
    return bench.run_engine(
        model,
        scheduler_type,
        workload,
        page_size=16,
        num_blocks=64,
        max_batch_tokens=64,
        max_requests_per_batch=2,
        realtime=False,
    )


@pytest.fixture(scope="module")
def fifo_run(model: Any) -> bench.EngineRun:
    return _run(model, "fifo-observed", _workload())


@pytest.fixture
def engine_matches(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The engine's own prefix match per request id: what its
    ``PagedAttentionCache.search_prefix_match`` returned (a request is matched
    while pending, so the last value is the match it was placed with). The
    engine always computes at least the last prompt token: 5.18+ never match
    it, 5.17 matches it and skips one token less (see :func:`_engine_skipped`)."""
    from transformers.generation.continuous_batching.cache import PagedAttentionCache

    matches: dict[str, int] = {}
    original = PagedAttentionCache.search_prefix_match

    def recording(self: Any, request_id: str, prompt_ids: list[int]) -> int:
        n = int(original(self, request_id, prompt_ids))
        matches[request_id] = n
        return n

    monkeypatch.setattr(PagedAttentionCache, "search_prefix_match", recording)
    return matches


def _engine_skipped(matches: dict[str, int], rid: str, prompt_len: int) -> int:
    """Prompt tokens the engine served from its cache for ``rid``."""
    return min(matches.get(rid, 0), prompt_len - 1)


def _engine_service(
    outputs: dict[str, Any],
    matches: dict[str, int],
    client_of: Any,
    w_e: float = 1.0,
    w_q: float = 2.0,
) -> dict[str, float]:
    """Per-client w_e * (prompt - engine match) + w_q * generated, from the
    engine's own outputs and prefix matches."""
    out: dict[str, float] = {}
    for rid, o in outputs.items():
        extend = len(o.prompt_ids) - _engine_skipped(matches, rid, len(o.prompt_ids))
        c = client_of(rid)
        out[c] = out.get(c, 0.0) + w_e * extend + w_q * len(o.generated_tokens)
    return out


def _check_against_fifo(run: bench.EngineRun, fifo: bench.EngineRun, cls: type) -> None:
    assert isinstance(run.scheduler, cls), type(run.scheduler)
    assert type(run.scheduler).__name__ != "FIFOScheduler"
    assert set(run.outputs) == set(fifo.outputs)
    for rid, out in fifo.outputs.items():
        assert run.outputs[rid].generated_tokens == out.generated_tokens, rid
    assert len(run.scheduler.stats.steps) > 0


def _early_share(run: bench.EngineRun, n_first: int) -> float:
    """Fraction of the first ``n_first`` placed requests that are not the flood's."""
    recs = sorted(
        (r for r in run.scheduler.stats.requests.values() if r.placed_step is not None),
        key=lambda r: (r.placed_step, r.request_id),
    )[:n_first]
    return sum(r.client != "flood" for r in recs) / len(recs)


def test_fifo_observed_is_fifo(fifo_run: bench.EngineRun) -> None:
    assert type(fifo_run.scheduler) is fs.ObservedFIFOScheduler
    assert len(fifo_run.outputs) == len(_workload())
    assert all(len(o.generated_tokens) == 6 for o in fifo_run.outputs.values())
    # the flood arrives first, so FIFO places it first
    assert _early_share(fifo_run, 6) <= 0.2
    summary = bench.summarize(fifo_run, _workload())
    assert summary["jain_index_window"] < 0.6
    assert summary["clients"]["flood"]["service_in_window"] > 4 * max(
        summary["clients"][c]["service_in_window"] for c in ("c1", "c2")
    )
    assert "| fifo-observed |" in bench.markdown([summary])


@pytest.mark.parametrize("policy", ["fcfs", "vtc"])
def test_integration_with_contract_fake(
    model: Any, fifo_run: bench.EngineRun, fake_policies: None, policy: str
) -> None:
    fs.register([policy], options={"vtc": {}} if policy == "vtc" else None)
    run = _run(model, fs.scheduler_type(policy), _workload())
    cls = fairq.transformers.scheduler.SCHEDULER_MAPPING[f"fairq-{policy}"]
    _check_against_fifo(run, fifo_run, cls)
    sched = run.scheduler
    assert isinstance(sched.fq, _ContractFake)
    assert len(sched.fq) == 0 and sched.fq.num_running == 0  # conservation
    # output charged from the engine's progress: 6 tokens per request
    assert all(r.output_tokens == 6 for r in sched.stats.requests.values())
    if policy == "vtc":
        assert _early_share(run, 6) >= 0.5


@pytest.mark.skipif(not POLICIES, reason="fairq's local schedulers are not built yet")
@pytest.mark.parametrize("policy", POLICIES or ["none"])
def test_real_policy_runs_and_matches_fifo(
    model: Any, fifo_run: bench.EngineRun, policy: str, engine_matches: dict[str, int]
) -> None:
    fs.register(options={"dlpm": {"quantum": 32.0}})
    run = _run(model, fs.scheduler_type(policy), _workload())
    _check_against_fifo(run, fifo_run, fs.SCHEDULER_MAPPING[f"fairq-{policy}"])
    sched = run.scheduler
    assert type(sched.fq).__name__ == policy.upper()
    assert len(sched.fq) == 0 and sched.fq.num_running == 0
    # service is charged from the engine's real prefix match and outputs
    assert sum(engine_matches.values()) > 0  # the workload shares prefixes
    want = _engine_service(run.outputs, engine_matches, type(sched).client_of)
    assert {c: sched.service(c) for c in sched.fq.clients()} == pytest.approx(want)
    for rid, rec in sched.stats.requests.items():
        assert rec.engine_cached == _engine_skipped(engine_matches, rid, rec.prompt_len), rid
        assert rec.charged_extend == rec.prompt_len - rec.engine_cached, rid
    summary = bench.summarize(run, _workload())
    assert set(summary["clients"]) == {"flood", "c1", "c2"}
    if policy in ("vtc", "dlpm"):
        assert _early_share(run, 6) >= 0.5
        # service of the well-behaved clients is kept close to the flood's
        assert summary["jain_index_window"] > 0.8


def test_unknown_policy_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown fairq policy 'nope'"):
        fs.scheduler_type("nope")
    with pytest.raises(ValueError, match="unknown fairq policy"):
        fs.register(["fcfs", "wfq-typo"])
    with pytest.raises(ValueError, match="unknown option 'quantom' for policy 'dlpm'"):
        fs.scheduler_class("dlpm", options={"quantom": 3})
    # transformers silently falls back to FIFO for unknown names: the bench refuses them
    with pytest.raises(ValueError, match="not registered"):
        tf_model.check_scheduler_type("fairq-nope")


def test_scheduler_type_names() -> None:
    assert fs.scheduler_type("DLPM") == "fairq-dlpm"
    assert fs.scheduler_type("fairq-vtc") == "fairq-vtc"
    assert fs.scheduler_type("fifo") == "fifo"
    assert "fifo-observed" in fs.SCHEDULER_MAPPING
    # one class per local policy of the core (a policy added there: no edit here)
    assert {f"fairq-{p}" for p in fairq.sched.POLICY_INFO} <= set(fs.register())


def test_page_size_field_name() -> None:
    names = {f.name for f in dataclasses.fields(transformers.ContinuousBatchingConfig)}
    assert tf_model.page_size_field() in names


@pytest.mark.skipif(
    not {"VTC", "DLPM"} <= {k for k, v in _REAL.items() if v},
    reason="fairq's VTC/DLPM are not built yet",
)
def test_cache_pressure_offloads_and_conserves(model: Any) -> None:
    """A cache of 8 pages forces the engine to offload running requests: they
    stay admitted in fairq, are re-placed, and every request still completes
    with FIFO's greedy output."""
    wl = multi_client_workload(
        n_clients=3,
        requests_per_client=2,
        flood_factor=3,
        prefix_len=32,
        suffix_len=8,
        max_new_tokens=24,
        vocab_size=256,
        seed=2,
    )
    fs.register(options={"dlpm": {"quantum": 32.0}})

    def go(stype: str) -> bench.EngineRun:
        return bench.run_engine(
            model,
            stype,
            wl,
            page_size=16,
            num_blocks=8,
            max_batch_tokens=64,
            max_requests_per_batch=4,
            realtime=False,
        )

    fifo = go("fifo-observed")
    requeued = 0
    for policy in ("vtc", "dlpm"):
        run = go(f"fairq-{policy}")
        _check_against_fifo(run, fifo, fs.SCHEDULER_MAPPING[f"fairq-{policy}"])
        sched = run.scheduler
        assert len(sched.fq) == 0 and sched.fq.num_running == 0
        assert not sched._entries and not sched.ledger.admitted and not sched._requeued
        assert len(sched.ledger) == 0  # every request left the ledger
        if sched.tree is not None:  # DLPM's mirror (VTC has none)
            assert sched.tree.evictable_size == sched.tree.size  # every lock released
        requeued += sched.stats.requeued
        assert all(r.output_tokens == 24 for r in sched.stats.requests.values())
    assert requeued > 0  # the offload path was exercised


@pytest.mark.skipif(not _REAL["VTC"], reason="fairq's VTC is not built yet")
def test_cancel_mapping_and_weights(model: Any) -> None:
    """Cancelled waiting requests leave fairq; clients from an explicit mapping;
    client weights reach the policy."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    from fairq.transformers import ClientResolver

    resolver = ClientResolver(mapping={"special-1": "vip"})
    fs.register(["vtc"], client_of=resolver, weights={"vip": 2.0})
    cfg = ContinuousBatchingConfig(
        **{tf_model.page_size_field(): 16},
        num_blocks=64,
        max_batch_tokens=64,
        max_requests_per_batch=2,
        scheduler_type=fs.scheduler_type("vtc"),
    )
    gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0, max_new_tokens=4)
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cfg)
    ids = ["special-1", "a/1", "a/2", "a/3", "b/1", "b/2"]
    for i, rid in enumerate(ids):
        manager.add_request([3 + i] * 20, request_id=rid, max_new_tokens=4)
    for rid in ("a/2", "a/3"):
        manager.cancel_request(rid)
    manager.start()
    done: dict[str, Any] = {}
    try:
        while not {"special-1", "a/1", "b/1", "b/2"} <= set(done):
            out = manager.get_result(timeout=60)
            assert out is not None, f"engine stopped; finished {sorted(done)}"
            done[out.request_id] = out
        sched = fs.running_scheduler(manager)
        assert type(sched) is fs.SCHEDULER_MAPPING["fairq-vtc"]
    finally:
        manager.stop(block=True)
    sched.flush()
    assert len(sched.fq) == 0 and sched.fq.num_running == 0
    assert set(sched.fq.clients()) >= {"vip", "b"}
    assert sched.stats.requests["special-1"].client == "vip"
    # service is raw tokens: input 20 + w_out 2 * 4 outputs
    assert sched.service("vip") == pytest.approx(20 + 2 * 4)
    fs.register()  # restore defaults for later tests


@pytest.mark.skipif(not _REAL["DLPM"], reason="fairq's DLPM is not built yet")
def test_charges_follow_the_engine_prefix_match_not_the_mirror(
    model: Any, engine_matches: dict[str, int]
) -> None:
    """The mirror predicts a repeated 32-token prompt fully cached (2 whole
    pages, extend 0); the engine always computes the last prompt token (5.18+:
    it matches one page and computes 16 tokens; 5.17: it matches both pages
    and recomputes 1 token). fairq charges what the engine computes (service
    and DLPM deficit), and the mirror's error stays visible as a diagnostic."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    fs.register(options={"dlpm": {"quantum": 1000.0}})
    cfg = ContinuousBatchingConfig(
        **{tf_model.page_size_field(): 16},
        num_blocks=64,
        max_batch_tokens=64,
        max_requests_per_batch=2,
        scheduler_type=fs.scheduler_type("dlpm"),
    )
    gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0, max_new_tokens=3)
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cfg)
    prompt = [(7 * i) % 200 + 3 for i in range(32)]
    outputs: dict[str, Any] = {}
    manager.start()
    try:
        for rid in ("a/1", "a/2", "b/1"):
            manager.add_request(
                prompt if rid.startswith("a") else prompt[:16] + [9] * 4,
                request_id=rid,
                max_new_tokens=3,
            )
            out = manager.get_result(timeout=60)
            assert out is not None and out.request_id == rid
            outputs[rid] = out
        sched = fs.running_scheduler(manager)
    finally:
        manager.stop(block=True)
    sched.flush()
    assert type(sched) is fs.SCHEDULER_MAPPING["fairq-dlpm"]
    assert len(sched.fq) == 0 and sched.fq.num_running == 0
    assert engine_matches["a/1"] == 0 and engine_matches["b/1"] == 16
    assert engine_matches["a/2"] in (16, 32)  # 5.18+ / 5.17
    extend_a2 = 32 - _engine_skipped(engine_matches, "a/2", 32)  # 16 / 1
    recs = sched.stats.requests
    assert recs["a/2"].predicted_cached == 32 and recs["a/2"].engine_cached == 32 - extend_a2
    assert recs["a/2"].charged_extend == extend_a2 > 0  # the mirror predicted 0
    assert sched.stats.mirror_error_tokens() >= extend_a2
    want = _engine_service(outputs, engine_matches, type(sched).client_of)
    assert want == {"a": 32 + extend_a2 + 2 * 6, "b": 4 + 2 * 3}
    assert sched.service("a") == pytest.approx(want["a"])
    assert sched.service("b") == pytest.approx(want["b"])
    # DLPM's deficit was charged the same tokens (each client was refilled once)
    assert sched.fq.refills == 2
    assert sched.fq.deficit("a") == pytest.approx(1000.0 - want["a"])
    assert sched.fq.deficit("b") == pytest.approx(1000.0 - want["b"])
    fs.register()


def test_engine_page_size() -> None:
    class Old:  # transformers 5.17: the cache has block_size
        block_size = 32

    class Alloc:
        def __init__(self, n: int) -> None:
            self.tokens_per_page = n

    class New:  # 5.18+: one page size per cache allocator
        cache_allocators = {"full": Alloc(16), "sliding": Alloc(64)}

    assert fs.engine_page_size(Old()) == 32
    assert fs.engine_page_size(New()) == 16
    assert fs.engine_page_size(object()) == 1


def test_mirror_error_accounting() -> None:
    stats = fs.EngineStats()
    stats.requests["a/1"] = fs.RequestRecord("a/1", "a", 40, engine_cached=32, predicted_cached=16)
    stats.requests["a/2"] = fs.RequestRecord("a/2", "a", 40, engine_cached=0, predicted_cached=0)
    stats.requests["a/3"] = fs.RequestRecord("a/3", "a", 40)
    assert stats.mirror_error_tokens() == 16
    assert stats.prefix_hit_rate() == pytest.approx(32 / 80)


@pytest.mark.skipif(not _REAL["FCFS"], reason="fairq's FCFS is not built yet")
def test_request_id_reused_after_finish(model: Any) -> None:
    """A finished id submitted again is a new request for fairq, not a requeue."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    fs.register()
    cfg = ContinuousBatchingConfig(
        **{tf_model.page_size_field(): 16},
        num_blocks=64,
        max_batch_tokens=64,
        max_requests_per_batch=2,
        scheduler_type=fs.scheduler_type("fcfs"),
    )
    gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0, max_new_tokens=3)
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cfg)
    manager.start()
    try:
        for prompt in ([5] * 12, [7] * 20):
            manager.add_request(prompt, request_id="a/1", max_new_tokens=3)
            out = manager.get_result(timeout=60)
            assert out is not None and out.request_id == "a/1"
            assert len(out.generated_tokens) == 3
        sched = fs.running_scheduler(manager)
    finally:
        manager.stop(block=True)
    sched.flush()
    assert len(sched.fq) == 0 and sched.fq.num_running == 0
    assert sched.stats.requeued == 0
    # both submissions charged: prompts 12 + 20 and 2 * 3 outputs
    assert sched.service("a") == pytest.approx(12 + 20 + 2 * (3 + 3))


@pytest.mark.skipif(not (_REAL["FCFS"] and _REAL["VTC"]), reason="fairq's FCFS/VTC not built yet")
def test_policies_without_a_tree_get_the_engines_prefix_hits(model: Any) -> None:
    """Under cache pressure (4 requests' pages fill the cache past the safety
    margin) the engine matches a waiting request only while another request
    of its document runs: finished requests' pages are evicted as soon as the
    cache is under the margin. FIFO's candidate scan matches every waiting
    request; fairq matches the requests it admitted, held ones included, so
    the policies without a mirror tree share prefixes too (before the fix:
    no hit at all, FIFO 0.47)."""
    wl = multi_client_workload(
        n_clients=2,
        requests_per_client=4,
        flood_factor=4,
        prefix_len=128,
        suffix_len=16,
        max_new_tokens=8,
        vocab_size=250,
        docs_per_client=4,
    )

    def hit_rate(stype: str) -> float:
        run = bench.run_engine(
            model,
            stype,
            wl,
            page_size=16,
            num_blocks=42,
            max_batch_tokens=256,
            max_requests_per_batch=8,
            realtime=False,
        )
        assert set(run.outputs) == {r.request_id for r in wl}
        return float(run.scheduler.stats.prefix_hit_rate())

    fifo = hit_rate("fifo-observed")
    assert fifo > 0.3
    for policy in ("fcfs", "vtc"):
        # each document's later requests share its 128-token prefix (8 pages)
        assert hit_rate(fs.scheduler_type(policy)) > fifo / 2, policy
