# mixprec.video: the shipped model's stream from Python, frame by frame.
import itertools
import pathlib

import numpy as np
import pytest

import mixprec as mp

SHIPPED = pathlib.Path(__file__).resolve().parents[2] / "checkpoints" / "video_anchor_map.safetensors"


@pytest.fixture(scope="module")
def shipped():
    if not SHIPPED.exists():
        pytest.skip(f"no shipped model at {SHIPPED}")
    return str(SHIPPED)


def test_stream_yields_8bit_frames_deterministically(shipped):
    stream = mp.video.VideoStream(shipped, dtype="bf16", seed=3, steps=2)
    frames = list(itertools.islice(stream, 3))
    assert stream.frames_generated == 3
    assert stream.video == 1 << 20  # the first held-out video
    for f in frames:
        assert f.shape == (3, 64, 64) and f.dtype == np.float32
        assert f.min() >= -1.0 and f.max() <= 1.0
        levels = (f.astype(np.float64) + 1.0) * 127.5  # on the 256 levels a viewer sees
        np.testing.assert_allclose(levels, np.rint(levels), atol=1e-3)
    assert np.abs(frames[2] - frames[0]).max() > 0  # the picture changes
    again = list(itertools.islice(mp.video.VideoStream(shipped, dtype="bf16", seed=3, steps=2), 3))
    for a, b in zip(frames, again):
        np.testing.assert_array_equal(a, b)
    # The shipped model predicts each frame directly, in one forward: it draws no noise, so
    # another seed makes the same frames.
    assert stream.prediction == "direct"
    other = next(mp.video.VideoStream(shipped, dtype="bf16", seed=4, steps=2))
    np.testing.assert_array_equal(other, frames[0])


def test_to_uint8_is_the_image_writers_mapping():
    frame = np.array([-1.0, 0.0, 1.0, 2.0, -3.0, np.nan], dtype=np.float32).reshape(3, 1, 2)
    image = mp.video.to_uint8(frame)
    assert image.shape == (1, 2, 3) and image.dtype == np.uint8
    assert image[0, 0].tolist() == [0, 255, 0]  # -1, 1, -3 (clamped)
    assert image[0, 1].tolist() == [128, 255, 0]  # 0, 2 (clamped), NaN
    with pytest.raises(ValueError, match=r"\[3, H, W\]"):
        mp.video.to_uint8(np.zeros((4, 2, 2)))


def test_bad_arguments_raise_clear_errors(shipped, tmp_path):
    with pytest.raises(mp.Error, match="missing.safetensors"):
        mp.video.VideoStream(tmp_path / "missing.safetensors")
    with pytest.raises(mp.Error, match="dtype must be f32, bf16 or f16"):
        mp.video.VideoStream(shipped, dtype="f64")
    with pytest.raises(mp.Error, match="steps must be >= 1"):
        mp.video.VideoStream(shipped, steps=0)
    with pytest.raises(TypeError):
        mp.video.VideoStream(shipped, dtype=3.5)


def test_unet_forward_from_python(tmp_path):
    mp.manual_seed(0)
    model = mp.video.UNetVideo("lightweight", seed=3)
    x = mp.randn([1, 3, 32, 32])
    context = mp.randn([1, 3 * model.context_frames, 32, 32])
    t = mp.full([1], 500.0)
    with mp.inference_mode():
        out = model(x, context, t)
        assert out.shape == (1, 3, 32, 32) and out.dtype == mp.f32
        np.testing.assert_array_equal(model.forward(x, context, t).numpy(), out.numpy())
        # The C++ loop the overhead benchmark times runs the same forward.
        seconds = mp._mixprec._forward_seconds_from_cpp(model, x, context, t, 2)
        assert len(seconds) == 2 and all(s > 0 for s in seconds)
        model.to("bf16")
        half = model(x.to("bf16"), context.to("bf16"), t)
    assert half.dtype == mp.bf16
    np.testing.assert_allclose(half.to("f32").numpy(), out.numpy(), atol=0.1)
    path = str(tmp_path / "missing.safetensors")
    with pytest.raises(mp.Error):
        mp.video.load_model(path)
    with pytest.raises(mp.Error, match="preset"):
        mp.video.UNetVideo("huge")


def test_a_model_file_loads_into_a_unet():
    model = mp.video.load_model(SHIPPED)
    assert model.parameter_count() > 0 and model.gflop_per_forward(64, 64) > 0
    # Two context frames and the anchor, then the previous frame's flow.
    assert model.context_frames == 3 and model.context_channels == 3 * 3 + 2
    with mp.inference_mode():
        out = model(mp.zeros([1, 3, 64, 64]), mp.zeros([1, model.context_channels, 64, 64]),
                    mp.full([1], 10.0))
    assert out.shape[0] == 1 and out.shape[2:] == (64, 64)
