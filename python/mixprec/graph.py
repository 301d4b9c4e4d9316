"""mixprec.graph: capture a function of tensors once and replay its kernels (docs/GRAPH.md).

The function runs under the capture as it would eagerly (three times: twice eagerly, once
recorded); the ops it calls record the kernels they launch. A replay runs those kernels alone
on memory planned in one arena: no op front-end, no allocation, the same bits as eager unless a
pass that rounds differently (fuse_epilogues) changed them.

    import mixprec as mp
    net = mp.nn.Sequential(mp.nn.Linear(64, 128), mp.nn.GELU(), mp.nn.Linear(128, 64))
    with mp.inference_mode():
        g = mp.graph.capture(lambda xs: net(xs[0]), [mp.randn([8, 64])])
    y = g.run([mp.randn([8, 64])])[0]     # a view of the arena until the next run

A training step's forward and backward, replayed with the optimizer in between:

    step = mp.graph.with_gradients(lambda xs: mp.mse_loss(net(xs[0]), xs[1]), net.parameters())
    g = mp.graph.capture(step, [x, y], autograd=True)
    out = g.run([x, y])                    # [loss, gradient of each parameter...]
    mp.graph.set_gradients(net.parameters(), out)
    opt.step()
"""
from __future__ import annotations

from ._mixprec import (Graph, _CompiledFunction, _graph_capture, _graph_set_gradients,
                        _graph_with_gradients)

__all__ = ["Graph", "capture", "compile", "with_gradients", "set_gradients"]


def capture(fn, inputs, *, autograd: bool = False, fold_constants: bool = False,
            fuse_epilogues: bool = True, validate: bool = True) -> Graph:
    """Captures fn (a list of Tensors -> a Tensor or a list of them) on `inputs`.

    autograd: record with autograd on (a function that runs a backward, such as
    with_gradients'); otherwise the capture runs under inference mode. fold_constants: what
    depends only on the weights is computed once (inference with fixed weights).
    fuse_epilogues: fold an activation or an add into the kernel whose output it finishes (one
    rounding instead of two). validate: compare the replay with the recorded run.
    """
    return _graph_capture(fn, list(inputs), autograd, fold_constants, fuse_epilogues, validate)


class compile:  # noqa: N801  (a decorator, named as torch.compile and mlx's compile are)
    """A function captured once per input signature and replayed after (as mx.compile).

        @mp.graph.compile
        def step(x, y):
            return mp.add(net(x), y)
        out = step(x, y)        # the first call with these shapes, dtypes and layouts captures

    Positional Tensor arguments; returns what the function returns (a Tensor or a list of
    them), as views of the graph's arena valid until the next call with the same signature.
    The options are capture()'s.
    """

    def __init__(self, fn=None, *, autograd: bool = False, fold_constants: bool = False,
                 fuse_epilogues: bool = True, validate: bool = True):
        self._options = (autograd, fold_constants, fuse_epilogues, validate)
        self._fn = None
        if fn is not None:
            self._wrap(fn)

    def _wrap(self, fn):
        self._fn = fn
        # Whether fn returned one Tensor. A box, not self: the C++ object holds as_list, and a
        # reference back to self would be a cycle Python's collector cannot see through it.
        single = self._single = [False]
        def as_list(inputs):
            result = fn(*inputs)
            single[0] = not isinstance(result, (list, tuple))
            return [result] if single[0] else list(result)
        self._compiled = _CompiledFunction(as_list, *self._options)
        return self

    def __call__(self, *args):
        if self._fn is None:  # @compile(...) with options: called on the function
            return self._wrap(args[0])
        out = self._compiled(list(args))
        return out[0] if self._single[0] else out

    @property
    def captures(self) -> int:
        """How many signatures were captured."""
        return self._compiled.captures

    def graph(self) -> Graph | None:
        """The graph the last call replayed."""
        return self._compiled.last()


def with_gradients(loss_fn, params):
    """A function for capture(..., autograd=True): inputs -> [loss, d loss / d param...].

    loss_fn returns the loss to differentiate (a scalar), or a list whose first element it is
    (the rest are returned after the gradients).
    """
    def losses(inputs):
        result = loss_fn(inputs)
        return list(result) if isinstance(result, (list, tuple)) else [result]
    return _graph_with_gradients(losses, list(params))


def set_gradients(params, outputs) -> None:
    """Makes outputs[1 : 1 + len(params)] of a with_gradients graph the parameters' .grad."""
    _graph_set_gradients(list(params), list(outputs))
