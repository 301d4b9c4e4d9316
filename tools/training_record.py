#!/usr/bin/env python3
"""A training record from `mixprec train gpt` logs: validation curves side by side (SVG) and the
steps and time each run took to reach a target loss (Markdown).

Usage:
  training_record.py --run NAME=PREFIX[:SECONDS_PER_STEP] ... --target 1.6 --svg F [--markdown F]

PREFIX.eval is the run's --log-eval file ("step loss" per line; a third column, written by older
builds, is ignored). SECONDS_PER_STEP is the run's step time measured side by side with the
others on one quiet machine: time-to-loss is steps x that, since runs that shared a busy machine
or were resumed on another one have wall clocks that do not compare. Without it, the seconds in
PREFIX.losses ("step loss skipped seconds", the column newer builds write) are summed, and the
record says so. The first run is the reference the others are compared with (same step).
Exit 0, or 2 on a usage mistake or an unreadable log.
"""
import argparse
import html
import sys

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]


def read_columns(path, count):
    """The lines of a step log as tuples of their first `count` numbers, by step."""
    rows = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < count:
                raise ValueError(f"{path}:{number}: expected {count} columns, got '{line.strip()}'")
            rows[int(fields[0])] = tuple(float(x) for x in fields[1:count])
    return rows


class Run:
    def __init__(self, spec):
        name, _, rest = spec.partition("=")
        prefix, sep, seconds = rest.rpartition(":")
        if not sep or not seconds.replace(".", "", 1).isdigit():
            prefix, seconds = rest, ""
        if not name or not prefix:
            raise ValueError(f"--run {spec}: expected NAME=PREFIX[:SECONDS_PER_STEP]")
        self.name = name
        self.evals = sorted((s, v[0]) for s, v in read_columns(prefix + ".eval", 2).items())
        if not self.evals:
            raise ValueError(f"{prefix}.eval holds no evaluation")
        self.step_seconds = float(seconds) if seconds else None
        self.logged_seconds = {}
        if self.step_seconds is None:
            total = 0.0
            with open(prefix + ".losses") as f:
                for line in f:
                    fields = line.split()
                    if len(fields) < 4:
                        raise ValueError(f"{prefix}.losses has lines without the step's seconds: "
                                         f"give the run's SECONDS_PER_STEP")
                    total += float(fields[3])
                    self.logged_seconds[int(fields[0])] = total

    def steps_to(self, target):
        return next((s for s, v in self.evals if v <= target), None)

    def seconds_at(self, step):
        if self.step_seconds is not None:
            return step * self.step_seconds
        return self.logged_seconds.get(step)

    def loss_at(self, step):
        return dict(self.evals).get(step)


def nice_step(span, ticks=5):
    """A round tick interval (1, 2, 2.5 or 5 times a power of ten) giving at most `ticks`."""
    power = 10 ** max(0, len(str(int(span))) - 2)
    for m in (1, 2, 2.5, 5, 10, 20, 25, 50, 100):
        if span / (m * power) <= ticks:
            return m * power
    return span


def svg_panel(runs, target, x_of, x_label, x0, width, height, low, high):
    """One chart at horizontal offset x0: validation loss against x_of(run, step)."""
    left, right, top, bottom = 64, 16, 24, 48
    span = max(x_of(r, s) for r in runs for s, _ in r.evals)
    x = lambda u: x0 + left + (width - left - right) * u / span
    y = lambda v: top + (height - top - bottom) * (high - min(v, high)) / (high - low)
    out = []
    for i in range(6):
        v = low + (high - low) * i / 5
        out.append(f'<line x1="{x0 + left}" x2="{x0 + width - right}" y1="{y(v):.1f}" '
                   f'y2="{y(v):.1f}" stroke="#ddd"/><text x="{x0 + left - 6}" y="{y(v) + 4:.1f}" '
                   f'text-anchor="end">{v:.2f}</text>')
    tick = nice_step(span)
    u = 0.0
    while u <= span * 1.0001:
        out.append(f'<text x="{x(u):.1f}" y="{height - bottom + 16}" '
                   f'text-anchor="middle">{u:g}</text>')
        u += tick
    out.append(f'<text x="{x0 + (left + width - right) / 2}" y="{height - 10}" '
               f'text-anchor="middle">{x_label}</text>')
    mid = (top + height - bottom) / 2
    out.append(f'<text x="{x0 + 16}" y="{mid}" text-anchor="middle" '
               f'transform="rotate(-90 {x0 + 16} {mid})">validation loss</text>')
    out.append(f'<line x1="{x0 + left}" x2="{x0 + width - right}" y1="{y(target):.1f}" '
               f'y2="{y(target):.1f}" stroke="#555" stroke-dasharray="5,4"/>')
    for i, r in enumerate(runs):
        points = " ".join(f"{x(x_of(r, s)):.1f},{y(v):.1f}" for s, v in r.evals)
        out.append(f'<polyline points="{points}" fill="none" '
                   f'stroke="{COLOURS[i % len(COLOURS)]}" stroke-width="2"/>')
    return out


def svg_chart(runs, target, panel=460, height=380):
    """Validation loss against steps (left) and against training time (right), with a legend."""
    losses = [v for r in runs for _, v in r.evals]
    low, high = min(min(losses), target) - 0.05, min(max(losses), 3.0) + 0.05
    legend = 150
    width = 2 * panel + legend
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    out += svg_panel(runs, target, lambda r, s: s, "optimizer step", 0, panel, height, low, high)
    out += svg_panel(runs, target, lambda r, s: r.seconds_at(s) / 60, "training time (min)",
                     panel, panel, height, low, high)
    for i, r in enumerate(runs):
        out.append(f'<text x="{2 * panel + 8}" y="{40 + 18 * i}" '
                   f'fill="{COLOURS[i % len(COLOURS)]}">{html.escape(r.name)}</text>')
    out.append(f'<text x="{2 * panel + 8}" y="{40 + 18 * len(runs) + 8}" fill="#555">'
               f'- - target {target:g}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def markdown(runs, target):
    ref = runs[0]
    lines = [f"| run | steps to {target:g} | time to {target:g} | vs {ref.name} | last step | "
             f"validation loss | at the last step {ref.name} reached too | vs {ref.name} there |",
             "|---|---|---|---|---|---|---|---|"]
    ref_steps = ref.steps_to(target)
    ref_time = ref.seconds_at(ref_steps) if ref_steps else None
    ref_losses = dict(ref.evals)
    for r in runs:
        steps = r.steps_to(target)
        seconds = r.seconds_at(steps) if steps else None
        last, loss = r.evals[-1]
        shared = max((s for s, _ in r.evals if s in ref_losses), default=None)
        there = r.loss_at(shared) if shared else None
        lines.append(
            f"| {r.name} | {steps if steps else 'not reached'} | "
            f"{f'{seconds / 60:.1f} min' if seconds is not None else '-'} | "
            f"{f'{seconds / ref_time:.2f}x' if seconds is not None and ref_time else '-'} | "
            f"{last} | {loss:.4f} | "
            f"{f'{there:.4f} (step {shared})' if shared else '-'} | "
            f"{f'{(there / ref_losses[shared] - 1) * 100:+.2f}%' if shared else '-'} |")
    how = [f"{r.name}: {r.step_seconds:.3f} s/step measured side by side" if r.step_seconds
           else f"{r.name}: the step seconds its log recorded" for r in runs]
    lines.append("")
    lines.append("Time to loss = steps x " + "; ".join(how) + ".")
    return "\n".join(lines) + "\n"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", required=True)
    parser.add_argument("--target", type=float, required=True)
    parser.add_argument("--svg", required=True)
    parser.add_argument("--markdown")
    args = parser.parse_args(argv)
    try:
        runs = [Run(spec) for spec in args.run]
    except (OSError, ValueError) as e:
        print(f"training_record.py: {e}", file=sys.stderr)
        return 2
    with open(args.svg, "w") as f:
        f.write(svg_chart(runs, args.target))
    table = markdown(runs, args.target)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
