#!/usr/bin/python3
"""gloo_allreduce.py - PyTorch's gloo all_reduce, the peer of dtrain's ring all-reduce for
bench/allreduce_bench.sh (issue 6).

Spawns --ranks processes (default 2) on this machine, gloo backend over loopback
(GLOO_SOCKET_IFNAME=lo), one torch thread each; the ranks meet through a file store in a
temporary directory (init_method file://..., so no rendezvous port can be taken by another
process between picking it and binding it).
For each size of --bytes: dist.all_reduce(SUM) in place on a float32 tensor, checked once
against the exact sum (rank r contributes r + 1 + (i % 7) at element i), then warmed up
(>= 2 calls and ~0.1 s) on zeros, then timed: rank 0 picks the count from the warm-up's
pace so the timed loop lasts >= --min-time seconds (at most --max-iters, at least 3) and
broadcasts it; every rank meets at a barrier, times its own loop, and the figure is the
largest mean over the ranks. Rank 0 prints one line per size:

    gloo ranks=P bytes=B avg_us=U busbw_GBps=G

with busbw = B * 2(P-1)/P / time (GB = 1e9 bytes), as bench/mpi_allreduce.c prints it.
OMP_NUM_THREADS and OPENBLAS_NUM_THREADS default to 1; OPENBLAS_CORETYPE is the caller's.

    python3 bench/gloo_allreduce.py [--ranks P] [--bytes 1K,1M,16M,64M] [--min-time S]
                                    [--max-iters N]
"""
import argparse, math, os, shutil, sys, tempfile, time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_size(s):
    t = s.strip().upper().rstrip("B")
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    if mul > 1:
        t = t[:-1]
    if not t.isdigit() or int(t) <= 0 or int(t) * mul % 4:
        raise argparse.ArgumentTypeError(
            "'%s': expected a positive multiple of 4 bytes (suffixes K, M, G)" % s)
    return int(t) * mul


def parse_sizes(s):
    return [parse_size(x) for x in s.split(",")]


def bench_one(rank, world, nbytes, a):
    n = nbytes // 4
    i7 = torch.arange(n, dtype=torch.int64) % 7
    buf = (i7 + (rank + 1)).to(torch.float32)
    dist.all_reduce(buf, op=dist.ReduceOp.SUM)
    want = (i7 * world + world * (world + 1) // 2).to(torch.float32)
    bad = torch.tensor([0 if torch.equal(buf, want) else 1], dtype=torch.int32)
    if bad.item():
        j = int((buf != want).nonzero()[0])
        print("gloo_allreduce: rank %d: element %d of %d is %g, expected %g"
              % (rank, j, n, buf[j].item(), want[j].item()), file=sys.stderr)
    dist.all_reduce(bad, op=dist.ReduceOp.MAX)
    if bad.item():
        return None
    del i7, want
    buf.zero_()

    warm = 0
    dist.barrier()
    t0 = time.perf_counter()
    more = torch.ones(1, dtype=torch.int32)
    while more.item():
        dist.all_reduce(buf)
        warm += 1
        if rank == 0:
            more[0] = int(warm < 2 or (time.perf_counter() - t0 < 0.1 and warm < a.max_iters))
        dist.broadcast(more, 0)
    per = (time.perf_counter() - t0) / warm
    iters = torch.tensor([min(a.max_iters, max(3, math.ceil(a.min_time / per) if per > 0 else a.max_iters))],
                         dtype=torch.int64)
    dist.broadcast(iters, 0)
    iters = int(iters.item())

    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    mean = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.all_reduce(mean, op=dist.ReduceOp.MAX)
    return mean.item()


def worker(rank, a, store):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                            world_size=a.ranks)
    world = dist.get_world_size()
    rc = 0
    for nbytes in a.bytes:
        t = bench_one(rank, world, nbytes, a)
        if t is None:
            if rank == 0:
                print("gloo_allreduce: wrong sum for %d bytes" % nbytes, file=sys.stderr)
            rc = 1
            break
        if rank == 0:
            bus = nbytes * 2.0 * (world - 1) / world / t / 1e9
            print("gloo ranks=%d bytes=%d avg_us=%.1f busbw_GBps=%.4f"
                  % (world, nbytes, t * 1e6, bus), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if rc:
        sys.exit(rc)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--bytes", type=parse_sizes, default=parse_sizes("1K,1M,16M,64M"))
    p.add_argument("--min-time", type=float, default=0.5)
    p.add_argument("--max-iters", type=int, default=20000)
    a = p.parse_args()
    if a.ranks < 1 or a.max_iters < 1 or not 0 <= a.min_time < 3600:
        p.error("--ranks and --max-iters must be >= 1, --min-time in [0, 3600)")
    tmp = tempfile.mkdtemp(prefix="gloo-allreduce-")
    try:
        mp.spawn(worker, args=(a, os.path.join(tmp, "store")), nprocs=a.ranks, join=True)
    except mp.ProcessRaisedException as e:
        print("gloo_allreduce: a rank failed: %s" % str(e).strip().splitlines()[-1], file=sys.stderr)
        return 1
    except mp.ProcessExitedException as e:
        print("gloo_allreduce: %s" % e, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
