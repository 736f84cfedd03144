#!/usr/bin/env bash
# main.sh - install, build and run dtrain's main job: Fashion-MNIST trained by a
# parameter-server job (chief, 2 workers, 1 PS, an evaluator) on this machine.
# Extra arguments go to `dtrain run` (e.g. --job-dir DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh release
exec ./build/dtrain run examples/fashion_mnist_ps.yaml "$@"
