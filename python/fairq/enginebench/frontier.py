"""Locality under cache pressure: the throughput-fairness frontier on vLLM's
real scheduler, in-process (``python -m fairq.enginebench.frontier``).

Every point is one :func:`fairq.enginebench.vllm.policy_run` (vLLM 0.33's
scheduler, step times simulated, so throughput and Jain do not depend on the
machine's load) of a cache-pressure workload (:data:`WORKLOADS`: tenants
cycling through documents, one tenant flooding) at a KV cache sized as a
fraction of the documents' blocks, for vLLM's FCFS (``fifo``), VTC, LPM,
DLPM at each quantum, and an offline **fair oracle** (:func:`oracle_order`:
the requests handed to vLLM's FCFS in an order that rotates between tenants
in equal turns, each turn one tenant's requests on one document, so every
document is loaded as few times as a fair rotation allows).

Reported per point: output tokens/s, Jain's index over the backlogged window
(service in DLPM's unit, ``w_e`` per computed prompt token + ``w_q`` per
output token), the prefix-cache hit rate, and **the hit-rate bound**
(:func:`max_hit_rate`): no order can hit more than every document's full
blocks minus one load of each (docs/results/frontier.md argues the rest).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from typing import Any

from fairq.enginebench.workload import EngineRequest, multi_client_workload

__all__ = ["WORKLOADS", "Shape", "main", "max_hit_rate", "oracle_order", "sweep"]


@dataclass(frozen=True)
class Shape:
    """One workload of the sweep: :func:`multi_client_workload`'s arguments
    (``doc_order="shuffle"``: seeds differ in which request reads which
    document) and the engine's batch limits."""

    clients: int
    docs_per_client: int
    requests_per_client: int
    flood_factor: int = 4
    prefix_len: int = 512
    suffix_len: int = 16
    max_new_tokens: int = 32
    gap: float = 0.0
    flood_gap: float = 0.0
    max_batch_tokens: int = 1024
    max_requests_per_batch: int = 8
    page_size: int = 16
    help: str = ""

    def requests(self, seed: int) -> list[EngineRequest]:
        """The requests of seed ``seed``."""
        return multi_client_workload(
            n_clients=self.clients,
            requests_per_client=self.requests_per_client,
            flood_factor=self.flood_factor,
            prefix_len=self.prefix_len,
            suffix_len=self.suffix_len,
            max_new_tokens=self.max_new_tokens,
            vocab_size=32_000,
            well_behaved_gap=self.gap,
            flood_gap=self.flood_gap,
            seed=seed,
            docs_per_client=self.docs_per_client,
            doc_order="shuffle",
        )

    def doc_blocks(self) -> int:
        """KV blocks all documents take (full blocks of every document)."""
        return self.clients * self.docs_per_client * (self.prefix_len // self.page_size)

    def all_at_once(self) -> bool:
        """Every request arrives at time 0 (the oracle needs it)."""
        return self.gap == 0 and self.flood_gap == 0


#: The sweep's workloads (all 16 documents of 512 tokens, 32 KV blocks each).
WORKLOADS: dict[str, Shape] = {
    "docs4": Shape(
        clients=4,
        docs_per_client=4,
        requests_per_client=16,
        help="the issue's: 4 tenants (one flooding x4), 4 documents each, all sent at once",
    ),
    "tenants8": Shape(
        clients=8,
        docs_per_client=2,
        requests_per_client=8,
        help="8 tenants (one flooding x4), 2 documents each, all sent at once",
    ),
    "arrivals": Shape(
        clients=4,
        docs_per_client=4,
        requests_per_client=16,
        gap=0.1,
        flood_gap=0.02,
        help="docs4 arriving over time: a well-behaved request every 0.1 s per tenant "
        "(about twice its fair share of the LPM throughput), the flood's every 0.02 s",
    ),
}


def _doc(r: EngineRequest, shape: Shape) -> tuple[int, ...]:
    return tuple(r.prompt[: shape.prefix_len])


def max_hit_rate(requests: list[EngineRequest], shape: Shape) -> float:
    """The largest prefix-cache hit rate any order can reach (vLLM's unit:
    prompt tokens served from the cache over all prompt tokens): every full
    block of a document is a hit except at the document's first load; the
    suffix and the document's last partial block always miss."""
    full = (shape.prefix_len // shape.page_size) * shape.page_size
    seen: set[tuple[int, ...]] = set()
    hits = 0
    for r in requests:
        d = _doc(r, shape)
        if d in seen:
            hits += full
        seen.add(d)
    return hits / sum(len(r.prompt) for r in requests)


def oracle_order(requests: list[EngineRequest], shape: Shape) -> list[EngineRequest]:
    """The fair oracle's order (all requests at time 0): tenants take turns
    in a fixed rotation; a turn is ``requests_per_client /
    docs_per_client`` requests (one well-behaved tenant's requests on one
    document, so every tenant gets the same service per round); each
    tenant's requests are taken document by document, so a well-behaved
    document is loaded once and the flood stays on one document for as many
    turns as it has requests on it."""
    turn = max(1, shape.requests_per_client // shape.docs_per_client)
    queues: dict[str, list[EngineRequest]] = {}
    for r in requests:
        queues.setdefault(r.client, []).append(r)
    for q in queues.values():
        first: dict[tuple[int, ...], int] = {}
        for r in q:
            first.setdefault(_doc(r, shape), len(first))
        q.sort(key=lambda r: first[_doc(r, shape)])
    order: list[EngineRequest] = []
    clients = sorted(queues)
    while any(queues.values()):
        for c in clients:
            order.extend(queues[c][:turn])
            del queues[c][:turn]
    return [EngineRequest(r.request_id, r.client, 0.0, r.prompt, r.max_new_tokens) for r in order]


def _run_args(shape: Shape, num_blocks: int, quantum: float | str) -> argparse.Namespace:
    return argparse.Namespace(
        num_blocks=num_blocks,
        page_size=shape.page_size,
        max_batch_tokens=shape.max_batch_tokens,
        max_requests_per_batch=shape.max_requests_per_batch,
        quantum=quantum,
    )


def point(
    shape: Shape, requests: list[EngineRequest], num_blocks: int, policy: str
) -> dict[str, Any]:
    """One point: ``policy`` is ``fifo``, ``vtc``, ``lpm``, ``oracle``,
    ``dlpm@Q`` (the paper's admission rule; ``Q`` a number, ``auto``:
    automatic at ``quantum_scale`` 1, the default before strict credit, or
    ``xS``: automatic at ``quantum_scale`` ``S``) or ``dlpm-strict@Q`` (the
    same with ``strict_credit``) or ``dlpm-default`` (the engines' DLPM with
    no option given: ``dlpm-strict@x0.8`` since issue 35)."""
    from fairq.enginebench.vllm import policy_run

    quantum: float | str = 0.0
    scale: float | None = 0.0
    name = policy
    strict: bool | None = policy.startswith("dlpm-strict@")
    if policy.startswith("dlpm@") or strict:
        quantum, scale = _dlpm_quantum(policy)
        name = "dlpm"
    elif policy == "dlpm-default":  # the engines' DLPM, as shipped
        quantum, scale, strict, name = "auto", None, None, "dlpm"
    elif policy == "fifo":
        name = "vllm-fcfs"
    elif policy == "oracle":
        name, requests = "vllm-fcfs", oracle_order(requests, shape)
    args = _run_args(shape, num_blocks, quantum)
    args.quantum_scale = scale
    args.strict_credit = strict
    row = policy_run(name, requests, args)
    return {
        "policy": policy,
        "throughput": row["throughput_output_tok_s"],
        "jain": row["jain_index_window"],
        "hit_rate": row["prefix_hit_rate"],
        "simulated_s": row["simulated_s"],
    }


def sweep(
    names: list[str],
    fractions: list[float],
    policies: list[str],
    seeds: list[int],
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Every point of ``names`` x ``fractions`` x ``policies`` x ``seeds``
    (``oracle`` only where every request arrives at once)."""
    rows = []
    for name in names:
        shape = WORKLOADS[name]
        for frac in fractions:
            blocks = max(1, round(shape.doc_blocks() * frac))
            for seed in seeds:
                requests = shape.requests(seed)
                bound = max_hit_rate(requests, shape)
                for p in policies:
                    if p == "oracle" and not shape.all_at_once():
                        continue
                    r = point(shape, requests, blocks, p)
                    r.update(
                        workload=name,
                        cache_fraction=frac,
                        num_blocks=blocks,
                        seed=seed,
                        max_hit_rate=bound,
                    )
                    rows.append(r)
                    if progress:
                        print(
                            f"# {name} cache {frac:.3g} ({blocks} blocks) seed {seed} {p}: "
                            f"{r['throughput']:.0f} tok/s, Jain {r['jain']:.3f}, "
                            f"hit {r['hit_rate']:.3f} (bound {bound:.3f})",
                            file=sys.stderr,
                            flush=True,
                        )
    return rows


def server_points(docs: list[dict[str, Any]], doc_blocks: int = 64) -> list[dict[str, Any]]:
    """The rows of ``fairq engine-bench --engine vllm-server --json`` runs
    on the ``docs4`` shape as frontier points (Jain in DLPM's cost, the
    in-process sweep's unit). A round is a ``seed``, so LPM and DLPM of the
    same round are paired: the rounds of a run with LPM follow those of the
    earlier runs with LPM at the same cache size; a run without LPM is
    paired round by round from the first LPM round there. The cache
    fraction is the server's ``--num-gpu-blocks-override`` over the
    documents' blocks (16 documents of four 128-token blocks); DLPM is named
    as :func:`point` names it (``dlpm-default``, or ``dlpm@auto`` with
    ``--no-strict-credit``)."""
    rows = []
    rounds: dict[int, int] = {}  # cache blocks -> LPM rounds so far
    for doc in docs:
        cmd = doc["command"].split()
        blocks = int(cmd[cmd.index("--num-gpu-blocks-override") + 1])
        paper = "--no-strict-credit" in cmd
        first = 0
        if any(r["policy"] == "lpm" for r in doc["rows"]):
            first = rounds.get(blocks, 0)
            rounds[blocks] = first + max(len(r["output_tok_s_all"]) for r in doc["rows"])
        policy = {"vllm": "fifo", "dlpm": "dlpm@auto" if paper else "dlpm-default"}
        for r in doc["rows"]:
            for i, tok_s in enumerate(r["output_tok_s_all"]):
                rows.append(
                    {
                        "policy": policy.get(r["policy"], r["policy"]),
                        "throughput": tok_s,
                        "jain": r["jain_cost_window_all"][i],
                        "hit_rate": r["prefix_hit_rate_all"][i],
                        "workload": "server-docs4",
                        "cache_fraction": round(blocks / doc_blocks, 3),
                        "num_blocks": blocks,
                        "seed": first + i,
                        "max_hit_rate": float("nan"),
                    }
                )
    return rows


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload, cache fraction and policy: the median and the range
    over seeds of throughput, Jain and hit rate, and throughput / LPM's
    (each seed's ratio against LPM on the same seed; median and range)."""
    lpm = {
        (r["workload"], r["cache_fraction"], r["seed"]): r["throughput"]
        for r in rows
        if r["policy"] == "lpm"
    }
    groups: dict[tuple[str, float, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["workload"], r["cache_fraction"], r["policy"]), []).append(r)
    out = []
    for (wl, frac, pol), rs in groups.items():
        s: dict[str, Any] = {"workload": wl, "cache_fraction": frac, "policy": pol}
        s["num_blocks"] = rs[0]["num_blocks"]
        ratios = [
            r["throughput"] / lpm[(wl, frac, r["seed"])]
            for r in rs
            if lpm.get((wl, frac, r["seed"]))
        ]
        series = {
            "throughput": [r["throughput"] for r in rs],
            "jain": [r["jain"] for r in rs],
            "hit_rate": [r["hit_rate"] for r in rs],
            "max_hit_rate": [r["max_hit_rate"] for r in rs],
            "vs_lpm": ratios,
        }
        for k, v in series.items():
            if v:
                s[k] = statistics.median(v)
                s[k + "_range"] = [min(v), max(v)]
        out.append(s)
    return out


def table(summary: list[dict[str, Any]]) -> str:
    """The summary as a markdown table (one line per point)."""
    lines = [
        "| workload | cache (blocks) | policy | output tok/s | x LPM (range) "
        "| Jain (range) | hit rate | hit bound |",
        "|---|---|---|---:|---|---|---:|---:|",
    ]
    for s in summary:
        lo, hi = s.get("vs_lpm_range", [float("nan")] * 2)
        jlo, jhi = s["jain_range"]
        lines.append(
            f"| {s['workload']} | {s['cache_fraction']:.3g} ({s['num_blocks']}) | {s['policy']} "
            f"| {s['throughput']:.0f} | {s.get('vs_lpm', float('nan')):.2f} "
            f"({lo:.2f}-{hi:.2f}) | {s['jain']:.3f} ({jlo:.3f}-{jhi:.3f}) "
            f"| {s['hit_rate']:.3f} | {s['max_hit_rate']:.3f} |"
        )
    return "\n".join(lines)


def headline(summary: list[dict[str, Any]], default: str = "dlpm@auto") -> str:
    """One line per workload and cache size: x LPM's throughput / Jain of
    the fair oracle, VTC, DLPM as shipped (``dlpm-default``, where run), DLPM
    at ``default`` and at every ``dlpm@xS`` and ``dlpm-strict@Q``, and
    the fixed quantum with the most throughput at Jain >= 0.9."""
    by: dict[tuple[str, float], dict[str, dict[str, Any]]] = {}
    for s in summary:
        by.setdefault((s["workload"], s["cache_fraction"]), {})[s["policy"]] = s
    scales = sorted(
        {p for v in by.values() for p in v if p.startswith("dlpm@x")},
        key=lambda p: _dlpm_quantum(p)[1],
    )
    strict = sorted(
        {p for v in by.values() for p in v if p.startswith("dlpm-strict@")},
        key=lambda p: _dlpm_quantum(p)[1],
    )
    shipped = ["dlpm-default"] if any("dlpm-default" in v for v in by.values()) else []
    cols = ["oracle", "vtc", *shipped, default, *scales, *strict]
    lines = [
        "| workload | cache | LPM tok/s | "
        + " | ".join(
            c.replace("dlpm-default", "DLPM as shipped")
            .replace("dlpm-strict@", "strict ")
            .replace("dlpm@", "DLPM ")
            for c in cols
        )
        + " | best fixed quantum at Jain >= 0.9 |",
        "|---|---|---:|" + "---|" * (len(cols) + 1),
    ]

    def cell(s: dict[str, Any] | None) -> str:
        if s is None:
            return "-"
        return f"{s.get('vs_lpm', float('nan')):.2f}x / {s['jain']:.3f}"

    order = {w: i for i, w in enumerate(WORKLOADS)}
    for (wl, frac), pol in sorted(by.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])):
        fixed = [
            s
            for p, s in pol.items()
            if p.startswith("dlpm@") and _q(p) < 1e300 and s["jain"] >= 0.9
        ]
        best = max(fixed, key=lambda s: s.get("vs_lpm", 0.0), default=None)
        b = "-" if best is None else f"{best['policy'][5:]}: {cell(best)}"
        lpm = pol.get("lpm", {}).get("throughput", float("nan"))
        lines.append(
            f"| {wl} | {frac:.3g} | {lpm:.0f} | "
            + " | ".join(cell(pol.get(c)) for c in cols)
            + f" | {b} |"
        )
    return "\n".join(lines)


def plot(summary: list[dict[str, Any]], path: str) -> None:
    """Throughput / LPM against Jain, one panel per workload and cache size,
    the range over seeds as error bars, DLPM's quanta joined by a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seen = {s["workload"] for s in summary}
    names = [w for w in WORKLOADS if w in seen] + sorted(seen - set(WORKLOADS))
    fracs = sorted({s["cache_fraction"] for s in summary})
    fig, axes = plt.subplots(
        len(names), len(fracs), figsize=(3.6 * len(fracs), 3.2 * len(names)), squeeze=False
    )
    style = {"fifo": "kx", "vtc": "bs", "lpm": "r^", "oracle": "g*", "dlpm-default": "kD"}
    for i, wl in enumerate(names):
        for j, frac in enumerate(fracs):
            ax = axes[i][j]
            pts = [s for s in summary if s["workload"] == wl and s["cache_fraction"] == frac]
            for s in pts:
                x, y = s["jain"], s.get("vs_lpm", float("nan"))
                xe = [[x - s["jain_range"][0]], [s["jain_range"][1] - x]]
                ye = [[y - s["vs_lpm_range"][0]], [s["vs_lpm_range"][1] - y]]
                q = s["policy"].split("@", 1)[1] if s["policy"].startswith("dlpm@") else ""
                fmt = style.get(s["policy"], "cD" if q.startswith("x") else "mo")
                if q == "auto":
                    fmt = "yD"
                strict = s["policy"].startswith("dlpm-strict@")
                if strict:
                    fmt = "C1P"  # strict credit: orange plus signs, on top
                shipped = s["policy"] == "dlpm-default"  # black diamonds, on top
                big = shipped or s["policy"] in ("lpm", "oracle")
                ax.errorbar(
                    x,
                    y,
                    xerr=xe,
                    yerr=ye,
                    fmt=fmt,
                    ms=8 if big or strict else 5,
                    capsize=2,
                    zorder=5 if shipped else 4 if strict else 3 if big else 2,
                )
                if q and q != "auto":
                    ax.annotate(q, (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
            fixed = [s for s in pts if s["policy"].startswith("dlpm@") and _q(s["policy"]) < 1e300]
            fixed.sort(key=lambda s: _q(s["policy"]))
            ax.plot([s["jain"] for s in fixed], [s["vs_lpm"] for s in fixed], "m-", lw=0.6)
            ax.axhline(0.9, color="grey", lw=0.5, ls="--")
            ax.axvline(0.9, color="grey", lw=0.5, ls="--")
            ax.set_title(f"{wl}, cache {frac:.3g} of docs", fontsize=8)
            ax.set_xlim(0.2, 1.02)
            spans = [s["vs_lpm_range"] for s in pts if s.get("vs_lpm_range")]
            ax.set_ylim(
                min([0.4] + [lo - 0.04 for lo, _ in spans]),
                max([1.04] + [hi + 0.04 for _, hi in spans]),
            )
            ax.tick_params(labelsize=7)
            if j == 0:
                ax.set_ylabel("output tok/s / LPM's", fontsize=8)
            if i == len(names) - 1:
                ax.set_xlabel("Jain (backlogged window)", fontsize=8)
    handles = [
        plt.Line2D([], [], color=c, marker=m, ls="", label=lab)
        for c, m, lab in (
            ("k", "x", "vLLM FCFS"),
            ("b", "s", "VTC"),
            ("r", "^", "LPM"),
            ("g", "*", "fair oracle"),
            ("k", "D", "DLPM as shipped"),
            ("y", "D", "DLPM auto, paper's rule"),
            ("c", "D", "DLPM auto, scale xS"),
            ("m", "o", "DLPM, fixed quantum"),
            ("C1", "P", "DLPM strict credit"),
        )
    ]
    fig.legend(handles=handles, loc="lower center", ncol=9, fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _dlpm_quantum(policy: str) -> tuple[float | str, float]:
    """``dlpm@Q``'s quantum and ``quantum_scale``: ``(Q, 0)`` for a number,
    ``("auto", 1)`` for ``auto`` (the scale these points were first
    measured at), ``("auto", S)`` for ``xS``."""
    q = policy.split("@", 1)[1]
    if q.startswith("x"):  # the automatic quantum at this scale
        return "auto", float(q[1:])
    return ("auto", 1.0) if q == "auto" else (float(q), 0.0)


def _q(policy: str) -> float:
    """``dlpm@Q``'s fixed quantum (inf where it is automatic)."""
    q = _dlpm_quantum(policy)[0]
    return q if isinstance(q, float) else float("inf")


def main(argv: list[str] | None = None) -> int:
    """``python -m fairq.enginebench.frontier``: run the sweep, print the
    table, write ``--json`` / ``--plot``."""
    from fairq.cliargs import plot_file

    p = argparse.ArgumentParser(prog="python -m fairq.enginebench.frontier", description=__doc__)
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="of " + ", ".join(WORKLOADS))
    p.add_argument("--cache", default="0.25,0.333,0.5,1", help="fractions of the docs' blocks")
    p.add_argument("--quanta", default="auto,512,1024,2048,4096,8192", help="DLPM's quanta")
    p.add_argument(
        "--strict-quanta",
        default="",
        help="DLPM's quanta with strict credit (strict_credit, ALGORITHMS.md §6; default none)",
    )
    p.add_argument("--policies", default="fifo,vtc,lpm,oracle", help="besides DLPM's")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None, type=plot_file)
    p.add_argument(
        "--server-json",
        default=None,
        help="comma-separated `fairq engine-bench --engine vllm-server --json` runs on the "
        "docs4 shape (one cache size each): summarize and plot them as frontier points "
        "(no runs)",
    )
    p.add_argument(
        "--from-json",
        default=None,
        help="comma-separated --json files of earlier runs: summarize them together "
        "(no runs; --json then writes them as one)",
    )
    a = p.parse_args(argv)
    import json

    commands = [" ".join(["python -m fairq.enginebench.frontier", *(argv or sys.argv[1:])])]
    if a.server_json:
        docs = []
        for path in a.server_json.split(","):
            with open(path) as f:
                docs.append(json.load(f))
        rows, commands = server_points(docs), [d["command"] for d in docs]
    elif a.from_json:
        rows, commands = [], []
        for path in a.from_json.split(","):
            with open(path) as f:
                doc = json.load(f)
            rows += doc["points"]
            commands += doc["commands"]
    else:
        names = [w for w in a.workloads.split(",") if w]
        for n in names:
            if n not in WORKLOADS:
                p.error(f"--workloads: {n!r} is not one of {', '.join(WORKLOADS)}")
        policies = [x for x in a.policies.split(",") if x]
        policies += [f"dlpm@{q}" for q in a.quanta.split(",") if q]
        policies += [f"dlpm-strict@{q}" for q in a.strict_quanta.split(",") if q]
        fracs = [float(x) for x in a.cache.split(",") if x]
        rows = sweep(names, fracs, policies, list(range(a.seeds)))
    summary = summarize(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"commands": commands, "points": rows, "summary": summary}, f, indent=1)
    print(headline(summary))
    print()
    print(table(summary))
    if a.plot:
        plot(summary, a.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
