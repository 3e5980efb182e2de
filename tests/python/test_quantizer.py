"""qtrain.Quantizer from Python: payloads round-trip within each method's contract, are deterministic for
a key and differ across keys where the method draws, and bad input (random payload bytes, truncated
payloads, wrong dtypes, shapes, non-contiguous tensors, unknown methods) raises an exception instead of
ending the interpreter. The interpreter's subnormal mode is left as the caller set it."""
import random

import pytest
import torch

import qtrain
from qtrain import _qtrain

# Every variant of every payload method that qtrain's own tests sweep (QuantMethodInfo::variants): a
# method added to quant/ is tested from Python too.
PAYLOAD_METHODS = list(_qtrain.payload_variants())


def encode(q, x, key=(1, 2, 3, 4)):
    residual = torch.zeros_like(x) if q.error_feedback else None
    return q.encode(x, residual=residual, key=key), residual


def test_every_payload_method_is_offered():
    assert len(PAYLOAD_METHODS) >= 16
    assert set(m.split(":")[0] for m in PAYLOAD_METHODS) | {"powersgd"} == set(qtrain.methods())


@pytest.mark.parametrize("method", PAYLOAD_METHODS)
def test_round_trip(method):
    q = qtrain.Quantizer(method)
    x = torch.randn(64, 33, generator=torch.Generator().manual_seed(5))
    payload, residual = encode(q, x)
    assert payload.dtype == torch.uint8 and payload.dim() == 1
    assert payload.numel() <= q.payload_bytes(x.numel(), x.shape[-1])
    if q.fixed_size:
        assert payload.numel() == q.payload_bytes(x.numel(), x.shape[-1])
    out = torch.full_like(x, float("nan"))
    q.decode(payload, out)
    assert torch.isfinite(out).all()
    if residual is not None:  # error feedback: what was not sent is kept, exactly
        assert torch.allclose(out + residual, x, atol=1e-5)
    if method in ("fp32",):
        assert torch.equal(out, x)
    # add=True adds the decode to what is there.
    acc = torch.ones_like(x)
    q.decode(payload, acc, add=True)
    assert torch.allclose(acc, out + 1, atol=1e-6)
    # The same key gives the same bytes.
    again, _ = encode(q, x)
    assert torch.equal(again, payload)


def test_keys_name_random_streams():
    q = qtrain.Quantizer("qsgd:bits=2")
    x = torch.randn(4096, generator=torch.Generator().manual_seed(1))
    a = q.encode(x, key=(1, 0, 0, 0))
    assert torch.equal(a, q.encode(x, key=(1, 0, 0, 0)))
    for other in [(2, 0, 0, 0), (1, 1, 0, 0), (1, 0, 1, 0), (1, 0, 0, 1)]:
        assert not torch.equal(a, q.encode(x, key=other)), other


def test_bad_arguments_raise():
    q = qtrain.Quantizer("qsgd:bits=4")
    x = torch.randn(100)
    with pytest.raises(TypeError, match="float32"):
        q.encode(x.double())
    with pytest.raises(TypeError, match="contiguous"):
        q.encode(torch.randn(10, 10).t())
    with pytest.raises(TypeError, match="torch.Tensor"):
        q.encode([1.0, 2.0])
    with pytest.raises(TypeError, match="key"):
        q.encode(x, key=(1, 2))
    with pytest.raises(ValueError, match="bits"):
        qtrain.Quantizer("qsgd:bits=3")
    with pytest.raises(ValueError, match="nosuch"):
        qtrain.Quantizer("nosuch")
    with pytest.raises(ValueError, match="powersgd"):
        qtrain.Quantizer("powersgd")
    with pytest.raises(ValueError, match="residual"):
        qtrain.Quantizer("onebit").encode(x)  # error feedback needs its residual
    with pytest.raises(ValueError, match="residual"):
        qtrain.Quantizer("onebit").encode(x, residual=torch.zeros(99))
    with pytest.raises(ValueError, match="NaN|finite|Inf"):
        q.encode(torch.tensor([1.0, float("nan")] * 50))
    payload = q.encode(x)
    with pytest.raises(ValueError):
        q.decode(payload, torch.empty(101))  # the payload holds 100 values
    with pytest.raises(ValueError):
        q.decode(payload[:20].clone(), torch.empty(100))  # truncated
    with pytest.raises(TypeError, match="float32"):
        q.decode(payload, torch.empty(100, dtype=torch.float64))


@pytest.mark.parametrize("method", PAYLOAD_METHODS)
def test_random_payloads_raise_or_decode(method):
    """Fuzz: random bytes, and valid payloads with random bytes changed, as payloads of random sizes for
    outputs of random sizes. Each decodes or raises ValueError; the output is untouched on error."""
    q = qtrain.Quantizer(method)
    rng = random.Random(method)
    x = torch.randn(300, generator=torch.Generator().manual_seed(3))
    valid, _ = encode(q, x)
    for trial in range(300):
        if trial % 2 == 0:
            payload = torch.tensor([rng.randrange(256) for _ in range(rng.randrange(0, 600))], dtype=torch.uint8)
        else:
            payload = valid.clone()
            for _ in range(rng.randrange(1, 4)):
                payload[rng.randrange(payload.numel())] = rng.randrange(256)
            payload = payload[:rng.randrange(payload.numel() + 1)].clone()
        n = rng.choice([0, 1, 7, 299, 300, 301, 5000])
        out = torch.full((n,), 7.0)
        try:
            q.decode(payload, out)
        except ValueError:
            assert torch.all(out == 7.0), "a failed decode wrote its output"


def test_subnormal_mode_is_the_callers():
    tiny = torch.tensor([1.0e-39])  # subnormal in float32
    q = qtrain.Quantizer("fp32")
    assert float(tiny * 1.0) != 0.0
    q.encode(torch.randn(10))
    assert float(tiny * 1.0) != 0.0, "qtrain left subnormals flushed on the caller's thread"
    torch.set_flush_denormal(True)
    try:
        q.encode(torch.randn(10))
        assert float(tiny * 1.0) == 0.0, "qtrain cleared the caller's flush mode"
    finally:
        torch.set_flush_denormal(False)


def test_core_accepts_numpy_buffers():
    import numpy as np

    q = _qtrain.Quantizer("qsgd:bits=8")
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    p = q.encode(x, seed=1)
    out = np.zeros(1000, dtype=np.float32)
    q.decode(p, out)
    assert np.abs(out - x).max() < 0.01
    with pytest.raises(TypeError, match="read-only"):
        ro = np.zeros(1000, dtype=np.float32)
        ro.setflags(write=False)
        q.decode(p, ro)
