#!/usr/bin/env bash
# fuzz.sh - build the libFuzzer harnesses (fuzz/, docs/FUZZING.md) with clang, ASan and UBSan
# in build-fuzz/, and run each for a bounded time from its committed seed corpus. Prints the
# executions and coverage (libFuzzer's cov: edges, ft: features) per harness; fails when any
# harness finds a crash, a leak, a timeout or an out-of-memory (the input is kept in
# build-fuzz/artifacts/: add it to fuzz/corpus/<harness>/ with the parser's fix).
#
#   bash scripts/fuzz.sh [HARNESS...]     (default: every fuzz/fuzz_*.c)
#   FUZZ_SECONDS=N (per harness, default 15), FUZZ_BUILD=dir (default build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-15}
dir=${FUZZ_BUILD:-build-fuzz}
cc=$(command -v clang || command -v clang-14 || true)
[ -n "$cc" ] || { echo "fuzz: clang is missing (scripts/setup.sh installs it)" >&2; exit 1; }

start=$(date +%s)
CC=$cc cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DDT_FUZZ=ON >/dev/null
cmake --build "$dir" --target fuzz -j"$(nproc 2>/dev/null || echo 2)" >/dev/null ||
    cmake --build "$dir" --target fuzz -j1
dir=$(cd "$dir" && pwd)
root=$(pwd)
built=$(date +%s)
echo "fuzz: harnesses built in $((built - start)) s"

if [ $# -gt 0 ]; then harnesses=("$@")
else harnesses=($(cd fuzz && ls fuzz_*.c | sed 's/\.c$//')); fi
mkdir -p "$dir/artifacts"
status=0
printf '%-20s %10s %8s %8s %7s  %s\n' harness execs exec/s cov ft result
for h in "${harnesses[@]}"; do
    work=$(mktemp -d "${TMPDIR:-/tmp}/dt-fuzz-$h.XXXXXX") # new units land here, not in fuzz/
    log="$dir/artifacts/$h.log"
    rc=0
    (cd "$work" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$dir/fuzz/$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -close_fd_mask=3 -artifact_prefix="$dir/artifacts/$h-" \
        "$work" "$root/fuzz/corpus/$h") >"$log" 2>&1 || rc=$?
    rm -rf "$work"
    last=$(grep -E '^#[0-9]+' "$log" | tail -n1 || true)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    if [ $rc -eq 0 ]; then result=ok; else result="FAILED (exit $rc, $log)"; status=1; fi
    printf '%-20s %10s %8s %8s %7s  %s\n' "$h" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$result"
    if [ $rc -ne 0 ]; then
        { grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" || tail -n 3 "$log"; } |
            head -n 8 | sed 's/^/    /'
    fi
done
echo "fuzz: $(( $(date +%s) - start )) s in all"
exit $status
