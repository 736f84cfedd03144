#!/usr/bin/python3
"""A small watch client for the stand-in's self-test. It speaks HTTP/1.1 over TLS itself
(http.client hides a missing last chunk), checks the answer is a chunked
application/json stream, and prints one line per event: `TYPE NAME RESOURCEVERSION`, or
`ERROR CODE REASON MESSAGE`; then `END clean` when the server ended the stream with its
last chunk, or `END abrupt` when the connection closed without it.

    watch_client.py URL CA TOKEN_FILE [--max N] [--timeout S]"""
import argparse
import json
import socket
import ssl
import sys
import urllib.parse


class Stream:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self.fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def take(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def event_line(ev):
    o = ev["object"]
    if ev["type"] == "ERROR":
        return "ERROR %s %s %s" % (o.get("code"), o.get("reason"), o.get("message"))
    md = o.get("metadata") or {}
    end = " initial-events-end" if (md.get("annotations") or {}).get("k8s.io/initial-events-end") else ""
    return "%s %s %s%s" % (ev["type"], md.get("name", "-"), md.get("resourceVersion"), end)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("ca")
    ap.add_argument("token_file")
    ap.add_argument("--max", type=int, default=0, help="stop after N events")
    ap.add_argument("--timeout", type=float, default=30)
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.url)
    ctx = ssl.create_default_context(cafile=a.ca)
    raw = socket.create_connection((u.hostname, u.port), timeout=a.timeout)
    sock = ctx.wrap_socket(raw, server_hostname=u.hostname)
    path = u.path + ("?" + u.query if u.query else "")
    token = open(a.token_file).read().strip()
    sock.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer %s\r\nAccept: application/json\r\n\r\n"
                  % (path, u.hostname, u.port, token)).encode())
    s = Stream(sock)
    status = s.line().decode()
    headers = {}
    while True:
        h = s.line().decode()
        if not h:
            break
        k, v = h.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    if " 200 " not in status + " ":
        body = s.take(int(headers.get("content-length", "0")))
        print("HTTP %s %s" % (status, body.decode()))
        return
    if headers.get("transfer-encoding") != "chunked" or not headers.get("content-type", "").startswith("application/json"):
        print("BAD-HEADERS %s" % headers)
    pending, n = b"", 0
    try:
        while True:
            size = int(s.line().split(b";")[0], 16)
            if size == 0:
                s.line()
                print("END clean")
                return
            pending += s.take(size)
            s.line()
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                print(event_line(json.loads(line)))
                sys.stdout.flush()
                n += 1
                if a.max and n >= a.max:
                    return
    except (EOFError, ConnectionError, ssl.SSLError, OSError) as e:
        print("END abrupt %s" % type(e).__name__)


if __name__ == "__main__":
    main()
