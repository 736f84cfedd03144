#!/usr/bin/env bash
# setup.sh - install what dtrain needs from Debian (only what is missing) and build it.
#
#   bash scripts/setup.sh [release|asan|all]    (default: release)
#
# Idempotent: a second run installs nothing and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config libopenblas-dev libyaml-dev libjansson-dev
          zlib1g-dev libmicrohttpd-dev libcurl4-openssl-dev libpng-dev dataset-fashion-mnist procps
          iproute2 python3 curl faketime python3-kubernetes openssl python3-onnx python3-protobuf
          prometheus libjs-chart.js chromium clang libclang-rt-dev)
# clang and its runtimes (libFuzzer, the sanitizers) are for scripts/fuzz.sh (fuzz/); the
# builds here use the default compiler.
# kubectl, for the Kubernetes tests (tests/kube_*): Debian's kubernetes-client when no
# kubectl is installed.
command -v kubectl >/dev/null 2>&1 || PACKAGES+=(kubernetes-client)
# Node.js and npm, for ONNX Runtime in the ONNX export test (tests/onnx_export_test.sh): Debian's
# when none is installed (a Node.js from elsewhere that brings its own npm is kept).
command -v node >/dev/null 2>&1 || PACKAGES+=(nodejs)
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
    $SUDO apt-get update -qq
    # prometheus is here for promtool (tests/metrics_test.sh): its package would start a
    # Prometheus server; a policy-rc.d that says no keeps every service from starting
    policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee $policy >/dev/null && $SUDO chmod +x $policy
    fi
    rc=0
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null || rc=$?
    [ -z "$policy" ] || $SUDO rm -f "$policy"
    [ $rc -eq 0 ] || exit $rc
fi

# onnxruntime-node and playwright-core (tests/js/package-lock.json; the ONNX export test and
# the dashboard's browser test, which drives Debian's chromium) when tests/js/node_modules is missing or older
# than the lock file. --ignore-scripts: its postinstall would fetch CUDA binaries from outside
# the npm registry; the CPU binaries are in the package itself.
if [ ! -f tests/js/node_modules/.package-lock.json ] ||
    [ tests/js/package-lock.json -nt tests/js/node_modules/.package-lock.json ]; then
    echo "setup: npm ci in tests/js (onnxruntime-node, ~300 MB)" >&2
    (cd tests/js && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi

jobs=$(nproc 2>/dev/null || echo 2)
build() { # dir, cmake args...
    local dir=$1; shift
    cmake -S . -B "$dir" "$@" >/dev/null
    cmake --build "$dir" -j"$jobs" >/dev/null || cmake --build "$dir" -j1
}
case "${1:-release}" in
    release) build build -DCMAKE_BUILD_TYPE=Release ;;
    asan) build build-asan -DCMAKE_BUILD_TYPE=Debug -DDT_SANITIZE=ON ;;
    all) build build -DCMAKE_BUILD_TYPE=Release
         build build-asan -DCMAKE_BUILD_TYPE=Debug -DDT_SANITIZE=ON ;;
    *) echo "usage: setup.sh [release|asan|all]" >&2; exit 2 ;;
esac
