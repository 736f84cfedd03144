#!/usr/bin/env bash
# fashion_mlp_accept.sh - examples/fashion_mnist_mlp.yaml reaches eval accuracy >= 0.88 on the
# 10k test set within its 10 epochs, and its peak RSS stays within 2x the dataset's size in
# memory (70,000 x 784 float32 = 219.5 MB) + 100 MB.
source "$(dirname "$0")/lib.sh"
expect_exit 0 mlp -- "$DTRAIN" train "$SRC/examples/fashion_mnist_mlp.yaml" --job-dir "$TMP/mlp" --no-progress
R="$TMP/mlp/result.json"
acc=$(json_num "$R" accuracy); epochs=$(json_num "$R" epochs); rss=$(json_num "$R" peak_rss_mb)
ge "$acc" 0.88 && pass "MLP eval accuracy $acc >= 0.88" || fail "MLP eval accuracy $acc < 0.88"
ge 10 "$epochs" && pass "within 10 epochs ($epochs)" || fail "$epochs epochs"
limit=$(awk 'BEGIN { print 2 * 70000 * 784 * 4 / 1048576 + 100 }')
ge "$limit" "$rss" && pass "peak RSS $rss MB <= $limit MB" || fail "peak RSS $rss MB > $limit MB"
finish
