#!/usr/bin/env python3
"""Compares two `mixprec train gpt --log-losses` files step by step.

Usage: compare_losses.py A B TOLERANCE MIN_STEPS
Every step both files hold must have losses within TOLERANCE of each other (relative) and the
same skipped flag; at least MIN_STEPS steps must be shared. Exit 0 when they match, 1 otherwise.
"""
import sys


def read(path):
    steps = {}
    with open(path) as f:
        for line in f:
            step, loss, skipped = line.split()[:3]  # then the step's seconds
            steps[int(step)] = (float(loss), int(skipped))
    return steps


def main():
    a_path, b_path, tolerance, min_steps = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    a, b = read(a_path), read(b_path)
    shared = sorted(set(a) & set(b))
    failures = 0
    worst = 0.0
    for step in shared:
        (la, sa), (lb, sb) = a[step], b[step]
        rel = abs(la / lb - 1)
        worst = max(worst, rel)
        if rel > tolerance or sa != sb:
            print(f"step {step}: {la:.9g} (skipped {sa}) vs {lb:.9g} (skipped {sb}): "
                  f"relative difference {rel:.2e} > {tolerance:g}")
            failures += 1
    print(f"{len(shared)} shared steps, worst relative difference {worst:.2e}")
    if len(shared) < min_steps:
        print(f"fewer than {min_steps} shared steps")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
