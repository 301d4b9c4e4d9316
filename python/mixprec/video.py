"""mixprec.video: the live stream of a trained video model, frame by frame (docs/VIDEO.md).

    import itertools, mixprec as mp
    stream = mp.video.VideoStream("checkpoints/video_anchor_map.safetensors", dtype="bf16")
    for frame in itertools.islice(stream, 100):   # numpy float32 [3, H, W] in [-1, 1]
        ...
    image = mp.video.to_uint8(frame)              # numpy uint8 [H, W, 3], as the GIF shows it

Each frame is conditioned on the ones before it, exactly as `mixprec video generate` makes it
(the model file's recommended stream settings, 8-bit frames fed back); the stream starts on the
first frames of a held-out video of the dataset the model was trained on.
"""
from __future__ import annotations

import numpy as np

from ._mixprec import UNetVideo, _VideoStream
from ._mixprec import load_video_model as _load_video_model


def load_model(path) -> UNetVideo:
    """The network of a video model file, f32 (model.to("bf16") for true half precision).

        model = mp.video.load_model("checkpoints/video_anchor_map.safetensors")
        with mp.inference_mode():
            v = model(x_t, context, timesteps)   # [B, 3, H, W], [B, 3F, H, W], [B]
    """
    return _load_video_model(str(path))


class VideoStream:
    """An endless iterator of generated frames (numpy float32 [3, H, W] in [-1, 1]).

    checkpoint: a model file written by `mixprec video train`; dtype: "f32", "bf16" (true half
    precision, the default) or "f16"; video: the dataset video whose first frames start the
    stream (-1: the first held-out one); seed: the noise seed; steps: DDIM steps per frame (a
    direct model makes each frame in one forward whatever is asked); context_noise: the noise
    added to the context before each frame (None: the model file's recommendation).
    """

    def __init__(self, checkpoint, dtype="bf16", video=-1, seed=0, steps=4, context_noise=None):
        self._stream = _VideoStream(str(checkpoint), dtype, video, seed, steps, context_noise)

    def __iter__(self):
        return self

    def __next__(self):
        return self._stream.next().numpy()

    @property
    def frames_generated(self) -> int:
        return self._stream.frames_generated

    @property
    def video(self) -> int:
        """The dataset video the stream started on."""
        return self._stream.video

    @property
    def prediction(self) -> str:
        """How the model makes a frame: "v" or "eps" (diffusion) or "direct"."""
        return self._stream.prediction


def to_uint8(frame) -> np.ndarray:
    """A [3, H, W] frame in [-1, 1] as [H, W, 3] bytes, rounded as the PNG and GIF writers do."""
    f = np.asarray(frame, dtype=np.float32)
    if f.ndim != 3 or f.shape[0] != 3:
        raise ValueError(f"expected a [3, H, W] frame, got shape {f.shape}")
    v = np.clip(np.nan_to_num(f.astype(np.float64), nan=-1.0), -1.0, 1.0)
    return np.minimum(np.floor((v + 1.0) * 127.5 + 0.5), 255).astype(np.uint8).transpose(1, 2, 0)


__all__ = ["UNetVideo", "VideoStream", "load_model", "to_uint8"]
