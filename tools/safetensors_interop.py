#!/usr/bin/env python3
"""safetensors files crossing between Python (numpy) and mixprec, bit for bit.

    safetensors_interop.py write OUT           write the reference file with this script's
                                                own writer (numpy + the format by hand)
    safetensors_interop.py read FILE           validate FILE with this script's own reader
                                                and list its tensors
    safetensors_interop.py test --tool T --workdir D
                                                the CTest check: T is build/.../io_test_tool

The test proves both directions:
  Python -> C++  mixprec reads the reference file (io_test_tool dump) and every tensor's dtype,
                 shape and bytes match what numpy wrote; likewise for a file written by the
                 official `safetensors` package when it is installed;
  C++ -> Python  mixprec re-writes the reference file (load_safetensors + save_safetensors)
                 and this script's reader, and the official one when installed, find every
                 byte, name, shape, dtype and metadata entry unchanged; mixprec's own sample
                 file reads back with its known bit patterns.
The reference file holds what careless code changes: signaling and payload NaNs, -0.0,
subnormals, integer extremes, BF16 (which numpy lacks: handled as raw uint16), a 0-d and an
empty tensor, non-ASCII and escaped names, unaligned data, and a header order unlike the data
order.

numpy is required. When it is missing the script looks for it in Debian's /usr/bin/python3
(python3-numpy), then tries `pip install numpy` (unless MIXPREC_NO_PIP=1), and otherwise exits
77, which CTest reports as skipped.
"""
import argparse
import importlib
import json
import os
import struct
import subprocess
import sys

SKIP = 77
np = None  # imported by ensure_numpy()

# Format name -> (numpy dtype name used to hold the bytes, element size).
DTYPES = {
    "F64": ("float64", 8), "F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("uint16", 2),
    "I64": ("int64", 8), "I32": ("int32", 4), "U8": ("uint8", 1), "BOOL": ("bool", 1),
    "I8": ("int8", 1), "I16": ("int16", 2), "U16": ("uint16", 2), "U32": ("uint32", 4),
    "U64": ("uint64", 8), "F8_E4M3": ("uint8", 1), "F8_E5M2": ("uint8", 1),
}
MAX_HEADER = 100_000_000


def ensure_numpy():
    global np
    try:
        np = importlib.import_module("numpy")
        return
    except ImportError:
        pass
    system = "/usr/bin/python3"  # where Debian's python3-numpy lives
    if (os.access(system, os.X_OK) and os.path.realpath(system) != os.path.realpath(sys.executable)
            and subprocess.run([system, "-c", "import numpy"], capture_output=True).returncode == 0):
        os.execv(system, [system] + sys.argv)
    if os.environ.get("MIXPREC_NO_PIP") != "1":
        print("safetensors_interop: numpy is missing; trying 'pip install numpy'", file=sys.stderr)
        try:
            ok = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "numpy"],
                                timeout=600).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            importlib.invalidate_caches()
            try:
                np = importlib.import_module("numpy")
                return
            except ImportError:
                pass
    print("SKIP: numpy is not installed and could not be installed; install python3-numpy "
          "(apt-get) or numpy (pip) to run the safetensors interoperability test")
    sys.exit(SKIP)


# ---- the format, by hand ----

def write_file(path, tensors, metadata=None, data_order=None):
    """tensors: list of (name, format dtype, shape, raw bytes) in header order. data_order, a
    list of indices, lays the data out in another order (the format allows it)."""
    order = data_order if data_order is not None else list(range(len(tensors)))
    offsets, at = {}, 0
    for i in order:
        offsets[i] = (at, at + len(tensors[i][3]))
        at += len(tensors[i][3])
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    for i, (name, dtype, shape, raw) in enumerate(tensors):
        count = 1
        for d in shape:
            count *= d
        assert count * DTYPES[dtype][1] == len(raw), name
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets[i])}
    # ensure_ascii escapes non-ASCII as \\uXXXX, surrogate pairs included: the C++ parser
    # must decode them.
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path + ".part", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for i in order:
            f.write(tensors[i][3])
    os.replace(path + ".part", path)


class FormatError(Exception):
    pass


def read_file(path):
    """Strictly validates a file. Returns (metadata, [(name, dtype, shape, raw bytes)] in header
    order, {name: data offset})."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise FormatError("shorter than the length field")
    (n,) = struct.unpack_from("<Q", blob, 0)
    if n > MAX_HEADER or n > len(blob) - 8:
        raise FormatError(f"bad header length {n}")

    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise FormatError("duplicate key")
        return dict(pairs)  # insertion-ordered: header order

    header = json.loads(blob[8:8 + n].decode("utf-8"), object_pairs_hook=no_duplicates)
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise FormatError("metadata must map strings to strings")
    tensors, spans = [], []
    for name, e in header.items():
        if set(e) != {"dtype", "shape", "data_offsets"}:
            raise FormatError(f"{name!r}: fields {sorted(e)}")
        if e["dtype"] not in DTYPES:
            raise FormatError(f"{name!r}: dtype {e['dtype']!r}")
        shape = e["shape"]
        if not all(type(d) is int and d >= 0 for d in shape):
            raise FormatError(f"{name!r}: shape {shape}")
        begin, end = e["data_offsets"]
        count = 1
        for d in shape:
            count *= d
        if not (type(begin) is int and type(end) is int and 0 <= begin <= end <= len(data)
                and end - begin == count * DTYPES[e["dtype"]][1]):
            raise FormatError(f"{name!r}: data_offsets {[begin, end]}")
        tensors.append((name, e["dtype"], tuple(shape), data[begin:end]))
        spans.append((begin, end))
    at = 0
    for begin, end in sorted(spans):
        if begin != at:
            raise FormatError("tensors overlap or leave a gap")
        at = end
    if at != len(data):
        raise FormatError("bytes after the last tensor")
    return metadata, tensors, {t[0]: s[0] for t, s in zip(tensors, spans)}


def as_array(dtype, shape, raw):
    return np.frombuffer(raw, dtype=DTYPES[dtype][0]).reshape(shape)


# ---- the reference content ----

def reference_tensors():
    """(name, dtype, shape, raw bytes) in header order, plus metadata."""
    def bits(values, dtype):
        return np.array(values, dtype=dtype).tobytes()

    rng = np.random.default_rng(20240611)
    tensors = [
        # A 5-byte tensor first (in data order below) leaves every later tensor unaligned.
        ("bytes.first", "U8", (5,), bits([0, 1, 127, 128, 255], "uint8")),
        ("f32.special", "F32", (2, 4), bits([0x80000000, 0x7F800001, 0x7FC12345, 0xFF800000,
                                             0x00000001, 0x3F800000, 0x7F7FFFFF, 0xFFFFFFFF], "<u4")),
        ("f32.random", "F32", (7, 13), rng.standard_normal((7, 13)).astype("<f4").tobytes()),
        ("f64.special", "F64", (3, 2), bits([0x8000000000000000, 0x7FF0000000000123,
                                             0xFFF8000000000ABC, 0x7FF0000000000000,
                                             0x0000000000000001, 0x3FF0000000000000], "<u8")),
        ("f16.special", "F16", (7,), bits([0x8000, 0x7C01, 0x7E55, 0xFE01, 0x0001, 0x7BFF,
                                           0xFC00], "<u2")),
        ("bf16.special", "BF16", (2, 3), bits([0x8000, 0x7F81, 0xFFC1, 0x0001, 0x7F7F, 0xFF80], "<u2")),
        ("i64.extremes", "I64", (4,), bits([-2**63, -1, 0, 2**63 - 1], "<i8")),
        ("i32.extremes", "I32", (1, 3), bits([-2**31, -7, 2**31 - 1], "<i4")),
        ("bool.mask", "BOOL", (5,), bits([True, False, False, True, True], "bool")),
        ("scalar", "F32", (), bits([0x3DCCCCCD], "<u4")),
        ("empty", "F16", (0, 3), b""),
        ("caf\u00e9 \U0001F600", "F32", (1,), bits([0x40490FDB], "<u4")),
        ('quote"back\\slash\nnewline', "I32", (2,), bits([1, 2], "<i4")),
    ]
    metadata = {"format": "np", "emoji": "\U0001F600", "quote": 'a"b\\c', "empty": ""}
    return tensors, metadata


# ---- the test ----

class Checker:
    def __init__(self):
        self.passed = 0
        self.failed = []

    def equal(self, what, got, want):
        if got == want:
            self.passed += 1
        else:
            self.failed.append(f"{what}: got {got!r:.200}, expected {want!r:.200}")

    def true(self, what, cond):
        self.equal(what, bool(cond), True)


def run_tool(tool, *args):
    r = subprocess.run([tool, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: {os.path.basename(tool)} {' '.join(args)} exited {r.returncode}: "
                         f"{r.stderr.strip()}")
    return r.stdout


def parse_dump(text):
    """io_test_tool dump -> (metadata, [(name, dtype, shape, raw)])."""
    metadata, tensors = {}, []
    for line in text.splitlines():
        kind, *fields = line.split(" ")
        unhex = lambda h: b"" if h == "-" else bytes.fromhex(h)  # noqa: E731
        if kind == "meta":
            metadata[unhex(fields[0]).decode()] = unhex(fields[1]).decode()
        elif kind == "tensor":
            name, dtype, shape, raw = fields
            dims = tuple(int(d) for d in shape.strip("[]").split(",") if d)
            tensors.append((unhex(name).decode(), dtype, dims, unhex(raw)))
    return metadata, tensors


def compare_files(check, label, got, want):
    got_meta, got_tensors = got
    want_meta, want_tensors = want
    check.equal(f"{label}: metadata", got_meta, want_meta)
    check.equal(f"{label}: names in header order", [t[0] for t in got_tensors], [t[0] for t in want_tensors])
    want_by_name = {t[0]: t for t in want_tensors}
    for name, dtype, shape, raw in got_tensors:
        if name not in want_by_name:
            continue
        _, wdtype, wshape, wraw = want_by_name[name]
        check.equal(f"{label}: {name!r} dtype", dtype, wdtype)
        check.equal(f"{label}: {name!r} shape", tuple(shape), tuple(wshape))
        check.true(f"{label}: {name!r} bytes identical", raw == wraw)


def official_package():
    try:
        return importlib.import_module("safetensors")
    except ImportError:
        return None


def run_test(tool, workdir):
    os.makedirs(workdir, exist_ok=True)
    check = Checker()
    tensors, metadata = reference_tensors()
    ref = os.path.join(workdir, "python.safetensors")
    # Data in reverse header order, except the 5-byte tensor first so later ones are unaligned.
    data_order = [0] + list(range(len(tensors) - 1, 0, -1))
    write_file(ref, tensors, metadata, data_order)
    own = read_file(ref)
    compare_files(check, "python self-check", (own[0], own[1]), (metadata, tensors))

    # Python -> C++: mixprec's reader sees exactly what numpy wrote.
    compare_files(check, "C++ reads python.safetensors", parse_dump(run_tool(tool, "dump", ref)),
                  (metadata, tensors))

    # C++ -> Python: mixprec re-writes it; every bit survives, the layout is the reference's.
    copy = os.path.join(workdir, "cpp_copy.safetensors")
    run_tool(tool, "copy", ref, copy)
    got_meta, got_tensors, offsets = read_file(copy)
    compare_files(check, "python reads cpp_copy.safetensors", (got_meta, got_tensors), (metadata, tensors))
    with open(copy, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
    check.equal("cpp_copy header length is a multiple of 8", n % 8, 0)
    for name, dtype, _, _ in got_tensors:
        check.equal(f"cpp_copy {name!r} aligned to its element size", offsets[name] % DTYPES[dtype][1], 0)

    # mixprec's own sample: known bit patterns, and both readers agree on every byte.
    sample = os.path.join(workdir, "cpp_sample.safetensors")
    run_tool(tool, "sample", sample)
    s_meta, s_tensors, _ = read_file(sample)
    compare_files(check, "python vs C++ reading cpp_sample.safetensors", (s_meta, s_tensors),
                  parse_dump(run_tool(tool, "dump", sample)))
    by_name = {t[0]: t for t in s_tensors}
    check.equal("sample half bits", as_array(*by_name["half"][1:]).view("<u2").ravel().tolist(),
                [0x8000, 0x7C01, 0x7E55, 0xFE01, 0x0001, 0x7BFF, 0xFC00, 0x3C00])
    check.equal("sample brain (BF16) bits", as_array(*by_name["brain"][1:]).tolist(),
                [0x8000, 0x7F81, 0xFFC1, 0x0001, 0x7F7F, 0xFF80])
    check.equal("sample steps", as_array(*by_name["steps"][1:]).tolist(), [-2**63, -1, 0, 2**63 - 1])
    check.equal("sample mask", as_array(*by_name["mask"][1:]).tolist(), [True, False, True])
    check.equal("sample scalar", float(as_array(*by_name["scalar"][1:])), float(np.float32(0.1)))
    check.equal("sample metadata", s_meta, {"format": "pt", "source": "mixprec io_test_tool"})

    pkg = official_package()
    if pkg is None:
        print("note: the 'safetensors' package is not installed; checked against this script's "
              "reader and writer only")
    else:
        # The official reader accepts mixprec's files (BF16 included: deserialize gives raw bytes).
        for path, want in ((copy, tensors), (sample, s_tensors)):
            with open(path, "rb") as f:
                entries = pkg.deserialize(f.read())
            got = [(name, e["dtype"], tuple(e["shape"]), bytes(e["data"])) for name, e in entries]
            want_sorted = sorted(want)
            check.equal(f"official reader on {os.path.basename(path)}: tensors",
                        sorted(got), want_sorted)
        # The official writer's files read in mixprec (numpy has no BF16: those are left out).
        import safetensors.numpy as stnp
        arrays = {name: as_array(dtype, shape, raw).copy() for name, dtype, shape, raw in tensors
                  if dtype != "BF16"}
        official = os.path.join(workdir, "official.safetensors")
        stnp.save_file(arrays, official, metadata=metadata)
        o_meta, o_tensors = parse_dump(run_tool(tool, "dump", official))
        want = [t for t in tensors if t[1] != "BF16"]
        check.equal("C++ reads official.safetensors: metadata", o_meta, metadata)
        check.equal("C++ reads official.safetensors: tensors", sorted(o_tensors), sorted(want))

    for failure in check.failed:
        print("FAIL:", failure)
    print(f"safetensors interop: {check.passed} passed, {len(check.failed)} failed")
    return 1 if check.failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write the reference file")
    w.add_argument("out")
    r = sub.add_parser("read", help="validate a file and list its tensors")
    r.add_argument("file")
    t = sub.add_parser("test", help="the two-way check against mixprec")
    t.add_argument("--tool", required=True, help="path to io_test_tool")
    t.add_argument("--workdir", required=True)
    args = parser.parse_args()
    ensure_numpy()
    if args.command == "write":
        tensors, metadata = reference_tensors()
        write_file(args.out, tensors, metadata)
        return 0
    if args.command == "read":
        try:
            metadata, tensors, _ = read_file(args.file)
        except (FormatError, ValueError, UnicodeDecodeError) as e:
            print(f"{args.file}: not a valid safetensors file: {e}", file=sys.stderr)
            return 1
        for key, value in metadata.items():
            print(f"metadata {key!r}: {value!r}")
        for name, dtype, shape, raw in tensors:
            print(f"{name!r} {dtype} {list(shape)} {len(raw)} bytes")
        return 0
    return run_test(args.tool, args.workdir)


if __name__ == "__main__":
    sys.exit(main())
