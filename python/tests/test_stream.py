"""mixprec.stream against `mixprec stream run`: numpy frames in, the same peaks out (issue #21)."""
import os
import subprocess
import threading
import time

import numpy as np
import pytest

import mixprec as mp

FRAMES = 4
# The columns of a CXI peak list and the peak fields they hold.
CXI_COLUMNS = {"peakTotalIntensity": "intensity", "peakMaximumValue": "max_value", "peakSNR": "snr"}


def cli():
    path = os.environ.get("MIXPREC_CLI")
    if not path:
        pytest.skip("MIXPREC_CLI (the mixprec binary) is set by the python.pytest CTest entry")
    return path


def run_cli(*args):
    done = subprocess.run([cli(), *map(str, args)], capture_output=True, timeout=300,
                          env=dict(os.environ, MIXPREC_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Synthetic frames of a four-panel detector and a small PeakNet (40 steps: enough to find
    peaks, about 200 on these frames), both from the command line."""
    d = tmp_path_factory.mktemp("stream")
    run_cli("stream", "produce", "--synthetic", "--output", d / "quad.h5", "--frames", FRAMES,
            "--detector", "quad", "--seed", 5)
    run_cli("stream", "train", "--out", d / "net", "--batch", 2, "--crop", 64, "--widths", "8,16",
            "--depths", "1,1", "--stem", 4, "--eval-every", 0, "--eval-frames", 1, "--steps", 40)
    return d


def cxi_peaks(path):
    """The peak lists of a CXI file, as the command line wrote them (frame by frame)."""
    h5py = pytest.importorskip("h5py")
    with h5py.File(path, "r") as f:
        r = f["entry_1/result_1"]
        counts = r["nPeaks"][:]
        columns = {name: r[name][:] for name in ["peakXPosRaw", "peakYPosRaw", "peakNPixels", *CXI_COLUMNS]}
    return [{name: c[i, :n] for name, c in columns.items()} for i, n in enumerate(counts)]


def assert_same_bits(a, b, what):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    assert a.shape == b.shape, f"{what}: {a.shape} vs {b.shape}"
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), what


def assert_same_as_cli(peaks, listed, geometry):
    assert len(peaks) == len(listed["peakXPosRaw"]) < 2048  # no CXI truncation in play
    x, y = mp.stream.peaks_in_slab(peaks, geometry)
    assert_same_bits(x, listed["peakXPosRaw"], "x")
    assert_same_bits(y, listed["peakYPosRaw"], "y")
    assert_same_bits(peaks["pixels"].astype(np.float32), listed["peakNPixels"], "pixels")
    for column, field in CXI_COLUMNS.items():
        assert_same_bits(peaks[field], listed[column], field)


def same_peaks(a, b):
    return a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_classic_peaks_are_the_command_lines_bit_for_bit(work):
    run_cli("stream", "run", "--input", work / "quad.h5", "--output", work / "classic.cxi", "--batch", 1)
    listed = cxi_peaks(work / "classic.cxi")
    frames = mp.stream.FrameFile(work / "quad.h5")
    assert len(frames) == FRAMES and frames.sample_type == "u16"
    finder = mp.stream.PeakFinder(frames)  # its geometry and bad-pixel mask, as `stream run` takes them
    assert finder.geometry.shape == [4, 352, 384] and finder.input_dtype == mp.f32
    found = [finder(frames[i]) for i in range(FRAMES)]
    assert sum(len(p) for p in found) > 50
    for peaks, cli_list in zip(found, listed):
        assert_same_as_cli(peaks, cli_list, finder.geometry)
    batch = finder.find_batch(np.stack([frames[i] for i in range(FRAMES)]))
    assert all(same_peaks(a, b) for a, b in zip(batch, found))
    # float32 frames (what a calibrated detector writes) give the same peaks, read in place.
    assert same_peaks(finder(frames[0].astype(np.float32)), found[0])


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_network_peaks_are_the_command_lines_bit_for_bit(work, precision):
    model = work / "net" / "model.safetensors"
    out = work / f"net_{precision}.cxi"
    n = 2  # frames: the network is the slow part of the suite
    run_cli("stream", "run", "--input", work / "quad.h5", "--output", out, "--finder", "net",
            "--model", model, "--precision", precision, "--batch", 1, "--max-frames", n)
    listed = cxi_peaks(out)
    assert len(listed) == n
    frames = mp.stream.FrameFile(work / "quad.h5")
    finder = mp.stream.PeakFinder(frames, finder="net", model=model, precision=precision)
    assert finder.precision == precision
    assert finder.input_dtype == (mp.bf16 if precision == "bf16" else mp.f32)
    found = [finder(frames[i]) for i in range(n)]
    assert finder.last_input[1] == ("u16 -> bf16" if precision == "bf16" else "u16 -> f32")
    assert sum(len(p) for p in found) > 0
    for peaks, cli_list in zip(found, listed):
        assert_same_as_cli(peaks, cli_list, finder.geometry)
    # The batched form runs all frames' panels through the network as one batch.
    batch = finder.find_batch([frames[i] for i in range(n)])
    assert len(batch) == n
    assert all(same_peaks(a, b) for a, b in zip(batch, found))
    # The peak rule by keywords: a peak below min_pixels is kept where its SNR reaches
    # small_peak_snr, and only there.
    rule = dict(finder="net", model=model, precision=precision, min_pixels=4)
    strict = mp.stream.PeakFinder(frames, small_peak_snr=0, **rule)(frames[0])
    lenient = mp.stream.PeakFinder(frames, small_peak_snr=3, **rule)(frames[0])
    small = lenient[lenient["pixels"] < 4]
    assert len(small) > 0 and np.all(small["snr"] >= 3)
    assert same_peaks(lenient[lenient["pixels"] >= 4], strict)


def test_synthetic_frames_are_stream_produces(work):
    file = mp.stream.FrameFile(work / "quad.h5")
    synthetic = mp.stream.SyntheticDetector("quad", seed=5)
    np.testing.assert_array_equal(synthetic.bad_pixels, file.bad_pixels)
    truth = file.ground_truth
    for i in range(FRAMES):
        adu, peaks = synthetic.frame(i)
        assert adu.dtype == np.uint16 and adu.shape == (4, 352, 384)
        np.testing.assert_array_equal(adu, file[i])
        assert peaks.tobytes() == truth[i].tobytes()


def test_frames_are_read_in_place_or_converted_once():
    det = mp.stream.SyntheticDetector("single", seed=3)
    adu, truth = det.frame(0)
    finder = mp.stream.PeakFinder("single", bad_pixels=det.bad_pixels)
    # float32 frames: the finder reads the caller's memory.
    f32 = adu.astype(np.float32)
    reference = finder(f32)
    assert finder.last_input == (f32.ctypes.data, None)
    # uint16 raw frames: one conversion, straight into f32, the same peaks.
    assert same_peaks(finder(adu), reference)
    address, conversion = finder.last_input
    assert conversion == "u16 -> f32" and address != adu.ctypes.data
    # [H, W] for a one-panel detector; a batch [B, H, W]; a strided view is copied once.
    assert same_peaks(finder(adu[0]), reference)
    both = np.stack([f32[0], f32[0]])
    assert all(same_peaks(p, reference) for p in finder.find_batch(both))
    assert finder.last_input == (both.ctypes.data, None)
    assert finder.find_batch(np.zeros((0, 352, 384), np.uint16)) == []
    wide = np.zeros((1, 352, 2 * 384), np.float32)
    wide[:, :, ::2] = f32
    assert same_peaks(finder(wide[:, :, ::2]), reference)
    # The peaks are the generated spots (the finder works).
    matched = sum(np.min(np.hypot(truth["x"] - p["x"], truth["y"] - p["y"])) < 1.5 for p in reference)
    assert len(reference) > 20 and matched >= 0.9 * len(reference)


def test_network_reads_bf16_tensors_in_place(work):
    model = work / "net" / "model.safetensors"
    frames = mp.stream.FrameFile(work / "quad.h5")
    finder = mp.stream.PeakFinder(frames, finder="net", model=model)  # bf16 by default
    raw = frames[1]
    reference = finder(raw)
    t = mp.from_numpy(raw.astype(np.float32)).to("bf16")  # u16 -> f32 -> bf16: the same values
    assert same_peaks(finder(t), reference)
    assert finder.last_input == (t.data_ptr, None)
    fp32 = mp.stream.PeakFinder(frames, finder="net", model=model, precision="fp32")
    f32 = raw.astype(np.float32)
    fp32(f32)
    assert fp32.last_input == (f32.ctypes.data, None)


def test_finders_release_the_gil_and_run_on_threads():
    det = mp.stream.SyntheticDetector("quad", seed=2)
    frames = np.stack([det.frame(i)[0] for i in range(6)])
    finder = mp.stream.PeakFinder("quad", bad_pixels=det.bad_pixels)
    expected = [finder(f) for f in frames]
    # Several threads on one (classical, const) finder: each gets the serial answer.
    results = {}

    def work(k):
        results[k] = [finder(f) for f in frames[k::2]]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(2):
        assert all(same_peaks(a, b) for a, b in zip(results[k], expected[k::2]))
    # While a batch runs in C++, this thread keeps running Python: with the GIL held it could
    # not take a single step between the call's start and end.
    span = {}

    def long_call():
        span["start"] = time.perf_counter()
        finder.find_batch(np.concatenate([frames] * 4))
        span["end"] = time.perf_counter()

    worker = threading.Thread(target=long_call)
    ticks = []
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())
    worker.join()
    inside = [t for t in ticks if span["start"] + 0.01 < t < span["end"] - 0.01]
    assert span["end"] - span["start"] > 0.05
    assert len(inside) > 10


def test_bad_input_raises_clear_errors(work, tmp_path):
    finder = mp.stream.PeakFinder((352, 384))  # a frame shape: one panel centred on the beam
    assert finder.geometry.shape == [1, 352, 384]
    with pytest.raises(ValueError, match=r"expected a frame \[1, 352, 384\] or \[352, 384\].*got \[2, 352, 384\]"):
        finder(np.zeros((2, 352, 384), np.uint16))
    with pytest.raises(ValueError, match=r"expected frames \[B, 1, 352, 384\]"):
        finder.find_batch(np.zeros((352, 384), np.uint16))
    with pytest.raises(TypeError, match="frames must be uint8"):
        finder(np.zeros((352, 384), np.complex64))
    with pytest.raises(TypeError, match="unknown option 'min_snr'"):
        mp.stream.PeakFinder("single", min_snr=3)
    with pytest.raises(mp.Error, match="min_pixel_snr > 0"):
        mp.stream.PeakFinder("single", min_pixel_snr=0)
    with pytest.raises(mp.Error, match="min_pixels <= max_pixels"):
        mp.stream.PeakFinder("single", min_pixels=5, max_pixels=2)
    with pytest.raises(mp.Error, match="bad-pixel mask of 4 pixels"):
        mp.stream.PeakFinder("single", bad_pixels=np.zeros(4))
    with pytest.raises(mp.Error, match="unknown detector .huge."):
        mp.stream.PeakFinder("huge")
    with pytest.raises(ValueError, match="needs model="):
        mp.stream.PeakFinder("single", finder="net")
    with pytest.raises(ValueError, match="finder must be 'classic' or 'net'"):
        mp.stream.PeakFinder("single", finder="cnn")
    with pytest.raises(mp.Error, match="missing.safetensors"):
        mp.stream.PeakFinder("single", finder="net", model=tmp_path / "missing.safetensors")
    model = work / "net" / "model.safetensors"
    with pytest.raises(mp.Error, match="precision must be fp32, bf16"):
        mp.stream.PeakFinder("single", finder="net", model=model, precision="int8")
    with pytest.raises(mp.Error, match="not multiples of 4"):
        mp.stream.PeakFinder((1, 30, 30), finder="net", model=model)
    with pytest.raises(mp.Error, match="missing.h5"):
        mp.stream.FrameFile(tmp_path / "missing.h5")
    with pytest.raises(IndexError):
        mp.stream.FrameFile(work / "quad.h5")[FRAMES]
    with pytest.raises(mp.Error, match="1 panel placements for 2 panels"):
        mp.stream.DetectorGeometry(2, 8, 8, [(0.0, 0.0)])


def test_the_docs_example_runs():
    import re
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(root, "docs", "PYTHON.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    example = next(b for b in blocks if "mp.stream.PeakFinder" in b)
    scope = {}
    exec(compile(example, "docs/PYTHON.md stream example", "exec"), scope)
    assert len(scope["peaks"]) > 20 and len(scope["lists"]) == 4
