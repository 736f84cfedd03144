#!/usr/bin/env bash
# serve_fashion_accept.sh - examples/serve_fashion.sh, the whole path of issue 16: the
# Fashion-MNIST MLP trained and exported by `dtrain train`, served by `dtrain serve`, and each
# item in examples/data/ recognised by `dtrain predict` and by the Python client.
source "$(dirname "$0")/lib.sh"
expect_exit 0 serve_fashion -- env DTRAIN_BIN="$DTRAIN" bash "$SRC/examples/serve_fashion.sh" "$TMP/job"
n=$(grep -c ': right$' "$TMP/out")
want=$(ls "$SRC"/examples/data/*.png | wc -l)
[ "$n" -eq "$want" ] && pass "every item recognised by both clients ($n of $want)" ||
    fail "$n of $want items recognised: $(cat "$TMP/out" "$TMP/err" | tail -20)"
ls "$TMP/job/export/"*/model.onnx >/dev/null 2>&1 && pass "the export holds model.onnx" || fail "no model.onnx"
finish
