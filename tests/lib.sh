# lib.sh - helpers for the shell tests (sourced). Each test runs the real binary on real files.
set -u
DTRAIN=${DTRAIN_BIN:?DTRAIN_BIN must point at the dtrain binary}
SRC=${DT_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
TMP=$(mktemp -d /tmp/dtrain-sh-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
PASSED=0
FAILED=0

fail() { echo "FAIL: $*" >&2; FAILED=$((FAILED + 1)); }
pass() { echo "ok   $*"; PASSED=$((PASSED + 1)); }

# expect_exit CODE NAME -- CMD...: run CMD, check its exit code; its stderr is in $TMP/err.
expect_exit() {
    local want=$1 name=$2; shift 3
    "$@" >"$TMP/out" 2>"$TMP/err"
    local got=$?
    if [ "$got" -ne "$want" ]; then
        fail "$name: exit $got, want $want; stderr: $(head -c 600 "$TMP/err")"
        return 1
    fi
    return 0
}

# expect_err_has NAME TEXT: the last command's stderr contains TEXT.
expect_err_has() {
    if grep -qF -- "$2" "$TMP/err"; then pass "$1"; else fail "$1: stderr lacks '$2': $(head -c 600 "$TMP/err")"; fi
}

# json_num FILE KEY: the first number that follows "KEY": in FILE.
json_num() { grep -o "\"$2\": *-\?[0-9.eE+-]*" "$1" | head -1 | sed 's/.*: *//'; }

# ge A B: A >= B (floats).
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }

# wait_for CMD...: poll CMD every 0.1 s until it succeeds, at most WAIT_POLLS times (200).
wait_for() {
    for _ in $(seq "${WAIT_POLLS:-200}"); do "$@" && return 0; sleep 0.1; done
    return 1
}

# check_result JOB PYTHON_ASSERTS: run the asserts against $TMP/job-JOB/result.json loaded
# as r (reps = r["replicas"]); fails (non-zero) when one does not hold.
check_result() {
    /usr/bin/python3 - "$TMP/job-$1/result.json" "$2" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
reps = r["replicas"]
exec(sys.argv[2])
PYEOF
}

# section NAME: run this part of a test? All of them unless ONLY lists some (ONLY="a b").
section() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

# stop_jobs: stop the master of every $TMP/job-* still running (a test's clean-up).
stop_jobs() {
    for d in "$TMP"/job-*; do [ -f "$d/master.json" ] && "$DTRAIN" stop "$d" >/dev/null 2>&1; done
}

finish() {
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
}
