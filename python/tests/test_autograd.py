"""Autograd, autocast and grad modes from Python."""
import threading

import numpy as np
import pytest

import mixprec as mp


def test_backward_fills_grad():
    rng = np.random.default_rng(5)
    x_np = rng.standard_normal((3, 4)).astype(np.float32)
    w_np = rng.standard_normal((4, 2)).astype(np.float32)
    x = mp.tensor(x_np).requires_grad_()
    w = mp.tensor(w_np)
    w.requires_grad = True
    assert x.requires_grad and x.is_leaf and x.grad is None
    loss = mp.sum(mp.relu(x @ w))
    assert not loss.is_leaf
    loss.backward()
    mask = (x_np @ w_np > 0).astype(np.float32)  # d/dx sum(relu(xw)) = mask @ w^T
    np.testing.assert_allclose(x.grad.numpy(), mask @ w_np.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), x_np.T @ mask, rtol=1e-5, atol=1e-6)
    x.zero_grad()
    assert x.grad is None


def test_backward_with_a_gradient_and_cross_entropy():
    logits = mp.tensor([[2.0, 0.5, -1.0]]).requires_grad_()
    loss = mp.cross_entropy(logits, mp.tensor([0]))
    loss.backward()
    p = np.exp([2.0, 0.5, -1.0])
    p /= p.sum()
    np.testing.assert_allclose(logits.grad.numpy(), [p - [1, 0, 0]], rtol=1e-5)

    y = mp.tensor([1.0, 2.0]).requires_grad_()
    z = y * 3.0
    z.backward(mp.tensor([1.0, -1.0]))
    assert y.grad.numpy().tolist() == [3.0, -3.0]


def test_backward_of_a_non_scalar_without_gradient_raises():
    y = mp.ones([2]).requires_grad_()
    with pytest.raises(mp.Error):
        (y * 2.0).backward()


def test_no_grad_and_detach():
    x = mp.ones([2]).requires_grad_()
    with mp.no_grad():
        assert not mp.is_grad_enabled()
        assert not (x * 2.0).requires_grad
        with mp.enable_grad():
            assert (x * 2.0).requires_grad
    assert mp.is_grad_enabled()
    with mp.inference_mode():
        assert not (x * 2.0).requires_grad
    assert not x.detach().requires_grad and x.detach().shares_storage(x)


def test_autocast_lowers_matmuls_and_nests():
    x = mp.randn([4, 8])
    w = mp.randn([3, 8]).requires_grad_()
    assert not mp.is_autocast_enabled()
    with mp.autocast("bf16"):
        assert mp.is_autocast_enabled() and mp.get_autocast_dtype() == mp.bf16
        y = mp.linear(x, w)
        assert y.dtype == mp.bf16
        with mp.autocast("bf16", enabled=False):
            assert not mp.is_autocast_enabled()
            assert mp.linear(x, w).dtype == mp.f32
        assert mp.is_autocast_enabled()
        loss = mp.sum(y.to("f32"))
    assert not mp.is_autocast_enabled()
    loss.backward()
    assert w.grad.dtype == mp.f32  # the parameter's own dtype


def test_autocast_exits_on_exceptions_and_refuses_bad_dtypes():
    with pytest.raises(ValueError):
        with mp.autocast("f16"):
            raise ValueError("inside")
    assert not mp.is_autocast_enabled()
    with pytest.raises(mp.Error):
        with mp.autocast("i32"):
            pass
    assert not mp.is_autocast_enabled()
    with pytest.raises(RuntimeError, match="without a matching __enter__"):
        mp.autocast("bf16").__exit__(None, None, None)


def test_autocast_as_decorator_and_per_thread():
    @mp.autocast("f16")
    def inside():
        return mp.get_autocast_dtype(), mp.is_autocast_enabled()

    assert inside() == (mp.f16, True)
    seen = []
    with mp.autocast("bf16"):
        thread = threading.Thread(target=lambda: seen.append(mp.is_autocast_enabled()))
        thread.start()
        thread.join()
    assert seen == [False]  # modes are per thread, as in C++


def test_ops_run_while_other_threads_hold_the_interpreter():
    # The GIL is released around kernels: several Python threads run matmuls side by side and
    # each gets the right answer.
    a = mp.randn([96, 96])
    expected = (a @ a).numpy()
    results = [None] * 4

    def work(i):
        for _ in range(5):
            results[i] = (a @ a).numpy()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for r in results:
        np.testing.assert_array_equal(r, expected)


def test_gradients_match_pytorch_on_a_small_network():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    x_np = rng.standard_normal((6, 5)).astype(np.float32)
    w1_np = rng.standard_normal((8, 5)).astype(np.float32)
    b1_np = rng.standard_normal(8).astype(np.float32)
    w2_np = rng.standard_normal((3, 8)).astype(np.float32)
    y_np = np.array([0, 2, 1, 1, 0, 2])

    params = [mp.tensor(p).requires_grad_() for p in (w1_np, b1_np, w2_np)]
    w1, b1, w2 = params
    h = mp.gelu(mp.linear(mp.tensor(x_np), w1, b1))
    loss = mp.cross_entropy(mp.linear(mp.layer_norm(h, [8]), w2), mp.tensor(y_np))
    loss.backward()

    tp = [torch.tensor(p, requires_grad=True) for p in (w1_np, b1_np, w2_np)]
    th = torch.nn.functional.gelu(torch.nn.functional.linear(torch.tensor(x_np), tp[0], tp[1]))
    th = torch.nn.functional.layer_norm(th, [8])
    tloss = torch.nn.functional.cross_entropy(torch.nn.functional.linear(th, tp[2]),
                                              torch.tensor(y_np))
    tloss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
    for ours, theirs in zip(params, tp):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_the_training_loop_of_the_docs_learns():
    # docs/PYTHON.md's loop: a two-layer MLP under bf16 autocast with in-place SGD.
    mp.manual_seed(0)
    x = mp.randn([64, 4])
    y = mp.tensor(x.numpy()[:, 0] > 0).to("i64")
    w1 = (mp.randn([32, 4]) * 0.5).requires_grad_()
    b1 = mp.zeros([32]).requires_grad_()
    w2 = (mp.randn([2, 32]) * 0.5).requires_grad_()
    losses = []
    for _ in range(200):
        with mp.autocast("bf16"):
            loss = mp.cross_entropy(mp.linear(mp.relu(mp.linear(x, w1, b1)), w2), y)
        loss.backward()
        with mp.no_grad():
            for p in (w1, b1, w2):
                p.copy_(p - p.grad * 0.5)
                p.zero_grad()
        losses.append(loss.item())
    assert losses[0] > 0.5 and losses[-1] < 0.05
    assert w1.dtype == mp.f32  # autocast never changes a parameter's own dtype
