#!/usr/bin/python3
"""Reference output of tests/layers/test_lstm.cpp's "lstm: matches PyTorch nn.LSTM": a 2-layer
bidirectional nn.LSTM(3, 2) in float64 on a packed batch of lengths [4, 3], every parameter (in
named_parameters() order, flattened) 0.5 sin(0.37 k + 0.11), x[b, t, f] = cos(0.5 b + 0.3 t + 0.7 f).
Prints the padded output y[b, t, :] (zeros past a sample's length) as the test pastes it.

Usage: /usr/bin/python3 tools/reference/lstm.py   (Debian's python3-torch, PyTorch 1.13)
"""
import math

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.set_default_dtype(torch.float64)


def main():
    m = nn.LSTM(3, 2, num_layers=2, bidirectional=True, batch_first=True)
    k = 0
    with torch.no_grad():
        for _, p in m.named_parameters():
            flat = p.view(-1)
            for i in range(flat.numel()):
                flat[i] = 0.5 * math.sin(0.37 * k + 0.11)
                k += 1
    assert k == 240
    B, T, F = 2, 4, 3
    x = torch.tensor([[[math.cos(0.5 * b + 0.3 * t + 0.7 * f) for f in range(F)] for t in range(T)] for b in range(B)])
    packed = pack_padded_sequence(x, torch.tensor([4, 3]), batch_first=True, enforce_sorted=False)
    y, _ = pad_packed_sequence(m(packed)[0], batch_first=True, total_length=T)
    values = ["0" if v == 0 else "%.12f" % v for v in y.detach().flatten().tolist()]
    print("// expected")
    print("{" + ",\n ".join(", ".join(values[i:i + 6]) for i in range(0, len(values), 6)) + "}")


if __name__ == "__main__":
    main()
