"""mixprec.stream: Bragg peaks of X-ray detector frames, as `mixprec stream run` finds them.

    import mixprec as mp
    finder = mp.stream.PeakFinder("single")                        # peakfinder8-style
    peaks = finder(frame)              # numpy [H, W] or [P, H, W], uint16 raw or float32
    peaks["x"], peaks["y"], peaks["intensity"], peaks["pixels"]    # one row a peak
    lists = finder.find_batch(frames)  # [B, P, H, W] (or [B, H, W]): one array a frame

    net = mp.stream.PeakFinder("single", finder="net", model="model.safetensors",
                               precision="bf16")                    # PeakNet, bf16 at the source

The finders are the command line's, and so are the peaks, bit for bit. A frame is converted
once, from its element type straight into the finder's working dtype (f32 for the classical
finder; the network's input dtype, bf16 by default, so uint16 frames become bf16 with no f32 on
the way), or read where it is, without a copy, when it already holds that dtype (float32 frames
for the classical finder or an fp32 network; bf16 tensors for a bf16 network).
`finder.last_input` says which happened. The GIL is released while a finder runs.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from ._mixprec import (
    ClassicFinderOptions,
    DetectorGeometry,
    MaskPeakOptions,
    _FrameFile,
    _PeakFinder,
    _SyntheticDetector,
    _peak_fields,
    _true_peak_fields,
    detector_geometry,
    detector_names,
    panel_centred_geometry,
)


def _record_dtype(fields) -> np.dtype:
    names, offsets, formats = zip(*[(n, o, f) for n, o, f in fields])
    size = max(offsets) + 4  # every field is 4 bytes
    return np.dtype({"names": list(names), "formats": list(formats), "offsets": list(offsets),
                     "itemsize": size})


PEAK_DTYPE = _record_dtype(_peak_fields())
"""A found peak: panel, x (column), y (row) in panel pixels (centres at integers), intensity
(background-subtracted total), pixels, max_value, background, background_sigma, snr."""
TRUE_PEAK_DTYPE = _record_dtype(_true_peak_fields())
"""A generated spot: panel, x, y, intensity (expected, ADU), sigma (px), snr (expected)."""


def _records(rows: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return rows.view(dtype).reshape(-1)  # [n, itemsize] bytes -> n records, no copy


class FrameFile:
    """An HDF5 frame file (`mixprec stream produce`, or a beamline's /entry_1/data_1/data).

    len(file) frames; read(i) gives frame i in the file's own element type, [P, H, W];
    geometry (stored, or every panel centred on the beam), bad_pixels (uint8 [P, H, W] or None),
    ground_truth (one TRUE_PEAK_DTYPE array a frame, or None). "FILE.h5:/dataset" names another
    dataset.
    """

    def __init__(self, path: Union[str, os.PathLike]):
        self._file = _FrameFile(os.fspath(path))

    def __len__(self) -> int:
        return len(self._file)

    def read(self, index: int) -> np.ndarray:
        return self._file.read(index)

    def __getitem__(self, index: int) -> np.ndarray:
        if not -len(self) <= index < len(self):
            raise IndexError(f"frame {index} out of range for {len(self)} frames")
        return self._file.read(index % len(self))

    @property
    def geometry(self) -> DetectorGeometry:
        return self._file.geometry

    @property
    def sample_type(self) -> str:
        """The file's element type: "u16", "f32", ..."""
        return self._file.sample_type

    @property
    def bad_pixels(self) -> Optional[np.ndarray]:
        return self._file.bad_pixels

    @property
    def ground_truth(self) -> Optional[list]:
        truth = self._file.ground_truth
        return None if truth is None else [_records(t, TRUE_PEAK_DTYPE) for t in truth]


class SyntheticDetector:
    """The synthetic frames of `mixprec stream produce --synthetic --detector D --seed S`.

    frame(i) -> (uint16 ADU [P, H, W], true peaks as a TRUE_PEAK_DTYPE array), the same bits
    as frame i of the command's file; bad_pixels: the dead and hot pixels (uint8 [P, H, W]).
    """

    def __init__(self, detector: Union[str, DetectorGeometry] = "single", seed: int = 1):
        geometry = detector_geometry(detector) if isinstance(detector, str) else detector
        self._detector = _SyntheticDetector(geometry, seed)

    @property
    def geometry(self) -> DetectorGeometry:
        return self._detector.geometry

    @property
    def bad_pixels(self) -> np.ndarray:
        return self._detector.bad_pixels

    def frame(self, index: int) -> Tuple[np.ndarray, np.ndarray]:
        adu, truth = self._detector.frame(index)
        return adu, _records(truth, TRUE_PEAK_DTYPE)


_CLASSIC_OPTIONS = ("min_pixel_snr", "min_peak_snr", "adc_threshold", "min_pixels", "max_pixels",
                    "local_background_margin", "clipping_iterations", "min_bin_pixels")
_NET_OPTIONS = ("min_pixels", "small_peak_snr", "max_pixels", "min_intensity", "background_margin")


class PeakFinder:
    """A Bragg-peak finder of `mixprec stream run`, called on numpy frames.

    detector: a name ("single", "quad", "epix10k2m", "jungfrau4m"), a DetectorGeometry, a
    FrameFile (its geometry and bad-pixel mask, as `stream run --input` takes them), or a frame
    shape (P, H, W) / (H, W) for panels centred on the beam.
    bad_pixels: [P, H, W] (or [H, W]), nonzero = ignore; None: the FrameFile's mask, or none.
    finder: "classic" (peakfinder8-style) or "net" (PeakNet; model = a `mixprec stream train`
    model file, precision = "bf16" (weights and frames in bf16 from the source), "fp32",
    "fp16" or "autocast-bf16").
    options: the finder's settings as keywords. classic: min_pixel_snr=5, min_peak_snr=7,
    adc_threshold=0, min_pixels=2, max_pixels=200, local_background_margin=3,
    clipping_iterations=5, min_bin_pixels=64; net: min_pixels=0 and small_peak_snr=-1 (the model
    file's peak rule), max_pixels=0 (no limit), min_intensity=0, background_margin=3 (the command
    line's defaults).

    finder(frame) -> a PEAK_DTYPE array (panel, x, y, intensity, pixels, max_value,
    background, background_sigma, snr), in panel order, then raster order.
    finder.find_batch(frames) -> one such array a frame; the network runs the whole batch at once.
    Frames: uint8/16/32, int8/16/32/64, float16/32/64 arrays, or bf16 mixprec/torch tensors
    (anything with the buffer protocol or __dlpack__ on the CPU). A numpy view that is not
    C-contiguous is copied once first.
    """

    def __init__(self, detector: Any, *, bad_pixels: Any = None, finder: str = "classic",
                 model: Union[str, os.PathLike, None] = None, precision: str = "bf16", **options: Any):
        if isinstance(detector, FrameFile):
            geometry = detector.geometry
            if bad_pixels is None:
                bad_pixels = detector.bad_pixels
        elif isinstance(detector, DetectorGeometry):
            geometry = detector
        elif isinstance(detector, str):
            geometry = detector_geometry(detector)
        elif isinstance(detector, (tuple, list)) and len(detector) in (2, 3):
            shape = tuple(int(d) for d in detector)
            geometry = panel_centred_geometry(*((1,) + shape if len(shape) == 2 else shape))
        else:
            raise TypeError("detector must be a name, a DetectorGeometry, a FrameFile or a frame "
                            f"shape (P, H, W), got {detector!r}")
        mask = None
        if bad_pixels is not None:
            mask = np.ascontiguousarray(np.asarray(bad_pixels) != 0, dtype=np.uint8)
        if finder == "classic":
            if model is not None:
                raise ValueError("model= goes with finder='net'")
            self._finder = _PeakFinder(geometry, mask, _options(ClassicFinderOptions(), _CLASSIC_OPTIONS, options))
        elif finder == "net":
            if model is None:
                raise ValueError("finder='net' needs model= (a PeakNet file from `mixprec stream train`)")
            self._finder = _PeakFinder(os.fspath(model), precision, geometry, mask,
                                       _options(MaskPeakOptions(), _NET_OPTIONS, options, min_pixels=0,
                                                small_peak_snr=-1))
        else:
            raise ValueError(f"finder must be 'classic' or 'net', got {finder!r}")
        self.finder = finder

    def __call__(self, frame: Any) -> np.ndarray:
        return _records(self._finder.find(_contiguous(frame))[0], PEAK_DTYPE)

    def find_batch(self, frames: Any) -> list:
        if isinstance(frames, (list, tuple)):
            frames = np.stack([np.asarray(f) for f in frames])
        return [_records(p, PEAK_DTYPE) for p in self._finder.find_batch(_contiguous(frames))]

    @property
    def geometry(self) -> DetectorGeometry:
        return self._finder.geometry

    @property
    def input_dtype(self):
        """The dtype frames are read in: f32, or the network's (bf16 for precision "bf16")."""
        return self._finder.input_dtype

    @property
    def precision(self) -> Optional[str]:
        """The network's precision; None for the classical finder."""
        return self._finder.precision

    @property
    def last_input(self) -> Tuple[int, Optional[str]]:
        """(address, conversion) of the last call's first frame as the finder read it:
        conversion None means the caller's own memory (address == frame.ctypes.data), else
        the one conversion made, e.g. "u16 -> bf16"."""
        return self._finder.last_input


def _options(target, names: Sequence[str], given: dict, **defaults):
    for name, value in {**defaults, **given}.items():
        if name not in names:
            raise TypeError(f"unknown option {name!r}; this finder takes {', '.join(names)}")
        setattr(target, name, value)
    return target


def _contiguous(frames):
    if isinstance(frames, np.ndarray) and not frames.flags.c_contiguous:
        return np.ascontiguousarray(frames)
    return frames


def peaks_in_slab(peaks: np.ndarray, geometry: DetectorGeometry) -> Tuple[np.ndarray, np.ndarray]:
    """(x, y) of peaks in the CXI "slab" layout: panels stacked along the rows, y = panel *
    rows + row, what a CXI peak list (peakXPosRaw, peakYPosRaw) holds."""
    y = peaks["panel"].astype(np.float64) * geometry.rows + peaks["y"]  # as the CXI writer sums
    return peaks["x"], y.astype(np.float32)


__all__ = ["PEAK_DTYPE", "TRUE_PEAK_DTYPE", "ClassicFinderOptions", "DetectorGeometry",
           "FrameFile", "MaskPeakOptions", "PeakFinder", "SyntheticDetector", "detector_geometry",
           "detector_names", "panel_centred_geometry", "peaks_in_slab"]
