#!/usr/bin/env bash
# iris_accept.sh - examples/iris.yaml reaches eval accuracy >= 0.95 on its held-out split.
source "$(dirname "$0")/lib.sh"
expect_exit 0 iris -- "$DTRAIN" train "$SRC/examples/iris.yaml" --job-dir "$TMP/iris" --no-progress
acc=$(json_num "$TMP/iris/result.json" accuracy)
ge "$acc" 0.95 && pass "iris eval accuracy $acc >= 0.95" || fail "iris eval accuracy $acc < 0.95"
finish
