"""Compare two ``fairq simulate --paper --json`` runs cell by cell: the DLPM
runs of the second (``--quantum auto``) against the same runs of the first
(the paper's fixed Q_u). Prints a summary and a markdown table.

    python quantum_compare.py paper.json paper_auto.json
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any


def compare(fixed: list[dict[str, Any]], auto: list[dict[str, Any]]) -> str:
    """The summary and the per-cell table (the runs must be the same plan)."""
    rows, service, latency = [], [], []
    jain: dict[str, list[tuple[float, float]]] = {"jain_client": [], "jain_cost": []}
    for x, y in zip(fixed, auto, strict=True):
        if (x["workload"], x["scheduler"], x["workers"]) != (
            y["workload"],
            y["scheduler"],
            y["workers"],
        ):
            raise ValueError("the two runs are not the same plan")
        if y.get("user_quantum") != "auto":
            continue
        lk = "ttft_p99_s" if x["workload"].startswith("qa") else "program_p99_s"
        s, lat = y["service_tok_s"] / x["service_tok_s"], y[lk] / x[lk]
        service.append(s)
        latency.append(lat)
        for key, pairs in jain.items():
            if x[key] and y[key]:
                pairs.append((x[key], y[key]))
        rows.append(
            f"| {x.get('tag', '')} | {x['workload']} | {x['workers']} | {x['user_quantum']:g} | "
            f"{y.get('largest_quantum', 0):g} | {s:.3f} | {x['cache_hit']:.2f} / "
            f"{y['cache_hit']:.2f} | {x['jain_client'] or 0:.3f} / {y['jain_client'] or 0:.3f} | "
            f"{x['jain_cost'] or 0:.3f} / {y['jain_cost'] or 0:.3f} | {lat:.3f} |"
        )
    g = statistics.geometric_mean
    mean = statistics.mean
    out = [
        f"{len(service)} DLPM cells. Service rate auto / fixed: geometric mean {g(service):.3f}, "
        f"lowest {min(service):.3f}, highest {max(service):.3f}. p99 latency auto / fixed: "
        f"geometric mean {g(latency):.3f}, highest {max(latency):.3f}. Mean Jain (client "
        f"view) fixed {mean(p[0] for p in jain['jain_client']):.3f}, auto "
        f"{mean(p[1] for p in jain['jain_client']):.3f}; (cost) fixed "
        f"{mean(p[0] for p in jain['jain_cost']):.3f}, auto "
        f"{mean(p[1] for p in jain['jain_cost']):.3f}.",
        "",
        "| figure | workload | workers | paper's Q_u | auto Q* | service rate auto/fixed | "
        "cache hit fixed / auto | Jain client fixed / auto | Jain cost fixed / auto | "
        "p99 latency auto/fixed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    fixed, auto = (json.load(open(p))["results"] for p in argv[1:3])
    print(compare(fixed, auto), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
