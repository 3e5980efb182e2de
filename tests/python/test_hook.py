"""qtrain's DDP communication hook (python/qtrain/torch.py) on 4 gloo ranks on localhost: its averaged
gradient equals qtrain's GradientExchange's bit for bit for every algorithm (the quantized payloads,
PowerSGD, fp16), the replicas stay identical, a resume from its state_dict is exact, and the
transport under it (every collective built on all_to_all) gives what gloo's own collectives give."""
import multiprocessing
import multiprocessing.connection
import socket
import time

import pytest

import hook_workers

WORLD = 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankPool:
    """WORLD processes, started once for the whole file, each running its rank of every test (a new gloo
    group on a new port per test). A process per rank and test (torch.multiprocessing.spawn) imported torch
    72 times, 2.3 s each on a 2-core guest: most of this file's 100 s. A failing rank reports its traceback;
    the others may then wait in a collective for it, so after a failure the pool is killed and the next
    test starts a new one."""

    def __init__(self):
        ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold torch's threads
        self.conns, self.procs = [], []
        for rank in range(WORLD):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=hook_workers.serve, args=(rank, theirs), daemon=True)
            p.start()
            theirs.close()
            self.conns.append(mine)
            self.procs.append(p)

    def run(self, fn, *args, timeout=600, grace=20):
        """fn(rank, WORLD, port, *args) on every rank; returns the failing ranks' tracebacks (none: passed)."""
        port = free_port()
        for c in self.conns:
            c.send((fn.__name__, (WORLD, port) + args))
        failures, pending = [], dict(enumerate(self.conns))
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for c in multiprocessing.connection.wait(list(pending.values()), timeout=left):
                rank = next(r for r, x in pending.items() if x is c)
                del pending[rank]
                try:
                    answer = c.recv()
                except EOFError:
                    answer = f"rank {rank}'s process died (exit code {self.procs[rank].exitcode})"
                if answer is not None:
                    failures.append(f"rank {rank}:\n{answer}")
                    deadline = min(deadline, time.monotonic() + grace)  # the rest may wait for it
        if pending and not failures:
            failures.append(f"ranks {sorted(pending)} did not finish {fn.__name__} within {timeout} s")
        return failures

    def close(self, kill=False):
        for c, p in zip(self.conns, self.procs):
            if not kill:
                try:
                    c.send(None)
                except OSError:
                    pass
            p.join(timeout=0 if kill else 30)  # a rank stuck at the end is killed rather than waited for
            if p.is_alive():
                p.kill()
                p.join()


@pytest.fixture(scope="module")
def pool():
    holder = {"pool": None}
    yield holder
    if holder["pool"] is not None:
        holder["pool"].close()


@pytest.fixture
def spawn(pool):
    """spawn(fn, *args): fn(rank, WORLD, port, *args) on the pool's ranks; a failure fails the test."""

    def run(fn, *args):
        if pool["pool"] is None:
            pool["pool"] = RankPool()
        failures = pool["pool"].run(fn, *args)
        if failures:
            pool["pool"].close(kill=True)
            pool["pool"] = None
            pytest.fail("\n".join(failures), pytrace=False)

    return run


def test_transport_collectives_match_gloo(spawn):
    spawn(hook_workers.collectives)


@pytest.mark.parametrize("method,algorithm", [
    ("qsgd:bits=4", "reduce_scatter_allgather"),
    ("qsgd:bits=4", "allgather"),
    ("onebit", "auto"),
    ("dettmers8", "auto"),
    ("terngrad", "auto"),
    ("powersgd:rank=2", "auto"),
    ("fp16", "auto"),
])
def test_hook_equals_exchange(spawn, method, algorithm):
    spawn(hook_workers.equivalence, method, algorithm, True)


@pytest.mark.parametrize("method,algorithm,small_tensors", [
    ("qsgd:bits=4", "reduce_scatter_allgather", "with_quantized"),
    ("qsgd:bits=4", "allgather", "native"),
    ("powersgd:rank=2", "auto", "with_quantized"),
    ("fp16", "auto", "native"),
])
def test_hook_overlapping_backward_equals_exchange(spawn, method, algorithm, small_tensors):
    # The exchange's own buckets of 0.02 MB (several, each exchanged on its thread as soon as DDP has
    # handed over its tensors): the bits of the exchange of every tensor at once.
    spawn(hook_workers.equivalence, method, algorithm, True, small_tensors, 0.02)


def test_hook_with_small_tensors_native(spawn):
    spawn(hook_workers.equivalence, "qsgd:bits=4", "reduce_scatter_allgather", True, "native")


@pytest.mark.parametrize("method,algorithm", [("qsgd:bits=4", "reduce_scatter_allgather"), ("onebit", "auto")])
def test_small_tensor_modes_agree(spawn, method, algorithm):
    spawn(hook_workers.small_tensor_modes, method, algorithm)


def test_hook_without_model_learns_parameters(spawn):
    spawn(hook_workers.equivalence, "qsgd:bits=4", "reduce_scatter_allgather", False)


@pytest.mark.parametrize("method,algorithm", [("onebit", "auto"), ("powersgd:rank=2", "auto")])
def test_resume_is_exact(spawn, method, algorithm):
    spawn(hook_workers.resume, method, algorithm)
