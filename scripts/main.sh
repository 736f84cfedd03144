#!/usr/bin/env bash
# main.sh - install, build and run dtrain's main job: Fashion-MNIST.
# Extra arguments go to `dtrain train` (e.g. --epochs 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh release
exec ./build/dtrain train examples/fashion_mnist_mlp.yaml "$@"
