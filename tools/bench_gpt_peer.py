#!/usr/bin/python3
"""Issue #16's GPT side-by-side: mixprec's GPT small() training step vs PyTorch's, in one invocation.

Runs `mixprec bench train --no-peer` at each mixprec kernel level (--isa, as
tools/bench_unet_peer.py) and bench/peers/gpt_train.py in each peer interpreter (f32, bf16
autocast and, with PyTorch 2.x, bf16 autocast compiled by torch.compile), --rounds times
alternating, and prints one table of the step times (median over rounds of each run's median)
and each one's speed relative to mixprec's bf16 autocast step.

Both sides time the same full training step: forward, backward and the AdamW update (lr 3e-4)
of the same model, GPT small() (6 layers, d_model 384), on batches of 8 x 256 bytes of the
shipped corpus, with the same thread count. A PyTorch mode counts only when its losses agree
with its f32 run's (gpt_train.py --tolerance); mixprec's recipes are checked by its tests
(GPTParity: the 16-bit recipes' validation loss within 2% of f32's; the golden GPT test).

  python3 tools/bench_gpt_peer.py [--build build] [--rounds 1] [--threads 2]
      [--peer-python PY]... [--optional-peer-python PY]... [--isa auto|LEVEL,...] [--profile]
      [--json]
  --profile also prints where each bf16 step goes per category on both sides (mixprec bench
  train --profile; torch.profiler in gpt_train.py), ms per step averaged over the rounds, and
  their ratio: the per-op account of the distance to the target.
  (make bench-peers runs it after tools/bench_unet_peer.py.) The compiled mode compiles in its
  first warm-up step (about a minute, its first_step_s in the JSON).
"""
import argparse
import json
import os
import statistics
import sys
import time

from peer_harness import (add_common_arguments, isa_env, kernel_levels, peer_pythons, print_table, run_json,
                          short_version)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def print_profiles(profiles, reference):
    """The bf16 steps per category side by side: mixprec's bf16 row at one kernel level
    (`reference`) against each PyTorch bf16 row, ms per step averaged over the rounds, and
    PyTorch / mixprec."""
    def mean_profile(samples):
        keys = dict.fromkeys(k for s in samples for k in s)
        return {k: statistics.mean(s.get(k, 0.0) for s in samples) for k in keys}

    if reference not in profiles:
        return
    mine = mean_profile(profiles[reference])
    peers = {name: mean_profile(p) for name, p in profiles.items()
             if name.startswith("pytorch") and "bf16" in name}
    # PyTorch's untimed share has another name; its "wall (profiled)" is not a category.
    for p in peers.values():
        p["framework (untimed)"] = p.pop("outside ops", 0.0)
        p.pop("wall (profiled)", None)
    categories = sorted(dict.fromkeys(list(mine) + [k for p in peers.values() for k in p]),
                        key=lambda k: -mine.get(k, 0.0))
    head = ["category", f"{reference} ms"] + [c for name in peers for c in (f"{name} ms", "ratio")]
    table = []
    for k in categories + ["all"]:
        ours = sum(mine.values()) if k == "all" else mine.get(k, 0.0)
        row = [k, f"{ours:.1f}"]
        for p in peers.values():
            theirs = sum(p.values()) if k == "all" else p.get(k, 0.0)
            row += [f"{theirs:.1f}", f"{theirs / ours:.2f}x" if ours > 0 else "-"]
        table.append(row)
    print(f"\nwhere the bf16 steps go, {reference} (ms per step, mean over rounds; mixprec: bench train --profile, "
          "its timed steps; PyTorch: torch.profiler self times over as many steps again; ratio = "
          "PyTorch / mixprec)")
    print_table(head, table)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per mode (both sides)")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per mode (both sides)")
    ap.add_argument("--mixprec-modes", default="fp32,bf16,bf16-params",
                    help="mixprec bench train's --modes (must hold bf16, the reference)")
    ap.add_argument("--modes", default="f32,bf16,bf16-compile", help="gpt_train.py's --modes")
    ap.add_argument("--tolerance", type=float, default=2e-2, help="gpt_train.py's --tolerance")
    add_common_arguments(ap)
    ap.add_argument("--quick", action="store_true", help="1 + 3 steps per mode")
    ap.add_argument("--profile", action="store_true",
                    help="also compare the bf16 steps per category (GEMM, attention, ...)")
    ap.add_argument("--json", action="store_true", help="also print the combined JSON")
    args = ap.parse_args()
    if args.rounds < 1 or args.threads < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("--rounds, --threads and --steps must be >= 1, --warmup >= 0")
    levels = kernel_levels(args.isa)
    pythons, notes = peer_pythons(args.peer_python or [sys.executable], args.optional_peer_python)
    cli = os.path.join(args.build, "mixprec")
    peer = os.path.join(ROOT, "bench", "peers", "gpt_train.py")
    warmup, steps = (1, 3) if args.quick else (args.warmup, args.steps)
    schedule = ["--warmup", str(warmup), "--steps", str(steps)]
    profile_flag = ["--profile"] if args.profile else []

    times, loads, info = {}, [], {}  # config -> [ms per round]; config -> the row's facts
    profiles = {}  # config -> [{category: ms per step}, one per round]
    reference = None
    for r in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for level in levels:
            env = dict(isa_env(level), MIXPREC_NUM_THREADS=str(args.threads))
            machine = run_json([cli, "info", "--json"], env=env, what="mixprec info")
            mx = run_json([cli, "bench", "train", "--no-peer", "--json", "--modes", args.mixprec_modes]
                          + schedule + profile_flag, env=env, what="mixprec bench train")
            for row in mx["rows"]:
                name = f"{row['name']} ({machine['kernel_level']})"
                if "profile_ms" in row:
                    profiles.setdefault(name, []).append(row["profile_ms"])
                reference = reference or f"mixprec bf16 ({machine['kernel_level']})"
                times.setdefault(name, []).append(row["ms_per_step"])
                info[name] = {"engine": f"mixprec kernels {machine['kernel_level']}"
                                        + (f" (MIXPREC_ISA={level})" if level else ""),
                              "cpu": machine["cpu_model"], "correct": True, "last_loss": row["last_loss"]}
        for python in pythons:
            pt = run_json([python, peer, "--json", "--threads", str(args.threads), "--modes",
                           args.modes, "--tolerance", str(args.tolerance)] + schedule + profile_flag,
                          what=f"{python} gpt_train.py")
            for row in pt["results"]:
                name = f"pytorch {short_version(pt['torch'])} {row['mode']}"
                if "profile_ms" in row:
                    profiles.setdefault(name, []).append(row["profile_ms"])
                times.setdefault(name, []).append(row["ms_per_step"])
                info[name] = {"engine": f"PyTorch {pt['torch']} ({python})", "cpu": pt["cpu"],
                              "correct": row["correct"], "first_loss": row["first_loss"],
                              "last_loss": row["last_loss"], "first_step_s": row["first_step_s"]}
            if r == 0:
                notes += [f"PyTorch {pt['torch']}: {row['mode']} left out: {row['error']}"
                          for row in pt["left_out"]]
        loads.append(os.getloadavg()[0])
        print(f"round {r + 1}/{args.rounds}: load {loads[-2]:.1f} -> {loads[-1]:.1f}", file=sys.stderr)

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    if reference not in times:
        raise SystemExit(f"bench_gpt_peer: no {reference} row: --mixprec-modes must hold bf16")
    ref_ms = statistics.median(times[reference])
    rows = [dict(info[name], config=name, ms=statistics.median(samples),
                 ms_range=[min(samples), max(samples)],
                 vs_mixprec_bf16=ref_ms / statistics.median(samples))
            for name, samples in times.items()]
    cpus = sorted({row["cpu"] for row in rows})
    print(f"\nGPT small() training step (forward, backward, AdamW), batch 8 x 256, {args.threads} "
          f"threads, {warmup} + {steps} steps; every figure from CPU {' / '.join(cpus)} in this "
          f"run; {args.rounds} round(s); 1-min load average {min(loads):.1f}..{max(loads):.1f}")
    print("engines: " + "; ".join(dict.fromkeys(i["engine"] for i in info.values())))
    for note in notes:
        print(note)
    print(f"ms: median step (over rounds, the median of each run's); vs mixprec = {reference} ms / "
          "this ms; correct (PyTorch): first and last loss within the tolerance of its f32 run's\n")
    head = ["config", "ms/step", "range", "vs mixprec", "last loss", "correct"]
    table = [[r["config"], f"{r['ms']:.1f}", f"{r['ms_range'][0]:.1f}-{r['ms_range'][1]:.1f}",
              f"{r['vs_mixprec_bf16']:.2f}x", f"{r['last_loss']:.4f}",
              "yes" if r["correct"] else "NO"] for r in rows]
    print_table(head, table)
    bf16_peers = [r for r in rows if r["config"].startswith("pytorch") and "bf16" in r["config"]
                  and r["correct"]]
    if bf16_peers:
        # One verdict per kernel level measured: PyTorch uses AMX where the CPU has it, so on such
        # a CPU the amx row is the like-for-like one, and the forced avx512bf16 row is what a CPU
        # without AMX (an AMD EPYC) runs, where PyTorch has no AMX either.
        fastest = min(bf16_peers, key=lambda r: r["ms"])
        for r in rows:
            if not r["config"].startswith("mixprec bf16 ("):
                continue
            ratio = fastest["ms"] / r["ms"]
            best = fastest["ms_range"][0] / r["ms_range"][0]
            print(f"\nissue #16 target ({r['config']} >= 1.5x PyTorch bf16 autocast, eager and "
                  f"compiled): {ratio:.2f}x by median ({best:.2f}x by best) vs the fastest, "
                  f"{fastest['config']} ({'MET' if ratio >= 1.5 else 'NOT met'})")
    # One table per kernel level: on a CPU with AMX the amx row is the like-for-like one.
    for name in profiles:
        if name.startswith("mixprec bf16 ("):
            print_profiles(profiles, name)
    if args.json:
        print(json.dumps({"benchmark": "gpt_step_vs_peers", "threads": args.threads,
                          "rounds": args.rounds, "levels": levels, "load": [min(loads), max(loads)],
                          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                          "results": rows}, indent=1))


if __name__ == "__main__":
    main()
