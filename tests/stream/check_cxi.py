#!/usr/bin/env python3
"""Reads a CXI peak list written by `mixprec stream peaks` with h5py (an HDF5 reader independent
of mixprec's) and checks it as CrystFEL would use it: dataset names, dtypes and shapes, the
padding past nPeaks, and the slab coordinates, by matching every true peak of the frame file
(panel p, row y -> slab Y = p * rows + y) to a listed peak within 1.5 px.

usage: check_cxi.py PEAKS.cxi FRAMES.h5
Exit 0 with "check_cxi: N passed, 0 failed"; 1 on a failure; 77 (skipped) without h5py."""
import sys

try:
    import h5py
    import numpy as np
except ImportError:
    print("check_cxi: h5py/numpy not installed: skipped")
    sys.exit(77)

passed, failed = 0, 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAILED:", what)


def main(cxi_path, frames_path):
    with h5py.File(cxi_path, "r") as cxi, h5py.File(frames_path, "r") as frames:
        result = cxi["/entry_1/result_1"]
        n_peaks = result["nPeaks"]
        check(n_peaks.dtype == np.int32 and n_peaks.ndim == 1, f"nPeaks int32 [N], got {n_peaks.dtype} {n_peaks.shape}")
        data = frames["/entry_1/data_1/data"]
        n_frames = data.shape[0]
        panels, rows, cols = (data.shape[1], data.shape[2], data.shape[3]) if data.ndim == 4 else (1,) + data.shape[1:]
        check(n_peaks.shape == (n_frames,), f"one nPeaks per frame: {n_peaks.shape} vs {n_frames}")
        columns = {}
        for name in ("peakXPosRaw", "peakYPosRaw", "peakTotalIntensity", "peakNPixels", "peakMaximumValue", "peakSNR"):
            d = result[name]
            check(d.dtype == np.float32 and d.shape == (n_frames, 2048), f"{name} float32 [N, 2048], got {d.dtype} {d.shape}")
            columns[name] = d[()]
        counts = n_peaks[()]
        index = result["frameIndex"]
        check(index.dtype == np.int64 and index.shape == (n_frames,) and (index[()] == np.arange(n_frames)).all(),
              f"frameIndex int64 [N] = 0..N-1, got {index.dtype} {index.shape}")
        check(result.attrs["panels"] == panels and result.attrs["panel_rows"] == rows, "layout attributes")
        truth = frames["/entry_1/ground_truth"]
        t_frame, t_panel = truth["frame"][()], truth["panel"][()]
        t_x, t_y, t_snr = truth["x"][()], truth["y"][()], truth["snr"][()]
        matched = required = 0
        for i in range(n_frames):
            n = int(counts[i])
            check(0 <= n <= 2048, f"frame {i}: nPeaks {n}")
            for name, values in columns.items():
                check(not values[i, n:].any(), f"frame {i}: {name} not zero past nPeaks")
            x, y = columns["peakXPosRaw"][i, :n], columns["peakYPosRaw"][i, :n]
            check(((x > -1) & (x < cols) & (y > -1) & (y < panels * rows)).all(), f"frame {i}: a peak outside the slab")
            check((columns["peakNPixels"][i, :n] >= 1).all(), f"frame {i}: a peak of no pixels")
            sel = (t_frame == i) & (t_snr >= 8)
            for tx, ty in zip(t_x[sel], (t_panel[sel] * rows + t_y[sel])):
                required += 1
                if n and (np.hypot(x - tx, y - ty) <= 1.5).any():
                    matched += 1
        recall = matched / required if required else 1.0
        print(f"check_cxi: {n_frames} frames, {int(counts.sum())} peaks, recall of true peaks (SNR >= 8) "
              f"through slab coordinates: {recall:.4f} ({matched}/{required})")
        check(required > 0 and recall >= 0.9, f"recall {recall:.4f} below 0.9")
    print(f"check_cxi: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
