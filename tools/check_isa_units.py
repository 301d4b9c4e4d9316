#!/usr/bin/env python3
"""Proves that no code compiled with -mavx2/-mavx512*/-mamx* flags can reach a generic caller.

An inline function or template instance that a unit compiled with a level's flags emits out of
line is a weak (COMDAT) symbol; when a generic unit emits the same one, the linker keeps either
copy, and a CPU without those instructions faults in the generic caller. The rule
(docs/ARCHITECTURE.md, "ISA-compiled units"): an ISA unit defines no weak code symbol at all;
its own code is in anonymous namespaces or named after its level. This script reads `nm` of
every ISA object (named by level: *_avx2, *_avx512, *_avx512bf16, *_amx, as
cmake/isa_flags.cmake flags them) and fails, naming object and symbol, on any weak code symbol
(nm types W and i: weak or indirect functions). Weak data (V, u: inline variables such as the
dtype table, guard variables) is the same bytes whichever copy is kept and is allowed.

Usage: tools/check_isa_units.py OBJECT_DIR [--nm NM]
  Searches OBJECT_DIR recursively for ISA objects (*.o / *.obj). Exit 0 when every one holds,
  1 with one line per weak code symbol, 2 when no ISA object is found (a wrong directory must
  not pass).
"""
import argparse
import os
import re
import subprocess
import sys

ISA_OBJECT = re.compile(r"[/_](avx2|avx512|avx512bf16|amx)\.(cpp|cc)\.(o|obj)$")
WEAK_CODE = {"W", "i"}


def isa_objects(root):
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if ISA_OBJECT.search(path):
                yield path


def weak_code_symbols(nm, path):
    out = subprocess.run([nm, "--defined-only", "-C", path], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[1] in WEAK_CODE:
            yield parts[2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("object_dir")
    parser.add_argument("--nm", default="nm")
    args = parser.parse_args()
    objects = sorted(isa_objects(args.object_dir))
    if not objects:
        print(f"check_isa_units: no ISA objects under {args.object_dir}", file=sys.stderr)
        return 2
    bad = 0
    for path in objects:
        for symbol in sorted(set(weak_code_symbols(args.nm, path))):
            print(f"{os.path.relpath(path, args.object_dir)}: weak code symbol '{symbol}' "
                  "(an inline function or template instance compiled with the unit's ISA "
                  "flags; the linker may hand it to generic callers)")
            bad += 1
    if bad:
        print(f"check_isa_units: {bad} weak code symbol(s) in {len(objects)} ISA objects; move "
              "the code into a generic unit or an anonymous namespace", file=sys.stderr)
        return 1
    print(f"check_isa_units: {len(objects)} ISA objects define no weak code symbol")
    return 0


if __name__ == "__main__":
    sys.exit(main())
