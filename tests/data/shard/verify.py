"""verify.py - check a finished job's shard accounting (tests/shard_test.sh).

Usage: verify.py JOB_DIR DATASET SIZE SHARD_SIZE EPOCHS OUT_FILE [--late N] [--requeued N]
                 [--unlogged N]

Checks, from the master's journal, result.json and the workers' own lines in OUT_FILE
(REPLICA EPOCH ID START END LEASE ok|refused SUM COUNT):
- every shard of every epoch was accepted exactly once (journal), and nothing else was;
- the lines the workers wrote as accepted are exactly the journal's accepted reports
  (same replica, epoch, shard and lease), and every refused line is not among them; except
  that up to N accepted reports may have no line (--unlogged N: a worker killed after the
  master recorded its report and before it read the answer; its line is written after);
- per epoch, the accepted shards' records number SIZE and their indices sum to
  SIZE*(SIZE-1)/2 (the union covers every index once; with shuffle, each shard's indices
  are its own, so duplicates or gaps would show);
- result.json: the dataset is done, every epoch's shards and samples are complete, and at
  least N late reports were refused / shards re-queued when asked.
Prints one line per failed check and exits 1; prints "verified ..." and exits 0 otherwise.
"""
import json
import sys


def main():
    args = sys.argv[1:]
    opts = {"--late": 0, "--requeued": 0, "--unlogged": 0}
    for k in list(opts):
        if k in args:
            i = args.index(k)
            opts[k] = int(args[i + 1])
            del args[i:i + 2]
    job_dir, dataset, size, shard_size, epochs, out_file = args
    size, shard_size, epochs = int(size), int(shard_size), int(epochs)
    nshards = (size + shard_size - 1) // shard_size
    errors = []

    accepted = {}  # (epoch, id) -> (replica, lease)
    with open(job_dir + "/journal.jsonl") as f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a torn last line (the master was killed mid-write)
            if ev.get("ev") != "shard.report" or ev.get("dataset") != dataset or not ev.get("ok"):
                continue
            key = (ev["epoch"], ev["id"])
            if key in accepted:
                errors.append("shard %d of epoch %d accepted twice (%s, %s)"
                              % (key[1], key[0], accepted[key], (ev["replica"], ev["lease"])))
            accepted[key] = (ev["replica"], ev["lease"])
    want = {(e, i) for e in range(epochs) for i in range(nshards)}
    if set(accepted) != want:
        missing = sorted(want - set(accepted))[:5]
        extra = sorted(set(accepted) - want)[:5]
        errors.append("journal: accepted shards differ: missing %s, unexpected %s"
                      % (missing, extra))

    lines_ok, refused = {}, 0
    per_epoch = {e: [0, 0] for e in range(epochs)}
    with open(out_file) as f:
        for line in f:
            w = line.split()
            if len(w) != 9 or w[6] not in ("ok", "refused") or w[0] == "-":
                continue
            rep, e, i, lease = w[0], int(w[1]), int(w[2]), int(w[5])
            if w[6] == "refused":
                refused += 1
                if accepted.get((e, i)) == (rep, lease):
                    errors.append("%s wrote shard %d of epoch %d refused, but the journal "
                                  "accepted it" % (rep, i, e))
                continue
            if (e, i) in lines_ok:
                errors.append("shard %d of epoch %d written as accepted twice" % (i, e))
            lines_ok[(e, i)] = (rep, lease)
            if e in per_epoch:
                per_epoch[e][0] += int(w[8])
                per_epoch[e][1] += int(w[7])
    unlogged = set(accepted.items()) - set(lines_ok.items())
    if set(lines_ok.items()) - set(accepted.items()) or len(unlogged) > opts["--unlogged"]:
        diff = sorted(set(lines_ok.items()) ^ set(accepted.items()))[:5]
        errors.append("workers' accepted lines differ from the journal: %s" % diff)
    for (e, i), _ in unlogged:  # trained and counted: their records count for the epoch
        if e in per_epoch:
            per_epoch[e][0] += min(shard_size, size - i * shard_size)
            per_epoch[e][1] = None  # the indices' sum of a shard without a line is unknown
    for e, (count, total) in per_epoch.items():
        if count != size or (total is not None and total != size * (size - 1) // 2):
            errors.append("epoch %d: %d records summing to %d, want %d summing to %d"
                          % (e, count, total, size, size * (size - 1) // 2))

    with open(job_dir + "/result.json") as f:
        result = json.load(f)
    d = result.get("data", {}).get("datasets", {}).get(dataset)
    if d is None:
        errors.append("result.json has no data for %s" % dataset)
    else:
        if d["state"] != "done":
            errors.append("result.json: dataset state %s" % d["state"])
        eps = d["epochs"]
        if len(eps) != epochs or any(ep["shards_done"] != nshards or ep["samples_done"] != size
                                     for ep in eps):
            errors.append("result.json: epochs incomplete: %s" % eps)
        if sum(r["shards_done"] for r in d["replicas"].values()) != epochs * nshards:
            errors.append("result.json: per-replica shards do not add up: %s" % d["replicas"])
        if d["late_reports_refused"] < opts["--late"]:
            errors.append("result.json: %d late reports refused, want >= %d"
                          % (d["late_reports_refused"], opts["--late"]))
        if refused < opts["--late"]:
            errors.append("workers saw %d refused reports, want >= %d" % (refused, opts["--late"]))
        if d["requeued"] < opts["--requeued"]:
            errors.append("result.json: %d shards re-queued, want >= %d"
                          % (d["requeued"], opts["--requeued"]))
    for e in errors:
        print(e)
    if errors:
        return 1
    print("verified %s: %d epochs x %d shards, each accepted once; %d refused late; "
          "%d re-queued" % (dataset, epochs, nshards, refused, d["requeued"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
