"""dtrain_client: the elastic data shard service for users' own scripts (standard library only).

A replica started by dtrain has DTRAIN_MASTER (the master's URL), DTRAIN_JOB_TOKEN and
DTRAIN_REPLICA in its environment. The master splits a dataset into shards of sample
indices; this client fetches a shard, the script trains on its records and reports batches
done; when a replica dies or hangs, its shards go to another (docs/SHARDS.md).

    import sys; sys.path.insert(0, "<dtrain>/python")
    from dtrain_client import build_data_shard_service

    svc = build_data_shard_service(batch_size=64, num_epochs=2, dataset_size=60000,
                                   num_minibatches_per_shard=4, dataset_name="training")
    while True:
        shard = svc.fetch_shard()          # None once every shard of every epoch is done
        if shard is None:
            break
        for batch in batches_of(shard.indices, 64):
            train_on(batch)
            svc.report_batch_done()        # counted against the fetched shards, in order

The interface is ElasticDL's DataShardService: fetch_shard(), report_batch_done(batch_size,
err_msg) and a generator of record indices (record_indices()).
"""

import collections
import http.client
import json
import os
import random
import socket
import sys
import threading
import time
import urllib.parse

__all__ = ["build_data_shard_service", "DataShardService", "Shard", "MasterClient",
           "DtrainError"]


class DtrainError(Exception):
    """The master refused a request (status and message) or could not be reached."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


# A connection not made in this many seconds is retried, the name looked up again: a master
# whose pod was replaced has a new address behind its headless Service, and the old one
# answers nothing (a connect would wait the whole request timeout on it).
CONNECT_TIMEOUT = 5.0


class _Connection(http.client.HTTPConnection):
    """An HTTPConnection whose connect gives up after CONNECT_TIMEOUT; requests keep the
    whole timeout."""

    def connect(self):
        self.sock = socket.create_connection((self.host, self.port),
                                             min(self.timeout, CONNECT_TIMEOUT),
                                             self.source_address)
        self.sock.settimeout(self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class MasterClient:
    """One kept-alive HTTP connection to the job's master (not thread-safe)."""

    def __init__(self, url=None, token=None, timeout=30.0):
        url = url or os.environ.get("DTRAIN_MASTER")
        token = token or os.environ.get("DTRAIN_JOB_TOKEN")
        if not url or not token:
            raise DtrainError("DTRAIN_MASTER and DTRAIN_JOB_TOKEN must be set "
                              "(run this script as a replica of a dtrain job)")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise DtrainError("DTRAIN_MASTER: expected http://HOST:PORT, got %r" % url)
        self._host, self._port = parts.hostname, parts.port or 80
        self._headers = {"Authorization": "Bearer " + token,
                         "Content-Type": "application/json"}
        self._timeout = timeout
        self._conn = None
        self._pid = os.getpid()
        self.job = self.request("GET", "/v1/healthz")["job"]

    def request(self, method, path, body=None, retry_seconds=60.0):
        """Send one request; returns the decoded JSON answer. Retries a lost connection
        (a master restarting) and a 503 (a master that cannot write its journal) with
        backoff, 50 ms doubling to 2 s, for retry_seconds in all; raises DtrainError on a 4xx/5xx answer (status set) or when they are over.
        A retry resends the same body: the master answers a repeated fetch (same request
        id) or report as it answered the first."""
        data = None if body is None else json.dumps(body).encode()
        delay = 0.05
        deadline = time.monotonic() + retry_seconds
        while True:
            if self._pid != os.getpid():  # a forked child: the parent's socket is not ours
                self._conn, self._pid = None, os.getpid()
            try:
                if self._conn is None:
                    self._conn = _Connection(self._host, self._port, timeout=self._timeout)
                self._conn.request(method, path, body=data, headers=self._headers)
                resp = self._conn.getresponse()
                text = resp.read()
                status = resp.status
            except (OSError, http.client.HTTPException) as e:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                if time.monotonic() + delay > deadline:
                    raise DtrainError("%s %s: %s" % (method, path, e)) from e
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            try:
                answer = json.loads(text) if text else {}
            except ValueError:
                answer = {"error": text.decode(errors="replace")}
            if status == 503:
                # The master cannot write its journal (a full disk): it records nothing
                # until it can, and answers this same request as the first would have been.
                # Retried for as long as it says so (a master that gives up ends the job).
                deadline = time.monotonic() + retry_seconds
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            if status >= 400:
                raise DtrainError("%s %s: HTTP %d: %s" % (method, path, status,
                                                         answer.get("error", answer)), status)
            return answer

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class Shard:
    """A shard of one epoch: records start..end-1 of the epoch's order; indices lists the
    dataset's record indices (a seeded permutation when the dataset is shuffled)."""

    __slots__ = ("epoch", "id", "start", "end", "lease", "indices")

    def __init__(self, d):
        self.epoch = d["epoch"]
        self.id = d["id"]
        self.start = d["start"]
        self.end = d["end"]
        self.lease = d["lease"]
        idx = d.get("indices")
        self.indices = list(idx) if idx is not None else list(range(self.start, self.end))

    def __len__(self):
        return self.end - self.start

    def __repr__(self):
        return "Shard(epoch=%d, id=%d, start=%d, end=%d)" % (self.epoch, self.id,
                                                              self.start, self.end)


class DataShardService:
    """Fetches shards of one dataset and reports them done, as ElasticDL's service does:
    batches reported with report_batch_done are counted against the fetched shards in the
    order they were fetched; a shard is reported once all its records are counted (failed
    if any of its batches was reported with an error message). Thread-safe: a background
    thread may fetch while the training loop reports."""

    def __init__(self, batch_size, num_epochs, dataset_size, num_minibatches_per_shard,
                 dataset_name="training", shuffle=False, shuffle_shards=False, seed=0,
                 heartbeat_interval=1.0, client=None):
        self.batch_size = int(batch_size)
        self.dataset_name = dataset_name
        self.replica = os.environ.get("DTRAIN_REPLICA", "")
        if not self.replica:
            raise DtrainError("DTRAIN_REPLICA must be set (run this script as a job replica)")
        self._client = client or MasterClient()
        self._lock = threading.Lock()  # one request at a time on the kept-alive connection
        self._book = threading.RLock()  # the pending shards and their counts
        quoted = urllib.parse.quote(dataset_name, safe="")
        self._base = "/v1/jobs/%s/datasets" % self._client.job
        self._path = "%s/%s" % (self._base, quoted)
        self._pending = collections.deque()  # [shard, records counted, error], oldest first
        self._indices = collections.deque()  # fetch_record_index's current shard
        self._current_epoch = 0
        self.refused = []  # shards whose report the master refused as late
        with self._lock:
            self._client.request("POST", self._base, {
                "name": dataset_name, "dataset_size": int(dataset_size),
                "batch_size": self.batch_size, "num_epochs": int(num_epochs),
                "num_minibatches_per_shard": int(num_minibatches_per_shard),
                "shuffle": bool(shuffle), "shuffle_shards": bool(shuffle_shards),
                "seed": int(seed)})
        self._stop = threading.Event()
        if heartbeat_interval and heartbeat_interval > 0:
            t = threading.Thread(target=self._beat, args=(heartbeat_interval,), daemon=True)
            t.start()

    def _beat(self, interval):
        path = "/v1/jobs/%s/replicas/%s/heartbeat" % (self._client.job, self.replica)
        while not self._stop.wait(interval):
            try:
                with self._lock:
                    self._client.request("POST", path, {}, retry_seconds=0)
            except DtrainError:
                pass  # the master may be restarting; the next beat tries again

    def fetch_shard(self):
        """The next shard, or None when every shard of every epoch is done. While the last
        shards of an epoch are in flight elsewhere, waits (polling) for them."""
        delay = 0.01
        while True:
            # A retried request keeps its id, so a fetch the master recorded just before
            # it died gives back the same shard instead of a second one.
            body = {"replica": self.replica, "request": random.getrandbits(62) + 1}
            with self._lock:
                ans = self._client.request("POST", self._path + "/fetch", body)
            status = ans.get("status")
            if status == "shard":
                shard = Shard(ans["shard"])
                with self._book:
                    self._pending.append([shard, 0, ""])
                    self._current_epoch = shard.epoch
                return shard
            if status == "end":
                return None
            if status != "wait":
                raise DtrainError("fetch: unexpected answer %r" % (ans,))
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def report_batch_done(self, batch_size=None, err_msg=""):
        """Count batch_size records (default the service's batch size) against the oldest
        fetched shard; a batch that goes past its end counts the rest against the next.
        Report every shard whose records are all counted: done, or failed (the master
        re-queues it) when any of its batches came with err_msg. Returns True when a shard
        was reported, False when none was (nor any pending). A report the master refuses
        as late (the shard was re-queued while this replica was silent) is not an error:
        the shard goes to self.refused and a warning to stderr."""
        n = self.batch_size if batch_size is None else int(batch_size)
        with self._book:
            if not self._pending:
                return False
            self._pending[0][1] += n
            if err_msg:
                self._pending[0][2] = err_msg
            ready = 0
            while ready < len(self._pending) and \
                    self._pending[ready][1] >= len(self._pending[ready][0]):
                shard, counted, err = self._pending[ready]
                ready += 1
                if ready < len(self._pending):  # the batch went on into the next shard
                    self._pending[ready][1] += counted - len(shard)
                    self._pending[ready][2] = self._pending[ready][2] or (err_msg if
                                                                          counted > len(shard)
                                                                          else "")
            for _ in range(ready):
                # popped only once reported: after an error the shard stays pending
                shard, _, err = self._pending[0]
                self._report(shard, not err, err)
                self._pending.popleft()
            return ready > 0

    def _report(self, shard, ok, message):
        try:
            with self._lock:
                self._client.request("POST", self._path + "/report", {
                    "replica": self.replica, "epoch": shard.epoch, "id": shard.id,
                    "lease": shard.lease, "ok": ok, "message": message})
        except DtrainError as e:
            if e.status != 409 or "late report refused" not in str(e):
                raise  # a failed dataset, a malformed request, an unreachable master
            self.refused.append(shard)
            sys.stderr.write("dtrain_client: late report refused: %s\n" % e)

    def fetch_record_index(self):
        """ElasticDL's record-at-a-time interface: the next record index of this replica's
        shards (fetching the next shard when one is used up), or None at the end. The
        records still have to be reported, batch by batch, with report_batch_done()."""
        with self._book:
            if self._indices:
                return self._indices.popleft()
        shard = self.fetch_shard()
        if shard is None:
            return None
        with self._book:
            self._indices.extend(shard.indices)
            return self._indices.popleft() if self._indices else self.fetch_record_index()

    def record_indices(self):
        """A generator of fetch_record_index() until the end (e.g. for a tf.data or
        torch IterableDataset); report each trained batch with report_batch_done()."""
        while True:
            i = self.fetch_record_index()
            if i is None:
                return
            yield i

    def get_current_epoch(self):
        return self._current_epoch

    def close(self):
        self._stop.set()
        self._client.close()


def build_data_shard_service(batch_size, num_epochs=1, dataset_size=None,
                             num_minibatches_per_shard=1, dataset_name="training", **kwargs):
    """ElasticDL's entry point: a DataShardService for the dataset, registered with the
    master (every replica may register it; the same parameters are a no-op)."""
    if dataset_size is None:
        raise DtrainError("dataset_size is required")
    return DataShardService(batch_size, num_epochs, dataset_size, num_minibatches_per_shard,
                            dataset_name, **kwargs)
