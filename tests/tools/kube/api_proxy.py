"""The services proxy subresource of the stand-in API server, as kube-apiserver 1.32 serves it:

    /api/v1/namespaces/NS/services/[SCHEME:]NAME[:PORT]/proxy[/PATH][?QUERY]

any of GET POST PUT PATCH DELETE HEAD OPTIONS. The backend is found as the real
ResourceLocation finds it (pkg/registry/core/service/storage): a port *number* is the
Service's port and names that port; a port name (or none: the unnamed port) is looked up in
the Service's endpoints, which are computed here as the endpoints controller would make them
(the pods the selector matches that have an IP, are not terminal and not terminating; ready
ones serve; targetPort by number, or by name from the pod's container ports). Then the request
goes to POD_IP:TARGET_PORT as k8s.io/apimachinery's UpgradeAwareHandler and proxy.Transport
send it: Authorization removed (the authentication filter deletes it), hop-by-hop headers
removed, X-Forwarded-For and X-Forwarded-Uri added, the Host header kept; body and query
passed through. The answer comes back as is (hop-by-hop and CORS headers removed, a Location
on the backend rewritten under the proxy path), streamed; errors are the real Status objects.

Not done: connection upgrades (websockets), rewriting the links inside text/html bodies,
the transparent gzip of Go's transport, the kubernetes Service's endpoints (the API server)."""
import errno
import http.client
import os
import re
import socket
import ssl
import threading
import urllib.parse
import uuid

from api_store import ApiError, bad_request, not_found

PROXY_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/services/([^/]+)/proxy(/.*)?$")
PATTERN = "/api/v1/namespaces/{namespace}/services/{name}/proxy"
# The verb of the request (k8s.io/apiserver's RequestInfo: the HTTP method's, for a subresource).
VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
HOP_BY_HOP = {"connection", "proxy-connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailer", "transfer-encoding", "upgrade"}
CORS = {"access-control-allow-credentials", "access-control-allow-headers", "access-control-allow-methods",
        "access-control-allow-origin"}
CONNECT_TIMEOUT = 30          # Go's dialer in the API server's proxy transport
PIECE = 65536
GO_ERRNO = {errno.ECONNREFUSED: "connection refused", errno.EHOSTUNREACH: "no route to host",
            errno.ENETUNREACH: "network is unreachable", errno.ETIMEDOUT: "connection timed out",
            errno.ECONNRESET: "connection reset by peer", errno.EPIPE: "broken pipe"}
TCP_STATES_GONE = (7, 8, 9)   # TCP_CLOSE, TCP_CLOSE_WAIT, TCP_LAST_ACK: the client has closed


class BackendWriteError(Exception):
    pass


def match(raw_path):
    return PROXY_PATH.match(urllib.parse.urlsplit(raw_path).path)


def unavailable(msg):
    return ApiError(503, "ServiceUnavailable", msg)


def go_errno(e):
    if isinstance(e, socket.timeout):
        return "i/o timeout"
    return GO_ERRNO.get(e.errno) or (os.strerror(e.errno).lower() if e.errno else str(e))


# ------------------------------------------------------------------ paths, as Go's path package

def go_clean(p):
    """Go's path.Clean."""
    if p == "":
        return "."
    rooted = p.startswith("/")
    out = []
    for part in p.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out and out[-1] != "..":
                out.pop()
            elif not rooted:
                out.append("..")
            continue
        out.append(part)
    s = ("/" if rooted else "") + "/".join(out)
    return s or ("/" if rooted else ".")


def go_join(*elems):
    """Go's path.Join: the non-empty elements joined and cleaned ("" if there are none)."""
    parts = [e for e in elems if e]
    return go_clean("/".join(parts)) if parts else ""


def join_preserving_trailing_slash(*elems):
    """k8s.io/apimachinery/pkg/util/net.JoinPreservingTrailingSlash."""
    out = go_join(*elems)
    for e in reversed(elems):
        if e:
            if e.endswith("/") and not out.endswith("/"):
                out += "/"
            break
    return out


def go_escape_path(p):
    """url.URL.EscapedPath for a path set without RawPath (encodePath: all but ? of the
    reserved characters stay)."""
    return urllib.parse.quote(p, safe="/$&+,:;=@")


def canonical(key):
    """textproto.CanonicalMIMEHeaderKey (Go's http.Header writes its keys so)."""
    if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", key):
        return key
    return "-".join(w[:1].upper() + w[1:].lower() for w in key.split("-"))


# ------------------------------------------------------------------ where the request goes

def split_scheme_name_port(ident):
    """utilnet.SplitSchemeNamePort: "name", "name:port" or "scheme:name:port"."""
    parts = ident.split(":")
    if len(parts) == 1:
        scheme, name, port = "", parts[0], ""
    elif len(parts) == 2:
        scheme, name, port = "", parts[0], parts[1]
    elif len(parts) == 3:
        scheme, name, port = parts
    else:
        return None
    if not name or scheme not in ("", "http", "https"):
        return None
    return scheme, name, port


def find_port(pod, svc_port):
    """podutil.FindPort: the container port a Service port's targetPort means on this pod."""
    tp = svc_port.get("targetPort", svc_port.get("port"))
    proto = svc_port.get("protocol") or "TCP"
    if isinstance(tp, int):
        return tp
    spec = pod.get("spec") or {}
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for c in (spec.get("containers") or []) + sidecars:
        for p in c.get("ports") or []:
            if p.get("name") == tp and (p.get("protocol") or "TCP") == proto:
                return p.get("containerPort")
    return None


def pod_ready(pod):
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def endpoints(store, ns, svc):
    """What the endpoints controller would store for svc: None when it keeps no Endpoints
    (a Service without selector), else [(pod, ready, {port name: number})] in name order,
    only pods that belong in them."""
    spec = svc.get("spec") or {}
    sel = spec.get("selector") or {}
    if not sel:
        return None
    publish = bool(spec.get("publishNotReadyAddresses"))

    def selected(p):
        labels = p["metadata"].get("labels") or {}
        return all(labels.get(k) == v for k, v in sel.items())

    pods, _ = store.list("/pods", ns, selected)
    out = []
    for p in pods:
        st = p.get("status") or {}
        if st.get("phase") in ("Succeeded", "Failed") or not (st.get("podIP") or st.get("podIPs")):
            continue
        if p["metadata"].get("deletionTimestamp") and not publish:
            continue
        ports = {}
        for sp in spec.get("ports") or []:
            n = find_port(p, sp)
            if n is not None:
                ports[sp.get("name") or ""] = n
        headless_no_ports = not spec.get("ports") and spec.get("clusterIP") == "None"
        if ports or headless_no_ports:
            out.append((p, publish or pod_ready(p), ports))
    return out


def resolve(store, ns, ident):
    """(scheme, ip, port) for services/IDENT/proxy, or the real ApiError."""
    parsed = split_scheme_name_port(ident)
    if parsed is None:
        raise bad_request('invalid service request "%s"' % ident)
    scheme, name, port_str = parsed
    if re.fullmatch(r"[+-]?[0-9]+", port_str) and -2 ** 63 <= int(port_str) < 2 ** 63:
        num = int(port_str)
        svc = store.get("/services", ns, name)
        if svc is None:
            raise not_found("", "services", name)
        for sp in (svc.get("spec") or {}).get("ports") or []:
            if sp.get("port") == num:
                port_str = sp.get("name") or ""
                break
        else:
            raise unavailable('no service port %d found for service "%s"' % (num, name))
    svc = store.get("/services", ns, name)
    eps = endpoints(store, ns, svc) if svc is not None else None
    if eps is None:
        raise not_found("", "endpoints", name)
    if not eps:
        raise unavailable('no endpoints available for service "%s"' % name)
    for pod, ready, ports in eps:
        if ready and port_str in ports:
            return scheme or "http", pod["status"].get("podIP") or pod["status"]["podIPs"][0]["ip"], ports[port_str]
    raise unavailable('no endpoints available for service "%s"' % ident)


# ------------------------------------------------------------------ the request

def serve(h, method, m):
    """Answer one services/.../proxy request on the API server's handler h."""
    h.proxy_body_pending = bool(h.headers.get("Content-Length") not in (None, "", "0")
                                or "chunked" in (h.headers.get("Transfer-Encoding") or "").lower())
    try:
        if not h.authorized():
            raise ApiError(401, "Unauthorized", "Unauthorized")
        h.api.count(VERBS.get(method, method.lower()), PATTERN)
        url = urllib.parse.urlsplit(h.path)
        ns, ident = urllib.parse.unquote(m.group(1)), urllib.parse.unquote(m.group(2))
        scheme, ip, port = resolve(h.api.store, ns, ident)
        Proxy(h, method, url, m, scheme, ip, port).run()
    except ApiError:
        if h.proxy_body_pending:
            drain(h)
        raise
    except BaseException:
        if h.proxy_body_pending:
            h.close_connection = True
        raise


def drain(h):
    """Read and drop the body of a request that was not passed on (else close the connection)."""
    h.proxy_body_pending = False
    try:
        n = h.headers.get("Content-Length")
        if "chunked" in (h.headers.get("Transfer-Encoding") or "").lower() or (n and int(n) <= 3 * 1024 * 1024):
            h.read_body()
            return
    except (ApiError, ValueError, OSError):
        pass
    h.close_connection = True


class Proxy:
    def __init__(self, h, method, url, m, scheme, ip, port):
        self.h, self.method, self.scheme, self.ip, self.port = h, method, scheme, ip, port
        self.query = url.query
        self.raw_path = url.path
        self.path = urllib.parse.unquote(url.path)          # the decoded path, as Go's req.URL.Path
        # The subpath, as getRequestOptions builds it from the request's parts after "proxy".
        sub = urllib.parse.unquote(m.group(3) or "").strip("/")
        sub = "/" + sub if sub else ""
        if self.path.endswith("/") and not sub.endswith("/"):
            sub += "/"
        self.location_path = join_preserving_trailing_slash("", sub)
        self.loc_path = self.location_path
        if not self.loc_path.endswith("/") and self.path.endswith("/"):
            self.loc_path += "/"
        suffix = self.location_path
        if self.path.endswith("/") and not suffix.endswith("/"):
            suffix += "/"
        self.prepend = self.path[:-len(suffix)] if suffix and self.path.endswith(suffix) else self.path
        self.sock = None
        self.done = threading.Event()

    def run(self):
        h = self.h
        if self.loc_path == "" and self.method in ("GET", "HEAD"):
            # proxyRedirectsforRootPath: .../proxy without a slash is sent to .../proxy/
            h.started = True
            h.send_response_only(301)
            h.send_header("Audit-Id", str(uuid.uuid4()))
            h.send_header("Cache-Control", "no-cache, private")
            h.send_header("Date", h.date_time_string())
            h.send_header("Location", self.raw_path + "/" + ("?" + self.query if self.query else ""))
            h.send_header("Content-Length", "0")
            if h.close_connection:
                h.send_header("Connection", "close")
            h.end_headers()
            if h.proxy_body_pending:
                drain(h)
            return
        self.host = "%s:%d" % (self.ip, self.port)
        self.sock = self.dial()
        threading.Thread(target=self.watch_client, daemon=True).start()
        try:
            resp = self.send()
            self.answer(resp)
        finally:
            self.done.set()
            try:
                self.sock.close()
            except OSError:
                pass

    def fail(self, msg):
        return unavailable("error trying to reach service: %s" % msg)

    def dial(self):
        try:
            s = socket.create_connection((self.ip, self.port), timeout=CONNECT_TIMEOUT)
        except OSError as e:
            sep = ": " if isinstance(e, socket.timeout) else ": connect: "
            raise self.fail("dial tcp %s%s%s" % (self.host, sep, go_errno(e)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local = "%s:%d" % s.getsockname()[:2]
        if self.scheme == "https":
            # The API server's proxy transport does not verify the backend's certificate.
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            try:
                s = ctx.wrap_socket(s)
            except ssl.SSLError as e:
                s.close()
                if "WRONG_VERSION_NUMBER" in str(e):
                    raise self.fail("tls: first record does not look like a TLS handshake")
                raise self.fail("remote error: tls: %s" % (e.reason or e).__str__().lower().replace("_", " "))
            except OSError as e:
                s.close()
                raise self.fail("read tcp %s->%s: read: %s" % (self.local, self.host, go_errno(e)))
        s.settimeout(None)
        return s

    def watch_client(self):
        """Stop the backend exchange when the client has closed its connection (Go cancels the
        request's context then)."""
        while not self.done.wait(0.5):
            try:
                state = self.h.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
            except (OSError, ValueError):
                state = 7
            if state in TCP_STATES_GONE:
                try:
                    self.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return

    def request_head(self, chunked, length):
        h = self.h
        tokens = set()
        for v in h.headers.get_all("Connection") or []:
            tokens.update(t.strip().lower() for t in v.split(","))
        prior, fwd = [], []
        for k, v in h.headers.items():
            lk = k.lower()
            # The authentication filter has deleted Authorization; Host, the body's framing and
            # Expect (this server has answered it) are the transport's.
            if lk in HOP_BY_HOP or lk in tokens or lk in ("authorization", "host", "content-length", "expect"):
                continue
            if lk == "x-forwarded-for":
                prior.append(v)
                continue
            fwd.append((canonical(k), v))
        client_ip = h.client_address[0]
        fwd.append(("X-Forwarded-For", ", ".join(prior + [client_ip])))
        esc = go_escape_path(self.loc_path)
        uri = go_join(self.prepend, esc)
        if self.loc_path.endswith("/"):
            uri += "/"
        fwd.append(("X-Forwarded-Uri", uri))
        fwd.sort(key=lambda kv: kv[0])
        lines = ["%s %s HTTP/1.1" % (self.method, (esc or "/") + ("?" + self.query if self.query else "")),
                 "Host: %s" % (h.headers.get("Host") or self.host)]
        ua = [v for k, v in fwd if k == "User-Agent"]
        lines += ["User-Agent: %s" % v for v in ua]
        if chunked:
            lines.append("Transfer-Encoding: chunked")
        elif length or self.method in ("POST", "PUT", "PATCH"):
            lines.append("Content-Length: %d" % length)
        lines += ["%s: %s" % kv for kv in fwd if kv[0] != "User-Agent"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def put(self, data):
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise BackendWriteError("write tcp %s->%s: write: %s" % (self.local, self.host, go_errno(e)))

    def send(self):
        """Send the request (the body streamed as it comes) and read the answer's head."""
        h = self.h
        chunked = "chunked" in (h.headers.get("Transfer-Encoding") or "").lower()
        try:
            length = 0 if chunked else int(h.headers.get("Content-Length") or 0)
        except ValueError:
            raise bad_request("invalid Content-Length")
        write_error = None
        try:
            self.put(self.request_head(chunked, length))
            if chunked:
                self.copy_chunked_body()
            else:
                left = length
                while left > 0:
                    data = h.rfile.read(min(PIECE, left))
                    if not data:
                        raise ConnectionError("the client's body ended early")
                    left -= len(data)
                    self.put(data)
            h.proxy_body_pending = False
        except BackendWriteError as e:
            # As Go's transport: an answer the backend gave anyway wins over the write error.
            write_error = str(e)
            if h.proxy_body_pending:
                h.close_connection = True
        resp = http.client.HTTPResponse(self.sock, method=self.method)
        try:
            resp.begin()
        except http.client.RemoteDisconnected:
            raise self.fail(write_error or "EOF")
        except http.client.BadStatusLine as e:
            raise self.fail(write_error or "net/http: HTTP/1.x transport connection broken: malformed HTTP "
                            "response %s" % ('"%s"' % str(e.args[0]).strip() if e.args else ""))
        except (http.client.HTTPException, ValueError) as e:
            raise self.fail(write_error or "net/http: HTTP/1.x transport connection broken: %s" % e)
        except OSError as e:
            raise self.fail(write_error or "read tcp %s->%s: read: %s" % (self.local, self.host, go_errno(e)))
        return resp

    def copy_chunked_body(self):
        rfile = self.h.rfile
        while True:
            line = rfile.readline(65537)
            if not line:
                raise ConnectionError("the client's body ended early")
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass
                self.put(b"0\r\n\r\n")
                return
            left = size
            while left > 0:
                data = rfile.read(min(PIECE, left))
                if not data:
                    raise ConnectionError("the client's body ended early")
                self.put(b"%x\r\n%s\r\n" % (len(data), data))
                left -= len(data)
            rfile.readline(3)

    def rewrite_location(self, loc, req_host):
        """proxy.Transport.rewriteURL: a Location on the backend itself goes under the proxy path."""
        try:
            u = urllib.parse.urlsplit(loc)
        except ValueError:
            raise ApiError(500, "InternalError", "Internal error occurred: error trying to parse Location header: "
                           'parse "%s": invalid URL' % loc)
        if (u.netloc and u.netloc not in (self.host, req_host)) or not u.path.startswith("/"):
            return loc
        scheme, netloc = u.scheme, u.netloc
        if u.netloc != req_host:
            scheme, netloc = "", ""
        path, dpath = u.path, urllib.parse.unquote(u.path)
        if not dpath.startswith(self.prepend):
            path = go_escape_path(go_join(self.prepend, dpath) + ("/" if dpath.endswith("/") else ""))
        return urllib.parse.urlunsplit((scheme, netloc, path, u.query, u.fragment))

    def answer(self, resp):
        h = self.h
        tokens = set()
        for v in resp.msg.get_all("Connection") or []:
            tokens.update(t.strip().lower() for t in v.split(","))
        headers = [("Audit-Id", str(uuid.uuid4())), ("Cache-Control", "no-cache, private")]
        length = None
        for k, v in resp.msg.items():
            lk = k.lower()
            if lk in HOP_BY_HOP or lk in tokens or lk in CORS:
                continue
            if lk == "content-length":
                length = v.strip()
                continue
            if lk == "location":
                v = self.rewrite_location(v, h.headers.get("Host") or "")
            headers.append((canonical(k), v))
        if not any(k == "Date" for k, _ in headers):
            headers.append(("Date", h.date_time_string()))
        headers.sort(key=lambda kv: kv[0])
        no_body = self.method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
        chunked_in = resp.chunked or length is None or not length.isdigit()
        if no_body:
            mode = "none"
            if length is not None and length.isdigit() and resp.status not in (204, 304):
                headers.append(("Content-Length", length))
        elif not chunked_in:
            mode = "length"
            headers.append(("Content-Length", length))
        elif h.request_version == "HTTP/1.0":
            mode = "close"
            h.close_connection = True
        else:
            mode = "chunked"
            headers.append(("Transfer-Encoding", "chunked"))
        h.started = True
        h.send_response_only(resp.status)
        for k, v in headers:
            h.send_header(k, v)
        if h.close_connection:
            h.send_header("Connection", "close")
        h.end_headers()
        if mode == "none":
            return
        while True:
            try:
                data = resp.read1(PIECE)
            except (http.client.HTTPException, OSError, ValueError):
                data = None
            if data is None or (not data and mode == "length" and resp.length):
                # The backend broke off (or said more than it gave): Go aborts the handler, and
                # the client sees its connection cut.
                return h.abort()
            if not data:
                break
            if mode == "chunked":
                h.chunk(data)
            else:
                h.wfile.write(data)
        if mode == "chunked":
            h.end_chunks()
