"""Matplotlib figures: per-client service and response time over time (the
paper's Figures 8 and 9) and the quantum sweeps (Figures 1 and 10)."""

from __future__ import annotations

import math
from typing import Any


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_results(results: list[dict[str, Any]], path: str, *, sweep: bool = False) -> None:
    """Write the comparison (or sweep) figure to ``path``."""
    if sweep:
        plot_sweep(results, path)
    else:
        plot_timelines(results, path)


def plot_timelines(results: list[dict[str, Any]], path: str) -> None:
    """For the first workload and the largest worker count: one column per
    scheduler; top row response time of finished requests by finish time,
    bottom row service rate (input + 2 x output tokens/s) per client."""
    plt = _plt()
    if not results:
        raise ValueError("no results to plot")
    wl = results[0]["workload"]
    wmax = max(r["workers"] for r in results if r["workload"] == wl)
    sel = [r for r in results if r["workload"] == wl and r["workers"] == wmax and "timeline" in r]
    if not sel:
        raise ValueError("results carry no timelines (run with --plot)")
    fig, axes = plt.subplots(2, len(sel), figsize=(4.2 * len(sel), 6.4), squeeze=False)
    for j, r in enumerate(sel):
        tl = r["timeline"]
        ax_r, ax_s = axes[0][j], axes[1][j]
        for c, pts in tl["response"].items():
            if pts:
                xs, ys = zip(*pts, strict=False)
                ax_r.plot(xs, ys, ".", ms=2, label=c)
        for c, rate in tl["service_rate"].items():
            ax_s.plot(tl["t"], rate, label=c)
        ax_r.set_title(f"{r['label']}")
        ax_r.set_ylabel("response time (s)")
        ax_s.set_ylabel("service (tok/s)")
        ax_s.set_xlabel("time (s)")
        if j == 0:
            ax_s.legend(fontsize=7)
    fig.suptitle(f"{wl}, {wmax} worker(s): per-client response time and service over time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sweep(results: list[dict[str, Any]], path: str) -> None:
    """Throughput (solid) and Jain's index (dashed) against Q_u and Q_w."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, tag, qkey, name in (
        (axes[0], "Q_u", "user_quantum", "DLPM Q_u (1 worker)"),
        (axes[1], "Q_w", "worker_quantum", "D2LPM Q_w"),
    ):
        rs = [r for r in results if r.get("tag") == tag]
        pts = [r for r in rs if qkey in r and r["policy"] == "dlpm"]
        finite = [r[qkey] for r in pts if math.isfinite(r[qkey])]
        inf_x = (max(finite) * 4) if finite else 1.0
        xs = [r[qkey] if math.isfinite(r[qkey]) else inf_x for r in pts]
        ax.plot(xs, [r["throughput"] for r in pts], "o-", label="throughput")
        ax2 = ax.twinx()
        ax2.plot(xs, [r["jain"] for r in pts], "s--", color="C3", label="Jain (client)")
        ax2.plot(xs, [r["jain_actual"] for r in pts], "^:", color="C2", label="Jain (cost)")
        ax2.set_ylim(0, 1.05)
        ax2.set_ylabel("Jain's index")
        for k, r in enumerate(r for r in rs if r not in pts):
            ax.axhline(r["throughput"], color=f"C{4 + k}", lw=0.8, label=r["label"])
        ax.set_xscale("log")
        ax.set_xlabel(f"{name} (rightmost point: inf)")
        ax.set_ylabel("service tok/s")
        lines = ax.get_legend_handles_labels()
        lines2 = ax2.get_legend_handles_labels()
        ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="lower right")
        if rs:
            ax.set_title(f"{rs[0]['workload']}: {name}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
