#!/usr/bin/python3
"""mixprec.stream's peak finders called from Python vs the same find called from C++, side by
side in one process, on synthetic frames (issue #21 item 4).

Each case is one finder and one frame: the classical finder on a uint16 frame (one conversion
into f32 per call) and on a float32 frame (read in place), and, with --model, PeakNet on a uint16
frame (bf16 at the source, or --precision). Each round times `reps` calls from a Python loop
(`finder(frame)`, what a user writes: the shape checks, the GIL released, the peaks as a numpy
structured array) and `reps` from a C++ loop (mixprec._mixprec._find_seconds_from_cpp: the
conversion and the finder alone), in alternating order. Prints the median ms per call of each
side, frames/s and the Python overhead.

  MIXPREC_NUM_THREADS=1 PYTHONPATH=build/python python3 bench/python_stream_finders.py \\
      [--detector single] [--rounds 5] [--reps 20] [--model model.safetensors --precision bf16]
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import mixprec as mp
from mixprec import _mixprec

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
from peer_util import cpu_model  # noqa: E402


def python_loop(finder, frame, reps):
    seconds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        finder(frame)
        seconds.append(time.perf_counter() - t0)
    return seconds


def measure(name, finder, frame, args):
    python_loop(finder, frame, args.warmup)
    sides = {"python": [], "c++": []}
    for r in range(args.rounds):
        for side in (["python", "c++"] if r % 2 == 0 else ["c++", "python"]):
            if side == "python":
                sides[side] += python_loop(finder, frame, args.reps)
            else:
                sides[side] += _mixprec._find_seconds_from_cpp(finder._finder, frame, args.reps)
    med = {side: statistics.median(s) * 1e3 for side, s in sides.items()}
    peaks = len(finder(frame))
    print(f"{name:<34} {med['c++']:>9.3f} {med['python']:>9.3f} {1e3 / med['python']:>9.1f} "
          f"{med['python'] - med['c++']:>+9.3f} {100 * (med['python'] / med['c++'] - 1):>+7.2f}% "
          f"{peaks:>6}  ({finder.last_input[1] or 'in place'})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--detector", default="single")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--model", default=None, help="a PeakNet file (mixprec stream train)")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()

    det = mp.stream.SyntheticDetector(args.detector, seed=args.seed)
    raw, _ = det.frame(0)
    g = det.geometry
    print(f"{args.detector} {g.panels} x {g.rows} x {g.cols}, "
          f"{os.environ.get('MIXPREC_NUM_THREADS', 'all')} thread(s), kernels {mp.kernel_level()}")
    print(f"CPU: {cpu_model()}")
    print(f"{'finder, frame':<34} {'C++ ms':>9} {'Py ms':>9} {'Py fr/s':>9} {'Py - C++':>9} "
          f"{'':>8} {'peaks':>6}")
    classic = mp.stream.PeakFinder(args.detector, bad_pixels=det.bad_pixels)
    measure("classic, uint16", classic, raw, args)
    measure("classic, float32", classic, raw.astype(np.float32), args)
    if args.model:
        net = mp.stream.PeakFinder(args.detector, bad_pixels=det.bad_pixels, finder="net",
                                   model=args.model, precision=args.precision)
        measure(f"net {args.precision}, uint16", net, raw, args)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
