#!/usr/bin/env bash
# Regenerate every simulator result the README quotes (about a minute on 2 cores).
set -euo pipefail
cd "$(dirname "$0")"
fairq simulate --no-progress --json comparison.json --plot comparison.png | tee comparison.md
fairq simulate --sweep quantum --workload tot-S2 --no-progress \
  --json sweep_quantum_tot.json --plot sweep_quantum_tot.png | tee sweep_quantum_tot.md
fairq simulate --sweep quantum --no-progress \
  --json sweep_quantum.json --plot sweep_quantum.png | tee sweep_quantum.md
fairq simulate --workload chat --workers 2 --no-progress \
  --json chat.json --plot chat.png | tee chat.md
