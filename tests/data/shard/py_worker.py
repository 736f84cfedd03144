"""py_worker.py - a job replica that consumes a dataset through dtrain_client, as a user's
TensorFlow or PyTorch script would (tests/shard_test.sh).

Usage: py_worker.py --dataset NAME --size N --batch B --epochs E --minibatches M
                    [--shuffle] [--seed S] [--sleep-ms MS] [--out FILE] [--generator]

For each shard it "trains" batch by batch (sleeping MS per shard in all) and reports each
batch with report_batch_done(); then it appends one line to FILE:
    REPLICA EPOCH ID START END LEASE ok|refused SUM_OF_INDICES COUNT
"refused" when the master refused the shard's report as late (the shard was re-queued
while this replica was stopped). With --generator it reads record_indices() instead and
writes one line per epoch: REPLICA EPOCH - - - - gen SUM COUNT (reporting a batch every
B indices, as an ElasticDL training loop does).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "python"))
from dtrain_client import build_data_shard_service  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dataset", default="training")
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--minibatches", type=int, default=1)
    p.add_argument("--shuffle", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sleep-ms", type=float, default=0)
    p.add_argument("--out", default="/dev/stdout")
    p.add_argument("--generator", action="store_true")
    a = p.parse_args()
    svc = build_data_shard_service(batch_size=a.batch, num_epochs=a.epochs, dataset_size=a.size,
                                   num_minibatches_per_shard=a.minibatches,
                                   dataset_name=a.dataset, shuffle=a.shuffle, seed=a.seed)
    me = os.environ["DTRAIN_REPLICA"]
    out = os.open(a.out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def line(*fields):
        os.write(out, (" ".join(str(f) for f in fields) + "\n").encode())

    if a.generator:
        # ElasticDL's record-at-a-time use: indices from the generator, a report per batch.
        sums, count = {}, 0
        for i in svc.record_indices():
            e = svc.get_current_epoch()
            s, c = sums.get(e, (0, 0))
            sums[e] = (s + i, c + 1)
            count += 1
            if count % a.batch == 0:
                svc.report_batch_done()
        if count % a.batch:
            svc.report_batch_done(count % a.batch)
        for e, (s, c) in sorted(sums.items()):
            line(me, e, "-", "-", "-", "-", "gen", s, c)
        return 0

    while True:
        shard = svc.fetch_shard()
        if shard is None:
            break
        n = len(shard.indices)
        nbatches = (n + a.batch - 1) // a.batch
        refused = len(svc.refused)
        for b in range(nbatches):
            time.sleep(a.sleep_ms / 1000.0 / nbatches)
            svc.report_batch_done(min(a.batch, n - b * a.batch))
        verdict = "refused" if len(svc.refused) > refused else "ok"
        line(me, shard.epoch, shard.id, shard.start, shard.end, shard.lease, verdict,
             sum(shard.indices), n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
