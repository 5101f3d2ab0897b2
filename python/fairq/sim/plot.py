"""Matplotlib figures: per-client service and response time over time (the
paper's Figures 8 and 9) and the quantum sweeps (Figures 1 and 10).

Panels that are compared share their axes; each figure has one legend and a
title naming the workload and worker count it shows.
"""

from __future__ import annotations

from typing import Any

#: quanta at or above this stand for infinity (fairq.DLPM needs a finite one)
INF_QUANTUM = 1e12


def workers_text(n: int) -> str:
    """``1 worker``, ``4 workers``."""
    return f"{n} worker" + ("" if n == 1 else "s")


def _plt() -> Any:
    from fairq.extras import require

    require("sim", what="fairq.sim.plot", modules=("matplotlib",))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_results(
    results: list[dict[str, Any]],
    path: str,
    *,
    sweep: bool = False,
    workload: str | None = None,
    workers: int | None = None,
) -> None:
    """Write the comparison (for ``workload`` on ``workers``; see
    :func:`plot_timelines`) or the sweep figure to ``path``."""
    if sweep:
        plot_sweep(results, path)
    else:
        plot_timelines(results, path, workload=workload, workers=workers)


def _client_labels(results: list[dict[str, Any]]) -> dict[str, str]:
    bad = {c for r in results for c in r.get("misbehaving", [])}
    return {c: f"{c} (misbehaving)" if c in bad else c for r in results for c in r["per_client"]}


def plot_timelines(
    results: list[dict[str, Any]],
    path: str,
    *,
    workload: str | None = None,
    workers: int | None = None,
) -> None:
    """One column per scheduler of ``workload`` on ``workers`` workers
    (default: Tree-of-Thoughts when present, else the first workload; the
    largest worker count): top row response time of finished requests by
    finish time, bottom row service rate (input + 2 x output tokens/s) per
    client. All panels share the time axis, each row its y axis."""
    plt = _plt()
    if not results:
        raise ValueError("no results to plot")
    names = [r["workload"] for r in results]
    # Figure 9 is Tree-of-Thoughts on 4 workers: prefer it when present.
    wl = workload or next((n for n in names if n.startswith("tot")), names[0])
    if wl not in names:
        raise ValueError(
            f"no results for workload {wl!r} (have: {', '.join(dict.fromkeys(names))})"
        )
    wmax = workers or max(r["workers"] for r in results if r["workload"] == wl)
    sel = [
        r
        for r in results
        if r["workload"] == wl and r["workers"] == wmax and "response" in r.get("timeline", {})
    ]
    if not sel:
        raise ValueError(f"no timelines for {wl} on {workers_text(wmax)} (run with --plot)")
    labels = _client_labels(sel)
    clients = list(labels)
    color = {c: f"C{i % 10}" for i, c in enumerate(clients)}
    fig, axes = plt.subplots(
        2,
        len(sel),
        figsize=(3.6 * len(sel) + 1.0, 6.4),
        squeeze=False,
        sharex=True,
        sharey="row",
    )
    for j, r in enumerate(sel):
        tl = r["timeline"]
        ax_r, ax_s = axes[0][j], axes[1][j]
        for c, pts in tl["response"].items():
            if pts:
                xs, ys = zip(*pts, strict=False)
                ax_r.plot(xs, ys, ".", ms=2, color=color[c], rasterized=True)
        for c, rate in tl["service_rate"].items():
            ax_s.plot(tl["t"], rate, color=color[c], lw=1.2)
        ax_r.set_title(r["scheduler"])
        ax_s.set_xlabel("time (s)")
        ax_r.grid(alpha=0.3)
        ax_s.grid(alpha=0.3)
    for row in axes:  # once all panels are drawn: the shared limits cover them all
        row[0].set_ylim(bottom=0)
    axes[0][0].set_ylabel("response time (s)")
    axes[1][0].set_ylabel("service (tok/s)")
    handles = [
        plt.Line2D([], [], color=color[c], marker="o", ms=5, lw=1.2, label=labels[c])
        for c in clients
    ]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False)
    fig.suptitle(
        f"{wl} on {workers_text(wmax)}: per-client response time of finished requests (top) and "
        "service rate, input + 2 x output tokens/s (bottom)"
    )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _quantum_label(q: float) -> str:
    if q >= INF_QUANTUM:
        return "inf"
    return f"{q / 1000:g}k" if q >= 1000 else f"{q:g}"


def plot_sweep(results: list[dict[str, Any]], path: str) -> None:
    """Service rate (solid, left axis from 0) and Jain's index (dashed and
    dotted, right axis 0-1) against DLPM's ``Q_u`` on 1 worker and D2LPM's
    ``Q_w`` on several, with the baselines as horizontal lines; each panel
    states the service rate's range so small changes are not mistaken for
    large ones."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    legend: dict[str, Any] = {}
    baseline_color: dict[str, str] = {}
    workload = ""
    for ax, tag, qkey, name, who in (
        (axes[0], "Q_u", "user_quantum", "DLPM's Q_u", "DLPM"),
        (axes[1], "Q_w", "worker_quantum", "D2LPM's Q_w", "D2LPM+DLPM"),
    ):
        rs = [r for r in results if r.get("tag") == tag]
        pts = [r for r in rs if qkey in r and r["policy"] == "dlpm"]
        if not rs:
            ax.set_visible(False)
            continue
        workload = rs[0]["workload"]
        qs = [float(r[qkey]) for r in pts]
        finite = [q for q in qs if q < INF_QUANTUM]
        inf_x = (max(finite) * 4) if finite else 1.0
        xs = [q if q < INF_QUANTUM else inf_x for q in qs]
        service = [r["service_tok_s"] for r in pts]
        (h,) = ax.plot(xs, service, "o-", color="C0", label="service tok/s (DLPM / D2LPM)")
        legend.setdefault(h.get_label(), h)
        ax2 = ax.twinx()
        (h,) = ax2.plot(xs, [r["jain_client"] for r in pts], "s--", color="C3")
        h.set_label("Jain (client), right axis")
        legend.setdefault(h.get_label(), h)
        (h,) = ax2.plot(xs, [r["jain_cost"] for r in pts], "^:", color="C2")
        h.set_label("Jain (cost), right axis")
        legend.setdefault(h.get_label(), h)
        ax2.set_ylim(0, 1.05)
        ax2.set_ylabel("Jain's index")
        base = [r for r in rs if r not in pts]
        for r in base:
            c = baseline_color.setdefault(r["scheduler"], f"C{4 + len(baseline_color)}")
            h = ax.axhline(r["service_tok_s"], color=c, lw=1.0, label=f"{r['scheduler']} service")
            legend.setdefault(h.get_label(), h)
        ax.set_xscale("log")
        ax.set_xticks(xs, [_quantum_label(q) for q in qs])
        ax.minorticks_off()
        every = service + [r["service_tok_s"] for r in base]
        ax.set_ylim(0, max(every) * 1.12 if every else 1.0)
        ax.set_ylabel("service tok/s (axis from 0)")
        ax.set_xlabel(f"{name} (tokens of credit per refill)")
        ax.grid(alpha=0.3)
        if service:
            lo, hi = min(service), max(service)
            ax2.text(  # on the twin axes, so no line is drawn over it
                0.02,
                0.03,
                f"{who} service {lo:,.0f}-{hi:,.0f} tok/s (spread {(hi - lo) / hi:.1%})",
                transform=ax2.transAxes,
                va="bottom",
                fontsize=8,
                bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"},
            )
        w = pts[0]["workers"] if pts else rs[0]["workers"]
        ax.set_title(f"{name}, {workers_text(w)}")
    fig.legend(
        handles=list(legend.values()),
        loc="lower center",
        ncol=min(4, len(legend)),
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(f"{workload}: quantum sweeps (service rate and fairness against the quantum)")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: plot_routers' panels: (result key, axis label)
ROUTER_PANELS = (
    ("jain_cost", "Jain (cost), backlogged"),
    ("jain_client", "Jain (client), backlogged"),
    ("max_gap_cost", "max service gap (cost)"),
    ("cache_hit", "cache hit rate"),
    ("service_tok_s", "service tok/s"),
)


def _finite_staleness(t: float, results: list[dict[str, Any]]) -> float:
    """Where a staleness sits on the x axis: ``inf`` (no shared view) at
    twice the largest finite one."""
    if t < float("inf"):
        return t
    finite = [r["view_staleness"] for r in results if r["view_staleness"] < float("inf")]
    return 2 * max(finite, default=1.0) or 1.0


def plot_routers(results: list[dict[str, Any]], path: str) -> None:
    """Fairness, hit rate and service against the view's staleness: one row
    per (workload, workers, assignment), one line per number of routers
    (colour by N), the one-router run dotted; "none" on the x axis is no
    shared view (``fairq simulate --routers ... --view-staleness ... --plot``)."""
    plt = _plt()
    multi = [r for r in results if r["workers"] > 1]
    rows = sorted(
        {(r["workload"], r["workers"], r["router_assign"]) for r in multi if r["routers"] > 1}
    )
    fig, axes = plt.subplots(
        len(rows),
        len(ROUTER_PANELS),
        figsize=(3.4 * len(ROUTER_PANELS), 2.9 * len(rows) + 0.6),
        squeeze=False,
    )
    all_n = sorted({r["routers"] for r in multi if r["routers"] > 1})
    cmap = plt.get_cmap("viridis")
    colour = {n: cmap(i / max(1, len(all_n) - 1) * 0.9) for i, n in enumerate(all_n)}
    for i, (wl, w, a) in enumerate(rows):
        mine = [r for r in multi if r["workload"] == wl and r["workers"] == w]
        single = [r for r in mine if r["routers"] == 1 and r["view_staleness"] == 0]
        fleet = [r for r in mine if r["routers"] > 1 and r["router_assign"] == a]
        ts = sorted({r["view_staleness"] for r in fleet} | {0.0})
        xs_of = {t: _finite_staleness(t, mine) for t in ts}
        for j, (key, label) in enumerate(ROUTER_PANELS):
            ax = axes[i][j]
            for n in sorted({r["routers"] for r in fleet}):
                pts = sorted(
                    (r["view_staleness"], r[key])
                    for r in fleet + single
                    if r["routers"] == n or r in single
                )
                xs = [xs_of[p[0]] for p in pts]
                ys = [float("nan") if p[1] is None else p[1] for p in pts]
                ax.plot(xs, ys, marker="o", ms=3, color=colour[n], label=f"{n} routers")
            if single and single[0][key] is not None:
                ax.axhline(single[0][key], color="k", lw=0.8, ls=":", label="one router")
            ax.set_xscale("symlog", linthresh=0.1)
            ax.set_xlim(left=0)
            ax.set_xticks([xs_of[t] for t in ts])
            ax.set_xticklabels([f"{t:g}" if t < float("inf") else "none" for t in ts], fontsize=7)
            ax.set_xlabel("view staleness T (s)", fontsize=8)
            ax.set_ylabel(label, fontsize=8)
            ax.set_title(f"{wl}, {workers_text(w)}, assign {a}", fontsize=8)
            ax.grid(alpha=0.3)
    handles: dict[str, Any] = {}
    for row in axes:
        for ax in row:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                handles.setdefault(lab, h)
    order = sorted(
        handles, key=lambda s: (s == "one router", int(s.split()[0]) if s[0].isdigit() else 0)
    )
    fig.legend([handles[k] for k in order], order, loc="upper center", ncol=len(order), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (2.9 * len(rows) + 0.6)))
    fig.savefig(path, dpi=100)
    plt.close(fig)
