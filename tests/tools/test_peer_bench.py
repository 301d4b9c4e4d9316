#!/usr/bin/python3
"""The side-by-side benchmarks' own code, without the PyTorch 2.x virtual environment of
`make bench-peers`: tools/peer_harness.py (which kernel levels, which peers, row names),
gpt_train.py's argument checks, and, where this interpreter has torch (Debian's
python3-torch), unet_video.py's safetensors reader on good and broken files and its weight
loader's architecture check. With --integration BUILD: tools/bench_unet_peer.py end to end on
the lightweight preset with this interpreter as the only peer (exit 77, skipped, without torch).

  /usr/bin/python3 tests/tools/test_peer_bench.py [--integration BUILD]
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(ROOT, "tools"), os.path.join(ROOT, "bench", "peers")]
import peer_harness  # noqa: E402

failures = []
passed = 0


def expect(name, ok, detail=""):
    global passed
    if ok:
        passed += 1
    else:
        failures.append(f"{name}: {detail}")


def raises(fn, kind, text):
    """Whether fn() raises `kind` with `text` in its message."""
    try:
        fn()
    except kind as e:
        return text in str(e)
    return False


def test_harness():
    levels = peer_harness.kernel_levels
    expect("auto, AVX512_BF16 without AMX: the non-AMX bf16 level only",
           levels("auto", {"avx512f", "avx512_bf16"}) == ["avx512bf16"])
    expect("auto, AMX: the non-AMX level first, then AMX",
           levels("auto", {"avx512_bf16", "amx_bf16", "amx_tile"}) == ["avx512bf16", "amx"])
    expect("auto, AVX2 only: the library's own choice", levels("auto", {"avx2", "fma"}) == [None])
    expect("explicit list", levels(" avx2, scalar ,") == ["avx2", "scalar"])
    expect("isa_env", peer_harness.isa_env("amx") == {"MIXPREC_ISA": "amx"}
           and peer_harness.isa_env(None) == {})
    expect("cpu_flags of a missing file", peer_harness.cpu_flags("/nonexistent/cpuinfo") == set())
    versions = {"pytorch": "2.15.0", "openvino": "2026.4.1"}
    expect("versioned pytorch row", peer_harness.versioned("pytorch bf16 channels_last", versions)
           == "pytorch 2.15.0 bf16 channels_last")
    expect("versioned openvino row", peer_harness.versioned("openvino bf16 inference precision",
                                                            versions)
           == "openvino 2026.4.1 bf16 inference precision")
    expect("no version, name unchanged",
           peer_harness.versioned("openvino f32", {"openvino": None}) == "openvino f32")
    expect("short_version", peer_harness.short_version("2.15.0+cu132") == "2.15.0"
           and peer_harness.short_version("2026.4.1-20500-abcdef") == "2026.4.1")
    missing = "/nonexistent/bin/python"
    expect("a required peer without torch is an error naming it",
           raises(lambda: peer_harness.peer_pythons([missing], []), SystemExit, missing))
    chosen, notes = [], []
    if peer_harness.has_torch(sys.executable):
        chosen, notes = peer_harness.peer_pythons([sys.executable], [missing, sys.executable])
        expect("an optional peer without torch is left out with a note",
               chosen == [sys.executable] and len(notes) == 1 and missing in notes[0], str(notes))
    expect("no peer at all is an error", raises(lambda: peer_harness.peer_pythons([], [missing]),
                                                SystemExit, "no peer interpreter"))
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "table_then_json.py")
        with open(script, "w") as f:
            f.write('print("a table line")\nprint(\'{"x": 1}\')\n')
        expect("run_json takes the last line after a table",
               peer_harness.run_json([sys.executable, script]) == {"x": 1})
        expect("run_json: a failing command is an error naming it",
               raises(lambda: peer_harness.run_json([sys.executable, "-c", "import sys; sys.exit(3)"],
                                                    what="probe"), SystemExit, "probe: failed (3)"))


def test_gpt_arguments():
    script = os.path.join(ROOT, "bench", "peers", "gpt_train.py")
    for args, text in ((["--modes", "f32,f16"], "unknown mode 'f16'"),
                       (["--steps", "0"], "must be >= 1")):
        r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                           timeout=60)
        expect(f"gpt_train.py {' '.join(args)}", r.returncode == 2 and text in r.stderr, r.stderr)


def write_safetensors(path, tensors, metadata=None, header_len=None, truncate=0):
    """tensors: {name: (dtype name, shape, raw bytes)}."""
    header, blob = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    data = struct.pack("<Q", header_len if header_len is not None else len(text)) + text + blob
    with open(path, "wb") as f:
        f.write(data[:len(data) - truncate])


def test_unet_reader(tmp):
    import torch
    import unet_video

    path = os.path.join(tmp, "t.safetensors")
    bf16 = struct.pack("<3H", 0x3F80, 0xC040, 0x7F80)  # 1, -3, +inf: widened exactly
    write_safetensors(path, {"a": ("F32", [2], struct.pack("<2f", 1.5, -2.0)),
                             "b": ("BF16", [3], bf16),
                             "c": ("F16", [1, 1], struct.pack("<e", 0.5)),
                             "d": ("I64", [2], struct.pack("<2q", 7, -1))},
                      metadata={"format": "x"})
    tensors, dtypes, meta = unet_video.read_safetensors(path)
    expect("f32 values", tensors["a"].tolist() == [1.5, -2.0])
    expect("bf16 widened exactly", tensors["b"].tolist() == [1.0, -3.0, float("inf")])
    expect("f16 shape and value", list(tensors["c"].shape) == [1, 1] and tensors["c"].item() == 0.5)
    expect("i64 kept integral", tensors["d"].dtype == torch.int64 and tensors["d"].tolist() == [7, -1])
    expect("stored dtypes and metadata", dtypes == {"a": "F32", "b": "BF16", "c": "F16", "d": "I64"}
           and meta == {"format": "x"})
    cases = [("too short", lambda: open(path, "wb").write(b"\0\0"), "too short"),
             ("header past the file", lambda: write_safetensors(path, {}, header_len=1 << 20),
              "runs past the file"),
             ("element count", lambda: write_safetensors(path, {"a": ("F32", [3], b"\0" * 8)}),
              "2 elements for shape [3]"),
             ("unknown dtype", lambda: write_safetensors(path, {"a": ("F8_E4M3", [1], b"\0")}),
              "dtype F8_E4M3")]
    for name, make, text in cases:
        make()
        expect(f"reader rejects: {name}",
               raises(lambda: unet_video.read_safetensors(path), ValueError, text))
    expect("metadata of another format is refused",
           raises(lambda: unet_video.config_from_metadata({"format": "other"}, path), ValueError,
                  "expected 'mixprec.video_model'"))

    cfg = {"frame_channels": 3, "base_channels": 8, "res_blocks": 1, "head_dim": 8, "groups": 4,
           "channel_mults": [1, 2], "attention_levels": [1], "name": "tiny"}
    torch.manual_seed(0)
    model = unet_video.UNetVideo(cfg).eval()
    state = {n: t.detach().clone() for n, t in model.named_parameters()}
    fresh = unet_video.UNetVideo(cfg).eval()
    expect("loader consumes every tensor", unet_video.load_weights(fresh, state, "f") == len(state))
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        expect("loaded model computes the same", torch.equal(model(x, x, torch.tensor([5.0])),
                                                             fresh(x, x, torch.tensor([5.0]))))
    broken = dict(state)
    broken.pop("conv_in.bias")
    broken["extra.weight"] = torch.zeros(1)
    broken["conv_out.weight"] = torch.zeros(1, 1, 1, 1)
    expect("loader names missing, unused and misshapen tensors",
           raises(lambda: unet_video.load_weights(fresh, broken, "f"), SystemExit,
                  "missing (in the model, not in the file): conv_in.bias")
           and raises(lambda: unet_video.load_weights(fresh, broken, "f"), SystemExit,
                      "not consumed (in the file, not in the model): extra.weight")
           and raises(lambda: unet_video.load_weights(fresh, broken, "f"), SystemExit,
                      "shape mismatch: conv_out.weight"))


def integration(build):
    """bench_unet_peer.py on the lightweight preset, this interpreter the only peer."""
    if not peer_harness.has_torch(sys.executable):
        print(f"skipped: {sys.executable} has no torch")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench_unet_peer.py"),
                            "--build", build, "--out", tmp, "--preset", "lightweight",
                            "--rounds", "1", "--warmup", "0", "--reps", "1", "--threads", "1", "--json",
                            "--peer-python", sys.executable,
                            "--optional-peer-python", "/nonexistent/bin/python"],
                           capture_output=True, text=True, timeout=1200)
    out = r.stdout
    expect("bench_unet_peer.py exits 0", r.returncode == 0, r.stderr[-2000:])
    if r.returncode != 0:
        return
    report = json.loads(out[out.index("\n{") + 1:])
    rows = {row["config"]: row for row in report["results"]}
    level = report["levels"][0]
    mixprec = [c for c in rows if c.startswith("mixprec bf16 (")]
    expect("mixprec rows carry their kernel level", len(mixprec) == len(report["levels"])
           and (level is None or mixprec[0] == f"mixprec bf16 ({level})"), str(list(rows)))
    expect("PyTorch rows carry its version", any(c.startswith("pytorch 1.") or c.startswith("pytorch 2.")
                                                  for c in rows), str(list(rows)))
    expect("mixprec f32 agrees with PyTorch f32",
           all(r["max_rel_vs_pytorch_f32"] <= 1e-4 for c, r in rows.items()
               if c.startswith("mixprec f32")))
    expect("mixprec bf16 is its own 1.00x", abs(rows[mixprec[0]]["vs_mixprec_bf16"] - 1) < 1e-12)
    expect("the missing optional peer is reported", "optional peer /nonexistent/bin/python" in out)
    expect("the CPU is named", f"every figure from CPU {report['cpu']}" in out)


def main():
    if sys.argv[1:2] == ["--integration"]:
        integration(sys.argv[2])
        label = "peer bench integration"
    else:
        test_harness()
        test_gpt_arguments()
        if peer_harness.has_torch(sys.executable):
            with tempfile.TemporaryDirectory() as tmp:
                test_unet_reader(tmp)
        else:
            print(f"skipped the unet_video.py reader tests: {sys.executable} has no torch")
        label = "peer bench test"
    for f in failures:
        print("FAIL", f)
    print(f"{label}: {passed} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
