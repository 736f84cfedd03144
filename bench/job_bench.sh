#!/usr/bin/env bash
# job_bench.sh - the master's two figures of issue 3:
#   1. time from `dtrain run` to every replica started, for 1 chief + 8 workers + 4 PS
#      running a trivial command (bash that notes the time it started, then sleeps);
#   2. status requests per second to the master on loopback with keep-alive
#      (build/http_rps with 1, 2 and 4 connections, GET /v1/jobs/NAME).
# A TFJob on Kubernetes takes seconds to start its pods; no peer runs here.
#
#   bash bench/job_bench.sh [RUNS]      (default 5 start-up runs; needs build/)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/dtrain
RUNS=${1:-5}
TMP=$(mktemp -d /tmp/dtrain-jobbench-XXXXXX)
export DTRAIN_HOME=$TMP/home
trap 'pkill -KILL -f "$TMP/started" 2>/dev/null; rm -rf "$TMP"' EXIT

spec() { # TYPE COUNT
    cat <<YAML
    $1:
      replicas: $2
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: tensorflow
              command: ["bash", "-c", "echo \$EPOCHREALTIME >>$TMP/started; exec sleep 30"]
YAML
}
{
    printf 'apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: startup}\nspec:\n  tfReplicaSpecs:\n'
    spec Chief 1; spec Worker 8; spec PS 4
} >"$TMP/job.yaml"

echo "== start-up: 1 chief + 8 workers + 4 PS, $RUNS runs =="
best=999999; sum=0; dbest=999999
for i in $(seq "$RUNS"); do
    rm -f "$TMP/started"
    t0=$EPOCHREALTIME
    "$BIN" run "$TMP/job.yaml" --job-dir "$TMP/run$i" --detach --stop-grace 1 >/dev/null
    t1=$EPOCHREALTIME
    for _ in $(seq 500); do
        [ -f "$TMP/started" ] && [ "$(wc -l <"$TMP/started")" -ge 13 ] && break
        sleep 0.01
    done
    last=$(sort -n "$TMP/started" | tail -1)
    ms=$(awk -v a="$t0" -v b="$last" 'BEGIN { printf "%.1f", (b - a) * 1000 }')
    dms=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) * 1000 }')
    echo "run $i: every replica started after $ms ms (dtrain run --detach returned after $dms ms)"
    best=$(awk -v a="$best" -v b="$ms" 'BEGIN { print (b < a ? b : a) }')
    dbest=$(awk -v a="$dbest" -v b="$dms" 'BEGIN { print (b < a ? b : a) }')
    sum=$(awk -v a="$sum" -v b="$ms" 'BEGIN { print a + b }')
    if [ "$i" -lt "$RUNS" ]; then "$BIN" stop "$TMP/run$i" >/dev/null; fi
done
echo "start-up: best $best ms, mean $(awk -v s="$sum" -v n="$RUNS" 'BEGIN { printf "%.1f", s / n }') ms (target < 100 ms); detach returns in $dbest ms at best"

echo "== status requests/s (job of the last run, 13 replicas) =="
url=$(grep -o '"url": "[^"]*"' "$TMP/run$RUNS/master.json" | sed 's/.*: "//; s/"$//')
token=$(grep -o '"token": "[^"]*"' "$TMP/run$RUNS/master.json" | sed 's/.*: "//; s/"$//')
for c in 1 2 4; do
    printf 'connections %d: ' "$c"
    build/http_rps "$url/v1/jobs/startup" "$token" --connections "$c" --seconds 3
done
"$BIN" stop "$TMP/run$RUNS" >/dev/null
