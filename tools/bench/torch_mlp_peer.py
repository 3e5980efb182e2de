#!/usr/bin/python3
"""The PyTorch peer of qtrain's CPU training benchmark: the same MNIST MLP (784-1024-1024-10, ReLU,
dropout 0.2/0.3/0.3), the same data (the IDX files qtrain reads, normalized the same way), batch,
optimizer (RMSProp lr 0.003, alpha 0.99, eps 1e-8) and thread count. Prints one JSON line:
{"samples_per_s": ..., "steps": ..., "final_loss": ...}. Run by tools/bench/bench_mlp_cpu.py."""
import argparse
import json
import time

import torch

from torch_mnist import load_mnist_train, mnist_mlp



def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)

    x_all, y_all = load_mnist_train(args.data)

    model = mnist_mlp()
    opt = torch.optim.RMSprop(model.parameters(), lr=0.003, alpha=0.99, eps=1e-8)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    n = x_all.shape[0]
    perm = torch.randperm(n)
    start = None
    loss = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            start = time.perf_counter()
        i = (step * args.batch) % (n - args.batch)
        idx = perm[i:i + args.batch]
        x, y = x_all[idx], y_all[idx]  # the same gather-by-permutation a data loader does
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    elapsed = time.perf_counter() - start
    print(json.dumps({"samples_per_s": args.steps * args.batch / elapsed, "steps": args.steps,
                      "final_loss": float(loss)}))


if __name__ == "__main__":
    main()
