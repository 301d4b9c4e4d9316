"""mixprec from Python: the C++ engine's tensors, ops, autograd and autocast (docs/PYTHON.md).

Tensors share memory with numpy and DLPack producers/consumers without copies:

    >>> import numpy as np, mixprec as mp
    >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> t = mp.from_numpy(a)          # a view of a's memory; keeps a alive
    >>> (t * 2.0).numpy()             # numpy view of the result's memory
"""
from __future__ import annotations

from . import _mixprec
from ._mixprec import (  # noqa: F401  (the public API, re-exported)
    SGD,
    Adam,
    AdamW,
    DType,
    GradScaler,
    Optimizer,
    as_dtype,
    Error,
    Tensor,
    add,
    arange,
    cat,
    clamp,
    conv2d,
    cross_entropy,
    div,
    embedding,
    empty,
    exp,
    from_dlpack,
    full,
    gelu,
    get_autocast_dtype,
    is_autocast_enabled,
    is_grad_enabled,
    kernel_level,
    layer_norm,
    linear,
    log,
    log_softmax,
    manual_seed,
    matmul,
    mean,
    mse_loss,
    mul,
    neg,
    ones,
    pow,
    rand,
    randn,
    relu,
    rms_norm,
    rsqrt,
    scaled_dot_product_attention,
    sigmoid,
    silu,
    softmax,
    sqrt,
    sub,
    sum,
    tanh,
    zeros,
)
from ._tensor import from_numpy, numpy_bf16_dtype, tensor
from ._modes import autocast, enable_grad, inference_mode, no_grad
from . import nn  # noqa: E402  (mixprec.nn, after the names it uses)
from . import video  # noqa: E402  (mixprec.video)
from . import gpt  # noqa: E402  (mixprec.gpt)
from . import stream  # noqa: E402  (mixprec.stream)
from . import graph  # noqa: E402  (mixprec.graph)

f64 = float64 = DType.f64
f32 = float32 = DType.f32
f16 = float16 = DType.f16
bf16 = bfloat16 = DType.bf16
i64 = int64 = DType.i64
i32 = int32 = DType.i32
u8 = uint8 = DType.u8
bool_ = DType.bool

__all__ = [name for name in dir() if not name.startswith("_")]
