"""The ranks of the DDP hook tests (test_hook.py): each function runs in one process of a gloo group on
localhost, started by torch.multiprocessing, and raises (failing the test) when a check fails."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import qtrain.torch as qt
from qtrain import _qtrain


def init(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    # Loopback, whatever the host name resolves to (a machine whose name has no address would fail).
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def model():
    torch.manual_seed(0)  # the same initial parameters on every rank
    return torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.ReLU(), torch.nn.Linear(96, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 10))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own data
    return torch.randn(16, 48, generator=g), torch.randint(0, 10, (16,), generator=g)


class Recorder:
    """Wraps qtrain's hook: keeps each parameter's gradient before the exchange, per step (train() keeps
    the averaged ones: the hook completes every bucket at the last one)."""

    def __init__(self):
        self.before, self.after = {}, {}
        self.buckets = {}  # step -> the parameters of each bucket, in the order DDP handed them over

        def recording_qtrain_hook(state, bucket):  # DDP wants a function (it reads its name)
            step = state.step
            self.buckets.setdefault(step, []).append([id(p) for p in bucket.parameters()])
            for p, g in zip(bucket.parameters(), bucket.gradients()):
                self.before[(step, id(p))] = g.detach().clone()
            return qt.qtrain_hook(state, bucket)

        self.hook = recording_qtrain_hook


def train(method, algorithm, steps, rank, pass_model=True, bucket_mb=0.01, small_tensors="with_quantized",
          exchange_bucket_mb=0.0):
    m = model()
    # 0.01 MB: several buckets, rebuilt after the first iteration.
    ddp = DDP(m, bucket_cap_mb=bucket_mb)
    state, _ = qt.hook(method, ddp if pass_model else None, algorithm=algorithm, seed=7, min_numel=100,
                       small_tensors=small_tensors, bucket_mb=exchange_bucket_mb)
    rec = Recorder()
    ddp.register_comm_hook(state, rec.hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for step in range(steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        for p in m.parameters():
            rec.after[(step, id(p))] = p.grad.detach().clone()
        opt.step()
    return m, state, rec


def params_digest(m):
    return torch.cat([p.detach().flatten() for p in m.parameters()])


def check_replicas(m, world):
    mine = params_digest(m)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    for r, other in enumerate(every):
        assert torch.equal(other, mine), f"rank {r}'s parameters differ from this rank's"


def equivalence(rank, world, port, method, algorithm, pass_model, small_tensors="with_quantized", exchange_bucket_mb=0.0):
    """The hook's averaged gradients equal qtrain's GradientExchange's for the same local gradients, tensors,
    seed and steps, bit for bit; the replicas stay identical."""
    init(rank, world, port)
    steps = 4
    m, state, rec = train(method, algorithm, steps, rank, pass_model, small_tensors=small_tensors,
                          exchange_bucket_mb=exchange_bucket_mb)
    check_replicas(m, world)
    # The reference: qtrain's exchange fed every step's local gradients at once, as qtrain's trainer does.
    names, shapes = state._names, state._shapes
    ref = _qtrain.Exchange(qt._ProcessGroupCollectives(dist.group.WORLD), names, shapes, method, algorithm=algorithm,
                           seed=7, min_numel=100, small_tensors=state.small_tensors)
    first = 0 if pass_model else 1  # without the model, the first iteration is a plain allreduce
    compared = 0
    for step in range(first, steps):
        # Every tensor at once, as the hook exchanges a step's buckets.
        ids = sorted(state._index[p] for bucket in rec.buckets[step] for p in bucket)
        params = {state._index[p]: p for bucket in rec.buckets[step] for p in bucket}
        grads = [rec.before[(step, params[i])].flatten() for i in ids]
        flat = torch.cat(grads).contiguous()
        offsets, at = [], 0
        for g in grads:
            offsets.append(at)
            at += g.numel()
        ref.reduce([(ids, flat.numpy(), offsets)], step)
        for i, g, o in zip(ids, grads, offsets):
            got = rec.after[(step, params[i])].flatten()
            want = flat[o:o + g.numel()]
            assert torch.equal(got, want), \
                f"step {step}, {names[i]}: the hook's result differs from the exchange's " \
                f"(max |diff| {float((got - want).abs().max())})"
            compared += 1
    assert compared > 0
    if rank == 0:
        print(f"{method} {algorithm}: {compared} tensors bit for bit; {state.describe().count(chr(10))} tensors")
    dist.destroy_process_group()


def small_tensor_modes(rank, world, port, method, algorithm):
    """The fp32 gradients sent in the quantized ones' collectives (small_tensors="with_quantized") and in
    an allreduce of their own ("native") are the same fp32 sums in rank order, and the quantized ones
    keep their streams: the two trainings give the same parameters bit for bit."""
    init(rank, world, port)
    carried, state, _ = train(method, algorithm, 4, rank, small_tensors="with_quantized")
    native, native_state, _ = train(method, algorithm, 4, rank, small_tensors="native")
    assert "allreduce" in native_state.describe() and state.describe() != native_state.describe(), \
        "the modes should plan the fp32 tensors differently:\n" + state.describe()
    for (name, a), b in zip(carried.named_parameters(), native.parameters()):
        assert torch.equal(a, b), f"{name}: with_quantized and native differ (max |diff| {float((a - b).abs().max())})"
    dist.destroy_process_group()


def resume(rank, world, port, method, algorithm):
    """A run stopped after k steps and resumed from the hook's state_dict (and the model's and optimizer's)
    continues bit for bit as the uninterrupted run."""
    init(rank, world, port)
    # Several buckets: after a restart DDP's buckets are its first iteration's, not the rebuilt ones
    # of the uninterrupted run; the hook's results do not depend on them.
    whole, _, _ = train(method, algorithm, 6, rank)
    first, state, _ = train(method, algorithm, 3, rank)
    saved = state.state_dict()
    assert saved["step"] == 3 and saved["exchange"], "the hook saved no state"
    # The second half: a fresh model with the first half's parameters, a fresh hook with its state.
    m = model()
    m.load_state_dict(first.state_dict())
    ddp = DDP(m, bucket_cap_mb=0.01)
    st, hk = qt.hook(method, ddp, algorithm=algorithm, seed=7, min_numel=100)
    st.load_state_dict(saved)
    ddp.register_comm_hook(st, hk)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)  # plain SGD keeps no state of its own
    for step in range(3, 6):
        x, y = batch(rank, step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    assert torch.equal(params_digest(m), params_digest(whole)), "the resumed run differs from the uninterrupted one"
    # A state of another method is refused with the key that differs.
    other, _ = qt.hook("fp16", None, seed=7, min_numel=100)
    try:
        other.load_state_dict(saved)
        raise AssertionError("a state of another method was accepted")
    except ValueError as e:
        assert "method" in str(e), str(e)
    dist.destroy_process_group()


def collectives(rank, world, port):
    """The hook's transport (python/src/python_collectives_comm.h: every collective built on
    all_to_all) against torch.distributed's own collectives and against what each rank knows the others
    sent: sums of integers (exact in any order) as gloo's allreduce gives them, bf16 as the fp32 sum
    rounded once, and byte blocks of every length from 0 up, the capacities padded with slack."""
    init(rank, world, port)
    c = _qtrain._Collectives(qt._ProcessGroupCollectives(dist.group.WORLD))
    g = torch.Generator().manual_seed(rank)
    for n in (1, world - 1, world, world + 1, 1000, 4099):
        for dtype in (torch.float32, torch.float64, torch.float16):
            values = torch.randint(-50, 50, (n,), generator=g).to(dtype)
            want = values.clone()
            dist.all_reduce(want)
            got = values.clone()
            c.all_reduce(got.numpy())
            assert torch.equal(got, want), f"all_reduce of {n} {dtype}: {got[:8]} against gloo's {want[:8]}"
        # bf16: the fp32 sum of the ranks' values, rounded to bf16 once.
        wide = torch.randn(n, generator=g).to(torch.bfloat16).float()
        every = [torch.empty_like(wide) for _ in range(world)]
        dist.all_gather(every, wide)
        want = torch.zeros(n)
        for v in every:
            want += v
        bits = wide.to(torch.bfloat16).view(torch.int16).numpy().view("uint16").copy()
        c.all_reduce(bits, bf16=True)
        got = torch.from_numpy(bits.view("int16")).view(torch.bfloat16)
        assert torch.equal(got, want.to(torch.bfloat16)), f"bf16 all_reduce of {n}"

    def payload(s, d, length):  # what rank s sends rank d: `length` bytes that name both
        return bytes((7 * s + 3 * d + i) % 251 for i in range(length))

    length = lambda s, d: (5 * s + 3 * d) % 9  # some empty
    ranks = range(world)
    assert c.all_gather_u64(1000 + rank) == [1000 + s for s in ranks]
    assert c.all_gather(payload(rank, 0, length(rank, 0))) == [payload(s, 0, length(s, 0)) for s in ranks]
    got = c.all_to_all([payload(rank, d, length(rank, d)) for d in ranks])
    assert got == [payload(s, rank, length(s, rank)) for s in ranks], "all_to_all"
    # Capacities: rank d expects at most length(s, d) + s + d from rank s; rank s sends it length(s, d).
    got = c.all_to_all_streamed([payload(rank, d, length(rank, d)) for d in ranks],
                                [length(rank, d) + rank + d for d in ranks],
                                [length(s, rank) + s + rank for s in ranks])
    assert got == [payload(s, rank, length(s, rank)) for s in ranks], "all_to_all_streamed"
    got = c.all_gather_streamed(payload(rank, 0, length(rank, 0)), [length(s, 0) + s for s in ranks])
    assert got == [payload(s, 0, length(s, 0)) for s in ranks], "all_gather_streamed"
    dist.destroy_process_group()


def serve(rank, conn):
    """One rank of test_hook.py's RankPool: runs the functions above, one test after another, in a process
    that imported torch once. Each request is (name, args); the answer None, or the traceback."""
    import traceback
    while True:
        request = conn.recv()
        if request is None:
            return
        name, args = request
        try:
            globals()[name](rank, *args)
            conn.send(None)
        except BaseException:  # the test's failure, reported to the parent with where it happened
            conn.send(traceback.format_exc())
