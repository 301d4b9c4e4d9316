#!/usr/bin/python3
"""PyTorch peer of the GPT training benchmark (issue #5): the model of models::GPT small()
(tools/gpt_torch.py: 6 layers, d_model 384, 6 heads, context 256, byte vocab, tied head) trained
with AdamW (lr 3e-4) on batches of 8 x 256 bytes of data/shakespeare.txt, in f32, under
torch.autocast("cpu", dtype=torch.bfloat16) ("bf16"), and the same with the model's loss
compiled by torch.compile (inductor; "bf16-compile", PyTorch 2.x).

    bench/peers/gpt_train.py [--threads 2] [--warmup 3] [--steps 10]
                             [--modes f32,bf16[,bf16-compile]] [--tolerance 2e-2] [--json]
                             [--profile]

Each mode runs in its own child process so its peak RSS is its own. A step is
zero_grad + forward + loss + backward + AdamW step; the first --warmup steps are not timed
(the compiled mode compiles in its first: first_step_s). ms_per_step is the median wall time,
min_ms the fastest step, cpu_ms the median process CPU time (all threads) per step: with --threads 1 the
undisturbed step time on a shared machine.
Every mode starts from the same weights and sees the same batches, so its losses are checked
against f32's (always run first, as the reference): the first step's loss (the forward) and the
last one's (backward and updates) must be within --tolerance, relative, or the mode is marked
not correct. Prints a table, then one JSON object (with --json, only the JSON).
--profile also runs as many steps again under torch.profiler and prints where a step goes per
category, as `mixprec bench train --profile` does (GEMM, attention, elementwise, norms, copies and
casts, optimizer, loss, embedding; each op's self time, so an op's own kernels count once, and
the framework's time outside any op is the step less their sum).
Runs with Debian's python3-torch 1.13 (/usr/bin/python3; no torch.compile there: that mode is
left out) or the PyTorch 2.x virtual environment `make bench-peers` installs.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from peer_util import cpu_model, ms_by_category

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "data", "shakespeare.txt")
MODES = {"f32": "f32", "bf16": "bf16 autocast", "bf16-compile": "bf16 autocast compiled"}



# Categories of `mixprec bench train --profile`, by op name (first match wins; the rest is
# "other"). An op is filed under its nearest enclosing autograd node or optimizer call that has a
# category, else under its own name: the bias sum inside AddmmBackward0 is linear-layer (GEMM)
# work, the in-place arithmetic inside Optimizer.step the optimizer's, as mixprec counts them.
CATEGORIES = [
    ("optimizer", ("optimizer.",)),
    ("attention", ("attention", "flash")),
    ("GEMM", ("addmm", "aten::mm", "aten::bmm", "baddbmm", "aten::linear", "matmul", "mmbackward")),
    ("norms", ("layer_norm", "layernorm")),
    ("loss", ("cross_entropy", "log_softmax", "nll_loss", "softmax")),
    ("embedding", ("embedding",)),
    ("copies, casts", ("copy_", "_to_copy", "aten::to", "tocopy", "clone", "contiguous")),
    ("elementwise", ("gelu", "add", "mul", "sub", "div", "tanh", "fill_", "zero_", "where")),
]


def category_of_name(name):
    low = name.lower()
    for category, keys in CATEGORIES:
        if any(k in low for k in keys):
            return category
    return None


def categorize(event):
    """The category of a torch.profiler FunctionEvent (see CATEGORIES)."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(("autograd::engine", "Optimizer.")) or "Backward" in parent.name:
            found = category_of_name(parent.name)
            if found is not None:
                return found
        parent = parent.cpu_parent
    return category_of_name(event.name) or "other"


def run_mode(mode, threads, warmup, steps, batch, seed, profile=False):
    """Trains in this process and returns one result dict."""
    import numpy as np
    import torch

    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from gpt_torch import CONFIGS, GPT, num_parameters

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    config = CONFIGS["small"]
    t = config["context"]
    data = np.frombuffer(open(CORPUS, "rb").read(), dtype=np.uint8)
    split = len(data) - len(data) // 10  # the first 90% trains, as TextDataset's default
    train = torch.from_numpy(data[:split].astype(np.int64))
    rng = np.random.default_rng(seed)

    def next_batch():
        starts = rng.integers(0, len(train) - t, size=batch)
        windows = torch.stack([train[s:s + t + 1] for s in starts])  # [B, T + 1]
        return windows[:, :-1], windows[:, 1:]

    model = GPT(**config)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loss_fn = model.loss
    if mode == "bf16-compile":
        if not hasattr(torch, "compile"):
            return {"mode": MODES[mode], "torch": torch.__version__,
                    "error": f"torch.compile is not in PyTorch {torch.__version__}"}
        loss_fn = torch.compile(model.loss)
    times, cpu_times, losses = [], [], []
    first_step_s = None

    def step():
        x, y = next_batch()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode != "f32"):
            loss = loss_fn(x, y)
        loss.backward()
        opt.step()
        return loss

    for i in range(warmup + steps):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        losses.append(loss.item())
        first_step_s = first_step_s or dt
        if i >= warmup:
            times.append(dt)
            cpu_times.append(dc)
    ms = statistics.median(times) * 1e3
    # The same number of steps again, under the profiler.
    breakdown = ms_by_category(step, steps, categorize) if profile else None
    result = {
        "mode": MODES[mode],
        "threads": threads,
        "batch": batch,
        "seq": t,
        "parameters": num_parameters(model),
        "steps_timed": steps,
        "ms_per_step": round(ms, 1),
        "first_step_s": round(first_step_s, 1),
        "min_ms": round(min(times) * 1e3, 1),
        "max_ms": round(max(times) * 1e3, 1),
        "cpu_ms": round(statistics.median(cpu_times) * 1e3, 1),
        "tokens_per_s": round(batch * t / (ms / 1e3)),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "first_loss": round(losses[0], 4),
        "last_loss": round(losses[-1], 4),
        "torch": torch.__version__,
    }
    if breakdown is not None:
        result["profile_ms"] = breakdown
    return result


def main():
    parser = argparse.ArgumentParser(description="PyTorch GPT small() training-step benchmark")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--modes", default="f32,bf16",
                        help="from f32, bf16, bf16-compile; f32 (the reference) always runs")
    parser.add_argument("--tolerance", type=float, default=2e-2,
                        help="relative loss difference from f32 within which a mode is correct")
    parser.add_argument("--json", action="store_true", help="print only the JSON")
    parser.add_argument("--profile", action="store_true",
                        help="also print where a step goes per category (torch.profiler)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # run one mode, print its JSON
    args = parser.parse_args()
    if args.threads < 1 or args.steps < 1 or args.warmup < 0 or args.batch < 1:
        parser.error("--threads, --steps and --batch must be >= 1, --warmup >= 0")

    if args.child:
        print(json.dumps(run_mode(args.child, args.threads, args.warmup, args.steps, args.batch,
                                  args.seed, args.profile)))
        return
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            parser.error(f"unknown mode {mode!r} ({', '.join(MODES)})")
    results = []
    for mode in ["f32"] + [m for m in modes if m != "f32"]:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--threads",
               str(args.threads), "--warmup", str(args.warmup), "--steps", str(args.steps),
               "--batch", str(args.batch), "--seed", str(args.seed)] + (
                   ["--profile"] if args.profile else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    ref = results[0]
    for r in results:
        if "error" in r:
            r["correct"] = False
            continue
        r["first_loss_rel"] = abs(r["first_loss"] - ref["first_loss"]) / abs(ref["first_loss"])
        r["last_loss_rel"] = abs(r["last_loss"] - ref["last_loss"]) / abs(ref["last_loss"])
        r["correct"] = max(r["first_loss_rel"], r["last_loss_rel"]) <= args.tolerance
    errors = [r for r in results if "error" in r]
    results = [r for r in results if "error" not in r]
    if not args.json:
        cols = ["mode", "threads", "ms_per_step", "min_ms", "max_ms", "cpu_ms",
                "tokens_per_s", "peak_rss_mib", "first_step_s", "first_loss", "last_loss", "correct"]
        widths = [max(len(c), *(len(str(r[c])) for r in results)) for c in cols]
        print(f"PyTorch {results[0]['torch']} GPT small() ({results[0]['parameters']:,} parameters), "
              f"batch {args.batch} x {results[0]['seq']}, AdamW, {args.steps} timed steps")
        print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
        for r in results:
            print("  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths)))
        for r in errors:
            print(f"{r['mode']}: {r['error']}")
        print(f"(correct: first and last loss within {args.tolerance:g} of f32's, relative)")
        for r in results:
            if "profile_ms" in r:
                print(f"\nwhere a {r['mode']} step goes (ms per step, self time per op, torch.profiler):")
                for category, ms in sorted(r["profile_ms"].items(), key=lambda kv: -kv[1]):
                    print(f"  {category:<26} {ms:8.2f}")
    print(json.dumps({"benchmark": "gpt_train_pytorch", "cpu": cpu_model(), "torch": ref["torch"],
                      "tolerance": args.tolerance, "results": results, "left_out": errors}))


if __name__ == "__main__":
    main()
