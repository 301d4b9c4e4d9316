#!/usr/bin/python3
"""Issue #16's GPT side-by-side: mixprec's GPT small() training step vs PyTorch's, in one invocation.

Runs build/bench/bench_gpt at each mixprec kernel level (--isa, as tools/bench_unet_peer.py)
and bench/peers/gpt_train.py in each peer interpreter (f32, bf16 autocast and, with PyTorch
2.x, bf16 autocast compiled by torch.compile), --rounds times alternating, and prints one
table of the step times: the median over rounds, and each one's speed relative to mixprec bf16.

What is compared: mixprec's step is forward + backward of the loss (bench_gpt's fwd_bwd_ms;
bf16 = model.to(BF16), LayerNorms f32); PyTorch's is zero_grad + forward + backward
(gpt_train.py's fwd_bwd_ms) under autocast, and its full step adds the AdamW update
(ms_per_step, shown too). The same model, batch 8 x 256 of the shipped corpus, 2 threads.
A PyTorch mode counts only when its losses agree with its f32 run's (gpt_train.py --tolerance).

  python3 tools/bench_gpt_peer.py [--build build] [--rounds 1] [--threads 2]
      [--peer-python PY]... [--optional-peer-python PY]... [--isa auto|LEVEL,...] [--json]
  (make bench-peers runs it after tools/bench_unet_peer.py.)
"""
import argparse
import json
import os
import statistics
import sys
import time

from peer_harness import (isa_env, kernel_levels, peer_pythons, print_table, run_json,
                          short_version)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10, help="timed PyTorch steps per mode")
    ap.add_argument("--modes", default="f32,bf16,bf16-compile", help="gpt_train.py's --modes")
    ap.add_argument("--tolerance", type=float, default=2e-2, help="gpt_train.py's --tolerance")
    ap.add_argument("--peer-python", action="append", default=[],
                    help="an interpreter that runs the peer (must import torch); repeatable; "
                         "default: this one")
    ap.add_argument("--optional-peer-python", action="append", default=[],
                    help="an interpreter that runs the peer too if it imports torch (else left out)")
    ap.add_argument("--isa", default="auto", help="mixprec kernel levels, as tools/bench_unet_peer.py")
    ap.add_argument("--quick", action="store_true", help="bench_gpt --quick, 3 PyTorch steps")
    ap.add_argument("--json", action="store_true", help="also print the combined JSON")
    args = ap.parse_args()
    if args.rounds < 1 or args.threads < 1:
        ap.error("--rounds and --threads must be >= 1")
    levels = kernel_levels(args.isa)
    pythons, notes = peer_pythons(args.peer_python or [sys.executable], args.optional_peer_python)
    bench = os.path.join(args.build, "bench", "bench_gpt")
    peer = os.path.join(ROOT, "bench", "peers", "gpt_train.py")
    steps = 3 if args.quick else args.steps

    times, loads, first = {}, [], None  # config -> [(fwd_bwd_ms, step_ms)] per round
    info = {}  # config -> the row's static facts (engine, correct, ...)
    for r in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for level in levels:
            mx = run_json([bench, "--json"] + (["--quick"] if args.quick else []),
                          env=dict(isa_env(level), MIXPREC_NUM_THREADS=str(args.threads)),
                          what="bench_gpt")
            first = first or mx
            for row in mx["results"]:
                name = f"mixprec {row['weights']} ({mx['kernel_level']})"
                times.setdefault(name, []).append((row["fwd_bwd_ms"], None))
                info[name] = {"engine": f"mixprec kernels {mx['kernel_level']}"
                                        + (f" (MIXPREC_ISA={level})" if level else ""),
                              "cpu": mx["cpu"], "correct": True}
        for python in pythons:
            pt = run_json([python, peer, "--json", "--threads", str(args.threads), "--steps",
                           str(steps), "--modes", args.modes, "--tolerance", str(args.tolerance)],
                          what=f"{python} gpt_train.py")
            for row in pt["results"]:
                name = f"pytorch {short_version(pt['torch'])} {row['mode']}"
                times.setdefault(name, []).append((row["fwd_bwd_ms"], row["ms_per_step"]))
                info[name] = {"engine": f"PyTorch {pt['torch']} ({python})", "cpu": pt["cpu"],
                              "correct": row["correct"], "first_loss": row["first_loss"],
                              "last_loss": row["last_loss"], "first_step_s": row["first_step_s"]}
            for row in pt["left_out"]:
                notes.append(f"PyTorch {pt['torch']}: {row['mode']} left out: {row['error']}")
        loads.append(os.getloadavg()[0])
        print(f"round {r + 1}/{args.rounds}: load {loads[-2]:.1f} -> {loads[-1]:.1f}", file=sys.stderr)

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    reference = f"mixprec bf16 ({first['kernel_level']})"
    ref_ms = median(t[0] for t in times[reference])
    rows = []
    for name, samples in times.items():
        fwd_bwd = median(t[0] for t in samples)
        rows.append(dict(info[name], config=name, fwd_bwd_ms=fwd_bwd,
                         step_ms=median(t[1] for t in samples),
                         fwd_bwd_range=[min(t[0] for t in samples), max(t[0] for t in samples)],
                         vs_mixprec_bf16=ref_ms / fwd_bwd))
    cpus = sorted({row["cpu"] for row in rows})
    print(f"\nGPT small() training step, batch 8 x 256, {args.threads} threads; every figure from "
          f"CPU {' / '.join(cpus)} in this run; {args.rounds} round(s); 1-min load average "
          f"{min(loads):.1f}..{max(loads):.1f}")
    print("engines: " + "; ".join(dict.fromkeys(i["engine"] for i in info.values())))
    for note in notes:
        print(note)
    print(f"fwd+bwd ms: forward + backward of the loss (mixprec bench_gpt; PyTorch with zero_grad); "
          f"step ms: PyTorch's full step with AdamW; vs mixprec = {reference} fwd+bwd / this fwd+bwd\n")
    head = ["config", "fwd+bwd ms", "range", "step ms (+AdamW)", "vs mixprec", "correct"]
    table = [[r["config"], f"{r['fwd_bwd_ms']:.1f}",
              f"{r['fwd_bwd_range'][0]:.1f}-{r['fwd_bwd_range'][1]:.1f}",
              f"{r['step_ms']:.1f}" if r["step_ms"] else "-", f"{r['vs_mixprec_bf16']:.2f}x",
              "yes" if r["correct"] else "NO"] for r in rows]
    print_table(head, table)
    bf16_peers = [r for r in rows if r["config"].startswith("pytorch") and "bf16" in r["config"]
                  and r["correct"]]
    if bf16_peers:
        fastest = min(bf16_peers, key=lambda r: r["fwd_bwd_ms"])
        ratio = fastest["fwd_bwd_ms"] / ref_ms
        print(f"\nissue #16 target ({reference} >= 1.5x PyTorch bf16 autocast, eager and compiled): "
              f"{ratio:.2f}x vs the fastest, {fastest['config']} ({'MET' if ratio >= 1.5 else 'NOT met'})")
    if args.json:
        print(json.dumps({"benchmark": "gpt_step_vs_peers", "threads": args.threads,
                          "rounds": args.rounds, "levels": levels, "load": [min(loads), max(loads)],
                          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                          "results": rows}, indent=1))


if __name__ == "__main__":
    main()
