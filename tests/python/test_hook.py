"""qtrain's DDP communication hook (python/qtrain/torch.py) on 4 gloo ranks on localhost: its averaged
gradient equals qtrain's GradientExchange's bit for bit for every algorithm (the quantized payloads,
PowerSGD, fp16), the replicas stay identical, a resume from its state_dict is exact, and the
transport under it (every collective built on all_to_all) gives what gloo's own collectives give."""
import socket

import pytest
import torch.multiprocessing as mp

import hook_workers

WORLD = 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(fn, *args):
    # join=True raises ProcessRaisedException with the failing rank's traceback.
    mp.spawn(fn, args=(WORLD, free_port()) + args, nprocs=WORLD, join=True)


def test_transport_collectives_match_gloo():
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
def test_hook_equals_exchange(method, algorithm):
    spawn(hook_workers.equivalence, method, algorithm, True)


@pytest.mark.parametrize("method,algorithm,small_tensors", [
    ("qsgd:bits=4", "reduce_scatter_allgather", "with_quantized"),
    ("qsgd:bits=4", "allgather", "native"),
    ("powersgd:rank=2", "auto", "with_quantized"),
    ("fp16", "auto", "native"),
])
def test_hook_overlapping_backward_equals_exchange(method, algorithm, small_tensors):
    # The exchange's own buckets of 0.02 MB (several, each exchanged on its thread as soon as DDP has
    # handed over its tensors): the bits of the exchange of every tensor at once.
    spawn(hook_workers.equivalence, method, algorithm, True, small_tensors, 0.02)


def test_hook_with_small_tensors_native():
    spawn(hook_workers.equivalence, "qsgd:bits=4", "reduce_scatter_allgather", True, "native")


@pytest.mark.parametrize("method,algorithm", [("qsgd:bits=4", "reduce_scatter_allgather"), ("onebit", "auto")])
def test_small_tensor_modes_agree(method, algorithm):
    spawn(hook_workers.small_tensor_modes, method, algorithm)


def test_hook_without_model_learns_parameters():
    spawn(hook_workers.equivalence, "qsgd:bits=4", "reduce_scatter_allgather", False)


@pytest.mark.parametrize("method,algorithm", [("onebit", "auto"), ("powersgd:rank=2", "auto")])
def test_resume_is_exact(method, algorithm):
    spawn(hook_workers.resume, method, algorithm)
