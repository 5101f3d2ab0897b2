"""Pure-Python parts of the engine integration and of its bench (no torch /
transformers needed)."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fairq.enginebench.workload import multi_client_workload
from fairq.sim.fit import fit_step_time
from fairq.sim.metrics import jain_index, percentile
from fairq.transformers import (
    POLICIES,
    ClientResolver,
    StepSample,
    check_policy,
    policy_options,
)
from fairq.transformers import tenants as tf_tenants

# ----------------------------------------------------------------- clients


def test_client_from_request_id() -> None:
    r = ClientResolver()
    assert r("alice/1") == "alice"
    assert r("alice/b/c") == "alice"
    assert r("noslash") == "default"
    assert r("/leading") == "default"
    assert r(17) == "default"


def test_client_mapping_wins_and_separator() -> None:
    r = ClientResolver(separator="::", mapping={"x::1": "bob", "7": "carol"}, default="anon")
    assert r("x::1") == "bob"
    assert r("x::2") == "x"
    assert r(7) == "carol"
    assert r("a/b") == "anon"


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"separator": ""}, "separator"),
        ({"separator": None}, "separator"),
        ({"default": ""}, "default"),
        ({"mapping": {"r1": ""}}, "mapping\\['r1'\\]"),
        ({"mapping": {"r1": 3}}, "mapping\\['r1'\\]"),
    ],
)
def test_client_resolver_rejects_bad_config(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ClientResolver(**kwargs)


@settings(max_examples=100)
@given(st.text(min_size=1, max_size=8).filter(lambda s: "/" not in s), st.text(max_size=8))
def test_client_prefix_property(client: str, rest: str) -> None:
    assert ClientResolver()(f"{client}/{rest}") == client


def test_client_resolver_is_the_shared_source_order() -> None:
    """ClientResolver is the engines' SourceOrder, with sources in an order
    and the request's id read from a RequestState as from a bare id."""
    from types import SimpleNamespace

    from fairq.tenancy import SourceOrder

    assert ClientResolver is tf_tenants.TenantResolver
    assert issubclass(ClientResolver, SourceOrder)
    r = ClientResolver(mapping={"a/1": "vip"})
    assert r(SimpleNamespace(request_id="a/1")) == "vip" and r("a/2") == "a"
    ids_only = ClientResolver(mapping={"a/1": "vip"}, order=["request_id"])
    assert ids_only("a/1") == "a"
    with pytest.raises(ValueError, match=r"tenant.order\[0\] must be one of mapping, request_id"):
        ClientResolver(order=["rid"])
    with pytest.raises(TypeError, match="tenant.mapping must be a mapping"):
        ClientResolver(mapping=[("a", "b")])  # type: ignore[arg-type]


def test_options_are_every_engines() -> None:
    o = tf_tenants.make_options(
        "fairq-dlpm",
        {
            "quantum": 64,
            "tenant_weights": {"gold": 2},
            "tenant": {"separator": ":", "mapping": {"x": "vip"}},
            "state_file": "/tmp/fairq-state.json",
            "state_interval_s": 2,
        },
    )
    assert isinstance(o, tf_tenants.FairOptions) and o.policy == "dlpm"
    # a number for quantum is a fixed quantum (quantum_scale 0)
    assert o.policy_options == {
        "quantum": 64.0,
        "w_e": 1.0,
        "w_q": 2.0,
        "quantum_scale": 0.0,
        "strict_credit": 0.0,
    }
    assert o.tenant_weights == {"gold": 2.0}
    assert (o.tenant("gold:1"), o.tenant("x"), o.tenant("a/1")) == ("gold", "vip", "default")
    assert (o.state_file, o.state_interval_s) == ("/tmp/fairq-state.json", 2.0)
    # the older keywords
    old = tf_tenants.make_options("vtc", None, client_of=str.upper, weights={"A": 3})
    assert old.tenant("a/1") == "A/1" and old.tenant_weights == {"A": 3.0}
    # every local policy of the core, with no list of its own
    from fairq.sched import POLICY_INFO

    assert tf_tenants.FAIR_POLICIES == tuple(POLICY_INFO)
    for policy in POLICY_INFO:
        assert tf_tenants.make_options(policy).policy == policy


@pytest.mark.parametrize(
    ("policy", "raw", "kw", "field"),
    [
        ("dlpm", {"quantm": 1}, {}, "unknown option 'quantm' for policy 'dlpm'"),
        ("dlpm", {"quantum": 0}, {}, "'quantum' must be a finite number > 0"),
        ("vtc", {"quantum": 5}, {}, "'quantum'"),
        ("lpm", {"tenant_weights": {"a": -1}}, {}, r"tenant_weights\['a'\]"),
        ("lpm", {}, {"weights": {"a": 0}}, r"tenant_weights\['a'\]"),
        ("lpm", {"tenant_weights": [1]}, {}, "tenant_weights"),
        ("lpm", {"tenant": {"order": ["rid"]}}, {}, r"tenant.order\[0\]"),
        ("lpm", {"tenant": {"order": "mapping"}}, {}, "tenant.order must be a list"),
        ("lpm", {"tenant": {"extra_args_key": "t"}}, {}, "unknown option tenant.extra_args_key"),
        ("lpm", {"tenant": {"default": ""}}, {}, "tenant.default"),
        ("lpm", {"tenant": {"mapping": {"r": 3}}}, {}, r"tenant.mapping\['r'\]"),
        ("lpm", {"state_file": ""}, {}, "state_file must be a non-empty path"),
        ("lpm", {"state_interval_s": 0}, {}, "state_interval_s must be finite and > 0"),
        ("lpm", {"tenant_weights": {}}, {"weights": {}}, "not both"),
        ("lpm", {"tenant": {}}, {"client_of": str}, "not both"),
        ("wfq", {}, {}, "unknown fairq policy 'wfq'"),
    ],
)
def test_bad_options_name_the_field(policy: str, raw: dict, kw: dict, field: str) -> None:
    with pytest.raises((TypeError, ValueError), match=field):
        tf_tenants.make_options(policy, raw, **kw)


# ---------------------------------------------------------------- policies


def test_policy_names() -> None:
    assert set(POLICIES) == {"fcfs", "lpm", "vtc", "dlpm", "las"}
    assert check_policy("DLPM") == "dlpm"
    assert check_policy("fairq-vtc") == "vtc"
    with pytest.raises(ValueError, match="unknown fairq policy 'wfq'.*known policies: dlpm"):
        check_policy("wfq")
    with pytest.raises(TypeError, match="policy must be a string"):
        check_policy(3)  # type: ignore[arg-type]


def test_policy_options() -> None:
    # the engines' DLPM: the automatic quantum, starting at 512, with strict
    # credit (issue 35)
    assert policy_options("dlpm") == {
        "quantum": 512.0,
        "w_e": 1.0,
        "w_q": 2.0,
        "quantum_scale": 0.8,
        "strict_credit": 1.0,
    }
    assert policy_options("dlpm", {"quantum": "auto"}) == policy_options("dlpm")
    # a number: the paper's DLPM (fixed quantum, admission at q > 0) unless
    # either is given
    fixed = policy_options("dlpm", {"quantum": 64})
    assert (fixed["quantum"], fixed["quantum_scale"], fixed["strict_credit"]) == (64.0, 0.0, 0.0)
    given = policy_options("dlpm", {"quantum": 64, "quantum_scale": 2, "strict_credit": True})
    assert (given["quantum_scale"], given["strict_credit"]) == (2.0, 1.0)
    assert policy_options("vtc", {"w_out": 1}) == {"w_in": 1.0, "w_out": 1.0}
    with pytest.raises(ValueError, match="no option 'quantum'.*options: none"):
        policy_options("fcfs", {"quantum": 1})
    with pytest.raises(ValueError, match="'quantum' must be a finite number > 0, got 0"):
        policy_options("dlpm", {"quantum": 0})
    # the message says "> 0", so 0 is refused here, not later by the scheduler
    with pytest.raises(ValueError, match="'w_in' must be a finite number > 0, got 0"):
        policy_options("vtc", {"w_in": 0})
    with pytest.raises(ValueError, match="'w_e' must be a finite number"):
        policy_options("dlpm", {"w_e": math.inf})
    with pytest.raises(TypeError, match="'w_q' must be a number"):
        policy_options("dlpm", {"w_q": "2"})


# --------------------------------------------------------------------- fit


def _samples(c: tuple[float, float, float, float], rows: list[tuple[int, int, int]]) -> list:
    return [StepSample(c[0] + c[1] * p + c[2] * b + c[3] * k, p, b, k) for p, b, k in rows]


def test_fit_recovers_known_constants() -> None:
    rows = [(0, 4, 400), (128, 1, 128), (64, 3, 300), (0, 8, 900), (200, 2, 260), (32, 5, 700)]
    m = fit_step_time(_samples((0.002, 1e-5, 3e-4, 2e-6), rows))
    assert m.c0 == pytest.approx(0.002, rel=1e-6)
    assert m.c_prefill == pytest.approx(1e-5, rel=1e-6)
    assert m.c_decode == pytest.approx(3e-4, rel=1e-6)
    assert m.c_kv == pytest.approx(2e-6, rel=1e-6)
    assert m.r2 == pytest.approx(1.0)
    assert m.n_steps == 6
    assert m.predict(10, 2, 50) == pytest.approx(0.002 + 1e-4 + 6e-4 + 1e-4)
    assert set(m.as_dict()) == {"c0", "c_prefill", "c_decode", "c_kv", "r2", "n_steps"}


@settings(max_examples=60, deadline=None)
@given(
    st.tuples(*[st.floats(0, 1e-2) for _ in range(4)]),
    st.lists(
        st.tuples(st.integers(0, 512), st.integers(1, 32), st.integers(1, 4096)),
        min_size=4,
        max_size=30,
    ),
)
def test_fit_predictions_match_noiseless_data(c: tuple, rows: list) -> None:
    samples = _samples(c, rows)
    m = fit_step_time(samples)
    for s in samples:  # even when the design is rank deficient, the fit reproduces the data
        assert m.predict(s.prefill_tokens, s.batch_size, s.kv_tokens_read) == pytest.approx(
            s.seconds, abs=1e-9
        )


def test_fit_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="at least 4 measured steps to fit, got 3"):
        fit_step_time([StepSample(0.1, 1, 1, 1)] * 3)
    with pytest.raises(ValueError, match=r"samples\[2\]"):
        fit_step_time([StepSample(0.1, 1, 1, 1)] * 2 + [StepSample(math.nan, 1, 1, 1)] * 2)
    with pytest.raises(ValueError, match=r"samples\[0\]"):
        fit_step_time([StepSample(-0.1, 1, 1, 1)] * 4)


# ----------------------------------------------------------------- metrics


def test_jain_index() -> None:
    assert jain_index([1, 1, 1, 1]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_index([]) == 1.0
    assert jain_index([0, 0]) == 1.0
    with pytest.raises(ValueError, match=r"values\[1\]"):
        jain_index([1, -1])


@settings(max_examples=100)
@given(st.lists(st.floats(0, 1e300), min_size=1, max_size=20))
@example([1.467471004140968e-158, 1.467471004140968e-158])  # squares were subnormal
@example([1e200, 1e200, 0.0])  # squares overflowed
def test_jain_bounds(xs: list[float]) -> None:
    j = jain_index(xs)
    assert 1 / len(xs) - 1e-9 <= j <= 1 + 1e-9


def test_percentile() -> None:
    assert percentile([1.0, 2.0, 3.0], 50) == 2.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match="q must be in"):
        percentile([1.0], 101)


# ---------------------------------------------------------------- workload


def test_workload_shape() -> None:
    wl = multi_client_workload(
        n_clients=3,
        requests_per_client=2,
        flood_factor=3,
        prefix_len=5,
        suffix_len=2,
        max_new_tokens=4,
        vocab_size=50,
        seed=3,
    )
    clients = [r.client for r in wl]
    assert clients.count("flood") == 6 and clients.count("c1") == 2 and clients.count("c2") == 2
    assert len({r.request_id for r in wl}) == len(wl)
    assert all(ClientResolver()(r.request_id) == r.client for r in wl)
    by_client: dict[str, list] = {}
    for r in wl:
        assert len(r.prompt) == 7 and all(1 <= t < 50 for t in r.prompt)
        by_client.setdefault(r.client, []).append(r.prompt[:5])
    for prefixes in by_client.values():  # one shared prefix per client
        assert all(p == prefixes[0] for p in prefixes)
    assert wl == multi_client_workload(
        n_clients=3,
        requests_per_client=2,
        flood_factor=3,
        prefix_len=5,
        suffix_len=2,
        max_new_tokens=4,
        vocab_size=50,
        seed=3,
    )
    assert [r.arrival for r in wl] == sorted(r.arrival for r in wl)


def test_workload_documents_cycle_per_client() -> None:
    wl = multi_client_workload(
        n_clients=3, requests_per_client=4, flood_factor=2, prefix_len=6, docs_per_client=3, seed=1
    )
    by_client: dict[str, list[list[int]]] = {}
    for r in wl:
        by_client.setdefault(r.client, []).append(r.prompt[:6])
    docs = {c: [p[i] for i in range(3)] for c, p in by_client.items()}
    for c, prefixes in by_client.items():
        assert len({tuple(d) for d in docs[c]}) == 3  # three distinct documents
        assert prefixes == [docs[c][i % 3] for i in range(len(prefixes))]  # in turn
    all_docs = [tuple(d) for ds in docs.values() for d in ds]
    assert len(set(all_docs)) == len(all_docs)  # no document shared across clients
    one_doc = multi_client_workload(n_clients=3, requests_per_client=4, prefix_len=6, seed=1)
    assert one_doc == multi_client_workload(
        n_clients=3, requests_per_client=4, prefix_len=6, seed=1, docs_per_client=1
    )
    with pytest.raises(ValueError, match="docs_per_client must be an integer >= 1, got 0"):
        multi_client_workload(docs_per_client=0)


def test_workload_system_prompt_and_flood_rate() -> None:
    base = multi_client_workload(n_clients=3, requests_per_client=4, prefix_len=6, seed=1)
    wl = multi_client_workload(
        n_clients=3, requests_per_client=4, prefix_len=6, seed=1, system_len=5, flood_gap=0.25
    )
    system = wl[0].prompt[:5]
    assert all(r.prompt[:5] == system for r in wl)  # one system prompt, every tenant
    assert len(wl) == len(base)
    assert all(len(r.prompt) == len(b.prompt) + 5 for r, b in zip(wl, base, strict=True))
    flood = sorted(r.arrival for r in wl if r.client == "flood")
    assert flood == [0.25 * i for i in range(len(flood))]  # at a set rate
    # the defaults draw nothing extra: results made before these knobs stand
    assert base == multi_client_workload(
        n_clients=3, requests_per_client=4, prefix_len=6, seed=1, system_len=0, flood_gap=0.0
    )
    with pytest.raises(ValueError, match="system_len must be an integer >= 0, got -1"):
        multi_client_workload(system_len=-1)
    with pytest.raises(ValueError, match="flood_gap must be >= 0, got -0.5"):
        multi_client_workload(flood_gap=-0.5)


def test_workload_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="n_clients must be an integer >= 2, got 1"):
        multi_client_workload(n_clients=1)
    with pytest.raises(ValueError, match="suffix_len"):
        multi_client_workload(suffix_len=0)
    with pytest.raises(ValueError, match="well_behaved_gap"):
        multi_client_workload(well_behaved_gap=-1.0)


def test_fit_nonnegative_and_plain() -> None:
    # decode time falls with batch size in this (noisy) trace: NNLS clamps it to 0
    samples = [
        StepSample(0.010 - 0.001 * b + 1e-4 * p, p, b, 10)
        for p, b in [(0, 1), (10, 2), (20, 3), (0, 4), (50, 1), (5, 5)]
    ]
    nn = fit_step_time(samples)
    assert min(nn.c0, nn.c_prefill, nn.c_decode, nn.c_kv) >= 0
    plain = fit_step_time(samples, nonnegative=False)
    assert plain.c_decode == pytest.approx(-0.001, rel=1e-6)
    assert plain.r2 >= nn.r2
    assert nn.simulate_args().startswith("--model c0=")
    assert nn.simulate_args().count("--model") == 4


def test_sim_workload_conversion() -> None:
    pytest.importorskip("fairq.sim.workloads", reason="the simulator is not merged")
    from fairq.enginebench.workload import from_sim_workload
    from fairq.sim.workloads import make_workload

    sim = make_workload("tot", scale=0.01, duration=10.0, seed=0)
    wl = from_sim_workload(sim, vocab_size=256, max_new_tokens=4)
    assert len(wl) == len(sim.requests)
    ids = {r.request_id for r in wl}
    assert len(ids) == len(wl)
    assert all(set(r.after) <= ids for r in wl)
    assert any(r.after for r in wl)
    assert all(1 <= t < 256 for r in wl for t in r.prompt)
    assert all(1 <= r.max_new_tokens <= 4 for r in wl)
    assert all(ClientResolver()(r.request_id) == r.client for r in wl)
    with pytest.raises(ValueError, match="vocab_size"):
        from_sim_workload(sim, vocab_size=1)


def test_engine_bench_without_torch_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from fairq.cli import main

    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["engine-bench", "--quick"]) == 2
    assert "pip install '.[engine]'" in capsys.readouterr().err


def test_workload_shuffled_documents() -> None:
    kw = dict(n_clients=3, requests_per_client=8, flood_factor=2, prefix_len=6, docs_per_client=4)
    cyc = multi_client_workload(**kw, seed=1)  # type: ignore[arg-type]
    assert cyc == multi_client_workload(**kw, seed=1, doc_order="cycle")  # type: ignore[arg-type]
    a = multi_client_workload(**kw, seed=1, doc_order="shuffle")  # type: ignore[arg-type]
    b = multi_client_workload(**kw, seed=2, doc_order="shuffle")  # type: ignore[arg-type]
    for wl in (a, b):
        for c in ("flood", "c1", "c2"):
            docs = [tuple(r.prompt[:6]) for r in wl if r.client == c]
            counts = {d: docs.count(d) for d in docs}
            assert len(counts) == 4 and len(set(counts.values())) == 1  # each equally often
    order = [[tuple(r.prompt[:6]) for r in wl if r.client == "flood"] for wl in (a, cyc)]
    assert order[0] != order[1]  # not in turn
    with pytest.raises(ValueError, match="doc_order must be cycle or shuffle"):
        multi_client_workload(doc_order="random")


def test_frontier_oracle_and_hit_bound() -> None:
    from fairq.enginebench.frontier import WORKLOADS, Shape, max_hit_rate, oracle_order

    shape = Shape(
        clients=3,
        docs_per_client=2,
        requests_per_client=4,
        flood_factor=3,
        prefix_len=32,
        suffix_len=4,
        page_size=8,
    )
    reqs = shape.requests(0)
    order = oracle_order(reqs, shape)
    assert sorted(r.request_id for r in order) == sorted(r.request_id for r in reqs)
    assert all(r.arrival == 0.0 for r in order)
    # turns of requests_per_client / docs_per_client = 2, in rotation, one document each
    turns = [order[i : i + 2] for i in range(0, 12, 2)]
    assert [t[0].client for t in turns] == ["c1", "c2", "flood"] * 2
    assert all(t[0].prompt[:32] == t[1].prompt[:32] for t in turns)
    # each well-behaved document read in a single turn; the flood stays on its first one
    flood = [r.prompt[:32] for r in order if r.client == "flood"]
    assert flood[:6] == [flood[0]] * 6 and len({tuple(p) for p in flood}) == 2
    # the bound: every full block of a document hits except at its first load
    docs = {tuple(r.prompt[:32]) for r in reqs}
    total = sum(len(r.prompt) for r in reqs)
    assert max_hit_rate(reqs, shape) == pytest.approx(32 * (len(reqs) - len(docs)) / total)
    assert all(w.doc_blocks() == w.clients * w.docs_per_client * 32 for w in WORKLOADS.values())


def test_frontier_reads_server_runs_as_paired_points() -> None:
    """``--server-json``: each server round is a seed, paired with LPM's
    round; DLPM is named by the options its command gave."""
    from fairq.enginebench.frontier import server_points, summarize

    def doc(policies: dict[str, list[float]], flags: str = "") -> dict:
        rows = [
            {
                "policy": p,
                "output_tok_s_all": tok,
                "jain_cost_window_all": [0.5 + 0.1 * i for i in range(len(tok))],
                "prefix_hit_rate_all": [0.8] * len(tok),
            }
            for p, tok in policies.items()
        ]
        cmd = (
            f"fairq engine-bench --quantum auto {flags} --server-args --num-gpu-blocks-override 16"
        )
        return {"command": cmd, "rows": rows}

    rows = server_points(
        [
            doc({"vllm": [50, 60], "lpm": [100, 200], "dlpm": [90, 220]}),
            doc({"dlpm": [80, 100]}, "--quantum-scale 1 --no-strict-credit"),
            doc({"lpm": [400], "dlpm": [360]}),  # a third round
        ]
    )
    assert {r["cache_fraction"] for r in rows} == {0.25}
    by = {s["policy"]: s for s in summarize(rows)}
    assert set(by) == {"fifo", "lpm", "dlpm-default", "dlpm@auto"}
    # rounds paired: 90/100, 220/200, 360/400; the run without LPM from round 0
    assert by["dlpm-default"]["vs_lpm_range"] == [0.9, 1.1]
    assert by["dlpm-default"]["vs_lpm"] == 0.9
    assert by["dlpm@auto"]["vs_lpm_range"] == [0.5, 0.8]
    assert by["dlpm-default"]["jain_range"] == [0.5, 0.6]
