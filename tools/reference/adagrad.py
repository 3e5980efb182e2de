#!/usr/bin/python3
"""Reference values of tests/optim/test_optim.cpp's "adagrad with lr_decay, initial accumulator and
weight decay": torch.optim.Adagrad in float64, lr 0.1, lr_decay 0.5, weight_decay 0.1,
initial_accumulator_value 1, eps 1e-10, p0 = [1, 1, 1], gradients [4, -2, 1], [0, -1, 3], [1, -2, 0].
Prints the parameters after each step and the final accumulator (state "sum"), as Python's repr
(shortest round-trip float64), as the test pastes them.

Usage: /usr/bin/python3 tools/reference/adagrad.py   (Debian's python3-torch, PyTorch 1.13)
"""
import torch


def row(values):
    return "{" + ", ".join(repr(v) for v in values) + "}"


def main():
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    opt = torch.optim.Adagrad([p], lr=0.1, lr_decay=0.5, weight_decay=0.1, initial_accumulator_value=1.0, eps=1e-10)
    steps = []
    for g in ([4, -2, 1], [0, -1, 3], [1, -2, 0]):
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        steps.append(row(p.detach().tolist()))
    print("// parameters after steps 1, 2, 3")
    print("{" + ",\n ".join(steps) + "}")
    print("// adagrad.sum")
    print(row(opt.state[p]["sum"].tolist()))


if __name__ == "__main__":
    main()
