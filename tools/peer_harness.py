"""What the side-by-side benchmark drivers share (tools/bench_unet_peer.py, tools/bench_gpt_peer.py):
running a benchmark for its JSON, the mixprec kernel levels to measure, the peer interpreters
to use, and printing a table. Needs only Python's standard library (the drivers run with any
python3; the peers run with the interpreters named here)."""
import json
import os
import subprocess
import sys


def run_json(cmd, env=None, what="benchmark"):
    """Runs `cmd` (with `env` added to the environment) and returns the JSON on its stdout: the
    whole output, or else its last line (a table may come first)."""
    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=full_env)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"{what}: failed ({proc.returncode}): {' '.join(cmd)}")
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        return json.loads(proc.stdout.strip().splitlines()[-1])


def cpu_flags(cpuinfo="/proc/cpuinfo"):
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def kernel_levels(spec, flags=None):
    """The mixprec kernel levels (MIXPREC_ISA values) to measure at. 'auto': the non-AMX bf16
    path (avx512bf16, vdpbf16ps) where the CPU has it, plus amx where it has AMX: every
    headline figure on the path most AVX-512 machines run, and on AMX too where there is one.
    On a CPU without AVX512_BF16, [None]: the library's own choice. Else a comma list."""
    if spec != "auto":
        return [level.strip() for level in spec.split(",") if level.strip()]
    flags = cpu_flags() if flags is None else flags
    if "avx512_bf16" not in flags:
        return [None]
    return ["avx512bf16"] + (["amx"] if {"amx_bf16", "amx_tile"} <= flags else [])


def add_common_arguments(ap):
    """The options both drivers take: the mixprec kernel levels and the peer interpreters."""
    ap.add_argument("--isa", default="auto",
                    help="mixprec kernel levels (MIXPREC_ISA) to measure at, comma-separated; auto: "
                         "avx512bf16 (the non-AMX bf16 path) where the CPU has it, plus amx where it has AMX")
    ap.add_argument("--peer-python", action="append", default=[],
                    help="an interpreter that runs the peer (must import torch); repeatable; "
                         "default: this one")
    ap.add_argument("--optional-peer-python", action="append", default=[],
                    help="an interpreter that runs the peer too if it imports torch (else left out)")


def isa_env(level):
    return {"MIXPREC_ISA": level} if level else {}


def has_torch(python):
    """Whether `python` exists and imports torch (a quiet check for an optional peer)."""
    try:
        return subprocess.run([python, "-c", "import torch"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0
    except OSError:
        return False


def peer_pythons(required, optional):
    """The interpreters that run the peers: every `required` one (an error if it cannot import
    torch), then each `optional` one that can (a note for each that cannot)."""
    for python in required:
        if not has_torch(python):
            raise SystemExit(f"peer interpreter {python} cannot import torch "
                             "(make bench-peers installs PyTorch 2.x and OpenVINO in build/peers-venv)")
    chosen, notes = list(required), []
    for python in optional:
        if python in chosen:
            continue
        if has_torch(python):
            chosen.append(python)
        else:
            notes.append(f"optional peer {python}: no torch there, left out")
    if not chosen:
        raise SystemExit("no peer interpreter: give --peer-python")
    return chosen, notes


def versioned(config, versions):
    """'pytorch bf16 ...' -> 'pytorch 2.15.0 bf16 ...' (likewise openvino), so that the rows of
    several PyTorch versions stay apart. versions: {'pytorch': '2.15.0', 'openvino': ...}."""
    engine, _, rest = config.partition(" ")
    version = versions.get(engine)
    return f"{engine} {version} {rest}" if version else config


def short_version(version):
    """'2.15.0+cu130' -> '2.15.0'; '2026.4.0-20000-abc' -> '2026.4.0'."""
    return version.split("+")[0].split("-")[0] if version else version


def print_table(head, table, out=sys.stdout):
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)), file=out)
    for t in table:
        print("  ".join(v.ljust(w) for v, w in zip(t, widths)), file=out)
