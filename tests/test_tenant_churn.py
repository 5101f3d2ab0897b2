"""Tenants that come and go (issue 15, item 7): per-tenant state stays
bounded, and forgetting an idle tenant gives it no more than it would have had."""

from __future__ import annotations

import pytest

import fairq
from fairq import DLPM, FCFS, LPM, VTC, RadixTree


def churn(s: FCFS | LPM | VTC | DLPM, tenants: int) -> int:
    """Each tenant sends one request and leaves, while a steady tenant keeps a
    backlog; returns the largest number of clients held at any time."""
    peak = 0
    for i in range(8):
        s.add(f"steady-{i}", "steady", [9, 9, i])
    steady = 0
    for t in range(tenants):
        s.add(t, f"tenant-{t}", [1, 2, t % 50])
        for a in s.schedule(6, max_requests=2):
            s.charge_output(a.request_id, 1)
            s.finish(a.request_id)
            if a.client == "steady":
                s.add(f"steady-x{steady}", "steady", [9, 9, t % 7])
                steady += 1
        peak = max(peak, s.num_clients)
    return peak


@pytest.mark.parametrize("policy", ["fcfs", "lpm", "vtc", "dlpm"])
def test_distinct_tenants_keep_the_client_table_bounded(policy: str) -> None:
    s = fairq.make_scheduler(policy, RadixTree(), **({"quantum": 8.0} if policy == "dlpm" else {}))
    peak = churn(s, 30_000)
    assert peak <= 2 * 1024 + 16, peak  # swept whenever the table doubles from 1,024
    assert s.num_clients < 30_000
    assert len(s.clients()) == s.num_clients


@pytest.mark.slow
def test_a_million_tenants() -> None:
    """A million distinct tenants through one VTC scheduler (about 3 s)."""
    s = VTC()
    assert churn(s, 1_000_000) <= 2 * 1024 + 16
    assert s.num_clients <= 2 * 1024


def test_vtc_forgotten_tenant_comes_back_where_it_would_have_been() -> None:
    """VTC: a tenant is forgotten only at or below the lift floor; back, it is
    lifted to the floor as a new client, which is where the lift would have
    put it anyway: the same counter as in a scheduler that kept it."""
    keep, forget = VTC(), VTC()
    for s in (keep, forget):
        s.add("t1", "tenant", [1] * 2)  # counter 2 after admission
        for i in range(6):
            s.add(f"b{i}", "background", [1] * 4)
        for a in s.schedule(6):  # tenant (0) and one background (0) admitted
            s.finish(a.request_id)
        for a in s.schedule(8):  # background goes on: its counter passes 2
            s.finish(a.request_id)
        assert s.counter("tenant") == 2 and s.counter("background") > 2
    assert forget.forget_idle_clients() == 1  # idle, at or below the floor
    assert keep.num_clients == 2 and forget.num_clients == 1
    for s in (keep, forget):
        s.add("t2", "tenant", [1] * 2)
    assert forget.counter("tenant") == keep.counter("tenant") == keep.counter("background")
    # a tenant above the floor (it owes service) is never forgotten
    owing = VTC()
    owing.add(1, "heavy", [1] * 50)
    owing.add(2, "light", [1])
    for a in owing.schedule(100):
        owing.finish(a.request_id)
    owing.add(3, "light", [1])
    assert owing.forget_idle_clients() == 0 and "heavy" in owing.clients()


def test_dlpm_forgets_only_paid_debt_and_a_weight_is_never_forgotten() -> None:
    s = DLPM(RadixTree(), quantum=10.0)
    s.set_weight("vip", 2.0)
    s.add(1, "heavy", [1] * 30)
    s.add(2, "vip", [2])
    for a in s.schedule(100):
        s.finish(a.request_id)
    assert s.deficit("heavy") < 0  # in debt: kept
    assert s.forget_idle_clients() == 0
    assert set(s.clients()) == {"heavy", "vip"}
    s.add(3, "other", [3])
    while s.deficit("heavy") <= 0:  # refills pay the idle client's debt off
        s.add(f"o{s.refills}", "other", [3])
        for a in s.schedule(100):
            s.finish(a.request_id)
    assert s.forget_idle_clients() >= 1
    assert "heavy" not in s.clients() and "vip" in s.clients()
    assert s.weight("vip") == 2.0
    s.add(9, "heavy", [1])  # back as a new client: 0, no more credit than before
    assert s.deficit("heavy") == 0.0


@pytest.mark.parametrize("name", ["d2lpm", "affinity", "rr", "ll", "client-rr"])
def test_dispatchers_keep_the_client_table_bounded(name: str) -> None:
    from fairq.dispatch import make_dispatcher

    d = make_dispatcher(name, 3, worker_quantum=100.0)
    peak = 0
    for t in range(20_000):
        d.dispatch(t, f"tenant-{t}", [1, 2, t % 9])
        if t >= 4:  # four requests stay in flight
            d.on_finish(t - 4, 3)
        peak = max(peak, d.num_clients)
    assert peak <= 2 * 1024 + 8, peak
    assert len(d.clients()) == d.num_clients and len(d) == 4
    # a forgotten client comes back as new: fresh deficits, same dispatch rules
    d.forget_idle_clients()
    assert d.num_clients == 4
    w = d.dispatch("back", "tenant-0", [1, 2, 0])
    assert 0 <= w < 3
    if name == "d2lpm":
        assert max(d.deficit("tenant-0", k) for k in range(3)) == 100.0


@pytest.mark.slow
def test_one_shot_tenants_served_one_at_a_time_stay_bounded() -> None:
    """Nobody waits between tenants, so VTC's lift floor is undefined and every
    served tenant stays a debtor (counter > 0 = ahead of a new client): the
    idle-debtor cap (65,536, least debt forgotten first) bounds the table."""
    cap = 65_536
    s = VTC()
    peak = 0
    for t in range(200_000):
        s.add(t, f"tenant-{t}", [1] * (3 + t % 5))  # costs 3..7: debts differ
        for a in s.schedule(64):
            s.finish(a.request_id)
        peak = max(peak, s.num_clients)
    assert peak <= 2 * cap + 1, peak
    s.forget_idle_clients()
    assert s.num_clients == cap
    # the least debt went first: 40,000 tenants per cost 3..7, so the 65,536
    # kept are all the cost-7 ones and the rest cost 6
    kept = sorted(s.service(c) for c in s.clients())
    assert kept[0] == 6 and kept.count(7) == 40_000


def test_idle_debtor_cap_forgets_the_smallest_debt_first() -> None:
    s = VTC()
    for t in range(4):
        s.add(t, f"c{t}", [1] * (t + 1))
        for a in s.schedule(64):
            s.finish(a.request_id)
    assert s.num_clients == 4
    assert s.forget_idle_clients() == 0  # nobody waits: no floor, all debtors, under the cap
    assert sorted(s.clients()) == ["c0", "c1", "c2", "c3"]
