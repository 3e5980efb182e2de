#!/usr/bin/python3
"""The PyTorch peer of qtrain's CPU training benchmark: the same MNIST MLP (784-1024-1024-10, ReLU,
dropout 0.2/0.3/0.3), the same data (the IDX files qtrain reads, normalized the same way), batch,
optimizer (RMSProp lr 0.003, alpha 0.99, eps 1e-8) and thread count. Prints one JSON line:
{"samples_per_s": ..., "steps": ..., "final_loss": ...}. With --epochs E it trains E whole epochs
instead, on configs/mnist_mlp.yaml's schedule (linear warm-up over half an epoch, then cosine decay
to zero), and prints {"epoch_samples_per_s": [...], "train_s": ..., "test_accuracy": ...} (evaluation
not timed). With --device cuda the model and the whole dataset live on the GPU (tools/gpu_check.sh
runs it so against qtrain on the same GPU). Run by tools/bench/bench_mlp_cpu.py."""
import argparse
import json
import math
import time

import torch

import flush_denormal
from torch_mnist import load_mnist_train, mnist_mlp



def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=int, default=0, help="train whole epochs (0: --steps steps)")
    p.add_argument("--steps-per-epoch", type=int, default=0, help="with --epochs: qtrain's (default N // batch)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (model and data on that device)")
    flush_denormal.add_peer_flag(p)
    args = p.parse_args()
    flush_denormal.apply(args)
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)

    device = torch.device(args.device)
    x_all, y_all = load_mnist_train(args.data)
    x_all, y_all = x_all.to(device), y_all.to(device)

    model = mnist_mlp().to(device)
    opt = torch.optim.RMSprop(model.parameters(), lr=0.003, alpha=0.99, eps=1e-8)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    n = x_all.shape[0]
    if args.epochs > 0:
        return whole_run(args, model, opt, loss_fn, x_all, y_all)
    perm = torch.randperm(n, device=x_all.device)
    start = None
    loss = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            synchronize(x_all.device)
            start = time.perf_counter()
        i = (step * args.batch) % (n - args.batch)
        idx = perm[i:i + args.batch]
        x, y = x_all[idx], y_all[idx]  # the same gather-by-permutation a data loader does
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    synchronize(x_all.device)
    elapsed = time.perf_counter() - start
    print(json.dumps({"samples_per_s": args.steps * args.batch / elapsed, "steps": args.steps,
                      "final_loss": float(loss)}))


def synchronize(device):
    """GPU work is asynchronous: a timer read without waiting for it measures only the launches."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def whole_run(args, model, opt, loss_fn, x_all, y_all):
    n = x_all.shape[0]
    per_epoch = args.steps_per_epoch or n // args.batch
    total = per_epoch * args.epochs
    warmup = round(0.5 * per_epoch)

    def lr_at(step):  # qtrain's schedule: optim/schedule.cpp, warmup_start_factor 0, min_factor 0
        warm = step / warmup if step < warmup else 1.0
        t = min(max((step - warmup) / (total - warmup), 0.0), 1.0)
        return 0.003 * warm * 0.5 * (1.0 + math.cos(math.pi * t))

    rates, train_s = [], 0.0
    for epoch in range(args.epochs):
        perm = torch.randperm(n, device=x_all.device)
        synchronize(x_all.device)
        start = time.perf_counter()
        for s in range(per_epoch):
            for group in opt.param_groups:
                group["lr"] = lr_at(epoch * per_epoch + s)
            idx = perm[s * args.batch:(s + 1) * args.batch]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x_all[idx]), y_all[idx]).backward()
            opt.step()
        synchronize(x_all.device)
        elapsed = time.perf_counter() - start
        train_s += elapsed
        rates.append(min(per_epoch * args.batch, n) / elapsed)  # the last batch may be partial, as in qtrain
    x_test, y_test = load_mnist_train(args.data, "t10k")
    x_test, y_test = x_test.to(x_all.device), y_test.to(x_all.device)
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x_test[i:i + 1000]).argmax(1) == y_test[i:i + 1000]).sum())
                      for i in range(0, x_test.shape[0], 1000))
    print(json.dumps({"epoch_samples_per_s": rates, "train_s": train_s,
                      "test_accuracy": correct / x_test.shape[0]}))


if __name__ == "__main__":
    main()
