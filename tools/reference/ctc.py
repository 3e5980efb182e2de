#!/usr/bin/python3
"""Reference values of tests/layers/test_ctc.cpp's "ctc: matches PyTorch's ctc_loss": F.ctc_loss in
float64 on logits z[b, t, c] = 2 sin(1.3 b + 0.7 t + 0.9 c) (B=2, T=6, C=4, lengths [6, 5], targets
[1, 2, 2] and [3, 1], blank 0), and the gradient of the batch mean of the per-utterance losses (the
layer's normalization) with respect to z. Prints the two losses and z.grad at (b=0, t=2) and
(b=1, t=4) as the test pastes them; (b=1, t=5) is past sample 1's length, and its gradient is zero.

Usage: /usr/bin/python3 tools/reference/ctc.py   (Debian's python3-torch, PyTorch 1.13)
"""
import math

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def show(name, values):
    print("// " + name)
    print("{" + ", ".join("%.12f" % v for v in values) + "}")


def main():
    B, T, C = 2, 6, 4
    z = torch.tensor([[[2 * math.sin(1.3 * b + 0.7 * t + 0.9 * c) for c in range(C)] for t in range(T)]
                      for b in range(B)], requires_grad=True)
    lp = z.log_softmax(2).transpose(0, 1)
    loss = F.ctc_loss(lp, torch.tensor([1, 2, 2, 3, 1]), torch.tensor([6, 5]), torch.tensor([3, 2]), blank=0,
                      reduction="none")
    (loss.sum() / B).backward()
    show("per-utterance losses (loss_sum is their sum)", loss.tolist())
    show("g02", z.grad[0, 2].tolist())
    show("g14", z.grad[1, 4].tolist())
    show("z.grad[1, 5] (past the length)", z.grad[1, 5].tolist())


if __name__ == "__main__":
    main()
