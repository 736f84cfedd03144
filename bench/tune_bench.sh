#!/usr/bin/env bash
# tune_bench.sh - issue 18's benchmark, one run.
#
# 1. Search: the Fashion-MNIST MLP (examples/fashion_mnist_mlp.yaml as the trial template,
#    threads 1 so two trials share the 2 cores) over 24 configurations: learning rate (4) x
#    hidden units of the first layer (3) x batch size (2), EPOCHS epochs at most. The full
#    grid (every configuration for EPOCHS epochs) against ASHA (24 trials from the same lists,
#    rungs from 1 epoch, reduction factor 4, up to EPOCHS). For each: the best eval accuracy,
#    the total training steps of all trials (a trial's steps: its result's train.steps, or for
#    a trial paused at a rung and never promoted, its newest checkpoint's step) and the wall
#    time; and ASHA's steps over the grid's. Goal: ASHA within 0.005 of the grid's best with at
#    most a third of its steps. (A paused trial trains on until its job's stop lands: a
#    fraction of an epoch, counted in ASHA's steps.)
# 2. The server: the time from the first submit to every replica started for 20 jobs queued
#    at once (a server with room for all), and the server's CPU (its process's user+system
#    time over a window) while 100 jobs wait behind one that holds the whole capacity.
#
#   bash bench/tune_bench.sh [--quick] [--epochs N] [--keep]
#
# --quick: a smoke run that proves the script works in a few minutes: a 3000/1000-image
# subset of Fashion-MNIST (the first images of the real files), 8 configurations, 2 epochs, 5
# and 10 jobs for the server figures (its search figures mean nothing: epochs of a few hundred
# steps end before a pause lands). The full run (12 epochs) takes some 10-20 minutes on 2
# cores.
# Needs build/dtrain (or DTRAIN_BIN), Debian's dataset-fashion-mnist, /usr/bin/python3.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${DTRAIN_BIN:-$ROOT/build/dtrain}
PY=/usr/bin/python3
QUICK=0
EPOCHS=12
KEEP=0
while [ $# -gt 0 ]; do
    case $1 in
    --quick) QUICK=1 ;;
    --epochs) EPOCHS=$2; shift ;;
    --keep) KEEP=1 ;;
    *) echo "usage: bash bench/tune_bench.sh [--quick] [--epochs N] [--keep]" >&2; exit 2 ;;
    esac
    shift
done
[ -x "$BIN" ] || { echo "tune_bench.sh: $BIN is not built" >&2; exit 1; }
TMP=$(mktemp -d /tmp/dtrain-tune-bench-XXXXXX)
export DTRAIN_HOME=$TMP/home
unset DTRAIN_SERVER DTRAIN_SERVER_TOKEN
SERVER_PID=
cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
    for m in "$TMP"/*/server/jobs/*/master.json "$TMP"/srv*/jobs/*/master.json; do
        [ -f "$m" ] && "$BIN" stop --now "$(dirname "$m")" >/dev/null 2>&1 || true
    done
    if [ "$KEEP" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

DATA=/usr/share/datasets/fashion-mnist
LRS='["0.0003", "0.001", "0.003", "0.01"]'
HIDDEN='["64", "256", "512"]'
BATCH='["32", "128"]'
JOBS_STARTED=20
JOBS_WAITING=100
CPU_WINDOW=20
if [ "$QUICK" = 1 ]; then
    EPOCHS=2
    LRS='["0.001", "0.01"]'
    HIDDEN='["32", "128"]'
    BATCH='["32", "128"]'
    JOBS_STARTED=5
    JOBS_WAITING=10
    CPU_WINDOW=3
    # the first 3000 training and 1000 test images of the real files
    mkdir -p "$TMP/data"
    $PY - "$DATA" "$TMP/data" <<'PYEOF'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for name, n in (("train", 3000), ("t10k", 1000)):
    for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        raw = gzip.open(f"{src}/{name}-{kind}.gz").read()
        ndim = raw[3]
        dims = list(struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim]))
        item = 1
        for d in dims[1:]:
            item *= d
        body = raw[4 + 4 * ndim:4 + 4 * ndim + n * item]
        dims[0] = n
        with gzip.open(f"{dst}/{name}-{kind}.gz", "wb") as f:
            f.write(raw[:4] + struct.pack(">" + "I" * ndim, *dims) + body)
PYEOF
    DATA=$TMP/data
fi
ncfg=$($PY -c "import json; print(len(json.loads('$LRS')) * len(json.loads('$HIDDEN')) * len(json.loads('$BATCH')))")

# The trial template: the example with placeholders, indented under trialSpec.
template() {
    sed -e "s|/usr/share/datasets/fashion-mnist|$DATA|" \
        -e 's|learning_rate: 0.001|learning_rate: ${trialParameters.lr}|' \
        -e 's|^\( *\)- {type: dense, name: fc1, units: 256, activation: relu}|\1- type: dense\n\1  name: fc1\n\1  units: ${trialParameters.hidden}\n\1  activation: relu|' \
        -e 's|batch_size: 64|batch_size: ${trialParameters.batch}|' \
        -e 's|epochs: 10|epochs: ${trialParameters.epochs}|' \
        -e 's|threads: 2|threads: 1|' \
        -e '/^#/d' examples/fashion_mnist_mlp.yaml | sed 's|^|      |'
}
template | grep -q 'trialParameters.hidden' && template | grep -q 'trialParameters.epochs' ||
    { echo "tune_bench.sh: examples/fashion_mnist_mlp.yaml no longer has the fields replaced" >&2; exit 1; }

experiment() { # NAME ALGORITHM SETTINGS_YAML EPOCHS_PARAM_YAML
    cat <<YAML
apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata:
  name: $1
spec:
  objective:
    type: maximize
    objectiveMetricName: eval/accuracy
    metricStrategies: [{name: eval/accuracy, value: latest}]
  algorithm:
    algorithmName: $2
$3
  parallelTrialCount: 2
  maxTrialCount: $ncfg
  maxFailedTrialCount: 3
  parameters:
    - {name: lr, parameterType: discrete, feasibleSpace: {list: $LRS}}
    - {name: hidden, parameterType: discrete, feasibleSpace: {list: $HIDDEN}}
    - {name: batch, parameterType: discrete, feasibleSpace: {list: $BATCH}}
$4
  trialTemplate:
    trialParameters:
      - {name: lr, reference: lr}
      - {name: hidden, reference: hidden}
      - {name: batch, reference: batch}
      - {name: epochs, reference: epochs}
    trialSpec:
$(template)
YAML
}

experiment grid grid "" "    - {name: epochs, parameterType: discrete, feasibleSpace: {list: [\"$EPOCHS\"]}}" >"$TMP/grid.yaml"
experiment asha asha "    algorithmSettings:
      - {name: resource_name, value: epochs}
      - {name: min_resource, value: \"1\"}
      - {name: reduction_factor, value: \"4\"}
      - {name: random_state, value: \"1\"}" \
    "    - {name: epochs, parameterType: int, feasibleSpace: {min: \"1\", max: \"$EPOCHS\"}}" >"$TMP/asha.yaml"

echo "== tune_bench: $ncfg configurations, up to $EPOCHS epochs$([ "$QUICK" = 1 ] && echo ' (--quick: a Fashion-MNIST subset)')"
echo "   CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: *//'); nproc $(nproc)"

search() { # NAME -> prints "best steps seconds"
    local t0 t1
    t0=$(date +%s.%N)
    "$BIN" tune "$TMP/$1.yaml" --dir "$TMP/$1" --seed 1 >"$TMP/$1.out" 2>&1 ||
        { echo "tune_bench.sh: the $1 search failed:" >&2; tail -20 "$TMP/$1.out" >&2; exit 1; }
    t1=$(date +%s.%N)
    $PY - "$TMP/$1/state.json" "$t0" "$t1" <<'PYEOF'
import glob, json, os, re, sys
s = json.load(open(sys.argv[1]))
steps, best = 0, None
for t in s["trials"]:
    d, n = t["jobDir"], 0
    try:
        r = json.load(open(os.path.join(d, "result.json")))
        for rep in r.get("replicas", {}).values():
            n = max(n, rep.get("result", {}).get("train", {}).get("steps", 0))
    except (OSError, ValueError):
        pass
    if not n:  # paused at a rung, never promoted: its newest checkpoint
        for c in glob.glob(os.path.join(d, "replicas", "*", "checkpoints", "ckpt-*.safetensors")):
            n = max(n, int(re.search(r"ckpt-(\d+)", c).group(1)))
    steps += n
    if t["state"] == "Succeeded" and t.get("final") is not None:
        best = t["final"] if best is None else max(best, t["final"])
print(best, steps, float(sys.argv[3]) - float(sys.argv[2]), len(s["trials"]))
PYEOF
}

read -r g_best g_steps g_wall g_n < <(search grid)
echo "RESULT grid: best eval accuracy $g_best, $g_steps training steps, $(printf %.1f "$g_wall") s wall, $g_n trials"
read -r a_best a_steps a_wall a_n < <(search asha)
echo "RESULT asha: best eval accuracy $a_best, $a_steps training steps, $(printf %.1f "$a_wall") s wall, $a_n trials"
$PY - "$g_best" "$g_steps" "$a_best" "$a_steps" "$QUICK" <<'PYEOF'
import sys
gb, gs, ab, as_ = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
ok = gb - ab <= 0.005 and as_ * 3 <= gs
verdict = "met" if ok else "NOT met"
if sys.argv[5] == "1":  # epochs of a few hundred steps end before a pause can land
    verdict = "no verdict in a --quick run"
print("RESULT asha/grid steps %.3f (goal <= 0.333); accuracy gap %.4f (goal <= 0.005): %s" %
      (as_ / gs, gb - ab, verdict))
PYEOF

# ---- the server ----
server() { # DIR CPUS
    "$BIN" server --dir "$1" --cpus "$2" >"$1.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 600); do [ -f "$1/server.json" ] && break; sleep 0.05; done
    [ -f "$1/server.json" ] || { echo "tune_bench.sh: the server did not start: $(cat "$1.log")" >&2; exit 1; }
}
stop_server() {
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}
# A one-replica TFJob whose replica sleeps: its demand is 1 CPU.
sleeper() { # NAME SECONDS
    cat <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: $1}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - {name: tensorflow, image: sleeper, command: ["sleep", "$2"]}
YAML
}

mkdir -p "$TMP/jobs"
for i in $(seq "$JOBS_WAITING"); do sleeper "q-$i" 600 >"$TMP/jobs/q-$i.yaml"; done
for i in $(seq "$JOBS_STARTED"); do sleeper "s-$i" 600 >"$TMP/jobs/s-$i.yaml"; done
sleeper hog 600 >"$TMP/jobs/hog.yaml"

# 20 jobs at once into a server with room for them all: submit to every replica Running
server "$TMP/srv1" "$JOBS_STARTED"
$PY - "$TMP/srv1/server.json" "$TMP/jobs" "$JOBS_STARTED" <<'PYEOF'
import json, sys, time, urllib.request
sj = json.load(open(sys.argv[1]))
url, tok, n = sj["url"], sj["token"], int(sys.argv[3])
H = {"Authorization": "Bearer " + tok}
def req(method, path, body=None):
    r = urllib.request.Request(url + path, data=body, method=method, headers=H)
    with urllib.request.urlopen(r, timeout=30) as f:
        return f.status, json.loads(f.read() or b"null")
t0 = time.time()
for i in range(1, n + 1):
    st, _ = req("POST", "/v1/jobs", open(f"{sys.argv[2]}/s-{i}.yaml", "rb").read())
    assert st == 201, st
started = {}
deadline = t0 + 300
while len(started) < n and time.time() < deadline:
    for i in range(1, n + 1):
        name = f"s-{i}"
        if name in started:
            continue
        try:
            st, s = req("GET", f"/v1/jobs/{name}")
        except Exception:  # noqa: BLE001 - a master still starting: asked again
            continue
        reps = s.get("replicas") or []
        if reps and all(r.get("state") == "Running" for r in reps):
            started[name] = time.time() - t0
    time.sleep(0.05)
if len(started) < n:
    print(f"tune_bench.sh: only {len(started)} of {n} jobs started in 300 s", file=sys.stderr)
    sys.exit(1)
print("RESULT server: %d jobs submitted at once: every replica Running %.2f s after the first "
      "submit (median job %.2f s)" % (n, max(started.values()),
                                      sorted(started.values())[n // 2]))
for i in range(1, n + 1):
    req("POST", f"/v1/jobs/s-{i}/stop?now=true")
PYEOF
stop_server

# 100 jobs waiting behind one that holds the capacity: the server's CPU meanwhile
server "$TMP/srv2" 1
$PY - "$TMP/srv2/server.json" "$TMP/jobs" "$JOBS_WAITING" "$SERVER_PID" "$CPU_WINDOW" <<'PYEOF'
import json, os, sys, time, urllib.request
sj = json.load(open(sys.argv[1]))
url, tok, n, pid, window = sj["url"], sj["token"], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
H = {"Authorization": "Bearer " + tok}
def req(method, path, body=None):
    r = urllib.request.Request(url + path, data=body, method=method, headers=H)
    with urllib.request.urlopen(r, timeout=30) as f:
        return f.status, json.loads(f.read() or b"null")
assert req("POST", "/v1/jobs", open(f"{sys.argv[2]}/hog.yaml", "rb").read())[0] == 201
for i in range(1, n + 1):
    assert req("POST", "/v1/jobs", open(f"{sys.argv[2]}/q-{i}.yaml", "rb").read())[0] == 201
_, srv = req("GET", "/v1/server")
assert len(srv["queue"]) == n, srv
tick = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
c0, t0 = cpu(), time.time()
time.sleep(window)  # the measurement's window: nothing to wait for but time
c1, t1 = cpu(), time.time()
print("RESULT server: %d jobs waiting: the server used %.3f%% of a CPU over %.0f s "
      "(%.3f s of CPU)" % (n, 100 * (c1 - c0) / (t1 - t0), t1 - t0, c1 - c0))
for i in range(1, n + 1):
    req("POST", f"/v1/jobs/q-{i}/stop")
req("POST", "/v1/jobs/hog/stop?now=true")
PYEOF
stop_server
echo "tune_bench: done"
