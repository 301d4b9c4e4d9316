#!/usr/bin/env python3
"""tools/training_record.py on hand-made logs: steps and time to the target, the comparison at the
last shared step, the chart, and clear errors for logs it cannot time or read."""
import os
import subprocess
import sys
import tempfile

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                    "training_record.py")


def write(path, lines):
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in lines))


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def main():
    failures = []
    with tempfile.TemporaryDirectory() as d:
        p = lambda name: os.path.join(d, name)
        # fp32 reaches 1.6 at step 300, bf16 at 400; bf16's log times its own steps.
        write(p("a.eval"), ["100 2.0", "200 1.7", "300 1.59", "400 1.5"])
        write(p("b.eval"), ["100 2.1", "200 1.8", "300 1.65 12.5", "400 1.58"])  # old 3rd column
        write(p("b.losses"), [f"{s} 2.0 0 0.5" for s in range(1, 401)])
        write(p("c.losses"), ["1 2.0 0"])
        write(p("c.eval"), ["100 2.0"])
        r = run("--run", "fp32=" + p("a") + ":2", "--run", "bf16=" + p("b"), "--target", "1.6",
                "--svg", p("chart.svg"), "--markdown", p("table.md"))
        if r.returncode != 0:
            failures.append(f"exit {r.returncode}: {r.stderr}")
        table = r.stdout
        for expected in ["| fp32 | 300 | 10.0 min | 1.00x | 400 | 1.5000 |",
                         "| bf16 | 400 | 3.3 min | 0.33x | 400 | 1.5800 | 1.5800 (step 400) | +5.33% |",
                         "bf16: the step seconds its log recorded"]:
            if expected not in table:
                failures.append(f"the table lacks '{expected}':\n{table}")
        with open(p("chart.svg")) as f:
            svg = f.read()
        if svg.count("<polyline") != 4 or "training time (min)" not in svg:
            failures.append("the chart does not hold two panels of two curves")
        # A log without step seconds and no measured step time: a clear error, exit 2.
        r = run("--run", "c=" + p("c"), "--target", "1.6", "--svg", p("x.svg"))
        if r.returncode != 2 or "give the run's SECONDS_PER_STEP" not in r.stderr:
            failures.append(f"an untimed log: exit {r.returncode}, {r.stderr}")
        r = run("--run", "missing=" + p("none") + ":1", "--target", "1.6", "--svg", p("x.svg"))
        if r.returncode != 2 or "none.eval" not in r.stderr:
            failures.append(f"a missing log: exit {r.returncode}, {r.stderr}")
    for f in failures:
        print("FAIL:", f)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
