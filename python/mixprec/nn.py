"""mixprec.nn: the built-in modules (C++ nn/layers.h) and safetensors module files.

    net = mp.nn.Sequential(mp.nn.Linear(4, 32), mp.nn.ReLU(), mp.nn.Linear(32, 2))
    opt = mp.AdamW(net.parameters(), lr=1e-3)
    mp.nn.save_module(net, "net.safetensors")

Modules cannot be subclassed in Python yet (their forward runs in C++).
"""
from ._mixprec import (  # noqa: F401  (re-exported)
    GELU,
    Conv2d,
    Dropout,
    Embedding,
    GroupNorm,
    Layer,
    LayerNorm,
    Linear,
    Module,
    MultiheadAttention,
    ReLU,
    RMSNorm,
    Sequential,
    SiLU,
    clip_grad_norm_,
    load_module,
    save_module,
)

__all__ = [name for name in dir() if not name.startswith("_")]
