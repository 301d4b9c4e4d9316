"""Thread-local modes as context managers (and decorators), over the C++ RAII guards.

Each `with` block opens one C++ guard on entry and closes it on exit, on the same thread, so the
modes nest exactly as the C++ guards do (mode/autocast.h, mode/grad_mode.h).
"""
from __future__ import annotations

import contextlib

from . import _mixprec


class _Mode(contextlib.ContextDecorator):
    _guard_type = None

    def __enter__(self):
        guard = self._guard_type()
        self._open(guard)
        self.__dict__.setdefault("_guards", []).append(guard)  # re-entrant: a stack per object
        return self

    def _open(self, guard):
        guard.enter()

    def __exit__(self, *exc_info):
        guards = self.__dict__.get("_guards")
        if not guards:
            raise RuntimeError(f"{type(self).__name__}: __exit__ without a matching __enter__")
        guards.pop().exit()
        return False


class autocast(_Mode):
    """torch.autocast for mixprec: ops run in `dtype` (bf16 or f16) where the policy table says.

    with mixprec.autocast("bf16"):
        loss = mixprec.cross_entropy(model(x), y)   # matmuls in bf16, the loss in f32
    """

    _guard_type = _mixprec._AutocastGuard

    def __init__(self, dtype="bf16", enabled: bool = True):
        self.dtype = dtype
        self.enabled = enabled

    def _open(self, guard):
        guard.enter(self.dtype, self.enabled)


class no_grad(_Mode):
    """Ops record no autograd graph inside (torch.no_grad)."""

    _guard_type = _mixprec._NoGradGuard


class enable_grad(_Mode):
    """Recording back on inside a no_grad block (torch.enable_grad)."""

    _guard_type = _mixprec._EnableGradGuard


class inference_mode(_Mode):
    """no_grad, and nothing kept that autograd could need later (torch.inference_mode)."""

    _guard_type = _mixprec._InferenceModeGuard
