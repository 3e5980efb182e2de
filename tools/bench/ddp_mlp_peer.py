#!/usr/bin/python3
"""PyTorch DDP peer of qtrain's data-parallel benchmark: the MNIST MLP of configs/mnist_mlp.yaml
(784-1024-1024-10, ReLU, dropout 0.2/0.3/0.3, RMSProp lr 0.003), one process per rank, gloo over TCP,
optionally with DDP's fp16 compression hook, its PowerSGD hook (powerSGD_hook with PowerSGDState:
--powersgd-rank, --powersgd-start-iter; error feedback and warm start on, PyTorch's defaults) or
qtrain's hook (qtrain.torch.hook, docs/python.md: --hook qtrain --method qsgd:bits=4 [--algorithm A];
needs PYTHONPATH=build/python). Launched by mpirun (it reads Open MPI's rank variables),
e.g. on the 1 Gbit/s testbed:

  tools/netbed.sh run --hosts 4 --rate 1gbit -- env OPENBLAS_NUM_THREADS=1 tools/bench/ddp_mlp_peer.py \
      --master 10.77.0.1 --hook fp16

(OPENBLAS_NUM_THREADS as --threads: Debian's PyTorch does its GEMMs in OpenBLAS, which
torch.set_num_threads does not reach; its extra threads poll on the cores the other ranks need.)

--steps N times N steps; --epochs E trains E whole epochs of each rank's shard (the config's cosine
schedule is not applied: a constant learning rate, as the throughput runs) and then evaluates the test
set. Rank 0 prints one JSON line: {"samples_per_s": global samples/s over the timed steps, "accuracy":
test accuracy after --epochs (else absent), ...}."""
import argparse
import json
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

import flush_denormal
from torch_mnist import init_peer_rank, load_mnist_train, mnist_mlp



def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="data/mnist")
    p.add_argument("--master", required=True, help="address of rank 0 (on the testbed: 10.77.0.1)")
    p.add_argument("--port", type=int, default=29511)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=128, help="per rank")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--hook", choices=["none", "fp16", "powersgd", "qtrain", "local"], default="none",
                   help="local: a hook that exchanges nothing (each rank keeps its own gradient): the "
                        "ceiling that compute alone sets")
    p.add_argument("--method", default="qsgd:bits=4", help="--hook qtrain: qtrain's method")
    p.add_argument("--algorithm", default="auto", help="--hook qtrain: qtrain's exchange algorithm")
    p.add_argument("--exchange-bucket-mb", type=float, default=0.0,
                   help="--hook qtrain: the exchange's own buckets, exchanged under backward (0: all at once "
                        "at DDP's last bucket)")
    p.add_argument("--epochs", type=int, default=0, help="whole epochs, then the test accuracy (0: --steps)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bucket-mb", type=float, default=25, help="DDP's bucket_cap_mb (its default 25)")
    p.add_argument("--powersgd-rank", type=int, default=1, help="matrix_approximation_rank")
    p.add_argument("--powersgd-start-iter", type=int, default=1000,
                   help="start_powerSGD_iter: plain allreduce before this step (PyTorch requires > 1)")
    flush_denormal.add_peer_flag(p)
    args = p.parse_args()
    flush_denormal.apply(args)
    rank, world, x_all, y_all = init_peer_rank(args)
    shard = x_all.shape[0]

    model = mnist_mlp()
    if args.hook == "powersgd":
        # One bucket for the whole gradient: with two (DDP makes its first bucket 1 MB), the hook's
        # asynchronous allreduces of the two buckets interleave differently on different ranks, and
        # gloo aborts ("op.preamble.length <= op.nbytes") in Debian's PyTorch 1.13.
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.bucket_mb * 2**20)
    ddp = DDP(model, bucket_cap_mb=args.bucket_mb)
    if args.hook == "fp16":
        ddp.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    elif args.hook == "local":
        def local_hook(_, bucket):
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut
        ddp.register_comm_hook(None, local_hook)
    elif args.hook == "qtrain":
        import qtrain.torch
        state, hook = qtrain.torch.hook(args.method, ddp, algorithm=args.algorithm, seed=args.seed,
                                        bucket_mb=args.exchange_bucket_mb)
        ddp.register_comm_hook(state, hook)
    elif args.hook == "powersgd":
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                       start_powerSGD_iter=args.powersgd_start_iter)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    opt = torch.optim.RMSprop(ddp.parameters(), lr=0.003, alpha=0.99, eps=1e-8)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps_per_epoch = shard // args.batch
    steps = args.epochs * steps_per_epoch if args.epochs > 0 else args.steps
    perm = torch.randperm(shard)
    dist.barrier()
    start = time.perf_counter()
    for step in range(steps):
        if args.epochs > 0 and step % steps_per_epoch == 0:
            perm = torch.randperm(shard)  # a new order each epoch, from the seed: the same on every rank
        i = (step % steps_per_epoch) * args.batch if args.epochs > 0 else (step * args.batch) % (shard - args.batch)
        idx = perm[i:i + args.batch]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x_all[idx]), y_all[idx])
        loss.backward()
        opt.step()
    dist.barrier()
    elapsed = time.perf_counter() - start
    result = {"samples_per_s": steps * args.batch * world / elapsed, "ranks": world, "hook": args.hook,
              "steps": steps, "final_loss": float(loss), "seconds": elapsed}
    if args.hook == "qtrain":
        result["method"] = args.method
        result.update({k: v / steps for k, v in state.take_stats().items()})  # per step, this rank
    if args.epochs > 0 and rank == 0:
        x_test, y_test = load_mnist_train(args.data, "t10k")
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(x_test[j:j + 1000]).argmax(1) == y_test[j:j + 1000]).sum())
                          for j in range(0, x_test.shape[0], 1000))
        result["accuracy"] = correct / x_test.shape[0]
    if rank == 0:
        print(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
