#!/usr/bin/env python3
"""kubelet.py - the kubelet of dtrain's stand-in Kubernetes (tests only; no real cluster here).

Runs the pods that the stand-in API server (apiserver.py, started with this by standin.py)
assigns to node `standin-node` as local processes, each pod in a network namespace of its own
on a Linux bridge, and reports their status back as a real kubelet does:

  /usr/bin/python3 kubelet.py --server https://GATEWAY:PORT --ca DIR/ca.crt \
      --token-file DIR/token --sa-token-file DIR/sa-token --dir DIR \
      [--prefix P] [--gateway GATEWAY] [--image NAME=BINDIR ...]

Needs root (ip netns, veth, bind mounts). Standard library only. Prints `kubelet ready` on stdout
once the bridge is up and the first pod watch is established; SIGTERM/SIGINT kill every pod and
remove every namespace, link and /etc/netns entry it made (named with P), then exit 0.

What a pod gets
- network: namespace P-<n>, veth P<n>a on bridge P-br (GATEWAY/16) with eth0 = 10.99.x.y/16 inside,
  default route via GATEWAY. Ports are not forwarded anywhere: pods reach each other, and the host
  reaches them, by IP over the bridge. There is no kube-proxy: Service cluster IPs lead nowhere.
- names: /etc/netns/P-<n>/hosts (bind-mounted over /etc/hosts by `ip netns exec`) lists localhost,
  the pod itself, `kubernetes[.default[.svc[.cluster.local]]]` = GATEWAY, and for each Service with
  a selector the IP of the first (by name) Running pod it selects (headless or not, as there is no
  kube-proxy), plus hostname.subdomain records of pods that set both. resolv.conf names no server
  (127.0.0.1, which fails at once) so that lookups of other names fail fast instead of hanging.
- processes: `ip netns exec P-<n> python3 kubelet.py --exec-container SPEC`, which sets the hostname
  (own UTS namespace), bind-mounts the volumes in the private mount namespace `ip netns exec`
  makes (mount points missing on the host are created there as empty dirs/files: acceptable for
  a test stand-in) and execs container.command + args with exactly the container's environment.
  Each container is its own process group; its stdout+stderr go to DIR/logs/NS/POD/CONTAINER.log.

Accepted and ignored (no effect here): cpu/memory/storage resources, nodeSelector, affinity,
tolerations, imagePullSecrets, imagePullPolicy, securityContext, probes (a running container is
ready), lifecycle hooks, ports, dnsPolicy/dnsConfig, hostNetwork. Exception: a pod asking for an
extended resource (nvidia.com/gpu, ...) stays Pending/Unschedulable, as on a node without it.

Other differences from a real kubelet: no images (an image's entrypoint is known only for --image
images: the binary named like the image); a command that cannot be run ends the container with
127 and reason StartError (containerd says 128); SIGTERM goes to the container's whole process
group (not only its first process); only the KUBERNETES_* service variables are set (no
variables for other Services: their cluster IPs would lead nowhere); a Service without a Running
pod has no name at all (a real ClusterIP Service's name resolves to its cluster IP); init
containers with restartPolicy Always (sidecars) run as plain init containers; secret and
configMap volumes are written once, when the pod starts; no Node object, events or probes; a
pod that was running when the kubelet restarted starts over.
"""
import argparse
import atexit
import base64
import ctypes
import errno
import heapq
import http.client
import ipaddress
import json
import math
import os
import queue
import re
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse

NODE_NAME = "standin-node"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SA_VOLUME = "/service-account"   # key of the automounted token volume (not a valid volume name)
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# A real kubelet passes none of its own environment to containers, nor does this one, except
# these: tests run sanitizer (ASan/UBSan) builds of dtrain inside pods, which need them.
KEPT_ENV = ("LD_LIBRARY_PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS",
            "MSAN_OPTIONS")
KEPT_ENV_PREFIXES = ("OPENBLAS_",)
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 10.0
BACKOFF_RESET = 2 * BACKOFF_MAX   # a container that ran this long restarts after BACKOFF_FIRST
TERMINAL = ("Succeeded", "Failed")
DEFAULT_GRACE = 30
MIN_GRACE = 2   # the real kubelet's minimumGracePeriodInSeconds (a force delete kills at once)


def log(msg):
    sys.stderr.write(f"kubelet {time.strftime('%H:%M:%S')} {msg}\n")
    sys.stderr.flush()


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def d(x):
    """x if it is a dict, else {}: pods from tests may have odd or missing fields."""
    return x if isinstance(x, dict) else {}


def l(x):
    return x if isinstance(x, list) else []


def safe_name(s):
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(s)) or "_"


def safe_relpath(p):
    """A relative path that stays inside its directory (subPath, volume item paths)."""
    p = str(p)
    parts = p.split("/")
    if p.startswith("/") or ".." in parts:
        raise SetupError("CreateContainerConfigError", f"invalid path {p!r}: must be relative, without '..'")
    return os.path.normpath(p)


class SetupError(Exception):
    """A container cannot be started yet: reported as its waiting reason (retried if retry)."""

    def __init__(self, reason, message, retry=True):
        super().__init__(message)
        self.reason, self.message, self.retry = reason, message, retry


# ---- inside the pod: the last step before the container's command ------------------------

MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384
CLONE_NEWUTS = 0x04000000
PR_SET_PDEATHSIG = 1


def exec_container(spec_path):
    """`ip netns exec P-n python3 -I -S kubelet.py --exec-container SPEC`: runs in the pod's network
    namespace and in the private mount namespace `ip netns exec` made. Never returns: execs the
    command, or writes {exitCode, reason, message} to the spec's error_file and exits."""
    with open(spec_path) as f:
        spec = json.load(f)
    libc = ctypes.CDLL(None, use_errno=True)
    # die with the kubelet even when it is SIGKILLed (its next start removes the rest)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != spec["kubelet_pid"]:
        os._exit(137)
    try:
        if libc.unshare(CLONE_NEWUTS) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUTS): " + os.strerror(ctypes.get_errno()))
        socket.sethostname(spec["hostname"])
        for m in spec["mounts"]:
            bind_mount(libc, m["source"], m["target"], m["readOnly"])
        os.makedirs(spec["workingDir"], exist_ok=True)
        os.chdir(spec["workingDir"])
    except OSError as e:
        exec_failed(spec, 128, f"failed to create container: {e}")
    # Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec
    for s in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(s, signal.SIG_DFL)
    argv = spec["argv"]
    try:
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as e:
        if e.errno == errno.ENOENT and "/" not in argv[0]:
            exec_failed(spec, 127, f'exec: "{argv[0]}": executable file not found in $PATH')
        if e.errno == errno.ENOENT:
            exec_failed(spec, 127, f'exec: "{argv[0]}": stat {argv[0]}: no such file or directory')
        code = 126 if e.errno in (errno.EACCES, errno.ENOEXEC, errno.EISDIR) else 127
        exec_failed(spec, code, f'exec: "{argv[0]}": {os.strerror(e.errno or 0).lower()}')


def exec_failed(spec, code, message):
    sys.stderr.write(f"standin kubelet: {message}\n")   # into the container's log
    try:
        with open(spec["error_file"], "w") as f:
            json.dump({"exitCode": code, "reason": "StartError", "message": message}, f)
    finally:
        os._exit(code)


def bind_mount(libc, source, target, read_only):
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
        if not os.path.exists(target):
            open(target, "a").close()

    def mount(src, flags):
        if libc.mount(src, os.fsencode(target), None, ctypes.c_ulong(flags), None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")

    mount(os.fsencode(source), MS_BIND | MS_REC)
    if read_only:
        mount(None, MS_REMOUNT | MS_BIND | MS_RDONLY)


# ---- the API server ------------------------------------------------------------------------

class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {' '.join(body.split())}")   # one log line
        self.status = status


class Api:
    """HTTPS to the API server, one connection per request (each thread makes its own)."""

    def __init__(self, server, ca, token):
        u = urllib.parse.urlsplit(server)
        self.host, self.port = u.hostname, u.port or 443
        self.ctx = ssl.create_default_context(cafile=ca)
        self._token = token

    def _headers(self):
        return {"Authorization": "Bearer " + self._token, "Accept": "application/json"}

    def open(self, method, path, body=None, content_type="application/json", timeout=15):
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)
        headers = self._headers()
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            conn.request(method, path, body=data, headers=headers)
            return conn, conn.getresponse()
        except BaseException:
            conn.close()
            raise

    def request(self, method, path, body=None, content_type="application/json"):
        conn, resp = self.open(method, path, body, content_type)
        try:
            raw = resp.read()
        finally:
            conn.close()
        if resp.status >= 300:
            raise ApiError(resp.status, raw.decode(errors="replace")[:300])
        return json.loads(raw) if raw.strip() else {}

    def get(self, path):
        return self.request("GET", path)


def q(s):
    return urllib.parse.quote(str(s), safe="")


class Watcher(threading.Thread):
    """List, then watch one resource; every list and event goes to put(). Resumes a dropped
    watch from the last resourceVersion seen; relists on 410 Gone."""

    def __init__(self, api, resource, path, put, on_established=None):
        super().__init__(daemon=True, name="watch-" + resource)
        self.api, self.resource, self.path, self.put = api, resource, path, put
        self.on_established = on_established

    def run(self):
        rv, delay = None, 1.0
        while True:
            try:
                if rv is None:
                    lst = self.api.get(self.path)
                    rv = str(d(lst.get("metadata")).get("resourceVersion") or "0")
                    self.put(("list", self.resource, l(lst.get("items"))))
                began = time.monotonic()
                rv = self.watch(rv)
                if time.monotonic() - began < 1.0:
                    time.sleep(1.0)   # a server that ends watches at once is not asked in a loop
                delay = 1.0
            except Exception as e:  # noqa: BLE001 - the watch goes on whatever happened
                log(f"watch {self.resource}: {e}; again in {delay:g}s")
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def watch(self, rv):
        """Returns the resourceVersion to resume from, or None to relist."""
        sep = "&" if "?" in self.path else "?"
        path = f"{self.path}{sep}watch=1&resourceVersion={q(rv)}&allowWatchBookmarks=true&timeoutSeconds=300"
        conn, resp = self.api.open("GET", path, timeout=330)
        try:
            if resp.status == 410:
                return None
            if resp.status != 200:
                raise ApiError(resp.status, resp.read().decode(errors="replace")[:300])
            if self.on_established:
                self.on_established()
                self.on_established = None
            while True:
                try:
                    line = resp.readline()
                except (TimeoutError, socket.timeout):
                    return rv   # idle for long: watch again
                if not line:
                    return rv   # the server ended the watch
                if not line.strip():
                    continue
                ev = json.loads(line)
                typ, obj = ev.get("type"), d(ev.get("object"))
                if typ == "ERROR":
                    log(f"watch {self.resource}: error event {obj.get('code')} {obj.get('message', '')}")
                    return None if obj.get("code") == 410 else rv
                rv = str(d(obj.get("metadata")).get("resourceVersion") or rv)
                if typ in ("ADDED", "MODIFIED", "DELETED"):
                    self.put(("event", self.resource, typ, obj))
        finally:
            conn.close()


# ---- the network ---------------------------------------------------------------------------

def run_ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True,
                       env={"PATH": SYSTEM_PATH}, stdin=subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


class Network:
    """The bridge, the pods' namespaces and veths, their /etc/netns files and addresses."""

    def __init__(self, prefix, gateway):
        self.prefix = prefix
        self.gateway = ipaddress.IPv4Address(gateway)
        self.net = ipaddress.IPv4Network(f"{gateway}/16", strict=False)
        self.bridge = f"{prefix}-br"
        self.in_use = set()
        self.last = int(self.gateway)
        self.made_etc_netns = False

    def ns_name(self, n):
        return f"{self.prefix}-{n}"

    def etc_dir(self, n):
        return f"/etc/netns/{self.ns_name(n)}"

    def setup(self):
        self.remove_leftovers()
        run_ip("link", "add", self.bridge, "type", "bridge")
        # A fixed MAC (locally administered, from the gateway's address), as Docker and the CNI
        # bridge plugin give theirs: a bridge left to itself takes the lowest MAC of its ports,
        # so deleting the pod whose veth had it changes the gateway's MAC under the other pods,
        # whose ARP entries keep the old one for up to a minute (traffic to the API server is
        # lost meanwhile: a request gets no answer).
        run_ip("link", "set", self.bridge, "address", "02:42:" + ":".join("%02x" % b for b in self.gateway.packed))
        run_ip("addr", "add", f"{self.gateway}/{self.net.prefixlen}", "dev", self.bridge)
        run_ip("link", "set", self.bridge, "up")
        if not os.path.isdir("/etc/netns"):
            os.makedirs("/etc/netns")
            self.made_etc_netns = True
        log(f"bridge {self.bridge} up with {self.gateway}/{self.net.prefixlen}")

    def allocate(self):
        """(n, ip): round robin over the /16 (as host-local IPAM does) so that a freed address is
        not reused at once; n (the address's offset) names the namespace and the veth."""
        lo, hi = int(self.net.network_address) + 1, int(self.net.broadcast_address) - 1
        cand = self.last
        for _ in range(hi - lo + 1):
            cand = cand + 1 if cand < hi else lo
            if cand != int(self.gateway) and cand not in self.in_use:
                self.in_use.add(cand)
                self.last = cand
                return cand - int(self.net.network_address), str(ipaddress.IPv4Address(cand))
        raise RuntimeError("no free pod address")

    def release(self, ip):
        self.in_use.discard(int(ipaddress.IPv4Address(ip)))

    def create(self, n, ip, resolv):
        ns, veth = self.ns_name(n), f"{self.prefix}{n}a"
        try:
            run_ip("netns", "add", ns)
            # the peer is made inside the namespace: no half-made pair is ever left in the root
            run_ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            run_ip("link", "set", veth, "master", self.bridge, "up")
            run_ip("-n", ns, "addr", "add", f"{ip}/{self.net.prefixlen}", "dev", "eth0")
            run_ip("-n", ns, "link", "set", "eth0", "up")
            run_ip("-n", ns, "link", "set", "lo", "up")
            run_ip("-n", ns, "route", "add", "default", "via", str(self.gateway))
            os.makedirs(self.etc_dir(n), exist_ok=True)
            with open(os.path.join(self.etc_dir(n), "hosts"), "w") as f:
                f.write(f"127.0.0.1\tlocalhost\n{ip}\t{ns}\n")
            with open(os.path.join(self.etc_dir(n), "resolv.conf"), "w") as f:
                f.write(resolv)
        except Exception:
            self.destroy(ns)
            raise

    def destroy(self, ns):
        """Kill whatever runs in namespace ns, delete it (its veth pair goes with it) and its
        /etc/netns dir."""
        for _ in range(50):
            pids = [int(x) for x in run_ip("netns", "pids", ns, check=False).split() if x.isdigit()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        run_ip("netns", "del", ns, check=False)
        m = re.fullmatch(re.escape(self.prefix) + r"-(\d+)", ns)
        if m:   # gone with the namespace once its last process is; at once this way
            run_ip("link", "del", f"{self.prefix}{m.group(1)}a", check=False)
        shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)

    def remove_leftovers(self):
        """Everything named with this prefix: what a previous run (or this one) left."""
        mine = re.compile(re.escape(self.prefix) + r"-\d+")
        for line in run_ip("netns", "list", check=False).splitlines():
            name = line.split(" ", 1)[0]
            if mine.fullmatch(name):
                log(f"removing namespace {name}")
                self.destroy(name)
        try:
            links = json.loads(run_ip("-j", "link", "show", check=False) or "[]")
        except ValueError:
            links = []
        veth = re.compile(re.escape(self.prefix) + r"\d+a")
        for link in links:
            if link.get("master") == self.bridge and veth.fullmatch(link.get("ifname", "")):
                run_ip("link", "del", link["ifname"], check=False)
        if any(link.get("ifname") == self.bridge for link in links):
            log(f"removing bridge {self.bridge}")
            run_ip("link", "del", self.bridge, check=False)
        if os.path.isdir("/etc/netns"):
            for name in os.listdir("/etc/netns"):
                if mine.fullmatch(name):
                    shutil.rmtree(os.path.join("/etc/netns", name), ignore_errors=True)

    def teardown(self):
        self.remove_leftovers()
        if self.made_etc_netns:
            try:
                os.rmdir("/etc/netns")   # only if empty: another user may have put something there
            except OSError:
                pass


def rewrite_in_place(path, text):
    """Same inode (r+, write, truncate), never a rename: the file is bind-mounted over /etc/hosts
    in the pod's running processes, and a bind mount stays on the inode it was made with."""
    try:
        f = open(path, "r+")
    except FileNotFoundError:
        f = open(path, "w")
    with f:
        f.write(text)
        f.truncate()


# ---- small Kubernetes helpers -------------------------------------------------------------

_QUANTITY = re.compile(r"([+-]?[0-9.]+)(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?")
_SUFFIX = {None: 1, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "P": 1e15, "E": 1e18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
           "Ei": 2**60}


def quantity(v):
    """A resource quantity ("500m", "2Gi", 1) as a number; 0 for what does not parse."""
    if isinstance(v, (int, float)):
        return float(v)
    m = _QUANTITY.fullmatch(str(v).strip())
    if not m:
        return 0.0
    try:
        num = float(m.group(1))
    except ValueError:
        return 0.0
    return num * 10 ** int(m.group(2)) if m.group(2) else num * _SUFFIX[m.group(3)]


_VAR_REF = re.compile(r"\$\$|\$\(([^)]*)\)")


def expand(s, env):
    """Kubernetes' $(VAR) expansion: a defined VAR is replaced, an undefined one is left as it
    is, and $$ is a literal $."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _VAR_REF.sub(sub, str(s))


def image_repo(image):
    """`dtrain`, `dtrain:latest`, `ghcr.io/x/dtrain:0.1`, `reg:5000/dtrain@sha256:...` -> dtrain."""
    return str(image).split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]


def item_mode(item, default):
    return item.get("mode") if isinstance(item.get("mode"), int) else default


def cluster_names(name, ns):
    """What a pod's resolver finds a Service (or hostname.subdomain) in namespace ns by."""
    return [f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local", f"{name}.{ns}"]


def extended_resources(spec):
    """Extended resources (a '/' in the name, outside kubernetes.io: nvidia.com/gpu, ...) that
    the pod's containers ask for."""
    found = set()
    for c in l(spec.get("containers")) + l(spec.get("initContainers")):
        res = d(d(c).get("resources"))
        for section in ("requests", "limits"):
            for name, v in d(res.get(section)).items():
                if "/" in name and not name.split("/")[0].endswith("kubernetes.io") and quantity(v) > 0:
                    found.add(name)
    return sorted(found)


def node_capacity(resource):
    if resource == "cpu":
        return float(os.cpu_count() or 1)
    if resource == "memory":
        try:
            with open("/proc/meminfo") as f:
                return float(f.readline().split()[1]) * 1024
        except (OSError, IndexError, ValueError):
            return 0.0
    if resource == "ephemeral-storage":
        st = os.statvfs("/")
        return float(st.f_blocks * st.f_frsize)
    return 0.0


# ---- pods and containers ------------------------------------------------------------------

class Ctr:
    """One container of a pod: its process while it runs, and what its status says."""

    def __init__(self, spec, init, after_init):
        self.spec = d(spec)
        self.name = str(self.spec.get("name") or "unnamed")
        self.init = init
        reason = "PodInitializing" if init or after_init else "ContainerCreating"
        self.state = {"waiting": {"reason": reason}}
        self.last_state = {}
        self.proc = None          # subprocess.Popen while it runs
        self.pid = None           # of the last process: the containerID
        self.ever_started = False
        self.started_mono = 0.0
        self.started_at = None
        self.restarts = 0
        self.done = False         # terminated, not to be restarted
        self.exit_code = None     # of the last process
        self.backoff = 0.0
        self.next_start = 0.0     # monotonic time before which it is not (re)started
        self.config_retry = 0.0

    def waiting(self, reason, message=None):
        w = {"reason": reason}
        if message:
            w["message"] = message
        self.state = {"waiting": w}

    def status(self):
        running = self.proc is not None
        st = {"name": self.name, "image": str(self.spec.get("image") or ""), "imageID": "",
              "ready": running if not self.init else (self.done and self.exit_code == 0),
              "started": running, "restartCount": self.restarts,
              "state": self.state, "lastState": self.last_state}
        if self.pid:
            st["containerID"] = f"standin://{self.pid}"
        return st


class Pod:
    def __init__(self, obj):
        self.obj = obj
        meta, spec = d(obj.get("metadata")), d(obj.get("spec"))
        self.uid = str(meta.get("uid") or "")
        self.name = str(meta.get("name") or "")
        self.ns = str(meta.get("namespace") or "default")
        self.key = f"{self.ns}/{self.name}"
        inits = l(spec.get("initContainers"))
        self.init = [Ctr(c, True, False) for c in inits]
        self.ctrs = [Ctr(c, False, bool(inits)) for c in l(spec.get("containers"))]
        policy = spec.get("restartPolicy")
        self.policy = policy if policy in ("Always", "OnFailure", "Never") else "Always"
        self.n = self.ip = None
        self.sandbox = False
        self.volumes = None       # volume name -> host path, once prepared
        self.readonly_volumes = set()
        self.phase = "Pending"
        self.start_time = None
        self.conds = {}
        self.unschedulable = None
        self.terminating = self.killed = self.finalized = self.gone = False
        self.kill_at = 0.0
        self.retry = 0.0
        self.dirty = False
        self.sent = None
        self.hosts_text = None

    @property
    def spec(self):
        return d(self.obj.get("spec"))

    @property
    def meta(self):
        return d(self.obj.get("metadata"))

    @property
    def labels(self):
        return d(self.meta.get("labels"))

    @property
    def all(self):
        return self.init + self.ctrs

    @property
    def hostname(self):
        return str(self.spec.get("hostname") or self.name)[:63]

    @property
    def subdomain(self):
        return str(self.spec.get("subdomain") or "")

    def automount(self):
        return self.spec.get("automountServiceAccountToken") is not False

    def set_cond(self, typ, ok, reason=None, message=None, since=None):
        status = "True" if ok else "False"
        old = self.conds.get(typ)
        since = old["lastTransitionTime"] if old and old["status"] == status else (since or now_rfc3339())
        c = {"type": typ, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
        if reason:
            c["reason"] = reason
        if message:
            c["message"] = message
        self.conds[typ] = c


class Kubelet:
    def __init__(self, args):
        self.args = args
        self.dir = os.path.abspath(args.dir)
        self.node = args.node_name
        with open(args.token_file) as f:
            token = f.read().strip()
        with open(args.sa_token_file, "rb") as f:
            self.sa_token = f.read().strip()   # as a real token file: no newline
        with open(args.ca, "rb") as f:
            self.ca_bytes = f.read()
        self.api = Api(args.server, args.ca, token)
        self.api_port = str(urllib.parse.urlsplit(args.server).port or 443)
        self.images = {}
        for spec in args.image:
            name, _, bindir = spec.partition("=")
            self.images[name] = os.path.abspath(bindir)
        self.net = Network(args.prefix, args.gateway)
        self.gw = str(self.net.gateway)
        self.pods = {}            # uid -> Pod
        self.services = {}        # (ns, name) -> Service object
        self.last_service_ip = {}  # (ns, name) -> the last pod IP a ClusterIP Service led to
        self.events = queue.Queue()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.timers = []          # heap of (monotonic time, seq, pod uid)
        self.timer_seq = 0
        self.exits = {}           # pidfd -> (Pod, Ctr)
        self.dns_dirty = False
        self.stopping = False
        self.cleaned = False
        self.ready_printed = False

    # -- the loop: one thread runs the pods; the watch threads only queue what they see --------

    def put(self, event):
        self.events.put(event)
        self.wake()

    def wake(self):
        try:
            os.write(self.wake_w, b"x")
        except BlockingIOError:
            pass   # the pipe is full: the loop wakes anyway

    def ready(self):
        if not self.ready_printed:
            self.ready_printed = True
            log("pod watch established")
            print("kubelet ready", flush=True)

    def run(self):
        self.net.setup()
        pods_path = "/api/v1/pods?fieldSelector=" + q(f"spec.nodeName={self.node}")
        Watcher(self.api, "pods", pods_path, self.put, self.ready).start()
        Watcher(self.api, "services", "/api/v1/services", self.put).start()
        while not self.stopping:
            try:
                self.loop_once()
            except Exception:  # noqa: BLE001 - a bug here must not take every pod down with it
                log(f"main loop: {traceback.format_exc()}")
                time.sleep(0.5)
        log("stopping")

    def loop_once(self):
        timeout = 5.0
        if self.timers:
            timeout = min(timeout, max(0.0, self.timers[0][0] - time.monotonic()))
        poller = select.poll()
        for fd in (self.wake_r, *self.exits):
            poller.register(fd, select.POLLIN)
        for fd, _ in poller.poll(timeout * 1000):
            if fd == self.wake_r:
                try:
                    os.read(self.wake_r, 4096)
                except BlockingIOError:
                    pass
            elif fd in self.exits:
                self.on_exit(fd)
        while not self.stopping:
            try:
                ev = self.events.get_nowait()
            except queue.Empty:
                break
            try:
                self.handle_event(ev)
            except Exception:  # noqa: BLE001 - an odd object must not stop the kubelet
                log(f"event {ev[:2]}: {traceback.format_exc()}")
        self.run_timers()
        self.flush()

    def add_timer(self, delay, p):
        self.timer_seq += 1
        heapq.heappush(self.timers, (time.monotonic() + max(0.0, delay), self.timer_seq, p.uid))

    def run_timers(self):
        now, due = time.monotonic(), []
        while self.timers and self.timers[0][0] <= now:
            uid = heapq.heappop(self.timers)[2]
            if uid not in due:
                due.append(uid)
        for uid in due:
            if uid in self.pods:
                self.sync(self.pods[uid])

    def flush(self):
        for p in list(self.pods.values()):
            if p.dirty:
                self.push_status(p)
        if self.dns_dirty:
            self.write_dns()

    # -- what the watches say ------------------------------------------------------------------

    def handle_event(self, ev):
        if ev[0] == "list" and ev[1] == "pods":
            self.on_pod_list(ev[2])
        elif ev[0] == "event" and ev[1] == "pods":
            self.on_pod(ev[2], ev[3])
        elif ev[0] == "list" and ev[1] == "services":
            self.services = {}
            for s in ev[2]:
                self.on_service("ADDED", s)
            self.dns_dirty = True
        elif ev[0] == "event" and ev[1] == "services":
            self.on_service(ev[2], ev[3])

    def on_service(self, typ, svc):
        meta = d(svc.get("metadata"))
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        if typ == "DELETED":
            self.services.pop(key, None)
        else:
            self.services[key] = svc
        self.dns_dirty = True

    def on_pod_list(self, items):
        seen = set()
        for obj in items:
            obj = d(obj)
            seen.add(d(obj.get("metadata")).get("uid"))
            try:
                self.on_pod("ADDED", obj)
            except Exception:  # noqa: BLE001 - the other pods of the list still count
                log(f"pod {d(obj.get('metadata')).get('name')}: {traceback.format_exc()}")
        for uid, p in list(self.pods.items()):
            if uid not in seen:
                self.forget(p, "no longer listed")

    def on_pod(self, typ, obj):
        uid = d(obj.get("metadata")).get("uid")
        p = self.pods.get(uid)
        if typ == "DELETED":
            if p:
                self.forget(p, "deleted")
            return
        if p is None:
            if not uid:
                log(f"ignoring a pod without uid: {d(obj.get('metadata')).get('name')}")
            elif d(obj.get("spec")).get("nodeName") != self.node:
                log(f"ignoring pod {d(obj.get('metadata')).get('name')}: not on {self.node}")
            else:
                self.admit(obj)
            return
        old_labels = p.labels
        p.obj = obj
        if p.labels != old_labels:
            self.dns_dirty = True
        if p.meta.get("deletionTimestamp") and not p.terminating:
            self.begin_termination(p)

    def admit(self, obj):
        p = Pod(obj)
        self.pods[p.uid] = p
        status = d(obj.get("status"))
        for c in l(status.get("conditions")):
            if d(c).get("type") == "PodScheduled" and d(c).get("lastTransitionTime"):
                p.set_cond("PodScheduled", True, since=c["lastTransitionTime"])
        if status.get("phase") in TERMINAL:
            # ended before this kubelet started: nothing to run
            p.phase = status["phase"]
            log(f"pod {p.key}: already {p.phase}")
            if p.meta.get("deletionTimestamp"):
                self.begin_termination(p)
            return
        p.start_time = status.get("startTime") or now_rfc3339()
        log(f"pod {p.key} ({p.uid}) admitted, restartPolicy {p.policy}")
        ext = extended_resources(p.spec)
        if ext:
            # the default scheduler's words, on a node without them
            p.unschedulable = f"0/1 nodes are available: {', '.join(f'1 Insufficient {r}' for r in ext)}."
            log(f"pod {p.key}: unschedulable: {p.unschedulable}")
            p.set_cond("PodScheduled", False, "Unschedulable", p.unschedulable)
            p.dirty = True
        if p.meta.get("deletionTimestamp"):
            self.begin_termination(p)
        else:
            self.sync(p)

    # -- running a pod -------------------------------------------------------------------------

    def sync(self, p):
        """Take pod p one step further: idempotent, called on every event that concerns it."""
        if p.gone:
            return
        try:
            self.sync_pod(p)
        except Exception as e:  # noqa: BLE001 - one odd pod must not stop the others
            p.retry = min(max(p.retry * 2, 1.0), 10.0)
            log(f"pod {p.key}: {e}; again in {p.retry:g}s\n{traceback.format_exc()}")
            self.add_timer(p.retry, p)

    def sync_pod(self, p):
        if p.terminating:
            self.sync_termination(p)
            return
        if p.phase in TERMINAL or p.unschedulable:
            return
        if not p.sandbox:
            self.create_sandbox(p)
        if p.volumes is None and not self.prepare_volumes(p):
            return
        # init containers one at a time, in order, each to completion; then all containers
        pending_init = next((c for c in p.init if not (c.done and c.exit_code == 0)), None)
        if pending_init is None:
            for c in p.ctrs:
                if c.proc is None and not c.done:
                    self.maybe_start(p, c)
        elif pending_init.proc is None and not pending_init.done:
            self.maybe_start(p, pending_init)
        self.update_phase(p)
        if p.phase in TERMINAL:
            self.push_status(p)        # clients see the end first
            self.teardown_sandbox(p)   # as a real kubelet does once a pod is done

    def create_sandbox(self, p):
        n, ip = self.net.allocate()
        resolv = (f"search {p.ns}.svc.cluster.local svc.cluster.local cluster.local\n"
                  "nameserver 127.0.0.1\noptions ndots:5\n")
        try:
            self.net.create(n, ip, resolv)
        except Exception as e:
            self.net.release(ip)
            for c in p.all:
                c.waiting("ContainerCreating", f"failed to create pod sandbox: {e}")
            p.dirty = True
            raise
        p.n, p.ip, p.sandbox = n, ip, True
        log(f"pod {p.key}: sandbox {self.net.ns_name(n)}, ip {ip}, hostname {p.hostname}")
        self.claim_log_dir(p)
        self.write_dns()   # its hosts file must be complete before a container starts
        p.dirty = True

    def teardown_sandbox(self, p):
        if p.sandbox:
            p.sandbox = False
            log(f"pod {p.key}: removing sandbox {self.net.ns_name(p.n)}")
            self.net.destroy(self.net.ns_name(p.n))
            self.dns_dirty = True

    def pod_dir(self, p):
        return os.path.join(self.dir, "pods", safe_name(p.uid))

    def log_dir(self, p):
        return os.path.join(self.dir, "logs", safe_name(p.ns), safe_name(p.name))

    def claim_log_dir(self, p):
        """Logs of an earlier pod of the same name (another uid) are removed, as its pod was."""
        ld = self.log_dir(p)
        os.makedirs(ld, exist_ok=True)
        marker = os.path.join(ld, ".uid")
        try:
            with open(marker) as f:
                owner = f.read().strip()
        except FileNotFoundError:
            owner = None
        if owner and owner != p.uid:
            for name in os.listdir(ld):
                if name.endswith(".log"):
                    os.unlink(os.path.join(ld, name))
        with open(marker, "w") as f:
            f.write(p.uid)

    def maybe_start(self, p, c):
        delay = c.next_start - time.monotonic()
        if delay > 0:
            self.add_timer(delay, p)
            return
        try:
            self.start_container(p, c)
        except SetupError as e:
            c.waiting(e.reason, e.message)
            p.dirty = True
            log(f"pod {p.key}: container {c.name}: {e.reason}: {e.message}")
            if e.retry:
                c.config_retry = min(max(c.config_retry * 2, 1.0), 10.0)
                c.next_start = time.monotonic() + c.config_retry
                self.add_timer(c.config_retry, p)

    def start_container(self, p, c):
        raw = self.command(c)
        env = self.container_env(p, c)
        argv = [expand(a, env) for a in raw]
        mounts = self.container_mounts(p, c, env)
        run_dir = os.path.join(self.pod_dir(p), "run")
        os.makedirs(run_dir, mode=0o700, exist_ok=True)
        spec_file = os.path.join(run_dir, safe_name(c.name) + ".json")
        error_file = os.path.join(run_dir, safe_name(c.name) + ".error")
        spec = {"argv": argv, "env": env, "hostname": p.hostname, "mounts": mounts,
                "workingDir": str(c.spec.get("workingDir") or "/"), "kubelet_pid": os.getpid(),
                "error_file": error_file}
        fd = os.open(spec_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)   # holds secrets
        with os.fdopen(fd, "w") as f:
            json.dump(spec, f)
        if os.path.exists(error_file):
            os.unlink(error_file)
        restart = c.ever_started
        logf = self.open_log(p, c, rotate=restart)
        cmd = ["ip", "netns", "exec", self.net.ns_name(p.n), sys.executable, "-I", "-S",
               os.path.abspath(__file__), "--exec-container", spec_file]
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                    env={"PATH": SYSTEM_PATH}, start_new_session=True)
        except OSError as e:
            raise SetupError("RunContainerError", f"cannot start: {e}") from e
        finally:
            logf.close()
        fd = os.pidfd_open(proc.pid)
        self.exits[fd] = (p, c)
        if restart:
            c.restarts += 1
        c.proc, c.pid, c.ever_started, c.config_retry = proc, proc.pid, True, 0.0
        c.started_mono, c.started_at = time.monotonic(), now_rfc3339()
        c.state = {"running": {"startedAt": c.started_at}}
        p.dirty = True
        # the command before $(VAR) expansion: values from secrets stay out of the log
        log(f"pod {p.key}: started container {c.name}, pid {proc.pid}, restarts {c.restarts}: "
            f"{' '.join(raw)[:200]}")

    def open_log(self, p, c, rotate):
        ld = self.log_dir(p)
        os.makedirs(ld, exist_ok=True)
        path = os.path.join(ld, safe_name(c.name) + ".log")
        if rotate and os.path.exists(path):   # what `kubectl logs --previous` shows
            os.replace(path, os.path.join(ld, safe_name(c.name) + ".previous.log"))
        return open(path, "ab")

    def on_exit(self, fd):
        p, c = self.exits.pop(fd)
        os.close(fd)
        try:   # what is left of its process group goes with it, as with a container runtime
            os.killpg(c.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        rc = c.proc.wait()
        c.proc = None
        code = rc if rc >= 0 else 128 - rc
        if p.gone:
            return
        ran = time.monotonic() - c.started_mono
        term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": c.started_at, "finishedAt": now_rfc3339(),
                "containerID": f"standin://{c.pid}"}
        err = self.read_start_error(p, c)
        if err:
            term["reason"], term["message"] = "StartError", err
        c.exit_code = code
        log(f"pod {p.key}: container {c.name} (pid {c.pid}) exited {code} after {ran:.1f}s"
            + (f": {err}" if err else ""))
        if self.should_restart(p, c, code):
            first = c.backoff == 0 or ran >= BACKOFF_RESET
            c.backoff = BACKOFF_FIRST if first else min(c.backoff * 2, BACKOFF_MAX)
            c.next_start = time.monotonic() + c.backoff
            c.last_state = {"terminated": term}
            if err:
                c.waiting("RunContainerError", err)
            else:
                c.waiting("CrashLoopBackOff", f"back-off {c.backoff:g}s restarting failed "
                          f"container={c.name} pod={p.name}_{p.ns}({p.uid})")
            self.add_timer(c.backoff, p)
        else:
            c.done = True
            c.state = {"terminated": term}
        p.dirty = True
        self.sync(p)

    def read_start_error(self, p, c):
        path = os.path.join(self.pod_dir(p), "run", safe_name(c.name) + ".error")
        try:
            with open(path) as f:
                return str(json.load(f).get("message") or "start error")
        except (OSError, ValueError, AttributeError):
            return None

    def should_restart(self, p, c, code):
        if p.terminating or p.policy == "Never":
            return False
        if c.init:   # init containers are retried on failure only, whatever the policy
            return code != 0
        return p.policy == "Always" or code != 0

    def update_phase(self, p):
        init_failed = [c.name for c in p.init if c.done and c.exit_code != 0]
        init_pending = [c.name for c in p.init if not (c.done and c.exit_code == 0)]
        if init_failed:
            phase = "Failed"
        elif init_pending:
            phase = "Pending"
        else:
            phase = self.containers_phase(p)
        if phase != p.phase:
            log(f"pod {p.key}: phase {p.phase} -> {phase}")
            p.phase = phase
            self.dns_dirty = True
        p.set_cond("PodScheduled", True)
        if init_pending:
            p.set_cond("Initialized", False, "ContainersNotInitialized",
                       f"containers with incomplete status: [{' '.join(init_pending)}]")
        else:
            p.set_cond("Initialized", True)
        unready = [c.name for c in p.ctrs if c.proc is None]
        for typ in ("ContainersReady", "Ready"):
            if phase in TERMINAL:
                p.set_cond(typ, False, "PodCompleted")
            elif unready or not p.ctrs:
                p.set_cond(typ, False, "ContainersNotReady",
                           f"containers with unready status: [{' '.join(unready)}]")
            else:
                p.set_cond(typ, True)
        p.dirty = True

    def containers_phase(self, p):
        """The real kubelet's getPhase, for the app containers."""
        running = waiting = stopped = succeeded = 0
        for c in p.ctrs:
            if c.proc is not None:
                running += 1
            elif "terminated" in c.state:
                stopped += 1
                succeeded += c.state["terminated"]["exitCode"] == 0
            elif "terminated" in c.last_state:   # in back-off before a restart
                stopped += 1
            else:
                waiting += 1
        if waiting or not (running or stopped):
            return "Pending"
        if running:
            return "Running"
        if p.policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        return "Failed" if p.policy == "Never" else "Running"

    # -- the command and the environment ------------------------------------------------------

    def command(self, c):
        """container.command + args; without a command, the image's entrypoint, known only for
        --image images: the binary named like the image in its BINDIR."""
        image = str(c.spec.get("image") or "")
        cmd = [str(x) for x in l(c.spec.get("command"))]
        args = [str(x) for x in l(c.spec.get("args"))]
        if not cmd:
            repo = image_repo(image)
            bindir = self.images.get(repo)
            if bindir and os.access(os.path.join(bindir, repo), os.X_OK):
                cmd = [repo]
            else:
                raise SetupError("CreateContainerError",
                                 "no command specified: the stand-in kubelet knows no entrypoint of image "
                                 f'"{image}" '
                                 "(only --image images have one); set the container's command", retry=False)
        return cmd + args

    def base_env(self, p, c):
        bindir = self.images.get(image_repo(c.spec.get("image") or ""))
        host_path = os.environ.get("PATH", SYSTEM_PATH)
        env = {"PATH": f"{bindir}:{host_path}" if bindir else host_path, "HOME": "/root",
               "HOSTNAME": p.hostname}
        for k, v in os.environ.items():
            if k in KEPT_ENV or k.startswith(KEPT_ENV_PREFIXES):
                env[k] = v
        gw, port = self.gw, self.api_port
        env.update({"KUBERNETES_SERVICE_HOST": gw, "KUBERNETES_SERVICE_PORT": port,
                    "KUBERNETES_SERVICE_PORT_HTTPS": port, "KUBERNETES_PORT": f"tcp://{gw}:{port}",
                    f"KUBERNETES_PORT_{port}_TCP": f"tcp://{gw}:{port}",
                    f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
                    f"KUBERNETES_PORT_{port}_TCP_PORT": port,
                    f"KUBERNETES_PORT_{port}_TCP_ADDR": gw})
        return env

    def container_env(self, p, c):
        env = self.base_env(p, c)
        cache = {}
        for src in l(c.spec.get("envFrom")):
            src = d(src)
            prefix = str(src.get("prefix") or "")
            for kind, ref in (("configmaps", src.get("configMapRef")), ("secrets", src.get("secretRef"))):
                if isinstance(ref, dict):
                    data = self.ref_data(p.ns, kind, ref.get("name"), ref.get("optional"), cache) or {}
                    for k, v in data.items():
                        if "=" not in prefix + k:
                            env[prefix + k] = v.decode(errors="replace")
        for e in l(c.spec.get("env")):
            e = d(e)
            name = e.get("name")
            if not name:
                continue
            if isinstance(e.get("valueFrom"), dict):
                v = self.value_from(p, c, e["valueFrom"], cache)
                if v is None:   # an optional reference that is missing
                    continue
            else:
                v = expand(e.get("value") if e.get("value") is not None else "", env)
            env[str(name)] = v
        return env

    def value_from(self, p, c, src, cache):
        for kind, what, ref in (("secrets", "Secret", src.get("secretKeyRef")),
                                ("configmaps", "ConfigMap", src.get("configMapKeyRef"))):
            if isinstance(ref, dict):
                data = self.ref_data(p.ns, kind, ref.get("name"), ref.get("optional"), cache)
                if data is None:
                    return None
                key = ref.get("key")
                if key not in data:
                    if ref.get("optional"):
                        return None
                    raise SetupError("CreateContainerConfigError",
                                     f"couldn't find key {key} in {what} {p.ns}/{ref.get('name')}")
                return data[key].decode(errors="replace")
        if isinstance(src.get("fieldRef"), dict):
            return self.field_value(p, str(src["fieldRef"].get("fieldPath") or ""))
        if isinstance(src.get("resourceFieldRef"), dict):
            return self.resource_value(p, c, src["resourceFieldRef"])
        return ""

    def ref_data(self, ns, kind, name, optional, cache):
        """A Secret's (base64-decoded) or ConfigMap's data as {key: bytes}; None when it is
        missing and optional; SetupError when it is missing and not."""
        key = (kind, name)
        if key not in cache:
            try:
                cache[key] = self.api.get(f"/api/v1/namespaces/{q(ns)}/{kind}/{q(name)}")
            except (ApiError, OSError) as e:
                if getattr(e, "status", None) != 404:
                    raise SetupError("CreateContainerConfigError", f"cannot read {kind[:-1]} {name}: {e}") from e
                cache[key] = None
        obj = cache[key]
        if obj is None:
            if optional:
                return None
            raise SetupError("CreateContainerConfigError", f'{kind[:-1]} "{name}" not found')
        out = {}
        binary = obj.get("data") if kind == "secrets" else obj.get("binaryData")
        for k, v in d(binary).items():
            try:
                out[k] = base64.b64decode(str(v))
            except ValueError:
                out[k] = str(v).encode()
        texts = obj.get("stringData") if kind == "secrets" else obj.get("data")
        for k, v in d(texts).items():
            out[k] = str(v).encode()
        return out

    def field_value(self, p, path):
        m = re.fullmatch(r"metadata\.(labels|annotations)\[['\"](.*)['\"]\]", path)
        if m:
            return str(d(p.meta.get(m.group(1))).get(m.group(2), ""))
        if path in ("metadata.labels", "metadata.annotations"):
            items = d(p.meta.get(path.split(".")[1]))
            return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
        return str({"metadata.name": p.name, "metadata.namespace": p.ns, "metadata.uid": p.uid,
                    "spec.nodeName": self.node,
                    "spec.serviceAccountName": p.spec.get("serviceAccountName") or "default",
                    "status.podIP": p.ip or "", "status.podIPs": p.ip or "",
                    "status.hostIP": self.gw, "status.hostIPs": self.gw}.get(path, ""))

    def resource_value(self, p, c, ref):
        """limits.cpu, requests.memory, ...: the container's value, else for limits the node's
        capacity (as the real kubelet), divided by the divisor and rounded up."""
        target = c.spec
        if ref.get("containerName"):
            target = next((x.spec for x in p.all if x.name == ref["containerName"]), c.spec)
        section, _, res = str(ref.get("resource") or "").partition(".")
        v = d(d(target.get("resources")).get(section)).get(res)
        value = quantity(v) if v is not None else (node_capacity(res) if section == "limits" else 0.0)
        divisor = quantity(ref.get("divisor") or 1) or 1.0
        return str(math.ceil(value / divisor - 1e-9))

    # -- volumes ---------------------------------------------------------------------------

    def prepare_volumes(self, p):
        try:
            vols = {}
            for v in l(p.spec.get("volumes")):
                v = d(v)
                if v.get("name"):
                    vols[str(v["name"])] = self.prepare_volume(p, v)
            if p.automount():
                path = os.path.join(self.pod_dir(p), "volumes", "kube-api-access-standin")
                self.write_files(path, {"token": (self.sa_token, 0o644), "ca.crt": (self.ca_bytes, 0o644),
                                        "namespace": (p.ns.encode(), 0o644)})
                vols[SA_VOLUME] = path
        except SetupError as e:
            p.retry = min(max(p.retry * 2, 1.0), 10.0)
            for c in p.all:
                c.waiting("ContainerCreating", e.message)
            p.dirty = True
            log(f"pod {p.key}: volumes: {e.message}; again in {p.retry:g}s")
            self.add_timer(p.retry, p)
            return False
        p.volumes, p.retry = vols, 0.0
        return True

    def prepare_volume(self, p, v):
        name = str(v["name"])
        path = os.path.join(self.pod_dir(p), "volumes", safe_name(name))
        if isinstance(v.get("hostPath"), dict):
            return self.host_path(v["hostPath"], name)
        if isinstance(v.get("persistentVolumeClaim"), dict):
            claim = v["persistentVolumeClaim"].get("claimName") or name
            path = os.path.join(self.dir, "volumes", safe_name(p.ns), safe_name(claim))
            os.makedirs(path, exist_ok=True)
            return path
        if isinstance(v.get("emptyDir"), dict):   # medium: Memory is a plain dir too
            os.makedirs(path, exist_ok=True)
            return path
        files = None
        for key in ("secret", "configMap", "projected", "downwardAPI"):
            if isinstance(v.get(key), dict):
                files = self.volume_files(p, key, v[key], name)
                p.readonly_volumes.add(name)   # as a real kubelet mounts them
                break
        if files is None:
            log(f"pod {p.key}: volume {name}: unsupported type {sorted(set(v) - {'name'})}: an empty dir")
            files = {}
        self.write_files(path, files)
        return path

    def host_path(self, hp, name):
        path, typ = str(hp.get("path") or "/"), hp.get("type") or ""
        if not os.path.exists(path):
            if typ in ("", "DirectoryOrCreate"):
                os.makedirs(path, exist_ok=True)
            elif typ == "FileOrCreate":
                os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
                open(path, "a").close()
            else:
                raise SetupError("ContainerCreating", f'MountVolume.SetUp failed for volume "{name}" : '
                                 f"hostPath type check failed: {path} does not exist")
        return path

    def volume_files(self, p, kind, src, name):
        """{relative path: (bytes, mode)} of a secret, configMap, projected or downwardAPI volume."""
        mode = src.get("defaultMode") if isinstance(src.get("defaultMode"), int) else 0o644
        if kind == "secret":
            return self.keyed_files(p, "secrets", src.get("secretName"), src, mode, name)
        if kind == "configMap":
            return self.keyed_files(p, "configmaps", src.get("name"), src, mode, name)
        if kind == "downwardAPI":
            return self.downward_files(p, src.get("items"), mode)
        files = {}
        for s in l(src.get("sources")):
            s = d(s)
            secret, cm = s.get("secret"), s.get("configMap")
            if isinstance(secret, dict):
                files.update(self.keyed_files(p, "secrets", secret.get("name"), secret, mode, name))
            elif isinstance(cm, dict):
                files.update(self.keyed_files(p, "configmaps", cm.get("name"), cm, mode, name))
            elif isinstance(s.get("downwardAPI"), dict):
                files.update(self.downward_files(p, s["downwardAPI"].get("items"), mode))
            elif isinstance(s.get("serviceAccountToken"), dict):
                files[safe_relpath(s["serviceAccountToken"].get("path") or "token")] = (self.sa_token, mode)
        return files

    def keyed_files(self, p, kind, ref_name, src, mode, vol):
        try:
            data = self.ref_data(p.ns, kind, ref_name, src.get("optional"), {})
        except SetupError as e:
            if kind == "configmaps" and ref_name == "kube-root-ca.crt":
                data = {"ca.crt": self.ca_bytes}   # the API server may not publish it: the --ca
            else:
                raise SetupError("ContainerCreating",
                                 f'MountVolume.SetUp failed for volume "{vol}" : {e.message}') from e
        if data is None:
            return {}
        items = l(src.get("items"))
        if not items:
            return {safe_relpath(k): (v, mode) for k, v in data.items()}
        files = {}
        for it in items:
            it = d(it)
            key = it.get("key")
            if key not in data:
                if src.get("optional"):
                    continue
                what = "configmap references non-existent config key" if kind == "configmaps" else \
                    "references non-existent secret key"
                raise SetupError("ContainerCreating",
                                 f'MountVolume.SetUp failed for volume "{vol}" : {what}: {key}')
            files[safe_relpath(it.get("path") or key)] = (data[key], item_mode(it, mode))
        return files

    def downward_files(self, p, items, mode):
        files = {}
        for it in l(items):
            it = d(it)
            if isinstance(it.get("fieldRef"), dict):
                value = self.field_value(p, str(it["fieldRef"].get("fieldPath") or ""))
            elif isinstance(it.get("resourceFieldRef"), dict):
                value = self.resource_value(p, Ctr({}, False, False), it["resourceFieldRef"])
            else:
                continue
            files[safe_relpath(it.get("path") or "value")] = (value.encode(), item_mode(it, mode))
        return files

    @staticmethod
    def write_files(path, files):
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path, exist_ok=True)
        for rel, (data, mode) in files.items():
            target = os.path.join(path, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(data)
            os.chmod(target, mode & 0o7777)

    def container_mounts(self, p, c, env):
        mounts, targets = [], set()
        for vm in l(c.spec.get("volumeMounts")):
            vm = d(vm)
            name, target = str(vm.get("name") or ""), str(vm.get("mountPath") or "")
            if not target.startswith("/"):
                continue
            source = p.volumes.get(name)
            if source is None:
                raise SetupError("CreateContainerConfigError",
                                 f'cannot find volume "{name}" to mount into container "{c.name}"')
            sub = vm.get("subPath") or (expand(vm["subPathExpr"], env) if vm.get("subPathExpr") else "")
            if sub:
                source = os.path.join(source, safe_relpath(sub))
                if not os.path.exists(source):
                    os.makedirs(source)
            mounts.append({"source": source, "target": target,
                           "readOnly": bool(vm.get("readOnly")) or name in p.readonly_volumes})
            targets.add(os.path.normpath(target))
        if SA_VOLUME in p.volumes and SA_DIR not in targets:
            mounts.append({"source": p.volumes[SA_VOLUME], "target": SA_DIR, "readOnly": True})
        # parents before children, as a runtime mounts them
        return sorted(mounts, key=lambda m: os.path.normpath(m["target"]).count("/"))

    # -- termination and deletion -----------------------------------------------------------

    def begin_termination(self, p):
        p.terminating = True
        self.dns_dirty = True
        grace = p.meta.get("deletionGracePeriodSeconds")
        if not isinstance(grace, int):
            grace = p.spec.get("terminationGracePeriodSeconds")
        if not isinstance(grace, int):
            grace = DEFAULT_GRACE
        grace = max(grace, MIN_GRACE)
        p.kill_at = time.monotonic() + max(0, grace)
        running = [c for c in p.all if c.proc is not None]
        log(f"pod {p.key}: deletion requested, grace {grace}s, {len(running)} container(s) running")
        for c in running:
            self.signal(p, c, signal.SIGTERM)
        self.add_timer(max(0, grace), p)
        self.sync(p)

    def signal(self, p, c, sig):
        log(f"pod {p.key}: {signal.Signals(sig).name} to container {c.name} (process group {c.pid})")
        try:
            os.killpg(c.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def sync_termination(self, p):
        running = [c for c in p.all if c.proc is not None]
        if running:
            if time.monotonic() >= p.kill_at and not p.killed:
                p.killed = True
                for c in running:
                    self.signal(p, c, signal.SIGKILL)
            return   # their exits sync the pod again
        if p.finalized:
            return
        p.finalized = True
        if p.sandbox or any(c.ever_started for c in p.all):
            self.final_status(p)
        self.teardown_sandbox(p)
        if p.dirty:
            self.push_status(p)   # before the delete: the last status a client sees
        self.delete_pod(p)

    def final_status(self, p):
        """A deleted pod's last status: waiting containers as a real kubelet reports them, and
        the phase Succeeded only if every container ended 0."""
        for c in p.all:
            if "waiting" in c.state and not c.done:
                message = "The container could not be located when the pod was terminated"
                c.state = {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown", "message": message}}
                c.exit_code, c.done = 137, True
        if p.phase not in TERMINAL:
            ok = all(c.done and c.exit_code == 0 for c in p.all)
            p.phase = "Succeeded" if ok and p.ctrs else "Failed"
            log(f"pod {p.key}: phase {p.phase} (deleted)")
        for typ in ("ContainersReady", "Ready"):
            p.set_cond(typ, False, "PodCompleted")
        p.dirty = True

    def delete_pod(self, p):
        path = f"/api/v1/namespaces/{q(p.ns)}/pods/{q(p.name)}?gracePeriodSeconds=0"
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": p.uid}}
        try:
            self.api.request("DELETE", path, body)
            log(f"pod {p.key}: deleted")
        except ApiError as e:
            if 400 <= e.status < 500 and e.status != 429:
                log(f"pod {p.key}: delete: {e}")   # 404: gone already; 409: another pod of that name
            else:
                self.retry_delete(p, e)
        except OSError as e:
            self.retry_delete(p, e)

    def retry_delete(self, p, e):
        log(f"pod {p.key}: delete failed: {e}; again in 2s")
        p.finalized = False   # the next sync deletes it again
        self.add_timer(2.0, p)

    def forget(self, p, why):
        """The pod object is gone: kill at once whatever runs, remove all it had."""
        log(f"pod {p.key}: {why}; removing it")
        p.gone = True
        for c in p.all:
            if c.proc is not None:
                self.signal(p, c, signal.SIGKILL)
        self.teardown_sandbox(p)
        if p.ip:
            self.net.release(p.ip)
        shutil.rmtree(self.pod_dir(p), ignore_errors=True)
        del self.pods[p.uid]
        self.dns_dirty = True

    # -- status -----------------------------------------------------------------------------

    def build_status(self, p):
        order = ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        conds = [p.conds[t] for t in order if t in p.conds]
        if p.unschedulable:
            return {"phase": "Pending", "conditions": conds}
        st = {"phase": p.phase, "conditions": conds, "hostIP": self.gw, "hostIPs": [{"ip": self.gw}],
              "startTime": p.start_time,
              "containerStatuses": [c.status() for c in p.ctrs]}
        if p.ip:
            st["podIP"], st["podIPs"] = p.ip, [{"ip": p.ip}]
        if p.init:
            st["initContainerStatuses"] = [c.status() for c in p.init]
        return st

    def push_status(self, p):
        p.dirty = False
        # metadata.uid: a precondition (as the real kubelet's patch): not a new pod of that name
        body = {"metadata": {"uid": p.uid}, "status": self.build_status(p)}
        text = json.dumps(body, sort_keys=True)
        if text == p.sent:
            return
        try:
            self.api.request("PATCH", f"/api/v1/namespaces/{q(p.ns)}/pods/{q(p.name)}/status",
                             body, "application/merge-patch+json")
            p.sent = text
            states = " ".join(f"{c.name}={next(iter(c.state))}" for c in p.all)
            log(f"pod {p.key}: status {p.phase} {states}")
        except ApiError as e:
            if 400 <= e.status < 500 and e.status != 429:
                # gone (404), another pod of that name (409), refused (422): the same patch would
                # fail again; the next change is tried
                p.sent = text
                log(f"pod {p.key}: status not stored: {e}")
            else:
                self.retry_status(p, e)
        except OSError as e:
            self.retry_status(p, e)

    def retry_status(self, p, e):
        log(f"pod {p.key}: status update failed: {e}; again in 1s")
        p.dirty = True
        self.add_timer(1.0, p)

    # -- names ------------------------------------------------------------------------------

    def write_dns(self):
        """Every pod namespace's hosts file: the Services (and hostname.subdomain pods) that lead
        to a Running pod, by name."""
        self.dns_dirty = False
        # a pod being deleted has left its Services' endpoints already, as in a real cluster
        running = sorted((p for p in self.pods.values()
                          if p.phase == "Running" and p.ip and not p.gone and not p.terminating),
                         key=lambda p: (p.ns, p.name))
        records = []   # (ip, namespace, names for all, extra short names for the same namespace)
        for (ns, name), svc in sorted(self.services.items()):
            selector = d(d(svc.get("spec")).get("selector"))
            if not selector:
                continue
            target = next((p for p in running if p.ns == ns and
                           all(p.labels.get(k) == v for k, v in selector.items())), None)
            if target:
                self.last_service_ip[(ns, name)] = target.ip
                records.append((target.ip, ns, cluster_names(name, ns), [name]))
            elif d(svc.get("spec")).get("clusterIP") != "None" and (ns, name) in self.last_service_ip:
                # A ClusterIP Service's name resolves whether or not a pod serves it (its
                # virtual IP would then refuse connections): here, the last pod's IP.
                records.append((self.last_service_ip[(ns, name)], ns, cluster_names(name, ns), [name]))
        for p in running:
            if p.spec.get("hostname") and p.subdomain:
                h = f"{p.hostname}.{p.subdomain}"
                records.append((p.ip, p.ns, cluster_names(h, p.ns), [h]))
        for p in self.pods.values():
            if p.sandbox:
                text = self.hosts_file(p, records)
                if text != p.hosts_text:
                    try:
                        rewrite_in_place(os.path.join(self.net.etc_dir(p.n), "hosts"), text)
                        p.hosts_text = text
                    except OSError as e:
                        log(f"pod {p.key}: hosts file: {e}")

    def hosts_file(self, p, records):
        own = f"{p.ip}\t{p.hostname}"
        if p.subdomain:
            own = f"{p.ip}\t{p.hostname}.{p.subdomain}.{p.ns}.svc.cluster.local\t{p.hostname}"
        lines = ["# Kubernetes-managed hosts file (stand-in kubelet; rewritten as pods and services change).",
                 "127.0.0.1\tlocalhost", own,
                 f"{self.gw}\tkubernetes kubernetes.default kubernetes.default.svc "
                 "kubernetes.default.svc.cluster.local"]
        for ip, ns, names, short in records:
            lines.append(f"{ip}\t" + " ".join(names + (short if ns == p.ns else [])))
        return "\n".join(lines) + "\n"

    # -- the end ----------------------------------------------------------------------------

    def cleanup(self):
        """Kill every pod's processes, remove every namespace, link and /etc/netns entry of this
        prefix. Runs at the end, on a signal and (atexit) after a crash."""
        if self.cleaned:
            return
        self.cleaned = True
        log("cleaning up: killing pods, removing namespaces and the bridge")
        for p in self.pods.values():
            for c in p.all:
                if c.proc is not None:
                    try:
                        os.killpg(c.pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
        for fd, (p, c) in list(self.exits.items()):
            try:
                c.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
            os.close(fd)
        self.exits.clear()
        for p in self.pods.values():
            if p.sandbox:
                self.net.destroy(self.net.ns_name(p.n))
            shutil.rmtree(self.pod_dir(p), ignore_errors=True)
        self.net.teardown()
        log("clean")


def parse_args(argv):
    ap = argparse.ArgumentParser(description="kubelet of the stand-in Kubernetes (root needed)")
    ap.add_argument("--server", required=True, help="https://GATEWAY:PORT of the API server")
    ap.add_argument("--ca", required=True, help="CA certificate of the API server (also the pods' ca.crt)")
    ap.add_argument("--token-file", required=True, help="bearer token of this kubelet")
    ap.add_argument("--sa-token-file", required=True, help="token the pods get as their service account's")
    ap.add_argument("--dir", required=True, help="logs/, pods/, volumes/ go here")
    ap.add_argument("--prefix", default="dtk", help="names of the bridge, namespaces, veths (default dtk)")
    ap.add_argument("--gateway", default="10.99.0.1",
                    help="the bridge's address in a /16 (default 10.99.0.1)")
    ap.add_argument("--image", action="append", default=[], metavar="NAME=BINDIR",
                    help="image NAME runs with BINDIR first on PATH (repeatable)")
    ap.add_argument("--node-name", default=NODE_NAME, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    # interface names are at most 15 characters: P + offset (up to 65534) + 'a'
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,8}", args.prefix):
        ap.error("--prefix: a letter, then at most 8 letters, digits, '-' or '_'")
    try:
        ipaddress.IPv4Address(args.gateway)
    except ValueError:
        ap.error(f"--gateway: not an IPv4 address: {args.gateway}")
    for spec in args.image:
        if "=" not in spec or not spec.split("=", 1)[0]:
            ap.error(f"--image wants NAME=BINDIR, not {spec}")
    return args


def main(argv):
    if argv[:1] == ["--exec-container"] and len(argv) == 2:
        exec_container(argv[1])
        return 127   # not reached
    args = parse_args(argv)
    if os.geteuid() != 0:
        log("needs root (network namespaces, bind mounts)")
        return 1
    k = Kubelet(args)
    atexit.register(k.cleanup)

    def on_signal(signum, _frame):
        log(f"{signal.Signals(signum).name} received")
        k.stopping = True
        k.wake()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        k.run()
    except Exception:  # noqa: BLE001
        log("crashed:\n" + traceback.format_exc())
        k.cleanup()
        return 1
    k.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
