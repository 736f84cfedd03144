#!/usr/bin/env bash
# onnx_export_test.sh - exported models run in ONNX Runtime (onnxruntime-node, tests/js/) give
# what dtrain's own forward gives: max abs difference <= 1e-4 and the same argmax on every
# input, for
#   mlp       examples/fashion_mnist_mlp.yaml (flatten, dense, scale normalization)
#   cnn       examples/fashion_mnist_cnn.yaml (conv same, maxpool, flatten, dense, dropout)
#   every-op  every activation (relu, tanh, sigmoid; softmax fused and standalone, between
#             convs too), dropout, maxpool with padding same and odd sizes, conv with stride
#             2 and no bias, scale and shift normalization (synthetic 9x11x3 data)
#   standard  normalize: standard (per-feature scale and shift in the graph)
#   image-out a mean-squared-error model whose output is an image ("output", NHWC)
# each trained for a few steps, then exported with `dtrain export JOB_DIR --out DIR`. The
# Fashion-MNIST models see the first 200 t10k test images, the synthetic ones 200 synthetic
# inputs. Each model is also exported with its first kernel corrupted (export_forward
# --mutate): ONNX Runtime must then disagree, or the comparison could not fail.
#
# Needs node and tests/js/node_modules (scripts/setup.sh installs both); without them the
# test fails, saying so. When the ONNX Python package is installed (python3-onnx; optional),
# onnx.checker.check_model (full check) and strict shape inference must accept every file too.
source "$(dirname "$0")/lib.sh"
TOOLS=${DT_TOOLS_DIR:?DT_TOOLS_DIR must point at the built test tools}
JS="$SRC/tests/js"
IMAGES=/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz
N=200
ATOL=1e-4

if ! command -v node >/dev/null 2>&1; then
    fail "node is not installed: run scripts/setup.sh (it installs nodejs, npm and tests/js/node_modules)"
    finish
    exit 1
fi
if [ ! -f "$JS/node_modules/onnxruntime-node/package.json" ]; then
    fail "$JS/node_modules has no onnxruntime-node: run scripts/setup.sh (npm ci --ignore-scripts in tests/js)"
    finish
    exit 1
fi
if [ ! -f "$IMAGES" ]; then
    fail "$IMAGES is missing: run scripts/setup.sh (it installs dataset-fashion-mnist)"
    finish
    exit 1
fi

# Optional: the ONNX Python package (Debian's python3-onnx) checks each file as well.
HAVE_ONNX_PY=0
if /usr/bin/python3 -c 'import onnx' 2>/dev/null; then
    HAVE_ONNX_PY=1
else
    echo "note: python3-onnx is not installed; onnx.checker is skipped (ONNX Runtime still runs)"
fi

# train_export NAME SPEC STEPS: train NAME for STEPS steps, export it; $VDIR = the version dir.
train_export() {
    local name=$1 spec=$2 steps=$3
    VDIR=
    expect_exit 0 "$name: train" -- "$DTRAIN" train "$spec" --job-dir "$TMP/$name" \
        --max-steps "$steps" --no-progress || return 1
    expect_exit 0 "$name: export" -- "$DTRAIN" export "$TMP/$name" --out "$TMP/$name-export" ||
        return 1
    VDIR="$TMP/$name-export/$steps"
    if [ ! -f "$VDIR/model.onnx" ]; then
        fail "$name: $VDIR/model.onnx not written: $(ls "$TMP/$name-export" 2>&1)"
        return 1
    fi
}

# onnx_run NAME MODEL: run MODEL in ONNX Runtime on $TMP/NAME.x against $TMP/NAME.y; the
# report is in $TMP/NAME.run.json, the exit code in $rc.
onnx_run() {
    node "$JS/onnx_run.mjs" "$2" --input "$TMP/$1.x" --shape "$SHAPE" --expect "$TMP/$1.y" \
        --atol "$ATOL" >"$TMP/$1.run.json" 2>"$TMP/err"
    rc=$?
}

# check NAME INPUTS: the export in $VDIR, its model.onnx in ONNX Runtime vs dtrain's forward
# on N inputs (an IDX file or synthetic:SEED); then the corrupted copy must be caught.
check() {
    local name=$1 inputs=$2 meta
    [ -n "$VDIR" ] || return 1
    if ! meta=$("$TOOLS/export_forward" "$VDIR" "$inputs" "$N" "$TMP/$name.x" "$TMP/$name.y" \
        --onnx "$TMP/$name.mutated.onnx" --mutate 2>"$TMP/err"); then
        fail "$name: export_forward: $(head -c 600 "$TMP/err")"
        return 1
    fi
    SHAPE=$(/usr/bin/python3 -c 'import json, sys; m = json.loads(sys.argv[1])
print(",".join(str(d) for d in [m["n"]] + m["input"]))' "$meta")
    onnx_run "$name" "$VDIR/model.onnx"
    if [ "$rc" -ne 0 ]; then
        fail "$name: ONNX Runtime and dtrain differ (exit $rc): $(cat "$TMP/$name.run.json") $(head -c 600 "$TMP/err")"
        return 1
    fi
    # names and shapes as the export promises: input "input", output [N, <output shape>]
    if /usr/bin/python3 - "$meta" "$TMP/$name.run.json" 2>"$TMP/err" <<'EOF'; then
import json, sys
m, r = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))
assert r["input_name"] == "input", r
assert r["output_name"] == m["output_name"], (r, m)
assert r["output_dims"] == [m["n"]] + m["output"], (r, m)
assert r["rows"] == m["n"] and r["argmax_mismatches"] == 0 and r["max_abs_diff"] <= 1e-4, r
EOF
        pass "$name: ONNX Runtime matches dtrain: $(cat "$TMP/$name.run.json")"
    else
        fail "$name: names or shapes: $meta vs $(cat "$TMP/$name.run.json"): $(tail -1 "$TMP/err")"
        return 1
    fi
    # the ONNX project's own checker and strict shape inference, when python3-onnx is there
    if [ "$HAVE_ONNX_PY" = 1 ]; then
        if /usr/bin/python3 - "$VDIR/model.onnx" 2>"$TMP/err" <<'EOF'; then
import sys, onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
onnx.shape_inference.infer_shapes(m, strict_mode=True)
EOF
            pass "$name: onnx.checker (full check) and strict shape inference accept it"
        else
            fail "$name: onnx.checker refuses $VDIR/model.onnx: $(tail -3 "$TMP/err")"
        fi
    fi
    onnx_run "$name" "$TMP/$name.mutated.onnx"
    if [ "$rc" -eq 1 ]; then
        pass "$name: a corrupted kernel is caught: $(cat "$TMP/$name.run.json")"
    else
        fail "$name: the corrupted export was not caught (exit $rc): $(cat "$TMP/$name.run.json") $(head -c 600 "$TMP/err")"
    fi
}

# ---- (a) the Fashion-MNIST MLP ----
if section mlp; then
    train_export mlp "$SRC/examples/fashion_mnist_mlp.yaml" 30 && check mlp "$IMAGES"
fi

# ---- (b) the Fashion-MNIST CNN ----
if section cnn; then
    train_export cnn "$SRC/examples/fashion_mnist_cnn.yaml" 3 && check cnn "$IMAGES"
fi

# ---- (c) every activation, dropout, odd sizes, same padding, stride 2, no bias ----
if section every-op; then
    # 9x11 input: conv 3x2 stride 2 same pads height 1+1, width 0+1 (the odd one after) to
    # 5x6; the pool 2x3 stride (1, 2) same pads 0+1 both ways to 5x3
    cat >"$TMP/every.yaml" <<'EOF'
apiVersion: dtrain/v1
kind: TrainJob
metadata: {name: onnx-every-op}
spec:
  seed: 3
  data:
    train: {format: synthetic, samples: 256, shape: [9, 11, 3], classes: 4}
    normalize: {scale: 2.0, shift: -1.0}
  model:
    layers:
      - {type: conv2d, name: c1, filters: 6, kernel_size: [3, 2], strides: 2, padding: same, use_bias: false, activation: tanh}
      - {type: activation, name: channel_softmax, activation: softmax}
      - {type: maxpool2d, name: p1, pool_size: [2, 3], strides: [1, 2], padding: same}
      - {type: conv2d, name: c2, filters: 5, kernel_size: 2}
      - {type: activation, name: sig, activation: sigmoid}
      - {type: dropout, name: drop, rate: 0.3}
      - {type: flatten, name: flat}
      - {type: dense, name: d1, units: 16}
      - {type: activation, name: r1, activation: relu}
      - {type: dense, name: d2, units: 4, use_bias: false}
      - {type: activation, name: final, activation: softmax}
  loss: softmax_cross_entropy
  optimizer: {type: adam, learning_rate: 0.01}
  training: {batch_size: 32, epochs: 10, threads: 2}
EOF
    train_export every-op "$TMP/every.yaml" 40 && check every-op synthetic:7
fi

# ---- (d) normalize: standard ----
if section standard; then
    cat >"$TMP/standard.yaml" <<EOF
apiVersion: dtrain/v1
kind: TrainJob
metadata: {name: onnx-standard}
spec:
  seed: 5
  data:
    train: {format: idx, images: $IMAGES, labels: ${IMAGES/images-idx3/labels-idx1}}
    eval_fraction: 0.1
    normalize: standard
  model:
    input: [28, 28, 1]
    layers:
      - {type: conv2d, name: conv, filters: 8, kernel_size: 3, strides: 2, activation: relu}
      - {type: maxpool2d, name: pool, pool_size: 2}
      - {type: flatten, name: flat}
      - {type: dense, name: hidden, units: 32, activation: relu}
      - {type: dense, name: logits, units: 10}
  loss: softmax_cross_entropy
  optimizer: {type: adam, learning_rate: 0.003}
  training: {batch_size: 64, epochs: 1, threads: 2}
EOF
    train_export standard "$TMP/standard.yaml" 30 && check standard "$IMAGES"
fi

# ---- (e) an image output under mean squared error ----
if section image-out; then
    cat >"$TMP/image.yaml" <<'EOF'
apiVersion: dtrain/v1
kind: TrainJob
metadata: {name: onnx-image-output}
spec:
  seed: 2
  data:
    train: {format: synthetic, samples: 128, shape: [6, 7, 2], classes: 36}
  model:
    layers:
      - {type: conv2d, name: c1, filters: 4, kernel_size: 3, padding: same, activation: relu}
      - {type: conv2d, name: c2, filters: 3, kernel_size: [2, 3], strides: 2, padding: same}
      - {type: activation, name: act, activation: softmax}
  loss: mse
  optimizer: {type: sgd, learning_rate: 0.1}
  training: {batch_size: 16, epochs: 3, threads: 2}
EOF
    train_export image-out "$TMP/image.yaml" 10 && check image-out synthetic:9
fi

finish
