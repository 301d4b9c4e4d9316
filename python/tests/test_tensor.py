"""Tensor basics, views, the functional ops against numpy, and error reporting."""
import numpy as np
import pytest

import mixprec as mp


def test_creation_and_queries():
    t = mp.zeros([2, 3], dtype="bf16")
    assert t.dtype == mp.bf16 and t.shape == (2, 3) and t.strides == (3, 1)
    assert t.ndim == 2 and t.numel() == 6 and t.element_size == 2 and t.nbytes == 12
    assert mp.ones([4], mp.float64).numpy().tolist() == [1.0] * 4
    assert mp.full([2], 2.5, "f16").to("f32").numpy().tolist() == [2.5, 2.5]
    assert mp.arange(1, 7, 2).numpy().tolist() == [1.0, 3.0, 5.0]
    assert mp.tensor([[1, 2], [3, 4]]).dtype == mp.i64
    assert mp.tensor([0.1, 0.2]).dtype == mp.f32
    assert "tensor(" in repr(mp.ones([2]))


def test_tensor_copies_its_input():
    a = np.ones(3, dtype=np.float32)
    t = mp.tensor(a)
    a[0] = 5.0
    assert t.numpy()[0] == 1.0 and t.data_ptr != a.ctypes.data


def test_random_is_reproducible():
    mp.manual_seed(7)
    a = mp.randn([64])
    mp.manual_seed(7)
    b = mp.randn([64])
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    u = mp.rand([1000], "bf16").to("f32").numpy()
    assert u.min() >= 0.0 and u.max() < 1.0


def test_views_share_storage_and_match_numpy():
    base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = mp.tensor(base)
    cases = [
        (t.transpose(0, 2), base.transpose(2, 1, 0)),
        (t.permute(1, 2, 0), base.transpose(1, 2, 0)),
        (t[1], base[1]),
        (t[:, 1:3, ::2], base[:, 1:3, ::2]),
        (t[..., -1], base[..., -1]),
        (t[None, 0], base[None, 0]),
        (t.view(12, 5), base.reshape(12, 5)),
        (t.reshape(-1), base.reshape(-1)),
        (t.narrow(2, 1, 3), base[:, :, 1:4]),
        (t[0, 0].unsqueeze(0).expand(4, 5), np.broadcast_to(base[0, 0], (4, 5))),
        (t.flatten(1), base.reshape(3, 20)),
        (t[:1].squeeze(0), base[0]),
    ]
    for view, expected in cases:
        assert view.shares_storage(t)
        np.testing.assert_array_equal(view.numpy(), expected)


def test_setitem_writes_through_views():
    t = mp.zeros([3, 4])
    t[1] = 2.0
    t[:, 3] = mp.tensor([7.0, 8.0, 9.0])
    expected = np.zeros((3, 4), np.float32)
    expected[1] = 2.0
    expected[:, 3] = [7, 8, 9]
    np.testing.assert_array_equal(t.numpy(), expected)


def test_elementwise_ops_match_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    ta, tb = mp.tensor(a), mp.tensor(b)
    np.testing.assert_allclose((ta + tb).numpy(), a + b, rtol=1e-6)
    np.testing.assert_allclose((ta - tb).numpy(), a - b, rtol=1e-6)
    np.testing.assert_allclose(mp.mul(ta, tb).numpy(), a * b, rtol=1e-6)
    np.testing.assert_allclose((ta / tb).numpy(), a / b, rtol=1e-6)
    np.testing.assert_allclose((ta * 3.0).numpy(), a * 3, rtol=1e-6)
    np.testing.assert_allclose((0.5 * ta).numpy(), a * 0.5, rtol=1e-6)
    np.testing.assert_allclose((-ta).numpy(), -a)
    np.testing.assert_allclose(mp.relu(ta).numpy(), np.maximum(a, 0))
    np.testing.assert_allclose(mp.exp(ta).numpy(), np.exp(a), rtol=1e-5)
    np.testing.assert_allclose(mp.tanh(ta).numpy(), np.tanh(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mp.clamp(ta, -0.5, 0.5).numpy(), np.clip(a, -0.5, 0.5))
    np.testing.assert_allclose(mp.add(ta, mp.tensor(b[0])).numpy(), a + b[0], rtol=1e-6)


def test_matmul_linear_and_reductions_match_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((4, 16)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    ta, tw = mp.tensor(a), mp.tensor(w)
    np.testing.assert_allclose((ta @ tw.T).numpy(), a @ w.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mp.linear(ta, tw, mp.tensor(bias)).numpy(), a @ w.T + bias,
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mp.sum(ta).item(), a.sum(), rtol=1e-5)
    np.testing.assert_allclose(mp.sum(ta, 1).numpy(), a.sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mp.mean(ta, [0], keepdim=True).numpy(), a.mean(0, keepdims=True),
                               rtol=1e-5, atol=1e-6)
    soft = mp.softmax(ta, -1).numpy()
    e = np.exp(a - a.max(-1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_bf16_matmul_is_close_to_f32():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((64, 16)).astype(np.float32)
    got = (mp.tensor(a).to("bf16") @ mp.tensor(b).to("bf16"))
    assert got.dtype == mp.bf16
    np.testing.assert_allclose(got.to("f32").numpy(), a @ b, rtol=0.05, atol=0.3)


def test_bf16_sums_accumulate_in_f32():
    # DESIGN.md's contract: naive bf16 accumulation would stall at 256. The f32 total, 100000,
    # is rounded once into the bf16 result: 99840 is its nearest bf16 (spacing 512 there).
    assert mp.sum(mp.ones([100000], "bf16")).to("f32").item() == 99840.0
    assert mp.sum(mp.ones([100000], "bf16").to("f32")).item() == 100000.0


def test_user_mistakes_raise_with_the_cpp_message():
    with pytest.raises(mp.Error, match=r"\[matmul\]"):
        mp.zeros([2, 3]) @ mp.zeros([4, 5])
    with pytest.raises(mp.Error, match="unknown dtype 'f8'"):
        mp.zeros([2], dtype="f8")
    with pytest.raises(mp.Error):
        mp.add(mp.zeros([2, 3]), mp.zeros([4]))
    with pytest.raises(mp.Error, match="view"):
        mp.zeros([3, 4]).t().view(12)
    with pytest.raises(mp.Error, match="index"):
        mp.zeros([2, 2])[0, 0, 0]
    with pytest.raises(RuntimeError):  # mp.Error is a RuntimeError, as PyTorch's errors are
        mp.zeros([2])[5]
    with pytest.raises(IndexError, match="int64"):
        mp.zeros([2])[10**30]
    with pytest.raises(TypeError, match="indexed by"):
        mp.zeros([2])[1.5]
    with pytest.raises(TypeError):
        mp.zeros([2]) + "1"
    with pytest.raises(TypeError, match="dtype"):
        mp.zeros([2], dtype=3)
    with pytest.raises(mp.Error, match="reduction"):
        mp.mse_loss(mp.zeros([2]), mp.zeros([2]), reduction="avg")


def test_type_stubs_ship_with_the_package():
    import os

    folder = os.path.dirname(mp.__file__)
    assert os.path.exists(os.path.join(folder, "py.typed"))
    with open(os.path.join(folder, "_mixprec.pyi")) as f:
        stubs = f.read()
    for name in ("class Tensor:", "def from_dlpack(", "class AdamW(", "def matmul("):
        assert name in stubs
