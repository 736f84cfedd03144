"""acked.py - no acknowledgment before its journal line (tests/shard_test.sh, section acked).

Usage: acked.py JOB_DIR JOB DATASET WORKERS ACKS

Registers DATASET with the job's master (JOB_DIR/master.json), then WORKERS threads, thread
i acting as replica worker-i on a kept-alive connection of its own, fetch and report shards
as fast as they can: even threads report on the next fetch (the "report" field), odd ones
through the report route. Every answer 200 that hands out a shard or records a report is an
acknowledgment, noted as the client received it. Once ACKS have been received, the master is
killed by SIGKILL at once, while the others are in flight. Then every acknowledged fetch
(replica, epoch, id, lease) must be a shard.fetch line of the journal and every acknowledged
report (replica, epoch, id, lease) a shard.report line: the master writes a change's line
before it sends the answer that says yes to it, so whatever a client got must be there
whenever the master dies.
Prints "N acknowledged (F fetches, R reports), every one in the journal ..." and exits 0,
or names what is missing and exits 1.
"""
import http.client
import json
import os
import signal
import sys
import threading
import time
import urllib.parse


def main():
    job_dir, job, dataset, workers, want = sys.argv[1:6]
    workers, want = int(workers), int(want)
    master = json.load(open(os.path.join(job_dir, "master.json")))
    url = urllib.parse.urlsplit(master["url"])
    headers = {"Authorization": "Bearer " + master["token"], "Content-Type": "application/json"}
    base = "/v1/jobs/%s/datasets" % job

    def connect():
        return http.client.HTTPConnection(url.hostname, url.port, timeout=30)

    def post(conn, path, body):
        conn.request("POST", path, json.dumps(body), headers)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")

    c = connect()
    status, body = post(c, base, {"name": dataset, "dataset_size": 400000, "batch_size": 4,
                                  "num_epochs": 1, "num_minibatches_per_shard": 1})
    if status != 200:
        sys.exit("acked: register: %d %s" % (status, body))
    c.close()

    acks = []  # ("fetch" | "report", replica, epoch, id, lease), in the order received
    lock = threading.Lock()
    enough = threading.Event()

    def ack(*what):
        with lock:
            acks.append(what)
            if len(acks) >= want:
                enough.set()

    def worker(i):
        replica = "worker-%d" % i
        conn = connect()
        held, request = None, 0
        try:
            while True:
                request += 1
                body = {"replica": replica, "request": request}
                if held and i % 2 == 1:
                    st, b = post(conn, base + "/" + dataset + "/report", dict(held, replica=replica))
                    if st != 200:
                        return
                    ack("report", replica, held["epoch"], held["id"], held["lease"])
                    held = None
                elif held:
                    body["report"] = held
                st, b = post(conn, base + "/" + dataset + "/fetch", body)
                if st != 200:
                    return
                if held:  # it rode on the fetch, which said yes to it
                    ack("report", replica, held["epoch"], held["id"], held["lease"])
                held = None
                if b.get("status") == "shard":
                    s = b["shard"]
                    ack("fetch", replica, s["epoch"], s["id"], s["lease"])
                    held = {"epoch": s["epoch"], "id": s["id"], "lease": s["lease"], "ok": True}
                elif b.get("status") == "end":
                    return
        except (OSError, http.client.HTTPException, ValueError):
            return  # the master is gone

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    if not enough.wait(60):
        sys.exit("acked: only %d acknowledgments in 60 s" % len(acks))
    os.kill(master["pid"], signal.SIGKILL)
    with lock:
        at_kill = len(acks)
    for t in threads:
        t.join(30)
    # the master is a child of init (detached): gone once reaped
    for _ in range(300):
        try:
            os.kill(master["pid"], 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)

    fetched, reported = set(), set()
    with open(os.path.join(job_dir, "journal.jsonl")) as f:
        for line in f:
            if not line.endswith("\n"):
                break  # a torn last line: not written whole
            ev = json.loads(line)
            if ev.get("dataset") != dataset:
                continue
            key = (ev.get("replica"), ev.get("epoch"), ev.get("id"), ev.get("lease"))
            if ev.get("ev") == "shard.fetch":
                fetched.add(key)
            elif ev.get("ev") == "shard.report":
                reported.add(key)
    missing = [a for a in acks if a[1:] not in (fetched if a[0] == "fetch" else reported)]
    nf = sum(1 for a in acks if a[0] == "fetch")
    if missing:
        print("acked: %d of %d acknowledgments are not in the journal, e.g. %s" %
              (len(missing), len(acks), ", ".join("%s %s epoch %d shard %d lease %d" % a
                                                   for a in missing[:5])))
        sys.exit(1)
    print("%d acknowledged (%d fetches, %d reports; %d when the master was killed), every one "
          "in the journal (%d fetches, %d reports there)" %
          (len(acks), nf, len(acks) - nf, at_kill, len(fetched), len(reported)))


main()
