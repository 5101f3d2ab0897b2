"""Faults in the Ray vLLM bench (``--kill replica|ingress --kill-after-s``):
killing one Serve replica mid-run, noting when its replacement is up, and
what the run's fairness did around it (:func:`fault_timeline`), for
:mod:`fairq.enginebench.ray_vllm`."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

__all__ = ["KILL_TARGETS", "Killer", "fault_row", "fault_timeline"]


#: ``--kill`` target -> the Serve deployment whose replica is killed
KILL_TARGETS = {"replica": "FairqLLMServer", "ingress": "OpenAiIngress"}


def _replica_actors(deployment: str = "FairqLLMServer") -> list[str]:
    """The live replica actors' names of one deployment of the application."""
    import ray

    return sorted(
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if f"#{deployment}" in a["name"] and a["namespace"] == "serve"
    )


def _running(deployment: str) -> int:
    """How many replicas of ``deployment`` Serve reports RUNNING."""
    from ray import serve

    app = serve.status().applications.get("default")
    dep = app.deployments.get(deployment) if app is not None else None
    if dep is None:
        return 0
    return sum(n for st, n in dep.replica_states.items() if getattr(st, "value", st) == "RUNNING")


class Killer:
    """Kills one replica of ``target`` (``replica``: a vLLM replica;
    ``ingress``: an OpenAI ingress replica, with its router) ``after_s``
    seconds into the traffic, and notes when Serve's replacement is up: a
    vLLM replacement's counters file appears; an ingress replacement is up
    when a new ingress actor exists and Serve counts as many RUNNING as
    before the kill."""

    def __init__(self, after_s: float, stats_dir: str, target: str = "replica") -> None:
        import threading

        self.after_s = after_s
        self.stats_dir = stats_dir
        self.target = target
        self.killed: str | None = None
        self.kill_at: float | None = None
        self.ready_at: float | None = None
        self.replacement: str | None = None
        self.t0 = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, t0: float) -> None:
        self.t0 = t0
        self._thread.start()

    def _replacement(self, before: set[str], n: int) -> str | None:
        """The replacement's name once it is up, else None."""
        if self.target == "replica":
            from fairq.ray.vllm import read_replica_stats

            new = set(read_replica_stats(self.stats_dir)) - before
        else:
            dep = KILL_TARGETS[self.target]
            new = set(_replica_actors(dep)) - before
            if new and _running(dep) < n:
                return None
        return sorted(new)[0] if new else None

    def _run(self) -> None:
        import ray

        from fairq.ray.vllm import read_replica_stats

        time.sleep(self.after_s)
        dep = KILL_TARGETS[self.target]
        names = _replica_actors(dep)
        if not names:
            return
        before = set(read_replica_stats(self.stats_dir)) if self.target == "replica" else set(names)
        self.killed = names[0]
        ray.kill(ray.get_actor(names[0], namespace="serve"), no_restart=True)
        self.kill_at = time.monotonic() - self.t0
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            self.replacement = self._replacement(before, len(names))
            if self.replacement is not None:
                self.ready_at = time.monotonic() - self.t0
                return
            time.sleep(0.5)

    def join(self) -> None:
        self._thread.join(timeout=700)


def jain_between(results: list[Any], a: float, b: float) -> float:
    """Jain's index of output tokens streamed in ``[a, b]`` per tenant."""
    from fairq.enginebench.vllm_server import _service_events
    from fairq.sim.metrics import jain_index

    got: dict[str, float] = {r.request.tenant: 0.0 for r in results}
    for r in results:
        for t, n in _service_events(r):
            if a <= t <= b:
                got[r.request.tenant] += n
    return jain_index(list(got.values())) if b > a else float("nan")


def fault_timeline(
    results: list[Any],
    kill_at: float,
    ready_at: float | None,
    bin_s: float = 10.0,
    window_bins: int = 3,
    tolerance: float = 0.05,
) -> dict[str, Any]:
    """Fairness over time around a replica's death.

    ``bins`` of ``bin_s`` seconds: the output tokens and DLPM cost each
    tenant streamed in the bin; ``all_backlogged``: every tenant had a
    request outstanding (sent, not yet answered) from the bin's start to its
    end; ``served``: some output came (no replica serving: none did).

    ``windows``: ``window_bins`` consecutive bins, sliding one bin at a time,
    counted only where every bin is all-backlogged and served; Jain's index
    of the tenants' summed output tokens (``jain_output``) and cost
    (``jain_cost``), and the flood's share of the output.

    ``baseline_jain_output``: Jain's index of the output summed over the
    counted bins wholly before the kill. ``settled_s``: the start of the
    first counted window at or after the replacement came up from which every
    later counted window's output Jain is at least ``baseline - tolerance``
    (None: never, or nothing to compare); ``settle_after_ready_s`` counts
    from the replacement's start.
    """
    from fairq.enginebench.vllm_server import FLOOD, _cost_events, _service_events
    from fairq.sim.metrics import jain_index

    tenants = sorted({r.request.tenant for r in results})
    end = max(r.end for r in results)
    nbins = max(1, int(end // bin_s) + 1)
    out = [dict.fromkeys(tenants, 0.0) for _ in range(nbins)]
    cost = [dict.fromkeys(tenants, 0.0) for _ in range(nbins)]
    for r in results:
        for t, n in _service_events(r):
            out[min(int(t // bin_s), nbins - 1)][r.request.tenant] += n
        for t, c in _cost_events(r) or []:
            cost[min(int(t // bin_s), nbins - 1)][r.request.tenant] += c
    spans: dict[str, list[tuple[float, float]]] = {t: [] for t in tenants}
    for r in results:
        spans[r.request.tenant].append((r.sent, r.end))
    bins: list[dict[str, Any]] = []
    for i in range(nbins):
        a, b = i * bin_s, (i + 1) * bin_s
        bins.append(
            {
                "start_s": a,
                "all_backlogged": all(any(s <= a and e >= b for s, e in spans[t]) for t in tenants),
                "served": sum(out[i].values()) > 0,
                "output": out[i],
                "cost": cost[i],
            }
        )
    counted = [x["all_backlogged"] and x["served"] for x in bins]

    def summed(key: str, idx: Iterable[int]) -> dict[str, float]:
        return {t: sum(bins[i][key][t] for i in idx) for t in tenants}

    def share(got: dict[str, float]) -> float | None:
        total = sum(got.values())
        return got.get(FLOOD, 0.0) / total if total else None

    windows: list[dict[str, Any]] = []
    for i in range(nbins - window_bins + 1):
        idx = range(i, i + window_bins)
        if not all(counted[j] for j in idx):
            continue
        o = summed("output", idx)
        windows.append(
            {
                "start_s": i * bin_s,
                "jain_output": jain_index(list(o.values())),
                "jain_cost": jain_index(list(summed("cost", idx).values())),
                "flood_share": share(o),
            }
        )
    pre = [i for i in range(nbins) if counted[i] and (i + 1) * bin_s <= kill_at]
    baseline = jain_index(list(summed("output", pre).values())) if pre else None
    settled = None
    if baseline is not None and ready_at is not None:
        after = [w for w in windows if w["start_s"] >= ready_at]
        for j, w in enumerate(after):
            if all(v["jain_output"] >= baseline - tolerance for v in after[j:]):
                settled = w["start_s"]
                break
    return {
        "bin_s": bin_s,
        "window_bins": window_bins,
        "tolerance": tolerance,
        "baseline_jain_output": baseline,
        "pre_kill_bins": len(pre),
        "settled_s": settled,
        "settle_after_ready_s": settled - ready_at if settled is not None and ready_at else None,
        "bins": bins,
        "windows": windows,
    }


def error_counts(results: list[Any]) -> dict[str, int]:
    """``"<status>: <error, first 100 characters>"`` -> how many failed so."""
    out: dict[str, int] = {}
    for r in results:
        if not r.ok:
            key = f"{r.status}: {(r.error or 'cancelled')[:100]}"
            out[key] = out.get(key, 0) + 1
    return out


def failed_by_tenant(results: list[Any]) -> dict[str, list[int]]:
    """``tenant -> [failed, sent]``."""
    out: dict[str, list[int]] = {}
    for r in results:
        c = out.setdefault(r.request.tenant, [0, 0])
        c[0] += not r.ok
        c[1] += 1
    return out


def fault_row(
    killer: Killer,
    results: list[Any],
    replicas: dict[str, dict[str, Any]],
    failed: int,
    bin_s: float,
) -> dict[str, Any]:
    """The ``fault`` part of a row run with ``--kill-after-s``."""
    end = max(r.end for r in results)
    return {
        "target": killer.target,
        "killed": killer.killed,
        "kill_at_s": killer.kill_at,
        "replacement_ready_s": killer.ready_at,
        "failed": failed,
        # answered 200 with no error, but fewer tokens than asked
        "short": sum(r.ok and not r.complete for r in results),
        "answered": sum(r.ok for r in results),
        "requests": len(results),
        # the failed requests' errors: status and the error's first words
        "errors": error_counts(results),
        "failed_by_tenant": failed_by_tenant(results),
        # requests the replacement served (it took traffic again)
        "replacement_requests": (
            replicas.get(killer.replacement, {}).get("requests") if killer.replacement else None
        ),
        "jain_before_kill": jain_between(results, 0.0, killer.kill_at or 0.0),
        "jain_after_replacement": (
            jain_between(results, killer.ready_at, end) if killer.ready_at else None
        ),
        "timeline": (
            fault_timeline(results, killer.kill_at, killer.ready_at, bin_s)
            if killer.kill_at is not None
            else None
        ),
    }
