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
# 2. The server (bench/server_bench.sh, run from here): the time from the capacity freed to
#    every replica started for 20 queued jobs, and the server's CPU while 100 jobs wait.
#
#   bash bench/tune_bench.sh [--quick] [--epochs N] [--keep]
#
# --quick: a smoke run that proves the script works in a few minutes: a 3000/1000-image
# subset of Fashion-MNIST (the first images of the real files), 8 configurations, 2 epochs (its
# search figures mean nothing: epochs of a few hundred steps end before a pause lands). The
# full run (12 epochs) takes some 10-20 minutes on 2 cores.
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
cleanup() {
    for m in "$TMP"/*/server/jobs/*/master.json; do
        [ -f "$m" ] && "$BIN" stop --now "$(dirname "$m")" >/dev/null 2>&1 || true
    done
    if [ "$KEEP" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

DATA=/usr/share/datasets/fashion-mnist
LRS='["0.0003", "0.001", "0.003", "0.01"]'
HIDDEN='["64", "256", "512"]'
BATCH='["32", "128"]'
if [ "$QUICK" = 1 ]; then
    EPOCHS=2
    LRS='["0.001", "0.01"]'
    HIDDEN='["32", "128"]'
    BATCH='["32", "128"]'
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

# ---- the server: bench/server_bench.sh's figures ----
DTRAIN_BIN=$BIN bash bench/server_bench.sh | sed 's/^/RESULT server /'
echo "tune_bench: done"
