#!/usr/bin/python3
"""Reference values of tests/exchange/test_powersgd.cpp: two steps of PowerSGD on a world of 2 ranks,
computed with the functions of PyTorch's powerSGD_hook (its _orthogonalize, then the hook's products
and means) in float64, rank 2, warm start and error feedback on, epsilon 0.

One 6 x 5 gradient matrix per rank; rank r's gradient at step s is
  g[i][j] = sin(0.37 (5 i + j) + 0.13 i j + 1.3 r + 0.71 s) * (1 + 0.1 i),
and the first Q (5 x 2, before the hook orthogonalizes it) is Q0[j][k] = cos(0.9 j + 1.7 k + 0.3).
Per step it prints, as the test pastes them (row-major, Python's shortest round-trip floats):
  p_local[r]  M_r Q (6 x 2), before the all-reduce;  p_orth  the orthogonalized sum of the two (6 x 2);
  q_mean  the mean of M_r^T p_orth (5 x 2);  m_hat  p_orth q_mean^T (6 x 5);  residual[r]  M_r - m_hat.
M_r is the gradient plus the rank's residual of the previous step.

Usage: /usr/bin/python3 tools/reference/powersgd.py   (Debian's python3-torch, PyTorch 1.13)
"""
import math

import torch
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _orthogonalize

ROWS, COLS, RANK, WORLD = 6, 5, 2, 2


def gradient(step, r):
    return torch.tensor([[math.sin(0.37 * (COLS * i + j) + 0.13 * i * j + 1.3 * r + 0.71 * step) * (1 + 0.1 * i)
                          for j in range(COLS)] for i in range(ROWS)], dtype=torch.float64)


def flat(t):
    return "{" + ", ".join(repr(v) for v in t.reshape(-1).tolist()) + "}"


def main():
    q = torch.tensor([[math.cos(0.9 * j + 1.7 * k + 0.3) for k in range(RANK)] for j in range(COLS)],
                     dtype=torch.float64)
    residual = [torch.zeros(ROWS, COLS, dtype=torch.float64) for _ in range(WORLD)]
    for step in range(2):
        m = [gradient(step, r) + residual[r] for r in range(WORLD)]
        qb = q.clone().unsqueeze(0)
        _orthogonalize(qb, 0)  # the hook orthogonalizes the warm-start (or drawn) Q first
        p_local = [torch.bmm(m[r].unsqueeze(0), qb)[0] for r in range(WORLD)]
        p = (p_local[0] + p_local[1]).unsqueeze(0)  # all-reduce: the sum
        _orthogonalize(p, 0)
        q_local = [torch.bmm(m[r].t().unsqueeze(0), p)[0] for r in range(WORLD)]
        q = (q_local[0] + q_local[1]) / WORLD  # all-reduce, then div_(world_size)
        m_hat = torch.bmm(p, q.t().unsqueeze(0))[0]
        residual = [m[r] - m_hat for r in range(WORLD)]
        print(f"// step {step}")
        for r in range(WORLD):
            print(f"p_local[{r}] = {flat(p_local[r])}")
        print(f"p_orth = {flat(p[0])}")
        print(f"q_mean = {flat(q)}")
        print(f"m_hat = {flat(m_hat)}")
        for r in range(WORLD):
            print(f"residual[{r}] = {flat(residual[r])}")


if __name__ == "__main__":
    main()
