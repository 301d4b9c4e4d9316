#!/usr/bin/python3
"""Issues #6 and #16's side-by-side: mixprec's UNetVideo forward vs its peers, in one invocation.

Each round runs build/bench/bench_unet_forward at each mixprec kernel level (--isa; writes the
weights, one input and mixprec's outputs, times f32 / bf16 / autocast-bf16) and then
bench/peers/unet_video.py in each peer interpreter (loads the same weights into the identical
PyTorch network, checks the outputs, times its configurations: PyTorch eager, torch.compile
and OpenVINO where that interpreter has them), alternating so that all see the same machine
load. Prints one table: each configuration's ms per forward (median over rounds of each round's
median, with the range of the round medians), its speed relative to mixprec bf16 and to
PyTorch's fastest *correct* bf16 configuration, and its relative error vs PyTorch f32; then
whether issue #6's and #16's targets are met. Correct means max_rel <= --tolerance both with
the weights as initialised (the timed model) and with --dense weights (every layer
contributing, as in a trained network; checked once, untimed).

  python3 tools/bench_unet_peer.py [--build build] [--preset medium] [--rounds 3]
      [--peer-python PY]... [--optional-peer-python PY]... [--isa auto|LEVEL,...]
  (make bench-unet-peer runs it with Debian's python3-torch; make bench-peers with PyTorch 2.x
  and OpenVINO from build/peers-venv, Debian's torch an optional extra column.)
"""
import argparse
import json
import os
import statistics
import sys
import time

from peer_harness import (add_common_arguments, isa_env, kernel_levels, peer_pythons, print_table, run_json,
                          short_version, versioned)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fmt_err(v):
    return "-" if v is None else f"{v:.2e}"


def run_round(args, levels, pythons, out, dense=False):
    """bench_unet_forward at each level (into out/<level>), then the peer in each interpreter
    on the first level's files, comparing every level's outputs; `dense`: the --dense weights,
    untimed. -> ({level: mixprec JSON}, [peer JSON per interpreter])."""
    bench = os.path.join(args.build, "bench", "bench_unet_forward")
    peer = os.path.join(ROOT, "bench", "peers", "unet_video.py")
    common = ["--preset", args.preset, "--threads", str(args.threads),
              "--warmup", str(args.warmup), "--reps", str(args.reps), "--json"]
    mixprec, dirs = {}, {}
    for level in levels:
        dirs[level] = os.path.join(out, level or "default")
        mixprec[level] = run_json([bench, "--seed", str(args.seed), "--out", dirs[level]]
                                  + common + (["--dense", "--no-time"] if dense else []),
                                  env=isa_env(level), what="bench_unet_forward")
    ios = [f"--mixprec-io={mixprec[level]['kernel_level']}="
           f"{os.path.join(dirs[level], f'unet_{args.preset}_io.safetensors')}" for level in levels]
    peers = [run_json([python, peer, "--dir", dirs[levels[0]], "--tolerance", str(args.tolerance)]
                      + ios + common + (["--no-time"] if dense else []) + args.peer_args.split(),
                      what=f"{python} unet_video.py")
             for python in pythons]
    return mixprec, peers


def peer_rows(peer, key="results"):
    """A peer's rows, named with its engines' versions."""
    versions = {"pytorch": short_version(peer["torch"]), "openvino": short_version(peer.get("openvino"))}
    return [dict(row, config=versioned(row["config"], versions)) for row in peer[key]]


def mixprec_rows(mixprec):
    """bench_unet_forward's rows, named with the kernel level they ran at."""
    return [dict(row, config=f"{row['config']} ({mx['kernel_level']})")
            for mx in mixprec.values() for row in mx["results"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=None, help="where the weights and I/O go (BUILD/unet_peer)")
    ap.add_argument("--preset", default="medium")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--tolerance", type=float, default=2e-2)
    ap.add_argument("--peer-args", default="", help="extra arguments for unet_video.py, e.g. --no-compile")
    add_common_arguments(ap)
    ap.add_argument("--json", action="store_true", help="also print the combined JSON")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    out = args.out or os.path.join(args.build, "unet_peer")
    levels = kernel_levels(args.isa)
    pythons, notes = peer_pythons(args.peer_python or [sys.executable], args.optional_peer_python)

    rounds, loads = [], []
    for r in range(args.rounds):
        load_before = os.getloadavg()[0]
        rounds.append(run_round(args, levels, pythons, out))
        loads += [load_before, os.getloadavg()[0]]
        print(f"round {r + 1}/{args.rounds}: load {load_before:.1f} -> {os.getloadavg()[0]:.1f}",
              file=sys.stderr)

    # The same check with every layer contributing (bench_unet_forward --dense), untimed.
    _, dense_peers = run_round(args, levels, pythons, os.path.join(out, "dense"), dense=True)
    dense = {e["config"]: e for e in peer_rows(dense_peers[0], "mixprec_vs_pytorch_f32")}
    for peer in dense_peers:
        dense.update({e["config"]: e for e in peer_rows(peer)})

    mx0, peers0 = rounds[0]
    first = mx0[levels[0]]
    err = {e["config"]: e for e in peer_rows(peers0[0], "mixprec_vs_pytorch_f32")}
    for peer in peers0:
        err.update({e["config"]: e for e in peer_rows(peer)})

    def is_correct(c):  # within the tolerance with both the default and the dense init
        return all(c in e and e[c]["max_rel"] is not None and e[c]["max_rel"] <= args.tolerance
                   for e in (err, dense))

    times, best_times = {}, {}
    for mx, peers in rounds:
        for row in mixprec_rows(mx) + [row for peer in peers for row in peer_rows(peer)]:
            if "ms" in row:  # a configuration the framework refused has no timing
                times.setdefault(row["config"], []).append(row["ms"])
                best_times.setdefault(row["config"], []).append(row["min_ms"])
    all0 = mixprec_rows(mx0) + [row for peer in peers0 for row in peer_rows(peer)]
    order = [row["config"] for row in all0]
    compute = {row["config"]: row["compute"] for row in all0}
    ms = {c: statistics.median(times[c]) if c in times else None for c in order}
    # The fastest single forward of all rounds: on a shared machine, the run least disturbed.
    best = {c: min(best_times[c]) if c in best_times else None for c in order}
    bf16_correct = [c for c in order if c.startswith("pytorch") and compute[c] == "bf16"
                    and is_correct(c) and ms[c]]
    baseline = min(bf16_correct, key=lambda c: ms[c]) if bf16_correct else None
    best_baseline = min(bf16_correct, key=lambda c: best[c]) if bf16_correct else None
    mixprec_bf16 = f"mixprec bf16 ({first['kernel_level']})"

    gflop = first["gflop_per_forward"]
    # The ceiling of each level's bf16 rows (AMX tiles, vdpbf16ps, or the f32 FMA where the
    # kernels widen), best of the rounds' probes; a peer's is the machine's highest of them.
    level_name = {level: mx0[level]["kernel_level"] for level in levels}
    peaks = {level_name[level]: max(mx[level]["peak_gflops"]["bf16_path"] for mx, _ in rounds)
             for level in levels}
    units = {level_name[level]: mx0[level]["peak_gflops"]["bf16_path_unit"] for level in levels}
    machine_peak = max(peaks.values())

    def peak_of(config):
        for name, value in peaks.items():
            if config.startswith("mixprec") and config.endswith(f"({name})"):
                return value
        return machine_peak

    rows = []
    for c in order:
        e = err[c]
        rows.append({"config": c, "compute": compute[c], "ms": ms[c],
                     "ms_range": [min(times[c]), max(times[c])] if c in times else None,
                     "vs_mixprec_bf16": ms[mixprec_bf16] / ms[c] if ms[c] else None,
                     "speedup": ms[baseline] / ms[c] if baseline and ms[c] else None,
                     "best_ms": best[c],
                     "best_speedup": best[best_baseline] / best[c] if best_baseline and best[c] else None,
                     "gflops": gflop / best[c] * 1e3 if best[c] else None,  # at the best forward
                     "peak_gflops": peak_of(c),
                     "error": e.get("error"),
                     "max_rel_vs_pytorch_f32": e["max_rel"], "mean_rel_vs_pytorch_f32": e["mean_rel"],
                     "max_rel_dense_init": dense[c]["max_rel"] if c in dense else None,
                     "correct": is_correct(c)})
    engines = [f"mixprec kernels {', '.join(mx0[level]['kernel_level'] + (f' (MIXPREC_ISA={level})' if level else '') for level in levels)}"]
    for python, peer in zip(pythons, peers0):
        engines.append(f"PyTorch {peer['torch']}" + (f" + OpenVINO {peer['openvino']}" if peer.get("openvino") else "")
                       + f" ({python})")
    cpus = {first["cpu"]} | {peer["cpu"] for peer in peers0}
    print(f"\nUNetVideo '{args.preset}' (seed {args.seed}), batch 1, 3 x {first['size']} x {first['size']}, "
          f"{gflop:.2f} GFLOP/forward; {args.threads} threads; every figure from CPU "
          f"{' / '.join(sorted(cpus))} in this run")
    print("engines: " + "; ".join(engines))
    for note in notes:
        print(note)
    print(f"{args.rounds} rounds x (warm-up {args.warmup}, {args.reps} reps) per configuration; "
          f"1-min load average during the runs {min(loads):.1f}..{max(loads):.1f}; "
          "bf16 peak per level (the unit its bf16 products run on, measured by bench_unet_forward): "
          + ", ".join(f"{name} {units[name]} {value:.0f} GFLOP/s" for name, value in peaks.items())
          + "; peers: the highest")
    print(f"speedup baseline: PyTorch's fastest correct bf16 configuration (max_rel <= "
          f"{args.tolerance:g}): by median {baseline or 'none is correct'}, by best "
          f"{best_baseline or '-'}; vs mixprec = {mixprec_bf16} ms / this ms")
    print("median = median over rounds of each round's median (range: of the round medians); "
          "best = fastest single forward\n")
    head = ["config", "median ms", "range(ms)", "best ms", "GFLOP/s (best)", "% peak",
            "vs mixprec", "speedup", "speedup (best)", "max_rel vs pt f32",
            "mean_rel", "max_rel dense init", "correct"]
    table = [[r["config"], f"{r['ms']:.1f}" if r["ms"] else "failed",
              f"{r['ms_range'][0]:.1f}-{r['ms_range'][1]:.1f}" if r["ms_range"] else "-",
              f"{r['best_ms']:.1f}" if r["best_ms"] else "-",
              f"{r['gflops']:.1f}" if r["gflops"] else "-",
              f"{100 * r['gflops'] / r['peak_gflops']:.1f}" if r["gflops"] else "-",
              f"{r['vs_mixprec_bf16']:.2f}x" if r["vs_mixprec_bf16"] else "-",
              f"{r['speedup']:.2f}x" if r["speedup"] else "-",
              f"{r['best_speedup']:.2f}x" if r["best_speedup"] else "-",
              fmt_err(r["max_rel_vs_pytorch_f32"]), fmt_err(r["mean_rel_vs_pytorch_f32"]),
              fmt_err(r["max_rel_dense_init"]),
              "yes" if r["correct"] else "NO"] for r in rows]
    print_table(head, table)
    for r in rows:
        if r["error"]:
            print(f"{r['config']}: {r['error']}")
    for peer in peers0:
        for note in peer.get("left_out", []):
            print(f"PyTorch {peer['torch']}: left out: {note}")

    by_name = {r["config"]: r for r in rows}
    for level in levels:
        name = f"mixprec f32 ({mx0[level]['kernel_level']})"
        rel = by_name[name]["max_rel_vs_pytorch_f32"]
        print(f"\n{name} vs PyTorch f32: max_rel {rel:.2e} "
              f"({'agrees' if rel <= 1e-4 else 'DOES NOT agree'} to ~1e-5)", end="")
    print()
    mxbf16 = by_name[mixprec_bf16]
    speed_ok = mxbf16["speedup"] is not None and mxbf16["speedup"] >= 2.0
    best_ok = mxbf16["best_speedup"] is not None and mxbf16["best_speedup"] >= 2.0
    print(f"issue #6 target 1 ({mixprec_bf16} >= 2x PyTorch's fastest correct bf16): "
          f"by median {'MET' if speed_ok else 'NOT met'} ({mxbf16['speedup'] or 0:.2f}x), "
          f"by best {'MET' if best_ok else 'NOT met'} ({mxbf16['best_speedup'] or 0:.2f}x)")
    print(f"issue #6 target 2 ({mixprec_bf16} within 2e-2 of PyTorch f32): "
          f"{'MET' if mxbf16['correct'] else 'NOT met'} ({fmt_err(mxbf16['max_rel_vs_pytorch_f32'])}; "
          f"dense init {fmt_err(mxbf16['max_rel_dense_init'])})")
    openvino_bf16 = [c for c in order if c.startswith("openvino") and compute[c] == "bf16" and ms[c]]
    # One verdict per kernel level: on a CPU with AMX the peers use it too, so the amx row is the
    # like-for-like one; the forced avx512bf16 row is what a CPU without AMX runs.
    for name in peaks:
        row = by_name[f"mixprec bf16 ({name})"]
        verdicts = []
        if openvino_bf16:  # a faster but incorrect OpenVINO is named as such
            ov = min(openvino_bf16, key=lambda c: ms[c])
            ratio = ms[ov] / row["ms"]
            verdicts.append(f"vs {ov}{'' if is_correct(ov) else ' (NOT correct)'} {ratio:.2f}x "
                            f"(>= 1.3x: {'MET' if ratio >= 1.3 else 'NOT met'})")
        speedup = row["speedup"] or 0
        verdicts.append(f"vs PyTorch's fastest correct bf16 {speedup:.2f}x "
                        f"(>= 1.5x: {'MET' if speedup >= 1.5 else 'NOT met'})")
        share = row["gflops"] / row["peak_gflops"]
        verdicts.append(f"{100 * share:.1f}% of its {units[name]} peak at the best forward "
                        f"(>= 80%: {'MET' if share >= 0.8 else 'NOT met'})")
        print(f"issue #16 targets, mixprec bf16 ({name}): " + "; ".join(verdicts))
    if args.json:
        print(json.dumps({"benchmark": "unet_forward_vs_peers", "preset": args.preset,
                          "seed": args.seed, "threads": args.threads, "rounds": args.rounds,
                          "cpu": first["cpu"], "levels": levels, "engines": engines,
                          "load": [min(loads), max(loads)],
                          "baseline": baseline, "best_baseline": best_baseline,
                          "rounds_raw": [{"mixprec": mixprec_rows(mx),
                                          "peers": [peer_rows(peer) for peer in peers]}
                                         for mx, peers in rounds],
                          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                          "results": rows}, indent=1))


if __name__ == "__main__":
    main()
