#!/usr/bin/python3
"""torch_train.py - the PyTorch peer of `dtrain train` for bench/train_bench.sh.

Trains the same model (Fashion-MNIST MLP 784-256-128-10 or the CNN of
examples/fashion_mnist_cnn.yaml) with the same optimizer (Adam, lr 1e-3) and batch size on
the same data, in the same kind of loop (index an in-memory float32 array by a shuffled
permutation, forward, loss, backward, step), and prints one JSON line with samples/s.
Thread settings come from the command line (torch) and OPENBLAS_NUM_THREADS (set by the
caller before Python starts).
"""
import argparse, gzip, json, os, sys, time

import numpy as np
import torch
import torch.nn as nn


def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def model_for(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "cnn"], required=True)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=400, help="timed steps (after 20 warm-up)")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--flush-denormal", action="store_true",
                    help="torch.set_flush_denormal(True), as dtrain's kernels run")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.flush_denormal and not torch.set_flush_denormal(True):
        sys.exit("torch.set_flush_denormal is not supported on this CPU")
    torch.manual_seed(0)
    x = load_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    y = load_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    x = torch.from_numpy(x.reshape(-1, 1, 28, 28))
    y = torch.from_numpy(y)
    model = model_for(a.model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lossf = nn.CrossEntropyLoss()
    perm = torch.randperm(x.shape[0])
    n_batches = x.shape[0] // a.batch

    def step(i):
        idx = perm[(i % n_batches) * a.batch:(i % n_batches + 1) * a.batch]
        xb, yb = x[idx], y[idx]
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    for i in range(20):
        step(i)
    t0 = time.perf_counter()
    for i in range(a.steps):
        step(20 + i)
    dt = time.perf_counter() - t0
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "model": a.model,
                      "torch_threads": a.threads,
                      "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
                      "flush_denormal": a.flush_denormal, "batch": a.batch, "steps": a.steps,
                      "samples_per_sec": a.steps * a.batch / dt}))


if __name__ == "__main__":
    sys.exit(main())
