#!/usr/bin/env bash
# serve_test.sh - `dtrain export` and `dtrain serve` with real processes and sockets: TF
# Serving's REST API (status, metadata, predict in both forms, classify), its errors, bad
# input that must not bring the server down, a new version picked up under load without a
# failed request, a corrupt version that leaves the old one serving, batching that answers
# every request with its own rows, a model config file with labels, and SIGTERM.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
cd "$TMP"
SERVERS=()
cleanup() { for p in "${SERVERS[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT

# A short run of the Fashion-MNIST MLP (class names from the spec), exported after the fact.
sed 's/epochs: 10/epochs: 1/' "$SRC/examples/fashion_mnist_mlp.yaml" >mlp.yaml
if expect_exit 0 "train 60 steps" -- "$DTRAIN" train mlp.yaml --job-dir job --max-steps 60 --no-progress; then
    pass "train 60 steps"
fi
if expect_exit 0 "export" -- "$DTRAIN" export job --out models/fashion; then
    [ -f models/fashion/60/model.safetensors ] && [ -f models/fashion/60/model.onnx ] &&
        [ -f models/fashion/60/input.safetensors ] && [ -f models/fashion/60/spec.yaml ] &&
        pass "export: version 60 in TF Serving's layout" || fail "export: files missing: $(ls -R models)"
fi
expect_exit 1 "export of a missing path" -- "$DTRAIN" export nothing-here && expect_err_has "export: a missing path is named" "nothing-here: no such job directory or checkpoint"
mkdir -p empty && expect_exit 1 "export of an empty job dir" -- "$DTRAIN" export empty &&
    expect_err_has "export: an empty job dir is named" "empty/checkpoints: no checkpoint to export"
expect_exit 2 "export --format bad" -- "$DTRAIN" export job --format tflite &&
    expect_err_has "export: a bad format is named" "--format: expected onnx, dtrain or onnx,dtrain"
expect_exit 0 "export onnx only" -- "$DTRAIN" export job/checkpoints/ckpt-0000000060.safetensors --out onnx-only --format onnx &&
    { [ -f onnx-only/60/model.onnx ] && [ ! -f onnx-only/60/model.safetensors ] &&
        pass "export --format onnx: only model.onnx" || fail "export --format onnx: $(ls onnx-only/60)"; }
# An export that fails once its hidden directory is made leaves nothing behind: files capped
# at 64 KiB (RLIMIT_FSIZE holds for root too; SIGXFSZ ignored, so write() says EFBIG) make
# the model's write fail inside OUT/.tmp-60-PID.
expect_exit 1 "export that fails writing" -- bash -c 'trap "" XFSZ; ulimit -f 64; exec "$@"' _ \
    "$DTRAIN" export job --out capped &&
    expect_err_has "export: the failed write is named" "model.safetensors: writing" &&
    { [ -d capped ] && [ -z "$(ls -A capped)" ] && pass "export that fails: no .tmp-* left" ||
        fail "export that fails left: $(ls -A capped 2>&1)"; }
# An --out too long for a path is refused before anything is made.
long=$(printf 'd%.0s' $(seq 4090))
expect_exit 2 "export to a path too long" -- "$DTRAIN" export job --out "$long" &&
    expect_err_has "export: a path too long is refused" "path too long" &&
    { [ ! -e "$long" ] && pass "export to a path too long: nothing made" || fail "export made $long"; }

# start_server NAME ARGS...: start dtrain serve on a free loopback port; $PORT, $PID.
start_server() {
    local name=$1; shift
    "$DTRAIN" serve --rest_api_port 0 --rest_api_host 127.0.0.1 "$@" >"$name.log" 2>&1 &
    PID=$!
    SERVERS+=("$PID")
    if ! wait_for grep -q "REST API on" "$name.log"; then
        fail "$name: the server did not start: $(head -c 600 "$name.log")"
        return 1
    fi
    PORT=$(grep -o 'REST API on http://127.0.0.1:[0-9]*' "$name.log" | sed 's/.*://')
}

# py NAME SCRIPT: run a Python check (client.py's helpers loaded); its "ok"/"FAIL" lines count.
cat >client.py <<'EOF'
import gzip, json, sys, urllib.request, urllib.error
PORT = int(sys.argv[1])
IMAGES = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()[16:]
LABELS = gzip.open("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz").read()[8:]
def image(i):  # one sample, nested [28][28][1], raw pixels
    return [[[float(IMAGES[i * 784 + r * 28 + c])] for c in range(28)] for r in range(28)]
def flat(i):
    return [float(v) for v in IMAGES[i * 784:(i + 1) * 784]]
def call(path, body=None, method=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, {"raw": text.decode(errors="replace")}
failed = 0
def check(name, cond, detail=""):
    global failed
    if cond:
        print("ok   " + name)
    else:
        failed += 1
        print(f"FAIL: {name}: {detail}")
def argmax(p):
    return max(range(len(p)), key=lambda k: p[k])
EOF
py() {
    local name=$1 script=$2 out
    out=$(cd "$TMP" && $PY -c "exec(open('client.py').read()); $script
sys.exit(1 if failed else 0)" "$PORT" 2>&1)
    local rc=$?
    echo "$out" | grep '^ok' | while read -r _ line; do echo "ok   $name: $line"; done
    PASSED=$((PASSED + $(echo "$out" | grep -c '^ok')))
    if [ $rc -ne 0 ]; then fail "$name: $(echo "$out" | grep -v '^ok' | head -c 2000)"; fi
}

cp -r models base
if start_server api --model_name fashion --model_base_path base/fashion --file_system_poll_wait_seconds 1 --max_body_bytes 2000000; then
    py "api" '
s, j = call("/v1/models/fashion")
check("status", s == 200 and j["model_version_status"] == [{"version": "60", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}], j)
s, j = call("/v1/models/fashion/versions/60")
check("status of version 60", s == 200 and j["model_version_status"][0]["version"] == "60", j)
s, j = call("/v1/models/fashion/metadata")
sig = j["metadata"]["signature_def"]["signature_def"]
inp = sig["serving_default"]["inputs"]["input"]
check("metadata: input [-1,28,28,1] float", s == 200 and inp["dtype"] == "DT_FLOAT" and [d["size"] for d in inp["tensor_shape"]["dim"]] == ["-1", "28", "28", "1"], j)
out = sig["serving_default"]["outputs"]["probabilities"]
check("metadata: output probabilities [-1,10]", [d["size"] for d in out["tensor_shape"]["dim"]] == ["-1", "10"], out)
check("metadata: predict and classify signatures", sig["predict"]["method_name"] == "tensorflow/serving/predict" and sig["classify"]["method_name"] == "tensorflow/serving/classify", list(sig))
check("metadata: model_spec", j["model_spec"] == {"name": "fashion", "signature_name": "", "version": "60"}, j["model_spec"])
n = 200
s, j = call("/v1/models/fashion:predict", {"instances": [image(i) for i in range(n)]})
preds = j["predictions"]
hits = sum(argmax(p) == LABELS[i] for i, p in enumerate(preds))
check("predict: 200 rows, probabilities summing to 1", s == 200 and len(preds) == n and all(abs(sum(p) - 1) < 1e-4 for p in preds), s)
check("predict: recognises the items (%d/%d)" % (hits, n), hits >= 0.6 * n, hits)
s, j2 = call("/v1/models/fashion:predict", {"signature_name": "predict", "inputs": [image(i) for i in range(3)]})
def close(a, b):
    return all(abs(x - y) < 1e-5 for p, q in zip(a, b) for x, y in zip(p, q)) and len(a) == len(b)
check("predict: columnar inputs -> outputs", s == 200 and close(j2["outputs"], preds[:3]), j2)
s, j3 = call("/v1/models/fashion/versions/60:predict", {"instances": [{"input": image(0)}]})
check("predict: named instance, explicit version", s == 200 and close(j3["predictions"], preds[:1]), j3)
s, j4 = call("/v1/models/fashion:predict", {"inputs": {"input": [image(1)]}})
check("predict: named columnar", s == 200 and close(j4["outputs"], preds[1:2]), j4)
s, j = call("/v1/models/fashion:classify", {"examples": [{"input": flat(0)}, {"input": flat(1)}]})
r0 = j["results"][0]
check("classify: class names from the spec, scores = predict", s == 200 and [c for c, _ in r0] == ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"] and close([[v for _, v in r0]], preds[:1]), j)
s, j = call("/v1/models/fashion:classify", {"context": {"input": flat(2)}, "examples": [{}, {"other": 1}]})
check("classify: the feature from context", s == 200 and len(j["results"]) == 2, j)
'
    py "errors" '
def err(name, status, body=None, raw=None, has="", path="/v1/models/fashion:predict", method=None):
    s, j = call(path, body, method=method, raw=raw)
    check(name, s == status and has in j.get("error", ""), (s, j))
err("malformed JSON", 400, raw=b"{\"instances\": [1, 2", has="JSON Parse error")
err("not JSON at all", 400, raw=b"hello", has="JSON Parse error")
err("empty body", 400, raw=b"", has="The document is empty")
err("bad shape names the expected one", 400, {"instances": [flat(0)]}, has="expects shape [-1,28,28,1]")
err("ragged rows", 400, {"instances": [[[[1.0]] * 28] * 28, [[[1.0]] * 27] * 28]}, has="expects shape")
err("ragged nesting", 400, {"instances": [[1.0, [2.0]]]}, has="nested the same")
err("wrong dtype", 400, {"instances": [[[["x"]] * 28] * 28]}, has="is not of expected type: float")
err("both instances and inputs", 400, {"instances": [image(0)], "inputs": [image(0)]}, has="both")
err("neither", 400, {"signature_name": "serving_default"}, has="Missing \x27inputs\x27 or \x27instances\x27 key")
err("empty instances", 400, {"instances": []}, has="empty")
err("unknown input name", 400, {"instances": [{"pixels": image(0)}]}, has="not an input")
err("unknown signature", 400, {"signature_name": "nope", "instances": [image(0)]}, has="Serving signature name: \"nope\" not found")
err("unknown model", 404, {"instances": [image(0)]}, path="/v1/models/nope:predict", has="Servable not found for request: Latest(nope)")
err("unknown version", 404, {"instances": [image(0)]}, path="/v1/models/fashion/versions/7:predict", has="Specific(fashion, 7)")
err("status of an unknown model", 404, path="/v1/models/nope", has="Could not find any versions of model nope")
err("status of an unknown version", 404, path="/v1/models/fashion/versions/7", has="Could not find version 7 of model fashion")
err("no model name", 400, path="/v1/models", has="Missing model name in request.")
err("malformed path", 400, path="/v1/models/fashion/versions/x:predict", raw=b"{}", has="Malformed request")
err("GET on predict", 400, path="/v1/models/fashion:predict", has="Malformed request: GET")
err("regress on a classifier", 400, {"examples": [{"input": flat(0)}]}, path="/v1/models/fashion:regress", has="")
err("unknown label", 400, path="/v1/models/fashion/labels/stable", has="Unrecognized servable version label")
err("a body over --max_body_bytes", 413, raw=b"[" + b"1," * 1100000 + b"1]", has="too large")
err("deep nesting", 400, raw=b"{\"instances\": " + b"[" * 100 + b"]" * 100 + b"}", has="")
s, j = call("/v1/models/fashion:predict", raw=b"{\"instances\": [" + json.dumps(image(0)).replace("0.0", "NaN", 1).encode() + b"]}")
check("NaN is read (TF Serving accepts it)", s == 200 and len(j["predictions"]) == 1, (s, j))
def with_value(v):
    return b"{\"instances\": [" + json.dumps(image(0)).replace("0.0", v, 1).encode() + b"]}"
err("an integer beyond 2^24-1 is lossy as a float", 400, raw=with_value("16777216"), has="Cannot convert JSON value: 16777216 to float without loss of precision.")
err("a number beyond the float range", 400, raw=with_value("3.5e38"), has="Cannot convert JSON value: 3.5e38 to float without loss of precision.")
err("a number beyond the double range", 400, raw=with_value("-1e400"), has="JSON Parse error: Number too big to be stored in double.")
s, j = call("/v1/models/fashion:predict", raw=with_value("16777215"))
check("2^24-1 and 3.4e38 still fit", s == 200 and call("/v1/models/fashion:predict", raw=with_value("3.4e38"))[0] == 200, (s, j))
s, j = call("/v1/models/fash%69on/metadata")
check("a URL-escaped name is unescaped", s == 200 and j["model_spec"]["name"] == "fashion", (s, j))
err("an escaped / is part of the name", 404, path="/v1/models/a%2Fb", has="Could not find any versions of model a/b")
err("an escaped : is part of the name", 404, {"instances": [image(0)]}, path="/v1/models/no%3Ape:predict", has="Servable not found for request: Latest(no:pe)")
s, j = call("/v1/models/fashion")
check("still serving after bad input", s == 200, j)
'
    # A new version appears (written whole, then renamed into place) while clients keep asking.
    "$DTRAIN" train mlp.yaml --job-dir job --max-steps 90 --no-progress >/dev/null 2>&1 &&
        "$DTRAIN" export job --out staged >/dev/null 2>&1 || fail "a second export"
    $PY - "$PORT" >load.out 2>&1 <<'EOF' &
import json, sys, threading, time, urllib.request, os
port = int(sys.argv[1]); body = json.dumps({"instances": [[[[0.0]] * 28] * 28]}).encode()
stop = time.time() + 120; seen = set(); bad = []; n = [0]
def worker():
    while time.time() < stop and not os.path.exists("load.stop"):
        try:
            r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/models/fashion:predict", data=body), timeout=30)
            json.loads(r.read()); n[0] += 1
            if n[0] == 1: open("load.started", "w").close()
        except Exception as e:
            bad.append(repr(e))
ts = [threading.Thread(target=worker) for _ in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
print("requests", n[0], "failures", len(bad), bad[:3])
EOF
    LOAD=$!
    wait_for test -f load.started || fail "the load did not start: $(cat load.out)"
    mv staged/90 base/fashion/90
    if WAIT_POLLS=300 wait_for grep -q "version 60 retired" api.log; then
        pass "new version 90 loaded and 60 retired without a restart"
    else
        fail "hot reload: $(tail -5 api.log)"
    fi
    touch load.stop
    wait $LOAD
    if grep -q "failures 0 " load.out && ! grep -q "requests 0 " load.out; then
        pass "no request failed during the switch ($(head -c 100 load.out))"
    else
        fail "requests failed during the switch: $(head -c 600 load.out)"
    fi
    # A corrupt version: reported, and the old one keeps serving.
    mkdir -p staged/120 && cp base/fashion/90/* staged/120/ &&
        head -c 1000 base/fashion/90/model.safetensors >staged/120/model.safetensors &&
        mv staged/120 base/fashion/120
    if WAIT_POLLS=300 wait_for grep -q "version 120 failed to load" api.log; then
        pass "a corrupt version is reported: $(grep "version 120 failed" api.log | head -c 300)"
    else
        fail "corrupt version: $(tail -5 api.log)"
    fi
    py "after a bad version" '
s, j = call("/v1/models/fashion")
st = {v["version"]: v for v in j["model_version_status"]}
check("status: 120 END with its error, 90 AVAILABLE, 60 END", st["120"]["state"] == "END" and st["120"]["status"]["error_code"] != "OK" and "model.safetensors" in st["120"]["status"]["error_message"] and st["90"]["state"] == "AVAILABLE" and st["60"]["state"] == "END", j)
s, j = call("/v1/models/fashion/metadata")
check("version 90 still serves", s == 200 and j["model_spec"]["version"] == "90", j)
s, j = call("/v1/models/fashion/versions/60:predict", {"instances": [image(0)]})
check("the retired version is gone", s == 404, (s, j))
'
    kill -TERM "$PID"
    wait "$PID"
    rc=$?
    [ $rc -eq 0 ] && pass "SIGTERM stops the server (exit 0)" || fail "SIGTERM: exit $rc"
fi

# Batching: every request gets its own rows back, with the same answers as unbatched.
if start_server unbatched --model_name fashion --model_base_path models/fashion; then
    py "unbatched reference" '
res = [call("/v1/models/fashion:predict", {"instances": [image(i) for i in range(i % 3 + 1)]})[1]["predictions"] for i in range(48)]
json.dump(res, open("reference.json", "w"))
check("48 reference answers", len(res) == 48)
'
    kill -TERM "$PID"; wait "$PID"
fi
if start_server batched --model_name fashion --model_base_path models/fashion --enable_batching --num_batch_threads 1 --max_batch_size 16 --batch_timeout_micros 20000 --rest_api_num_threads 2; then
    py "batching" '
import threading
ref = json.load(open("reference.json")); got = [None] * 48
def one(i):
    got[i] = call("/v1/models/fashion:predict", {"instances": [image(i) for i in range(i % 3 + 1)]})
ts = [threading.Thread(target=one, args=(i,)) for i in range(48)]
[t.start() for t in ts]; [t.join() for t in ts]
ok = all(g[0] == 200 for g in got)
diff = max(abs(a - b) for i in range(48) for p, q in zip(got[i][1]["predictions"], ref[i]) for a, b in zip(p, q)) if ok else None
check("48 concurrent requests of 1-3 rows: each gets its own rows", ok and all(len(got[i][1]["predictions"]) == i % 3 + 1 for i in range(48)), got[:2])
check("batched answers = unbatched (max diff %s)" % diff, ok and diff < 1e-5, diff)
s, j = call("/v1/models/fashion:classify", {"examples": [{"input": flat(0)}]})
check("classify batched", s == 200 and len(j["results"][0]) == 10, j)
'
    # its metrics: Prometheus text that promtool accepts, with what was just asked of it
    curl -s -D batched.hdr "http://127.0.0.1:$PORT/monitoring/prometheus/metrics" >batched.metrics
    curl -s "http://127.0.0.1:$PORT/v1/models/nope" >/dev/null
    curl -s "http://127.0.0.1:$PORT/metrics" >batched.metrics2
    if command -v promtool >/dev/null && promtool check metrics <batched.metrics >promtool.out 2>&1; then
        pass "serve metrics: promtool check metrics is clean"
    else fail "serve metrics: promtool: $(head -c 600 promtool.out)"; fi
    grep -qi '^Content-Type: text/plain; version=0.0.4; charset=utf-8' batched.hdr &&
        pass "serve metrics: Prometheus' content type" || fail "serve metrics: $(grep -i content-type batched.hdr)"
    $PY - batched.metrics batched.metrics2 <<'PYEOF' && pass "serve metrics: 48 predicts and a classify counted, the batches' rows (96), a version AVAILABLE, an unknown model under model=""" || fail "serve metrics: $(grep -v '^#' batched.metrics | head -30)"
import sys
def load(p):
    d = {}
    for line in open(p):
        if line.startswith("#") or not line.strip(): continue
        k, v = line.rsplit(" ", 1); d[k] = float(v)
    return d
m, m2 = load(sys.argv[1]), load(sys.argv[2])
assert m['dtrain_serve_requests_total{model="fashion",method="predict",code="200"}'] == 48, m
assert m['dtrain_serve_requests_total{model="fashion",method="classify",code="200"}'] == 1
assert m['dtrain_serve_request_duration_seconds_count{model="fashion",method="predict"}'] == 48
assert m['dtrain_serve_batch_rows_sum'] == 96 + 1, m['dtrain_serve_batch_rows_sum']  # 1+2+3 x 16, and the classify
assert m['dtrain_serve_batch_rows_count'] <= 49
assert m['dtrain_serve_batch_queue_requests'] == 0
assert any(k.startswith('dtrain_serve_model_version_state{model="fashion",version=') and k.endswith('state="AVAILABLE"}') for k in m)
assert m2['dtrain_serve_requests_total{model="",method="status",code="404"}'] == 1, [k for k in m2 if "requests_total" in k]
PYEOF
    kill -TERM "$PID"; wait "$PID"
    rc=$?
    [ $rc -eq 0 ] && pass "the batched server survives concurrent batches and stops (exit 0)" || fail "batched server: exit $rc: $(tail -c 600 batched.log)"
fi
# SIGTERM while a request waits in the batch queue: it is answered, and the server exits 0
# (libmicrohttpd aborts the process when stopped with a suspended connection).
if start_server batchwait --model_name fashion --model_base_path models/fashion --enable_batching --batch_timeout_micros 3000000; then
    $PY -c "exec(open('client.py').read()); s, j = call('/v1/models/fashion:predict', {'instances': [image(0)]}); print(s, len(j.get('predictions', [])))" "$PORT" >batchwait.out 2>&1 &
    CLIENT=$!
    queued() { curl -s "http://127.0.0.1:$PORT/metrics" | grep -qx 'dtrain_serve_batch_queue_requests 1'; }
    wait_for queued || fail "the request never reached the batch queue"
    kill -TERM "$PID"; wait "$PID"
    rc=$?
    wait $CLIENT
    [ $rc -eq 0 ] && pass "SIGTERM with a request in the batch queue: exit 0" || fail "SIGTERM with a queued request: exit $rc: $(tail -c 600 batchwait.log)"
    grep -q "^200 1$" batchwait.out && pass "the queued request is answered before the server stops" || fail "queued request at SIGTERM: $(tail -c 400 batchwait.out)"
fi
# A base path without versions yet: the server starts and waits for one.
mkdir -p nothing-yet
if start_server empty --model_name later --model_base_path nothing-yet; then
    py "empty base path" '
s, j = call("/v1/models/later")
check("no version yet: 404, still serving", s == 404 and "Could not find any versions of model later" in j.get("error", ""), (s, j))
'
    kill -TERM "$PID"; wait "$PID"
    rc=$?
    [ $rc -eq 0 ] && pass "empty base path: exit 0" || fail "empty base path: exit $rc: $(tail -c 600 empty.log)"
fi

# Limits (docs/SERVING.md): at the connection cap the connection waiting longest on its client
# is closed to admit a new one; headers and body each have a total deadline, however slowly
# they trickle in. Each check waits for the close (20 s at most), no timing beyond that.
cat >limits.py <<'EOF'
import select, socket
def conn():
    return socket.create_connection(("127.0.0.1", PORT), timeout=20)
def closed(s):  # the server closes s (end of stream or reset) within 20 s
    try:
        while s.recv(4096):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
def trickle(head, fill):  # send head, then a byte every 20 ms until the server closes
    s = conn()
    s.sendall(head)
    for _ in range(1000):
        if select.select([s], [], [], 0.02)[0]:
            try:
                if not s.recv(4096):
                    return True
            except ConnectionResetError:
                return True
        try:
            s.send(fill)
        except (BrokenPipeError, ConnectionResetError):
            return True
    return False
EOF
if start_server capped --model_name later --model_base_path nothing-yet --rest_api_max_connections 4 --rest_api_num_threads 2; then
    py "connection cap" '
exec(open("limits.py").read())
idle = [conn() for _ in range(4)]
s, j = call("/v1/models/later")
check("4 idle connections fill the cap: a request is still answered", s == 404, (s, j))
check("the oldest idle connection is closed to admit it", closed(idle[0]))
idle[3].sendall(b"GET /v1/models/later HTTP/1.1\r\nHost: x\r\n\r\n")
check("a newer idle connection is kept and answered", idle[3].recv(4096).startswith(b"HTTP/1.1 404"))
'
    kill -TERM "$PID"; wait "$PID"
fi
if start_server deadlines --model_name later --model_base_path nothing-yet --rest_api_header_timeout_ms 300 --rest_api_body_timeout_ms 300; then
    py "request deadlines" '
exec(open("limits.py").read())
check("a client trickling its headers is closed", trickle(b"GET /v1/models/later HTTP/1.1\r\nHost: x\r\nX-Slow: ", b"a"))
check("a client trickling its body is closed", trickle(b"POST /v1/models/later:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n", b"b"))
s, j = call("/v1/models/later")
check("the server still answers", s == 404, (s, j))
'
    kill -TERM "$PID"; wait "$PID"
    rc=$?
    [ $rc -eq 0 ] && pass "limits: the server stops (exit 0)" || fail "limits: exit $rc: $(tail -c 600 deadlines.log)"
fi

# Several models from a config file, a version label, a policy of all versions.
mkdir -p two && cp -r models/fashion/60 two/60 && cp -r base/fashion/90 two/90
cat >models.config <<EOF
# two models
model_config_list {
  config {
    name: 'fashion'
    base_path: '$TMP/two'
    model_platform: 'tensorflow'
    model_version_policy { all {} }
    version_labels { key: 'stable' value: 60 }
    version_labels { key: 'canary' value: 90 }
  }
  config: { name: "second", base_path: "$TMP/models/fashion", model_platform: "tensorflow" }
}
EOF
if start_server config --model_config_file models.config --file_system_poll_wait_seconds 0; then
    py "config file" '
s, j = call("/v1/models/fashion")
check("policy all: both versions available", sorted(v["version"] for v in j["model_version_status"] if v["state"] == "AVAILABLE") == ["60", "90"], j)
s, j = call("/v1/models/fashion/labels/stable/metadata")
check("label stable -> 60", s == 200 and j["model_spec"]["version"] == "60", j)
s, j = call("/v1/models/fashion/labels/canary:predict", {"instances": [image(0)]})
check("predict by label", s == 200 and len(j["predictions"]) == 1, j)
s, j = call("/v1/models/second:predict", {"instances": [image(0)]})
check("the second model", s == 200, j)
'
    kill -TERM "$PID"; wait "$PID"
fi
printf 'model_config_list { config { name: "x" } }\n' >bad.config
expect_exit 2 "a config without base_path" -- "$DTRAIN" serve --model_config_file bad.config &&
    expect_err_has "the config error names file and line" "bad.config:1: config: name and base_path are required"
printf 'model_config_list {\n  config { name: "x" base_path: "/m" colour: 3 }\n}\n' >bad2.config
expect_exit 2 "a config with an unknown field" -- "$DTRAIN" serve --model_config_file bad2.config &&
    expect_err_has "unknown field named with its line" "bad2.config:2: config: unknown field 'colour'"
expect_exit 2 "serve without a model" -- "$DTRAIN" serve --rest_api_port 0 &&
    expect_err_has "serve: says what is missing" "--model_base_path (or --model_config_file) is required"
expect_exit 2 "serve with an unknown flag" -- "$DTRAIN" serve --model_base_path x --colour 3 &&
    expect_err_has "serve: unknown flag named" "unknown flag '--colour'"

# deploy/serving.yaml decodes strictly as Kubernetes' own models (python3-kubernetes) have
# it, and mounts the job's volume where the job writes its exports.
if out=$($PY - "$SRC" 2>&1 <<'PYEOF'
import sys, yaml
sys.path.insert(0, sys.argv[1] + "/tests/tools/kube")
import api_schema
docs = list(yaml.safe_load_all(open(sys.argv[1] + "/deploy/serving.yaml")))
dep = [d for d in docs if d["kind"] == "Deployment"][0]
svc = [d for d in docs if d["kind"] == "Service"][0]
api_schema.decode_builtin(dep, "V1Deployment", "Deployment", "apps/v1")
api_schema.decode_builtin(svc, "V1Service", "Service", "v1")
c = dep["spec"]["template"]["spec"]["containers"][0]
assert c["command"] == ["dtrain", "serve"], c["command"]
base = [a for a in c["args"] if a.startswith("--model_base_path=")][0].split("=", 1)[1]
mount = c["volumeMounts"][0]["mountPath"]
assert base == mount + "/export", (base, mount)
claim = dep["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
assert mount == "/var/lib/dtrain/jobs/" + claim[:-len("-data")], (mount, claim)
assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
PYEOF
); then pass "deploy/serving.yaml: a valid Deployment and Service on the job's volume"; else fail "deploy/serving.yaml: $out"; fi
finish
