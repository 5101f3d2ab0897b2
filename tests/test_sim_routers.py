"""Several routers with a stale shared view (fairq.sim.routers) and the core's
view methods (observe_dispatch / observe_finish / external_load).

What is asserted: exact equality with one global router where the design
says so (one router, or any number with a view of age 0), and invariants
for stale views (every request dispatched once and finished once, the view
at rest holds nothing in flight). How much fairness degrades with staleness
is measured (docs/results/routers.md), not asserted."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairq
from fairq.sim import SimConfig, StepModel, make_workload, simulate, summarize
from fairq.sim.routers import RouterFleet

A10G = StepModel.preset("a10g-3b")
QA = dict(misbehave="S1", seed=1, scale=0.25, rate=16.0, duration=8.0, docs_per_client=16)


def qa(workers: int = 4):  # type: ignore[no-untyped-def]
    return make_workload("qa", **{**QA, "rate": 4.0 * workers})


def run(cfg: SimConfig, wl=None):  # type: ignore[no-untyped-def]
    return simulate(wl if wl is not None else qa(cfg.workers), cfg)


BASE = SimConfig(workers=4, policy="dlpm", dispatcher="d2lpm", model=A10G, worker_quantum=5000.0)


def same_run(a, b) -> None:  # type: ignore[no-untyped-def]
    assert a.worker_of == b.worker_of
    assert a.finish == b.finish
    assert a.service == b.service


@pytest.mark.parametrize("dispatcher", ["d2lpm", "ll", "affinity"])
def test_one_router_with_a_fresh_view_is_todays_router(dispatcher: str) -> None:
    cfg = replace(BASE, dispatcher=dispatcher)
    one = run(cfg)
    wl = qa(cfg.workers)
    # the fleet forced on with one router and a view of age 0
    from fairq.sim.engine import Simulator

    sim = Simulator(wl, cfg)
    sim.dispatcher = RouterFleet(
        lambda: fairq.dispatch.make_dispatcher(dispatcher, 4, worker_quantum=5000.0),
        1,
        0.0,
        "rr",
        lambda: sim.now,
    )
    same_run(one, sim.run())


@pytest.mark.parametrize("assign", ["rr", "random", "tenant"])
def test_many_routers_with_a_fresh_view_choose_as_one(assign: str) -> None:
    # T = 0: each router applies every other's dispatch, finish and eviction
    # before it chooses, so N routers dispatch exactly as one does
    one = run(BASE)
    many = run(replace(BASE, routers=8, view_staleness=0.0, router_assign=assign))
    same_run(one, many)
    assert sum(many.dispatcher.dispatched) == len(many.requests)
    # and each router's view of the held prefixes is one router's
    assert many.placements == one.placements
    assert sum(one.placements.values()) == len(one.requests)
    assert one.placements["held"] > 0 and one.placements["new"] > 0


@pytest.mark.parametrize(
    "routers,staleness,assign,workers",
    [
        (4, 0.5, "rr", 4),
        (16, 2.0, "random", 4),
        (3, 1.0, "tenant", 4),
        (1, 3.0, "rr", 4),
        (4, float("inf"), "rr", 4),
    ],
)
def test_stale_views_lose_and_duplicate_nothing(
    routers: int, staleness: float, assign: str, workers: int
) -> None:
    cfg = replace(
        BASE, workers=workers, routers=routers, view_staleness=staleness, router_assign=assign
    )
    sim = run(cfg)
    fleet = sim.dispatcher
    assert sim.complete
    assert sorted(sim.finish) == sorted(sim.requests)  # every request finished once
    assert sum(fleet.dispatched) == len(sim.requests)  # and was dispatched once
    assert len(fleet) == 0 and fleet.queue_sizes == [0] * workers
    assert sum(fleet.dispatched_counts) == len(sim.requests)
    for d in fleet.routers:
        assert len(d) == 0
    # the view at rest: every observed dispatch matched by its finish
    assert fleet.settle() == [[0] * workers] * routers
    assert sim.placements is fleet.placements
    assert sum(fleet.placements.values()) == len(sim.requests)
    m = summarize(sim)
    assert m["routers"] == routers and m["view_staleness"] == staleness
    if assign == "tenant":  # each client through one router
        per_router = [0] * routers
        for req in sim.requests.values():
            per_router[fleet.client_router[req.client]] += 1
        assert per_router == fleet.dispatched


def test_config_and_fleet_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="routers"):
        SimConfig(routers=0)
    with pytest.raises(ValueError, match="view_staleness"):
        SimConfig(view_staleness=-1.0)
    with pytest.raises(ValueError, match="view_staleness"):
        SimConfig(view_staleness=float("nan"))
    with pytest.raises(ValueError, match="router_assign"):
        SimConfig(router_assign="hash")
    with pytest.raises(ValueError, match="view_staleness must be a number"):
        SimConfig(view_staleness="1")  # type: ignore[arg-type]
    assert not SimConfig(workers=1, routers=4).fleet
    cfg = SimConfig(workers=2, dispatcher="d2lpm", routers=4, view_staleness=1)
    assert "x4 rr T=1s" in cfg.label()
    fleet = RouterFleet(lambda: fairq.D2LPM(2, 100.0), 2, 0.0, "rr", lambda: 0.0)
    fleet.dispatch(1, "a", [1, 2])
    with pytest.raises(ValueError, match="already in flight"):
        fleet.dispatch(1, "a", [1, 2])
    with pytest.raises(KeyError):
        fleet.on_finish(2, 1)


@pytest.mark.parametrize("assign", ["rr", "random", "tenant"])
def test_fleet_errors_lose_nothing_and_keep_the_assignment(assign: str) -> None:
    def fleet() -> RouterFleet:
        return RouterFleet(lambda: fairq.D2LPM(2, 100.0), 3, 0.0, assign, lambda: 0.0, seed=3)

    ref, f = fleet(), fleet()
    w = f.dispatch(0, "a", [1, 2])
    assert ref.dispatch(0, "a", [1, 2]) == w
    with pytest.raises(ValueError, match="output_tokens"):
        f.on_finish(0, -1)  # the router refuses it: the request stays in flight
    assert 0 in f and len(f) == 1
    assert f.on_finish(0, 3) == ref.on_finish(0, 3) == w
    assert len(f) == 0
    # a dispatch the router refuses does not move the assignment
    with pytest.raises(ValueError, match="token id"):
        f.dispatch(1, "b", [2**40])
    assert 1 not in f and "b" not in f.client_router
    for i, c in enumerate("bcbcadb", start=1):
        assert f.dispatch(i, c, [i]) == ref.dispatch(i, c, [i])
    assert f.dispatched == ref.dispatched and f.client_router == ref.client_router


def test_core_view_methods_errors_change_nothing() -> None:
    d = fairq.D2LPM(3, 100.0)
    d.dispatch(1, "a", [1, 2, 3])
    before = d.state_dict(), d.external_load
    with pytest.raises(ValueError, match="external load"):
        d.external_load = [1, 2]
    with pytest.raises(ValueError, match="external_load"):
        d.external_load = [1, -2, 0]
    with pytest.raises(IndexError, match="worker"):
        d.observe_dispatch("b", 3, [1])
    with pytest.raises(ValueError, match="worker"):
        d.observe_finish("b", -1, 1)
    with pytest.raises(ValueError, match="output_tokens"):
        d.observe_finish("b", 0, -1)
    assert (d.state_dict(), d.external_load) == before
    d.external_load = [0, 5, 0]
    assert d.external_load == [0, 5, 0]
    assert d.queue_sizes == [1, 0, 0]  # the view is not this router's own count


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 3), st.integers(0, 40)),
        min_size=1,
        max_size=60,
    )
)
def test_routers_sharing_every_event_match_one_router(ops: list[tuple[int, int, int, int]]) -> None:
    """Reference model: one D2LPM router. Three routers, each told of the
    others' dispatches and finishes before it chooses, pick the same worker
    for every request (any interleaving of dispatches and finishes)."""
    one = fairq.D2LPM(4, 60.0)
    fleet = RouterFleet(lambda: fairq.D2LPM(4, 60.0), 3, 0.0, "random", lambda: 0.0, seed=5)
    live: list[int] = []
    for i, (client, prompt, action, out) in enumerate(ops):
        if action == 0 and live:  # finish the oldest
            rid = live.pop(0)
            assert fleet.on_finish(rid, out) == one.on_finish(rid, out)
            continue
        tokens = [prompt * 1000 + k for k in range(10 + 5 * prompt)]
        c = f"c{client}"
        assert fleet.dispatch(i, c, tokens) == one.dispatch(i, c, tokens)
        live.append(i)
    for r, d in enumerate(fleet.routers):
        fleet.catch_up(r, 0.0)
        seen = [a + b for a, b in zip(d.queue_sizes, d.external_load, strict=True)]
        assert seen == one.queue_sizes


class CheckedFleet(RouterFleet):
    """A fleet that checks, each time a router catches up, that its view of
    the others' load is the reference: the other routers' requests
    dispatched at or before ``now - T`` and not finished by then."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.hist: dict[int, tuple[int, int, float]] = {}
        self.fin: dict[int, float] = {}
        self.checks = 0

    def dispatch(self, request_id, client, tokens):  # type: ignore[no-untyped-def]
        w = super().dispatch(request_id, client, tokens)
        self.hist[request_id] = (self._owner[request_id][0], w, self.clock())
        return w

    def on_finish(self, request_id, output_tokens):  # type: ignore[no-untyped-def]
        self.fin[request_id] = self.clock()
        return super().on_finish(request_id, output_tokens)

    def catch_up(self, r: int, until: float) -> None:
        super().catch_up(r, until)
        want = [0] * self.num_workers
        for rid, (src, w, t) in self.hist.items():
            if src != r and t <= until and self.fin.get(rid, float("inf")) > until:
                want[w] += 1
        assert self.routers[r].external_load == want
        self.checks += 1


@pytest.mark.parametrize("staleness", [0.0, 0.7, 3.0])
def test_each_router_sees_the_others_load_exactly_as_old_as_the_view(staleness: float) -> None:
    cfg = replace(BASE, routers=3, view_staleness=staleness, router_assign="random")
    wl = qa(4)
    from fairq.sim.engine import Simulator

    sim = Simulator(wl, cfg)
    sim.dispatcher = CheckedFleet(
        lambda: fairq.D2LPM(4, 5000.0), 3, staleness, "random", lambda: sim.now
    )
    sim.run()
    assert sim.complete and sim.dispatcher.checks == len(sim.requests)


def test_routers_without_a_view_agree_on_new_documents_with_the_hub() -> None:
    # no shared view: each router places a document by its own dispatches;
    # with the hub's table every router sends it where the first one did
    doc = np.arange(1000, 1400, dtype=np.uint32)
    now = [0.0]

    def fleet(hub: bool, slack: int = 0) -> RouterFleet:
        return RouterFleet(
            lambda: fairq.D2LPM(4, 1e9),
            4,
            float("inf"),
            "rr",
            lambda: now[0],
            hub_placement=hub,
            hub_placement_slack=slack,
        )

    for hub in (False, True):
        f = fleet(hub)
        # five other documents first (routers 0, 1, 2, 3, 0): router 0's
        # loads differ from the others'
        for i in range(5):
            f.dispatch(f"x{i}", "a", np.arange(300, dtype=np.uint32) + 5000 + 1000 * i)
        got = {f.dispatch(f"d{i}", "b", np.concatenate([doc, [i]])) for i in range(4)}
        assert (len(got) == 1) is hub, got
        assert len(f) == 9 and sum(f.dispatched) == 9
    # the documents spread evenly: four new ones on four workers
    f = fleet(True)
    placed = [
        f.dispatch(f"n{i}", "a", np.arange(300, dtype=np.uint32) + 1000 * i) for i in range(8)
    ]
    assert sorted(placed) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert f.documents is not None and f.documents.placements() == {0: 2, 1: 2, 2: 2, 3: 2}
    # a D2LPM dispatcher only: another policy's fleet has no table
    assert (
        RouterFleet(
            lambda: fairq.LeastLoaded(4), 2, 0.0, "rr", lambda: 0.0, hub_placement=True
        ).documents
        is None
    )
