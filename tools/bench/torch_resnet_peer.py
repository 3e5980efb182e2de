#!/usr/bin/python3
"""The PyTorch peer of `qtrain bench-model configs/cifar_resnet110.yaml --device cuda`: the same
CIFAR ResNet-110 (3x3 conv with 16 filters, 3 stages of 18 basic blocks of 16/32/64 filters, option-A
shortcuts: subsample by 2 and zero-pad the channels, global average pooling, 10-way dense), the same
synthetic input (normal values, random labels), batch, optimizer (SGD lr 0.1, momentum 0.9, weight
decay 1e-4) and timing (median step after warm-up steps, each step waited for on the GPU).

It times four settings in one process, one JSON line each: cuDNN's math as qtrain's (fp32, no TF32)
and PyTorch's default on this GPU (TF32 convolutions), each with cudnn.benchmark off (PyTorch's
default: heuristics pick the algorithms, as qtrain does) and on (it times the algorithms first).
Run by tools/gpu_check.sh."""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.pad = cout - cin
        self.stride = stride

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        s = x
        if self.stride != 1 or self.pad:  # option A, as configs/cifar_resnet110.yaml's pad_channels
            s = F.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, 0, self.pad))
        return F.relu(y + s)


def resnet110():
    layers = [torch.nn.Conv2d(3, 16, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.ReLU()]
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for b in range(18):
            layers.append(Block(cin, cout, stride if b == 0 else 1))
            cin = cout
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10)]
    return torch.nn.Sequential(*layers)


def time_steps(args, tf32, benchmark):
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = benchmark
    torch.manual_seed(1)
    dev = torch.device("cuda")
    model = resnet110().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(args.batch, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    model.train()
    times = []
    for step in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    ms = 1e3 * statistics.median(times)
    return {"model": "cifar_resnet110", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "batch": args.batch, "tf32": tf32, "cudnn_benchmark": benchmark, "steps": args.steps,
            "step_ms": ms, "samples_per_s": args.batch / ms * 1e3}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    for tf32 in (False, True):
        for benchmark in (False, True):
            print(json.dumps(time_steps(args, tf32, benchmark)), flush=True)


if __name__ == "__main__":
    main()
