"""numpy and DLPack interop: no copies, owners kept alive and released, bit patterns exact."""
import gc
import weakref

import numpy as np
import pytest

import mixprec as mp


def address(array):
    return array.__array_interface__["data"][0]


# ---- numpy -> mixprec ----


@pytest.mark.parametrize(
    "np_dtype, dtype",
    [(np.float64, mp.f64), (np.float32, mp.f32), (np.float16, mp.f16), (np.int64, mp.i64),
     (np.int32, mp.i32), (np.uint8, mp.u8), (np.bool_, mp.bool_)],
)
def test_from_numpy_shares_memory(np_dtype, dtype):
    a = np.arange(12).astype(np_dtype).reshape(3, 4)
    t = mp.from_numpy(a)
    assert t.dtype == dtype
    assert t.shape == (3, 4) and t.strides == (4, 1)
    assert t.data_ptr == address(a)
    a[2, 3] = 1
    assert t[2, 3].item() == 1  # a write through numpy is seen by the tensor
    t[0] = 0
    assert not a[0].any()  # and a write through the tensor by numpy


def test_strided_arrays_are_views_with_element_strides():
    a = np.arange(48, dtype=np.float32).reshape(6, 8)
    view = a[1::2, ::3]
    t = mp.from_numpy(view)
    assert t.data_ptr == address(view)
    assert t.shape == view.shape and t.strides == (16, 3)
    np.testing.assert_array_equal(t.numpy(), view)
    assert not t.is_contiguous()


def test_tensor_keeps_the_array_alive_and_releases_it():
    a = np.full(4096, 7.0, dtype=np.float32)
    owner = weakref.ref(a)
    t = mp.from_numpy(a)
    view = t[10:20]
    del a, t
    gc.collect()
    assert owner() is not None  # the view still holds the array
    np.full(4096, -1.0, dtype=np.float32)  # memory churn that would reuse a freed block
    assert view.numpy().tolist() == [7.0] * 10
    del view
    gc.collect()
    assert owner() is None  # and lets it go with the last view: no leak


def test_a_borrowed_array_cannot_be_resized_under_the_tensor():
    a = np.zeros(4, dtype=np.float32)
    t = mp.from_numpy(a)
    with pytest.raises(ValueError):  # the exported buffer holds a reference: numpy refuses
        a.resize(1 << 20)
    assert t.data_ptr == address(a)


def test_read_only_arrays_are_refused():
    a = np.zeros(4, dtype=np.float32)
    a.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        mp.from_numpy(a)


def test_negative_strides_are_refused():
    a = np.arange(8, dtype=np.float32)
    with pytest.raises(ValueError, match="stride"):
        mp.from_numpy(a[::-1])


@pytest.mark.parametrize(
    "bad, error",
    [("not an array", TypeError), ([1.0, 2.0], TypeError),
     (np.zeros(3, dtype=np.complex64), TypeError), (np.zeros(3, dtype=">f4"), TypeError),
     (np.zeros(3, dtype=np.uint16), TypeError), (np.zeros(3, dtype=np.int8), TypeError)],
)
def test_unsupported_inputs_raise(bad, error):
    with pytest.raises(error, match=r"\[from_numpy\]"):
        mp.from_numpy(bad)


def test_reinterpretation_is_limited_to_uint16_bits():
    with pytest.raises(TypeError, match="cannot view"):
        mp.from_numpy(np.zeros(3, dtype=np.float32), dtype="bf16")
    with pytest.raises(mp.Error, match="unknown dtype"):
        mp.from_numpy(np.zeros(3, dtype=np.uint16), dtype="b16")


def test_misaligned_buffers_are_refused():
    raw = np.zeros(17, dtype=np.uint8)
    misaligned = raw[1:].view(np.float32)  # numpy allows it; kernels may not
    with pytest.raises(ValueError, match="aligned"):
        mp.from_numpy(misaligned)


# ---- mixprec -> numpy ----


def test_numpy_view_shares_memory_and_keeps_the_tensor_alive():
    t = mp.arange(10.0)
    n = t.numpy()
    assert address(n) == t.data_ptr
    n[3] = 42.0
    assert t[3].item() == 42.0
    del t
    gc.collect()
    mp.ones([10])  # the caching allocator would hand a freed block straight back
    assert n.tolist() == [0, 1, 2, 42, 4, 5, 6, 7, 8, 9]


def test_numpy_of_a_view_uses_its_strides():
    t = mp.arange(24.0).reshape(2, 3, 4)
    v = t.transpose(0, 2)[1:, :, 1]
    n = np.asarray(v)
    expected = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4).transpose(2, 1, 0)[1:, :, 1]
    np.testing.assert_array_equal(n, expected)
    assert address(n) == v.data_ptr


def test_bf16_tensors_appear_as_bits_or_ml_dtypes():
    t = mp.tensor([1.0, -2.0, 0.5]).to("bf16")
    n = t.numpy()
    assert n.dtype == mp.numpy_bf16_dtype()
    np.testing.assert_array_equal(n.view(np.uint16), [0x3F80, 0xC000, 0x3F00])


def test_empty_tensors_export():
    assert mp.zeros([0, 3]).numpy().shape == (0, 3)


# ---- the conversion path, bit for bit over all 65536 patterns ----

ALL_BITS = np.arange(65536, dtype=np.uint32).astype(np.uint16)


def is_nan16(bits, exponent_mask, mantissa_mask):
    return ((bits & exponent_mask) == exponent_mask) & ((bits & mantissa_mask) != 0)


def test_bf16_bits_survive_import_export_and_f32_round_trip():
    bits = ALL_BITS.copy()
    t = mp.from_numpy(bits, dtype="bf16")
    assert t.dtype == mp.bf16 and t.data_ptr == address(bits)
    np.testing.assert_array_equal(t.numpy().view(np.uint16), ALL_BITS)  # no copy, no change

    wide = t.to("f32").numpy().view(np.uint32)
    exact = ALL_BITS.astype(np.uint32) << 16  # bf16 is the top half of an f32
    nan = is_nan16(ALL_BITS, 0x7F80, 0x007F)
    np.testing.assert_array_equal(wide[~nan], exact[~nan])
    assert np.isnan(wide[nan].view(np.float32)).all()

    back = t.to("f32").to("bf16").numpy().view(np.uint16)
    np.testing.assert_array_equal(back[~nan], ALL_BITS[~nan])
    assert is_nan16(back[nan], 0x7F80, 0x007F).all()  # NaN stays NaN
    np.testing.assert_array_equal(back[nan] & 0x8000, ALL_BITS[nan] & 0x8000)


def test_f16_bits_survive_import_export_and_f32_round_trip():
    bits = ALL_BITS.copy()
    halves = bits.view(np.float16)
    t = mp.from_numpy(halves)
    assert t.dtype == mp.f16 and t.data_ptr == address(halves)
    np.testing.assert_array_equal(t.numpy().view(np.uint16), ALL_BITS)
    assert mp.from_numpy(bits, dtype="f16").data_ptr == address(bits)

    nan = is_nan16(ALL_BITS, 0x7C00, 0x03FF)
    wide = t.to("f32").numpy()
    reference = halves.astype(np.float32)  # numpy's own exact widening
    np.testing.assert_array_equal(wide.view(np.uint32)[~nan], reference.view(np.uint32)[~nan])
    assert np.isnan(wide[nan]).all()

    back = t.to("f32").to("f16").numpy().view(np.uint16)
    np.testing.assert_array_equal(back[~nan], ALL_BITS[~nan])
    assert is_nan16(back[nan], 0x7C00, 0x03FF).all()


def reference_f32_to_bf16(words):
    """Round to nearest even on the top 16 bits; NaNs are checked apart."""
    words = words.astype(np.uint64)
    return ((words + 0x7FFF + ((words >> 16) & 1)) >> 16).astype(np.uint16)


def test_f32_to_bf16_rounds_to_nearest_even():
    rng = np.random.default_rng(21)
    words = rng.integers(0, 2**32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 2**16, size=4096, dtype=np.uint32) << 16) | 0x8000  # exact halves
    words = np.concatenate([words, ties, np.array([0x7F7FFFFF, 0xFF7FFFFF], np.uint32)])
    values = words.view(np.float32)
    got = mp.from_numpy(values).to("bf16").numpy().view(np.uint16)
    nan = np.isnan(values)
    np.testing.assert_array_equal(got[~nan], reference_f32_to_bf16(words[~nan]))
    assert is_nan16(got[nan], 0x7F80, 0x007F).all()


def test_f32_to_f16_matches_numpy():
    rng = np.random.default_rng(16)
    values = rng.standard_normal(1 << 16).astype(np.float32) * np.float32(2.0) ** rng.integers(
        -30, 20, size=1 << 16).astype(np.float32)
    values = np.concatenate([values, np.array([65504, 65519.996, 65520, 6e-8, 2.9e-8], np.float32)])
    got = mp.from_numpy(values).to("f16").numpy()
    with np.errstate(over="ignore"):  # 65520 and above overflow to inf, on purpose
        expected = values.astype(np.float16)
    np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))


def test_conversions_agree_with_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.random.default_rng(3).standard_normal(4096).astype(np.float32)
    got = mp.from_numpy(values).to("bf16").numpy()
    assert got.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.view(np.uint16),
                                  values.astype(ml_dtypes.bfloat16).view(np.uint16))
    back = mp.from_numpy(got)  # an ml_dtypes array imports as bf16, still without a copy
    assert back.dtype == mp.bf16 and back.data_ptr == address(got)


# ---- DLPack ----


def test_dlpack_export_to_numpy_shares_memory_and_keeps_the_tensor_alive():
    t = mp.arange(6.0).reshape(2, 3)
    n = np.from_dlpack(t)  # numpy marks arrays it takes through DLPack read-only
    assert address(n) == t.data_ptr and n.shape == (2, 3)
    t[1, 1] = -5.0
    assert n[1, 1] == -5.0
    del t
    gc.collect()
    mp.ones([6])
    assert n.tolist() == [[0, 1, 2], [3, -5, 5]]


def test_dlpack_import_from_numpy_shares_memory_and_releases_it():
    a = np.arange(10, dtype=np.float32)
    owner = weakref.ref(a)
    t = mp.from_dlpack(a)
    assert t.data_ptr == address(a) and t.dtype == mp.f32
    del a
    gc.collect()
    assert owner() is not None
    assert t.numpy().tolist() == list(range(10))
    del t
    gc.collect()
    assert owner() is None


def test_dlpack_round_trip_keeps_bf16():
    t = mp.tensor([1.5, -3.0]).to("bf16")
    u = mp.from_dlpack(t)
    assert u.dtype == mp.bf16 and u.data_ptr == t.data_ptr
    assert u.to("f32").numpy().tolist() == [1.5, -3.0]


def test_dlpack_capsule_is_consumed_once():
    capsule = mp.ones([3]).__dlpack__()
    assert mp.from_dlpack(capsule).numpy().tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="consumed once"):
        mp.from_dlpack(capsule)


def test_dlpack_from_another_device_is_refused():
    class OnGpu:
        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

        def __dlpack__(self, **kwargs):
            raise AssertionError("must not be asked for its memory")

    with pytest.raises(ValueError, match="device type 2"):
        mp.from_dlpack(OnGpu())
    with pytest.raises(TypeError, match="__dlpack__"):
        mp.from_dlpack(3.0)


def test_dlpack_with_pytorch():
    torch = pytest.importorskip("torch")
    x = torch.arange(8, dtype=torch.bfloat16)
    t = mp.from_dlpack(x)
    assert t.dtype == mp.bf16 and t.data_ptr == x.data_ptr()
    y = torch.from_dlpack(t)
    assert y.dtype == torch.bfloat16 and y.data_ptr() == t.data_ptr
    assert torch.equal(x.view(torch.int16), y.view(torch.int16))
    v = torch.arange(12.0).reshape(3, 4).t()  # a transposed view keeps its strides, no copy
    tv = mp.from_dlpack(v)
    assert tv.strides == (1, 4) and tv.data_ptr == v.data_ptr()
    assert tv.numpy().tolist() == v.tolist()
    assert mp.from_dlpack(torch.zeros(0, 3)).shape == (0, 3)


def test_all_bf16_and_f16_patterns_agree_with_pytorch():
    torch = pytest.importorskip("torch")
    bits = ALL_BITS.astype(np.int16)  # torch has no uint16: the same bits as int16
    for name, torch_dtype, nan in [("bf16", torch.bfloat16, is_nan16(ALL_BITS, 0x7F80, 0x007F)),
                                   ("f16", torch.float16, is_nan16(ALL_BITS, 0x7C00, 0x03FF))]:
        x = torch.from_numpy(bits.copy()).view(torch_dtype)
        t = mp.from_dlpack(x)  # torch's memory, no copy
        assert t.dtype == mp.as_dtype(name) and t.data_ptr == x.data_ptr()
        ours = t.to("f32").numpy().view(np.uint32)
        theirs = x.float().numpy().view(np.uint32)
        np.testing.assert_array_equal(ours[~nan], theirs[~nan])
        # and back: torch reads the rounding of f32 words as mixprec made it
        words = np.random.default_rng(7).integers(0, 2**32, 1 << 18, dtype=np.uint64)
        values = words.astype(np.uint32).view(np.float32)
        finite = ~np.isnan(values)
        ours16 = torch.from_dlpack(mp.from_numpy(values).to(name)).view(torch.int16).numpy()
        theirs16 = torch.from_numpy(values).to(torch_dtype).view(torch.int16).numpy()
        np.testing.assert_array_equal(ours16[finite], theirs16[finite])


def test_all_bf16_patterns_agree_with_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    nan = is_nan16(ALL_BITS, 0x7F80, 0x007F)
    theirs = ALL_BITS.view(ml_dtypes.bfloat16).astype(np.float32)
    ours = mp.from_numpy(ALL_BITS.copy(), dtype="bf16").to("f32").numpy()
    np.testing.assert_array_equal(ours.view(np.uint32)[~nan], theirs.view(np.uint32)[~nan])


def test_a_borrowed_tensor_saved_by_autograd_is_released_after_backward():
    a = np.ones(4, dtype=np.float32)
    owner = weakref.ref(a)
    x = mp.from_numpy(a)
    w = mp.ones([4]).requires_grad_()
    loss = mp.sum(mp.mul(x, w))  # the graph saves x for w's gradient
    del a, x
    gc.collect()
    assert owner() is not None
    loss.backward()  # frees the graph, and with it the borrow, while the GIL is released
    del loss
    gc.collect()
    assert owner() is None
    assert w.grad.numpy().tolist() == [1.0] * 4
