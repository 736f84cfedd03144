#!/usr/bin/env bash
# serve_bench.sh - REST inference throughput and latency of `dtrain serve` (without and with
# --enable_batching) against a Node peer (bench/serve_peer.mjs: the same model.onnx in
# onnxruntime-node behind Node's http server), same model, same request, same load generator.
#
#   bash bench/serve_bench.sh [mlp|cnn|all] [seconds]        (default: all, 10 s per run)
#
# Models: exports of examples/fashion_mnist_mlp.yaml and examples/fashion_mnist_cnn.yaml
# trained for ONE epoch (enough for a real model; serving speed does not depend on accuracy),
# in runs/serve-bench/<model>/ and reused when already there (delete the dir to retrain).
# Load: wrk (Debian's; installed if missing), one thread, keep-alive connections, each
# request POST /v1/models/fashion:predict with {"instances": [one 28x28x1 Fashion-MNIST test
# image]} (examples/data/ankle_boot_t10k_0.png as raw pixel floats, bench/serve_bench.lua),
# at 1, 16 and 64 connections, after a 2 s warm-up. Servers and wrk share this machine's
# cores; every server runs with its defaults (threads: all online CPUs).
#
# Prints one line per (server, model, connections): requests/s, p50 and p99 latency, errors;
# then the ratios dtrain/peer and batched/unbatched (requests/s), and the machine (CPU model,
# nproc, OPENBLAS_CORETYPE). Before the runs, each server's answer to the request is checked
# against the others' (same class, probabilities within 1e-4).
#
# Environment: DTRAIN_BIN (default build/dtrain, built by scripts/setup.sh), BENCH_DIR
# (default runs/serve-bench), CONNS (default "1 16 64"), SKIP_SETUP=1 (do not run setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
secs=${2:-10}
CONNS=${CONNS:-1 16 64}
BENCH_DIR=${BENCH_DIR:-runs/serve-bench}
[ "${SKIP_SETUP:-}" = 1 ] || bash scripts/setup.sh release >/dev/null
DTRAIN=${DTRAIN_BIN:-./build/dtrain}
PY=/usr/bin/python3
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
command -v wrk >/dev/null 2>&1 || {
    echo "serve_bench.sh: installing wrk" >&2
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk >/dev/null; }
[ -d tests/js/node_modules/onnxruntime-node ] || {
    echo "serve_bench.sh: tests/js/node_modules/onnxruntime-node is missing (scripts/setup.sh installs it)" >&2
    exit 1; }

TMP=$(mktemp -d /tmp/dtrain-serve-bench-XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

# ---- exports ----
export_dir() { # model -> JOB_DIR/export, training one epoch if there is none
    local model=$1 job="$BENCH_DIR/$1"
    if ! ls "$job/export"/*/model.onnx >/dev/null 2>&1; then
        echo "serve_bench.sh: training $model for 1 epoch into $job" >&2
        rm -rf "$job"
        "$DTRAIN" train "examples/fashion_mnist_$model.yaml" --epochs 1 --job-dir "$job" \
            --no-progress >&2
    fi
    echo "$job/export"
}
latest_version() { ls "$1" | grep -E '^[0-9]+$' | sort -n | tail -1; }

# ---- the request body: one test image as raw pixel floats ----
$PY - examples/data/ankle_boot_t10k_0.png >"$TMP/body.json" <<'PYEOF'
import json, sys
sys.path.insert(0, "python")
from dtrain_serving_client import read_png_gray
w, h, px = read_png_gray(sys.argv[1])
print(json.dumps({"instances": [[[[float(px[y * w + x])] for x in range(w)] for y in range(h)]]}))
PYEOF

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start NAME LOG CMD...: start a server, wait for its "REST API on" line; sets PID.
start() {
    local name=$1 log=$2; shift 2
    "$@" >"$log" 2>&1 &
    PID=$!
    PIDS+=("$PID")
    for _ in $(seq 300); do
        grep -q "REST API on" "$log" && return 0
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "serve_bench.sh: $name did not start: $(tail -5 "$log")" >&2
    exit 1
}
stop() {
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# check URL: POST the body once, print "class p_max" (and keep the answer).
check() {
    curl -sf -H 'Content-Type: application/json' --data-binary @"$TMP/body.json" "$1" >"$TMP/answer.json" ||
        { echo "serve_bench.sh: $1 did not answer the request" >&2; exit 1; }
    $PY -c 'import json,sys; p=json.load(open(sys.argv[1]))["predictions"][0]; k=max(range(len(p)),key=p.__getitem__); print(k, p[k])' "$TMP/answer.json"
}

# bench SERVER MODEL URL PID LOG: wrk at each connection count; appends rows to $TMP/results.
bench() {
    local server=$1 model=$2 url=$3 pid=$4 log=$5
    BODY_FILE="$TMP/body.json" wrk -t1 -c1 -d2s -s bench/serve_bench.lua "$url" >/dev/null 2>&1 || true
    for c in $CONNS; do
        local out line
        out=$(BODY_FILE="$TMP/body.json" wrk -t1 -c"$c" -d"${secs}s" --timeout 10s \
              -s bench/serve_bench.lua "$url" 2>&1) || true
        line=$(grep '^RESULT' <<<"$out" || true)
        if [ -z "$line" ]; then
            echo "serve_bench.sh: wrk failed for $server $model c=$c: $out" >&2
            kill -0 "$pid" 2>/dev/null || echo "serve_bench.sh: $server has exited: $(tail -5 "$log")" >&2
            continue
        fi
        # RESULT rps p50_ms p99_ms requests errors non2xx
        read -r _ rps p50 p99 nreq errs non2xx <<<"$line"
        printf '%-16s %-4s %5d %10.0f %9.2f %9.2f %8d %6d\n' "$server" "$model" "$c" "$rps" "$p50" "$p99" \
            "$nreq" "$((errs + non2xx))" | tee -a "$TMP/results"
    done
}

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: *//')
echo "== dtrain serve vs Node + onnxruntime-node: REST predict, 1 Fashion-MNIST image per request"
echo "   CPU: ${cpu:-unknown}; nproc: $(nproc); OPENBLAS_CORETYPE: ${OPENBLAS_CORETYPE:-(unset: OpenBLAS picks)}"
echo "   node $(node --version), onnxruntime-node $(node -p 'require("./tests/js/node_modules/onnxruntime-node/package.json").version'),"\
     "$(wrk --version 2>&1 | head -1 | awk '{print $1, $2}'); ${secs} s per run after a 2 s warm-up, wrk -t1"
echo "   models: 1 epoch of examples/fashion_mnist_{mlp,cnn}.yaml (in $BENCH_DIR)"
echo
printf '%-16s %-4s %5s %10s %9s %9s %8s %6s\n' server model conns "req/s" "p50 ms" "p99 ms" requests errors
: >"$TMP/results"
for model in mlp cnn; do
    [ "$which" = all ] || [ "$which" = "$model" ] || continue
    base=$(export_dir "$model")
    ver=$(latest_version "$base")
    answers=()
    port=$(free_port)
    start "node peer ($model)" "$TMP/peer.log" node bench/serve_peer.mjs --model "$base/$ver/model.onnx" \
        --name fashion --port "$port"
    peer_pid=$PID
    peer_url="http://127.0.0.1:$port/v1/models/fashion:predict"
    answers+=("node:$(check "$peer_url")")
    for mode in off on; do
        port=$(free_port)
        args=(serve --model_name fashion --model_base_path "$base" --rest_api_port "$port"
              --rest_api_host 127.0.0.1 --file_system_poll_wait_seconds 0)
        [ "$mode" = on ] && args+=(--enable_batching)
        start "dtrain serve ($model, batching $mode)" "$TMP/serve-$mode.log" "$DTRAIN" "${args[@]}"
        pid=$PID
        url="http://127.0.0.1:$port/v1/models/fashion:predict"
        answers+=("dtrain-$mode:$(check "$url")")
        name=dtrain; [ "$mode" = on ] && name=dtrain-batching
        bench "$name" "$model" "$url" "$pid" "$TMP/serve-$mode.log"
        stop "$pid"
    done
    bench node-ort "$model" "$peer_url" "$peer_pid" "$TMP/peer.log"
    stop "$peer_pid"
    # the same class and probabilities from all three
    $PY - "${answers[@]}" <<'PYEOF' || { echo "serve_bench.sh: the servers disagree: ${answers[*]}" >&2; exit 1; }
import sys
got = [a.split(":", 1)[1].split() for a in sys.argv[1:]]
assert len({g[0] for g in got}) == 1, got
assert max(float(g[1]) for g in got) - min(float(g[1]) for g in got) < 1e-4, got
PYEOF
    echo "   ($model: every server answers class ${answers[0]#*:})"
done

echo
echo "Ratios (requests/s; p99 latency in brackets):"
awk '
    { rps[$1, $2, $3] = $4; p99[$1, $2, $3] = $6; seen[$2, $3] = 1; if (!($2 in mo)) { mo[$2] = 1; models[++nm] = $2 } if (!($3 in co)) { co[$3] = 1; conns[++nc] = $3 } }
    function ratio(a, b) { return b > 0 ? sprintf("%.2f", a / b) : "n/a" }
    END {
        for (i = 1; i <= nm; i++) for (j = 1; j <= nc; j++) {
            m = models[i]; c = conns[j]
            if (!((m, c) in seen)) continue
            printf "  RESULT %-4s c=%-3d dtrain/peer %s [%s]  dtrain-batching/peer %s [%s]  batched/unbatched %s [%s]\n", m, c,
                ratio(rps["dtrain", m, c], rps["node-ort", m, c]), ratio(p99["dtrain", m, c], p99["node-ort", m, c]),
                ratio(rps["dtrain-batching", m, c], rps["node-ort", m, c]), ratio(p99["dtrain-batching", m, c], p99["node-ort", m, c]),
                ratio(rps["dtrain-batching", m, c], rps["dtrain", m, c]), ratio(p99["dtrain-batching", m, c], p99["dtrain", m, c])
        }
    }' "$TMP/results"
