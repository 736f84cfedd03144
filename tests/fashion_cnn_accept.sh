#!/usr/bin/env bash
# fashion_cnn_accept.sh - examples/fashion_mnist_cnn.yaml reaches eval accuracy >= 0.91 on the
# 10k test set within 10 epochs.
source "$(dirname "$0")/lib.sh"
expect_exit 0 cnn -- "$DTRAIN" train "$SRC/examples/fashion_mnist_cnn.yaml" --job-dir "$TMP/cnn" --no-progress
R="$TMP/cnn/result.json"
acc=$(json_num "$R" accuracy); epochs=$(json_num "$R" epochs)
ge "$acc" 0.91 && pass "CNN eval accuracy $acc >= 0.91" || fail "CNN eval accuracy $acc < 0.91"
ge 10 "$epochs" && pass "within 10 epochs ($epochs)" || fail "$epochs epochs"
finish
