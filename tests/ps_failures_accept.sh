#!/usr/bin/env bash
# ps_failures_accept.sh - the parameter-server job survives its replicas being killed: the
# Fashion-MNIST MLP job (examples/fashion_mnist_ps.yaml) runs detached while, one after the
# other, a worker, the PS and the chief get SIGKILL. Each is restarted by the master (the
# worker's shards go back to the queue, the PS restores its partition from its newest
# checkpoint and the trainers reconnect, the chief resumes from the newest checkpoint of
# the whole model), the job succeeds, and still reaches eval accuracy >= 0.88.
source "$(dirname "$0")/lib.sh"
export DTRAIN_HOME="$TMP/home"
J="$TMP/job"
PY=/usr/bin/python3
cleanup() { [ -f "$J/master.json" ] && "$DTRAIN" stop "$J" >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT

# pid NAME: the running pid of replica NAME (from status.json), empty when none.
pid() {
    $PY -c 'import json,sys
for r in json.load(open(sys.argv[1]))["replicas"]:
    if r["name"] == sys.argv[2] and r["pid"]: print(r["pid"])' "$J/status.json" "$1" 2>/dev/null
}
# epochs_done N: the chief has logged the end of epoch N or a later one (its own share of it:
# a chief that started late on a loaded machine may have had no share of the first epoch).
last_epoch() {
    sed -n 's/.*: epoch \([0-9]*\) done here.*/\1/p' "$J/logs/chief-0.log" 2>/dev/null |
        sort -n | tail -n 1
}
epochs_done() {
    local k
    k=$(last_epoch)
    [ -n "$k" ] && [ "$k" -ge "$1" ]
}
# kill_replica NAME: SIGKILL the replica's own process (the child of the supervisor whose pid
# the status shows); then wait until the master started it again.
kill_replica() {
    local p c; p=$(pid "$1")
    [ -n "$p" ] && c=$(pgrep -P "$p" | head -1)
    [ -n "${c:-}" ] || { fail "$1 has no running process to kill"; return 1; }
    kill -KILL "$c"
    restarted() { local q; q=$(pid "$1"); [ -n "$q" ] && [ "$q" != "$p" ]; }
    WAIT_POLLS=600 wait_for restarted "$1" && pass "$1 (pid $c) killed and started again" ||
        fail "$1 was not started again"
}

expect_exit 0 run -- "$DTRAIN" run "$SRC/examples/fashion_mnist_ps.yaml" --job-dir "$J" --detach ||
    { finish; exit 1; }
WAIT_POLLS=1200 wait_for epochs_done 1 || fail "no epoch done after 120 s: $(tail -n 5 "$J"/logs/*.log)"
kill_replica worker-1
WAIT_POLLS=1200 wait_for epochs_done 3 || fail "training stalled after the worker's restart"
kill_replica ps-0
# The event itself: the restarted PS's restore. (The chief may be epochs ahead of the test by
# then: waiting for an epoch count instead once checked the log before the restore.)
restored() {
    awk '/--- dtrain: ps-0 attempt [0-9]+ started/ { n++ } n >= 2 && /restored [0-9]* variables at step/ { f = 1 }
         END { exit !f }' "$J/logs/ps-0.log"
}
WAIT_POLLS=1200 wait_for restored && pass "ps-0 restored its partition" ||
    fail "ps-0 did not restore: $(tail -3 "$J/logs/ps-0.log")"
k=$(last_epoch)
WAIT_POLLS=1200 wait_for epochs_done $(( ${k:-0} < 5 ? 5 : ${k:-0} + 1 )) ||
    fail "training stalled after the PS's restart"
kill_replica chief-0
done_job() { [ -f "$J/result.json" ]; }
WAIT_POLLS=3000 wait_for done_job || fail "the job did not finish"
grep -q "resuming from" "$J/logs/chief-0.log" && pass "the chief resumed from a checkpoint" ||
    fail "the chief did not resume"
$PY - "$J/result.json" <<'PYEOF' && pass "Succeeded with accuracy >= 0.88 after three kills" || fail "result: $(head -c 1500 "$J/result.json")"
import json, sys
r = json.load(open(sys.argv[1]))
chief = r["replicas"]["chief-0"]["result"]
print("status", r["status"], "accuracy", chief["eval"]["accuracy"], "restarts",
      {k: v["restarts"] for k, v in r["replicas"].items()})
assert r["status"] == "Succeeded"
assert chief["eval"]["accuracy"] >= 0.88
for name in ("worker-1", "ps-0", "chief-0"):
    assert r["replicas"][name]["restarts"] >= 1, name
PYEOF
# Nothing of the job outlives it (a replica whose supervisor died is killed with it); the
# master may still be stopping replicas when result.json appears.
none_left() { ! pgrep -f -- "--job-dir $J" >/dev/null; }
wait_for none_left && pass "no replica process outlives the job" ||
    fail "left running: $(pgrep -f -- "--job-dir $J" | tr '\n' ' ')"
finish
