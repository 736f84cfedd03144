#!/usr/bin/env bash
# kube_bench.sh - the kubernetes backend against the stand-in API server and kubelet
# (tests/tools/kube/; needs root):
#   start    a TFJob of 1 chief + 8 workers + 4 PS (commands: sleep): the API requests of
#            its start, by verb and resource (creates grow with replicas; one watch; no
#            polling), and the time from `dtrain run --backend kubernetes` until every
#            replica's pod exists
#   idle     a TFJob of 1 chief + 99 workers, all asleep: the master's CPU time per second
#            while the job runs and nothing changes (its watch only), over --idle S seconds
# No peer runs here: Kubeflow's training operator (Go, a cluster) is not on this machine;
# the figures are dtrain's alone, with the stand-in's own cost included in the wall times.
#
#   bash bench/kube_bench.sh [--idle SECONDS] [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."
IDLE=20
BUILD=1
while [ $# -gt 0 ]; do
    case $1 in
    --idle) IDLE=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    *) echo "usage: bash bench/kube_bench.sh [--idle SECONDS] [--no-build]" >&2; exit 2 ;;
    esac
done
[ $BUILD = 1 ] && bash scripts/setup.sh release >/dev/null
export DTRAIN_BIN=$PWD/build/dtrain DT_SOURCE_DIR=$PWD
. tests/lib.sh
. tests/kube_lib.sh
trap 'kill $RUN 2>/dev/null; kube_stop; rm -rf "$TMP"' EXIT
RUN=
cd "$TMP"
kube_start

tfjob() { # tfjob NAME WORKERS PS
    cat <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: $1}
spec:
  runPolicy: {cleanPodPolicy: All}
  tfReplicaSpecs:
    Chief:
      replicas: 1
      template: {spec: {containers: [{name: tensorflow, image: busybox, command: [sleep, "3600"]}]}}
    Worker:
      replicas: $2
      template: {spec: {containers: [{name: tensorflow, image: busybox, command: [sleep, "3600"]}]}}
YAML
    [ "$3" -gt 0 ] && cat <<YAML
    PS:
      replicas: $3
      template: {spec: {containers: [{name: tensorflow, image: busybox, command: [sleep, "3600"]}]}}
YAML
    return 0
}
pods_of() { kube_count "/api/v1/namespaces/default/pods?labelSelector=training.kubeflow.org%2Fjob-name%3D$1,training.kubeflow.org%2Foperator-name%3Ddtrain"; }
running_of() { kube_count "/api/v1/namespaces/default/pods?labelSelector=training.kubeflow.org%2Fjob-name%3D$1,training.kubeflow.org%2Foperator-name%3Ddtrain&fieldSelector=status.phase%3DRunning"; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"

# ---- start: 13 replicas ----
tfjob start 8 4 >start.yaml
kube_api POST /_standin/requests/reset >/dev/null
t0=$(date +%s.%N)
"$DTRAIN" run start.yaml --backend kubernetes --kubeconfig "$KUBE_DIR/kubeconfig" >start.out 2>&1 &
RUN=$!
polls=0
until [ "$(pods_of start)" -ge 13 ]; do polls=$((polls + 1)); sleep 0.02; done
polls=$((polls + 1))
t1=$(date +%s.%N)
sleep 2 # let the last requests of the start land before they are counted
kube_api GET /_standin/requests >start.requests.json
echo "start: 13 replica pods created $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}') s after dtrain run (job submit, master pod scheduled and started, 13 services + 13 pods)"
/usr/bin/python3 - start.requests.json "$polls" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["requests"]
polls = int(sys.argv[2])
print("start: API requests (the laptop's, the master's, and the stand-in kubelet's own reads of")
print("       Secrets and ConfigMaps and its status patches; this benchmark's %d polling lists"
      " left out):" % polls)
for k, n in sorted(r.items(), key=lambda kv: (-kv[1], kv[0])):
    if k == "list /api/v1/namespaces/{namespace}/pods":
        n -= polls
    if n > 0:
        print(f"  {n:5d}  {k}")
PY
kill $RUN 2>/dev/null; wait $RUN 2>/dev/null || true; RUN=
kube_api DELETE /apis/batch/v1/namespaces/default/jobs/start-master '{"propagationPolicy":"Background"}' >/dev/null

# ---- idle: 100 replicas, the master's CPU ----
tfjob idle 99 0 >idle.yaml
"$DTRAIN" run idle.yaml --backend kubernetes --kubeconfig "$KUBE_DIR/kubeconfig" >idle.out 2>&1 &
RUN=$!
until [ "$(running_of idle)" -ge 100 ]; do sleep 0.5; done
sleep 3
mpid=$(pgrep -f -- "--in-cluster.*--job-dir /var/lib/dtrain/jobs/idle" | head -1)
cpu_ns() { # every thread's time on a CPU (schedstat: nanoseconds)
    local t=0 n
    for f in /proc/"$mpid"/task/*/schedstat; do read -r n _ <"$f"; t=$((t + n)); done
    echo "$t"
}
c0=$(cpu_ns); w0=$(date +%s.%N)
sleep "$IDLE"
c1=$(cpu_ns); w1=$(date +%s.%N)
awk -v c0="$c0" -v c1="$c1" -v w0="$w0" -v w1="$w1" -v rss="$(awk '/VmRSS/{print $2}' /proc/$mpid/status)" \
    'BEGIN{printf "idle: 100 replicas running; the master used %.3f ms CPU per second over %.0f s (%.4f%% of a core), RSS %d KiB\n", (c1-c0)/1e6/(w1-w0), w1-w0, (c1-c0)/1e7/(w1-w0), rss}'
