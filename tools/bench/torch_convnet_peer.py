#!/usr/bin/python3
"""The PyTorch peer of qtrain's convnet CPU benchmark (tools/bench/bench_convnet_cpu.py). Two modes:

  model   Dettmers' CIFAR-10 network as in tools/bench/models/dettmers_cifar10_convnet.yaml (or, with
          --model resnet110, ResNet-110 as configs/cifar_resnet110.yaml with its SGD), trained on
          the same kind of SYNTHETIC RANDOM INPUT as `qtrain bench-model` (uniform [-1, 1), labels
          i mod 10), plain SGD lr 0.01: forward + cross-entropy + backward + step, median step time.
  layers  nn.Conv2d 3x3 padding 1 of ResNet's CIFAR stages, forward and backward (input gradient
          included) timed alone.

PyTorch has no locally connected layer and no cuda-convnet contrast normalization: they are written
here from F.unfold + torch.bmm and from average pooling, with exactly qtrain's definitions
(layers/locally_connected2d.h, layers/contrast_norm.h). Prints one JSON line."""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import flush_denormal


class LocallyConnected2d(nn.Module):
    """A convolution without weight sharing: weight (P, OC, C*k*k), bias (OC, OH, OW), as qtrain's."""

    def __init__(self, in_ch, out_ch, hw, k, padding):
        super().__init__()
        self.k, self.padding = k, padding
        self.oh = hw + 2 * padding - k + 1
        fan_in = in_ch * k * k
        bound = fan_in ** -0.5
        self.weight = nn.Parameter(torch.empty(self.oh * self.oh, out_ch, fan_in).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(out_ch, self.oh, self.oh).uniform_(-bound, bound))

    def forward(self, x):
        b = x.shape[0]
        cols = F.unfold(x, self.k, padding=self.padding)                  # (B, K, P)
        y = torch.bmm(cols.permute(2, 0, 1), self.weight.transpose(1, 2))  # (P, B, OC)
        return y.permute(1, 2, 0).reshape(b, -1, self.oh, self.oh) + self.bias


class ContrastNorm(nn.Module):
    """cuda-convnet's cnorm: y = x (k + alpha/size^2 box(d^2))^-beta, d = x - box(x)/size^2."""

    def __init__(self, size, alpha, beta, k=1.0):
        super().__init__()
        a = size // 2
        self.pads, self.size, self.alpha, self.beta, self.k = (a, size - 1 - a, a, size - 1 - a), size, alpha, beta, k

    def forward(self, x):
        # The mean over the size x size window (zero padded), as two separable 1-D average poolings:
        # the same values as one 2-D pooling, at 2*size instead of size^2 operations per element.
        s = self.size
        box = lambda v: F.avg_pool2d(F.avg_pool2d(F.pad(v, self.pads), (1, s), 1), (s, 1), 1)
        d = x - box(x)
        return x * (self.k + self.alpha * box(d * d)) ** (-self.beta)


def dettmers_convnet():
    return nn.Sequential(
        nn.Conv2d(3, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2), ContrastNorm(9, 0.001, 0.75),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2), ContrastNorm(9, 0.001, 0.75),
        LocallyConnected2d(64, 32, 7, 3, 1), nn.ReLU(), LocallyConnected2d(32, 32, 7, 3, 1), nn.ReLU(),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


class BasicBlock(nn.Module):
    """ResNet-110's block as configs/cifar_resnet110.yaml: conv-bn-relu-conv-bn, plus the identity or the
    option-A shortcut (subsample by 2, zero-pad the channels evenly), then relu."""

    def __init__(self, in_ch, out_ch, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.stride, self.pad = stride, out_ch - in_ch

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        s = x[:, :, ::self.stride, ::self.stride] if self.stride > 1 else x
        if self.pad:
            s = F.pad(s, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(y + s)


def resnet110():
    layers = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    in_ch = 16
    for out_ch, stride in [(16, 1), (32, 2), (64, 2)]:
        for b in range(18):
            layers.append(BasicBlock(in_ch, out_ch, stride if b == 0 else 1))
            in_ch = out_ch
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def time_model(args):
    torch.manual_seed(1)
    if args.model == "resnet110":  # the optimizer of configs/cifar_resnet110.yaml
        model = resnet110()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    else:
        model = dettmers_convnet()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.rand(args.batch, 3, 32, 32) * 2 - 1
    y = torch.arange(args.batch) % 10
    times = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    step = statistics.median(times)
    return {"step_ms": step * 1e3, "samples_per_s": args.batch / step, "final_loss": loss.item()}


def time_layers(args):
    out = []
    for ch, hw in [(16, 32), (32, 32), (64, 32), (32, 16), (64, 8)]:
        conv = nn.Conv2d(ch, ch, 3, padding=1)
        x = (torch.rand(args.batch, ch, hw, hw) * 2 - 1).requires_grad_()
        dy = torch.rand(args.batch, ch, hw, hw) * 2 - 1
        tf, tb = [], []
        for step in range(args.warmup + args.steps):
            t0 = time.perf_counter()
            y = conv(x)
            t1 = time.perf_counter()
            y.backward(dy)
            t2 = time.perf_counter()
            x.grad = None
            conv.zero_grad(set_to_none=True)
            if step >= args.warmup:
                tf.append(t1 - t0)
                tb.append(t2 - t1)
        out.append({"channels": ch, "hw": hw, "forward_ms": statistics.median(tf) * 1e3,
                    "backward_ms": statistics.median(tb) * 1e3})
    return {"layers": out}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["model", "layers"])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model", choices=["dettmers", "resnet110"], default="dettmers")
    flush_denormal.add_peer_flag(p)
    args = p.parse_args()
    flush_denormal.apply(args)
    torch.set_num_threads(args.threads)
    print(json.dumps(time_model(args) if args.mode == "model" else time_layers(args)))


if __name__ == "__main__":
    main()
