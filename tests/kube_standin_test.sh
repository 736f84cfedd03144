#!/usr/bin/env bash
# kube_standin_test.sh - the stand-in Kubernetes API server (tests/tools/kube) answers as the
# real kube-apiserver does: over real HTTPS (curl --cacert), with kubectl --kubeconfig, and a
# small watch client. It starts the stand-in with --no-kubelet (a test plays the kubelet's part
# with curl where needed); the proxy section (services/NAME/proxy) starts a second one with its
# kubelet, which needs root (skipped otherwise). Its pods' network: bridge PREFIX-br, gateway
# GATEWAY/16, one per run (PREFIX dts<pid>, GATEWAY 10.200-249.0.1 by the pid: apart from
# kube_lib.sh's 10.100-199), or KUBE_STANDIN_TEST_PREFIX / KUBE_STANDIN_TEST_GATEWAY.
# Any wrong behaviour fails it. ONLY="auth pods ..." runs some parts.
set -u
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
TMP=$(mktemp -d /tmp/kube-standin-test-XXXXXX)
D=$TMP/kube
PASSED=0
FAILED=0
SPID=
PSPID=          # the proxy section's stand-in (with a kubelet)

cleanup() {
    local p
    for p in $SPID $PSPID; do
        kill -TERM "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    rm -rf "$TMP"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; FAILED=$((FAILED + 1)); }
pass() { echo "ok   $*"; PASSED=$((PASSED + 1)); }
section() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

# req METHOD PATH [BODY [CONTENT-TYPE]]: the response body goes to $TMP/body, its headers to
# $TMP/hdrs, the status code to $CODE. TOK overrides the token; XHDR adds a header.
req() {
    local m=$1 p=$2 body=${3-} ct=${4:-application/json}
    local args=(-sS --cacert "$D/ca.crt" -X "$m" -D "$TMP/hdrs" -o "$TMP/body" -w '%{http_code}')
    [ "$m" != HEAD ] || { args=(-sS --cacert "$D/ca.crt" -I -D "$TMP/hdrs" -o /dev/null -w '%{http_code}'); : >"$TMP/body"; }
    [ "${TOK-x}" = "" ] || args+=(-H "Authorization: Bearer ${TOK:-$TOKEN}")
    [ -z "${XHDR:-}" ] || args+=(-H "$XHDR")
    if [ -n "$body" ]; then
        args+=(-H "Content-Type: $ct" --data-binary "$body")
    fi
    CODE=$(curl "${args[@]}" "$URL$p")
}

# ok NAME WANT_CODE [PYTHON_CONDITION]: the last response had WANT_CODE and the condition holds
# (d: the body as JSON, or its text; h: the headers, lowercased; eh: the headers the proxy
# section's echo server got, keys lowercased).
ok() {
    local name=$1 want=$2 cond=${3:-True}
    if [ "$CODE" != "$want" ]; then
        fail "$name: HTTP $CODE, want $want: $(head -c 700 "$TMP/body")"
        return 1
    fi
    if $PY - "$TMP/body" "$TMP/hdrs" "$cond" <<'PYEOF'; then pass "$name"; else fail "$name: $3 does not hold: $(head -c 900 "$TMP/body")"; return 1; fi
import json, sys
raw = open(sys.argv[1]).read()
try:
    d = json.loads(raw)
except ValueError:
    d = raw
h = open(sys.argv[2]).read().lower()
eh = {k.lower(): v for k, v in d["headers"]} if isinstance(d, dict) and isinstance(d.get("headers"), list) else {}
sys.exit(0 if eval(sys.argv[3]) else 1)
PYEOF
}

# jget PYTHON_EXPR: evaluate on the last body (as d) and print the result.
jget() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print($1)" "$TMP/body"; }

wait_for() {
    for _ in $(seq "${WAIT_POLLS:-100}"); do "$@" && return 0; sleep 0.1; done
    return 1
}

KUBECTL=(kubectl --kubeconfig "$D/kubeconfig" --cache-dir "$TMP/kcache")
watch_client() { $PY "$SRC/tests/tools/kube/watch_client.py" "$URL$1" "$D/ca.crt" "$D/token" "${@:2}"; }
NS=/api/v1/namespaces/default
POD='{"metadata":{"name":"NAME","labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}'
pod() { echo "${POD/NAME/$1}"; }

# ---------------------------------------------------------------- start

$PY "$SRC/tests/tools/kube/standin.py" --dir "$D" --no-kubelet --job-backoff 0.3 --history 300 \
    --crd-establish-delay 0.3 --bookmark-interval 1 >"$TMP/standin.log" 2>&1 &
SPID=$!
if ! WAIT_POLLS=300 wait_for test -f "$D/ready"; then
    echo "FAIL: the stand-in did not start: $(cat "$TMP/standin.log")" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
PORT=$(cat "$D/ready")
URL=https://127.0.0.1:$PORT
TOKEN=$(cat "$D/token")

if section files; then
    for f in ca.crt ca.key server.crt server.key token sa-token kubeconfig; do
        [ -s "$D/$f" ] || fail "files: $f missing"
    done
    sans=$(openssl x509 -in "$D/server.crt" -noout -ext subjectAltName 2>&1)
    for s in "IP Address:127.0.0.1" "IP Address:10.99.0.1" "DNS:kubernetes.default.svc.cluster.local" "DNS:kubernetes"; do
        [[ $sans == *"$s"* ]] || fail "files: SAN $s missing: $sans"
    done
    openssl verify -CAfile "$D/ca.crt" "$D/server.crt" >/dev/null 2>&1 || fail "files: server.crt not signed by ca.crt"
    grep -q "server: https://127.0.0.1:$PORT" "$D/kubeconfig" && grep -q "certificate-authority-data:" "$D/kubeconfig" \
        && grep -q "current-context: standin" "$D/kubeconfig" && pass "files: certificates, tokens, kubeconfig" \
        || fail "files: kubeconfig: $(cat "$D/kubeconfig")"
fi

# ---------------------------------------------------------------- auth

if section auth; then
    TOK="" req GET /api/v1/namespaces
    ok "auth: no token is 401 Unauthorized" 401 'd == {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}'
    TOK=nope req GET /version
    ok "auth: a wrong token is 401" 401 'd["reason"] == "Unauthorized"'
    TOK=$(cat "$D/sa-token") req GET /api/v1/namespaces/default
    ok "auth: the service-account token is accepted" 200 'd["metadata"]["name"] == "default"'
fi

# ---------------------------------------------------------------- discovery

if section discovery; then
    req GET /version
    ok "discovery: /version" 200 'd["major"] == "1" and d["gitVersion"].startswith("v1.")'
    req GET /api
    ok "discovery: /api" 200 'd["kind"] == "APIVersions" and d["versions"] == ["v1"]'
    req GET /api/v1
    ok "discovery: /api/v1 lists pods with verbs, short names and subresources" 200 \
        'any(r["name"] == "pods" and r["namespaced"] and r["kind"] == "Pod" and "watch" in r["verbs"] and r["shortNames"] == ["po"] for r in d["resources"]) and any(r["name"] == "pods/log" for r in d["resources"]) and any(r["name"] == "namespaces" and not r["namespaced"] for r in d["resources"])'
    req GET /apis
    ok "discovery: /apis lists batch and apiextensions.k8s.io" 200 \
        '{g["name"] for g in d["groups"]} >= {"batch", "apiextensions.k8s.io"} and d["kind"] == "APIGroupList"'
    req GET /apis/batch/v1
    ok "discovery: /apis/batch/v1" 200 'any(r["name"] == "jobs" and r["kind"] == "Job" for r in d["resources"])'
    req GET /api/v1
    ok "discovery: /api/v1 lists services/proxy" 200 \
        'any(r["name"] == "services/proxy" and r["kind"] == "ServiceProxyOptions" and "create" in r["verbs"] for r in d["resources"])'
    req GET /api/v1/frobs
    ok "discovery: an unknown resource is 404" 404 'd["reason"] == "NotFound"'
    req GET /openapi/v3
    ok "discovery: /openapi/v3 (for kubectl's fieldValidation check)" 200 '"api/v1" in d["paths"]'
fi

# ---------------------------------------------------------------- namespaces

if section namespaces; then
    req POST /api/v1/namespaces/nope/configmaps '{"metadata":{"name":"x"}}'
    ok "namespaces: creating in a missing namespace is 404" 404 'd["message"] == "namespaces \"nope\" not found"'
    req GET /api/v1/namespaces/nope/configmaps/x
    ok "namespaces: get in a missing namespace is the object's 404" 404 'd["message"] == "configmaps \"x\" not found"'
    req POST /api/v1/namespaces '{"metadata":{"name":"team-a"}}'
    ok "namespaces: create" 201 'd["status"]["phase"] == "Active" and d["metadata"]["labels"]["kubernetes.io/metadata.name"] == "team-a"'
    wait_for eval 'req GET /api/v1/namespaces/team-a/serviceaccounts/default; [ "$CODE" = 200 ]'
    ok "namespaces: a default service account is made" 200
    req GET /api/v1/namespaces/team-a/configmaps/kube-root-ca.crt
    ok "namespaces: kube-root-ca.crt holds the CA" 200 '"BEGIN CERTIFICATE" in d["data"]["ca.crt"]'
    req POST /api/v1/namespaces '{"metadata":{"name":"Team_B"}}'
    ok "namespaces: a name that is not a DNS-1123 label is 422" 422 '"a lowercase RFC 1123 label must consist of" in d["message"]'
    req POST /api/v1/namespaces/team-a/pods "$(pod p)"
    req DELETE /api/v1/namespaces/team-a
    ok "namespaces: delete sets Terminating" 200 'd["status"]["phase"] == "Terminating" and d["metadata"]["deletionTimestamp"]'
    req POST /api/v1/namespaces/team-a/configmaps '{"metadata":{"name":"late"}}'
    ok "namespaces: no new content in a terminating namespace (403)" 403 \
        'd["message"] == "configmaps \"late\" is forbidden: unable to create new content in namespace team-a because it is being terminated"'
    wait_for eval 'req GET /api/v1/namespaces/team-a/pods/p; [ "$(jget "bool(d[\"metadata\"].get(\"deletionTimestamp\"))" 2>/dev/null)" = True ]' \
        || fail "namespaces: the pod in a terminating namespace is not being deleted"
    req DELETE "/api/v1/namespaces/team-a/pods/p?gracePeriodSeconds=0"     # the kubelet's part
    wait_for eval 'req GET /api/v1/namespaces/team-a; [ "$CODE" = 404 ]'
    ok "namespaces: the namespace goes once it is empty" 404
    req DELETE /api/v1/namespaces/default
    ok "namespaces: default may not be deleted" 403 'd["message"] == "namespaces \"default\" is forbidden: this namespace may not be deleted"'
fi

# ---------------------------------------------------------------- pods: create and validation

if section pods; then
    req POST $NS/pods "$(pod p1)"
    ok "pods: create is 201 Pending, scheduled, with uid, resourceVersion, timestamps" 201 \
        'd["status"]["phase"] == "Pending" and d["spec"]["nodeName"] == "standin-node" and len(d["metadata"]["uid"]) == 36 and d["metadata"]["resourceVersion"].isdigit() and __import__("re").match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", d["metadata"]["creationTimestamp"]) and d["kind"] == "Pod" and d["apiVersion"] == "v1"'
    ok "pods: defaults and service-account admission" 201 \
        'd["spec"]["restartPolicy"] == "Always" and d["spec"]["terminationGracePeriodSeconds"] == 30 and d["spec"]["serviceAccountName"] == "default" and d["spec"]["containers"][0]["imagePullPolicy"] == "Always" and any(v["name"].startswith("kube-api-access-") for v in d["spec"]["volumes"])'
    req POST $NS/pods "$(pod p1)"
    ok "pods: create of an existing name is 409 AlreadyExists" 409 'd["reason"] == "AlreadyExists" and d["message"] == "pods \"p1\" already exists"'
    req POST $NS/pods '{"metadata":{"generateName":"gen-"},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    ok "pods: generateName gets 5 random characters" 201 '__import__("re").match(r"^gen-[a-z0-9]{5}$", d["metadata"]["name"])'
    req POST $NS/pods '{"metadata":{"name":"u"},"spec":{"containers":[{"name":"c","imagee":"i","foo":1}],"bar":2}}'
    ok "pods: unknown fields are 400, all listed" 400 \
        'd["reason"] == "BadRequest" and d["message"] == "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"spec.bar\", unknown field \"spec.containers[0].foo\", unknown field \"spec.containers[0].imagee\"" or d["message"] == "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"spec.containers[0].imagee\", unknown field \"spec.containers[0].foo\", unknown field \"spec.bar\""'
    req POST $NS/pods '{"metadata":{"name":"u","name":"v"},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    ok "pods: a duplicate field is 400" 400 '"duplicate field \"metadata.name\"" in d["message"]'
    req POST $NS/pods '{"metadata":{"name":"u"},"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":"80"}]}]}}'
    ok "pods: a wrong type is 400 naming the field and the types" 400 \
        'd["message"] == "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32"'
    req POST $NS/pods '{"metadata":{"name":"u"},"spec":{"containers":[{"name":"c"}]}}'
    ok "pods: a container without image is 422" 422 \
        'd["reason"] == "Invalid" and d["message"] == "Pod \"u\" is invalid: spec.containers[0].image: Required value" and d["details"]["causes"] == [{"reason":"FieldValueRequired","message":"Required value","field":"spec.containers[0].image"}]'
    req POST $NS/pods '{"metadata":{"name":"u"},"spec":{"containers":[{"image":"i"}]}}'
    ok "pods: a container without name is 422" 422 '"spec.containers[0].name: Required value" in d["message"]'
    req POST $NS/pods '{"metadata":{"name":"u"},"spec":{}}'
    ok "pods: no containers is 422" 422 '"spec.containers: Required value" in d["message"]'
    req POST $NS/pods '{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    ok "pods: no name is 422" 422 '"metadata.name: Required value: name or generateName is required" in d["message"]'
    req POST $NS/pods '{"metadata":{"name":"U_1"},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    ok "pods: a name that is not a DNS-1123 subdomain is 422" 422 '"a lowercase RFC 1123 subdomain must consist of" in d["message"]'
    req POST $NS/pods '{"metadata":{"name":"u","labels":{"bad key!":"v","k":"-x-"}},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    ok "pods: invalid label key and value are 422" 422 \
        '"metadata.labels: Invalid value: \"bad key!\"" in d["message"] and "metadata.labels: Invalid value: \"-x-\": a valid label must be an empty string or consist of alphanumeric characters" in d["message"]'
    long=$(printf 'a%.0s' $(seq 64))
    req POST $NS/pods "{\"metadata\":{\"name\":\"u\",\"labels\":{\"k\":\"$long\"}},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}"
    ok "pods: a label value over 63 characters is 422" 422 '"must be no more than 63 characters" in d["message"]'
    req POST $NS/pods '{"metadata":{"name":"u"},"spec":{"restartPolicy":"Sometimes","containers":[{"name":"Cc","image":"i","ports":[{"containerPort":70000,"name":"this-name-is-too-long"}],"env":[{"name":"1BAD","value":"x"}]},{"name":"Cc","image":"j"}]}}'
    ok "pods: container name, duplicate, port range, port name, env name, restartPolicy are 422" 422 \
        'all(s in d["message"] for s in ["spec.containers[0].name: Invalid value: \"Cc\": a lowercase RFC 1123 label", "spec.containers[1].name: Duplicate value: \"Cc\"", "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive", "spec.containers[0].ports[0].name: Invalid value: \"this-name-is-too-long\": must be no more than 15 characters", "spec.containers[0].env[0].name: Invalid value: \"1BAD\": a valid environment variable name", "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""]) and d["message"].startswith("Pod \"u\" is invalid: [")'
    req POST $NS/pods '{"metadata":{"name":"u","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x"}]},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    ok "pods: an ownerReference without uid is 422" 422 '"metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty" in d["message"]'
    req POST $NS/pods '{"metadata":{"name":"u"},"spec":{"containers":[{"name":"c","image":"i","volumeMounts":[{"name":"nope","mountPath":"/x"}]}]}}'
    ok "pods: a mount of a missing volume is 422" 422 '"spec.containers[0].volumeMounts[0].name: Not found: \"nope\"" in d["message"]'
    req POST $NS/pods '{"metadata":{"name":"u","namespace":"other"},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    ok "pods: a body namespace that is not the URL's is 400" 400 '"does not match the namespace" in d["message"]'
    req POST $NS/pods '{"apiVersion":"v1","kind":"Service","metadata":{"name":"u"}}'
    ok "pods: a body of another kind is 400" 400 'd["reason"] == "BadRequest"'
    req POST $NS/pods '{"metadata":{"name":"u","resourceVersion":"5"},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    ok "pods: create with a resourceVersion is refused (as the real server: 500)" 500 '"resourceVersion should not be set" in d["message"]'
    req POST $NS/pods '{"metadata":{"name":"u"},"spec":{"serviceAccountName":"robot","containers":[{"name":"c","image":"i"}]}}'
    ok "pods: a missing service account is 403" 403 'd["message"] == "pods \"u\" is forbidden: error looking up service account default/robot: serviceaccount \"robot\" not found"'
    req POST $NS/pods '{"metadata":{"name":"u"' application/json
    ok "pods: malformed JSON is 400" 400 'd["reason"] == "BadRequest"'
    req POST $NS/pods "$(pod u)" application/x-www-form-urlencoded
    ok "pods: a body that is not JSON or YAML is 415" 415 'd["reason"] == "UnsupportedMediaType"'
    req POST $NS/pods "apiVersion: v1
kind: Pod
metadata: {name: from-yaml}
spec: {containers: [{name: c, image: i}]}" application/yaml
    ok "pods: a YAML body is accepted" 201 'd["metadata"]["name"] == "from-yaml"'
fi

# ---------------------------------------------------------------- get, list, selectors

if section list; then
    req POST $NS/pods '{"metadata":{"name":"l1","labels":{"app":"a","tier":"x"}},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    req POST $NS/pods '{"metadata":{"name":"l2","labels":{"app":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    req POST $NS/pods '{"metadata":{"name":"l3","labels":{"app":"c","tier":"y"}},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    req GET $NS/pods/nope
    ok "list: get of a missing pod is 404" 404 'd == {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"nope\" not found","reason":"NotFound","details":{"name":"nope","kind":"pods"},"code":404}'
    req GET "$NS/pods"
    ok "list: a PodList with the current resourceVersion; items without kind" 200 \
        'd["kind"] == "PodList" and d["metadata"]["resourceVersion"].isdigit() and all("kind" not in i for i in d["items"])'
    sel() { req GET "$NS/pods?labelSelector=$1"; jget '",".join(sorted(i["metadata"]["name"] for i in d["items"] if i["metadata"]["name"] in ("l1","l2","l3")))'; }
    for t in "app%3Da:l1" "app%3D%3Da:l1" "app!%3Da:l2,l3" "app%20in%20(a,b):l1,l2" "app%20notin%20(a,b):l3" \
             "tier:l1,l3" "!tier:l2" "app%3Dc,tier%3Dy:l3" "tier!%3Dx:l2,l3"; do
        got=$(sel "${t%%:*}")
        [ "$got" = "${t##*:}" ] && pass "list: labelSelector ${t%%:*}" || fail "list: labelSelector ${t%%:*}: got '$got', want '${t##*:}'"
    done
    req GET "$NS/pods?labelSelector=app%20in%20(a"
    ok "list: a malformed label selector is 400" 400 'd["reason"] == "BadRequest"'
    req GET "$NS/pods?fieldSelector=metadata.name%3Dl2"
    ok "list: fieldSelector metadata.name" 200 '[i["metadata"]["name"] for i in d["items"]] == ["l2"]'
    req PATCH $NS/pods/l2/status '{"status":{"phase":"Running"}}' application/merge-patch+json
    req GET "$NS/pods?fieldSelector=status.phase%3DRunning"
    ok "list: fieldSelector status.phase" 200 '[i["metadata"]["name"] for i in d["items"]] == ["l2"]'
    req GET "$NS/pods?fieldSelector=spec.nodeName%3Dstandin-node,metadata.name!%3Dl1"
    ok "list: fieldSelector spec.nodeName and !=" 200 '"l1" not in [i["metadata"]["name"] for i in d["items"]] and "l2" in [i["metadata"]["name"] for i in d["items"]]'
    req GET "$NS/pods?fieldSelector=spec.foo%3Dx"
    ok "list: an unsupported field selector is 400" 400 'd["message"] == "field label not supported: spec.foo"'
    req GET "/api/v1/pods?limit=2"
    ok "list: limit gives a continue token" 200 'len(d["items"]) == 2 and d["metadata"]["continue"] and d["metadata"]["remainingItemCount"] >= 1'
    tok=$(jget 'd["metadata"]["continue"]')
    first=$(jget '",".join(i["metadata"]["name"] for i in d["items"])')
    req GET "/api/v1/pods?limit=500&continue=$tok"
    ok "list: continue gives the rest" 200 "not set(i['metadata']['name'] for i in d['items']) & set('$first'.split(','))"
    req GET "/api/v1/pods"
    ok "list: all namespaces, sorted by namespace and name" 200 \
        '[(i["metadata"]["namespace"], i["metadata"]["name"]) for i in d["items"]] == sorted((i["metadata"]["namespace"], i["metadata"]["name"]) for i in d["items"])'
fi

# ---------------------------------------------------------------- update and patch

if section update; then
    req POST $NS/pods "$(pod up)"
    rv=$(jget 'd["metadata"]["resourceVersion"]')
    req PATCH $NS/pods/up '{"metadata":{"labels":{"v":"1"}}}' application/merge-patch+json
    ok "update: merge patch" 200 'd["metadata"]["labels"] == {"app":"web","v":"1"} and int(d["metadata"]["resourceVersion"]) > '"$rv"
    req PUT $NS/pods/up "{\"metadata\":{\"name\":\"up\",\"resourceVersion\":\"$rv\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}"
    ok "update: PUT with a stale resourceVersion is 409 Conflict" 409 \
        'd["reason"] == "Conflict" and d["message"] == "Operation cannot be fulfilled on pods \"up\": the object has been modified; please apply your changes to the latest version and try again"'
    req GET $NS/pods/up
    $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); d["metadata"]["labels"]["v"]="2"; d["status"]["phase"]="Running"; json.dump(d, open(sys.argv[2],"w"))' "$TMP/body" "$TMP/put.json"
    req PUT $NS/pods/up "$(cat "$TMP/put.json")"
    ok "update: PUT with the current resourceVersion; status is ignored" 200 'd["metadata"]["labels"]["v"] == "2" and d["status"]["phase"] == "Pending"'
    req PUT $NS/pods/up/status "$(cat "$TMP/put.json")"
    ok "update: PUT /status is 409 with the old resourceVersion" 409 'd["reason"] == "Conflict"'
    req PATCH $NS/pods/up/status '{"metadata":{"labels":{"v":"3"}},"status":{"phase":"Running","podIP":"10.99.0.7"}}' application/merge-patch+json
    ok "update: /status changes only the status (podIPs follow podIP)" 200 \
        'd["status"]["phase"] == "Running" and d["metadata"]["labels"]["v"] == "2" and d["status"]["podIPs"] == [{"ip":"10.99.0.7"}]'
    req PUT $NS/pods/up '{"metadata":{"name":"other"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}'
    ok "update: a body name that is not the URL's is 400" 400 'd["message"] == "the name of the object (other) does not match the name on the URL (up)"'
    req PUT $NS/pods/nope "$(pod nope)"
    ok "update: PUT of a missing object is 404" 404 'd["reason"] == "NotFound"'
    req PATCH $NS/pods/up '{"spec":{"containers":[{"name":"c","image":"busybox:2"}]}}' application/strategic-merge-patch+json
    ok "update: strategic merge patch (containers merge by name)" 200 \
        'len(d["spec"]["containers"]) == 1 and d["spec"]["containers"][0]["image"] == "busybox:2" and d["spec"]["containers"][0]["terminationMessagePath"] and d["metadata"]["generation"] == 2'
    req PATCH $NS/pods/up '{"spec":{"restartPolicy":"Never"}}' application/merge-patch+json
    ok "update: a pod spec change other than the image is 422 Forbidden" 422 '"spec: Forbidden: pod updates may not change fields other than" in d["message"]'
    req PATCH $NS/pods/up '[{"op":"replace","path":"/metadata/labels/v","value":"9"},{"op":"test","path":"/metadata/labels/app","value":"web"}]' application/json-patch+json
    ok "update: JSON patch" 200 'd["metadata"]["labels"]["v"] == "9"'
    req PATCH $NS/pods/up '[{"op":"test","path":"/metadata/labels/app","value":"nope"}]' application/json-patch+json
    ok "update: a failed JSON patch test is 422" 422
    req PATCH $NS/pods/up '{"metadata":{"labels":{"x":"y"}}}' text/plain
    ok "update: an unknown patch type is 415" 415 '"application/merge-patch+json" in d["message"]'
    req PATCH $NS/pods/up '{"spec":{"containers":[{"name":"c","imagee":"x"}]}}' application/strategic-merge-patch+json
    ok "update: a patch adding an unknown field is 400" 400 '"unknown field \"spec.containers[0].imagee\"" in d["message"]'
    req GET $NS/pods/up
    rv1=$(jget 'd["metadata"]["resourceVersion"]')
    req PATCH $NS/pods/up '{"metadata":{"labels":{"v":"9"}}}' application/merge-patch+json
    ok "update: a no-op patch keeps the resourceVersion" 200 'd["metadata"]["resourceVersion"] == "'"$rv1"'"'
fi

# ---------------------------------------------------------------- delete

if section delete; then
    req POST $NS/pods '{"metadata":{"name":"d1"},"spec":{"terminationGracePeriodSeconds":45,"containers":[{"name":"c","image":"i"}]}}'
    uid=$(jget 'd["metadata"]["uid"]')
    req DELETE $NS/pods/d1
    ok "delete: a scheduled pod is deleted gracefully (200, deletionTimestamp, grace from the spec)" 200 \
        'd["kind"] == "Pod" and d["metadata"]["deletionTimestamp"] and d["metadata"]["deletionGracePeriodSeconds"] == 45'
    req GET $NS/pods/d1
    ok "delete: the pod is still there while terminating" 200
    req DELETE $NS/pods/d1 '{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":0,"preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}}'
    ok "delete: a uid precondition that does not hold is 409" 409 '"Precondition failed: UID in precondition" in d["message"]'
    req DELETE $NS/pods/d1 "{\"kind\":\"DeleteOptions\",\"apiVersion\":\"v1\",\"gracePeriodSeconds\":0,\"preconditions\":{\"uid\":\"$uid\"}}"
    ok "delete: the kubelet's delete with gracePeriodSeconds=0 removes it" 200 'd["metadata"]["name"] == "d1"'
    req GET $NS/pods/d1
    ok "delete: gone" 404
    req POST $NS/pods "$(pod d2)"
    req PATCH $NS/pods/d2/status '{"status":{"phase":"Succeeded"}}' application/merge-patch+json
    req DELETE $NS/pods/d2
    req GET $NS/pods/d2
    ok "delete: a pod that has ended goes at once" 404
    req POST $NS/pods "$(pod d3)"
    req DELETE "$NS/pods/d3?gracePeriodSeconds=5"
    ok "delete: gracePeriodSeconds in the query" 200 'd["metadata"]["deletionGracePeriodSeconds"] == 5'
    req DELETE "$NS/pods/d3?gracePeriodSeconds=0"
    req GET $NS/pods/d3
    ok "delete: gracePeriodSeconds=0 in the query removes it" 404
    req POST $NS/configmaps '{"metadata":{"name":"cm1"},"data":{"a":"b"}}'
    req DELETE $NS/configmaps/cm1
    ok "delete: a config map's delete answers a Status Success" 200 'd["kind"] == "Status" and d["status"] == "Success" and d["details"]["name"] == "cm1" and d["details"]["kind"] == "configmaps"'
    req DELETE $NS/configmaps/cm1
    ok "delete: again is 404" 404 'd["message"] == "configmaps \"cm1\" not found"'
    req DELETE "$NS/configmaps/x?propagationPolicy=Sideways"
    ok "delete: a bad propagationPolicy is 422 (or 404 first)" 404
    req POST $NS/configmaps '{"metadata":{"name":"cm2"}}'
    req DELETE "$NS/configmaps/cm2?propagationPolicy=Sideways"
    ok "delete: a bad propagationPolicy is 422" 422 '"Unsupported value: \"Sideways\"" in d["message"]'
    req POST $NS/configmaps '{"metadata":{"name":"cm3","finalizers":["example.com/hold"]}}'
    req DELETE $NS/configmaps/cm3
    ok "delete: an object with a finalizer stays, with deletionTimestamp" 200 'd["metadata"]["deletionTimestamp"] and d["metadata"]["finalizers"] == ["example.com/hold"]'
    req PATCH $NS/configmaps/cm3 '{"metadata":{"finalizers":["example.com/hold","example.com/more"]}}' application/merge-patch+json
    ok "delete: no new finalizer on an object being deleted" 422 '"no new finalizers can be added if the object is being deleted" in d["message"]'
    req PATCH $NS/configmaps/cm3 '{"metadata":{"finalizers":null}}' application/merge-patch+json
    req GET $NS/configmaps/cm3
    ok "delete: removing the last finalizer removes the object" 404
fi

# ---------------------------------------------------------------- watch

if section watch; then
    req GET $NS/configmaps
    rv=$(jget 'd["metadata"]["resourceVersion"]')
    watch_client "$NS/configmaps?watch=1&resourceVersion=$rv&labelSelector=w%3D1&timeoutSeconds=3" >"$TMP/w1" &
    wpid=$!
    sleep 0.3
    req POST $NS/configmaps '{"metadata":{"name":"w1","labels":{"w":"1"}}}'
    req PATCH $NS/configmaps/w1 '{"data":{"a":"b"}}' application/merge-patch+json
    req PATCH $NS/configmaps/w1 '{"metadata":{"labels":{"w":"2"}}}' application/merge-patch+json
    req PATCH $NS/configmaps/w1 '{"metadata":{"labels":{"w":"1"}}}' application/merge-patch+json
    req POST $NS/configmaps '{"metadata":{"name":"w2","labels":{"w":"0"}}}'
    req DELETE $NS/configmaps/w1
    wait $wpid
    got=$(awk '{print $1, $2}' "$TMP/w1" | tr '\n' ';')
    want="ADDED w1;MODIFIED w1;DELETED w1;ADDED w1;DELETED w1;END clean;"
    [ "$got" = "$want" ] && pass "watch: events from a resourceVersion, with selector transitions, timeoutSeconds ends cleanly" \
        || fail "watch: got '$got', want '$want'"
    watch_client "$NS/configmaps?watch=true&labelSelector=w&timeoutSeconds=1" >"$TMP/w2"
    got=$(awk '{print $1, $2}' "$TMP/w2" | tr '\n' ';')
    [ "$got" = "ADDED w2;END clean;" ] && pass "watch: without resourceVersion, synthetic ADDED for what exists" \
        || fail "watch: initial events: $got"
    watch_client "/api/v1/watch/namespaces/default/configmaps/w2?timeoutSeconds=1" >"$TMP/w2b"
    grep -q "^ADDED w2" "$TMP/w2b" && pass "watch: the /watch/ path form" || fail "watch: /watch/ path: $(cat "$TMP/w2b")"
    watch_client "$NS/configmaps?watch=1&resourceVersion=$rv&allowWatchBookmarks=true&timeoutSeconds=3" >"$TMP/w3"
    grep -q "^BOOKMARK" "$TMP/w3" && pass "watch: bookmarks" || fail "watch: no bookmark: $(cat "$TMP/w3")"
    watch_client "$NS/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1" >"$TMP/w3b"
    grep -q "initial-events-end" "$TMP/w3b" && pass "watch: sendInitialEvents ends the initial list with a bookmark" \
        || fail "watch: sendInitialEvents: $(cat "$TMP/w3b")"
    watch_client "$NS/configmaps?watch=1&resourceVersion=$rv&timeoutSeconds=20" >"$TMP/w4" &
    wpid=$!
    sleep 0.5
    req POST /_standin/drop-watches
    ok "watch: drop-watches" 200 'd["dropped"] >= 1'
    wait $wpid
    grep -q "^END abrupt" "$TMP/w4" && pass "watch: a dropped watch ends without its last chunk" || fail "watch: drop: $(cat "$TMP/w4")"
    req POST /_standin/compact
    watch_client "$NS/configmaps?watch=1&resourceVersion=$rv" >"$TMP/w5"
    grep -q "^ERROR 410 Expired too old resource version: $rv (" "$TMP/w5" && grep -q "^END clean" "$TMP/w5" \
        && pass "watch: after compaction an old resourceVersion gets 200 then one ERROR 410 Expired" || fail "watch: compact: $(cat "$TMP/w5")"
    req GET $NS/configmaps
    rv=$(jget 'd["metadata"]["resourceVersion"]')
    for i in $(seq 320); do echo "{\"metadata\":{\"name\":\"h$i\"}}"; done >"$TMP/many"
    while read -r line; do curl -sS --cacert "$D/ca.crt" -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" \
        -o /dev/null -X POST --data-binary "$line" "$URL$NS/configmaps"; done <"$TMP/many"
    watch_client "$NS/configmaps?watch=1&resourceVersion=$rv" >"$TMP/w6"
    grep -q "^ERROR 410 Expired" "$TMP/w6" && pass "watch: a resourceVersion older than the history window is 410" \
        || fail "watch: window: $(head -3 "$TMP/w6")"
    req DELETE "$NS/configmaps?labelSelector=w"
    ok "watch: deletecollection with a selector" 200 'd["kind"] == "ConfigMapList" and len(d["items"]) == 1'
    # A client that goes away in the middle of a watch does not hurt the server.
    timeout 1 curl -sS -N --cacert "$D/ca.crt" -H "Authorization: Bearer $TOKEN" "$URL$NS/pods?watch=1" >/dev/null 2>&1
    req GET /version
    ok "watch: the server is well after a client left mid-stream" 200
fi

# ---------------------------------------------------------------- services, secrets, PVCs

if section kinds; then
    req POST $NS/services '{"metadata":{"name":"web"},"spec":{"selector":{"app":"web"},"ports":[{"name":"http","port":80},{"name":"grpc","port":90,"targetPort":9090}]}}'
    ok "kinds: a service gets a cluster IP in 10.96.0.0/16; targetPort defaults to port" 201 \
        'd["spec"]["clusterIP"].startswith("10.96.") and d["spec"]["clusterIPs"] == [d["spec"]["clusterIP"]] and d["spec"]["ports"][0]["targetPort"] == 80 and d["spec"]["ports"][1]["targetPort"] == 9090 and d["spec"]["type"] == "ClusterIP"'
    req POST $NS/services '{"metadata":{"name":"hl"},"spec":{"clusterIP":"None","selector":{"app":"web"}}}'
    ok "kinds: a headless service" 201 'd["spec"]["clusterIP"] == "None"'
    req POST $NS/services '{"metadata":{"name":"9web"},"spec":{"ports":[{"port":80}]}}'
    ok "kinds: a service name must be a DNS-1035 label" 422 \
        "d['message'] == \"Service \\\"9web\\\" is invalid: metadata.name: Invalid value: \\\"9web\\\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')\""
    req POST $NS/services '{"metadata":{"name":"noport"},"spec":{"ports":[{"name":"a"}]}}'
    ok "kinds: a service port needs a port number" 422 '"spec.ports[0].port" in d["message"]'
    req POST $NS/services '{"metadata":{"name":"twoports"},"spec":{"ports":[{"port":80},{"port":81}]}}'
    ok "kinds: several service ports need names" 422 '"spec.ports[0].name: Required value" in d["message"]'
    req POST $NS/secrets '{"metadata":{"name":"s1"},"data":{"k":"not base64!"}}'
    ok "kinds: secret data must be base64" 400 'd["message"].startswith("Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte")'
    req POST $NS/secrets '{"metadata":{"name":"s1"},"stringData":{"k":"v"},"data":{"j":"dg=="}}'
    ok "kinds: stringData goes into data" 201 'd["data"] == {"j":"dg==","k":"dg=="} and "stringData" not in d and d["type"] == "Opaque"'
    req POST $NS/persistentvolumeclaims '{"metadata":{"name":"data"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}'
    ok "kinds: a PVC is Bound at once" 201 'd["status"]["phase"] == "Bound" and d["spec"]["volumeName"] and d["status"]["capacity"]["storage"] == "1Gi"'
    [ -d "$D/volumes/default/data" ] && pass "kinds: the PVC's directory exists" || fail "kinds: no $D/volumes/default/data"
    req POST $NS/persistentvolumeclaims '{"metadata":{"name":"bad"},"spec":{"resources":{"requests":{"storage":"1Gi"}}}}'
    ok "kinds: a PVC needs accessModes" 422 '"spec.accessModes: Required value" in d["message"]'
    req DELETE $NS/persistentvolumeclaims/data
    wait_for eval 'req GET $NS/persistentvolumeclaims/data; [ "$CODE" = 404 ]'
    ok "kinds: a PVC no pod uses is deleted" 404
    [ ! -d "$D/volumes/default/data" ] && pass "kinds: its directory went with it" || fail "kinds: $D/volumes/default/data still there"
    req POST $NS/events '{"metadata":{"name":"ev1"},"involvedObject":{"kind":"Pod","name":"x","namespace":"default"},"reason":"Test","message":"hello","type":"Normal"}'
    ok "kinds: events are accepted" 201
    req GET "$NS/events?fieldSelector=involvedObject.name%3Dx"
    ok "kinds: and listed by involvedObject" 200 '[i["reason"] for i in d["items"]] == ["Test"]'
    req POST $NS/events '{"metadata":{"name":"ev2"},"eventTime":"2026-01-01T00:00:00.000000Z","involvedObject":{"kind":"Pod","name":"x","namespace":"default"},"reason":"Test"}'
    ok "kinds: a new-style event needs its reporting fields" 422 '"reportingComponent: Required value" in d["message"] and "action: Required value" in d["message"]'
fi

# ---------------------------------------------------------------- garbage collection

if section gc; then
    req POST $NS/configmaps '{"metadata":{"name":"owner"}}'
    ouid=$(jget 'd["metadata"]["uid"]')
    ref="{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"name\":\"owner\",\"uid\":\"$ouid\""
    req POST $NS/configmaps "{\"metadata\":{\"name\":\"dep1\",\"ownerReferences\":[$ref}]}}"
    req POST $NS/pods "{\"metadata\":{\"name\":\"dep2\",\"ownerReferences\":[$ref,\"blockOwnerDeletion\":true}]},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}"
    req DELETE $NS/configmaps/owner
    wait_for eval 'req GET $NS/configmaps/dep1; [ "$CODE" = 404 ]'
    ok "gc: background: a dependent goes with its owner" 404
    req GET $NS/pods/dep2
    ok "gc: background: a dependent pod is deleted gracefully" 200 'd["metadata"].get("deletionTimestamp")'
    req DELETE "$NS/pods/dep2?gracePeriodSeconds=0"
    req POST $NS/configmaps '{"metadata":{"name":"dangling","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"ghost","uid":"11111111-2222-3333-4444-555555555555"}]}}'
    ok "gc: an object whose owner does not exist is created" 201
    wait_for eval 'req GET $NS/configmaps/dangling; [ "$CODE" = 404 ]'
    ok "gc: and collected shortly after" 404
    req POST $NS/configmaps '{"metadata":{"name":"fg"}}'
    ouid=$(jget 'd["metadata"]["uid"]')
    req POST $NS/pods "{\"metadata\":{\"name\":\"fgdep\",\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"name\":\"fg\",\"uid\":\"$ouid\",\"blockOwnerDeletion\":true}]},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}"
    req DELETE "$NS/configmaps/fg" '{"propagationPolicy":"Foreground"}'
    ok "gc: foreground: the owner gets deletionTimestamp and the foregroundDeletion finalizer" 200 \
        'd["metadata"]["deletionTimestamp"] and "foregroundDeletion" in d["metadata"]["finalizers"]'
    sleep 0.5
    req GET $NS/configmaps/fg
    ok "gc: foreground: the owner waits for its dependent" 200
    req DELETE "$NS/pods/fgdep?gracePeriodSeconds=0"
    wait_for eval 'req GET $NS/configmaps/fg; [ "$CODE" = 404 ]'
    ok "gc: foreground: the owner goes after its dependent" 404
    req POST $NS/configmaps '{"metadata":{"name":"or"}}'
    ouid=$(jget 'd["metadata"]["uid"]')
    req POST $NS/configmaps "{\"metadata\":{\"name\":\"ordep\",\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"name\":\"or\",\"uid\":\"$ouid\"}]}}"
    req DELETE "$NS/configmaps/or?propagationPolicy=Orphan"
    wait_for eval 'req GET $NS/configmaps/or; [ "$CODE" = 404 ]'
    req GET $NS/configmaps/ordep
    ok "gc: orphan: the dependent stays, without its ownerReference" 200 '"ownerReferences" not in d["metadata"]'
fi

# ---------------------------------------------------------------- jobs

if section jobs; then
    JOB='{"metadata":{"name":"NAME"},"spec":{"backoffLimit":BL,"template":{"metadata":{"labels":{"app":"t"}},"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"i"}]}}}}'
    job() { local j=${JOB/NAME/$1}; echo "${j/BL/$2}"; }
    JOBS=/apis/batch/v1/namespaces/default/jobs
    jobpods() { req GET "$NS/pods?labelSelector=job-name%3D$1"; }
    req POST $JOBS '{"metadata":{"name":"always"},"spec":{"template":{"spec":{"containers":[{"name":"c","image":"i"}]}}}}'
    ok "jobs: restartPolicy Always is refused" 422 \
        'd["message"] == "Job.batch \"always\" is invalid: spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""'
    req POST $JOBS "$(job j1 1)"
    ok "jobs: create (selector and labels generated)" 201 \
        'd["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"] == d["metadata"]["uid"] and d["spec"]["template"]["metadata"]["labels"]["job-name"] == "j1"'
    juid=$(jget 'd["metadata"]["uid"]')
    wait_for eval 'jobpods j1; [ "$(jget "len(d[\"items\"])")" = 1 ]'
    ok "jobs: one pod, named, labelled, owned, tracked" 200 \
        "__import__('re').match(r'^j1-[a-z0-9]{5}\$', d['items'][0]['metadata']['name']) and d['items'][0]['metadata']['labels']['app'] == 't' and d['items'][0]['metadata']['labels']['controller-uid'] == '$juid' and d['items'][0]['metadata']['labels']['batch.kubernetes.io/job-name'] == 'j1' and d['items'][0]['metadata']['ownerReferences'] == [{'apiVersion':'batch/v1','kind':'Job','name':'j1','uid':'$juid','controller':True,'blockOwnerDeletion':True}] and d['items'][0]['metadata']['finalizers'] == ['batch.kubernetes.io/job-tracking']"
    p1=$(jget 'd["items"][0]["metadata"]["name"]')
    req PATCH $NS/pods/$p1/status '{"status":{"phase":"Failed"}}' application/merge-patch+json
    wait_for eval 'jobpods j1; [ "$(jget "len(d[\"items\"])")" = 2 ]'
    ok "jobs: a failed pod is replaced" 200
    req GET $JOBS/j1
    ok "jobs: status counts the failure" 200 'd["status"]["failed"] == 1 and d["status"]["active"] == 1 and d["status"]["startTime"]'
    p2=$(jobpods j1; jget '[i["metadata"]["name"] for i in d["items"] if i["status"]["phase"] == "Pending"][0]')
    req DELETE "$NS/pods/$p2?gracePeriodSeconds=0"
    wait_for eval 'req GET $JOBS/j1; [ "$(jget "[c[\"type\"] for c in d[\"status\"].get(\"conditions\", [])]")" = "[\x27FailureTarget\x27, \x27Failed\x27]" ]'
    ok "jobs: a deleted pod counts as a failure; past backoffLimit the Job fails" 200 \
        'd["status"]["failed"] == 2 and d["status"]["conditions"][1]["reason"] == "BackoffLimitExceeded" and d["status"]["conditions"][1]["message"] == "Job has reached the specified backoff limit" and "active" not in d["status"]'
    req POST $JOBS "$(job j2 6)"
    wait_for eval 'jobpods j2; [ "$(jget "len(d[\"items\"])")" = 1 ]'
    p=$(jget 'd["items"][0]["metadata"]["name"]')
    req PATCH $NS/pods/$p/status '{"status":{"phase":"Succeeded"}}' application/merge-patch+json
    wait_for eval 'req GET $JOBS/j2; [ "$(jget "d[\"status\"].get(\"succeeded\")")" = 1 ]'
    ok "jobs: a pod that succeeds completes the Job" 200 \
        '[c["type"] for c in d["status"]["conditions"]] == ["SuccessCriteriaMet", "Complete"] and d["status"]["completionTime"]'
    jobpods j2
    ok "jobs: the counted pod gives up its tracking finalizer" 200 '"finalizers" not in d["items"][0]["metadata"]'
    req DELETE $JOBS/j2
    ok "jobs: delete without propagationPolicy warns (pods are orphaned)" 200 '"child pods are preserved by default" in h'
    wait_for eval 'req GET $JOBS/j2; [ "$CODE" = 404 ]'
    jobpods j2
    ok "jobs: the orphaned pod stays, without ownerReference" 200 'len(d["items"]) == 1 and "ownerReferences" not in d["items"][0]["metadata"]'
    req POST $JOBS "$(job j3 6)"
    wait_for eval 'jobpods j3; [ "$(jget "len(d[\"items\"])")" = 1 ]'
    req DELETE "$JOBS/j3?propagationPolicy=Background"
    wait_for eval 'jobpods j3; [ "$(jget "bool(d[\"items\"][0][\"metadata\"].get(\"deletionTimestamp\"))")" = True ]'
    ok "jobs: delete with Background deletes its pods (gracefully)" 200
    # ClaimPods: a pod the Job controls that its selector does not match is released; an
    # orphan it matches is adopted (and, one pod too many for parallelism 1, the newer goes).
    req POST $JOBS "$(job j5 6)"
    j5uid=$(jget 'd["metadata"]["uid"]')
    wait_for eval 'jobpods j5; [ "$(jget "len(d[\"items\"])")" = 1 ]'
    req POST $NS/pods "{\"metadata\":{\"name\":\"stray\",\"labels\":{\"app\":\"t\"},\"finalizers\":[\"batch.kubernetes.io/job-tracking\"],\"ownerReferences\":[{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"name\":\"j5\",\"uid\":\"$j5uid\",\"controller\":true,\"blockOwnerDeletion\":true},{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"name\":\"kube-root-ca.crt\",\"uid\":\"$(req GET $NS/configmaps/kube-root-ca.crt; jget 'd["metadata"]["uid"]')\"}]},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}"
    wait_for eval 'req GET $NS/pods/stray; [ "$(jget "len(d[\"metadata\"][\"ownerReferences\"])")" = 1 ]'
    ok "jobs: a pod the Job controls but its selector does not match is released (its other owners kept)" 200 \
        'd["metadata"]["ownerReferences"][0]["kind"] == "ConfigMap" and "finalizers" not in d["metadata"]'
    req GET $JOBS/j5
    ok "jobs: ... and not counted" 200 'd["status"]["active"] == 1 and "failed" not in d["status"]'
    sleep 1.1   # (creationTimestamp has whole seconds: the orphan is the newer pod)
    req POST $NS/pods "{\"metadata\":{\"name\":\"orph\",\"labels\":{\"batch.kubernetes.io/controller-uid\":\"$j5uid\"}},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}"
    wait_for eval 'req GET $NS/pods/orph; [ "$(jget "bool(d[\"metadata\"].get(\"deletionTimestamp\"))")" = True ]'
    ok "jobs: an orphan its selector matches is adopted; past parallelism the newer pod is deleted, untracked" 200 \
        "d['metadata']['ownerReferences'] == [{'apiVersion':'batch/v1','kind':'Job','name':'j5','uid':'$j5uid','controller':True,'blockOwnerDeletion':True}] and 'finalizers' not in d['metadata']"
    sleep 0.5
    req GET $JOBS/j5
    ok "jobs: ... not a failure" 200 'd["status"]["active"] == 1 and "failed" not in d["status"]'
    for p in stray orph; do req DELETE "$NS/pods/$p?gracePeriodSeconds=0"; done
    req POST $JOBS '{"metadata":{"name":"of"},"spec":{"backoffLimit":2,"template":{"spec":{"restartPolicy":"OnFailure","containers":[{"name":"c","image":"i"}]}}}}'
    wait_for eval 'jobpods of; [ "$(jget "len(d[\"items\"])")" = 1 ]'
    p=$(jget 'd["items"][0]["metadata"]["name"]')
    req PATCH $NS/pods/$p/status '{"status":{"phase":"Running","containerStatuses":[{"name":"c","image":"i","imageID":"","ready":true,"restartCount":1,"state":{"running":{}}}]}}' application/merge-patch+json
    sleep 0.5
    req GET $JOBS/of
    ok "jobs: OnFailure: a restart below backoffLimit is not a failure" 200 '"conditions" not in d["status"] and d["status"]["active"] == 1'
    req PATCH $NS/pods/$p/status '{"status":{"containerStatuses":[{"name":"c","image":"i","imageID":"","ready":true,"restartCount":2,"state":{"running":{}}}]}}' application/merge-patch+json
    wait_for eval 'req GET $NS/pods/$p; [ "$(jget "bool(d[\"metadata\"].get(\"deletionTimestamp\"))")" = True ]'
    ok "jobs: OnFailure: restarts reaching backoffLimit fail the Job and delete its pod" 200
    req DELETE "$NS/pods/$p?gracePeriodSeconds=0"
    wait_for eval 'req GET $JOBS/of; [ "$(jget "[c[\"type\"] for c in d[\"status\"].get(\"conditions\", [])]")" = "[\x27FailureTarget\x27, \x27Failed\x27]" ]'
    ok "jobs: OnFailure: the Job is Failed (BackoffLimitExceeded) once its pod is gone" 200 'd["status"]["conditions"][1]["reason"] == "BackoffLimitExceeded"'
    req POST $JOBS '{"metadata":{"name":"dl"},"spec":{"activeDeadlineSeconds":1,"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"i"}]}}}}'
    WAIT_POLLS=50 wait_for eval 'jobpods dl; [ "$(jget "len(d[\"items\"]) == 1 and bool(d[\"items\"][0][\"metadata\"].get(\"deletionTimestamp\"))")" = True ]'
    ok "jobs: activeDeadlineSeconds: the pod is deleted past the deadline" 200
    req GET $JOBS/dl
    ok "jobs: activeDeadlineSeconds: FailureTarget DeadlineExceeded" 200 'd["status"]["conditions"][0]["reason"] == "DeadlineExceeded"'
fi

# ---------------------------------------------------------------- CRDs and custom resources

if section crd; then
    CRD='{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"tfjobs.kubeflow.org"},"spec":{"group":"kubeflow.org","scope":"Namespaced","names":{"kind":"TFJob","plural":"tfjobs","singular":"tfjob","shortNames":["tfj"]},"versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},"schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","required":["tfReplicaSpecs"],"properties":{"runPolicy":{"type":"object","properties":{"backoffLimit":{"type":"integer","minimum":0},"cleanPodPolicy":{"type":"string","enum":["All","Running","None"]}}},"tfReplicaSpecs":{"type":"object","additionalProperties":{"type":"object","properties":{"replicas":{"type":"integer","default":1},"restartPolicy":{"type":"string"},"template":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}}},"status":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}}]}}'
    TFJOBS=/apis/kubeflow.org/v1/namespaces/default/tfjobs
    TF='{"apiVersion":"kubeflow.org/v1","kind":"TFJob","metadata":{"name":"NAME"},"spec":{"tfReplicaSpecs":{"Worker":{"template":{"spec":{"containers":[{"name":"tensorflow","image":"dtrain"}]}}}}}}'
    req POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions '{"metadata":{"name":"tfjobs.kubeflow.org"},"spec":{"group":"kubeflow.org","scope":"Namespaced","names":{"kind":"TFJob","plural":"tfjobs"},"versions":[{"name":"v1","served":true,"storage":true}]}}'
    ok "crd: a CRD without schema is 422" 422 '"schema.openAPIV3Schema: Required value: schemas are required" in d["message"]'
    req POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions "$CRD"
    ok "crd: create" 201
    req POST $TFJOBS "${TF/NAME/early}"
    ok "crd: its resources are not served before it is Established" 404
    wait_for eval 'req GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/tfjobs.kubeflow.org; [ "$(jget "[c[\"type\"] for c in d[\"status\"][\"conditions\"] if c[\"status\"] == \"True\"]")" = "[\x27NamesAccepted\x27, \x27Established\x27]" ]'
    ok "crd: NamesAccepted and Established" 200 'd["status"]["acceptedNames"]["kind"] == "TFJob" and d["status"]["storedVersions"] == ["v1"]'
    req GET /apis
    ok "crd: its group is discovered" 200 'any(g["name"] == "kubeflow.org" and g["preferredVersion"]["version"] == "v1" for g in d["groups"])'
    req GET /apis/kubeflow.org/v1
    ok "crd: its resources are discovered" 200 'any(r["name"] == "tfjobs" and r["shortNames"] == ["tfj"] for r in d["resources"]) and any(r["name"] == "tfjobs/status" for r in d["resources"])'
    req POST $TFJOBS "${TF/NAME/mnist}"
    ok "crd: create a custom resource (schema defaults applied)" 201 \
        'd["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 1 and d["metadata"]["generation"] == 1 and d["kind"] == "TFJob"'
    req POST $TFJOBS "${TF/NAME/mnist}"
    ok "crd: AlreadyExists" 409 'd["message"] == "tfjobs.kubeflow.org \"mnist\" already exists"'
    req POST $TFJOBS '{"apiVersion":"kubeflow.org/v1","kind":"TFJob","metadata":{"name":"bad"},"spec":{"tfReplicaSpecs":{},"typo":1}}'
    ok "crd: an unknown field is 400" 400 'd["message"] == "TFJob in version \"v1\" cannot be handled as a TFJob: strict decoding error: unknown field \"spec.typo\""'
    req POST $TFJOBS '{"apiVersion":"kubeflow.org/v1","kind":"TFJob","metadata":{"name":"bad"},"spec":{"tfReplicaSpecs":{"Worker":{"replicas":"two"}}}}'
    ok "crd: a wrong type is 422" 422 \
        'd["message"] == "TFJob.kubeflow.org \"bad\" is invalid: spec.tfReplicaSpecs.Worker.replicas: Invalid value: \"string\": spec.tfReplicaSpecs.Worker.replicas in body must be of type integer: \"string\""'
    req POST $TFJOBS '{"apiVersion":"kubeflow.org/v1","kind":"TFJob","metadata":{"name":"bad"},"spec":{"runPolicy":{"backoffLimit":-1,"cleanPodPolicy":"Some"}}}'
    ok "crd: required, minimum and enum are 422" 422 \
        '"spec.tfReplicaSpecs: Required value" in d["message"] and "spec.runPolicy.backoffLimit in body should be greater than or equal to 0" in d["message"] and "spec.runPolicy.cleanPodPolicy: Unsupported value: \"Some\"" in d["message"]'
    req POST $TFJOBS '{"metadata":{"name":"nokind"},"spec":{"tfReplicaSpecs":{}}}'
    ok "crd: a custom resource needs its kind" 400 '"Object '"'"'Kind'"'"' is missing" in d["message"]'
    req GET $TFJOBS/mnist
    $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); d["status"]={"conditions":[{"type":"Running"}]}; d["spec"]["runPolicy"]={"backoffLimit":3}; json.dump(d, open(sys.argv[2],"w"))' "$TMP/body" "$TMP/tf.json"
    req PUT $TFJOBS/mnist "$(cat "$TMP/tf.json")"
    ok "crd: a write to the resource ignores .status, bumps generation" 200 '"status" not in d and d["spec"]["runPolicy"]["backoffLimit"] == 3 and d["metadata"]["generation"] == 2'
    req PATCH $TFJOBS/mnist/status '{"status":{"conditions":[{"type":"Running"}]},"spec":{"runPolicy":{"backoffLimit":5}}}' application/merge-patch+json
    ok "crd: a write to /status changes only .status" 200 'd["status"]["conditions"] == [{"type":"Running"}] and d["spec"]["runPolicy"]["backoffLimit"] == 3 and d["metadata"]["generation"] == 2'
    req PATCH $TFJOBS/mnist '{"metadata":{"labels":{"a":"b"}}}' application/strategic-merge-patch+json
    ok "crd: strategic merge patch is refused for custom resources (415)" 415
    req GET "/apis/kubeflow.org/v1/tfjobs"
    ok "crd: list across namespaces (items keep kind)" 200 'd["kind"] == "TFJobList" and d["items"][0]["kind"] == "TFJob"'
    CRD2=${CRD//tfjobs/pytorchjobs}
    CRD2=${CRD2//TFJob/PyTorchJob}
    CRD2=${CRD2//\"tfjob\"/\"pytorchjob\"}
    CRD2=${CRD2//\"tfj\"/\"ptj\"}
    req POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions "$CRD2"
    ok "crd: a second CRD in the group" 201
    wait_for eval 'req POST /apis/kubeflow.org/v1/namespaces/default/pytorchjobs "{\"apiVersion\":\"kubeflow.org/v1\",\"kind\":\"PyTorchJob\",\"metadata\":{\"name\":\"pt\"},\"spec\":{\"tfReplicaSpecs\":{}}}"; [ "$CODE" = 201 ]'
    ok "crd: its resource is served once Established" 201
    req DELETE /apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org
    ok "crd: delete (instances first: the CRD stays until they are gone)" 200 \
        'd["metadata"]["deletionTimestamp"] and "customresourcecleanup.apiextensions.k8s.io" in d["metadata"]["finalizers"]'
    wait_for eval 'req GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org; [ "$CODE" = 404 ]'
    ok "crd: the CRD goes after its instances" 404
    req GET /apis/kubeflow.org/v1/namespaces/default/pytorchjobs/pt
    ok "crd: its resources are no longer served" 404
    req GET /apis/kubeflow.org/v1
    ok "crd: discovery no longer lists it" 200 '[r["name"] for r in d["resources"] if "/" not in r["name"]] == ["tfjobs"]'
fi

# ---------------------------------------------------------------- pod logs

if section logs; then
    req POST $NS/pods "$(pod lg)"
    req GET $NS/pods/lg/log
    ok "logs: a container not started yet is 400 waiting to start" 400 'd["message"] == "container \"c\" in pod \"lg\" is waiting to start: ContainerCreating"'
    mkdir -p "$D/logs/default/lg"
    printf 'one\ntwo\nthree\n' >"$D/logs/default/lg/c.log"
    req PATCH $NS/pods/lg/status '{"status":{"phase":"Running","containerStatuses":[{"name":"c","image":"busybox","imageID":"","ready":true,"restartCount":0,"state":{"running":{"startedAt":"2026-01-01T00:00:00Z"}}}]}}' application/merge-patch+json
    req GET $NS/pods/lg/log
    ok "logs: the kubelet's log file, as text/plain" 200 'd == "one\ntwo\nthree\n" and "content-type: text/plain" in h'
    req GET "$NS/pods/lg/log?tailLines=1&container=c"
    ok "logs: tailLines" 200 'd == "three\n"'
    req GET "$NS/pods/lg/log?container=x"
    ok "logs: an unknown container is 400" 400 'd["message"] == "container x is not valid for pod lg"'
    req GET "$NS/pods/lg/log?previous=true"
    ok "logs: no previous attempt is 400" 400 '"previous terminated container \"c\" in pod \"lg\" not found" == d["message"]'
    curl -sS -N --cacert "$D/ca.crt" -H "Authorization: Bearer $TOKEN" "$URL$NS/pods/lg/log?follow=true" >"$TMP/follow" 2>&1 &
    fpid=$!
    sleep 0.5
    printf 'four\n' >>"$D/logs/default/lg/c.log"
    sleep 0.5
    req PATCH $NS/pods/lg/status '{"status":{"phase":"Succeeded","containerStatuses":[{"name":"c","image":"busybox","imageID":"","ready":false,"restartCount":0,"state":{"terminated":{"exitCode":0,"reason":"Completed"}}}]}}' application/merge-patch+json
    if WAIT_POLLS=50 wait_for eval '! kill -0 $fpid 2>/dev/null'; then
        [ "$(cat "$TMP/follow")" = "$(printf 'one\ntwo\nthree\nfour')" ] && pass "logs: follow streams until the container has ended" \
            || fail "logs: follow got: $(cat "$TMP/follow")"
    else
        kill $fpid; fail "logs: follow did not end when the container did"
    fi
    req POST $NS/pods '{"metadata":{"name":"two"},"spec":{"containers":[{"name":"a","image":"i"},{"name":"b","image":"i"}]}}'
    req GET $NS/pods/two/log
    ok "logs: a pod of two containers needs ?container=" 400 'd["message"] == "a container name must be specified for pod two, choose one of: [a b]"'
fi

# ---------------------------------------------------------------- kubectl

if section kubectl; then
    cat >"$TMP/kpod.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: kp
  labels: {app: k}
spec:
  containers:
  - name: main
    image: busybox
EOF
    sed 's/    image: busybox/    imagee: busybox/; s/name: kp/name: kbad/' "$TMP/kpod.yaml" >"$TMP/kbad.yaml"
    out=$("${KUBECTL[@]}" create -f "$TMP/kpod.yaml" 2>&1) && [ "$out" = "pod/kp created" ] \
        && pass "kubectl: create -f pod" || fail "kubectl: create -f: $out"
    out=$("${KUBECTL[@]}" create -f "$TMP/kbad.yaml" 2>&1)
    [[ $out == *'unknown field "spec.containers[0].imagee"'* ]] && pass "kubectl: create -f with an unknown field fails" \
        || fail "kubectl: strict create: $out"
    out=$("${KUBECTL[@]}" get pods 2>&1)
    echo "$out" | grep -qE '^kp +0/1 +Pending +0 ' && pass "kubectl: get pods" || fail "kubectl: get pods: $out"
    out=$("${KUBECTL[@]}" get pod kp -o json 2>&1)
    echo "$out" | $PY -c 'import json,sys; d=json.load(sys.stdin); assert d["metadata"]["name"] == "kp" and d["kind"] == "Pod"' 2>/dev/null \
        && pass "kubectl: get pod -o json" || fail "kubectl: get -o json: $out"
    mkdir -p "$D/logs/default/kp"
    printf 'hello from kp\n' >"$D/logs/default/kp/main.log"
    req PATCH $NS/pods/kp/status '{"status":{"phase":"Running","containerStatuses":[{"name":"main","image":"busybox","imageID":"","ready":true,"restartCount":0,"state":{"running":{}}}]}}' application/merge-patch+json
    out=$("${KUBECTL[@]}" logs kp 2>&1)
    [ "$out" = "hello from kp" ] && pass "kubectl: logs" || fail "kubectl: logs: $out"
    if section crd || [ -z "${ONLY:-}" ]; then
        cat >"$TMP/ktf.yaml" <<'EOF'
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: ktf
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
EOF
        out=$("${KUBECTL[@]}" create -f "$TMP/ktf.yaml" 2>&1) && [ "$out" = "tfjob.kubeflow.org/ktf created" ] \
            && pass "kubectl: create -f a custom resource" || fail "kubectl: create CR: $out"
        out=$("${KUBECTL[@]}" get tfjobs 2>&1)
        echo "$out" | grep -qE '^ktf ' && echo "$out" | grep -q '^NAME' && pass "kubectl: get tfjobs" || fail "kubectl: get tfjobs: $out"
    fi
    # Imperative creates send protobuf bodies (Go's typed clients).
    out=$("${KUBECTL[@]}" create namespace kns 2>&1 && "${KUBECTL[@]}" -n kns create configmap kcm --from-literal=a=b 2>&1 \
        && "${KUBECTL[@]}" -n kns create secret generic ksec --from-literal=user=me 2>&1 && "${KUBECTL[@]}" -n kns create sa ksa 2>&1)
    req GET /api/v1/namespaces/kns/secrets/ksec
    ok "kubectl: create namespace, configmap, secret, serviceaccount (protobuf bodies): $(echo $out | tr '\n' ' ')" 200 \
        'd["data"] == {"user": "bWU="} and d["type"] == "Opaque"'
    out=$("${KUBECTL[@]}" delete namespace kns 2>&1)
    [ "$out" = 'namespace "kns" deleted' ] && pass "kubectl: delete namespace (waits until it is gone)" || fail "kubectl: delete ns: $out"
    "${KUBECTL[@]}" delete pod kp >"$TMP/kdel" 2>&1 &
    kpid=$!
    sleep 1
    kill -0 $kpid 2>/dev/null && pass "kubectl: delete pod waits while the pod terminates" || fail "kubectl: delete returned early: $(cat "$TMP/kdel")"
    req DELETE "$NS/pods/kp?gracePeriodSeconds=0"      # the kubelet's part
    if WAIT_POLLS=100 wait_for eval '! kill -0 $kpid 2>/dev/null'; then
        wait $kpid && grep -q 'pod "kp" deleted' "$TMP/kdel" && pass "kubectl: delete pod" || fail "kubectl: delete: $(cat "$TMP/kdel")"
    else
        kill $kpid; fail "kubectl: delete did not see the pod go"
    fi
fi

# ---------------------------------------------------------------- robustness and hooks

if section robust; then
    # Garbage on the wire, a request line without headers, a half request: 400s, no crash.
    (printf 'NOT HTTP AT ALL\r\n\r\n'; sleep 1) | timeout 5 openssl s_client -quiet -connect 127.0.0.1:$PORT >"$TMP/garbage" 2>/dev/null
    grep -q '"code":400' "$TMP/garbage" && pass "robust: a malformed request line is 400 (a Status)" || fail "robust: garbage: $(head -c 300 "$TMP/garbage")"
    printf 'GET /version HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 5\r\n\r\nab' "$TOKEN" \
        | timeout 3 openssl s_client -quiet -connect 127.0.0.1:$PORT >/dev/null 2>&1
    echo | timeout 3 openssl s_client -connect 127.0.0.1:$PORT >/dev/null 2>&1
    req GET /version
    ok "robust: the server is well after broken clients" 200
    out=$(curl -sS -v --cacert "$D/ca.crt" -H "Authorization: Bearer $TOKEN" "$URL/version" "$URL/api" 2>&1)
    [[ $out == *"Re-using existing connection"* ]] && pass "robust: keep-alive (a second request on the same connection)" \
        || fail "robust: no keep-alive"
    pids=()
    for i in $(seq 20); do
        curl -sS --cacert "$D/ca.crt" -H "Authorization: Bearer $TOKEN" -o /dev/null "$URL$NS/configmaps" &
        pids+=($!)
    done
    wait "${pids[@]}"
    req POST /_standin/requests/reset
    ok "robust: requests/reset" 200
    req GET "$NS/pods?labelSelector=x"
    req GET "$NS/pods/nope"
    req POST $NS/configmaps '{"metadata":{"name":"counted"}}'
    req GET /_standin/requests
    ok "robust: request counts by verb and path pattern" 200 \
        'd["requests"] == {"list /api/v1/namespaces/{namespace}/pods": 1, "get /api/v1/namespaces/{namespace}/pods/{name}": 1, "create /api/v1/namespaces/{namespace}/configmaps": 1} and d["total"] == 3'
    TOK="" req GET /_standin/requests
    ok "robust: the hooks need the token" 401
    req DELETE /api/v1/configmaps
    ok "robust: no DELETE of a namespaced collection across namespaces (405)" 405 'd["reason"] == "MethodNotAllowed"'
    curl -sS --cacert "$D/ca.crt" -H "Authorization: Bearer $TOKEN" -H "Accept: application/yaml" -o "$TMP/body" "$URL$NS/configmaps/counted"
    grep -q "^kind: ConfigMap" "$TMP/body" && pass "robust: Accept application/yaml" || fail "robust: yaml: $(head -c 300 "$TMP/body")"
    CODE=$(curl -sS --cacert "$D/ca.crt" -H "Authorization: Bearer $TOKEN" -H "Accept: application/vnd.kubernetes.protobuf" \
        -o "$TMP/body" -w '%{http_code}' "$URL$NS/configmaps")
    ok "robust: Accept protobuf only is 406 (not answered in JSON)" 406 'd["reason"] == "NotAcceptable"'
    CODE=$(curl -sS --cacert "$D/ca.crt" -H "Authorization: Bearer $TOKEN" -H "Accept: text/html" -o "$TMP/body" -w '%{http_code}' "$URL$NS/configmaps")
    ok "robust: an Accept the server cannot answer is 406" 406 'd["message"].startswith("only the following media types are accepted")'
    $PY -c 'import json; print(json.dumps({"metadata": {"name": "big"}, "data": {"k": "x" * 200000}}))' >"$TMP/big.json"
    curl -sS --cacert "$D/ca.crt" -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" -o /dev/null \
        --data-binary @"$TMP/big.json" "$URL$NS/configmaps"
    curl -sS --cacert "$D/ca.crt" -H "Authorization: Bearer $TOKEN" -H "Accept-Encoding: gzip" -D "$TMP/hdrs" -o "$TMP/gz" "$URL$NS/configmaps"
    grep -qi "^content-encoding: gzip" "$TMP/hdrs" && gzip -dc "$TMP/gz" | $PY -c 'import json,sys; assert json.load(sys.stdin)["kind"] == "ConfigMapList"' \
        && pass "robust: a big response is gzipped when the client accepts gzip" || fail "robust: gzip: $(cat "$TMP/hdrs")"
fi

# ---------------------------------------------------------------- services proxy (with a kubelet)

# The echo server of the proxy section's pod: answers each request with what it got (method,
# path, query, its port, body, headers) as JSON; /status/N answers N, /redirect a Location on
# itself, /stream two chunks 1.5 s apart with no length.
write_echo_server() {
    cat >"$1" <<'PYEOF'
import http.server, json, sys, threading, time

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = b""
            while True:
                n = int(self.rfile.readline().split(b";")[0], 16)
                if n == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(n)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def any(self):
        body = self.body()
        path, _, query = self.path.partition("?")
        if path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in (b"first\n", b"second\n"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                time.sleep(1.5)
            self.wfile.write(b"0\r\n\r\n")
            return
        if path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/target?x=1")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        code = int(path[len("/status/"):]) if path.startswith("/status/") else 200
        out = json.dumps({"method": self.command, "path": path, "query": query, "port": self.server.server_address[1],
                          "bodyLen": len(body), "body": body.decode("latin-1") if len(body) < 4096 else "",
                          "headers": [[k, v] for k, v in self.headers.items()]}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Echo", "yes")
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = any

for port in sys.argv[1:]:
    srv = http.server.ThreadingHTTPServer(("0.0.0.0", int(port)), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
threading.Event().wait()
PYEOF
}

if section proxy && [ "$(id -u)" != 0 ]; then
    echo "skip proxy: the kubelet needs root"
elif section proxy; then
    O_D=$D O_URL=$URL O_TOKEN=$TOKEN
    D=$TMP/kp
    PPREFIX=${KUBE_STANDIN_TEST_PREFIX:-dts$(( $$ % 10000 ))}
    PGATEWAY=${KUBE_STANDIN_TEST_GATEWAY:-10.$(( 200 + $$ % 50 )).0.1}
    $PY "$SRC/tests/tools/kube/standin.py" --dir "$D" --prefix "$PPREFIX" --gateway "$PGATEWAY" \
        >"$TMP/kp.log" 2>&1 &
    PSPID=$!
    if ! WAIT_POLLS=300 wait_for test -f "$D/ready"; then
        fail "proxy: the stand-in with a kubelet did not start: $(tail -20 "$TMP/kp.log")"
    else
        URL=https://127.0.0.1:$(cat "$D/ready")
        TOKEN=$(cat "$D/token")
        PX=$NS/services
        write_echo_server "$TMP/echo.py"
        req POST $NS/pods '{"metadata":{"name":"echo","labels":{"app":"echo"}},"spec":{"containers":[{"name":"c","image":"python","command":["'"$PY"'","-u","'"$TMP/echo.py"'","8080","9091"],"ports":[{"name":"web","containerPort":8080}]}]}}'
        ok "proxy: an echo server pod" 201
        # A Service of two named ports (one by the container port's name, one by number), one of
        # a single unnamed port, one whose target nothing listens on, one that selects no pod,
        # one whose only pod cannot be scheduled (Pending).
        made=
        for o in '{"metadata":{"name":"echo"},"spec":{"selector":{"app":"echo"},"ports":[{"name":"http","port":80,"targetPort":"web"},{"name":"metrics","port":9090,"targetPort":9091}]}}' \
            '{"metadata":{"name":"one"},"spec":{"selector":{"app":"echo"},"ports":[{"port":8080}]}}' \
            '{"metadata":{"name":"refused"},"spec":{"selector":{"app":"echo"},"ports":[{"port":80,"targetPort":9999}]}}' \
            '{"metadata":{"name":"nobody"},"spec":{"selector":{"app":"nobody"},"ports":[{"port":80}]}}' \
            '{"metadata":{"name":"pending"},"spec":{"selector":{"app":"pending"},"ports":[{"port":80}]}}'; do
            req POST $NS/services "$o"
            made+=" $CODE"
        done
        req POST $NS/pods '{"metadata":{"name":"pending","labels":{"app":"pending"}},"spec":{"containers":[{"name":"c","image":"python","command":["sleep","60"],"resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}'
        [ "$made $CODE" = " 201 201 201 201 201 201" ] && pass "proxy: five services and a pod that stays Pending" \
            || fail "proxy: creating the services and the pending pod: $made $CODE: $(head -c 300 "$TMP/body")"
        WAIT_POLLS=300 wait_for eval 'req GET "$PX/echo:http/proxy/ready"; [ "$CODE" = 200 ]'
        req GET $NS/pods/echo
        POD_IP=$(jget 'd["status"].get("podIP", "")')

        XHDR="X-Dtrain-Auth: job-secret" req GET "$PX/echo:http/proxy/a/b?x=1&y=two%20words"
        ok "proxy: GET by port name (targetPort a container port's name), path and query passed" 200 \
            'd["method"] == "GET" and d["path"] == "/a/b" and d["query"] == "x=1&y=two%20words" and d["port"] == 8080'
        ok "proxy: Authorization is not forwarded, X-Dtrain-Auth is; X-Forwarded-Uri is added" 200 \
            '"authorization" not in eh and eh["x-dtrain-auth"] == "job-secret" and eh["x-forwarded-uri"] == "/api/v1/namespaces/default/services/echo:http/proxy/a/b" and eh["host"].startswith("127.0.0.1:")'
        ok "proxy: the backend's headers come back (CORS ones removed), with its Content-Length" 200 \
            '"x-echo: yes" in h and "access-control-allow-origin" not in h and "content-length:" in h and "audit-id:" in h and "transfer-encoding" not in h'
        req GET "$PX/echo:80/proxy/n"
        ok "proxy: by port number (the Service's port)" 200 'd["port"] == 8080 and d["path"] == "/n"'
        req GET "$PX/echo:metrics/proxy/m"
        ok "proxy: by the name of a port whose targetPort is a number" 200 'd["port"] == 9091'
        req GET "$PX/http:echo:9090/proxy/m"
        ok "proxy: scheme:name:port" 200 'd["port"] == 9091'
        req GET "$PX/one/proxy/"
        ok "proxy: a Service's only, unnamed port needs no port" 200 'd["port"] == 8080 and d["path"] == "/"'
        req GET "$PX/one/proxy?q=1"
        ok "proxy: .../proxy without a slash is redirected (301) to .../proxy/" 301 \
            '"location: /api/v1/namespaces/default/services/one/proxy/?q=1\n" in h'
        req POST "$PX/echo:http/proxy/post?q=1" 'hello, body' text/plain
        ok "proxy: POST with a body and its Content-Type" 200 \
            'd["method"] == "POST" and d["body"] == "hello, body" and eh["content-type"] == "text/plain" and d["query"] == "q=1"'
        for m in PUT PATCH DELETE OPTIONS; do
            req $m "$PX/echo:http/proxy/m" '{"a":1}'
            ok "proxy: $m" 200 'd["method"] == "'$m'" and d["body"] == "{\"a\":1}"'
        done
        req HEAD "$PX/echo:http/proxy/h"
        ok "proxy: HEAD (headers, no body)" 200 '"content-length:" in h and d == ""'
        req GET "$PX/echo:http/proxy/status/404"
        ok "proxy: the backend's 404 is passed through (its body, not a Status)" 404 'd["path"] == "/status/404"'
        req POST "$PX/echo:http/proxy/status/409" '{}'
        ok "proxy: the backend's 409 is passed through" 409 'd["method"] == "POST"'
        req GET "$PX/echo:http/proxy/redirect"
        ok "proxy: a Location on the backend is rewritten under the proxy path" 302 \
            '"location: /api/v1/namespaces/default/services/echo:http/proxy/target?x=1\n" in h'
        head -c 5000000 /dev/urandom >"$TMP/big.bin"
        CODE=$(curl -sS --cacert "$D/ca.crt" -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/octet-stream" \
            -X PUT --data-binary @"$TMP/big.bin" -D "$TMP/hdrs" -o "$TMP/body" -w '%{http_code}' "$URL$PX/echo:http/proxy/big")
        ok "proxy: a 5 MB body is streamed through (no API body limit)" 200 'd["bodyLen"] == 5000000'
        CODE=$(curl -sS --cacert "$D/ca.crt" -H "Authorization: Bearer $TOKEN" -H "Transfer-Encoding: chunked" \
            --data-binary 'in chunks' -D "$TMP/hdrs" -o "$TMP/body" -w '%{http_code}' "$URL$PX/echo:http/proxy/chunked")
        ok "proxy: a chunked request body" 200 'd["body"] == "in chunks"'
        curl -sS -N --cacert "$D/ca.crt" -H "Authorization: Bearer $TOKEN" -D "$TMP/stream.h" -o "$TMP/stream" \
            "$URL$PX/echo:http/proxy/stream" &
        cpid=$!
        sleep 0.8
        early=$(cat "$TMP/stream" 2>/dev/null)
        wait $cpid
        [ "$early" = first ] && [ "$(cat "$TMP/stream")" = "$(printf 'first\nsecond')" ] && grep -qi '^transfer-encoding: chunked' "$TMP/stream.h" \
            && pass "proxy: a backend's stream without length comes chunked, as it comes" \
            || fail "proxy: stream: early '$early', all '$(cat "$TMP/stream")', headers $(cat "$TMP/stream.h")"
        out=$(kubectl --kubeconfig "$D/kubeconfig" --cache-dir "$TMP/kcache-kp" get --raw "/api/v1/namespaces/default/services/echo:http/proxy/raw?a=b" 2>&1)
        echo "$out" | $PY -c 'import json,sys; d=json.load(sys.stdin); assert d["path"] == "/raw" and d["query"] == "a=b"' 2>/dev/null \
            && pass "proxy: kubectl get --raw" || fail "proxy: kubectl get --raw: $out"

        TOK="" req GET "$PX/echo:http/proxy/x"
        ok "proxy: no token is 401" 401 'd["reason"] == "Unauthorized" and d["kind"] == "Status"'
        (printf 'POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n' \
            "$PX/echo:http/proxy/x" "$PX/echo:http/proxy/after" "$TOKEN"; sleep 1) \
            | timeout 5 openssl s_client -quiet -connect "127.0.0.1:$(cat "$D/ready")" >"$TMP/raw" 2>/dev/null
        grep -qa '^HTTP/1.1 401' "$TMP/raw" && grep -qa '"path": "/after"' "$TMP/raw" \
            && pass "proxy: after a 401 with an unread body the connection serves the next request" \
            || fail "proxy: keep-alive after 401: $(head -c 400 "$TMP/raw")"
        req GET "$PX/nosvc:80/proxy/"
        ok "proxy: an unknown service (port number) is 404 services not found" 404 \
            'd["reason"] == "NotFound" and d["message"] == "services \"nosvc\" not found"'
        req GET "$PX/nosvc:http/proxy/"
        ok "proxy: an unknown service (port name) is 404 endpoints not found (as the real one)" 404 \
            'd["message"] == "endpoints \"nosvc\" not found"'
        req GET "$PX/a:b:c:d/proxy/"
        ok "proxy: a malformed name is 400" 400 'd["message"] == "invalid service request \"a:b:c:d\""'
        req GET "$PX/echo:81/proxy/"
        ok "proxy: an unknown port number is 503" 503 \
            'd["reason"] == "ServiceUnavailable" and d["message"] == "no service port 81 found for service \"echo\""'
        req GET "$PX/echo:nope/proxy/"
        ok "proxy: an unknown port name is 503 no endpoints" 503 'd["message"] == "no endpoints available for service \"echo:nope\""'
        req GET "$PX/echo/proxy/"
        ok "proxy: no port on a Service of named ports is 503 (only an unnamed port is the default)" 503 \
            'd["message"] == "no endpoints available for service \"echo\""'
        req GET "$PX/nobody/proxy/"
        ok "proxy: a Service that selects no pod is 503" 503 'd["message"] == "no endpoints available for service \"nobody\""'
        req GET "$PX/pending/proxy/"
        ok "proxy: a Service whose pod is not running is 503" 503 'd["message"] == "no endpoints available for service \"pending\""'
        req GET "$PX/refused/proxy/"
        ok "proxy: nothing listening on the target port is 503 error trying to reach service" 503 \
            'd["reason"] == "ServiceUnavailable" and d["message"] == "error trying to reach service: dial tcp '"$POD_IP"':9999: connect: connection refused"'

        req POST /_standin/requests/reset
        req GET "$PX/echo:http/proxy/c"
        req POST "$PX/echo:http/proxy/c" '{}'
        TOK="" req GET "$PX/echo:http/proxy/c"
        req GET /_standin/requests
        ok "proxy: counted as verb + the proxy pattern" 200 \
            'd["requests"].get("get /api/v1/namespaces/{namespace}/services/{name}/proxy") == 1 and d["requests"].get("create /api/v1/namespaces/{namespace}/services/{name}/proxy") == 1'
        req DELETE $NS/pods/echo
        req GET "$PX/one/proxy/"
        ok "proxy: a terminating pod is no longer a backend" 503 'd["message"] == "no endpoints available for service \"one\""'

        kill -TERM $PSPID
        wait $PSPID
        rc=$?
        PSPID=
        [ "$rc" = 0 ] && pass "proxy: the stand-in and its kubelet stop with 0" || fail "proxy: stand-in exit $rc: $(tail -20 "$TMP/kp.log")"
    fi
    D=$O_D URL=$O_URL TOKEN=$O_TOKEN
fi

if section stop; then
    kill -TERM "$SPID"
    wait "$SPID"
    rc=$?
    SPID=
    [ "$rc" = 0 ] && pass "stop: SIGTERM ends the stand-in with 0" || fail "stop: exit $rc"
fi
if grep -q "Traceback" "$TMP/standin.log" $([ -f "$TMP/kp.log" ] && echo "$TMP/kp.log"); then
    fail "the stand-in logged a traceback: $(grep -h -A20 Traceback "$TMP/standin.log" $([ -f "$TMP/kp.log" ] && echo "$TMP/kp.log") | head -40)"
else
    pass "no traceback in the stand-in's log"
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
