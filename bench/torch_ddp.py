#!/usr/bin/python3
"""torch_ddp.py - the PyTorch DistributedDataParallel peer of dtrain's parameter-server job
for bench/ps_bench.sh (issue 5).

Spawns --world-size processes (default 2) on this machine, gloo backend over loopback
(MASTER_ADDR=127.0.0.1, a free MASTER_PORT), one torch thread each. Every process trains the
Fashion-MNIST MLP 784-256-128-10 (relu) with Adam lr 1e-3 and batch --batch (per process) on
its DistributedSampler-style share of the 60k training images (one permutation seeded by
the epoch, shared by all ranks; rank r takes positions r, r+W, r+2W, ...), in the loop of
bench/torch_train.py: index an in-memory float32 array, forward, loss, backward (DDP
all-reduces the gradients), step. After --warmup steps (not timed) every rank meets at a
barrier, runs --steps steps, meets at a barrier again; rank 0 prints

    ddp_gloo_samples_per_sec <aggregate>

(world * steps * batch / seconds between the barriers) and one JSON line with the details.
OPENBLAS_NUM_THREADS and OMP_NUM_THREADS default to 1 (set before torch is imported, so
every spawned process has them); OPENBLAS_CORETYPE is whatever the caller set.
"""
import argparse, gzip, json, os, socket, sys, time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback: no hostname lookup needed

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def shard(n, world, rank, epoch, seed):
    """DistributedSampler(shuffle=True, drop_last=False): pad to a multiple of world, stride."""
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    idx = torch.randperm(n, generator=g)
    total = -(-n // world) * world
    if total > n:
        idx = torch.cat([idx, idx[:total - n]])
    return idx[rank:total:world]


def worker(rank, a, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ["WORLD_SIZE"] = str(a.world_size)
    os.environ["RANK"] = str(rank)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=a.world_size)
    try:
        torch.manual_seed(0)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
        x = load_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
        y = load_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).astype(np.int64)
        x = torch.from_numpy(x.reshape(-1, 1, 28, 28))
        y = torch.from_numpy(y)
        model = nn.parallel.DistributedDataParallel(mlp())
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        lossf = nn.CrossEntropyLoss()
        n = x.shape[0]
        per_rank = len(shard(n, a.world_size, rank, 0, 0))
        n_batches = per_rank // a.batch  # drop the last partial batch, as dtrain does
        state = {"epoch": -1, "idx": None}

        def step(i):
            epoch, b = divmod(i, n_batches)
            if epoch != state["epoch"]:
                state["epoch"], state["idx"] = epoch, shard(n, a.world_size, rank, epoch, a.seed)
            idx = state["idx"][b * a.batch:(b + 1) * a.batch]
            xb, yb = x[idx], y[idx]
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(xb), yb)
            loss.backward()
            opt.step()
            return loss

        for i in range(a.warmup):
            step(i)
        dist.barrier()
        t0 = time.perf_counter()
        for i in range(a.steps):
            loss = step(a.warmup + i)
        dist.barrier()
        dt = time.perf_counter() - t0
        if rank == 0:
            rate = a.world_size * a.steps * a.batch / dt
            print(json.dumps({"peer": "pytorch-ddp", "backend": "gloo", "torch": torch.__version__,
                              "model": "mlp", "world_size": a.world_size, "torch_threads": 1,
                              "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                              "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "unset"),
                              "batch_per_process": a.batch, "steps_per_process": a.steps,
                              "seconds": round(dt, 4), "last_loss": round(float(loss), 4),
                              "samples_per_sec": rate}), flush=True)
            print("ddp_gloo_samples_per_sec %.1f" % rate, flush=True)
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=2, help="processes")
    ap.add_argument("--batch", type=int, default=64, help="batch size per process")
    ap.add_argument("--steps", type=int, default=1000, help="timed steps per process")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps per process first")
    ap.add_argument("--seed", type=int, default=1, help="seed of the data order")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    if a.world_size < 1 or a.batch < 1 or a.steps < 1 or a.warmup < 0:
        ap.error("--world-size, --batch and --steps must be positive, --warmup non-negative")
    mp.spawn(worker, args=(a, free_port()), nprocs=a.world_size, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
