"""numpy on both sides of a Tensor, and the Python operators.

The rules (docs/PYTHON.md): from_numpy and Tensor.numpy() never copy; a tensor made from an
array keeps the array alive and an array made from a tensor keeps the tensor alive. numpy has no
bfloat16, so bf16 tensors appear as ml_dtypes.bfloat16 arrays when ml_dtypes is installed and as
uint16 arrays of the raw bits otherwise (numpy_bf16_dtype() says which).
"""
from __future__ import annotations

import numpy as np

from . import _mixprec
from ._mixprec import DType, Tensor

try:  # optional: numpy's bfloat16 from the ml_dtypes package
    import ml_dtypes as _ml_dtypes

    _BF16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    _ml_dtypes = None
    _BF16 = None


def numpy_bf16_dtype() -> np.dtype:
    """The numpy dtype bf16 tensors are exported as: ml_dtypes.bfloat16, or uint16 bits."""
    return _BF16 if _BF16 is not None else np.dtype(np.uint16)


def from_numpy(array, dtype=None) -> Tensor:
    """A tensor on `array`'s memory, without a copy; the tensor keeps `array` alive.

    The array must be writable, and its strides non-negative multiples of the item size.
    ml_dtypes.bfloat16 arrays import as bf16; uint16 arrays import as bf16 or f16 bits when
    dtype says so.
    """
    if _BF16 is not None and isinstance(array, np.ndarray) and array.dtype == _BF16:
        if dtype is not None and _mixprec_dtype(dtype) != DType.bf16:
            raise TypeError(f"[from_numpy] a bfloat16 array cannot be viewed as {dtype}")
        # numpy cannot export a custom dtype through the buffer protocol: view its bits.
        return _mixprec.from_numpy(array.view(np.uint16), DType.bf16)
    return _mixprec.from_numpy(array, dtype)


def _mixprec_dtype(dtype) -> DType:
    return _mixprec.as_dtype(dtype)


def tensor(data, dtype=None) -> Tensor:
    """A new tensor holding a copy of `data` (nested lists, numbers, arrays), like torch.tensor.

    Floating data defaults to f32 (numpy would say f64) and integers to i64; f16 and bf16 are
    rounded from f64 once, to nearest even.
    """
    array = np.array(data)  # always a copy: the tensor must not alias the caller's data
    want = None if dtype is None else _mixprec_dtype(dtype)
    if array.dtype == np.float64 and want is None:
        want = DType.f32
    if array.dtype.kind in "iu" and array.dtype != np.uint8 and want is None:
        want = DType.i64
    if _BF16 is not None and array.dtype == _BF16:
        source = from_numpy(np.ascontiguousarray(array))
    elif array.dtype.kind in "iu" and array.dtype != np.uint8:
        source = _mixprec.from_numpy(np.ascontiguousarray(array, dtype=np.int64))
    else:
        source = _mixprec.from_numpy(np.ascontiguousarray(array))
    # The import borrowed `array`; clone so the result owns caching-allocator memory.
    out = source.to(want) if want is not None and want != source.dtype else source.clone()
    return out


def _numpy(self: Tensor) -> np.ndarray:
    """A numpy array on this tensor's memory (no copy); it keeps the tensor alive."""
    array = np.asarray(self)
    if self.dtype == DType.bf16 and _BF16 is not None:
        array = array.view(_BF16)
    return array


def _tolist(self: Tensor):
    return _numpy(self).tolist() if self.dtype != DType.bf16 else self.to("f32").numpy().tolist()


Tensor.numpy = _numpy
# numpy scalars and arrays defer to the Tensor's operators (np.float32(2) * t is a Tensor), as
# they do for torch.Tensor; a Tensor op an array is a TypeError, not a silent numpy result.
Tensor.__array_priority__ = 1000
Tensor.tolist = _tolist
Tensor.__matmul__ = lambda self, other: (_mixprec.matmul(self, other) if isinstance(other, Tensor)
                                         else NotImplemented)
Tensor.__neg__ = lambda self: _mixprec.neg(self)


def _method(op):
    # An extension function is not a descriptor: as a class attribute it would not receive
    # self, so t.sum() wraps it.
    def method(self, *args, **kwargs):
        return op(self, *args, **kwargs)

    method.__name__ = op.__name__
    method.__doc__ = op.__doc__
    return method


for _name in ("sum", "mean", "relu", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "silu",
              "softmax", "log_softmax", "matmul"):
    setattr(Tensor, _name, _method(getattr(_mixprec, _name)))
