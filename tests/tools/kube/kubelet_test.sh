#!/usr/bin/env bash
# kubelet_test.sh - the stand-in kubelet alone, against a throwaway fake API server (a few dozen
# lines of Python written below: list/watch, create, status patch, delete with grace; no
# validation), or with KUBELET_TEST_STANDIN=1 against the real stand-in (standin.py, which starts
# the kubelet itself). Needs root. Pods run in network namespaces on bridge $PFX-br (10.97.0.1/16,
# apart from the stand-in's default 10.99/16); everything named $PFX-* is removed at the end.
#   tests/tools/kube/kubelet_test.sh        (KEEP=1 keeps the temp dir; ONLY="a b" runs some parts)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
PFX=${KUBELET_TEST_PREFIX:-kbt$$}
PFX=${PFX:0:9}
GW=10.97.0.1
TMP=$(mktemp -d /tmp/kubelet-test-XXXXXX)
STANDIN=${KUBELET_TEST_STANDIN:-}
PASSED=0 FAILED=0
fail() { echo "FAIL: $*" >&2; FAILED=$((FAILED + 1)); }
pass() { echo "ok   $*"; PASSED=$((PASSED + 1)); }
section() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
wait_for() { for _ in $(seq "${WAIT_POLLS:-200}"); do "$@" && return 0; sleep 0.1; done; return 1; }

cleanup() {
    [ -n "${KPID:-}" ] && kill "$KPID" 2>/dev/null && wait "$KPID" 2>/dev/null
    [ -n "${APID:-}" ] && kill "$APID" 2>/dev/null && wait "$APID" 2>/dev/null
    [ -n "${KEEP:-}" ] && echo "kept $TMP" || rm -rf "$TMP"
}
trap cleanup EXIT

# ---- the fake API server -------------------------------------------------------------------
cat >"$TMP/fakeapi.py" <<'PYEOF'
import copy, json, ssl, sys, threading, time, urllib.parse, uuid
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
port, certdir = int(sys.argv[1]), sys.argv[2]
TOKEN = open(certdir + "/token").read().strip()
cv = threading.Condition()
state = {"rv": 0}
objs, history = {}, []          # (kind, ns, name) -> obj; [(rv, kind, type, obj)]

def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

def record(kind, typ, obj):     # under cv
    state["rv"] += 1
    obj["metadata"]["resourceVersion"] = str(state["rv"])
    history.append((state["rv"], kind, typ, copy.deepcopy(obj)))
    cv.notify_all()

def merge(a, b):
    for k, v in b.items():
        if v is None:
            a.pop(k, None)
        elif isinstance(v, dict) and isinstance(a.get(k), dict):
            merge(a[k], v)
        else:
            a[k] = v

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, fmt, *a):
        sys.stderr.write("fakeapi " + (fmt % a) + "\n")
    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def route(self):
        if self.headers.get("Authorization") != "Bearer " + TOKEN:
            self.reply(401, {"kind": "Status", "code": 401})
            return None
        u = urllib.parse.urlsplit(self.path)
        self.qs = dict(urllib.parse.parse_qsl(u.query))
        p = u.path.strip("/").split("/")[2:]      # after api/v1
        if len(p) == 1:
            return p[0], None, None, None
        return p[2], p[1], (p[3] if len(p) > 3 else None), (p[4] if len(p) > 4 else None)
    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n)) if n else {}
    def do_GET(self):
        r = self.route()
        if not r:
            return
        kind, ns, name, _ = r
        if name:
            with cv:
                o = objs.get((kind, ns, name))
            return self.reply(200, o) if o else self.reply(404, {"kind": "Status", "code": 404})
        if self.qs.get("watch"):
            return self.watch(kind, ns, int(self.qs.get("resourceVersion") or 0))
        with cv:
            items = [o for (k, n, _), o in sorted(objs.items()) if k == kind and ns in (None, n)]
            self.reply(200, {"kind": "List", "metadata": {"resourceVersion": str(state["rv"])}, "items": items})
    def watch(self, kind, ns, since):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        pos = next((i for i, h in enumerate(history) if h[0] > since), len(history))
        deadline = time.time() + int(self.qs.get("timeoutSeconds") or 600)
        try:
            while time.time() < deadline:
                with cv:
                    while pos >= len(history) and time.time() < deadline:
                        cv.wait(1)
                    evs, pos = history[pos:], len(history)
                for _, k, typ, o in evs:
                    if k == kind and ns in (None, o["metadata"]["namespace"]):
                        line = json.dumps({"type": typ, "object": o}).encode() + b"\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
    def do_POST(self):
        r = self.route()
        if not r:
            return
        kind, ns, _, _ = r
        o = self.body()
        md = o.setdefault("metadata", {})
        md.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now())
        if kind == "pods":
            o.setdefault("spec", {})["nodeName"] = "standin-node"
            o["status"] = {"phase": "Pending"}
        with cv:
            if (kind, ns, md["name"]) in objs:
                return self.reply(409, {"kind": "Status", "code": 409})
            objs[(kind, ns, md["name"])] = o
            record(kind, "ADDED", o)
            self.reply(201, o)
    def do_PATCH(self):
        r = self.route()
        if not r:
            return
        kind, ns, name, sub = r
        b = self.body()
        assert self.headers.get("Content-Type") == "application/merge-patch+json"
        with cv:
            o = objs.get((kind, ns, name))
            if not o or sub != "status":
                return self.reply(404, {"kind": "Status", "code": 404})
            if b.get("metadata", {}).get("uid") not in (None, o["metadata"]["uid"]):
                return self.reply(409, {"kind": "Status", "code": 409})
            o.setdefault("status", {})
            merge(o["status"], b.get("status", {}))
            record(kind, "MODIFIED", o)
            self.reply(200, o)
    def do_DELETE(self):
        r = self.route()
        if not r:
            return
        kind, ns, name, _ = r
        b = self.body()
        grace = int(self.qs.get("gracePeriodSeconds", b.get("gracePeriodSeconds", 30)))
        with cv:
            o = objs.get((kind, ns, name))
            if not o:
                return self.reply(404, {"kind": "Status", "code": 404})
            pre = b.get("preconditions", {}).get("uid")
            if pre and pre != o["metadata"]["uid"]:
                return self.reply(409, {"kind": "Status", "code": 409})
            if kind == "pods" and grace > 0 and o.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                if "deletionTimestamp" not in o["metadata"]:
                    o["metadata"].update(deletionTimestamp=now(), deletionGracePeriodSeconds=grace)
                    record(kind, "MODIFIED", o)
                return self.reply(200, o)
            del objs[(kind, ns, name)]
            record(kind, "DELETED", o)
            self.reply(200, o)

srv = ThreadingHTTPServer(("0.0.0.0", port), H)
srv.daemon_threads = True
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(certdir + "/server.crt", certdir + "/server.key")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
PYEOF

D=$TMP/k
mkdir -p "$D" "$TMP/bin"
# an "image" whose entrypoint is a script named like it
printf '#!/bin/sh\necho "toolimg $*"\n' >"$TMP/bin/toolimg" && chmod +x "$TMP/bin/toolimg"
ready() { grep -qx "kubelet ready" "$TMP/kubelet.out"; }
kubelet_alive() { pgrep -f -- "kubelet.py .*--prefix $PFX " >/dev/null; }

if [ -n "$STANDIN" ]; then
    ASAN_OPTIONS=kept_for_pods LEAKY_VAR=not_for_pods $PY "$HERE/standin.py" --dir "$D" --prefix "$PFX" \
        --gateway "$GW" --kubelet-arg=--image --kubelet-arg="toolimg=$TMP/bin" >"$TMP/kubelet.out" 2>"$TMP/kubelet.log" &
    KPID=$!
    WAIT_POLLS=300 wait_for test -s "$D/ready" || { fail "standin: $(tail -5 "$TMP/kubelet.log")"; exit 1; }
    PORT=$(cat "$D/ready")
else
    (
        cd "$D" &&
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=fake-ca &&
        openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=fake-api &&
        printf 'subjectAltName=IP:%s,IP:127.0.0.1\n' "$GW" >san.ext &&
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt \
            -days 2 -extfile san.ext
    ) >"$TMP/openssl.log" 2>&1 || { fail "openssl: $(tail -3 "$TMP/openssl.log")"; exit 1; }
    echo "kubelet-token-$$" >"$D/token"
    echo "sa-token-$$" >"$D/sa-token"
    PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
    $PY "$TMP/fakeapi.py" "$PORT" "$D" 2>"$TMP/api.log" &
    APID=$!
    ASAN_OPTIONS=kept_for_pods LEAKY_VAR=not_for_pods $PY "$HERE/kubelet.py" --server "https://$GW:$PORT" \
        --ca "$D/ca.crt" --token-file "$D/token" --sa-token-file "$D/sa-token" --dir "$D" \
        --prefix "$PFX" --gateway "$GW" --image "toolimg=$TMP/bin" >"$TMP/kubelet.out" 2>"$TMP/kubelet.log" &
    KPID=$!
fi
WAIT_POLLS=150 wait_for ready && pass "kubelet ready" || { fail "not ready: $(tail -5 "$TMP/kubelet.log")"; exit 1; }
ip link show "$PFX-br" | grep -q "UP" && pass "bridge $PFX-br up" || fail "no bridge"

URL=https://$GW:$PORT/api/v1/namespaces/default
api() { curl -sS --cacert "$D/ca.crt" -H "Authorization: Bearer $(cat "$D/token")" "$@"; }
create() { api -X POST -H 'Content-Type: application/json' "$URL/$1" -d @- >/dev/null; }
# jpod NAME EXPR: EXPR (Python, the pod as p) of pod NAME; "" if there is no such pod
jpod() {
    api "$URL/pods/$1" | $PY -c '
import json, sys
p = json.load(sys.stdin)
if p.get("kind") == "Status": print(""); sys.exit()
st = p.get("status", {}); cs = {c["name"]: c for c in st.get("containerStatuses", [])}
print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
phase_is() { [ "$(jpod "$1" 'st.get("phase")')" = "$2" ]; }
gone() { [ -z "$(jpod "$1" 'p["metadata"]["name"]')" ]; }
LOGS=$D/logs/default

if section basic; then
    create pods <<'EOF'
{"metadata": {"name": "hello", "labels": {"app": "hello"}},
 "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
   "command": ["sh", "-c"], "args": ["setsid sleep 301 & echo hi $(GREETING); ip -4 addr show eth0; cat /etc/hosts; hostname; env | sort; ls /var/run/secrets/kubernetes.io/serviceaccount; cat /var/run/secrets/kubernetes.io/serviceaccount/token; echo; pwd"],
   "workingDir": "/tmp",
   "env": [{"name": "GREETING", "value": "there"}, {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}}]}]}}
EOF
    WAIT_POLLS=100 wait_for phase_is hello Succeeded && pass "hello: Succeeded" || fail "hello: $(jpod hello st)"
    ip=$(jpod hello 'st.get("podIP")')
    [[ "$ip" == 10.97.0.* ]] && pass "hello: podIP $ip" || fail "hello: podIP '$ip'"
    L=$LOGS/hello/main.log
    grep -q "^hi there$" "$L" && pass "log: hi there (\$(VAR) expanded)" || fail "log: $(head -3 "$L")"
    grep -q "inet $ip/16" "$L" && pass "eth0 has $ip/16" || fail "eth0: $(grep inet "$L")"
    grep -q "^$ip	hello$" "$L" && pass "/etc/hosts: own name" || fail "hosts: $(cat "$L")"
    grep -q "^$GW	kubernetes kubernetes.default" "$L" && pass "/etc/hosts: kubernetes" || fail "hosts: no kubernetes"
    grep -qx "hello" "$L" && pass "hostname hello" || fail "hostname: $(cat "$L")"
    for kv in "MY_NAME=hello" "MY_IP=$ip" "APP=hello" "HOSTNAME=hello" "HOME=/root" "KUBERNETES_SERVICE_HOST=$GW" \
        "KUBERNETES_SERVICE_PORT=$PORT" "KUBERNETES_PORT=tcp://$GW:$PORT" "ASAN_OPTIONS=kept_for_pods"; do
        grep -qx "$kv" "$L" && pass "env $kv" || fail "env: no $kv"
    done
    grep -q "LEAKY_VAR" "$L" && fail "the kubelet's environment leaked" || pass "no other kubelet variable"
    grep -qx "$(cat "$D/sa-token")" "$L" && grep -qx "namespace" "$L" && pass "service account mounted" || fail "no service account token"
    grep -qx "/tmp" "$L" && pass "workingDir" || fail "workingDir"
    [ "$(jpod hello 'cs["main"]["state"]["terminated"]["reason"], cs["main"]["state"]["terminated"]["exitCode"]')" = "('Completed', 0)" ] &&
        pass "hello: terminated Completed 0" || fail "hello: $(jpod hello 'cs["main"]')"
    [ "$(jpod hello '[(c["type"], c["status"]) for c in st["conditions"]]')" = "[('Initialized', 'True'), ('Ready', 'False'), ('ContainersReady', 'False'), ('PodScheduled', 'True')]" ] &&
        pass "hello: conditions" || fail "hello: conditions $(jpod hello 'st["conditions"]')"
    ! ip netns list | grep -q "^$PFX-" && pass "the finished pod's namespace is gone" || fail "namespace left: $(ip netns list)"
    pgrep -f "^sleep 301" >/dev/null && fail "a process that left the pod's process group survived" ||
        pass "the finished pod's processes are gone, even one in a session of its own"
fi

if section dns; then
    create services <<'EOF'
{"metadata": {"name": "web"}, "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 8080}]}}
EOF
    create pods <<'EOF'
{"metadata": {"name": "web-0", "labels": {"app": "web"}},
 "spec": {"hostname": "web-0", "subdomain": "web", "containers": [{"name": "srv", "image": "python",
   "command": ["/usr/bin/python3", "-m", "http.server", "8080", "--directory", "/srv"],
   "volumeMounts": [{"name": "content", "mountPath": "/srv"}]}],
   "initContainers": [{"name": "fill", "image": "busybox", "command": ["sh", "-c", "echo served-by-web-0 >/srv/index.html"],
                       "volumeMounts": [{"name": "content", "mountPath": "/srv"}]}],
   "volumes": [{"name": "content", "emptyDir": {}}]}}
EOF
    create pods <<'EOF'
{"metadata": {"name": "client"},
 "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "curl",
   "command": ["sh", "-c", "for i in $(seq 50); do curl -sf http://web.default.svc:8080/ && curl -sf http://web-0.web.default.svc.cluster.local:8080/ && exit 0; sleep 0.2; done; cat /etc/hosts; exit 1"]}]}}
EOF
    WAIT_POLLS=150 wait_for phase_is web-0 Running && pass "web-0 Running (after its init container)" || fail "web-0: $(jpod web-0 st)"
    [ "$(jpod web-0 'st["initContainerStatuses"][0]["state"]["terminated"]["reason"]')" = Completed ] &&
        pass "init container Completed" || fail "init: $(jpod web-0 'st.get("initContainerStatuses")')"
    WAIT_POLLS=150 wait_for phase_is client Succeeded && pass "client reached web.default.svc and web-0.web.default.svc.cluster.local" ||
        fail "client: $(jpod client st) $(cat "$LOGS/client/c.log")"
    [ "$(grep -c served-by-web-0 "$LOGS/client/c.log")" = 2 ] && pass "client got web-0's page twice" || fail "client log: $(cat "$LOGS/client/c.log")"
    wip=$(jpod web-0 'st["podIP"]')
    curl -sf "http://$wip:8080/" | grep -q served-by-web-0 && pass "the host reaches web-0 at $wip" || fail "host -> $wip"
    # a running pod sees a Service made after it started: its hosts file is rewritten in place
    create pods <<'EOF2'
{"metadata": {"name": "waiter"}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox",
   "command": ["sh", "-c", "echo started; for i in $(seq 100); do getent hosts late.default.svc && exit 0; sleep 0.1; done; exit 1"]}]}}
EOF2
    wait_for grep -qs started "$LOGS/waiter/c.log" && pass "waiter started" || fail "waiter: $(jpod waiter st)"
    create services <<<'{"metadata": {"name": "late"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}'
    WAIT_POLLS=150 wait_for phase_is waiter Succeeded && grep -q "^$(jpod web-0 'st["podIP"]') *late.default.svc" "$LOGS/waiter/c.log" &&
        pass "a Service made later resolves in a running pod" || fail "waiter: $(jpod waiter st) $(cat "$LOGS/waiter/c.log")"
    ns=$(ip netns list | grep -o "^$PFX-[0-9]*" | head -1)
    grep -q "^$wip	web.default.svc web.default.svc.cluster.local web.default web$" "/etc/netns/$ns/hosts" &&
        pass "hosts file of $ns lists web" || fail "hosts: $(cat "/etc/netns/$ns/hosts")"
fi

if section grace; then
    create pods <<'EOF'
{"metadata": {"name": "polite"},
 "spec": {"containers": [{"name": "m", "image": "busybox",
   "command": ["sh", "-c", "trap 'echo got-term; exit 0' TERM; echo started; while :; do sleep 0.1; done"]}]}}
EOF
    create pods <<'EOF'
{"metadata": {"name": "stubborn"}, "spec": {"terminationGracePeriodSeconds": 1,
  "containers": [{"name": "m", "image": "busybox", "command": ["sh", "-c", "trap '' TERM; echo started; while :; do sleep 0.1; done"]}]}}
EOF
    started() { grep -q started "$LOGS/$1/m.log" 2>/dev/null; }
    wait_for started polite && wait_for started stubborn && pass "polite and stubborn running" || fail "not started"
    api -X DELETE "$URL/pods/polite?gracePeriodSeconds=5" >/dev/null
    api -X DELETE "$URL/pods/stubborn?gracePeriodSeconds=1" >/dev/null
    s0=$(date +%s.%N)
    WAIT_POLLS=100 wait_for gone polite && pass "polite deleted" || fail "polite: $(jpod polite st)"
    grep -q got-term "$LOGS/polite/m.log" && pass "polite got SIGTERM" || fail "polite: no SIGTERM"
    WAIT_POLLS=100 wait_for gone stubborn && pass "stubborn deleted" || fail "stubborn: $(jpod stubborn st)"
    el=$(awk -v a="$(date +%s.%N)" -v b="$s0" 'BEGIN { printf "%.1f", a - b }')
    grep -q "pod default/polite: status Succeeded" "$TMP/kubelet.log" && pass "polite's last status: Succeeded (exit 0 on SIGTERM)" ||
        fail "polite: $(grep polite "$TMP/kubelet.log" | tail -3)"
    grep -q "container m (pid [0-9]*) exited 137" "$TMP/kubelet.log" && grep -q "pod default/stubborn: status Failed" "$TMP/kubelet.log" &&
        awk -v e="$el" 'BEGIN { exit !(e >= 1.9) }' &&
        pass "stubborn SIGKILLed after the minimum grace (2 s, asked 1): 137, Failed (${el}s)" || fail "stubborn: $(grep stubborn "$TMP/kubelet.log" | tail -4)"
fi

if section restarts; then
    create pods <<'EOF'
{"metadata": {"name": "flaky"},
 "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "m", "image": "busybox",
   "command": ["sh", "-c", "n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n >/data/n; echo attempt $n; [ $n -ge 3 ]"],
   "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
   "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "flaky-data"}}]}}
EOF
    WAIT_POLLS=100 wait_for phase_is flaky Succeeded && pass "flaky: Succeeded after restarts" || fail "flaky: $(jpod flaky st)"
    [ "$(jpod flaky 'cs["m"]["restartCount"], cs["m"]["lastState"]["terminated"]["exitCode"]')" = "(2, 1)" ] &&
        pass "flaky: restartCount 2, lastState exit 1" || fail "flaky: $(jpod flaky 'cs["m"]')"
    grep -qx "attempt 3" "$LOGS/flaky/m.log" && grep -qx "attempt 2" "$LOGS/flaky/m.previous.log" &&
        pass "log and previous log" || fail "logs: $(cat "$LOGS/flaky/"*)"
    [ "$(cat "$D/volumes/default/flaky-data/n")" = 3 ] && pass "PVC dir kept the count" || fail "pvc"
    create pods <<'EOF'
{"metadata": {"name": "always"}, "spec": {"containers": [{"name": "m", "image": "busybox", "command": ["sh", "-c", "exit 0"]}]}}
EOF
    restarted() { [ "$(jpod always 'cs["m"]["restartCount"]')" -ge 2 ] 2>/dev/null; }
    WAIT_POLLS=100 wait_for restarted && pass "Always: restarted after exit 0" || fail "always: $(jpod always 'cs')"
    [ "$(jpod always 'st["phase"]')" = Running ] && pass "Always: phase Running" || fail "always: $(jpod always st)"
    api -X DELETE "$URL/pods/always?gracePeriodSeconds=2" >/dev/null
    WAIT_POLLS=100 wait_for gone always && pass "always deleted" || fail "always: $(jpod always st)"
fi

if section errors; then
    create secrets <<'EOF'
{"metadata": {"name": "creds"}, "data": {"password": "czNjcjN0"}}
EOF
    create configmaps <<'EOF'
{"metadata": {"name": "conf"}, "data": {"app.conf": "x=1\n", "LEVEL": "debug"}}
EOF
    create pods <<'EOF'
{"metadata": {"name": "cfg"},
 "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "busybox",
   "command": ["sh", "-c", "echo pw=$PW level=$LEVEL; cat /etc/app/app.conf; cat /etc/creds/password; echo; touch /etc/app/x || echo read-only"],
   "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}}],
   "envFrom": [{"configMapRef": {"name": "conf"}}],
   "volumeMounts": [{"name": "conf", "mountPath": "/etc/app"}, {"name": "creds", "mountPath": "/etc/creds"}]}],
   "volumes": [{"name": "conf", "configMap": {"name": "conf"}}, {"name": "creds", "secret": {"secretName": "creds"}}]}}
EOF
    WAIT_POLLS=100 wait_for phase_is cfg Succeeded && pass "cfg: Succeeded" || fail "cfg: $(jpod cfg st)"
    grep -qx "pw=s3cr3t level=debug" "$LOGS/cfg/m.log" && grep -qx "x=1" "$LOGS/cfg/m.log" && grep -qx s3cr3t "$LOGS/cfg/m.log" &&
        pass "secret and configMap: env and files" || fail "cfg log: $(cat "$LOGS/cfg/m.log")"
    grep -qx "read-only" "$LOGS/cfg/m.log" && pass "configMap volume read-only" || fail "configMap volume writable"
    grep -q s3cr3t "$TMP/kubelet.log" && fail "a secret in the kubelet's log" || pass "no secret in the kubelet's log"
    grep -q "$(cat "$D/token")" "$TMP/kubelet.log" && fail "the token in the kubelet's log" || pass "no token in the kubelet's log"

    # mount points are made on the host (empty), so under $TMP/mnt
    create pods <<EOF
{"metadata": {"name": "mounts"},
 "spec": {"restartPolicy": "Never", "automountServiceAccountToken": false, "containers": [{"name": "m", "image": "busybox",
   "command": ["sh", "-c", "cat $TMP/mnt/one.conf; echo x >$TMP/mnt/host/f && echo host-writable; touch $TMP/mnt/ro/x 2>/dev/null || echo ro-refused; ls /var/run/secrets/kubernetes.io/serviceaccount 2>/dev/null | wc -l"],
   "volumeMounts": [{"name": "conf", "mountPath": "$TMP/mnt/one.conf", "subPath": "app.conf"},
                    {"name": "host", "mountPath": "$TMP/mnt/host"},
                    {"name": "scratch", "mountPath": "$TMP/mnt/ro", "readOnly": true}]}],
   "volumes": [{"name": "conf", "configMap": {"name": "conf"}}, {"name": "scratch", "emptyDir": {}},
               {"name": "host", "hostPath": {"path": "$TMP/hostdir", "type": "DirectoryOrCreate"}}]}}
EOF
    WAIT_POLLS=100 wait_for phase_is mounts Succeeded && pass "mounts: Succeeded" || fail "mounts: $(jpod mounts st)"
    [ "$(cat "$LOGS/mounts/m.log")" = "$(printf 'x=1\nhost-writable\nro-refused\n0')" ] && [ "$(cat "$TMP/hostdir/f")" = x ] &&
        pass "mounts: a configMap key by subPath, hostPath, a read-only emptyDir, no service account" ||
        fail "mounts: $(cat "$LOGS/mounts/m.log")"
    [ -f "$TMP/mnt/one.conf" ] && [ ! -s "$TMP/mnt/one.conf" ] && [ ! -e "$TMP/mnt/host/f" ] &&
        pass "the mounts stay inside the pod (the host has empty mount points)" || fail "a mount leaked to the host"

    create pods <<'EOF'
{"metadata": {"name": "nosecret"}, "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "busybox", "command": ["true"],
   "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "missing", "key": "k"}}}]}]}}
EOF
    waiting_is() { [ "$(jpod "$1" 'cs["m"]["state"].get("waiting", {}).get("reason")')" = "$2" ]; }
    wait_for waiting_is nosecret CreateContainerConfigError && pass "missing secret: CreateContainerConfigError" ||
        fail "nosecret: $(jpod nosecret st)"
    [ "$(jpod nosecret 'cs["m"]["state"]["waiting"]["message"]')" = 'secret "missing" not found' ] && pass "  message" || fail "message"
    create secrets <<<'{"metadata": {"name": "missing"}, "data": {"k": "dg=="}}'
    WAIT_POLLS=150 wait_for phase_is nosecret Succeeded && pass "once the secret exists it runs" || fail "nosecret: $(jpod nosecret st)"

    create pods <<'EOF'
{"metadata": {"name": "nocmd"}, "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "busybox:1.36"}]}}
EOF
    wait_for waiting_is nocmd CreateContainerError && pass "unknown image without command: CreateContainerError" || fail "nocmd: $(jpod nocmd st)"
    create pods <<'EOF'
{"metadata": {"name": "entry"}, "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "ghcr.io/x/toolimg:0.1", "args": ["a1"]}]}}
EOF
    WAIT_POLLS=100 wait_for phase_is entry Succeeded && grep -qx "toolimg a1" "$LOGS/entry/m.log" &&
        pass "--image image: its entrypoint from BINDIR" || fail "entry: $(jpod entry st) $(cat "$LOGS/entry/m.log")"
    create pods <<'EOF'
{"metadata": {"name": "badcmd"}, "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "busybox", "command": ["no-such-command-x"]}]}}
EOF
    WAIT_POLLS=100 wait_for phase_is badcmd Failed && pass "missing command: Failed" || fail "badcmd: $(jpod badcmd st)"
    [ "$(jpod badcmd 'cs["m"]["state"]["terminated"]["exitCode"], cs["m"]["state"]["terminated"]["reason"]')" = "(127, 'StartError')" ] &&
        pass "  terminated 127 StartError: $(jpod badcmd 'cs["m"]["state"]["terminated"]["message"]')" || fail "badcmd: $(jpod badcmd cs)"
    create pods <<'EOF'
{"metadata": {"name": "gpu"}, "spec": {"containers": [{"name": "m", "image": "dtrain", "command": ["true"],
   "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "2"}}}]}}
EOF
    unsched() { [ "$(jpod gpu '[c.get("reason"), c.get("message")] if (c := st.get("conditions", [{}])[0]) else 0')" = "['Unschedulable', '0/1 nodes are available: 1 Insufficient nvidia.com/gpu.']" ]; }
    wait_for unsched && pass "GPU pod: Unschedulable" || fail "gpu: $(jpod gpu st)"
    create pods <<'EOF'
{"metadata": {"name": "odd"}, "spec": {"containers": "nonsense", "volumes": [{"name": "v", "weird": {}}], "restartPolicy": 7}}
EOF
    create pods <<'EOF'
{"metadata": {"name": "odd2"}, "spec": {"containers": [{"volumeMounts": [{"name": "nope", "mountPath": "/x"}], "command": ["true"]}]}}
EOF
    sleep 1
    kubelet_alive && pass "odd pods did not crash the kubelet" || fail "kubelet died: $(tail "$TMP/kubelet.log")"
    for p in gpu odd odd2 nocmd; do api -X DELETE "$URL/pods/$p?gracePeriodSeconds=1" >/dev/null; done
    wait_for gone gpu && wait_for gone odd && wait_for gone odd2 && wait_for gone nocmd && pass "never-started pods deleted" || fail "left: $(api "$URL/pods" | head -c 300)"
fi

# a SIGKILLed kubelet leaves its namespaces; the next one removes them
if section crash && [ -z "$STANDIN" ]; then
    create pods <<'EOF'
{"metadata": {"name": "sleeper"}, "spec": {"containers": [{"name": "m", "image": "busybox", "command": ["sleep", "300"]}]}}
EOF
    WAIT_POLLS=100 wait_for phase_is sleeper Running || fail "sleeper: $(jpod sleeper st)"
    kill -9 "$KPID"; wait "$KPID" 2>/dev/null
    sleep 0.3
    pgrep -f "^sleep 300" >/dev/null && fail "sleep 300 outlived a SIGKILLed kubelet" || pass "the pod's process died with the kubelet (PDEATHSIG)"
    ip netns list | grep -q "^$PFX-" && pass "namespaces left by the killed kubelet" || fail "nothing left (?)"
    $PY "$HERE/kubelet.py" --server "https://$GW:$PORT" --ca "$D/ca.crt" --token-file "$D/token" \
        --sa-token-file "$D/sa-token" --dir "$D" --prefix "$PFX" --gateway "$GW" >"$TMP/kubelet.out" 2>>"$TMP/kubelet.log" &
    KPID=$!
    WAIT_POLLS=150 wait_for ready && pass "a second kubelet starts over the leftovers" || fail "second: $(tail -5 "$TMP/kubelet.log")"
fi

kill "$KPID"; wait "$KPID"; rc=$?
KPID=
[ $rc -eq 0 ] && pass "SIGTERM: exit 0" || fail "SIGTERM: exit $rc: $(tail -5 "$TMP/kubelet.log")"
left=$(ip netns list | grep "^$PFX-"; ip -o link | grep -E ": $PFX[-0-9]"; ls /etc/netns 2>/dev/null | grep "^$PFX-")
[ -z "$left" ] && pass "nothing left: no namespace, link or /etc/netns entry named $PFX*" || fail "left: $left"
pgrep -f "http.server 8080 --directory /srv" >/dev/null && fail "web-0's server still runs" || pass "no pod process left"
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
