#!/usr/bin/env bash
# shard_bench.sh - the shard service's figures of issue 4:
#   1. fetch-and-report round trips per second from 1 and 4 concurrent clients on loopback,
#      as two requests (fetch, report) and as one (the report rides on the next fetch)
#      (build/shard_bench: each client a thread with its own connection, acting as
#      worker-i; target >= 20k/s with 4), through the C client and with raw sockets (the
#      master's capacity when the clients cost little CPU);
#   2. the master's CPU share at 1k shards/s (4 clients paced to 1000 round trips/s in all;
#      utime + stime of the master from /proc/PID/stat over the wall time).
# The master is a real one (`dtrain run --detach`) for a TFJob with 4 workers that only
# sleep, so that worker-0..3 are replicas of the job. Clients and master share the cores.
#
#   bash bench/shard_bench.sh [SECONDS]      (default 5 s per run; needs build/)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/dtrain
BENCH=build/shard_bench
SECS=${1:-5}
TMP=$(mktemp -d /tmp/dtrain-shardbench-XXXXXX)
export DTRAIN_HOME=$TMP/home
trap '"$BIN" stop "$TMP/job" >/dev/null 2>&1 || true; rm -rf "$TMP"' EXIT

cat >"$TMP/job.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: shardbench}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 4
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: tensorflow
              command: [sleep, "600"]
YAML
"$BIN" run "$TMP/job.yaml" --job-dir "$TMP/job" --detach --stop-grace 1 >/dev/null
url=$(grep -o '"url": "[^"]*"' "$TMP/job/master.json" | sed 's/.*: "//; s/"$//')
token=$(grep -o '"token": "[^"]*"' "$TMP/job/master.json" | sed 's/.*: "//; s/"$//')
pid=$(grep -o '"pid": [0-9]*' "$TMP/job/master.json" | grep -o '[0-9]*$')
echo "master $url (pid $pid); $(nproc) cores; shards of 64 x 4 samples, unshuffled"

echo "== round trips/s, unpaced: the C client (libcurl), then raw sockets (bench/http_rps style);"
echo "   each round trip as a fetch + a report (2 requests), then as one fetch carrying the report =="
n=0
for client in "" --raw; do
    for req in "" --combined; do
        for t in 1 4; do
            n=$((n + 1))
            "$BENCH" --url "$url" --token "$token" --dataset "max$n" --threads "$t" \
                --seconds "$SECS" --master-pid "$pid" $client $req
        done
    done
done
echo "== round trips/s, unpaced, the C client fetching K shards per request (reports of the K before"
echo "   riding on it: dt_shard_fetch_many) =="
for k in 4 16; do
    for t in 1 4; do
        n=$((n + 1))
        "$BENCH" --url "$url" --token "$token" --dataset "max$n" --threads "$t" \
            --seconds "$SECS" --master-pid "$pid" --per-request "$k"
    done
done
echo "== the master's CPU at 1000 shards/s (4 clients) =="
for req in "" --combined; do
    "$BENCH" --url "$url" --token "$token" --dataset "paced$req" --threads 4 --seconds "$SECS" \
        --rate 1000 --master-pid "$pid" $req
done
echo "journal: $(wc -l <"$TMP/job/journal.jsonl") lines, $(du -h "$TMP/job/journal.jsonl" | cut -f1)"
