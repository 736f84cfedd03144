#!/usr/bin/env bash
# blas_compare.sh - OpenBLAS vs BLIS, single-threaded, on one training step's GEMM shapes.
# Installs libblis-dev if missing. Prints one line per library (and per OpenBLAS core type).
set -eu
cd "$(dirname "$0")"
dpkg-query -W -f='${Status}' libblis-dev 2>/dev/null | grep -q "install ok installed" || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libblis-dev >/dev/null; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
gcc -O2 -o "$TMP/openblas" sgemm_time.c $(pkg-config --cflags --libs openblas)
B=$(dpkg -L libblis-openmp-dev libblis-pthread-dev 2>/dev/null | grep -m1 "/cblas.h$" | xargs dirname || true)
L=$(dpkg -L libblis-openmp-dev libblis-pthread-dev 2>/dev/null | grep -m1 "/libblis.so$" | xargs dirname || true)
gcc -O2 -I"$B" -o "$TMP/blis" sgemm_time.c -L"$L" -Wl,-rpath,"$L" -lblis
OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=Haswell "$TMP/openblas" "OpenBLAS/Haswell"
OPENBLAS_NUM_THREADS=1 "$TMP/openblas" "OpenBLAS/auto"
BLIS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$TMP/blis" "BLIS"
