#!/usr/bin/env bash
# server_bench.sh - the job server's costs (issue 18), one run:
#   start   20 one-worker TFJobs wait behind a job that holds the whole capacity; it ends:
#           the time from then until every one of the 20 jobs' replicas has started (each
#           replica writes a file as its first act)
#   idle    100 jobs wait (the capacity held): the server's CPU time over 20 s
# Usage: bash bench/server_bench.sh [BUILD_DIR]   (default build/)
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
DTRAIN=${DTRAIN_BIN:-$SRC/${1:-build}/dtrain}
PY=/usr/bin/python3
TMP=$(mktemp -d /tmp/dtrain-server-bench-XXXXXX)
export DTRAIN_HOME=$TMP/home
SPID=""
cleanup() {
    touch "$TMP/go"
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null
    for d in "$DTRAIN_HOME"/server/jobs/*; do [ -f "$d/master.json" ] && "$DTRAIN" stop "$d" --now >/dev/null 2>&1; done
    rm -rf "$TMP"
}
trap cleanup EXIT
cd "$TMP"

# job NAME CPUS: one worker asking for CPUS; it says it started, then waits for $TMP/go
job() {
    cat >"$1.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: $1}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - name: tensorflow
              image: none
              command: [$PY, -c, "import os, time\nopen('$TMP/started-$1', 'w').close()\nwhile not os.path.exists('$TMP/go'): time.sleep(0.2)"]
              resources: {requests: {cpu: "$2"}}
YAML
}
now() { date +%s.%N; }

"$DTRAIN" server --cpus 20 >"$TMP/server.log" 2>&1 &
SPID=$!
for _ in $(seq 100); do [ -s "$DTRAIN_HOME/server/server.json" ] && break; sleep 0.1; done
URL=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$DTRAIN_HOME/server/server.json")

# start: a blocker holds the 20 cpus until $TMP/free
cat >blocker.yaml <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: blocker}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - {name: tensorflow, image: none, resources: {requests: {cpu: "20"}},
               command: [$PY, -c, "import os, time\nwhile not os.path.exists('$TMP/free'): time.sleep(0.02)"]}
YAML
"$DTRAIN" submit --server "$URL" blocker.yaml >/dev/null
for i in $(seq -w 1 20); do job "q$i" 1; "$DTRAIN" submit --server "$URL" "q$i.yaml" >/dev/null; done
t0=$(now)
touch "$TMP/free"
until [ "$(ls "$TMP" | grep -c '^started-q')" -eq 20 ]; do sleep 0.02; done
t1=$(now)
echo "start: 20 queued jobs, from the capacity freed to all 20 replicas started: $(printf %.2f "$(echo "$t1 - $t0" | bc)") s"

# idle: 100 jobs wait behind a job holding the capacity
touch "$TMP/go"
for _ in $(seq 600); do
    n=$(curl -s -H "Authorization: Bearer $($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$DTRAIN_HOME/server/server.json")" "$URL/v1/server" |
        $PY -c 'import json,sys; print(len(json.load(sys.stdin)["running"]))')
    [ "$n" = 0 ] && break
    sleep 0.2
done
rm -f "$TMP/go"
job hold 20
"$DTRAIN" submit --server "$URL" hold.yaml >/dev/null
for i in $(seq -w 1 100); do job "w$i" 1; "$DTRAIN" submit --server "$URL" "w$i.yaml" >/dev/null; done
cpu() { awk '{print $14 + $15}' "/proc/$SPID/stat"; }
c0=$(cpu)
sleep 20
c1=$(cpu)
hz=$(getconf CLK_TCK)
echo "idle: 100 jobs waiting (1 running): the server used $(printf %.3f "$(echo "scale=3; ($c1 - $c0) / $hz" | bc)") s of CPU in 20 s ($(printf %.2f "$(echo "scale=4; 100 * ($c1 - $c0) / $hz / 20" | bc)") %)"
