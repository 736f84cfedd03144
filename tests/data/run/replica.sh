#!/usr/bin/env bash
# replica.sh - a job replica for the tests: checks what the master told it, then acts.
#
#   replica.sh ACTION [ARGS]   with ACTION one of
#     exit CODE                exit with CODE
#     sleep SECS               sleep, then exit 0 (SIGTERM ends it at once)
#     attempts C1 C2 ...       exit with C1 on the first attempt, C2 on the second, ...
#                              (the last code repeats); a code 'kill' means SIGKILL itself
#     wait-file PATH           wait until PATH exists, then exit 0
#     wait-ran N               wait until N replicas have started (lines of $STATE/ran), then
#                              exit 0
#
# Before acting it checks its environment: DTRAIN_REPLICA, DTRAIN_MASTER, DTRAIN_JOB_TOKEN
# set; TF_CONFIG (when set) names this replica as its task; the variables of the
# manifest's env are there. A mismatch exits 99 with the reason. STATE (an env var of the
# manifest) is a directory for attempt counters and a log of who ran.
set -u
fail() { echo "replica check failed: $*" >&2; exit 99; }
[ -n "${DTRAIN_REPLICA:-}" ] || fail "DTRAIN_REPLICA is not set"
[ -n "${DTRAIN_MASTER:-}" ] || fail "DTRAIN_MASTER is not set"
[ -n "${DTRAIN_JOB_TOKEN:-}" ] || fail "DTRAIN_JOB_TOKEN is not set"
[ -n "${STATE:-}" ] || fail "STATE (from the manifest's env) is not set"
type=${DTRAIN_REPLICA%-*}
index=${DTRAIN_REPLICA##*-}
if [ -n "${TF_CONFIG:-}" ]; then
    case "$TF_CONFIG" in
    *"\"task\":{\"type\":\"$type\",\"index\":$index},\"environment\":\"cloud\"}") ;;
    *) fail "TF_CONFIG does not name $DTRAIN_REPLICA as its task: $TF_CONFIG" ;;
    esac
fi
echo "$DTRAIN_REPLICA pid $$ TF_CONFIG=${TF_CONFIG:-}"
echo "$DTRAIN_REPLICA $$" >>"$STATE/ran"
action=${1:-exit}
shift || true
case "$action" in
exit) exit "${1:-0}" ;;
sleep) trap 'exit 143' TERM; sleep "${1:-30}" & wait $!; exit 0 ;;
attempts)
    n=$(cat "$STATE/$DTRAIN_REPLICA.attempts" 2>/dev/null || echo 0)
    n=$((n + 1))
    echo "$n" >"$STATE/$DTRAIN_REPLICA.attempts"
    codes=("$@")
    i=$((n - 1))
    [ "$i" -lt "${#codes[@]}" ] || i=$((${#codes[@]} - 1))
    code=${codes[$i]}
    echo "attempt $n: $code"
    if [ "$code" = kill ]; then kill -KILL $$; fi
    exit "$code" ;;
wait-file)
    trap 'exit 143' TERM
    while [ ! -e "$1" ]; do sleep 0.05; done
    exit 0 ;;
wait-ran)
    trap 'exit 143' TERM
    while [ "$(wc -l <"$STATE/ran")" -lt "$1" ]; do sleep 0.05; done
    exit 0 ;;
*) fail "unknown action $action" ;;
esac
