"""Python numbers in arithmetic: a + 1.0, 2 * a, a / 3, 1 - a, a ** 2 (issue #21).

The rules (DESIGN.md's numerics contract, PyTorch's for Python scalars): the number is applied
in f32 (f64 for an f64 tensor) and the result rounded once into the tensor's dtype; it is never
first rounded to a 16-bit dtype and never changes a floating tensor's dtype; a float turns an
integer or bool tensor into f32. Checked exhaustively for every bf16 and f16 bit pattern.
"""
import operator

import numpy as np
import pytest

import mixprec as mp

# (name, Python expression on a tensor or array x and a number s)
OPS = [
    ("a + s", lambda x, s: x + s),
    ("s + a", lambda x, s: s + x),
    ("a - s", lambda x, s: x - s),
    ("s - a", lambda x, s: s - x),
    ("a * s", lambda x, s: x * s),
    ("s * a", lambda x, s: s * x),
    ("a / s", lambda x, s: x / s),
    ("s / a", lambda x, s: s / x),
]
# 1e-3 and 0.1 are neither bf16 nor f16 numbers; 3 makes a / s differ from a * (1 / s).
NUMBERS = [1e-3, 0.1, 3, -2.5]


def bf16_bits_of_f32(f: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even f32 -> bf16 bits (NaN compared separately)."""
    u = f.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def all_bits() -> np.ndarray:
    return np.arange(65536, dtype=np.uint32).astype(np.uint16)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def assert_same_bits(got: np.ndarray, want: np.ndarray, got_nan, want_nan, what):
    np.testing.assert_array_equal(got_nan, want_nan, err_msg=what + ": NaN positions")
    keep = ~want_nan
    bad = np.nonzero(got[keep] != want[keep])[0]
    assert bad.size == 0, f"{what}: {bad.size} of 65536 patterns differ, first at {bad[:5]}"


@pytest.mark.parametrize("name,op", OPS)
def test_every_bf16_pattern_is_computed_in_f32_and_rounded_once(name, op):
    bits = all_bits()
    x = mp.from_numpy(bits.copy(), dtype="bf16")
    with np.errstate(all="ignore"):
        for s in NUMBERS:
            out = op(x, s)
            assert out.dtype == mp.bf16, f"{name}: a number must not promote bf16"
            got = np.asarray(out).view(np.uint16)
            want_f32 = op(bf16_values(bits), np.float32(s))
            assert want_f32.dtype == np.float32
            assert_same_bits(got, bf16_bits_of_f32(want_f32), np.isnan(bf16_values(got)),
                             np.isnan(want_f32), f"bf16 {name} with s={s}")


@pytest.mark.parametrize("name,op", OPS)
def test_every_f16_pattern_is_computed_in_f32_and_rounded_once(name, op):
    halves = all_bits().view(np.float16)
    x = mp.from_numpy(halves.copy())
    with np.errstate(all="ignore"):
        for s in NUMBERS:
            out = op(x, s)
            assert out.dtype == mp.f16
            got = out.numpy()
            want = op(halves.astype(np.float32), np.float32(s)).astype(np.float16)
            assert_same_bits(got.view(np.uint16), want.view(np.uint16), np.isnan(got),
                             np.isnan(want), f"f16 {name} with s={s}")


def test_hard_cases_by_name():
    # 1 + (2^-8 + 2^-20): above the tie between 1 and 1 + 2^-7, so it rounds up; rounding the
    # number to bf16 first (2^-8) would make it the tie, and RNE would give 1.
    one = mp.ones([37], "bf16")
    assert (one + (2.0**-8 + 2.0**-20)).to("f32").tolist() == [1.0 + 2.0**-7] * 37
    # 65536 * 2^-140 = 2^-124; bf16(2^-140) is 0 (below the smallest subnormal, 2^-133).
    assert (mp.full([37], 65536.0, "bf16") * 2.0**-140).to("f64").tolist() == [2.0**-124] * 37
    # f16 1000 / 1e7: divided in f32 (1e-4 rounds to 1678 * 2^-24); 1e7 in f16 would be inf.
    assert (mp.full([37], 1000.0, "f16") / 1e7).to("f64").tolist() == [1678 * 2.0**-24] * 37
    # f64 tensors compute in f64: 0.1 + 0.2 is the double sum, not an f32 one.
    assert (mp.full([3], 0.1, "f64") + 0.2).tolist() == [0.1 + 0.2] * 3
    # 1 - a and 1 / a keep the order of the operands.
    a = mp.tensor([2.0, 4.0])
    assert (1 - a).tolist() == [-1.0, -3.0] and (1 / a).tolist() == [0.5, 0.25]


def test_f32_matches_numpy_bit_for_bit():
    mp.manual_seed(3)
    x = mp.randn([1000]) * 100.0
    xs = x.numpy()
    for name, op in OPS:
        for s in NUMBERS:
            want = op(xs, np.float32(s))
            np.testing.assert_array_equal(op(x, s).numpy(), want, err_msg=f"{name} with s={s}")


def test_dtype_promotion_follows_pytorch():
    for dtype in ("f64", "f32", "f16", "bf16"):
        t = mp.ones([4], dtype)
        for result in (t + 1, t + 1.5, 2 * t, t / 3, 1 - t, t**2, t + True):
            assert result.dtype == mp.as_dtype(dtype)
    # A float with an integer or bool tensor computes in f32, the default dtype.
    i = mp.tensor([1, 2, 3])
    assert i.dtype == mp.i64
    assert (i * 0.5).dtype == mp.f32 and (i * 0.5).tolist() == [0.5, 1.0, 1.5]
    assert (1.5 - i).tolist() == [0.5, -0.5, -1.5]
    assert (mp.tensor(np.array([True, False])) + 0.25).tolist() == [1.25, 0.25]
    # An int with an integer tensor would stay integer in PyTorch; mixprec has no integer
    # arithmetic and says so.
    with pytest.raises(mp.Error, match="add"):
        i + 1


def test_numbers_of_every_python_and_numpy_kind():
    t = mp.tensor([1.0, 2.0])
    for s in (2, 2.0, True, np.float32(2.0), np.float64(2.0), np.int64(2), np.float16(2.0)):
        f = float(s)
        assert (t * s).tolist() == [f, 2 * f] and (s + t).tolist() == [1 + f, 2 + f]
        assert (s * t).dtype == mp.f32, type(s)
    assert mp.add(t, 1).tolist() == [2.0, 3.0] and mp.div(t, 4).tolist() == [0.25, 0.5]
    assert mp.mul(t, t).tolist() == [1.0, 4.0]


def test_what_is_not_a_number_is_a_type_error():
    t = mp.tensor([1.0, 2.0])
    for bad in ("1", [1.0], None, 1j):
        for op in (operator.add, operator.sub, operator.mul, operator.truediv, operator.pow):
            with pytest.raises(TypeError):
                op(t, bad)
            with pytest.raises(TypeError):
                op(bad, t)
    with pytest.raises(TypeError, match=r"\[add\] b must be a Tensor or a number"):
        mp.add(t, "1")


def test_gradients_of_scalar_ops():
    x = mp.tensor([0.5, 2.0, -4.0]).requires_grad_()
    y = ((x + 1.0) * 3.0 - 2.0) / 4.0 + (1.0 - x) + 2.0 / x + x**2
    y.sum().backward()
    xs = np.array([0.5, 2.0, -4.0], dtype=np.float64)
    want = 3.0 / 4.0 - 1.0 - 2.0 / xs**2 + 2 * xs
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)


def test_against_pytorch_when_installed():
    """PyTorch's f32 path rounded once is the same bits. PyTorch's own bf16 CPU kernels (1.13)
    round the number to bf16 first, so they agree with mixprec only for numbers that are bf16
    numbers (3, -2.5; 0.001 and 0.1 differ: the contract here is the f32 one); and they compute
    s / a as s * (1 / a), rounded twice, so that form is left to the f32 reference above."""
    torch = pytest.importorskip("torch")
    bits = all_bits()
    x = mp.from_numpy(bits.copy(), dtype="bf16")
    tx = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16)
    for name, op in OPS:
        if name == "s / a":
            continue
        for s in NUMBERS:
            got = np.asarray(op(x, s)).view(np.uint16)
            nan = np.isnan(bf16_values(got))
            via_f32 = op(tx.float(), s).bfloat16()
            assert op(tx, s).dtype == torch.bfloat16  # the same promotion rule
            assert_same_bits(got, via_f32.view(torch.int16).numpy().view(np.uint16), nan,
                             torch.isnan(via_f32).numpy(), f"bf16 {name} with s={s} vs PyTorch f32")
            if s in (3, -2.5):
                direct = op(tx, s)
                assert_same_bits(got, direct.view(torch.int16).numpy().view(np.uint16), nan,
                                 torch.isnan(direct).numpy(), f"bf16 {name} with s={s} vs PyTorch")
    # The gradient through a scalar op, loss-scaled in bf16 (PyTorch keeps it too).
    a = mp.full([5], 3.0, "bf16").requires_grad_()
    (a / 7.0).backward(mp.full([5], 65536.0, "bf16"))
    ta = torch.full([5], 3.0, dtype=torch.bfloat16, requires_grad=True)
    (ta / 7.0).backward(torch.full([5], 65536.0, dtype=torch.bfloat16))
    assert a.grad.to("f32").tolist() == ta.grad.float().tolist()
