#!/usr/bin/env bash
# shard_test.sh - the elastic data shard service end to end: real jobs whose workers (dtrain's
# C client and the Python client dtrain_client) consume a dataset through the master, while
# one worker is killed by SIGKILL mid-shard (restarted, or lost under elasticPolicy), one is
# stopped with SIGSTOP past the heartbeat timeout and continued (its late report is
# refused), and the master itself is killed and resumed. After each, every shard of every
# epoch was accepted exactly once, the accepted shards cover every index of every epoch, and
# the job succeeded (tests/data/shard/verify.py). Also: a shard forgotten by a worker that
# still beats (its lease passes its deadline), the system clock stepped under the master
# (libfaketime), the job dir's disk full mid-run (needs root: a small tmpfs), no answer that
# says yes before its journal line (the master killed amid 4 fast clients), and the 4xx
# answers of the routes.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
DATA="$SRC/tests/data/shard"
WORKER="$DATA/worker.sh"
export DT_TOOLS_DIR=${DT_TOOLS_DIR:?DT_TOOLS_DIR must point at the built test tools}
export DTRAIN_HOME="$TMP/home"
cd "$TMP"
# Every worker of this test has $TMP (its --out file) on its command line.
cleanup() { pkill -KILL -f "$TMP/" 2>/dev/null; umount -l "$TMP/small" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$TMP"; } # KEEP=1: keep $TMP
trap cleanup EXIT

SIZE=1200 BATCH=20 MB=2 EPOCHS=2 # shards of 40 records: 30 per epoch, 60 in all
SHARD=$((BATCH * MB))

# job NAME POLICY WORKERS PY_REPLICAS EXTRA_SPEC WORKER_ARGS...: write NAME.yaml, a TFJob
# whose workers all consume dataset "training" into out-NAME.txt.
job() {
    local name=$1 policy=$2 workers=$3 py=$4 extra=$5; shift 5
    local args=""
    for a in --dataset training --size $SIZE --batch $BATCH --epochs $EPOCHS --minibatches $MB \
        --out "$TMP/out-$name.txt" "$@"; do args="$args, \"$a\""; done
    cat >"$name.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: $name
spec:
  runPolicy: {cleanPodPolicy: Running}
  successPolicy: AllWorkers
$extra
  tfReplicaSpecs:
    Worker:
      replicas: $workers
      restartPolicy: $policy
      template:
        spec:
          containers:
            - name: tensorflow
              image: tensorflow/tensorflow:2.13.0
              command: ["bash", "$WORKER"]
              args: [${args#, }]
              env:
                - {name: PY_REPLICAS, value: "$py"}
YAML
    rm -f "$TMP/out-$name.txt"
}

WAIT_POLLS=300 # wait_for: up to 30 s
finished() { [ -f "runs/$1/result.json" ]; }
# pid_of JOB REPLICA: the worker process of the replica (the status gives its supervisor's
# pid; the worker is the supervisor's child).
pid_of() {
    local sup
    sup=$($PY -c 'import json,sys
for r in json.load(open(sys.argv[1]))["replicas"]:
    if r["name"] == sys.argv[2] and r.get("pid") and r["state"] == "Running": print(r["pid"])' \
        "runs/$1/status.json" "$2")
    [ -n "$sup" ] && pgrep -P "$sup" | head -1
}
# holds JOB REPLICA: the replica's last shard event in the journal is a fetch (it holds a shard).
holds() {
    $PY -c 'import json,sys
last = None
for line in open(sys.argv[1]):
    try: ev = json.loads(line)
    except ValueError: continue
    if ev.get("ev", "").startswith("shard.") and ev.get("replica") == sys.argv[2]: last = ev["ev"]
sys.exit(last != "shard.fetch")' "runs/$1/journal.jsonl" "$2"
}
# retaken JOB REPLICA: the shard of the replica's last fetch was fetched again since (by
# another replica, after its release).
retaken() {
    $PY -c 'import json,sys
fetches = []
for line in open(sys.argv[1]):
    try: ev = json.loads(line)
    except ValueError: continue
    if ev.get("ev") == "shard.fetch": fetches.append((ev["replica"], ev["dataset"], ev["epoch"], ev["id"]))
last = max((i for i, f in enumerate(fetches) if f[0] == sys.argv[2]), default=None)
sys.exit(last is None or not any(f[1:] == fetches[last][1:] for f in fetches[last + 1:]))' \
        "runs/$1/journal.jsonl" "$2"
}
# releases JOB REPLICA: how many releases of the replica's shards the journal has.
releases() { grep '"ev":"shard.release"' "runs/$1/journal.jsonl" | grep -c "\"replica\":\"$2\""; }
released_since() { [ "$(releases "$1" "$2")" -gt "$3" ]; } # JOB REPLICA COUNT
# progressed JOB N: the workers have written at least N shards done so far.
progressed() { [ "$(cat "$TMP/out-$1.txt" 2>/dev/null | wc -l)" -ge "$2" ]; }
# stop_holding JOB REPLICA: SIGSTOP the replica at a moment it holds a shard; prints its pid.
stop_holding() {
    local pid
    for _ in $(seq 100); do
        pid=$(pid_of "$1" "$2")
        if [ -n "$pid" ]; then
            kill -STOP "$pid"
            # A request it sent just before the stop is already in the master's socket: one
            # request of ours (status asks the live master) lets it land before we look.
            "$DTRAIN" status "runs/$1" >/dev/null 2>&1
            if holds "$1" "$2"; then echo "$pid"; return 0; fi
            kill -CONT "$pid"
        fi
        sleep 0.05
    done
    return 1
}
# verify NAME TITLE ARGS...: the accounting checks, then the job's success.
verify() {
    local name=$1 title=$2; shift 2
    if $PY "$DATA/verify.py" "runs/$name" training $SIZE $SHARD $EPOCHS "$TMP/out-$name.txt" "$@" \
        >"$TMP/verify" 2>&1; then
        pass "$title: $(cat "$TMP/verify")"
    else
        fail "$title: $(head -c 1500 "$TMP/verify")"
    fi
    grep -q '"status": "Succeeded"' "runs/$name/result.json" && pass "$title: job succeeded" ||
        fail "$title: job did not succeed: $(grep -A3 '"type": "Failed"' "runs/$name/result.json" | head -8)"
}

# ---- C and Python workers consume two epochs of a shuffled dataset ----
if section plain; then
job plain Never 3 "worker-1" "" --shuffle --seed 7 --sleep-ms 20
"$DTRAIN" run plain.yaml --stop-grace 2 >"$TMP/out" 2>"$TMP/err"
[ $? -eq 0 ] && pass "plain: exit 0" || fail "plain: exit $?: $(tail -5 "$TMP/err")"
verify plain "plain"
for w in worker-0 worker-1 worker-2; do
    grep -q "^$w " "$TMP/out-plain.txt" || fail "plain: $w consumed no shard"
done
expect_exit 0 "status" -- "$DTRAIN" status runs/plain
grep -q "dataset training: done, epoch 2 of 2: shards 30/30, samples 1200/1200" "$TMP/out" &&
    pass "status: shows the dataset's progress" || fail "status: $(cat "$TMP/out")"
fi

# ---- the Python client's record generator, unshuffled ----
if section gen; then
job gen Never 2 "worker-0 worker-1" "" --generator
"$DTRAIN" run gen.yaml --stop-grace 2 >"$TMP/out" 2>"$TMP/err" || fail "gen: $(tail -5 "$TMP/err")"
awk -v n=$SIZE '$7 == "gen" { c[$2] += $9; s[$2] += $8 }
    END { for (e = 0; e < 2; e++) if (c[e] != n || s[e] != n * (n - 1) / 2) exit 1 }' \
    "$TMP/out-gen.txt" && pass "gen: record_indices yields every index of every epoch once" ||
    fail "gen: $(cat "$TMP/out-gen.txt")"
fi

# ---- SIGKILL mid-shard, restarted by OnFailure ----
if section killed; then
job killed OnFailure 3 "worker-1" "" --sleep-ms 150
expect_exit 0 "killed: detach" -- "$DTRAIN" run killed.yaml --detach --stop-grace 2
wait_for progressed killed 4 || fail "killed: no progress"
for victim in worker-1 worker-0; do # the Python worker, then a C worker
    pid=$(stop_holding killed $victim) || fail "killed: $victim never held a shard"
    kill -KILL "$pid"
done
wait_for finished killed || fail "killed: did not finish"
verify killed "SIGKILL + OnFailure" --requeued 2 --unlogged 2
grep -q '"restarts": 2' runs/killed/result.json && pass "killed: two restarts" ||
    fail "killed: $(grep restarts runs/killed/result.json | head -3)"
fi

# ---- SIGKILL mid-shard, not restarted: elasticPolicy lets the job lose a worker ----
if section lost; then
job lost Never 3 "worker-2" "  elasticPolicy: {minReplicas: 2}" --sleep-ms 150
expect_exit 0 "lost: detach" -- "$DTRAIN" run lost.yaml --detach --stop-grace 2
wait_for progressed lost 4 || fail "lost: no progress"
pid=$(stop_holding lost worker-0) || fail "lost: worker-0 never held a shard"
kill -KILL "$pid"
wait_for finished lost || fail "lost: did not finish"
verify lost "SIGKILL + Never, elastic" --requeued 1 --unlogged 1
grep -q '"worker-0"' runs/lost/result.json && grep -A4 '"worker-0": {' runs/lost/result.json |
    grep -q '"state": "Failed"' && pass "lost: worker-0 failed for good, the job went on" ||
    fail "lost: $(grep -A4 '"worker-0": {' runs/lost/result.json)"
fi

# ---- SIGSTOP past the heartbeat timeout, then SIGCONT: the late report is refused ----
if section stopped; then
job stopped Never 3 "worker-1" "" --sleep-ms 100
expect_exit 0 "stopped: detach" -- "$DTRAIN" run stopped.yaml --detach --stop-grace 2 --heartbeat-timeout 1
wait_for progressed stopped 4 || fail "stopped: no progress"
for victim in worker-2 worker-1; do # a C worker, then the Python one
    # A report sent just before the stop may land after stop_holding looked: the worker
    # then holds nothing and nothing is released. Continue it and stop it again.
    pid= released=
    for _ in 1 2 3; do
        n=$(releases stopped $victim)
        pid=$(stop_holding stopped $victim) || { pid=; break; }
        settled() { released_since stopped $victim "$n" || ! holds stopped $victim; }
        wait_for settled
        released_since stopped $victim "$n" && { released=1; break; }
        kill -CONT "$pid"
    done
    [ -n "$pid" ] || fail "stopped: $victim never held a shard"
    [ -n "$released" ] || fail "stopped: $victim's shard not released"
    wait_for retaken stopped $victim || fail "stopped: $victim's shard not taken by another worker"
    kill -CONT "$pid"
done
wait_for finished stopped || fail "stopped: did not finish"
verify stopped "SIGSTOP past the timeout" --late 2 --requeued 2
grep -q "dtrain_client: late report refused" "runs/stopped/logs/worker-1.log" &&
    pass "stopped: the Python worker was told its report was late" ||
    fail "stopped: $(tail -3 runs/stopped/logs/worker-1.log)"
fi

# ---- the master killed by SIGKILL and resumed: no shard lost or counted twice ----
if section resumed; then
job resumed Never 3 "worker-0" "" --shuffle --seed 3 --sleep-ms 40
expect_exit 0 "resumed: detach" -- "$DTRAIN" run resumed.yaml --detach --stop-grace 2
for cut in 10 30; do
    wait_for progressed resumed $cut || fail "resumed: no progress before cut $cut"
    mpid=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' runs/resumed/master.json)
    kill -KILL "$mpid"
    wait_for sh -c "! kill -0 $mpid 2>/dev/null" # dead: its lock on the job dir is free
    expect_exit 0 "resumed: resume after cut $cut" -- "$DTRAIN" run --resume runs/resumed --detach
done
wait_for finished resumed || fail "resumed: did not finish"
verify resumed "master killed twice and resumed"
fi

# ---- a shard fetched and never reported by a worker that still beats: its lease passes
# its deadline, it is handed out again, and the epoch ends (it used to hold it forever) ----
if section forgotten; then
job forgotten Never 2 "" "" --sleep-ms 20 --heartbeat-ms 200 --forget-at 3 # both C workers
"$DTRAIN" run forgotten.yaml --stop-grace 2 --lease-timeout 2 >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc -eq 0 ] && pass "forgotten: exit 0" || fail "forgotten: exit $rc: $(tail -5 "$TMP/err")"
[ "$(cat runs/forgotten/logs/worker-*.log | grep -c "forgets shard")" -eq 2 ] &&
    pass "forgotten: each worker forgot a shard" || fail "forgotten: $(tail -3 runs/forgotten/logs/worker-0.log)"
grep -q '"ev":"shard.expire"' runs/forgotten/journal.jsonl &&
    pass "forgotten: their leases passed the deadline (journaled shard.expire)" || fail "forgotten: no shard.expire"
verify forgotten "forgotten leases" --requeued 2
fi

# ---- the system clock steps an hour forward, then back, under a running master (libfaketime
# in the master's process): no heartbeat timeout and no lease deadline fires for it, no
# SIGKILL is put off; every shard once (a step used to expire every lease at once) ----
if section clockstep; then
FAKELIB=$(dpkg -L libfaketime 2>/dev/null | grep '/libfaketimeMT\.so\.1$' | head -1)
if [ -n "$FAKELIB" ]; then
    # slow enough that the job cannot end before the third step is tried: at 30 ms a batch its
    # 60 shards took ~1.2 s, and a loaded machine's waits let it finish before the step back
    job clockstep Never 3 "" "" --sleep-ms 150 --heartbeat-ms 200
    # the fake clock is the master's alone: its replicas do not inherit the library
    sed -i 's|command: \["bash", |command: ["env", "-u", "LD_PRELOAD", "bash", |' clockstep.yaml
    echo "+0" >"$TMP/clock"
    LD_PRELOAD="$FAKELIB" FAKETIME_TIMESTAMP_FILE="$TMP/clock" FAKETIME_NO_CACHE=1 \
        FAKETIME_DONT_FAKE_MONOTONIC=1 ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
        "$DTRAIN" run clockstep.yaml --detach --stop-grace 2 --heartbeat-timeout 5 --lease-timeout 30 \
        >"$TMP/out" 2>"$TMP/err" || fail "clockstep: $(tail -3 "$TMP/err")"
    wait_for progressed clockstep 6 || fail "clockstep: no progress"
    echo "+3600" >"$TMP/clock" # an hour forward
    n0=$(wc -l <"$TMP/out-clockstep.txt")
    wait_for progressed clockstep $((n0 + 6)) || fail "clockstep: no progress after the step forward"
    echo "-3600" >"$TMP/clock" # and back, past the start
    n1=$(wc -l <"$TMP/out-clockstep.txt")
    wait_for progressed clockstep $((n1 + 6)) || fail "clockstep: no progress after the step back"
    echo "+0" >"$TMP/clock"
    WAIT_POLLS=1200 wait_for finished clockstep || fail "clockstep: did not finish"
    grep -q '"ev":"shard.release"\|"ev":"shard.expire"' runs/clockstep/journal.jsonl &&
        fail "clockstep: shards were re-queued: $(grep -m2 'shard.release\|shard.expire' runs/clockstep/journal.jsonl)" ||
        pass "clockstep: the steps re-queued nothing"
    verify clockstep "clock stepped +1 h and -1 h"
else
    fail "clockstep: no libfaketime (Debian package faketime)"
fi
fi

# ---- the job dir's disk fills up mid-run: the master acknowledges nothing it cannot
# journal (503, the workers retry), is killed while the disk is full and resumed once there
# is room: every shard still accepted exactly once (it used to answer without journaling,
# and a resumed master handed out again what it had acknowledged) ----
if section diskfull; then
SMALL="$TMP/small"
mkdir -p "$SMALL"
if mount -t tmpfs -o size=4m tmpfs "$SMALL"; then
    job diskfull Never 3 "worker-1" "" --sleep-ms 30
    expect_exit 0 "diskfull: detach" -- "$DTRAIN" run diskfull.yaml --job-dir "$SMALL/job" --detach --stop-grace 2
    wait_for progressed diskfull 6 || fail "diskfull: no progress"
    # api GET PATH: the master's answer (token from master.json)
    api() {
        $PY - "$SMALL/job/master.json" "$1" <<'PYEOF'
import json, sys, urllib.request
m = json.load(open(sys.argv[1]))
req = urllib.request.Request(m["url"] + sys.argv[2], headers={"Authorization": "Bearer " + m["token"]})
print(urllib.request.urlopen(req, timeout=10).read().decode())
PYEOF
    }
    head -c 8m /dev/zero >"$SMALL/filler" 2>/dev/null # fills the disk (ENOSPC at the end)
    full() { api /v1/jobs/diskfull 2>/dev/null | grep -q '"journal": *{"ok": *false'; }
    WAIT_POLLS=600 wait_for full && pass "diskfull: the master says it cannot write its journal" ||
        fail "diskfull: the status does not show the journal's failure: $(api /v1/jobs/diskfull | head -c 300)"
    # 503s to every change meanwhile: no lease may expire for want of a heartbeat (one did,
    # 30 s later, when a failure on the batched fetch's write went unmarked)
    grep -q "no heartbeat" "$SMALL/job/master.log" &&
        fail "diskfull: a lease expired while the journal was full: $(grep 'no heartbeat' "$SMALL/job/master.log")"
    n1=$(grep -c '"ev":"shard.report"' "$SMALL/job/journal.jsonl")
    mpid=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$SMALL/job/master.json")
    kill -KILL "$mpid"
    gone() { ! kill -0 "$mpid" 2>/dev/null; }
    wait_for gone || fail "diskfull: the master did not die"
    rm -f "$SMALL/filler"
    pass "diskfull: master killed while the disk was full ($n1 reports journaled), room made"
    expect_exit 0 "diskfull: resume" -- "$DTRAIN" run --resume "$SMALL/job" --detach
    done_small() { [ -f "$SMALL/job/result.json" ]; }
    WAIT_POLLS=1200 wait_for done_small || fail "diskfull: did not finish"
    if $PY "$DATA/verify.py" "$SMALL/job" training $SIZE $SHARD $EPOCHS "$TMP/out-diskfull.txt" \
        >"$TMP/verify" 2>&1; then
        pass "diskfull: $(cat "$TMP/verify")"
    else
        fail "diskfull: $(head -c 1500 "$TMP/verify")"
    fi
    grep -q '"status": "Succeeded"' "$SMALL/job/result.json" && pass "diskfull: job succeeded" ||
        fail "diskfull: $(grep -m3 '"message"' "$SMALL/job/result.json")"
    "$DTRAIN" stop "$SMALL/job" >/dev/null 2>&1
    umount "$SMALL" || umount -l "$SMALL"
else
    fail "diskfull: cannot mount a tmpfs (root?)"
fi
fi

# ---- no acknowledgment before its journal line: 4 clients fetch and report as fast as they
# can, the master is killed by SIGKILL right after the 400th answer that said yes, and every
# fetch and report a client saw acknowledged is in the journal; the resumed master replays
# it ----
if section acked; then
cat >acked.yaml <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: acked}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 4
      restartPolicy: Never
      template: {spec: {containers: [{name: tensorflow, command: [sleep, "60"]}]}}
YAML
expect_exit 0 "acked: detach" -- "$DTRAIN" run acked.yaml --detach --stop-grace 1
if $PY "$DATA/acked.py" runs/acked acked training 4 400 >"$TMP/acked" 2>&1; then
    pass "acked: $(cat "$TMP/acked")"
else
    fail "acked: $(head -c 1500 "$TMP/acked")"
fi
expect_exit 0 "acked: resume (the journal replays)" -- "$DTRAIN" run --resume runs/acked --detach
"$DTRAIN" stop acked >/dev/null 2>&1
wait_for finished acked || fail "acked: did not stop"
fi

# ---- bad requests: 4xx with a JSON error, the ledger unchanged ----
if section bad; then
cat >bad.yaml <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: bad}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      template: {spec: {containers: [{name: tensorflow, command: [sleep, "60"]}]}}
YAML
expect_exit 0 "bad: detach" -- "$DTRAIN" run bad.yaml --detach --stop-grace 1
url=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' runs/bad/master.json)
token=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' runs/bad/master.json)
api() { # METHOD PATH BODY [TOKEN|none]: prints "STATUS BODY"
    local auth="Authorization: Bearer ${4:-$token}"
    [ "${4:-}" = none ] && auth="X-No-Token: 1"
    curl -s -o "$TMP/body" -w '%{http_code}' -X "$1" -H "$auth" \
        -H 'Content-Type: application/json' --data-binary "$3" "$url$2"
    echo " $(cat "$TMP/body")"
}
# ledger_state: the datasets' progress without the count of refused reports (a refusal
# changes nothing but that statistic).
ledger_state() { api GET $D "" | sed 's/"late_reports_refused":[0-9]*//g'; }
D=/v1/jobs/bad/datasets
expect_code() { # TITLE WANT TEXT METHOD PATH BODY [TOKEN]
    local title=$1 want=$2 text=$3; shift 3
    local got
    got=$(api "$@")
    case "$got" in
        "$want "*"$text"*) pass "$title" ;;
        *) fail "$title: got $got" ;;
    esac
}
expect_code "register" 200 '"registered"' POST $D '{"name":"training","dataset_size":100,"batch_size":10,"num_epochs":1,"num_minibatches_per_shard":1}'
fetched=$(api POST $D/training/fetch '{"replica":"worker-0"}')
case "$fetched" in *'"status":"shard"'*) pass "fetch" ;; *) fail "fetch: $fetched" ;; esac
# a shuffled dataset's shard carries its indices unless the fetch asks for none
expect_code "register a shuffled dataset" 200 '"registered"' POST $D '{"name":"mixed","dataset_size":100,"batch_size":10,"num_epochs":1,"num_minibatches_per_shard":1,"shuffle":true,"seed":3}'
expect_code "fetch: the indices" 200 '"indices":[' POST $D/mixed/fetch '{"replica":"worker-0"}'
got=$(api POST $D/mixed/fetch '{"replica":"worker-0","indices":false}')
case "$got" in
    "200 "*'"status":"shard"'*'"end":'*) case "$got" in *indices*) fail "fetch without indices: $got" ;; *) pass "fetch without indices" ;; esac ;;
    *) fail "fetch without indices: $got" ;;
esac
expect_code "fetch: indices not a boolean 400" 400 'indices: expected true or false' POST $D/mixed/fetch '{"replica":"worker-0","indices":0}'
before=$(ledger_state)
expect_code "unknown dataset: 404" 404 'evaluation' POST $D/evaluation/fetch '{"replica":"worker-0"}'
expect_code "report of a shard not held: 409" 409 'does not hold shard 5' POST $D/training/report '{"replica":"worker-0","epoch":0,"id":5,"lease":1,"ok":true}'
expect_code "report with a wrong lease: 409" 409 'late report refused' POST $D/training/report '{"replica":"worker-0","epoch":0,"id":0,"lease":999,"ok":true}'
expect_code "unknown replica: 400" 400 "has no replica 'worker-9'" POST $D/training/fetch '{"replica":"worker-9"}'
expect_code "malformed JSON: 400" 400 '"error"' POST $D/training/report '{"replica":"worker-0",'
expect_code "epoch not an integer: 400" 400 'epoch: expected an integer' POST $D/training/report '{"replica":"worker-0","epoch":"x","id":0,"lease":1}'
expect_code "fetch: an unknown field 400" 400 'replica_id: unknown field (the body is {replica, request, report, reports, count, indices})' POST $D/training/fetch '{"replica":"worker-0","replica_id":1}'
expect_code "fetch: an unknown field of its report 400" 400 'report.leese: unknown field' POST $D/training/fetch '{"replica":"worker-0","report":{"epoch":0,"id":0,"lease":1,"ok":true,"leese":2}}'
expect_code "report: an unknown field 400" 400 'okay: unknown field (the body is {replica, epoch, id, lease, ok, message})' POST $D/training/report '{"replica":"worker-0","epoch":0,"id":0,"lease":1,"ok":true,"okay":false}'
big=$($PY -c 'print("{\"accuracy\": 0.5, \"blob\": \"" + "x" * 20000 + "\"}")')
expect_code "replica report beyond 16 KiB: 413" 413 'a report of 20026 bytes (as compact JSON) is larger than the 16384' POST /v1/jobs/bad/replicas/worker-0/report "$big"
expect_code "replica report within the bound" 200 '"recorded":true' POST /v1/jobs/bad/replicas/worker-0/report '{"accuracy": 0.5}'
expect_code "bad batch_size: 400" 400 'batch_size' POST $D '{"name":"other","dataset_size":100,"batch_size":0,"num_epochs":1,"num_minibatches_per_shard":1}'
expect_code "conflicting re-registration: 409" 409 'training' POST $D '{"name":"training","dataset_size":101,"batch_size":10,"num_epochs":1,"num_minibatches_per_shard":1}'
expect_code "wrong token: 401" 401 '"error"' POST $D/training/fetch '{"replica":"worker-0"}' wrong-token
expect_code "missing token: 401" 401 '"error"' POST $D/training/fetch '{"replica":"worker-0"}' none
after=$(ledger_state)
[ "$before" = "$after" ] && pass "bad requests left the ledger unchanged" ||
    fail "ledger changed: $before / $after"
"$DTRAIN" stop bad >/dev/null 2>&1
wait_for finished bad || fail "bad: did not stop"
fi

finish
