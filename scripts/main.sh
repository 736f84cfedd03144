#!/usr/bin/env bash
# main.sh - install, build and run dtrain's main job: Fashion-MNIST trained by a
# parameter-server job (chief, 2 workers, 1 PS, an evaluator) on this machine.
# Each run gets its own job directory, runs/fashion-mnist-ps-<time>/, unless extra arguments
# say otherwise: they go to `dtrain run` (e.g. --job-dir DIR, --detach).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh release
if [ $# -eq 0 ]; then set -- --job-dir "runs/fashion-mnist-ps-$(date +%Y%m%d-%H%M%S)"; fi
exec ./build/dtrain run examples/fashion_mnist_ps.yaml "$@"
