#!/usr/bin/python3
"""PyTorch peer of qtrain's `sync.type: diloco` (issue 38): the MNIST MLP of configs/mnist_mlp.yaml
(tools/bench/torch_mnist.py) trained by every rank on its own shard with its own RMSProp (lr 0.003,
alpha 0.99, eps 1e-8) and the config's schedule (linear warm-up over half an epoch, then cosine to zero
over the run), syncing every H steps over gloo in one of two ways:

  --outer average   PyTorch's own PeriodicModelAverager (post-local SGD: the parameters averaged with
                    one allreduce every H steps; PyTorch 1.13 averages after the first step too)
  --outer diloco    DiLoCo written in PyTorch: the pseudo-gradient theta_global - theta_local averaged
                    with one fp32 allreduce, an outer SGD with Nesterov momentum (lr 0.7, momentum 0.9,
                    torch.optim.SGD) on theta_global, every replica continuing from theta_global: what
                    qtrain's diloco does with fp32 pseudo-gradients

Launched by mpirun (Open MPI's rank variables), e.g. on the testbed:

  tools/netbed.sh run --hosts 4 --rate 10mbit -- env GLOO_SOCKET_IFNAME=eth0 \\
      tools/bench/diloco_mlp_peer.py --master 10.77.0.1 --outer diloco --inner-steps 50 --epochs 2

Rank 0 prints one JSON line: samples/s (global, the whole run), seconds, the test accuracy of the
global parameters (diloco) or of the averaged replica (average) after the last sync."""
import argparse
import json
import math
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.model_averaging import averagers

import flush_denormal
from torch_mnist import init_peer_rank, load_mnist_train, mnist_mlp


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="data/mnist")
    p.add_argument("--master", required=True)
    p.add_argument("--port", type=int, default=29512)
    p.add_argument("--outer", choices=["average", "diloco"], default="diloco")
    p.add_argument("--inner-steps", type=int, default=50, help="H")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: the epochs)")
    p.add_argument("--batch", type=int, default=128, help="per rank")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    flush_denormal.add_peer_flag(p)
    args = p.parse_args()
    flush_denormal.apply(args)
    rank, world, x_all, y_all = init_peer_rank(args)
    shard = x_all.shape[0]
    steps_per_epoch = shard // args.batch
    total = args.epochs * steps_per_epoch
    steps = min(total, args.max_steps) if args.max_steps > 0 else total

    model = mnist_mlp()  # the same initial parameters on every rank (the seed)
    opt = torch.optim.RMSprop(model.parameters(), lr=0.003, alpha=0.99, eps=1e-8)
    warmup = 0.5 * steps_per_epoch

    def lr_factor(step):  # configs/mnist_mlp.yaml: linear warm-up over half an epoch, then cosine to 0
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1.0, total - warmup)))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    loss_fn = torch.nn.CrossEntropyLoss()
    params = list(model.parameters())
    if args.outer == "average":
        averager = averagers.PeriodicModelAverager(period=args.inner_steps, warmup_steps=0)
    else:
        global_params = [q.detach().clone() for q in params]
        outer = torch.optim.SGD(global_params, lr=0.7, momentum=0.9, nesterov=True)

    dist.barrier()
    start = time.perf_counter()
    perm = None
    for step in range(steps):
        if step % steps_per_epoch == 0:
            perm = torch.randperm(shard)
        i = (step % steps_per_epoch) * args.batch
        idx = perm[i:i + args.batch]
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x_all[idx]), y_all[idx]).backward()
        opt.step()
        sched.step()
        if args.outer == "average":
            averager.average_parameters(params)
        elif (step + 1) % args.inner_steps == 0:
            with torch.no_grad():
                deltas = [g - q for g, q in zip(global_params, params)]
                flat = torch.cat([d.flatten() for d in deltas])
                dist.all_reduce(flat)
                flat.div_(world)
                at = 0
                for g, d in zip(global_params, deltas):
                    g.grad = flat[at:at + d.numel()].view_as(d).clone()
                    at += d.numel()
                outer.step()
                for g, q in zip(global_params, params):
                    q.copy_(g)
    dist.barrier()
    elapsed = time.perf_counter() - start
    if rank == 0:
        x_test, y_test = load_mnist_train(args.data, "t10k")
        if args.outer == "diloco":
            with torch.no_grad():
                for g, q in zip(global_params, params):
                    q.copy_(g)
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(x_test[j:j + 1000]).argmax(1) == y_test[j:j + 1000]).sum())
                          for j in range(0, x_test.shape[0], 1000))
        print(json.dumps({"samples_per_s": steps * args.batch * world / elapsed, "seconds": elapsed,
                          "steps": steps, "outer": args.outer, "inner_steps": args.inner_steps,
                          "accuracy": correct / x_test.shape[0]}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
