#!/usr/bin/env bash
# Regenerate the result files under docs/results/ and the tables that
# docs/RESULTS.md and docs/BENCHMARKS.md quote from them (docs/results/splice.py).
#
#   docs/results/regenerate.sh            # sim + bench (+ engine when torch is installed)
#   docs/results/regenerate.sh sim        # the simulator comparison and sweeps (~1 min on 2 cores)
#   docs/results/regenerate.sh paper      # fairq simulate --paper: the paper's claims (~2.5 min)
#   docs/results/regenerate.sh routers    # N routers with a stale shared view, simulated (~9 min on 2 cores)
#   docs/results/regenerate.sh bench      # fairq bench, every suite (~10 min on 2 cores)
#   docs/results/regenerate.sh engine     # fairq engine-bench on CPU (needs fairq[engine], ~1 min)
#   docs/results/regenerate.sh vllm       # fairq engine-bench --engine vllm (needs vLLM 0.33, ~3 min)
#   docs/results/regenerate.sh reasoning  # fairq engine-bench --engine vllm --workload reasoning (needs vLLM 0.33, ~2 min)
#   docs/results/regenerate.sh vllm-server  # real vLLM servers over HTTP (FAIRQ_VLLM_SERVER_PYTHON: vLLM's CPU build, ~25 min)
#   docs/results/regenerate.sh overload   # 20,000-request flood against a vLLM server with fairq's front door (FAIRQ_VLLM_SERVER_PYTHON: vLLM's CPU build, ~8 min)
#   docs/results/regenerate.sh ray-vllm   # vLLM replicas on Ray Serve behind a router (FAIRQ_VLLM_SERVER_PYTHON: vLLM's CPU build + .ci/ray-vllm-requirements.txt, ~25 min)
#   docs/results/regenerate.sh ray-vllm-ingress  # 1, 2 and 4 ingress routers with and without the shared view, three runs each, and a router killed (FAIRQ_VLLM_SERVER_PYTHON as ray-vllm, ~60 min)
#   docs/results/regenerate.sh traces     # Mooncake's production traces: the simulator at full scale, vLLM in-process, the vLLM CPU server and Ray Serve replicas (FAIRQ_VLLM_SERVER_PYTHON, ~30 min)
#   docs/results/regenerate.sh step-fit   # vLLM's step times in-process, the step model fitted to them (FAIRQ_VLLM_SERVER_PYTHON: vLLM's CPU build, ~2 min)
#   docs/results/regenerate.sh wheel      # .ci/build-wheel: the auditwheel report, sizes (~3 min)
#   docs/results/regenerate.sh gpu        # transformers' 1B model on one GPU: every policy, one trace (~6 min on an H100; writes $GPU_OUT, default gpu/latest; docs/results/gpu/README.md)
#   docs/results/regenerate.sh gpu-strict # the same GPU: DLPM's default (strict credit) against the one before issue 35, docs and Mooncake (~4 min on an H100)
#   docs/results/regenerate.sh quantum    # DLPM's automatic quantum against fixed ones (~8 min; quantum_auto.md)
#   docs/results/regenerate.sh frontier   # throughput against Jain under cache pressure, vLLM 0.33 in-process (~15 min; frontier.md), and on the real server with FAIRQ_VLLM_SERVER_PYTHON (~1 h more)
#   docs/results/regenerate.sh splice     # only re-copy the tables into the docs
#
# Needs an installed fairq (`pip install .`). Run it on a quiet machine: the
# benchmark ratios are measured, and the text around the tables in docs/ states
# the numbers of the last run, so re-read it after a rerun.
set -euo pipefail
cd "$(dirname "$0")"
parts=("$@")
if [ ${#parts[@]} -eq 0 ]; then
  parts=(sim paper bench)
  if python -c 'import torch, transformers' 2>/dev/null; then parts+=(engine); fi
fi
for part in "${parts[@]}"; do
  case "$part" in
    sim)
      # the default comparison's text in docs/RESULTS.md quotes the oracle
      # memory model's numbers (the default before --memory estimate)
      fairq simulate --memory oracle --no-progress --json comparison.json \
        --plot comparison.png | tee comparison.md
      fairq simulate --memory oracle --sweep quantum --workload tot-S2 --no-progress \
        --json sweep_quantum_tot.json --plot sweep_quantum_tot.png | tee sweep_quantum_tot.md
      fairq simulate --memory oracle --sweep quantum --no-progress \
        --json sweep_quantum.json --plot sweep_quantum.png | tee sweep_quantum.md
      fairq simulate --memory oracle --workload chat --workers 2 --no-progress \
        --json chat.json --plot chat.png | tee chat.md
      ;;
    routers)
      # docs/results/routers.md: N routers over W workers, the view T seconds old
      fairq simulate --workload qa-fleet --workers 16 --dispatch d2lpm --policy dlpm \
        --routers 2 --routers 4 --routers 8 --routers 16 --routers 32 --routers 64 \
        --view-staleness 0 --view-staleness 0.1 --view-staleness 0.5 --view-staleness 1 \
        --view-staleness 2 --view-staleness 5 --view-staleness inf \
        --router-assign rr --router-assign tenant --no-progress \
        --json routers_w16.json --plot routers_w16.png | tee routers_w16.md
      fairq simulate --workload qa-fleet --workers 64 --dispatch d2lpm --policy dlpm \
        --routers 4 --routers 16 --routers 64 --view-staleness 0.02 --view-staleness 0.1 \
        --view-staleness 0.5 --view-staleness 2 --view-staleness inf \
        --router-assign rr --router-assign tenant --no-progress \
        --json routers_w64.json --plot routers_w64.png | tee routers_w64.md
      # where the locality goes: each run's placements against the held prefix (~15 s)
      fairq simulate --workload qa-fleet --workers 16 --dispatch d2lpm --policy dlpm \
        --routers 2 --routers 4 --routers 16 --view-staleness 0 --view-staleness 0.5 \
        --view-staleness 2 --view-staleness inf --router-assign rr --router-assign tenant \
        --no-progress --json routers_placements_w16.json
      # the same with the agreed first placement (hub_placement, slack 0 and 4)
      for k in 0 4; do
        fairq simulate --workload qa-fleet --workers 16 --dispatch d2lpm --policy dlpm \
          --routers 2 --routers 4 --routers 16 --view-staleness 0 --view-staleness 0.5 \
          --view-staleness 2 --view-staleness inf --router-assign rr --router-assign tenant \
          --hub-placement --hub-placement-slack "$k" --no-progress \
          --json "routers_hub_placement_w16_s$k.json"
      done
      # the same with D2LPM's match threshold and credit spread (~15 s)
      fairq simulate --workload qa-fleet --workers 16 --dispatch d2lpm --policy dlpm \
        --routers 2 --routers 4 --routers 16 --view-staleness 0 --view-staleness 0.5 \
        --view-staleness 2 --view-staleness inf --router-assign rr --router-assign tenant \
        --match-threshold 0.5 --spread-by-credit --no-progress --json routers_spread_w16.json
      # the agreed placement: D2LPM's placement_slack 0, 2, 4, 8 (~2 min)
      for k in 0 2 4 8; do
        fairq simulate --workload qa-fleet --workers 16 --dispatch d2lpm --policy dlpm \
          --routers 4 --routers 16 --routers 64 --view-staleness 0.1 --view-staleness 0.5 \
          --view-staleness 2 --view-staleness inf --router-assign rr --placement-slack "$k" \
          --no-progress --json "routers_slack_w16_s$k.json"
      done
      # 256 workers, one configuration (~3 min)
      fairq simulate --workload qa-fleet --workers 256 --dispatch d2lpm --policy dlpm \
        --routers 16 --view-staleness 0.1 --router-assign rr --no-progress \
        --json routers_w256_r16.json
      fairq simulate --workload qa-fleet --workers 256 --dispatch d2lpm --policy dlpm \
        --routers 16 --view-staleness 0.1 --router-assign rr --placement-slack 8 \
        --no-progress --json routers_w256_r16_slack8.json
      ;;
    paper)
      fairq simulate --paper --no-progress --json paper.json | tee paper.md
      ;;
    bench)
      fairq bench --json bench.json | tee bench.md
      ;;
    engine)
      fairq engine-bench --model small --requests-per-client 8 --max-new-tokens 32 \
        --quantum 128 --json engine-bench-cpu-small.json | tee engine-bench-cpu-small.md
      ;;
    vllm)
      fairq engine-bench --engine vllm --policies fifo,fcfs,vtc,lpm,dlpm \
        --requests-per-client 24 --prefix-len 512 --suffix-len 32 --max-new-tokens 16 \
        --num-blocks 80 --max-batch-tokens 512 --max-requests-per-batch 16 \
        --quantum 1024 --gap 0.02 --waiting 10000 --json vllm.json | tee vllm-tables.md
      ;;
    reasoning)
      fairq engine-bench --engine vllm --workload reasoning --seeds 5 \
        --policies vllm-fcfs,dual,dual+dlpm,dual+vtc,dlpm,vtc \
        --json reasoning.json | tee reasoning-tables.md
      ;;
    overload)
      # the table of overload.md (its text quotes this run's numbers)
      python -m fairq.enginebench.overload --flood 20000 --duration 120 --rate 1 \
        --json overload.json | tee overload-table.md
      ;;
    vllm-server)
      fairq engine-bench --engine vllm-server --model small --policies vllm,fcfs,vtc,lpm,dlpm \
        --runs 2 --requests-per-client 12 --flood-factor 4 --prefix-len 512 --suffix-len 16 \
        --max-new-tokens 32 --gap 0.05 --quantum 512 --max-model-len 1024 \
        --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 20" \
        --backlog 1000,10000 --json vllm_server.json --plot vllm_server.png | tee vllm_server-tables.md
      # several documents per tenant: where DLPM has locality to win (item 6)
      fairq engine-bench --engine vllm-server --model small --policies lpm,dlpm --runs 3 \
        --requests-per-client 24 --flood-factor 4 --prefix-len 512 --suffix-len 16 \
        --docs-per-client 4 --max-new-tokens 32 --gap 0.05 --quantum 1536 --max-model-len 1024 \
        --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 20" \
        --json vllm_server_docs.json
      ;;
    ray-vllm)
      fairq engine-bench --engine ray-vllm --replicas 2 --clients 6 --requests-per-client 16 \
        --flood-factor 4 --docs-per-client 2 --prefix-len 384 --system-len 128 --suffix-len 16 \
        --max-new-tokens 32 --gap 0.25 --flood-gap 0.02 --quantum 512 \
        --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 32" \
        --json ray_vllm.json --plot ray_vllm.png | tee ray_vllm-tables.md
      # a vLLM replica killed 10 s into a two-minute run (DLPM inside, its state file)
      fairq engine-bench --engine ray-vllm --configs d2lpm-dlpm --replicas 2 --clients 6 \
        --requests-per-client 60 --flood-factor 4 --docs-per-client 2 --prefix-len 384 \
        --system-len 128 --suffix-len 16 --max-new-tokens 32 --gap 2.0 --flood-gap 0.5 \
        --quantum 512 --kill-after-s 10 \
        --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 32" \
        --json ray_vllm_fault.json
      # ... and under backlog, fairness over time around the kill (a longer run, ~7 min)
      fairq engine-bench --engine ray-vllm --configs d2lpm-dlpm --replicas 2 --clients 6 \
        --requests-per-client 200 --flood-factor 2 --docs-per-client 2 --prefix-len 384 \
        --system-len 128 --suffix-len 16 --max-new-tokens 128 --gap 1.25 --flood-gap 0.625 \
        --quantum 512 --kill-after-s 60 --health-check-timeout-s 60 \
        --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 32" \
        --json ray_vllm_fault_backlog.json --plot ray_vllm_fault_backlog.png
      # two ingress routers
      fairq engine-bench --engine ray-vllm --configs d2lpm-dlpm --ingress 2 --replicas 2 \
        --clients 6 --requests-per-client 16 --flood-factor 4 --docs-per-client 2 \
        --prefix-len 384 --system-len 128 --suffix-len 16 --max-new-tokens 32 --gap 0.25 \
        --flood-gap 0.02 --quantum 512 \
        --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 32" \
        --json ray_vllm_ingress2.json
      # ... each tenant through one router (Ray's session router on the ingress), twice
      fairq engine-bench --engine ray-vllm --configs d2lpm-dlpm,d2lpm-dlpm --ingress 2 \
        --ingress-affinity --replicas 2 --clients 6 --requests-per-client 16 --flood-factor 4 \
        --docs-per-client 2 --prefix-len 384 --system-len 128 --suffix-len 16 \
        --max-new-tokens 32 --gap 0.25 --flood-gap 0.02 --quantum 512 \
        --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 32" \
        --json ray_vllm_ingress2_affinity.json
      # (ray_vllm_ingress1_repeat.json and ray_vllm_ingress2_repeat.json: the main
      # command's d2lpm-dlpm and the two-router command, each with
      # --configs d2lpm-dlpm,d2lpm-dlpm)
      # ... with the remedy: each of the 2 routers at worker_quantum = Q_w / 2
      fairq engine-bench --engine ray-vllm --configs d2lpm-dlpm --ingress 2 --worker-quantum 2048 \
        --replicas 2 --clients 6 --requests-per-client 16 --flood-factor 4 --docs-per-client 2 \
        --prefix-len 384 --system-len 128 --suffix-len 16 --max-new-tokens 32 --gap 0.25 \
        --flood-gap 0.02 --quantum 512 \
        --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 32" \
        --json ray_vllm_ingress2_q2048.json
      ;;
    ray-vllm-ingress)
      # docs/results/ray_vllm.md, "Two and four ingress routers with one shared
      # view": the "Two ingress routers" workload; each run its own deployment,
      # the configurations interleaved so that each round meets the same machine
      ingress_run() {  # OUT.json [flags]
        local out=$1; shift
        fairq engine-bench --engine ray-vllm --configs d2lpm-dlpm --replicas 2 --clients 6 \
          --requests-per-client 16 --flood-factor 4 --docs-per-client 2 --prefix-len 384 \
          --system-len 128 --suffix-len 16 --max-new-tokens 32 --gap 0.25 --flood-gap 0.02 \
          --quantum 512 \
          --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 32" \
          "$@" --json "$out"
      }
      tmp=$(mktemp -d)
      # each row keeps the routers' stats (view ages, placements)
      FAIRQ_RAY_ROUTER_STATS_DIR=$(mktemp -d)
      export FAIRQ_RAY_ROUTER_STATS_DIR
      for run in 1 2 3; do
        ingress_run "$tmp/i1_r$run.json"
        ingress_run "$tmp/i2_r$run.json" --ingress 2
        ingress_run "$tmp/i2_noview_r$run.json" --ingress 2 --no-shared-view
        ingress_run "$tmp/i4_r$run.json" --ingress 4
        ingress_run "$tmp/i4_noview_r$run.json" --ingress 4 --no-shared-view
      done
      # the follow-ups, one run each
      ingress_run "$tmp/i2_period01_r1.json" --ingress 2 --routing-stats-period-s 0.1
      # (the committed affinity runs predate fairq's balanced session router:
      # Ray's ConsistentHashRouter made them; --ingress-affinity now uses fairq's)
      ingress_run "$tmp/i2_affinity_r1.json" --ingress 2 --ingress-affinity
      ingress_run "$tmp/i4_affinity_r1.json" --ingress 4 --ingress-affinity
      ingress_run "$tmp/i2_slack3_r1.json" --ingress 2 --placement-slack 3
      ingress_run "$tmp/i2_slack8_r1.json" --ingress 2 --placement-slack 8
      # one paired round: 1 router, 2 and 4 routers with placement_slack 0 and 3
      for cfg in "i1:" "i2 s0:--ingress 2" "i2 s3:--ingress 2 --placement-slack 3" \
        "i4 s0:--ingress 4" "i4 s3:--ingress 4 --placement-slack 3"; do
        name=${cfg%%:*}
        # shellcheck disable=SC2086
        ingress_run "$tmp/round_${name// /_}.json" ${cfg#*:}
      done
      python -c 'import json, sys
names = ["1", "2, k=0", "2, k=3", "4, k=0", "4, k=3"]
runs = {n: json.load(open(f)) for n, f in zip(names, sys.argv[1:])}
json.dump({"configuration": "one round: 1 router, 2 and 4 routers with placement_slack 0 and 3",
           "runs": runs}, open("ray_vllm_views_slack_round.json", "w"))' \
        "$tmp/round_i1.json" "$tmp/round_i2_s0.json" "$tmp/round_i2_s3.json" \
        "$tmp/round_i4_s0.json" "$tmp/round_i4_s3.json"
      collect() {  # NAME CFG...: each CFG's three runs -> ray_vllm_NAME_CFG.json
        local name=$1; shift
        for cfg in "$@"; do
          python -c 'import json, sys
runs = [json.load(open(f)) for f in sys.argv[3:]]
json.dump({"configuration": sys.argv[2], "runs": runs}, open(f"ray_vllm_{sys.argv[1]}_{sys.argv[2]}.json", "w"))' \
            "$name" "$cfg" "$tmp/${name}_${cfg}"_r*.json
        done
      }
      paired_rounds() {  # NAME FLAGS...: three paired rounds of 1 router, and 2 and 4
        # routers with FLAGS -> ray_vllm_NAME_i1.json, _i2.json, _i4.json
        local name=$1; shift
        for run in 1 2 3; do
          ingress_run "$tmp/${name}_i1_r$run.json"
          ingress_run "$tmp/${name}_i2_r$run.json" --ingress 2 "$@"
          ingress_run "$tmp/${name}_i4_r$run.json" --ingress 4 "$@"
        done
        collect "$name" i1 i2 i4
      }
      # the hub (view_hub)
      paired_rounds hub --view-hub
      # each tenant through one router, balanced (fairq.ray.ingress), with the hub
      paired_rounds balanced --ingress-affinity --view-hub
      # ... and the agreed first placement (hub_placement), each round also
      # running the balanced routers with the hub without it (~45 min)
      for run in 1 2 3; do
        ingress_run "$tmp/placed_i1_r$run.json"
        ingress_run "$tmp/placed_i2p_r$run.json" --ingress 2 --ingress-affinity --hub-placement
        ingress_run "$tmp/placed_i2b_r$run.json" --ingress 2 --ingress-affinity --view-hub
        ingress_run "$tmp/placed_i4p_r$run.json" --ingress 4 --ingress-affinity --hub-placement
        ingress_run "$tmp/placed_i4b_r$run.json" --ingress 4 --ingress-affinity --view-hub
      done
      collect placed i1 i2p i2b i4p i4b
      # a system prompt on one replica: D2LPM's match_threshold and spread_by_credit,
      # one router, and 2 and 4 balanced routers with the hub, all with both (~25 min)
      spread=(--match-threshold 0.5 --spread-by-credit)
      for run in 1 2 3; do
        ingress_run "$tmp/spread_i1_r$run.json" "${spread[@]}"
        ingress_run "$tmp/spread_i2_r$run.json" --ingress 2 --ingress-affinity --view-hub \
          "${spread[@]}"
        ingress_run "$tmp/spread_i4_r$run.json" --ingress 4 --ingress-affinity --view-hub \
          "${spread[@]}"
      done
      collect spread i1 i2 i4
      # ... and with each tenant's requests spread over the routers, one run each
      ingress_run ray_vllm_spreadreq_i2.json --ingress 2 --view-hub "${spread[@]}"
      ingress_run ray_vllm_spreadreq_i4.json --ingress 4 --view-hub "${spread[@]}"
      # where the dispatches went against the held prefixes (the routers' placements)
      ingress_run ray_vllm_placements_i1.json
      ingress_run ray_vllm_placements_i2.json --ingress 2 --view-hub
      for cfg in i1 i2 i2_noview i4 i4_noview i2_affinity i4_affinity i2_period01 \
        i2_slack3 i2_slack8; do
        python -c 'import json, sys
runs = [json.load(open(f)) for f in sys.argv[2:]]
json.dump({"configuration": sys.argv[1], "runs": runs}, open(f"ray_vllm_views_{sys.argv[1]}.json", "w"))' \
          "$cfg" "$tmp/${cfg}"_r*.json
      done
      rm -rf "$tmp"
      # an ingress router killed under backlog (the "Faults under backlog" workload)
      fairq engine-bench --engine ray-vllm --configs d2lpm-dlpm --replicas 2 --clients 6 \
        --requests-per-client 200 --flood-factor 2 --docs-per-client 2 --prefix-len 384 \
        --system-len 128 --suffix-len 16 --max-new-tokens 128 --gap 1.25 --flood-gap 0.625 \
        --quantum 512 --health-check-timeout-s 60 \
        --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 32" \
        --ingress 2 --kill ingress --kill-after-s 100 \
        --json ray_vllm_ingress_kill.json --plot ray_vllm_ingress_kill.png
      ;;
    traces)
      # docs/results/traces.md. The simulator at full scale: the committed 10-minute cuts
      fairq simulate --trace mooncake --preset a100-8b --workers 1 --workers 8 --no-progress \
        --json traces_sim_conversation.json --plot traces_sim_conversation.png \
        --plot-workload trace:mooncake:1 | tee traces_sim_conversation.md
      fairq simulate --trace mooncake-synthetic --preset a100-8b --workers 1 --workers 8 \
        --no-progress --json traces_sim_synthetic.json | tee traces_sim_synthetic.md
      # vLLM 0.33's scheduler in-process (step times simulated): prompts folded to fit
      # its max_model_len 8192 (~5 min)
      tmp=$(mktemp -d)
      fairq trace import mooncake --max-prompt-len 7168 --max-output-len 1024 -o "$tmp/fold8k.jsonl"
      fairq engine-bench --engine vllm --trace "$tmp/fold8k.jsonl" --policies fifo,fcfs,lpm,vtc,dlpm \
        --max-new-tokens 1024 --num-blocks 25000 --max-batch-tokens 4096 \
        --max-requests-per-batch 256 --waiting 0 --quantum 2000 --json traces_vllm.json \
        | tee traces_vllm.md
      rm -rf "$tmp"
      # the real vLLM CPU server, the scaled trace (~6 min)
      fairq engine-bench --engine vllm-server --model small --trace mooncake-small \
        --policies vllm,fcfs,lpm,vtc,dlpm --runs 1 --max-new-tokens 32 --quantum 512 \
        --max-model-len 2048 \
        --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 64" \
        --json traces_vllm_server.json --plot traces_vllm_server.png | tee traces_vllm_server.md
      # two vLLM replicas on Ray Serve behind each router (+ Ray Serve beside vLLM's CPU build, ~9 min)
      fairq engine-bench --engine ray-vllm --replicas 2 --trace mooncake-small \
        --max-new-tokens 32 --quantum auto --max-model-len 2048 \
        --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 64" \
        --json traces_ray_vllm.json | tee traces_ray_vllm.md
      # DLPM inside with today's default and with the one before issue 35
      for v in default x1; do
        set --
        if [ "$v" = x1 ]; then set -- --quantum-scale 1 --no-strict-credit; fi
        fairq engine-bench --engine ray-vllm --configs d2lpm-dlpm --replicas 2 --trace mooncake-small \
          --max-new-tokens 32 --quantum auto "$@" --max-model-len 2048 \
          --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 64" \
          --json "traces_ray_vllm_dlpm_$v.json"
      done
      ;;
    step-fit)
      # the python with vLLM runs the engine in-process; the fitted constants
      # are the presets vllm-cpu-tiny(-roofline) in python/fairq/sim/model.py
      "${FAIRQ_VLLM_SERVER_PYTHON:-python}" -m fairq.enginebench.stepfit --model tiny --reps 5 --rounds 3 \
        --json step_fit.json --md step_fit.md --plot step_fit.png
      # the model in a worker process, as in vLLM's server (docs/RESULTS.md quotes it)
      "${FAIRQ_VLLM_SERVER_PYTHON:-python}" -m fairq.enginebench.stepfit --model tiny --reps 5 --rounds 3 \
        --executor mp --json step_fit_mp.json
      ;;
    wheel)
      tmp=$(mktemp -d)
      ../../.ci/build-wheel "$tmp" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
      {
        echo "# The release wheel"
        echo
        echo "\`.ci/build-wheel OUTDIR\` on $(uname -m) $(uname -s), $(ldd --version | head -1)," \
          "rustc $(rustc --version | cut -d' ' -f2), CPython $(python3 -c 'import platform; print(platform.python_version())')."
        echo
        echo "## auditwheel show"
        echo
        echo '```'
        cat "$tmp/auditwheel.txt"
        echo '```'
        echo
        echo "## .ci/check_dist.py"
        echo
        echo '```'
        python3 ../../.ci/check_dist.py "$tmp"
        echo '```'
        echo
        echo "## Wheel contents"
        echo
        echo '```'
        python3 -m zipfile -l "$tmp"/fairq-*.whl
        echo '```'
      } >wheel.md
      rm -rf "$tmp"
      ;;
    gpu | gpu-strict)
      # One GPU (H100/H200), fairq installed from its wheel with --no-deps next to
      # PyTorch and transformers: docs/results/gpu/README.md. Sized to end inside
      # 8 minutes; each table is written as soon as it is measured.
      out=${GPU_OUT:-gpu/latest}
      mkdir -p "$out"
      {
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
        python3 -c 'import torch, transformers, platform, fairq; print("torch", torch.__version__, "transformers", transformers.__version__, "python", platform.python_version(), "fairq", fairq.__version__)'
        echo "cpus $(nproc)"
      } >"$out/machine.txt"
      # (GPU_MODEL=tiny GPU_DEVICE=cpu: the same commands as a smoke test on a CPU)
      gb=(fairq engine-bench --engine transformers --model "${GPU_MODEL:-1b}" --device "${GPU_DEVICE:-cuda}")
      docs=(--clients 4 --requests-per-client 8 --flood-factor 4 --prefix-len 512
        --docs-per-client 4 --suffix-len 64 --max-new-tokens 32 --num-blocks 160
        --max-batch-tokens 1024 --max-requests-per-batch 8)
      if [ "$part" = gpu-strict ]; then
        # DLPM's default (strict credit, scale 0.8; ALGORITHMS.md section 6,
        # docs/results/frontier.md) against the default before issue 35 (the
        # paper's admission rule, scale 1) on the same two workloads, the
        # baselines in the same run
        "${gb[@]}" --policies lpm,vtc,dlpm "${docs[@]}" --quantum auto \
          --json "$out/transformers_1b_docs.json" | tee "$out/transformers_1b_docs.md"
        "${gb[@]}" --policies dlpm "${docs[@]}" --quantum auto --quantum-scale 1 --no-strict-credit \
          --json "$out/transformers_1b_docs_x1.json" | tee "$out/transformers_1b_docs_x1.md"
        moon=(--trace "${GPU_TRACE:-mooncake-small}" --quantum auto --max-new-tokens 32 --num-blocks 256
          --max-batch-tokens 1024 --max-requests-per-batch 8)
        "${gb[@]}" --policies lpm,dlpm "${moon[@]}" \
          --json "$out/transformers_1b_mooncake.json" | tee "$out/transformers_1b_mooncake.md"
        "${gb[@]}" --policies dlpm "${moon[@]}" --quantum-scale 1 --no-strict-credit \
          --json "$out/transformers_1b_mooncake_x1.json" | tee "$out/transformers_1b_mooncake_x1.md"
        continue
      fi
      # every policy on the H200 run's "docs" workload, DLPM's quantum automatic
      "${gb[@]}" --policies fifo,fcfs,lpm,vtc,dlpm,las "${docs[@]}" --quantum auto \
        --json "$out/transformers_1b_docs.json" | tee "$out/transformers_1b_docs.md"
      # the H200 run's hand-set quantum, for comparison in the same run
      "${gb[@]}" --policies dlpm "${docs[@]}" --quantum 2048 \
        --json "$out/transformers_1b_docs_q2048.json" | tee "$out/transformers_1b_docs_q2048.md"
      # one trace replay: Mooncake's conversation trace, scaled (docs/results/traces.md)
      "${gb[@]}" --policies fifo,fcfs,lpm,vtc,dlpm,las --trace "${GPU_TRACE:-mooncake-small}" --quantum auto \
        --max-new-tokens 32 --num-blocks 256 --max-batch-tokens 1024 --max-requests-per-batch 8 \
        --json "$out/transformers_1b_mooncake.json" | tee "$out/transformers_1b_mooncake.md"
      ;;
    quantum)
      # DLPM's automatic quantum against fixed ones (quantum_auto.md, ~10 min;
      # the engine parts need fairq[engine] and vLLM 0.33). "auto" is the
      # engines' default: scale 0.8 with strict credit (issue 35); "auto_x1"
      # the default before it: scale 1, the paper's admission rule
      fairq simulate --paper --quantum auto --no-progress --json paper_auto.json >paper_auto.md
      python quantum_compare.py paper.json paper_auto.json >quantum_paper.md
      for q in 2048 auto 512 auto_x1; do
        set -- --quantum "$q"
        if [ "$q" = auto_x1 ]; then set -- --quantum auto --quantum-scale 1 --no-strict-credit; fi
        fairq engine-bench --engine transformers --model tiny --policies vtc,dlpm --clients 4 \
          --requests-per-client 8 --flood-factor 4 --prefix-len 512 --suffix-len 64 \
          --max-new-tokens 32 --max-batch-tokens 1024 --max-requests-per-batch 8 \
          "$@" --json "quantum_flood_$q.json" | tee "quantum_flood_$q.md"
        fairq engine-bench --engine transformers --model tiny --policies vtc,dlpm --clients 4 \
          --requests-per-client 8 --flood-factor 4 --prefix-len 512 --docs-per-client 4 \
          --suffix-len 64 --max-new-tokens 32 --num-blocks 160 --max-batch-tokens 1024 \
          --max-requests-per-batch 8 "$@" --json "quantum_docs_$q.json" \
          | tee "quantum_docs_$q.md"
      done
      for q in 1024 512 auto auto_x1; do
        set -- --quantum "$q"
        if [ "$q" = auto_x1 ]; then set -- --quantum auto --quantum-scale 1 --no-strict-credit; fi
        fairq engine-bench --engine vllm --policies dlpm --requests-per-client 24 \
          --prefix-len 512 --suffix-len 32 --max-new-tokens 16 --num-blocks 80 \
          --max-batch-tokens 512 --max-requests-per-batch 16 "$@" --gap 0.02 \
          --waiting 0 --json "quantum_vllm_$q.json" | tee "quantum_vllm_$q.md"
      done
      # strict credit at scale 1 (frontier.md, "Strict credit")
      fairq engine-bench --engine transformers --model tiny --policies dlpm --clients 4 \
        --requests-per-client 8 --flood-factor 4 --prefix-len 512 --suffix-len 64 \
        --max-new-tokens 32 --max-batch-tokens 1024 --max-requests-per-batch 8 \
        --quantum auto --quantum-scale 1 --strict-credit --json quantum_flood_strict.json
      fairq engine-bench --engine transformers --model tiny --policies dlpm --clients 4 \
        --requests-per-client 8 --flood-factor 4 --prefix-len 512 --docs-per-client 4 \
        --suffix-len 64 --max-new-tokens 32 --num-blocks 160 --max-batch-tokens 1024 \
        --max-requests-per-batch 8 --quantum auto --quantum-scale 1 --strict-credit \
        --json quantum_docs_strict.json
      fairq engine-bench --engine vllm --policies dlpm --requests-per-client 24 \
        --prefix-len 512 --suffix-len 32 --max-new-tokens 16 --num-blocks 80 \
        --max-batch-tokens 512 --max-requests-per-batch 16 --quantum auto --quantum-scale 1 \
        --strict-credit --gap 0.02 --waiting 0 --json quantum_vllm_strict.json
      ;;
    frontier)
      # docs/results/frontier.md: vLLM's scheduler in-process, 3 workloads x 4 cache sizes
      # x every policy and quantum, 2 seeds (~15 min on one core; needs vLLM 0.33)
      python -m fairq.enginebench.frontier --policies fifo,vtc,lpm,oracle,dlpm-default \
        --quanta auto,512,768,1024,1280,1536,2048,4096,8192,x1.25,x1.5,x2,x3 \
        --strict-quanta auto,x0.5,x0.75,x1.5 \
        --json frontier.json --plot frontier.png | tee frontier_table.md
      # the real-server spot check (FAIRQ_VLLM_SERVER_PYTHON: vLLM's CPU build, ~5 min each)
      if [ -n "${FAIRQ_VLLM_SERVER_PYTHON:-}" ]; then
        # the contention test's rounds ("A flood of hits against misses", ~8 min)
        python contention.py stock,dlpm,dlpm-x1,dlpm,dlpm-x1,stock,dlpm-x1,dlpm --json contention.json
        for s in 1.5 1; do
          fairq engine-bench --engine vllm-server --model small --policies lpm,dlpm --runs 1 \
            --requests-per-client 24 --flood-factor 4 --prefix-len 512 --suffix-len 16 \
            --docs-per-client 4 --max-new-tokens 32 --quantum auto --quantum-scale "$s" --no-strict-credit \
            --max-model-len 1024 --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 \
            --num-gpu-blocks-override 20" --json "frontier_server_q${s/./}.json"
        done
        fairq engine-bench --engine vllm-server --model small --policies lpm,dlpm --runs 1 \
          --requests-per-client 24 --flood-factor 4 --prefix-len 512 --suffix-len 16 \
          --docs-per-client 4 --max-new-tokens 32 --quantum auto --quantum-scale 1 --strict-credit \
          --max-model-len 1024 --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 \
          --num-gpu-blocks-override 20" --json frontier_server_strict.json
        # DLPM as shipped (strict credit, scale 0.8): one round, then two more
        for r in 1 2; do
          out=frontier_server_default.json
          if [ "$r" = 2 ]; then out=frontier_server_default_r2.json; fi
          fairq engine-bench --engine vllm-server --model small --policies lpm,dlpm --runs "$r" \
            --requests-per-client 24 --flood-factor 4 --prefix-len 512 --suffix-len 16 \
            --docs-per-client 4 --max-new-tokens 32 --quantum auto \
            --max-model-len 1024 --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 \
            --num-gpu-blocks-override 20" --json "$out"
        done
        # the real-server sweep of cache sizes: a quarter, a third, a half and all of
        # the documents' 64 blocks, one run each (~45 min), then the table and plot
        for b in 16 20 32 64; do
          pol=vllm,vtc,lpm,dlpm
          if [ "$b" = 20 ]; then pol=vllm,vtc; fi  # LPM and DLPM: the spot check's rounds
          for v in "" x1; do
            set -- --policies "$pol"
            if [ -n "$v" ]; then set -- --policies dlpm --quantum-scale 1 --no-strict-credit; fi
            fairq engine-bench --engine vllm-server --model small "$@" --runs 1 \
              --requests-per-client 24 --flood-factor 4 --prefix-len 512 --suffix-len 16 \
              --docs-per-client 4 --max-new-tokens 32 --quantum auto --max-model-len 1024 \
              --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 \
              --num-gpu-blocks-override $b" --json "frontier_server_b$b${v:+_$v}.json"
          done
        done
        # the server started first in an invocation runs faster (frontier.md, "Which
        # server runs first"): DLPM first at every size, and both orders twice at 20
        for run in b16_dlpm_first b20_dlpm_first b20_lpm_first b20_dlpm_first_r2 \
          b20_lpm_first_r2 b32_dlpm_first b64_dlpm_first; do
          b=${run#b}; b=${b%%_*}
          pol=dlpm,lpm
          case "$run" in *lpm_first*) pol=lpm,dlpm ;; esac
          fairq engine-bench --engine vllm-server --model small --policies "$pol" --runs 1 \
            --requests-per-client 24 --flood-factor 4 --prefix-len 512 --suffix-len 16 \
            --docs-per-client 4 --max-new-tokens 32 --quantum auto --max-model-len 1024 \
            --server-args "--max-num-seqs 8 --max-num-batched-tokens 1024 \
            --num-gpu-blocks-override $b" --json "frontier_server_$run.json"
        done
        python -m fairq.enginebench.frontier --server-json "$(echo frontier_server_b16.json \
          frontier_server_b16_x1.json frontier_server_default.json frontier_server_default_r2.json \
          frontier_server_b20.json frontier_server_b20_x1.json frontier_server_b32.json \
          frontier_server_b32_x1.json frontier_server_b64.json frontier_server_b64_x1.json \
          frontier_server_b16_dlpm_first.json frontier_server_b20_dlpm_first.json \
          frontier_server_b20_lpm_first.json frontier_server_b20_dlpm_first_r2.json \
          frontier_server_b20_lpm_first_r2.json frontier_server_b32_dlpm_first.json \
          frontier_server_b64_dlpm_first.json | tr ' ' ,)" \
          --json frontier_server.json --plot frontier_server.png | tee frontier_server_table.md
      fi
      ;;
    splice) ;;
    *) echo "unknown part: $part (see the list at the top of this file)" >&2; exit 2 ;;
  esac
done
if [ "${parts[*]}" != gpu ]; then python splice.py; fi
