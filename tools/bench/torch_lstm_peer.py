#!/usr/bin/python3
"""PyTorch peer of the AN4 LSTM benchmark (tools/bench/bench_lstm_cpu.py): the model of
configs/an4_lstm.yaml (bidirectional LSTM, time-distributed linear, CTC with reduction sum / batch,
Adam, gradient clipping) trained for --steps steps on batches with AN4's real utterance and transcription
lengths (frames = 1 + (samples - 400) // 160, as qtrain's 25 ms / 10 ms filterbank) and random features.
Prints {"samples_per_s": ...} measured from the first step to the last."""
import argparse
import json
import os
import random
import re
import time

import torch

import flush_denormal


def an4_lengths(folder):
    ids = [l.strip() for l in open(os.path.join(folder, "etc/an4_train.fileids")) if l.strip()]
    texts = [l for l in open(os.path.join(folder, "etc/an4_train.transcription")) if l.strip()]
    out = []
    for fid, text in zip(ids, texts):
        samples = os.path.getsize(os.path.join(folder, "wav", fid + ".raw")) // 2
        words = [w for w in re.sub(r"\([^)]*\)\s*$", "", text).split() if w not in ("<s>", "</s>")]
        out.append((1 + (samples - 400) // 160, len(" ".join(words))))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    flush_denormal.add_peer_flag(p)
    args = p.parse_args()
    flush_denormal.apply(args)
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    random.seed(1)
    lengths = an4_lengths(args.data)
    random.shuffle(lengths)
    lstm = torch.nn.LSTM(40, args.hidden, num_layers=args.layers, bidirectional=True, batch_first=True)
    fc = torch.nn.Linear(2 * args.hidden, 28)
    params = list(lstm.parameters()) + list(fc.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    ctc = torch.nn.CTCLoss(blank=0, reduction="sum", zero_infinity=True)
    batches = []
    for s in range(args.steps):
        chunk = [lengths[(s * args.batch + i) % len(lengths)] for i in range(args.batch)]
        frames = torch.tensor([c[0] for c in chunk])
        tl = torch.tensor([c[1] for c in chunk])
        x = torch.randn(args.batch, int(frames.max()), 40)
        targets = torch.randint(1, 28, (int(tl.sum()),))
        batches.append((x, frames, targets, tl))
    start = time.perf_counter()
    for x, frames, targets, tl in batches:
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, frames, batch_first=True, enforce_sorted=False)
        y, _ = lstm(packed)
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True)
        logp = fc(y).log_softmax(2).transpose(0, 1)
        loss = ctc(logp, targets, frames, tl) / args.batch
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 400.0)
        opt.step()
    elapsed = time.perf_counter() - start
    print(json.dumps({"samples_per_s": args.steps * args.batch / elapsed}))


if __name__ == "__main__":
    main()
