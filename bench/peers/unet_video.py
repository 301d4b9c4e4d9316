#!/usr/bin/python3
"""PyTorch peer of mixprec's UNetVideo (issue #6): the identical network, the same weights.

Reads the files bench_unet_forward writes (DIR/unet_<preset>.safetensors: weights +
architecture metadata; DIR/unet_<preset>_io.safetensors: one input and mixprec's outputs),
rebuilds the architecture the metadata describes in PyTorch with module names equal to
mixprec's parameter names, loads every tensor by name (any name or shape that does not match,
in either direction, is a hard error: that is the check that the two architectures agree),
runs the same input and compares:

  PyTorch f32            vs mixprec f32        (should agree to ~1e-5)
  mixprec bf16/autocast  vs PyTorch f32        (issue #6 target: <= 2e-2)
  PyTorch bf16/autocast  vs PyTorch f32        (PyTorch's own bf16 error)

Relative error: max|a - b| / max|b| ("max_rel") and mean|a - b| / mean|b| ("mean_rel"), b the
PyTorch f32 output. Then times one forward per configuration under torch.inference_mode()
(warm-up, repetitions, median and spread) and prints a table, or JSON with --json.

The configurations are those this interpreter's libraries offer: PyTorch eager (f32, bf16
NCHW and channels_last, autocast) always; with PyTorch 2.x also torch.compile (inductor) of
the bf16 channels_last model without and with freezing (--no-compile skips them); with the
`openvino` package the f32 model converted by openvino.convert_model and compiled for the CPU
with f32 and bf16 inference precision (--no-openvino skips them). A configuration's time
is only taken when its output was computed (the table says whether it is within --tolerance).

Runs with Debian's python3-torch 1.13 (/usr/bin/python3 bench/peers/unet_video.py --dir DIR)
or with the PyTorch 2.x + OpenVINO virtual environment `make bench-peers` installs
(build/peers-venv/bin/python).
The safetensors file is parsed here with numpy (u64 header length, JSON header, raw
little-endian data), so the `safetensors` package is not needed.
"""
import argparse
import copy
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from peer_util import cpu_model, ms_by_category
from torch import nn

# ---- safetensors, read with numpy ----

_NUMPY_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1"}


def read_safetensors(path):
    """-> ({name: float32/int torch tensor}, {name: stored dtype name}, metadata dict)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        raise ValueError(f"{path}: header length {header_len} runs past the file")
    header = json.loads(blob[8 : 8 + header_len].decode("utf-8"))
    data = memoryview(blob)[8 + header_len :]
    metadata = header.pop("__metadata__", {}) or {}
    tensors, dtypes = {}, {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        shape = [int(d) for d in entry["shape"]]
        raw = data[begin:end]
        dtype = entry["dtype"]
        if dtype == "BF16":  # numpy has no bf16: widen exactly to f32 through the bit pattern
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        elif dtype in _NUMPY_DTYPES:
            array = np.frombuffer(raw, dtype=_NUMPY_DTYPES[dtype])
        else:
            raise ValueError(f"{path}: tensor {name} has dtype {dtype}, which this reader lacks")
        if array.size != math.prod(shape):
            raise ValueError(f"{path}: tensor {name}: {array.size} elements for shape {shape}")
        array = array.reshape(shape).astype(np.float32 if dtype.startswith(("F", "B")) else array.dtype)
        tensors[name] = torch.from_numpy(array.copy())
        dtypes[name] = dtype
    return tensors, dtypes, metadata


# ---- the architecture (include/mixprec/models/unet_video.h, src/models/unet_video.cpp) ----


def timestep_embedding(timesteps, dim):
    """[B] -> [B, dim] f32: sin(t f_k) for k < dim/2, then cos(t f_k); f_k = 10000^(-k/(dim/2)).
    Made in f64 and rounded once to f32, as mixprec does."""
    half = dim // 2
    k = torch.arange(half, dtype=torch.float64)
    freq = torch.exp(-math.log(10000.0) * k / half)
    args = timesteps.to(torch.float64)[:, None] * freq[None, :]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1).to(torch.float32)


class GroupNorm(nn.GroupNorm):
    """nn.GroupNorm, with an opt-in workaround (`in_f32`) for PyTorch 1.13's CPU autocast,
    which runs GroupNorm on the bf16 output of an autocast conv against its f32 parameters
    and fails ("expected scalar type BFloat16 but found Float"): normalise in f32 instead."""

    in_f32 = False

    def forward(self, x):
        if self.in_f32:
            with torch.autocast("cpu", enabled=False):
                return F.group_norm(x.float(), self.num_groups, self.weight, self.bias, self.eps)
        return super().forward(x)


class MultiheadAttention(nn.Module):
    """mixprec's nn::MultiheadAttention: separate q/k/v/out projections, heads = E / head_dim,
    softmax(q k^T / sqrt(head_dim)) v. (PyTorch 1.13 has no scaled_dot_product_attention.)"""

    def __init__(self, embed_dim, heads):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x):  # x [B, S, E]
        b, s, e = x.shape
        d = e // self.heads

        def split(t):  # [B, S, E] -> [B, H, S, D]
            return t.reshape(b, s, self.heads, d).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        weights = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d)), dim=-1)
        o = torch.matmul(weights, v)  # [B, H, S, D]
        return self.out_proj(o.transpose(1, 2).reshape(b, s, e))


class AttentionBlock(nn.Module):
    """x + attention(GroupNorm(x)) over the H*W pixels as tokens (no activation after the norm)."""

    def __init__(self, channels, head_dim, groups):
        super().__init__()
        if channels % head_dim:
            raise ValueError(f"{channels} channels do not split into heads of {head_dim}")
        self.norm = GroupNorm(groups, channels, eps=1e-5)
        self.attention = MultiheadAttention(channels, channels // head_dim)

    def forward(self, x):
        b, c, h, w = x.shape
        tokens = self.norm(x).permute(0, 2, 3, 1).reshape(b, h * w, c)
        mixed = self.attention(tokens)
        return x + mixed.reshape(b, h, w, c).permute(0, 3, 1, 2)


class ResBlock(nn.Module):
    """GroupNorm+SiLU -> 3x3 conv -> + Linear(time) per channel -> GroupNorm+SiLU -> 3x3 conv,
    plus the input (1x1 conv when channels change).

    mixprec registers the self-attention that follows block "down.L.B" under the name
    "down.L.B.attention", so here it is this block's child `attention`, run after the block."""

    def __init__(self, cin, cout, time_dim, groups, head_dim=None):
        super().__init__()
        self.norm1 = GroupNorm(groups, cin, eps=1e-5)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time = nn.Linear(time_dim, cout)
        self.norm2 = GroupNorm(groups, cout, eps=1e-5)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else None
        self.attention = AttentionBlock(cout, head_dim, groups) if head_dim else None

    def forward(self, x, time):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time(time)[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        h = h + (self.skip(x) if self.skip is not None else x)
        return self.attention(h) if self.attention is not None else h


class UNetVideo(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        base, groups, head_dim = cfg["base_channels"], cfg["groups"], cfg["head_dim"]
        mults, blocks = cfg["channel_mults"], cfg["res_blocks"]
        time_dim = 4 * base
        levels = len(mults)

        def attn(level):
            return head_dim if level in cfg["attention_levels"] else None

        self.time_fc1 = nn.Linear(base, time_dim)
        self.time_fc2 = nn.Linear(time_dim, time_dim)
        self.conv_in = nn.Conv2d(2 * cfg["frame_channels"], base, 3, padding=1)
        skip_channels, ch = [base], base
        self.down = nn.ModuleList()
        for level in range(levels):
            out = base * mults[level]
            stage = nn.ModuleDict()
            for b in range(blocks):
                stage[str(b)] = ResBlock(ch, out, time_dim, groups, attn(level))
                ch = out
                skip_channels.append(ch)
            if level + 1 < levels:
                stage["downsample"] = nn.Conv2d(ch, ch, 3, stride=2, padding=1)
                skip_channels.append(ch)
            self.down.append(stage)
        self.mid = nn.ModuleDict()
        self.mid["0"] = ResBlock(ch, ch, time_dim, groups)
        self.mid["attention"] = AttentionBlock(ch, head_dim, groups)
        self.mid["1"] = ResBlock(ch, ch, time_dim, groups)
        up = [None] * levels  # indexed by level, like mixprec's names "up.L.*"
        for level in reversed(range(levels)):
            out = base * mults[level]
            stage = nn.ModuleDict()
            for b in range(blocks + 1):
                stage[str(b)] = ResBlock(ch + skip_channels.pop(), out, time_dim, groups, attn(level))
                ch = out
            if level > 0:
                stage["upsample"] = nn.Conv2d(ch, ch, 3, padding=1)
            up[level] = stage
        self.up = nn.ModuleList(up)
        self.norm_out = GroupNorm(groups, ch, eps=1e-5)
        self.conv_out = nn.Conv2d(ch, cfg["frame_channels"], 3, padding=1)

    def forward(self, x_t, context, timesteps):
        dtype = x_t.dtype
        emb = timestep_embedding(timesteps, self.cfg["base_channels"]).to(dtype)
        time = F.silu(self.time_fc2(F.silu(self.time_fc1(emb))))
        h = self.conv_in(torch.cat([x_t, context.to(dtype)], dim=1))
        skips = [h]
        for stage in self.down:
            for b in range(self.cfg["res_blocks"]):
                h = stage[str(b)](h, time)
                skips.append(h)
            if "downsample" in stage:
                h = stage["downsample"](h)
                skips.append(h)
        h = self.mid["1"](self.mid["attention"](self.mid["0"](h, time)), time)
        for level in reversed(range(len(self.up))):
            stage = self.up[level]
            for b in range(self.cfg["res_blocks"] + 1):
                h = stage[str(b)](torch.cat([h, skips.pop()], dim=1), time)
            if "upsample" in stage:
                h = stage["upsample"](F.interpolate(h, scale_factor=2, mode="nearest"))
        return self.conv_out(F.silu(self.norm_out(h)))


def config_from_metadata(meta, path):
    if meta.get("format") != "mixprec.video_model":
        raise ValueError(f"{path}: metadata format is {meta.get('format')!r}, "
                         "expected 'mixprec.video_model' (written by save_video_model)")

    def ints(key):
        text = meta[key]
        return [int(v) for v in text.split(",")] if text else []

    cfg = {k: int(meta["unet." + k]) for k in
           ("frame_channels", "base_channels", "res_blocks", "head_dim", "groups")}
    cfg["channel_mults"] = ints("unet.channel_mults")
    cfg["attention_levels"] = ints("unet.attention_levels")
    cfg["name"] = meta.get("unet.name", "custom")
    return cfg


def load_weights(model, tensors, path):
    """Copies every file tensor into the parameter of the same name. Fails loudly, listing
    them, when a file tensor is not consumed, a parameter is missing from the file, or a
    shape differs: the architecture check."""
    params = dict(model.named_parameters())
    params.update(dict(model.named_buffers()))
    unused = sorted(set(tensors) - set(params))
    missing = sorted(set(params) - set(tensors))
    shapes = [f"{n}: file {list(tensors[n].shape)} vs model {list(params[n].shape)}"
              for n in sorted(set(params) & set(tensors)) if tensors[n].shape != params[n].shape]
    if unused or missing or shapes:
        lines = [f"{path}: the PyTorch architecture does not match the file"]
        lines += [f"  not consumed (in the file, not in the model): {n}" for n in unused]
        lines += [f"  missing (in the model, not in the file): {n}" for n in missing]
        lines += [f"  shape mismatch: {s}" for s in shapes]
        raise SystemExit("\n".join(lines))
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(tensors[name])
    return len(params)


# ---- measuring ----


def rel_error(a, ref):
    a, ref = a.detach().to(torch.float64), ref.detach().to(torch.float64)
    diff = (a - ref).abs()
    finite = bool(torch.isfinite(a).all())
    return {"max_rel": float(diff.max() / ref.abs().max()) if finite else None,  # null in JSON
            "mean_rel": float(diff.mean() / ref.abs().mean()) if finite else None,
            "finite": finite}


# Where a forward goes, by ATen op (self times; first match wins): the categories of mixprec's
# graph profile (`mixprec bench video --graph`), for the per-op account of issue #16.
PROFILE_CATEGORIES = [
    ("convolution", ("conv",)),
    ("norms (GroupNorm)", ("group_norm", "layer_norm")),
    ("attention", ("attention", "flash", "softmax", "bmm")),
    ("linear", ("addmm", "aten::mm", "aten::linear")),
    ("resample, concat, copies", ("upsample", "cat", "copy_", "_to_copy", "clone", "contiguous")),
    ("elementwise", ("silu", "gelu", "sigmoid", "add", "mul", "sub", "div", "sin", "cos", "exp")),
]


def profile_category(event):
    """An op event's category (PROFILE_CATEGORIES, else "other")."""
    low = event.name.lower()
    return next((c for c, keys in PROFILE_CATEGORIES if any(k in low for k in keys)), "other")


def time_forward(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return {"ms": 1e3 * samples[len(samples) // 2], "min_ms": 1e3 * samples[0],
            "max_ms": 1e3 * samples[-1], "reps": len(samples)}



def compiled(module, inputs, freezing):
    """torch.compile (inductor) of `module`; `freezing` folds the weights into the graph as
    constants (inductor's `freezing` option, for inference). The first call compiles. The two
    variants are separate compilations: the options make them different backends to dynamo,
    which would otherwise reuse one graph for both modules of the same class."""
    fn = torch.compile(module, options={"freezing": freezing})
    return lambda: fn(*inputs)


def openvino_configs(ov, model, inputs, threads):
    """The f32 `model` converted by openvino.convert_model (traced with `inputs`) and compiled
    for the CPU at f32 and bf16 inference precision: [(name, compute dtype, forward)]. The
    compute dtype is the precision OpenVINO reports it runs at (bf16 falls back to f32 on a CPU
    without bf16 instructions)."""
    ov_model = ov.convert_model(model, example_input=inputs)
    arrays = [t.numpy() for t in inputs]
    core = ov.Core()
    configs = []
    for precision in ("f32", "bf16"):
        compiled_model = core.compile_model(ov_model, "CPU", {
            "INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads,
            "PERFORMANCE_HINT": "LATENCY"})
        actual = compiled_model.get_property("INFERENCE_PRECISION_HINT")
        request = compiled_model.create_infer_request()

        def run(request=request):
            request.infer(arrays)
            return torch.from_numpy(request.get_output_tensor(0).data.copy())
        configs.append((f"openvino {precision} inference precision",
                        "bf16" if actual == ov.Type.bf16 else "f32", run))
    return configs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=".", help="where bench_unet_forward wrote its files")
    ap.add_argument("--preset", default="medium")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--tolerance", type=float, default=2e-2,
                    help="max_rel vs PyTorch f32 a bf16 configuration must meet to count as correct")
    ap.add_argument("--f32-tolerance", type=float, default=1e-4,
                    help="max_rel of mixprec f32 vs PyTorch f32 above which the two networks are "
                         "taken to differ (exit status 3)")
    ap.add_argument("--mixprec-io", action="append", default=[], metavar="LABEL=PATH",
                    help="also compare the mixprec outputs in PATH (an _io file written with the "
                         "same seed, e.g. at another kernel level), their rows named "
                         "'mixprec ... (LABEL)'; by default DIR's _io file, unlabelled")
    ap.add_argument("--no-compile", action="store_true", help="leave out torch.compile")
    ap.add_argument("--no-openvino", action="store_true", help="leave out OpenVINO")
    ap.add_argument("--no-time", action="store_true", help="only check the outputs")
    ap.add_argument("--json", action="store_true", help="print only the JSON results")
    ap.add_argument("--profile", action="store_true",
                    help="also print where PyTorch's bf16 channels_last forward goes per category "
                         "(torch.profiler, self times)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    log = sys.stderr if args.json else sys.stdout

    weights_path = os.path.join(args.dir, f"unet_{args.preset}.safetensors")
    io_path = os.path.join(args.dir, f"unet_{args.preset}_io.safetensors")
    weights, weight_dtypes, meta = read_safetensors(weights_path)
    io, _, io_meta = read_safetensors(io_path)
    cfg = config_from_metadata(meta, weights_path)
    for key in ("seed", "init"):
        if io_meta.get(key) != meta.get(key):
            raise SystemExit(f"{io_path} was written for {key} {io_meta.get(key)}, {weights_path} "
                             f"holds {key} {meta.get(key)}: rerun bench_unet_forward")
    model = UNetVideo(cfg).eval()
    n_tensors = load_weights(model, weights, weights_path)
    n_params = sum(p.numel() for p in model.parameters())
    stored = sorted(set(weight_dtypes.values()))
    x_t, context, timesteps = io["x_t"], io["context"], io["timesteps"]
    mixprec_io = [tuple(spec.split("=", 1)) if "=" in spec else ("", spec) for spec in args.mixprec_io]
    mixprec_io = mixprec_io or [("", io_path)]

    # One model per configuration, each made from the f32 one as a user would.
    m32 = model
    m32_cl = copy.deepcopy(model).to(memory_format=torch.channels_last)
    mbf16_cl = copy.deepcopy(model).to(torch.bfloat16).to(memory_format=torch.channels_last)
    mbf16 = copy.deepcopy(model).to(torch.bfloat16)
    m32_gn = copy.deepcopy(model)  # autocast with the GroupNorm workaround
    for m in m32_gn.modules():
        if isinstance(m, GroupNorm):
            m.in_f32 = True
    x_cl, c_cl = (t.contiguous(memory_format=torch.channels_last) for t in (x_t, context))
    xb, cb = x_t.to(torch.bfloat16), context.to(torch.bfloat16)
    xb_cl, cb_cl = (t.contiguous(memory_format=torch.channels_last) for t in (xb, cb))

    def autocast(m, x, c):
        def run():  # one autocast region per forward, as bench_unet_forward does
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return m(x, c, timesteps)
        return run

    # name, compute dtype, forward: the configurations first, then diagnostics.
    configs = [
        ("pytorch f32", "f32", lambda: m32(x_t, context, timesteps)),
        ("pytorch bf16 channels_last", "bf16", lambda: mbf16_cl(xb_cl, cb_cl, timesteps)),
        ("pytorch autocast-bf16", "bf16", autocast(m32, x_t, context)),
        ("pytorch f32 channels_last", "f32", lambda: m32_cl(x_cl, c_cl, timesteps)),
        ("pytorch bf16 NCHW", "bf16", lambda: mbf16(xb, cb, timesteps)),
        ("pytorch autocast-bf16 channels_last", "bf16", autocast(m32_cl, x_cl, c_cl)),
        ("pytorch autocast-bf16 + f32 GroupNorm", "bf16", autocast(m32_gn, x_t, context)),
    ]
    notes = []
    if not args.no_compile and hasattr(torch, "compile"):
        for freezing in (False, True):
            configs.append((f"pytorch compile{'+freezing' if freezing else ''} bf16 channels_last",
                            "bf16", compiled(copy.deepcopy(mbf16_cl), (xb_cl, cb_cl, timesteps),
                                             freezing)))
    elif not args.no_compile:
        notes.append(f"torch.compile: not in PyTorch {torch.__version__}")
    openvino_version = None
    if not args.no_openvino:
        try:
            import openvino
        except ImportError:
            notes.append("OpenVINO: the openvino package is not installed for this interpreter")
        else:
            openvino_version = openvino.get_version()
            try:
                configs += openvino_configs(openvino, m32, (x_t, context, timesteps), args.threads)
            except Exception as e:  # a conversion or compilation failure leaves out OpenVINO only
                notes.append(f"OpenVINO: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}")
    results = []
    with torch.inference_mode():
        ref = m32(x_t, context, timesteps).float()
        for name, dtype, fn in configs:
            r = {"config": name, "compute": dtype}
            try:
                r.update(rel_error(fn().float(), ref))
            except Exception as e:  # the framework refuses the configuration or fails to compile it
                r.update({"max_rel": None, "mean_rel": None, "finite": False,
                          "error": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"})
            r["correct"] = bool(r["finite"] and r["max_rel"] <= args.tolerance)
            results.append(r)
        mixprec = []
        for label, path in mixprec_io:
            outputs = io if path == io_path else read_safetensors(path)[0]
            if not torch.equal(outputs["x_t"], x_t):
                raise SystemExit(f"{path} holds another input than {io_path}: same --seed needed")
            suffix = f" ({label})" if label else ""
            for key, name, dtype in (("out.f32", "mixprec f32", "f32"),
                                     ("out.bf16", "mixprec bf16", "bf16"),
                                     ("out.autocast_bf16", "mixprec autocast-bf16", "bf16")):
                mixprec.append({"config": name + suffix, "compute": dtype,
                                **rel_error(outputs[key], ref)})
        if not args.no_time:
            for (name, dtype, fn), r in zip(configs, results):
                if "error" not in r:
                    r.update(time_forward(fn, args.warmup, args.reps))
        profiled = None
        if args.profile:  # PyTorch's fastest eager bf16 forward (issue #16's comparison)
            name, _, fn = next(c for c in configs if c[0] == "pytorch bf16 channels_last")
            profiled = {"config": name, "ms": ms_by_category(fn, args.reps, profile_category)}

    print(f"UNetVideo '{cfg['name']}' in PyTorch {torch.__version__}"
          f"{', OpenVINO ' + openvino_version if openvino_version else ''}: {n_tensors} tensors "
          f"({n_params} parameters, stored {','.join(stored)}) loaded by name from {weights_path}; "
          f"all consumed, none missing", file=log)
    print(f"CPU {cpu_model()}; torch threads {torch.get_num_threads()}; "
          f"warm-up {args.warmup}, reps {args.reps}; oneDNN "
          f"{'on' if torch.backends.mkldnn.is_available() else 'off'}; output max|f32| {float(ref.abs().max()):.4g}\n",
          file=log)
    rows = mixprec + results
    cols = ["config", "compute", "ms", "min_ms", "max_ms", "max_rel", "mean_rel", "correct"]
    def fmt(r, c):
        v = r.get(c, "")
        if v is None or (c.endswith("ms") and "error" in r):
            return "-"
        if isinstance(v, bool):
            return "yes" if v else "NO"
        if isinstance(v, float):
            return f"{v:.2f}" if c.endswith("ms") else f"{v:.3e}"
        return str(v)
    table = [[fmt(r, c) for c in cols] for r in rows]
    widths = [max(len(c), *(len(t[i]) for t in table)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)), file=log)
    for t in table:
        print("  ".join(v.ljust(w) for v, w in zip(t, widths)), file=log)
    for r in results:
        if "error" in r:
            print(f"{r['config']}: {r['error']}", file=log)
    for note in notes:
        print(f"left out: {note}", file=log)
    print("(errors vs PyTorch f32: max_rel = max|a-b|/max|b|, mean_rel = mean|a-b|/mean|b|; "
          "mixprec rows are untimed here)", file=log)
    if profiled is not None:
        print(f"\nwhere a {profiled['config']} forward goes (ms, self time per op, "
              "torch.profiler):", file=log)
        for category, ms in sorted(profiled["ms"].items(), key=lambda kv: -kv[1]):
            print(f"  {category:<26} {ms:8.2f}", file=log)
    if args.json:
        print(json.dumps({"benchmark": "unet_forward_pytorch", "torch": torch.__version__,
                          "openvino": openvino_version, "left_out": notes,
                          "cpu": cpu_model(), "threads": torch.get_num_threads(),
                          "preset": cfg["name"], "warmup": args.warmup, "tolerance": args.tolerance,
                          "parameters": n_params, "ref_max_abs": float(ref.abs().max()),
                          "mixprec_vs_pytorch_f32": mixprec, "results": results,
                          "profile": profiled}, indent=1))


    for f32 in (r for r in mixprec if r["config"].startswith("mixprec f32")):
        if f32["max_rel"] is None or f32["max_rel"] > args.f32_tolerance:
            print(f"unet_video.py: {f32['config']} and PyTorch f32 differ (max_rel {f32['max_rel']}, "
                  f"tolerance {args.f32_tolerance:g}): the two networks do not compute the same "
                  "function", file=sys.stderr)
            sys.exit(3)


if __name__ == "__main__":
    main()
