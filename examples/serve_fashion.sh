#!/usr/bin/env bash
# serve_fashion.sh - the whole path of a model: train -> export -> serve -> query.
#
#   bash examples/serve_fashion.sh [JOB_DIR]
#
# Trains examples/fashion_mnist_mlp.yaml into JOB_DIR (default runs/fashion-serve; a JOB_DIR
# that already holds an export, such as a finished `bash scripts/main.sh` job's, is served as
# it is), serves JOB_DIR/export with `dtrain serve` on a free loopback port, and asks it for
# the class of each Fashion-MNIST test item in examples/data/ (their file names say what they
# are) with `dtrain predict` and with the Python client. Exits 1 when an answer is wrong.
set -euo pipefail
cd "$(dirname "$0")/.."
DTRAIN=${DTRAIN_BIN:-./build/dtrain}
[ -x "$DTRAIN" ] || bash scripts/setup.sh release
JOB=${1:-runs/fashion-serve}

# 1. train; the run exports JOB/export/<step>/ (model.safetensors, spec.yaml,
#    input.safetensors, model.onnx) when it finishes
if ! ls "$JOB"/export/*/model.safetensors >/dev/null 2>&1; then
    "$DTRAIN" train examples/fashion_mnist_mlp.yaml --job-dir "$JOB" --no-progress
fi
# (`dtrain export JOB` would export its newest checkpoint again, after the fact)
echo "exports: $(ls "$JOB/export" | grep -E '^[0-9]+$' | tr '\n' ' ')"

# 2. serve, as TF Serving would: --rest_api_port 0 picks a free port and prints it
LOG=$(mktemp /tmp/dtrain-serve-XXXXXX.log)
"$DTRAIN" serve --model_name fashion --model_base_path "$JOB/export" \
    --rest_api_host 127.0.0.1 --rest_api_port 0 >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -f "$LOG"' EXIT
URL=
for _ in $(seq 300); do
    URL=$(sed -n 's/.*REST API on \(http:[^ ]*\).*/\1/p' "$LOG")
    [ -n "$URL" ] && break
    kill -0 $SERVER 2>/dev/null || { cat "$LOG" >&2; exit 1; }
    sleep 0.1
done
[ -n "$URL" ] || { echo "serve_fashion.sh: the server did not start" >&2; cat "$LOG" >&2; exit 1; }
echo "serving at $URL"
curl -s "$URL/v1/models/fashion"; echo

# 3. query each image with both clients
port=${URL##*:}
wrong=0
for img in examples/data/*.png; do
    want=$(basename "$img" .png | sed 's/_t10k_[0-9]*$//; s/_/ /g')
    echo "== $img"
    "$DTRAIN" predict --server "$URL" --model fashion --image "$img" --top 3 | tee /tmp/dtrain-predict-$$.txt
    got=$(head -1 /tmp/dtrain-predict-$$.txt | sed 's/  .*//')
    py=$(/usr/bin/python3 python/dtrain_serving_client.py --host 127.0.0.1 --port "$port" \
         --image "$img" --model fashion --top 1 | sed 's/  .*//')
    rm -f /tmp/dtrain-predict-$$.txt
    if [ "${got,,}" = "${want,,}" ] && [ "$py" = "$got" ]; then
        echo "   answered $got (python client: $py): right"
    else
        echo "   answered $got (python client: $py), but it is a $want: WRONG"
        wrong=$((wrong + 1))
    fi
done
[ $wrong -eq 0 ] || { echo "serve_fashion.sh: $wrong wrong answers" >&2; exit 1; }
echo "every item recognised"
