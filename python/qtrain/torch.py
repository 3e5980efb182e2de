"""DDP communication hooks that exchange what qtrain's own trainer exchanges.

    import qtrain.torch
    state, hook = qtrain.torch.hook("qsgd:bits=4", model, algorithm="reduce_scatter_allgather")
    ddp.register_comm_hook(state, hook)

The hook runs qtrain's GradientExchange (the library the qtrain program links) over the process
group's collectives on uint8 tensors: the same stripes, random keys, owner re-quantization and
decoding in rank order, so every rank decodes the same bytes and the replicas stay bit-identical.
Its state (error-feedback residuals, PowerSGD's Q and residuals, the step of the random keys) is kept
per parameter, not per bucket, so DDP's rebuild of its buckets after the first iteration loses
nothing; state.state_dict() / state.load_state_dict() save and restore it (each rank its own: the
residuals differ between ranks).

`model` (the module, or the DDP module) names the parameters and fixes their order, as qtrain's
trainer numbers its tensors; without it the first iteration is a plain fp32 allreduce, during which
the hook learns the parameters in DDP's bucket order, and compression starts at the second (as
PyTorch's PowerSGD hook starts after its own warm-up). CPU tensors over gloo in this version.
"""
import torch
import torch.distributed as dist

from . import _qtrain

__all__ = ["hook", "HookState"]


class _ProcessGroupCollectives:
    """The collectives qtrain's exchange calls (python/src/python_collectives_comm.h), on NumPy arrays
    over qtrain's buffers, run by torch.distributed on one process group. Every reduction and gather is
    built on all_to_all in C++: one round of messages where gloo's ring allreduce takes 2(P - 1)."""

    def __init__(self, group):
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)

    def all_to_all(self, send, send_splits, recv, recv_splits):
        dist.all_to_all_single(torch.from_numpy(recv), torch.from_numpy(send), output_split_sizes=list(recv_splits),
                               input_split_sizes=list(send_splits), group=self.group)

    def broadcast(self, array, root):
        src = root if self.group is None or self.group == dist.group.WORLD else \
            dist.distributed_c10d._get_global_rank(self.group, root)
        dist.broadcast(torch.from_numpy(array), src=src, group=self.group)

    def barrier(self):
        dist.barrier(group=self.group)


class HookState:
    """What qtrain's hook keeps between iterations: its exchange (per-parameter quantization states)
    and the step that keys its random streams."""

    def __init__(self, method, model=None, algorithm="auto", process_group=None, seed=0, min_numel=10000,
                 piece_mb=4.0, small_tensors="with_quantized", bucket_mb=0.0):
        if not isinstance(method, str):
            raise TypeError(f"qtrain.torch.hook: expected a method such as 'qsgd:bits=4', got {method!r}")
        self.method = method
        self.algorithm = algorithm
        self.seed = int(seed)
        self.min_numel = int(min_numel)
        self.piece_mb = float(piece_mb)
        self.small_tensors = small_tensors
        self.bucket_mb = float(bucket_mb)
        self.process_group = process_group if process_group is not None else dist.group.WORLD
        self.step = 0
        self._names, self._shapes, self._index = [], [], {}
        self._exchange = None
        self._pending = None
        self._waiting = []  # this step's buckets until the last one
        if model is not None:
            module = getattr(model, "module", model)  # DDP wraps the model as .module
            for name, p in module.named_parameters():
                if p.requires_grad:
                    self._register(p, name)

    def _register(self, param, name):
        self._index[id(param)] = len(self._names)
        self._names.append(name)
        self._shapes.append(list(param.shape))

    def _build(self):
        group = _ProcessGroupCollectives(self.process_group)
        self._exchange = _qtrain.Exchange(group, self._names, self._shapes, self.method, algorithm=self.algorithm,
                                          seed=self.seed, min_numel=self.min_numel, piece_mb=self.piece_mb,
                                          small_tensors=self.small_tensors, bucket_mb=self.bucket_mb)
        self._rank, self._world = group.rank, group.size
        if self._pending is not None:
            self._load(self._pending)
            self._pending = None

    def describe(self):
        """One line per parameter: method, algorithm (empty before the exchange is built)."""
        return self._exchange.describe() if self._exchange is not None else ""

    def take_stats(self):
        """Since the last call: seconds this rank spent encoding, communicating and decoding
        ("encode_s", "communicate_s", "decode_s") and the bytes it sent ("bytes_sent")."""
        if self._exchange is None:
            return {"encode_s": 0.0, "communicate_s": 0.0, "decode_s": 0.0, "bytes_sent": 0.0}
        return dict(self._exchange.take_stats())

    def state_dict(self):
        """This rank's state: the step and every quantization state by name ("<param>/residual", ...)."""
        if self._exchange is None:
            return dict(self._pending) if self._pending is not None else self._header({})
        return self._header({name: torch.from_numpy(a) for name, a in self._exchange.state()})

    def _header(self, tensors):
        return {"method": self.method, "algorithm": self.algorithm, "seed": self.seed, "step": self.step,
                "min_numel": self.min_numel, "piece_mb": self.piece_mb, "small_tensors": self.small_tensors,
                "exchange": tensors}

    def load_state_dict(self, state):
        """Restores what state_dict() gave on this rank (the same method, algorithm and seed)."""
        for key in ("method", "algorithm", "seed", "min_numel", "piece_mb", "small_tensors"):
            if key not in state:
                raise ValueError(f"load_state_dict: '{key}' is missing")
            if state[key] != getattr(self, key):
                raise ValueError(f"load_state_dict: '{key}' is {state[key]!r}; this hook's is {getattr(self, key)!r}")
        if "step" not in state or "exchange" not in state:
            raise ValueError("load_state_dict: 'step' and 'exchange' are required")
        self.step = int(state["step"])
        if self._exchange is None:
            self._pending = state
        else:
            self._load(state)

    def _load(self, state):
        entries = []
        for name, t in state["exchange"].items():
            if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
                raise ValueError(f"load_state_dict: '{name}' is not a float32 tensor")
            entries.append((name, t.detach().cpu().contiguous().numpy()))
        self._exchange.load_state(entries)


def _offsets(bucket):
    """Where each gradient of the bucket lies in its flat buffer, in elements."""
    base = bucket.buffer().storage_offset()
    return [g.storage_offset() - base for g in bucket.gradients()]


def _allreduce_mean(state, bucket):
    buf = bucket.buffer()
    dist.all_reduce(buf, group=state.process_group)
    buf.div_(dist.get_world_size(state.process_group))
    return buf


def qtrain_hook(state, bucket):
    """The communication hook: qtrain's exchange of this step's gradients (averaged in place).

    DDP hands the buckets over one by one and waits for their futures only at the end of backward;
    the hook keeps them until the last one and exchanges them all at once: one set of collectives per
    step instead of one per bucket (each collective costs its hops' latency, which dominates on
    loaded hosts and slow links), and results that do not depend on DDP's bucketing. With bucket_mb
    > 0 each bucket's tensors go to the exchange's thread at once, which exchanges its own buckets
    under the rest of backward; the last bucket waits for them."""
    buf = bucket.buffer()
    if buf.device.type != "cpu":
        raise TypeError(f"qtrain.torch.hook: gradients on {buf.device}; this build of qtrain exchanges CPU tensors "
                        "(gloo) only")
    if buf.dtype != torch.float32:
        raise TypeError(f"qtrain.torch.hook: gradients of {buf.dtype}; qtrain exchanges float32 gradients")
    params = bucket.parameters()
    fut = torch.futures.Future()
    if state._exchange is None and any(id(p) not in state._index for p in params):
        # No model given: learn the parameters during a first plain iteration.
        for p in params:
            if id(p) not in state._index:
                state._register(p, f"param{len(state._names)}")
        _allreduce_mean(state, bucket)
        fut.set_result(buf)
    else:
        try:
            ids = [state._index[id(p)] for p in params]
        except KeyError:
            raise ValueError("qtrain.torch.hook: a parameter that the model given to the hook does not have "
                             "(pass the model DDP wraps)") from None
        entry = (ids, buf.numpy(), _offsets(bucket))
        state._waiting.append((entry, buf, fut))
        if state._exchange is None:
            state._build()
        if state.bucket_mb > 0:
            state._exchange.ready(entry, state.step)  # exchanged on the exchange's thread, under backward
        if bucket.is_last():
            waiting, state._waiting = state._waiting, []
            try:
                if state.bucket_mb > 0:
                    state._exchange.finish([w[0] for w in waiting])
                else:
                    state._exchange.reduce([w[0] for w in waiting], state.step)
            except BaseException as e:
                for _, _, f in waiting[:-1]:
                    f.set_exception(e)
                raise
            for _, b, f in waiting:
                f.set_result(b)
    if bucket.is_last():
        state.step += 1
    return fut


def hook(method, model=None, *, algorithm="auto", process_group=None, seed=0, min_numel=10000, piece_mb=4.0,
         small_tensors="with_quantized", bucket_mb=0.0):
    """(state, hook) for DistributedDataParallel.register_comm_hook: qtrain's `method` ("qsgd:bits=4",
    "onebit", "powersgd:rank=2", ...) on every gradient of at least `min_numel` values (smaller ones in
    fp32, as qtrain's trainer does), reduced with `algorithm` ("auto": the method's own; "allgather",
    "reduce_scatter_allgather"). `seed` keys the random streams (give every rank the same).
    `small_tensors`: "with_quantized" sends the fp32 gradients in the quantized ones' collectives (one
    set of collectives per step; the same fp32 sums in rank order), "native" in an allreduce of their
    own (qtrain's trainer's default, communication.small_tensors). `bucket_mb` > 0: the exchange's own
    buckets of that many MB of gradients, each exchanged on a thread of the exchange as soon as DDP has
    handed over its tensors, under the rest of backward; 0: every tensor at once at DDP's last bucket."""
    return HookState(method, model, algorithm, process_group, seed, min_numel, piece_mb, small_tensors,
                     bucket_mb), qtrain_hook
