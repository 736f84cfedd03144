#!/usr/bin/env bash
# predict_test.sh - `dtrain predict` and python/dtrain_serving_client.py against a stand-in
# TF Serving REST server (Python, below): both clients send the same request for PNGs of
# every colour type, depth and size (resized to the model's input), print the same top-K
# lines, and fail the same way on bad files, server errors and a server that is not there.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
CLIENT=$SRC/python/dtrain_serving_client.py

# ---- the stand-in server: records each POST body in $TMP/requests.jsonl ----
cat >"$TMP/fake_serving.py" <<'PYEOF'
import json, math, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LABELS = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
          "Bag", "Ankle boot"]
LOG = sys.argv[1]

def tensor(shape):
    return {"dtype": "DT_FLOAT", "name": "",
            "tensor_shape": {"dim": [{"size": str(d), "name": ""} for d in shape],
                             "unknown_rank": False}}

def sigs(shape, classify=True):
    pred = {"inputs": {"input": tensor(shape)}, "outputs": {"probabilities": tensor([-1, 10])},
            "method_name": "tensorflow/serving/predict"}
    s = {"serving_default": pred, "predict": pred}
    if classify:
        s["classify"] = {"inputs": {"input": tensor(shape)},
                         "outputs": {"classes": dict(tensor([-1, 10]), dtype="DT_STRING"),
                                     "scores": tensor([-1, 10])},
                         "method_name": "tensorflow/serving/classify"}
    return s

MODELS = {"fashion": sigs([-1, 28, 28, 1]), "rgb": sigs([-1, 32, 24, 3], classify=False),
          "flat": sigs([-1, 784], classify=False), "iris": sigs([-1, 4]),
          "gray3": sigs([-1, 28, 28], classify=False)}

def flatten(v):
    if isinstance(v, list):
        for x in v:
            yield from flatten(x)
    else:
        yield v

def scores(values):
    z = [sum(x * (((i * (k + 3)) % 7) - 3) for i, x in enumerate(values)) / 20000.0
         for k in range(10)]
    m = max(z)
    e = [math.exp(v - m) for v in z]
    return [v / sum(e) for v in e]

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def reply(self, code, obj, raw=None):
        body = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def model(self):
        p = self.path
        rest = p[len("/v1/models/"):]
        name = rest.split("/")[0].split(":")[0]
        if name == "broken":
            return name, None
        if name not in MODELS:
            self.reply(404, {"error": "Servable not found for request: Latest(%s)" % name})
            return None, None
        if "/versions/" in rest and not rest.split("/versions/")[1].startswith("3"):
            v = rest.split("/versions/")[1].split("/")[0].split(":")[0]
            self.reply(404, {"error": "Servable not found for request: Specific(%s, %s)" % (name, v)})
            return None, None
        return name, MODELS[name]
    def do_GET(self):
        name, m = self.model()
        if name == "broken":
            return self.reply(200, None, b"<html>not json</html>")
        if not name:
            return
        self.reply(200, {"model_spec": {"name": name, "signature_name": "", "version": "3"},
                         "metadata": {"signature_def": {"signature_def": m}}})
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        name, m = self.model()
        if not name:
            return
        req = json.loads(body)
        with open(LOG, "a") as f:
            f.write(json.dumps({"path": self.path, "body": req}) + "\n")
        if self.path.endswith(":classify"):
            ex = req["examples"][0]
            s = scores(list(flatten(ex["input"])))
            return self.reply(200, {"results": [[[LABELS[k], s[k]] for k in range(10)]]})
        inst = req.get("instances")
        if not inst:
            return self.reply(400, {"error": "Missing 'inputs' or 'instances' key"})
        self.reply(200, {"predictions": [scores(list(flatten(inst[0])))]})

srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
PYEOF
$PY "$TMP/fake_serving.py" "$TMP/requests.jsonl" >"$TMP/port" 2>"$TMP/server.err" &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null; rm -rf "$TMP"' EXIT
wait_for test -s "$TMP/port" || { fail "the stand-in server did not start: $(cat "$TMP/server.err")"; exit 1; }
PORT=$(cat "$TMP/port")
URL=http://127.0.0.1:$PORT

# ---- fixtures: PNGs of every colour type, written by a small encoder that uses every filter ----
cat >"$TMP/mkpng.py" <<'PYEOF'
import struct, sys, zlib

ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2))
CH = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}

def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

def pack_row(samples, depth):
    if depth == 16:
        return b"".join(struct.pack(">H", s) for s in samples)
    if depth == 8:
        return bytes(samples)
    per, out = 8 // depth, bytearray((len(samples) * depth + 7) // 8)
    for i, s in enumerate(samples):
        out[i // per] |= s << (8 - depth * (i % per + 1))
    return bytes(out)

def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c

def filt(ft, row, prev, bpp):
    out = bytearray()
    for i, x in enumerate(row):
        a = row[i - bpp] if i >= bpp else 0
        b = prev[i] if prev else 0
        c = prev[i - bpp] if prev and i >= bpp else 0
        pred = [0, a, b, (a + b) >> 1, paeth(a, b, c)][ft]
        out.append((x - pred) & 0xFF)
    return bytes([ft]) + bytes(out)

def png(path, w, h, color, depth, px, palette=None, trns=None, interlace=False):
    """px(x, y) -> tuple of samples of one pixel."""
    bpp = max(1, CH[color] * depth // 8)
    raw, n = bytearray(), 0
    for x0, y0, dx, dy in (ADAM7 if interlace else ((0, 0, 1, 1),)):
        prev = None
        for y in range(y0, h, dy):
            xs = range(x0, w, dx)
            if not xs:
                break
            row = pack_row([s for x in xs for s in px(x, y)], depth)
            raw += filt(n % 5, row, prev, bpp)
            prev, n = row, n + 1
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0,
                                                             1 if interlace else 0))
    if palette:
        out += chunk(b"PLTE", bytes(v for rgb in palette for v in rgb))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    z = zlib.compress(bytes(raw), 9)
    out += chunk(b"IDAT", z[:len(z) // 2]) + chunk(b"IDAT", z[len(z) // 2:]) + chunk(b"IEND", b"")
    open(path, "wb").write(out)

d = sys.argv[1]
png(d + "/gray8.png", 40, 30, 0, 8, lambda x, y: ((x * 7 + y * 3) % 256,))
png(d + "/rgb8.png", 100, 50, 2, 8, lambda x, y: ((x * 5) % 256, (y * 9) % 256, (x * y) % 256))
png(d + "/rgba16-adam7.png", 20, 60, 6, 16,
    lambda x, y: ((x * 3001) % 65536, (y * 1777) % 65536, (x * y * 97) % 65536, (x * 4099 + y) % 65536),
    interlace=True)
pal = [((k * 16) % 256, (255 - k * 9) % 256, (k * k) % 256) for k in range(16)]
png(d + "/pal4-trns.png", 13, 13, 3, 4, lambda x, y: ((x * 3 + y) % 16,), palette=pal,
    trns=bytes([0, 64, 128, 255, 200]))
png(d + "/gray2-trns-adam7.png", 28, 28, 0, 2, lambda x, y: ((x + y) % 4,),
    trns=struct.pack(">H", 1), interlace=True)
png(d + "/ga8.png", 56, 56, 4, 8, lambda x, y: ((x * 9 + y) % 256, (x * 4 + y * 4) % 256))
png(d + "/gray16.png", 7, 9, 0, 16, lambda x, y: ((x * 9000 + y * 555) % 65536,))
png(d + "/rgb8-trns.png", 30, 20, 2, 8, lambda x, y: ((x * 8) % 256, 0, (y * 12) % 256),
    trns=struct.pack(">HHH", 16, 0, 24))
png(d + "/wide.png", 300, 7, 0, 8, lambda x, y: ((x + 40 * y) % 256,))
PYEOF
mkdir -p "$TMP/png"
$PY "$TMP/mkpng.py" "$TMP/png" || fail "fixtures not written"

# ---- the same request and the same lines from both clients ----
# last_request: the body of the last POST, normalized (sorted keys, floats).
last_request() { tail -1 "$TMP/requests.jsonl" | $PY -c 'import json,sys; r=json.load(sys.stdin); print(r["path"]); print(json.dumps(r["body"], sort_keys=True))'; }

# same MODEL NAME ARGS...: both clients on the same image and options agree on the request and
# on the printed lines.
same() {
    local model=$1 name=$2; shift 2
    if ! "$DTRAIN" predict --server "$URL" --model "$model" "$@" >"$TMP/c.out" 2>"$TMP/c.err"; then
        fail "$name: dtrain predict failed: $(cat "$TMP/c.err")"; return; fi
    last_request >"$TMP/c.req"
    if ! $PY "$CLIENT" --host 127.0.0.1 --port "$PORT" --model "$model" "$@" >"$TMP/p.out" 2>"$TMP/p.err"; then
        fail "$name: the Python client failed: $(cat "$TMP/p.err")"; return; fi
    last_request >"$TMP/p.req"
    if ! cmp -s "$TMP/c.req" "$TMP/p.req"; then
        fail "$name: the requests differ: $(diff <(tr ',' '\n' <"$TMP/c.req") <(tr ',' '\n' <"$TMP/p.req") | head -8)"
    elif ! cmp -s "$TMP/c.out" "$TMP/p.out"; then
        fail "$name: the outputs differ: $(diff "$TMP/c.out" "$TMP/p.out")"
    else
        pass "$name: same request and output"
    fi
}

for f in "$SRC"/examples/data/*.png "$TMP"/png/*.png; do
    same fashion "classify $(basename "$f")" --image "$f"
done
same fashion "predict signature" --image "$SRC/examples/data/bag_t10k_18.png" --signature_name predict
same rgb "3 channels, nested predict" --image "$TMP/png/rgb8.png"
same flat "flat [-1, 784] input" --image "$TMP/png/ga8.png" --top 5
same gray3 "[-1, H, W] input" --image "$TMP/png/wide.png"
same fashion "invert" --image "$TMP/png/rgba16-adam7.png" --invert
same fashion "version 3" --image "$TMP/png/gray8.png" --version 3 --top 10

# The request's shape and values: a 28 x 28 Fashion-MNIST PNG goes as its raw pixels.
"$DTRAIN" predict --server "$URL" --model fashion --image "$SRC/examples/data/ankle_boot_t10k_0.png" \
    --signature_name predict >"$TMP/out" 2>"$TMP/err"
tail -1 "$TMP/requests.jsonl" >"$TMP/req.json"
if $PY - "$TMP/req.json" /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz <<'PYEOF'
import gzip, json, sys
r = json.load(open(sys.argv[1]))
assert r["path"] == "/v1/models/fashion:predict", r["path"]
b = r["body"]
assert b["signature_name"] == "predict"
inst = b["instances"]
assert len(inst) == 1 and len(inst[0]) == 28 and len(inst[0][0]) == 28 and len(inst[0][0][0]) == 1
raw = gzip.open(sys.argv[2]).read()[16:16 + 784] if __import__("os").path.exists(sys.argv[2]) else None
vals = [inst[0][y][x][0] for y in range(28) for x in range(28)]
assert all(isinstance(v, float) for v in vals)
if raw is not None:
    assert vals == [float(v) for v in raw], "pixels differ from t10k image 0"
PYEOF
then pass "predict sends the raw pixels as [1, 28, 28, 1] floats"; else fail "predict request body"; fi

# Classify is the default when the model has a classify signature; labels are the server's.
"$DTRAIN" predict --server "$URL" --model fashion --image "$SRC/examples/data/trouser_t10k_2.png" \
    --top 10 >"$TMP/out" 2>"$TMP/err"
if [ "$(wc -l <"$TMP/out")" -eq 10 ] && grep -q "^Ankle boot  *0\.[0-9]\{4\}$" "$TMP/out" &&
   tail -1 "$TMP/requests.jsonl" | grep -q '"path": "/v1/models/fashion:classify"' &&
   tail -1 "$TMP/requests.jsonl" | grep -q '"signature_name": "classify"'; then
    pass "classify by default, 10 labelled lines"
else
    fail "classify default: $(cat "$TMP/out" "$TMP/err")"
fi
if awk '{ print $NF }' "$TMP/out" | sort -g -r -c 2>/dev/null; then pass "best first"; else fail "not sorted: $(cat "$TMP/out")"; fi
"$DTRAIN" predict --server "$URL" --model rgb --image "$TMP/png/gray8.png" >"$TMP/out" 2>"$TMP/err"
if [ "$(wc -l <"$TMP/out")" -eq 3 ] && awk '{ if ($1 !~ /^[0-9]$/) exit 1 }' "$TMP/out"; then
    pass "predict-only model: 3 lines labelled by index"
else
    fail "predict-only labels: $(cat "$TMP/out" "$TMP/err")"
fi

# ---- errors: both clients, exit 1, the file or the server's message ----
printf 'hello, not an image\n' >"$TMP/notes.png"
head -c 120 "$TMP/png/rgb8.png" >"$TMP/cut.png"
$PY - "$TMP/png/gray8.png" "$TMP/badcrc.png" <<'PYEOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[19] ^= 0x40; open(sys.argv[2], "wb").write(b)
PYEOF
both_fail() { # NAME TEXT MODEL ARGS...: both clients exit 1 and say TEXT
    local name=$1 text=$2 model=$3; shift 3
    expect_exit 1 "$name (C)" -- "$DTRAIN" predict --server "$URL" --model "$model" "$@" &&
        expect_err_has "$name (C) says it" "$text"
    expect_exit 1 "$name (Python)" -- $PY "$CLIENT" --host 127.0.0.1 --port "$PORT" --model "$model" "$@" &&
        expect_err_has "$name (Python) says it" "$text"
}
both_fail "not a PNG" "notes.png: not a PNG file" fashion --image "$TMP/notes.png"
both_fail "truncated PNG" "cut.png: truncated PNG" fashion --image "$TMP/cut.png"
both_fail "CRC error" "badcrc.png: corrupt PNG: IHDR: CRC error" fashion --image "$TMP/badcrc.png"
both_fail "missing file" "nope.png" fashion --image "$TMP/nope.png"
both_fail "unknown model" "HTTP 404: Servable not found for request: Latest(nosuch)" nosuch \
    --image "$SRC/examples/data/bag_t10k_18.png"
both_fail "unknown version" "HTTP 404: Servable not found for request: Specific(fashion, 7)" fashion \
    --image "$SRC/examples/data/bag_t10k_18.png" --version 7
both_fail "unknown signature" "has no signature 'nope'" fashion --image "$SRC/examples/data/bag_t10k_18.png" \
    --signature_name nope
both_fail "not an image model" "takes no image" iris --image "$SRC/examples/data/bag_t10k_18.png"
both_fail "not JSON" "not a JSON object" broken --image "$SRC/examples/data/bag_t10k_18.png"
# the file is read before the server is asked
expect_exit 1 "bad file, no server" -- "$DTRAIN" predict --server http://127.0.0.1:1 --model m --image "$TMP/notes.png" &&
    expect_err_has "bad file, no server: the file's error" "not a PNG file"
# nothing listening
$PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' >"$TMP/freeport"
FREE=$(cat "$TMP/freeport")
expect_exit 1 "refused (C)" -- "$DTRAIN" predict --server "127.0.0.1:$FREE" --model m \
    --image "$SRC/examples/data/bag_t10k_18.png" && expect_err_has "refused (C) names the URL" "127.0.0.1:$FREE"
expect_exit 1 "refused (Python)" -- $PY "$CLIENT" --port "$FREE" --host 127.0.0.1 --model m \
    --image "$SRC/examples/data/bag_t10k_18.png" && expect_err_has "refused (Python) names the URL" "127.0.0.1:$FREE"

# ---- usage ----
expect_exit 0 "help" -- "$DTRAIN" predict --help && grep -q -- "--signature_name" "$TMP/out" && pass "predict --help"
expect_exit 2 "no image" -- "$DTRAIN" predict --server "$URL" --model fashion && expect_err_has "no image: said" "missing --image"
expect_exit 2 "no server" -- "$DTRAIN" predict --model fashion --image x.png && expect_err_has "no server: said" "missing --server"
expect_exit 2 "top 0" -- "$DTRAIN" predict --server "$URL" --model fashion --image x.png --top 0 && expect_err_has "top 0: said" "--top"
expect_exit 2 "bad version" -- "$DTRAIN" predict --server "$URL" --model fashion --image x.png --version=v1 && expect_err_has "bad version: said" "--version"
expect_exit 2 "unknown option" -- "$DTRAIN" predict --server "$URL" --bogus && expect_err_has "unknown option: said" "--bogus"
expect_exit 2 "Python: no image" -- $PY "$CLIENT" --model fashion && pass "Python: usage error exits 2"

echo "predict_test: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
