# kube_lib.sh - the Kubernetes stand-in (tests/tools/kube/) for tests: start it, call its API.
# Source after lib.sh. Needs root (network namespaces for its pods).

KUBE_DIR="$TMP/kube"
KUBE_PREFIX="dtk$(( $$ % 10000 ))"
KUBE_GATEWAY="10.$(( 100 + $$ % 100 )).0.1"   # its pods' network: one per test run
KUBE_PID=

# kube_start: the API server (HTTPS, bearer token) and its kubelet, whose pods run this
# build's dtrain for the image "dtrain".
kube_start() {
    mkdir -p "$KUBE_DIR"
    /usr/bin/python3 "$SRC/tests/tools/kube/standin.py" --dir "$KUBE_DIR" --prefix "$KUBE_PREFIX" \
        --gateway "$KUBE_GATEWAY" --job-backoff 1 \
        --kubelet-arg=--image --kubelet-arg="dtrain=$(dirname "$DTRAIN")" \
        >"$KUBE_DIR/standin.log" 2>&1 &
    KUBE_PID=$!
    WAIT_POLLS=600 wait_for test -s "$KUBE_DIR/ready" || {
        echo "the stand-in did not start:" >&2
        tail -20 "$KUBE_DIR/standin.log" >&2
        return 1
    }
    KUBE_URL="https://127.0.0.1:$(cat "$KUBE_DIR/ready")"
    KUBE_TOKEN=$(cat "$KUBE_DIR/token")
}

kube_stop() {
    [ -n "$KUBE_PID" ] || return 0
    kill -TERM "$KUBE_PID" 2>/dev/null
    wait "$KUBE_PID" 2>/dev/null
    KUBE_PID=
}

# kube_api METHOD PATH [BODY]: the answer's body on stdout.
kube_api() {
    curl -sS --cacert "$KUBE_DIR/ca.crt" -H "Authorization: Bearer $KUBE_TOKEN" \
        -H 'Content-Type: application/json' -X "$1" "$KUBE_URL$2" ${3:+--data "$3"}
}

# kube_py PATH EXPR: EXPR evaluated with o = the JSON at PATH (GET), printed.
# (st(o): the object's status, {} for a Status answer such as a 404).
kube_py() {
    kube_api GET "$1" | /usr/bin/python3 -c "
import json, sys
o = json.load(sys.stdin)
def st(x): return x.get('status') if isinstance(x.get('status'), dict) else {}
print($2)"
}

# kube_count PATH: how many items the list at PATH holds.
kube_count() { kube_py "$1" 'len(o.get("items", []))'; }
