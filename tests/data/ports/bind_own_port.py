# bind_own_port.py - a replica that binds the port TF_CONFIG gives it (without SO_REUSEADDR,
# as strict as any program), listens, and exits 0; exits 1 when the port is taken.
import json
import os
import socket
import sys

tf = json.loads(os.environ["TF_CONFIG"])
task = tf["task"]
host, port = tf["cluster"][task["type"]][task["index"]].rsplit(":", 1)
s = socket.socket()
try:
    s.bind((host, int(port)))
    s.listen()
except OSError as e:
    print(f"cannot bind {host}:{port}: {e}", file=sys.stderr)
    sys.exit(1)
print(f"bound {host}:{port}", flush=True)  # read while the replica still runs
