#!/usr/bin/python3
"""A stand-in for the Kubernetes API server (kube-apiserver 1.32), for dtrain's tests.

HTTPS with bearer tokens, an in-memory store, and the REST API of the kinds dtrain
uses: core v1 pods (+status, +log), services (+proxy), secrets, configmaps, PVCs, events,
namespaces, serviceaccounts; batch/v1 jobs; CRDs and the custom resources they declare.
LIST/WATCH with selectors and resourceVersions, strict validation, graceful deletion,
garbage collection and a Job controller, discovery and the bits of OpenAPI v3 kubectl
needs. Test hooks under /_standin/. See README.md beside this file.

The modules beside it: api_store (objects, history, watches, errors, selectors),
api_schema (strict decoding, field rules, CRD schemas), api_kinds (kinds, defaults,
validation), api_patch, api_registry (REST semantics), api_controllers, api_print, api_proxy
(the services proxy subresource)."""
import argparse
import base64
import collections
import gzip
import hashlib
import http.server
import json
import os
import re
import select
import socket
import ssl
import sys
import threading
import time
import traceback
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import api_kinds as K  # noqa: E402
import api_print  # noqa: E402
import api_proto  # noqa: E402
import api_proxy  # noqa: E402
import api_schema as S  # noqa: E402
from api_controllers import Controllers  # noqa: E402
from api_registry import Registry  # noqa: E402
from api_store import (ApiError, FieldSelector, LabelSelector, Store, bad_request, expired,  # noqa: E402
                       method_not_allowed, no_such_resource, unsupported_media)

try:
    import yaml
except ImportError:      # YAML bodies are then refused (415)
    yaml = None

MAX_BODY = 3 * 1024 * 1024
GZIP_THRESHOLD = 128 * 1024       # the real server compresses bigger responses when asked
VERSION_INFO = {"major": "1", "minor": "32", "gitVersion": "v1.32.0", "gitCommit": "standin",
                "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.3",
                "compiler": "gc", "platform": "linux/amd64"}
BODY_TYPES = ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"]
JOB_DELETE_WARNING = ('299 - "child pods are preserved by default when jobs are deleted; set '
                      'propagationPolicy=Background to remove them or set propagationPolicy=Orphan to '
                      'suppress this warning"')


def log(msg):
    sys.stderr.write("standin-apiserver: %s\n" % msg)
    sys.stderr.flush()


def truthy(v):
    return v in ("true", "1", "True")


def version_key(v):
    """Kubernetes version priority: GA before beta before alpha, higher first."""
    m = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?$", v)
    if not m:
        return (3, 0, 0, v)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0), v)


class Route:
    """A parsed resource path."""

    def __init__(self, kind, version, ns, name, sub, watch_prefix):
        self.kind, self.version, self.ns, self.name, self.sub = kind, version, ns, name, sub
        self.watch_prefix = watch_prefix

    def pattern(self):
        k = self.kind
        p = "/api/" + self.version if not k.group else "/apis/%s/%s" % (k.group, self.version)
        if self.watch_prefix:
            p += "/watch"
        if self.ns is not None:
            p += "/namespaces/{namespace}"
        p += "/" + k.plural
        if self.name is not None:
            p += "/{name}"
        if self.sub:
            p += "/" + self.sub
        return p


class ApiServer:
    def __init__(self, host="0.0.0.0", port=0, cert=None, key=None, tokens=(), data_dir=None, ca_pem="",
                 history=1000, job_backoff=10.0, crd_delay=0.5, bookmark_interval=60.0, verbose=False):
        self.store = Store(history)
        self.registry = Registry(self.store, data_dir)
        self.controllers = Controllers(self.registry, ca_pem, job_backoff, crd_delay)
        self.tokens = set(t for t in tokens if t)
        self.data_dir = data_dir
        self.bookmark_interval = bookmark_interval
        self.verbose = verbose
        self.counts = collections.Counter()
        self.counts_lock = threading.Lock()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        ctx.set_alpn_protocols(["http/1.1"])
        self.httpd = TLSServer((host, port), Handler, ctx, self)
        self.bootstrap()

    @property
    def port(self):
        return self.httpd.server_address[1]

    def bootstrap(self):
        """What a new cluster has: its namespaces, the kubernetes service, and (from the
        controllers' first pass) each namespace's default service account and CA map."""
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.registry.create(K.builtin("namespaces"), "", {"metadata": {"name": ns}})
        self.registry.create(K.builtin("services"), "default", {
            "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "targetPort": self.port}]}})
        with self.store.lock:
            self.controllers.reconcile()

    def start(self):
        self.controllers.start()
        t = threading.Thread(target=self.httpd.serve_forever, name="apiserver", daemon=True)
        t.start()
        return t

    def stop(self):
        self.controllers.stopping = True
        self.store.drop_watches()
        self.httpd.shutdown()
        self.httpd.server_close()

    def take_fault(self, path):
        """A test's fault: while DATA_DIR/fail-pod-creates holds N > 0, a pod create is
        answered 503 (as a server that is restarting answers) and N goes down by one."""
        if not self.data_dir or not path.split("?")[0].endswith("/pods"):
            return False
        f = os.path.join(self.data_dir, "fail-pod-creates")
        with self.counts_lock:
            try:
                n = int(open(f).read().strip() or 0)
            except (OSError, ValueError):
                return False
            if n <= 0:
                return False
            with open(f, "w") as out:
                out.write(str(n - 1))
            return True

    def count(self, verb, pattern):
        with self.counts_lock:
            self.counts["%s %s" % (verb, pattern)] += 1


class TLSServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, handler, ctx, api):
        self.ctx, self.api = ctx, api
        super().__init__(addr, handler)

    def finish_request(self, request, client_address):
        # The TLS handshake happens here, in the connection's own thread, so that a slow
        # or broken client does not hold up the accept loop.
        request.settimeout(10)
        try:
            # Headers and body are separate writes: without this, Nagle's algorithm and the
            # client's delayed ACK hold each response for 40 ms.
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tls = self.ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            request.close()
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if not isinstance(exc, (ConnectionError, ssl.SSLError, socket.timeout, TimeoutError)):
            log("connection from %s: %s" % (client_address, traceback.format_exc()))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "standin-apiserver"
    sys_version = ""
    timeout = 120          # an idle keep-alive connection is closed after this

    def setup(self):
        super().setup()
        self.started = False        # response headers sent?
        self.extra_headers = {}

    def log_message(self, fmt, *args):
        if self.server.api.verbose:
            log("%s %s" % (self.address_string(), fmt % args))

    def send_error(self, code, message=None, explain=None):
        """Malformed requests get a Status too (never the HTML page)."""
        self.close_connection = True
        try:
            self.send_status(ApiError(code, "BadRequest" if code == 400 else "", message or "bad request"))
        except OSError:
            pass

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_HEAD(self):
        self.dispatch("HEAD")

    def do_OPTIONS(self):
        self.dispatch("OPTIONS")

    # ------------------------------------------------------------ plumbing

    def dispatch(self, method):
        self.api = self.server.api
        self.reg = self.api.registry
        self.started = False
        self.extra_headers = {}
        try:
            proxy = api_proxy.match(self.path)
            if proxy:       # services/NAME/proxy: the body is streamed to the backend, not read here
                return api_proxy.serve(self, method, proxy)
            self.body = self.read_body()
            if method == "POST" and self.api.take_fault(self.path):
                raise ApiError(503, "ServiceUnavailable",
                               "the server is currently unable to handle the request")
            self.route(method)
        except ApiError as e:
            if not self.started:
                self.send_status(e)
        except (ConnectionError, ssl.SSLError, socket.timeout, TimeoutError):
            self.close_connection = True
        except Exception:
            log("%s %s: %s" % (method, self.path, traceback.format_exc()))
            if not self.started:
                self.send_status(ApiError(500, "InternalError", 'an error on the server ("unknown") has '
                                          'prevented the request from succeeding'))
            else:
                self.close_connection = True

    def read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = b""
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline(3)
                if len(out) > MAX_BODY:
                    self.close_connection = True
                    raise ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is %d" % MAX_BODY)
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise bad_request("invalid Content-Length")
        if n > MAX_BODY:
            self.close_connection = True
            raise ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is %d" % MAX_BODY)
        return self.rfile.read(n) if n > 0 else b""

    def start_response(self, code, ctype, length=None):
        self.started = True
        self.send_response(code)
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", ctype)
        for k, v in self.extra_headers.items():
            self.send_header(k, v)
        if length is None:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()

    def send_json(self, code, obj, fmt="json"):
        if fmt == "yaml":
            body, ctype = yaml.safe_dump(obj, sort_keys=False).encode(), "application/yaml"
        else:
            body, ctype = (json.dumps(obj, separators=(",", ":")) + "\n").encode(), "application/json"
        if len(body) > GZIP_THRESHOLD and "gzip" in (self.headers.get("Accept-Encoding") or "").lower():
            body = gzip.compress(body)
            self.extra_headers["Content-Encoding"] = "gzip"
        self.start_response(code, ctype, len(body))
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_text(self, code, text):
        body = text.encode()
        self.start_response(code, "text/plain; charset=utf-8", len(body))
        self.wfile.write(body)

    def send_status(self, e):
        self.extra_headers.update(e.headers)
        self.send_json(e.code, e.status())

    def chunk(self, data):
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunks(self):
        self.wfile.write(b"0\r\n\r\n")

    def client_gone(self):
        """Has the client of a stream closed its connection? (A readable socket with no
        TLS record to give means end of file.)"""
        sock = self.connection
        try:
            r, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return True
        if not r:
            return False
        try:
            sock.setblocking(False)
            sock.recv(1)
            self.close_connection = True
            return True
        except ssl.SSLWantReadError:
            return False
        except (OSError, ssl.SSLError):
            return True
        finally:
            try:
                sock.settimeout(self.timeout)
            except OSError:
                pass

    def abort(self):
        """Close the connection without ending the stream (as a load balancer would)."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ------------------------------------------------------------ routing

    def authorized(self):
        auth = self.headers.get("Authorization") or ""
        parts = auth.split(None, 1)
        return len(parts) == 2 and parts[0].lower() == "bearer" and parts[1].strip() in self.api.tokens

    def route(self, method):
        url = urllib.parse.urlsplit(self.path)
        self.query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        path = url.path.rstrip("/") or "/"
        if not self.authorized():
            raise ApiError(401, "Unauthorized", "Unauthorized")
        if path.startswith("/_standin/"):
            return self.hooks(method, path)
        segs = [urllib.parse.unquote(s) for s in path.strip("/").split("/")] if path != "/" else []
        if self.non_resource(method, path, segs):
            return
        route = self.parse_route(segs)
        self.resource(method, route)

    def non_resource(self, method, path, segs):
        docs = {"/version": lambda: VERSION_INFO, "/api": self.api_versions, "/apis": self.group_list,
                "/openapi/v3": self.openapi_root}
        if path in ("/healthz", "/livez", "/readyz"):
            self.api.count(method.lower(), path)
            self.send_text(200, "ok")
            return True
        if path in docs or (len(segs) == 2 and segs[0] == "apis") or (len(segs) in (2, 3) and segs[0] in ("api", "apis")
                                                                        and self.is_group_version(segs)) \
                or path.startswith("/openapi/"):
            self.api.count(method.lower(), path)
            if method != "GET":
                raise method_not_allowed()
            if path in docs:
                self.send_json(200, docs[path]())
            elif path.startswith("/openapi/v3/"):
                self.send_json(200, self.openapi_gv(path[len("/openapi/v3/"):]))
            elif path == "/openapi/v2":
                self.send_openapi_v2()
            elif path.startswith("/openapi/"):
                raise no_such_resource()
            elif len(segs) == 2 and segs[0] == "apis":
                self.send_json(200, self.group_doc(segs[1]))
            else:
                self.send_json(200, self.resource_list(*self.group_version(segs)))
            return True
        return False

    def is_group_version(self, segs):
        group, version = self.group_version(segs)
        return (segs[0] == "api" and len(segs) == 2) or (segs[0] == "apis" and len(segs) == 3)

    def group_version(self, segs):
        return ("", segs[1]) if segs[0] == "api" else (segs[1], segs[2] if len(segs) > 2 else "")

    def parse_route(self, segs):
        if len(segs) < 3 or segs[0] not in ("api", "apis"):
            raise no_such_resource()
        if segs[0] == "api":
            group, version, rest = "", segs[1], segs[2:]
        else:
            if len(segs) < 4:
                raise no_such_resource()
            group, version, rest = segs[1], segs[2], segs[3:]
        watch_prefix = bool(rest) and rest[0] == "watch"
        if watch_prefix:
            rest = rest[1:]
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            ns, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise no_such_resource()
        kind = self.reg.find(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if kind is None or (ns is not None and not kind.namespaced) or \
                (kind.namespaced and ns is None and name is not None) or (sub and sub not in kind.subresources):
            raise no_such_resource()
        return Route(kind, version, ns, name, sub, watch_prefix)

    # ------------------------------------------------------------ resources

    def resource(self, method, r):
        verb = self.verb(method, r)
        self.api.count({"log": "get", "finalize": "update", None: method.lower()}.get(verb, verb), r.pattern())
        if verb is None:
            raise method_not_allowed()
        self.fmt = "json" if verb == "log" else self.negotiate(r.kind, stream=(verb == "watch"))
        getattr(self, "do_" + verb)(r)

    def verb(self, method, r):
        watch = r.watch_prefix or truthy(self.query.get("watch"))
        if r.name is None:
            # Creating, or deleting a collection, of a namespaced kind needs the namespace.
            scoped = r.ns is not None or not r.kind.namespaced
            return {"GET": "watch" if watch else "list", "POST": "create" if scoped else None,
                    "DELETE": "deletecollection" if scoped else None}.get(method)
        if r.sub == "log":
            return "log" if method == "GET" else None
        if r.sub == "finalize":
            return "finalize" if method == "PUT" else None
        return {"GET": "watch" if watch else "get", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if not r.sub else None}.get(method)

    def negotiate(self, kind, stream=False):
        """The answer's form for the Accept header: "json", "table" or "yaml"."""
        opts, protobuf = [], False
        for i, part in enumerate((self.headers.get("Accept") or "*/*").split(",")):
            fields = [f.strip() for f in part.split(";")]
            params = dict(f.split("=", 1) for f in fields[1:] if "=" in f)
            try:
                q = float(params.pop("q", "1"))
            except ValueError:
                q = 1.0
            opts.append((-q, i, fields[0].lower(), params))
        for _, _, media, params in sorted(opts):
            if media in ("application/json", "application/*", "*/*"):
                if "as" not in params:
                    return "json"
                if params["as"] == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
                    return "table"
            elif media == "application/yaml" and yaml is not None and not stream:
                return "yaml"
            elif media == "application/vnd.kubernetes.protobuf" and not kind.custom:
                # The real server would answer in protobuf; the stand-in answers with the
                # client's next choice (Go clients send "protobuf, json"), or 406 if none.
                protobuf = True
        if protobuf:
            raise ApiError(406, "NotAcceptable", "the stand-in does not serve application/vnd.kubernetes.protobuf "
                           "(the real server would answer in protobuf)")
        raise ApiError(406, "NotAcceptable", "only the following media types are accepted: "
                       "application/json, application/yaml, application/vnd.kubernetes.protobuf")

    def wants_table(self):
        return self.fmt == "table"

    def output(self, code, r, obj):
        obj = self.reg.render(r.kind, obj, r.version)
        if self.fmt == "table" and obj.get("kind") == r.kind.kind:
            self.send_json(code, api_print.table(r.kind, [obj], obj["metadata"].get("resourceVersion", ""),
                                                 r.version, self.query.get("includeObject", "Metadata")))
        else:
            self.send_json(code, obj, "yaml" if self.fmt == "yaml" else "json")

    def parse_body(self, allow_yaml=True, kind=None):
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip().lower()
        if ctype == "application/vnd.kubernetes.protobuf" and kind is not None:
            return api_proto.decode(kind, self.body)
        if ctype in ("application/yaml", "application/apply-patch+yaml") and allow_yaml:
            if yaml is None:
                raise unsupported_media(BODY_TYPES)
            try:
                return yaml.safe_load(self.body.decode())
            except Exception as e:
                raise bad_request("error converting YAML to JSON: %s" % e)
        if ctype not in ("application/json", "*/*", "application/json-patch+json", "application/merge-patch+json",
                         "application/strategic-merge-patch+json"):
            raise unsupported_media(BODY_TYPES)
        if not self.body.strip():
            raise bad_request("couldn't get version/kind; json parse error: unexpected end of JSON input")
        try:
            return json.loads(self.body.decode(), object_pairs_hook=S.pairs_hook)
        except (ValueError, UnicodeDecodeError) as e:
            raise bad_request("couldn't get version/kind; json parse error: %s" % e)

    def do_get(self, r):
        if r.sub == "status" or r.sub is None:
            self.output(200, r, self.reg.get(r.kind, r.ns, r.name))

    def do_create(self, r):
        dry = self.query.get("dryRun") == "All"
        obj = self.reg.create(r.kind, r.ns or "", self.parse_body(kind=r.kind), r.version, dry_run=dry)
        self.output(201, r, obj)

    def do_update(self, r):
        self.output(200, r, self.reg.update(r.kind, r.ns or "", r.name, self.parse_body(kind=r.kind), r.version, r.sub))

    def do_patch(self, r):
        ctype = self.headers.get("Content-Type") or ""
        base = ctype.split(";")[0].strip().lower()
        if base not in ("application/json-patch+json", "application/merge-patch+json",
                        "application/strategic-merge-patch+json", "application/apply-patch+yaml"):
            raise unsupported_media([t for t in ("application/json-patch+json", "application/merge-patch+json",
                                                 "application/strategic-merge-patch+json",
                                                 "application/apply-patch+yaml")
                                     if not (r.kind.custom and "strategic" in t)])
        body = self.parse_body()
        obj = self.reg.patch(r.kind, r.ns or "", r.name, ctype, body, r.version, r.sub,
                             self.query.get("fieldManager"))
        self.output(200, r, obj)

    def do_finalize(self, r):
        """PUT namespaces/NAME/finalize: only spec.finalizers changes."""
        body = self.parse_body()
        old = self.reg.get(r.kind, None, r.name)
        obj, _ = self.reg.decode(r.kind, body, r.version)
        new = json.loads(json.dumps(old))
        new.setdefault("spec", {})["finalizers"] = (obj.get("spec") or {}).get("finalizers") or []
        if not new["spec"]["finalizers"]:
            del new["spec"]["finalizers"]
        self.output(200, r, self.reg.commit(r.kind, old, new))

    def delete_options(self):
        opts = {}
        if self.body.strip():
            body = self.parse_body(allow_yaml=False)
            if not isinstance(body, dict):
                raise bad_request("json: cannot unmarshal %s into Go value of type v1.DeleteOptions" % S.json_type(body))
            d = S.Decoder()
            opts = d.model(body, "V1DeleteOptions", "", "")
            if d.type_error:
                raise bad_request(d.type_error)
        q = self.query
        for k in ("gracePeriodSeconds",):
            if k in q:
                try:
                    opts[k] = int(q[k])
                except ValueError:
                    raise bad_request('strconv.ParseInt: parsing "%s": invalid syntax' % q[k])
        if "propagationPolicy" in q:
            opts["propagationPolicy"] = q["propagationPolicy"]
        if "orphanDependents" in q:
            opts["orphanDependents"] = truthy(q["orphanDependents"])
        return opts

    def do_delete(self, r):
        opts = self.delete_options()
        if r.kind.res == "batch/jobs" and opts.get("propagationPolicy") is None and opts.get("orphanDependents") is None:
            self.extra_headers["Warning"] = JOB_DELETE_WARNING
        obj, _ = self.reg.delete(r.kind, r.ns or "", r.name, opts)
        if obj.get("kind") == "Status":
            self.send_json(200, obj, "yaml" if self.fmt == "yaml" else "json")
        else:
            self.output(200, r, obj)

    def do_deletecollection(self, r):
        opts = self.delete_options()
        objs, rv = self.select(r)
        out = []
        for o in objs:
            try:
                res, _ = self.reg.delete(r.kind, o["metadata"].get("namespace", ""), o["metadata"]["name"], opts)
                out.append(o if res.get("kind") == "Status" else res)
            except ApiError as e:
                if e.code != 404:
                    raise
        self.send_json(200, self.list_doc(r, out, self.api.store.rv), "yaml" if self.fmt == "yaml" else "json")

    # ------------------------------------------------------------ list and watch

    def selectors(self, r):
        ls = LabelSelector(self.query.get("labelSelector"))
        fs = FieldSelector(self.query.get("fieldSelector"), K.field_getters(r.kind))
        extra = None
        if r.name is not None:       # a watch on one object
            extra = r.name
        return lambda o: (ls.matches(o["metadata"].get("labels")) and fs.matches(o)
                          and (extra is None or o["metadata"]["name"] == extra))

    def select(self, r):
        return self.api.store.list(r.kind.res, r.ns, self.selectors(r))

    def list_doc(self, r, items, rv, more=None):
        k = r.kind
        strip = not k.custom      # typed lists carry no kind/apiVersion on their items
        out = []
        for o in items:
            o = self.reg.render(k, o, r.version)
            if strip:
                o = {kk: v for kk, v in o.items() if kk not in ("kind", "apiVersion")}
            out.append(o)
        md = {"resourceVersion": str(rv)}
        if more:
            md.update(more)
        return {"kind": k.kind + "List", "apiVersion": k.api_version(r.version), "metadata": md, "items": out}

    def wait_for_rv(self, rv):
        deadline = time.time() + 3
        while self.api.store.rv < rv and time.time() < deadline:
            time.sleep(0.05)
        if self.api.store.rv < rv:
            raise ApiError(504, "Timeout", "Too large resource version: %d, current: %d" % (rv, self.api.store.rv),
                           {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                            "retryAfterSeconds": 1})

    def parse_rv(self, name="resourceVersion"):
        v = self.query.get(name, "")
        if v in ("", "0"):
            return v
        if not v.isdigit():
            raise bad_request('resourceVersion: Invalid value: "%s": strconv.ParseUint: parsing "%s": invalid syntax'
                              % (v, v))
        return int(v)

    def do_list(self, r):
        rv = self.parse_rv()
        if isinstance(rv, int):
            self.wait_for_rv(rv)
            if self.query.get("resourceVersionMatch") == "Exact" and rv != self.api.store.rv:
                raise expired(rv, self.api.store.floor)
        objs, cur = self.select(r)
        objs, more = self.page(objs, cur)
        if self.wants_table():
            self.send_json(200, api_print.table(r.kind, [self.reg.render(r.kind, o, r.version) for o in objs],
                                                more.pop("rv", cur), r.version, self.query.get("includeObject", "Metadata")))
            return
        listrv = more.pop("rv", cur)
        self.send_json(200, self.list_doc(r, objs, listrv, more), "yaml" if self.fmt == "yaml" else "json")

    def page(self, objs, cur):
        """limit/continue: a page of the sorted list, and the metadata for the next."""
        more = {}
        token = self.query.get("continue")
        if token:
            try:
                t = json.loads(base64.b64decode(token).decode())
                start, trv = tuple(t["start"]), int(t["rv"])
            except Exception:
                raise bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
            if trv < self.api.store.floor:
                raise ApiError(410, "Expired", "The provided continue parameter is too old to display a consistent "
                               "list result. You can start a new list without the continue parameter.")
            objs = [o for o in objs if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > start]
            more["rv"] = trv
        try:
            limit = int(self.query.get("limit") or 0)
        except ValueError:
            raise bad_request('strconv.ParseInt: parsing "%s": invalid syntax' % self.query.get("limit"))
        if limit > 0 and len(objs) > limit:
            last = objs[limit - 1]["metadata"]
            tok = {"rv": more.get("rv", cur), "start": [last.get("namespace", ""), last["name"]]}
            more["continue"] = base64.b64encode(json.dumps(tok).encode()).decode()
            more["remainingItemCount"] = len(objs) - limit
            objs = objs[:limit]
        return objs, more

    def do_watch(self, r):
        match = self.selectors(r)
        rv = self.parse_rv()
        initial = rv in ("", 0, "0") or truthy(self.query.get("sendInitialEvents"))
        try:
            timeout = int(self.query.get("timeoutSeconds") or 0)
        except ValueError:
            raise bad_request('strconv.ParseInt: parsing "%s": invalid syntax' % self.query.get("timeoutSeconds"))
        if timeout <= 0:
            timeout = 1800 + int(1800 * (uuid.uuid4().int % 1000) / 1000.0)  # the real 30-60 min
        bookmarks = truthy(self.query.get("allowWatchBookmarks"))
        self.start_response(200, "application/json")
        if isinstance(rv, int) and rv > self.api.store.rv:
            try:
                self.wait_for_rv(rv)
            except ApiError as e:
                return self.watch_error(e)
        try:
            w = self.api.store.watch(r.kind.res, r.ns, match, rv if isinstance(rv, int) else 0, initial)
        except ApiError as e:
            # The real server answers 200 and then this one ERROR event.
            return self.watch_error(e)
        try:
            self.stream_watch(r, w, time.time() + timeout, bookmarks)
        finally:
            self.api.store.unwatch(w)

    def watch_error(self, e):
        self.chunk((json.dumps({"type": "ERROR", "object": e.status()}, separators=(",", ":")) + "\n").encode())
        self.end_chunks()

    def event_line(self, r, etype, obj):
        obj = self.reg.render(r.kind, obj, r.version)
        if self.wants_table():      # kubectl get -w: each event carries a one-row Table
            obj = api_print.table(r.kind, [obj], obj["metadata"].get("resourceVersion", ""), r.version,
                                  self.query.get("includeObject", "Metadata"))
            if self.sent_columns:
                obj["columnDefinitions"] = []
            self.sent_columns = True
        return (json.dumps({"type": etype, "object": obj}, separators=(",", ":")) + "\n").encode()

    def bookmark(self, r, rv, initial_end=False):
        md = {"resourceVersion": str(rv), "creationTimestamp": None}
        if initial_end:
            md["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": r.kind.kind, "apiVersion": r.kind.api_version(r.version), "metadata": md}
        return (json.dumps({"type": "BOOKMARK", "object": obj}, separators=(",", ":")) + "\n").encode()

    def stream_watch(self, r, w, deadline, bookmarks):
        store = self.api.store
        self.sent_columns = False
        if truthy(self.query.get("sendInitialEvents")) and bookmarks:
            # The initial ADDED events are already queued; the end bookmark follows them.
            with store.lock:
                pending = []
                while not w.q.empty():
                    pending.append(w.q.get())
                end_rv = store.rv
            for item in pending:
                if item is not None:
                    self.chunk(self.event_line(r, item[0], item[1]))
            self.chunk(self.bookmark(r, end_rv, initial_end=True))
        next_bookmark = time.time() + self.api.bookmark_interval
        last_check = time.time()
        while True:
            now = time.time()
            if now >= deadline:
                if bookmarks:
                    self.send_bookmark(r, w)
                self.end_chunks()
                return
            try:
                item = w.q.get(timeout=min(1.0, deadline - now))
            except Exception:
                item = None
            if w.dropped:
                return self.abort()
            if w.overflow:
                self.end_chunks()
                return
            if item is not None:
                self.chunk(self.event_line(r, item[0], item[1]))
                continue
            if bookmarks and time.time() >= next_bookmark:
                self.send_bookmark(r, w)
                next_bookmark = time.time() + self.api.bookmark_interval
            if time.time() - last_check >= 1.0:
                last_check = time.time()
                if self.client_gone():
                    return

    def send_bookmark(self, r, w):
        """A bookmark is only safe when nothing is queued for this watcher."""
        with self.api.store.lock:
            if not w.q.empty():
                return
            rv = self.api.store.rv
        self.chunk(self.bookmark(r, rv))

    # ------------------------------------------------------------ pod logs

    def do_log(self, r):
        pod = self.reg.get(r.kind, r.ns, r.name)
        cname = self.log_container(pod, r.name)
        previous = truthy(self.query.get("previous"))
        base = os.path.join(self.api.data_dir or "", "logs", r.ns, r.name, cname)
        path = base + (".previous.log" if previous else ".log")
        if not os.path.exists(path):
            if previous:
                raise bad_request('previous terminated container "%s" in pod "%s" not found' % (cname, r.name))
            state = container_state(pod, cname)
            if not state or "waiting" in state:
                reason = (state or {}).get("waiting", {}).get("reason") or "ContainerCreating"
                raise bad_request('container "%s" in pod "%s" is waiting to start: %s' % (cname, r.name, reason))
        try:
            tail = int(self.query["tailLines"]) if "tailLines" in self.query else None
            limit = int(self.query["limitBytes"]) if "limitBytes" in self.query else None
        except ValueError:
            raise bad_request("tailLines and limitBytes must be integers")
        self.start_response(200, "text/plain")
        f = open(path, "rb") if os.path.exists(path) else None
        try:
            sent = self.send_log_start(f, tail, limit)
            if truthy(self.query.get("follow")) and not previous and f is not None:
                self.follow_log(r, pod, cname, path, f, sent, limit)
        finally:
            if f:
                f.close()
        self.end_chunks()

    def log_container(self, pod, name):
        spec = pod.get("spec") or {}
        names = [c["name"] for c in spec.get("containers") or []]
        inits = [c["name"] for c in spec.get("initContainers") or []]
        c = self.query.get("container")
        if not c:
            if len(names) == 1:
                return names[0]
            msg = "a container name must be specified for pod %s, choose one of: [%s]" % (name, " ".join(names))
            if inits:
                msg += " or one of the init containers: [%s]" % " ".join(inits)
            raise bad_request(msg)
        if c not in names + inits + [e.get("name") for e in spec.get("ephemeralContainers") or []]:
            raise bad_request("container %s is not valid for pod %s" % (c, name))
        return c

    def send_log_start(self, f, tail, limit):
        if f is None:
            return 0
        data = f.read()
        if tail is not None:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-tail:]) if tail > 0 else b""
        if limit is not None:
            data = data[:limit]
        self.chunk(data)
        return len(data)

    def follow_log(self, r, pod, cname, path, f, sent, limit):
        """Stream what the kubelet appends until the container has ended (and the file
        is drained), the container restarted (a new file), or the pod is gone."""
        uid = pod["metadata"]["uid"]
        ino = os.fstat(f.fileno()).st_ino
        last_check = time.time()
        while True:
            data = f.read(65536)
            if data:
                if limit is not None:
                    data = data[:max(0, limit - sent)]
                    if not data:
                        return
                sent += len(data)
                self.chunk(data)
                continue
            cur = self.api.store.get("/pods", r.ns, r.name)
            if cur is None or cur["metadata"]["uid"] != uid:
                return
            state = container_state(cur, cname) or {}
            rotated = not os.path.exists(path) or os.stat(path).st_ino != ino
            ended = "terminated" in state or (cur.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if ended or rotated:
                self.chunk(f.read())
                return
            if time.time() - last_check >= 1.0:
                last_check = time.time()
                if self.client_gone():
                    return
            time.sleep(0.1)

    # ------------------------------------------------------------ discovery

    def api_versions(self):
        host = self.headers.get("Host") or "127.0.0.1:%d" % self.api.port
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]}

    def groups(self):
        """group -> served versions, best first (only the groups of /apis)."""
        out = collections.OrderedDict()
        for k in self.reg.kinds():
            if k.group:
                vs = out.setdefault(k.group, set())
                vs.update(k.versions)
        return {g: sorted(vs, key=version_key) for g, vs in out.items()}

    def group_doc(self, group, with_kind=True):
        vs = self.groups().get(group)
        if not vs:
            raise no_such_resource()
        doc = {"name": group, "versions": [{"groupVersion": group + "/" + v, "version": v} for v in vs],
               "preferredVersion": {"groupVersion": group + "/" + vs[0], "version": vs[0]}}
        if with_kind:
            doc = dict({"kind": "APIGroup", "apiVersion": "v1"}, **doc)
        return doc

    def group_list(self):
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [self.group_doc(g, False) for g in self.groups()]}

    def resource_list(self, group, version):
        kinds = [k for k in self.reg.kinds() if k.group == group and version in k.versions]
        if not kinds:
            raise no_such_resource()
        res = []
        for k in kinds:
            e = {"name": k.plural, "singularName": k.singular, "namespaced": k.namespaced, "kind": k.kind,
                 "verbs": k.verbs()}
            if k.short_names:
                e["shortNames"] = k.short_names
            if k.categories:
                e["categories"] = k.categories
            e["storageVersionHash"] = base64.b64encode(hashlib.sha256(k.res.encode()).digest()[:8]).decode()
            res.append(e)
            for sub in sorted(k.subresources):
                verbs = {"status": ["get", "patch", "update"], "log": ["get"], "finalize": ["update"]}[sub]
                res.append({"name": k.plural + "/" + sub, "singularName": "", "namespaced": k.namespaced,
                            "kind": k.kind, "verbs": verbs})
            if k.res == "/services":    # served by api_proxy
                res.append({"name": "services/proxy", "singularName": "", "namespaced": True,
                            "kind": "ServiceProxyOptions", "verbs": ["create", "delete", "get", "patch", "update"]})
        gv = group + "/" + version if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res}

    # OpenAPI v3: only what kubectl's validation needs (it asks whether PATCH takes the
    # fieldValidation parameter, and then sends fieldValidation=Strict).

    def gv_paths(self):
        out = {}
        for k in self.reg.kinds():
            for v in k.versions:
                key = "api/" + v if not k.group else "apis/%s/%s" % (k.group, v)
                out.setdefault(key, []).append((k, v))
        return out

    def send_openapi_v2(self):
        """An OpenAPI v2 document without definitions. kubectl before 1.27 (Debian 12 has
        1.20) downloads it before every `create -f`, in protobuf (gnostic's openapi_v2
        Document), and skips its client-side check for kinds the document does not define:
        the checks stay the server's, as with today's kubectl."""
        accept = self.headers.get("Accept") or ""
        if "application/com.github.proto-openapi.spec.v2" in accept:
            def field(num, data):  # a length-delimited protobuf field
                return bytes([num << 3 | 2, len(data)]) + data
            info = field(1, b"dtrain stand-in") + field(2, VERSION_INFO["gitVersion"].encode())
            body = field(1, b"2.0") + field(2, info)
            # as kube-openapi answers it: the media type asked for has an '@', which a
            # Content-Type cannot carry (Go's mime parser refuses it)
            self.start_response(200, "application/octet-stream", len(body))
            self.wfile.write(body)
        else:
            self.send_json(200, {"swagger": "2.0", "info": {"title": "dtrain stand-in",
                                                            "version": VERSION_INFO["gitVersion"]},
                                 "paths": {}, "definitions": {}})

    def openapi_root(self):
        paths = {}
        for key in sorted(self.gv_paths()):
            h = hashlib.sha512(json.dumps(self.openapi_gv(key), sort_keys=True).encode()).hexdigest()[:128]
            paths[key] = {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (key, h.upper())}
        return {"paths": paths}

    def openapi_gv(self, key):
        kinds = self.gv_paths().get(key)
        if not kinds:
            raise no_such_resource()
        paths = {}
        params = [{"name": n, "in": "query", "description": n, "schema": {"type": "string", "uniqueItems": True}}
                  for n in ("dryRun", "fieldManager", "fieldValidation")]
        for k, v in kinds:
            prefix = "/" + key + ("/namespaces/{namespace}" if k.namespaced else "")
            gvk = {"group": k.group, "version": v, "kind": k.kind}
            op = {"description": "partially update the specified %s" % k.kind, "operationId": "patch" + k.kind,
                  "parameters": params, "responses": {"200": {"description": "OK"}},
                  "x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk}
            create = dict(op, description="create a %s" % k.kind, operationId="create" + k.kind,
                          **{"x-kubernetes-action": "post"})
            paths["%s/%s/{name}" % (prefix, k.plural)] = {"patch": op}
            paths["%s/%s" % (prefix, k.plural)] = {"post": create}
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION_INFO["gitVersion"]},
                "paths": paths, "components": {"schemas": {}}}

    # ------------------------------------------------------------ test hooks

    def hooks(self, method, path):
        api = self.api
        if path == "/_standin/drop-watches" and method == "POST":
            self.send_json(200, {"dropped": api.store.drop_watches()})
        elif path == "/_standin/compact" and method == "POST":
            self.send_json(200, {"compactedAt": str(api.store.compact())})
        elif path == "/_standin/requests" and method == "GET":
            with api.counts_lock:
                counts = dict(api.counts)
            by_verb = collections.Counter()
            for k, n in counts.items():
                by_verb[k.split(" ", 1)[0]] += n
            self.send_json(200, {"total": sum(counts.values()), "byVerb": dict(by_verb),
                                 "requests": dict(sorted(counts.items()))})
        elif path == "/_standin/requests/reset" and method == "POST":
            with api.counts_lock:
                api.counts.clear()
            self.send_json(200, {"total": 0})
        else:
            raise no_such_resource()


def container_state(pod, cname):
    st = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for c in st.get(key) or []:
            if c.get("name") == cname:
                return c.get("state") or {}
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--ca", help="the CA certificate (for each namespace's kube-root-ca.crt)")
    ap.add_argument("--token-file", action="append", default=[])
    ap.add_argument("--dir", help="where the kubelet's logs/ and the volumes/ of PVCs are")
    ap.add_argument("--history", type=int, default=1000, help="watch history window (events)")
    ap.add_argument("--job-backoff", type=float, default=10.0, help="the Job controller's first retry delay (s)")
    ap.add_argument("--crd-establish-delay", type=float, default=0.5)
    ap.add_argument("--bookmark-interval", type=float, default=60.0)
    ap.add_argument("--port-file")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    tokens = [open(f).read().strip() for f in a.token_file]
    ca = open(a.ca).read() if a.ca else ""
    api = ApiServer(a.host, a.port, a.cert, a.key, tokens, a.dir, ca, a.history, a.job_backoff,
                    a.crd_establish_delay, a.bookmark_interval, a.verbose)
    api.start()
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write("%d\n" % api.port)
        os.rename(a.port_file + ".tmp", a.port_file)
    log("listening on %s:%d" % (a.host, api.port))
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    api.stop()


if __name__ == "__main__":
    main()
