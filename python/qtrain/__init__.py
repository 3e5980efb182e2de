"""qtrain's gradient quantizers for PyTorch programs.

    import qtrain
    q = qtrain.Quantizer("qsgd:bits=4")
    payload = q.encode(grad, key=(seed, step, rank, stream))     # a uint8 tensor
    q.decode(payload, out)                                        # out: float32, grad.numel() values

The methods and their keys are qtrain's (docs/quantizers.md): "qsgd:bits=4", "onebit", "dettmers8",
"fp8:format=e5m2", "mx:format=e2m1", ... A payload is the one qtrain's own exchange sends for the same
values, residual and key. DDP communication hooks: qtrain.torch.hook (docs/python.md).

CPU tensors only in this version (float32, contiguous; no copies). Errors are exceptions with
qtrain's messages: TypeError for a tensor of the wrong kind, ValueError for bad input (a malformed
payload, an unknown method or key).
"""
from . import _qtrain

__all__ = ["Quantizer", "methods"]


def methods():
    """The names of qtrain's quantization methods."""
    return list(_qtrain.methods())


def _numpy_view(tensor, what):
    """A CPU tensor's values as a NumPy array over the same memory (no copy)."""
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise TypeError(f"{what}: a tensor on {tensor.device}; this build of qtrain encodes CPU tensors only")
    if tensor.requires_grad:
        tensor = tensor.detach()
    return tensor.numpy()


class Quantizer:
    """One qtrain method: encode a float32 tensor to a payload (uint8 tensor) and decode it back."""

    def __init__(self, method):
        if not isinstance(method, str):
            raise TypeError(f"Quantizer: expected a method such as 'qsgd:bits=4', got {type(method).__name__}")
        self._q = _qtrain.Quantizer(method)
        self.method = self._q.method

    def __repr__(self):
        return f"qtrain.Quantizer({str(self._q)!r})"

    @property
    def fixed_size(self):
        """Whether every payload of n values takes payload_bytes(n) exactly (all methods but adaptive)."""
        return self._q.fixed_size

    @property
    def error_feedback(self):
        """Whether encode keeps a residual (then pass residual=)."""
        return self._q.error_feedback

    def payload_bytes(self, numel, column=None):
        """The most bytes a payload of numel values takes (exactly that for fixed-size methods)."""
        return self._q.payload_bytes(int(numel), 0 if column is None else int(column))

    def encode(self, tensor, residual=None, key=(0, 0, 0, 0)):
        """The payload of `tensor` (float32, contiguous) as a uint8 tensor. `residual` (float32, as many
        values, zero at first) is the error-feedback state of the methods that keep one, updated in
        place. `key` = (seed, step, rank, stream) names the random stream of stochastic rounding:
        qtrain's exchange uses (run seed, step, rank, its stream id of the tensor)."""
        import torch

        seed, step, rank, stream = _key(key)
        values = _numpy_view(tensor, "encode")
        res = None if residual is None else _numpy_view(residual, "encode: residual")
        column = tensor.shape[-1] if tensor.dim() >= 1 else 1
        payload = self._q.encode(values, res, seed=seed, step=step, rank=rank, stream=stream, column=max(column, 1))
        return torch.from_numpy(payload)

    def decode(self, payload, out, add=False):
        """Decodes `payload` (a uint8 tensor) into `out` (float32, the encoded number of values),
        overwriting it, or adding to it with add=True. A malformed payload raises ValueError and leaves
        `out` untouched."""
        self._q.decode(_numpy_view(payload, "decode: payload"), _numpy_view(out, "decode: out"), add=bool(add))
        return out


def _key(key):
    try:
        seed, step, rank, stream = (int(k) for k in key)
    except (TypeError, ValueError):
        raise TypeError(f"key: expected (seed, step, rank, stream), got {key!r}") from None
    if seed < 0 or step < 0 or rank < 0 or stream < 0:
        raise ValueError(f"key: expected non-negative integers, got {key!r}")
    return seed, step, rank, stream
