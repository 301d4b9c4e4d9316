#!/usr/bin/env python3
"""Holds the source tree to its layer order: a file never includes a header of a higher layer.

The order below is the one place it is written (docs/ARCHITECTURE.md explains it). A file's
layer is its folder: include/mixprec/<layer>/..., src/<layer>/..., apps/...; python/... (the
Python bindings) counts as apps. Both `#include "mixprec/<layer>/..."` and relative includes
(resolved from the including file's folder) are checked. tests/ and bench/ may include any layer and are not scanned.

Usage: tools/check_layers.py [--no-exceptions] [ROOT]
  ROOT defaults to the repository holding this script; --no-exceptions checks against an
  empty exception list (for fixture trees).
Exit 0 when the tree holds, 1 with one line per violation (file:line: ...) when it does not,
2 when the tree has a folder the order does not know.
"""
import fnmatch
import os
import re
import sys

# Lowest first: a file may include its own layer and the layers before it, never after.
LAYERS = [
    "core",      # DType, Tensor, allocator, cpu features, errors, threads
    "kernels",   # CPU kernels per family and ISA, SIMD interface
    "mode",      # thread-local modes: grad mode, the Autocast guard, its policy table and cache
    "autograd",  # graph nodes, the engine, gradcheck
    "ops",       # the public functional API
    "optim",     # SGD, Adam(W), schedules
    "amp",       # GradScaler, PrecisionConfig
    "nn",        # Module and layers
    "io",        # safetensors, module files, checkpoints, images, JSON
    "data",      # procedural datasets (use core only today)
    "stream",    # detector frames, HDF5/CXI files, the classic peak finder
    "graph",     # capture and replay, memory planning
    "models",    # unet_video, gpt
    "pipeline",  # streaming inference, live view
    "apps",      # the `mixprec` command line
]

# Includes allowed to run up the order: (including files, a glob; included header as written;
# reason). Each must still be needed: an exception that matches no include is reported stale.
EXCEPTIONS = [
    ("src/core/*.cpp", "mixprec/kernels/convert.h",
     "Tensor's copy_, to, item, fill and printing convert element types with the conversion "
     "kernel (SIMD, per ISA). Only core's .cpp files include it, never a core header, and "
     "kernels/convert.h needs nothing but core/dtype.h, so no header cycle can form"),
    ("src/amp/precision_*.cpp", "mixprec/io/json.h",
     "The precision probe's cache and the per-layer precision plans (amp, above the kernels the "
     "probe times, below everything that takes a PrecisionConfig) are small JSON files. Only "
     "these .cpp files include the parser, whose header needs only the standard library and "
     "whose .cpp only core/error.h, so no cycle can form"),
    ("src/amp/precision_*.cpp", "mixprec/io/atomic_file.h",
     "The precision probe's cache and `precision plan --out` are written atomically. "
     "AtomicFile needs only the standard library and core/error.h, so no cycle can form"),
]

SCANNED = ("include/mixprec", "src", "apps", "python")
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".inc")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')


def layer_of(rel):
    """The layer of a path relative to the root, or None when it is outside the scanned tree."""
    parts = rel.split("/")
    if parts[0] in ("apps", "python"):  # the Python bindings sit beside the command line
        return "apps"
    if parts[0] == "include" and len(parts) > 3 and parts[1] == "mixprec":
        return parts[2]
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    return None


def scan(root):
    rank = {name: i for i, name in enumerate(LAYERS)}
    violations, unknown, used = [], set(), set()
    for top in SCANNED:
        base = os.path.join(root, top)
        for folder, dirs, files in os.walk(base):
            dirs.sort()
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                own = layer_of(rel)
                if own is None:  # a loose file directly in src/ or include/mixprec/
                    unknown.add(f"{rel}: not inside a layer folder")
                    continue
                if own not in rank:
                    unknown.add(f"{rel}: unknown layer '{own}'")
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE_RE.match(line)
                        if not m:
                            continue
                        header = m.group(2)
                        if header.startswith("mixprec/"):
                            target = layer_of("include/" + header)
                        elif m.group(1) == '"':
                            local = os.path.normpath(os.path.join(folder, header))
                            if not os.path.exists(local):
                                continue  # a system or third-party header
                            target = layer_of(os.path.relpath(local, root).replace(os.sep, "/"))
                        else:
                            continue
                        if target is None:
                            if header.startswith("mixprec/"):
                                unknown.add(f"{rel}:{lineno}: \"{header}\" is not inside a layer folder")
                            continue
                        if target not in rank:
                            unknown.add(f"{rel}:{lineno}: \"{header}\" is in the unknown layer '{target}'")
                            continue
                        if rank[target] <= rank[own]:
                            continue
                        allowed = [i for i, (files, inc, _) in enumerate(EXCEPTIONS)
                                   if inc == header and fnmatch.fnmatchcase(rel, files)]
                        if allowed:
                            used.update(allowed)
                            continue
                        violations.append(
                            f"{rel}:{lineno}: layer '{own}' includes \"{header}\" of the "
                            f"higher layer '{target}'")
    stale = [f"{files}: the exception for \"{inc}\" matches no include any more; remove it"
             for i, (files, inc, _) in enumerate(EXCEPTIONS) if i not in used]
    return violations, sorted(unknown), stale


def main(argv):
    args = argv[1:]
    if "--no-exceptions" in args:  # for fixture trees (tests/tools/test_check_layers.py)
        args.remove("--no-exceptions")
        EXCEPTIONS.clear()
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    violations, unknown, stale = scan(root)
    for line in unknown:
        print(f"check_layers: {line}: every folder of include/mixprec/ and src/ must be a layer "
              "named in LAYERS (tools/check_layers.py)", file=sys.stderr)
    for line in violations + stale:
        print(f"check_layers: {line}", file=sys.stderr)
    if violations or stale:
        print("check_layers: lower layers never include higher ones; the order is "
              + " < ".join(LAYERS) + " (tools/check_layers.py, docs/ARCHITECTURE.md)",
              file=sys.stderr)
        return 1
    if unknown:
        return 2
    print(f"check_layers: ok ({len(LAYERS)} layers, {len(EXCEPTIONS)} documented exceptions)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
