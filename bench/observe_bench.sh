#!/usr/bin/env bash
# observe_bench.sh - what watching a job costs (issue 17): the main job (examples/
# fashion_mnist_ps.yaml: chief, 2 workers, PS, evaluator) with TensorBoard event files written
# and /metrics scraped every second (on), against the same job with training.tensorboard:
# false and no scrape (off), interleaved ROUNDS times in one run; and the event files' size per
# 1000 steps. The job's samples/s is result.json's samples_per_sec (the chief's aggregate).
#
#   bash bench/observe_bench.sh [ROUNDS]      (default 3; needs build/)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/build/dtrain
ROUNDS=${1:-3}
TMP=$(mktemp -d /tmp/dtrain-observe-XXXXXX)
export DTRAIN_HOME=$TMP/home
trap 'rm -rf "$TMP"' EXIT
sed "s|^  training:|  training:\n    tensorboard: false|" examples/fashion_mnist_ps.yaml >"$TMP/off.yaml"
grep -q 'tensorboard: false' "$TMP/off.yaml" || { echo "observe_bench.sh: cannot make the off spec" >&2; exit 1; }
# the off spec's data paths must resolve as the example's: same directory
cp "$TMP/off.yaml" examples/.observe-off.yaml
trap 'rm -rf "$TMP" examples/.observe-off.yaml' EXIT

run() { # MODE ROUND -> prints samples/s
    local mode=$1 i=$2 dir="$TMP/$1-$2" spec=examples/fashion_mnist_ps.yaml
    [ "$mode" = off ] && spec=examples/.observe-off.yaml
    "$BIN" run "$spec" --job-dir "$dir" --detach >/dev/null
    if [ "$mode" = on ]; then # scrape as Prometheus would, every second
        while [ ! -f "$dir/result.json" ]; do
            url=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$dir/master.json" 2>/dev/null || true)
            [ -n "$url" ] && curl -s -o /dev/null "$url/metrics" || true
            sleep 1
        done
    else
        while [ ! -f "$dir/result.json" ]; do sleep 0.2; done
    fi
    /usr/bin/python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["samples_per_sec"]))' "$dir/result.json"
}

echo "== the main job with TensorBoard events + /metrics scraped each second (on) vs neither (off)"
echo "   CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: *//'); nproc $(nproc); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
on=(); off=()
for i in $(seq "$ROUNDS"); do
    a=$(run on "$i"); b=$(run off "$i")
    echo "   round $i: on $a samples/s, off $b samples/s"
    on+=("$a"); off+=("$b")
done
/usr/bin/python3 - "${on[*]}" "${off[*]}" <<'PYEOF'
import statistics, sys
on = [float(x) for x in sys.argv[1].split()]; off = [float(x) for x in sys.argv[2].split()]
m_on, m_off = statistics.median(on), statistics.median(off)
print("RESULT median on %.0f, off %.0f samples/s: on/off %.4f (%.2f%% apart; goal < 2%%)" %
      (m_on, m_off, m_on / m_off, 100 * abs(m_on - m_off) / m_off))
PYEOF
steps=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["replicas"]["chief-0"]["result"]["train"]["steps"])' "$TMP/on-1/result.json")
for run in train eval; do
    bytes=$(cat "$TMP/on-1/tensorboard/$run/"*tfevents* | wc -c)
    echo "RESULT event files, run $run: $bytes bytes for $steps global steps: $((bytes * 1000 / steps)) bytes per 1000 steps"
done
