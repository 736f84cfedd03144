#!/usr/bin/env bash
# tsan.sh - the threaded parts under ThreadSanitizer (scripts/test.sh runs it after ASan):
# a build-tsan/ tree (-DDT_TSAN=ON, Debug) and the tests of the PS server and client
# (ps_test), the ring (ring_test), the thread pool (core_test), the shard client and its
# heartbeat (client_test), and the model server's batching (serve_test.sh: `dtrain serve`
# under load). Fails on any data race or other TSan report.
#
#   bash scripts/tsan.sh [CTEST_REGEX]    (default: the tests above; another test's binary
#                                          is built by hand: cmake --build build-tsan --target T)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${TSAN_BUILD:-build-tsan}
tests=${1:-'^(ps_test|ring_test|core_test|client_test|serve_test)$'}
start=$(date +%s)
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DDT_TSAN=ON >/dev/null
# only what the tests run (not the benchmarks and the other tests)
targets=(--target dtrain ps_test ring_test core_test client_test)
cmake --build "$dir" -j"$(nproc 2>/dev/null || echo 2)" "${targets[@]}" >/dev/null ||
    cmake --build "$dir" -j1 "${targets[@]}"
echo "tsan: built in $(( $(date +%s) - start )) s"
# halt_on_error: a race fails the test that ran into it (its report in the test's output)
rc=0
(cd "$dir" && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 history_size=4" \
    ctest --output-on-failure -R "$tests") || rc=$?
echo "tsan: $(( $(date +%s) - start )) s in all"
exit $rc
