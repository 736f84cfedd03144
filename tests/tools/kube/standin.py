#!/usr/bin/python3
"""Start the stand-in Kubernetes cluster for dtrain's tests: the API server (apiserver.py,
in this process) and the kubelet (kubelet.py, a child process).

    /usr/bin/python3 tests/tools/kube/standin.py --dir DIR [--prefix P] [--gateway IP]
        [--kubelet-arg ARG]... [--no-kubelet] [--job-backoff S] ...

Makes in DIR: ca.crt, ca.key, server.crt, server.key (a CA made now with openssl), token
(the bearer token of the kubeconfig and the kubelet), sa-token (the pods' service-account
token), kubeconfig; listens on 0.0.0.0, a port the kernel picks; starts the kubelet and,
once it has printed `kubelet ready`, writes DIR/ready (the port). SIGTERM or SIGINT: stops
the kubelet (SIGTERM, and waits for it to tear down) and exits 0."""
import argparse
import base64
import os
import secrets
import signal
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import apiserver  # noqa: E402

PYTHON = "/usr/bin/python3"


def log(msg):
    sys.stderr.write("standin: %s\n" % msg)
    sys.stderr.flush()


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_certs(d, gateway):
    """A CA, and a server certificate it signs for every name pods and tests use."""
    p = lambda n: os.path.join(d, n)  # noqa: E731
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p("ca.key"), "-out", p("ca.crt"),
            "-days", "3650", "-subj", "/CN=standin-ca", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")
    sans = ["IP:127.0.0.1", "IP:%s" % gateway, "IP:10.96.0.1", "DNS:localhost", "DNS:kubernetes",
            "DNS:kubernetes.default", "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local"]
    with open(p("server.ext"), "w") as f:
        f.write("subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n" % ",".join(sans))
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", p("server.key"), "-out", p("server.csr"),
            "-subj", "/CN=kube-apiserver")
    openssl("x509", "-req", "-in", p("server.csr"), "-CA", p("ca.crt"), "-CAkey", p("ca.key"),
            "-CAcreateserial", "-out", p("server.crt"), "-days", "3650", "-extfile", p("server.ext"))
    for n in ("server.csr", "server.ext", "ca.srl"):
        if os.path.exists(p(n)):
            os.remove(p(n))
    os.chmod(p("ca.key"), 0o600)
    os.chmod(p("server.key"), 0o600)


def write_secret(path, value):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")


def write_atomic(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def kubeconfig(d, port, token):
    ca = base64.b64encode(open(os.path.join(d, "ca.crt"), "rb").read()).decode()
    return ("apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n"
            "    certificate-authority-data: %s\n    server: https://127.0.0.1:%d\n"
            "users:\n- name: standin\n  user:\n    token: %s\n"
            "contexts:\n- name: standin\n  context:\n    cluster: standin\n    user: standin\n"
            "    namespace: default\ncurrent-context: standin\npreferences: {}\n" % (ca, port, token))


class Kubelet:
    """The kubelet child: its stdout is passed on, and `kubelet ready` on it sets ready."""

    def __init__(self, args):
        self.ready = threading.Event()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        threading.Thread(target=self.pump, daemon=True).start()

    def pump(self):
        for line in self.proc.stdout:
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
            if line.strip() == b"kubelet ready":
                self.ready.set()

    def stop(self, wait=120):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                log("kubelet did not stop in %ds: killing it" % wait)
                self.proc.kill()
                self.proc.wait()


def main():
    ap = argparse.ArgumentParser(description="the stand-in Kubernetes cluster for dtrain's tests")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--prefix", default="dtk")
    ap.add_argument("--gateway", default="10.99.0.1")
    ap.add_argument("--kubelet-arg", action="append", default=[])
    ap.add_argument("--no-kubelet", action="store_true", help="the API server alone")
    ap.add_argument("--job-backoff", type=float, default=10.0, help="Job pod retry delay base (real: 10 s)")
    ap.add_argument("--history", type=int, default=1000, help="watch history window, in events")
    ap.add_argument("--crd-establish-delay", type=float, default=0.5)
    ap.add_argument("--bookmark-interval", type=float, default=60.0)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()

    d = os.path.abspath(a.dir)
    os.makedirs(d, exist_ok=True)
    for stale in ("ready", "ready.tmp"):
        if os.path.exists(os.path.join(d, stale)):
            os.remove(os.path.join(d, stale))
    make_certs(d, a.gateway)
    token, sa_token = secrets.token_hex(32), secrets.token_hex(32)
    write_secret(os.path.join(d, "token"), token)
    write_secret(os.path.join(d, "sa-token"), sa_token)
    api = apiserver.ApiServer("0.0.0.0", 0, os.path.join(d, "server.crt"), os.path.join(d, "server.key"),
                              [token, sa_token], d, open(os.path.join(d, "ca.crt")).read(), a.history,
                              a.job_backoff, a.crd_establish_delay, a.bookmark_interval, a.verbose)
    api.start()
    write_atomic(os.path.join(d, "kubeconfig"), kubeconfig(d, api.port, token))
    log("API server on port %d" % api.port)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    kubelet = None
    if not a.no_kubelet:
        kubelet = Kubelet([PYTHON, os.path.join(HERE, "kubelet.py"), "--server", "https://%s:%d" % (a.gateway, api.port),
                           "--ca", os.path.join(d, "ca.crt"), "--token-file", os.path.join(d, "token"),
                           "--sa-token-file", os.path.join(d, "sa-token"), "--dir", d, "--prefix", a.prefix,
                           "--gateway", a.gateway] + a.kubelet_arg)
        while not kubelet.ready.is_set() and not stop.is_set():
            if kubelet.proc.poll() is not None:
                log("the kubelet exited (%d) before it was ready" % kubelet.proc.returncode)
                api.stop()
                return 1
            kubelet.ready.wait(0.2)
    if not stop.is_set():
        write_atomic(os.path.join(d, "ready"), "%d\n" % api.port)
        log("ready")
    code = 0
    while not stop.is_set():
        if kubelet and kubelet.proc.poll() is not None:
            log("the kubelet exited (%d)" % kubelet.proc.returncode)
            code = 1
            break
        stop.wait(0.5)
    if kubelet:
        kubelet.stop()
    api.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
