#!/usr/bin/env bash
# shard_worker_test.sh - the shard service end to end with the C client: a TFJob whose
# workers are $DT_TOOLS_DIR/shard_worker processes (tests/tools/shard_worker.c) share a
# dataset through the master. Checked from their logs: every shard of every epoch is
# reported ok exactly once, the indices of each epoch sum to 0+1+...+(N-1), a failed
# report re-queues the shard, and a worker killed while holding a shard loses it to the
# others (OnFailure restarts it) without a shard counted twice.
source "$(dirname "$0")/lib.sh"
TOOLS=${DT_TOOLS_DIR:?DT_TOOLS_DIR must point at the built test tools}
WORKER="$TOOLS/shard_worker"
export DTRAIN_HOME="$TMP/home"
cd "$TMP"
# Every worker of this test has $TMP (its --out file) on its command line.
cleanup() { pkill -KILL -f "$TMP/" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

# job NAME WORKERS ARGS...: NAME.yaml, a TFJob of WORKERS shard_workers (OnFailure).
job() {
    local name=$1 n=$2; shift 2
    local args=""
    for a in "$@"; do args="$args, \"$a\""; done
    cat >"$name.yaml" <<EOF
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: $name}
spec:
  successPolicy: AllWorkers
  tfReplicaSpecs:
    Worker:
      replicas: $n
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: tensorflow
              command: ["$WORKER"]
              args: [--out, "$TMP/$name.out"${args}]
EOF
}

# check_out NAME N EPOCHS SHARDS: every (epoch, id) reported ok once; index sums right.
check_out() {
    local name=$1 n=$2 epochs=$3 shards=$4 f="$TMP/$1.out"
    local ok dup sums
    ok=$(awk '$7 == "ok"' "$f" | wc -l)
    dup=$(awk '$7 == "ok" { print $2, $3 }' "$f" | sort | uniq -d | wc -l)
    sums=$(awk -v n="$n" -v e="$epochs" '$7 == "ok" { s[$2] += $8; c[$2] += $9 }
        END { for (i = 0; i < e; i++) if (s[i] != n * (n - 1) / 2 || c[i] != n) bad++; print bad + 0 }' "$f")
    if [ "$ok" -eq $((epochs * shards)) ] && [ "$dup" -eq 0 ] && [ "$sums" -eq 0 ]; then
        pass "$name: $ok shards ok, each once, every sample of every epoch"
    else
        fail "$name: $ok ok lines (want $((epochs * shards))), $dup duplicates, $sums bad epochs: $(head -5 "$f")"
    fi
}

# ---- three workers, shuffled, one failed report ----
job three 3 --dataset training --size 1000 --batch 10 --epochs 3 --minibatches 5 --shuffle \
    --seed 11 --sleep-ms 5 --fail-once-at 4
"$DTRAIN" run three.yaml --stop-grace 1 >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc -eq 0 ] && pass "three: job succeeded" || fail "three: exit $rc: $(tail -5 "$TMP/err")"
check_out three 1000 3 20
[ "$(awk '$7 == "failed"' three.out | wc -l)" -eq 3 ] && pass "three: each worker failed one shard, re-queued" ||
    fail "three: failed lines: $(grep -c failed three.out)"
[ "$(awk '{ print $1 }' three.out | sort -u | wc -l)" -eq 3 ] && pass "three: all three workers trained" ||
    fail "three: workers: $(awk '{ print $1 }' three.out | sort | uniq -c)"
R=runs/three/result.json
grep -q '"state": "done"' $R && [ "$(grep -c '"samples_done": 1000,' $R)" -eq 3 ] &&
    grep -q '"failures": 3' $R && pass "three: result.json: dataset done, 3 x 1000 samples, 3 failures" ||
    fail "three: result.json: $(tr -d ' \n' <$R | grep -o '"data".*' | head -c 800)"

# ---- a worker killed while it holds a shard: its shard goes to the others ----
# The first worker to fetch its 3rd shard holds it (tests/tools/shard_worker.c --hold-at)
# and is killed then: a kill at a moment of the test's own could fall between a report the
# master has counted and its line in killed.out.
job killed 2 --dataset training --size 400 --batch 10 --epochs 2 --minibatches 2 --sleep-ms 20 \
    --hold-at 3 --hold-file "$TMP/killed.hold"
"$DTRAIN" run killed.yaml --detach --stop-grace 1 >"$TMP/out" 2>"$TMP/err" ||
    fail "killed: detach: $(cat "$TMP/err")"
wait_for test -s killed.hold || fail "killed: no worker held its 3rd shard: $(cat killed.out runs/killed/master.log 2>&1 | tail -5)"
holder=; [ -s killed.hold ] && read -r holder _ <killed.hold
pid=$(/usr/bin/python3 -c 'import json,sys
for r in json.load(open(sys.argv[1]))["replicas"]:
    if r["name"] == sys.argv[2] and r.get("pid"): print(r["pid"])' runs/killed/status.json "$holder")
if [ -n "$pid" ]; then kill -KILL -- "-$pid"; else fail "killed: no pid of '$holder' in status.json"; fi
for _ in $(seq 600); do
    grep -q '"phase": "\(Succeeded\|Failed\)"' runs/killed/status.json 2>/dev/null && break
    sleep 0.1
done
grep -q '"phase": "Succeeded"' runs/killed/status.json && pass "killed: job succeeded" ||
    fail "killed: status: $(head -c 800 runs/killed/status.json)"
check_out killed 400 2 20
grep -q 're-queued' runs/killed/master.log && pass "killed: the master re-queued the killed worker's shard" ||
    fail "killed: master.log: $(cat runs/killed/master.log)"
"$DTRAIN" stop runs/killed >/dev/null 2>&1

no_worker_left() { ! pgrep -f "$TMP/" >/dev/null; }
if wait_for no_worker_left; then pass "no worker left"; else fail "workers left: $(pgrep -af "$TMP/")"; fi
finish
