#!/usr/bin/python3
"""Reference values of tests/layers/test_conv_layers.cpp: PyTorch's conv2d, max/avg pooling with
padding and ceil_mode, local_response_norm, and contrast_norm.h's definition written in PyTorch ops,
in float64 on the test's inputs, printed as the test pastes them (10 significant digits).

Usage: /usr/bin/python3 tools/reference/conv_layers.py   (Debian's python3-torch, PyTorch 1.13)
"""
import math

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def seq(n, f):
    return torch.tensor([f(i) for i in range(n)])


def xs(shape):
    """The test's seq<T>(shape, sin_input)."""
    return seq(math.prod(shape), lambda i: 1.5 * math.sin(0.37 * i + 0.1)).reshape(shape)


def cnorm(x, size, alpha, beta, k):
    """contrast_norm.h: x * (k + alpha * mean over the window of (x - window mean)^2)^-beta, the
    window [p - size//2, p + size - 1 - size//2] zero-padded at the borders."""
    a = size // 2
    pads = (a, size - 1 - a, a, size - 1 - a)
    box = lambda v: F.avg_pool2d(F.pad(v, pads), size, 1)
    d = x - box(x)
    return x * (k + alpha * box(d * d)) ** (-beta)


def show(name, t):
    values = ["%.10g" % v for v in t.flatten().tolist()]
    print("// " + name)
    print("{" + ",\n ".join(", ".join(values[i:i + 6]) for i in range(0, len(values), 6)) + "}")


def main():
    x = xs((2, 2, 4, 3))
    w = seq(24, lambda i: 0.5 * math.cos(0.23 * i)).reshape(2, 2, 3, 2)
    b = seq(2, lambda i: 0.1 * i - 0.1)
    show("conv2d", F.conv2d(x, w, b, stride=(2, 1), padding=(1, 1)))

    x = xs((1, 2, 6, 5))
    show("pool max", F.max_pool2d(x, 3, 2, 1, ceil_mode=True))
    show("pool avg, count_include_pad", F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True))
    show("pool avg, count_include_pad false", F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False))

    x = xs((1, 4, 2, 2))
    show("lrn size 3", F.local_response_norm(x, 3, alpha=0.2, beta=0.75, k=1.0))
    show("lrn size 4", F.local_response_norm(x, 4, alpha=0.2, beta=0.75, k=1.0))

    x = xs((1, 2, 4, 5))
    show("contrast_norm size 3", cnorm(x, 3, 0.8, 0.75, 1.0))
    show("contrast_norm size 2", cnorm(x, 2, 0.8, 0.75, 1.0))


if __name__ == "__main__":
    main()
