#!/usr/bin/python3
"""UNetVideo forward from Python vs the same forward called from C++, side by side in one process
(issue #21's target: within 2%).

One model, one input; each round times `reps` forwards called from a Python loop
(`model(x_t, context, t)`, what a user writes) and `reps` called from a C++ loop
(mixprec._mixprec._forward_seconds_from_cpp, the loop bench/bench_unet_forward runs), in
alternating order, under inference mode. Prints the median ms per forward of each side over all
forwards, the range of the round medians, and the Python overhead in percent.

  MIXPREC_NUM_THREADS=1 PYTHONPATH=build/python python3 bench/python_unet_forward.py \\
      [--preset lightweight] [--dtype f32|bf16] [--size 64] [--rounds 5] [--reps 10]
"""
import argparse
import os
import statistics
import sys
import time

import mixprec as mp
from mixprec import _mixprec

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
from peer_util import cpu_model  # noqa: E402


def python_loop(model, x, context, t, reps):
    seconds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        model(x, context, t)
        seconds.append(time.perf_counter() - t0)
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="lightweight")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()

    mp.manual_seed(1)
    model = mp.video.UNetVideo(args.preset, seed=1)
    if args.dtype != "f32":
        model.to(args.dtype)
    s = args.size
    x = mp.randn([1, 3, s, s], args.dtype)
    context = mp.randn([1, 3 * model.context_frames, s, s], args.dtype)
    t = mp.full([1], 500.0)
    sides = {"python": [], "c++": []}
    rounds = {"python": [], "c++": []}
    with mp.inference_mode():
        python_loop(model, x, context, t, args.warmup)
        _mixprec._forward_seconds_from_cpp(model, x, context, t, args.warmup)
        for r in range(args.rounds):
            order = ["python", "c++"] if r % 2 == 0 else ["c++", "python"]
            for side in order:
                if side == "python":
                    got = python_loop(model, x, context, t, args.reps)
                else:
                    got = _mixprec._forward_seconds_from_cpp(model, x, context, t, args.reps)
                sides[side] += got
                rounds[side].append(statistics.median(got))

    print(f"UNetVideo {args.preset} forward, batch 1, {s}x{s}, {args.dtype}, "
          f"{os.environ.get('MIXPREC_NUM_THREADS', 'all')} thread(s), kernels {mp.kernel_level()}")
    print(f"CPU: {cpu_model()}")
    print(f"{'called from':<12} {'median ms':>10} {'round medians (ms)':>24}")
    med = {}
    for side in ("c++", "python"):
        med[side] = statistics.median(sides[side]) * 1e3
        lo, hi = min(rounds[side]) * 1e3, max(rounds[side]) * 1e3
        print(f"{side:<12} {med[side]:>10.3f} {lo:>11.3f} .. {hi:<10.3f}")
    print(f"python overhead: {100.0 * (med['python'] / med['c++'] - 1.0):+.2f}% "
          f"(target: within 2%); load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
