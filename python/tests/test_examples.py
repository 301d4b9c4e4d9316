"""python/examples/ run as users run them (a few steps each)."""
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_the_gpt_port_trains_in_mixed_precision():
    script = os.path.join(ROOT, "python", "examples", "train_gpt.py")
    with open(script) as f:
        code = f.read()
    # The port stays short: the loop from the data to the sample, as docs/PYTHON.md says.
    body = code[code.index("steps = "):]
    assert len([line for line in body.splitlines() if line.strip()]) <= 25
    done = subprocess.run([sys.executable, script, "30", os.path.join(ROOT, "data", "shakespeare.txt")],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, MIXPREC_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr
    losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", done.stdout)]
    assert len(losses) == 2  # steps 0 and 29
    assert abs(losses[0] - 5.545) < 0.3  # ln(256): an untrained byte model
    assert losses[1] < losses[0] - 1.0, losses  # it learns the byte statistics
    assert done.stdout.splitlines()[-1].startswith("ROMEO:") or "ROMEO:" in done.stdout


def test_the_port_in_the_docs_is_the_example():
    with open(os.path.join(ROOT, "docs", "PYTHON.md"), encoding="utf-8") as f:
        docs = f.read()
    block = docs.split("**The 25-line GPT port**")[1].split("```python\n")[1].split("```")[0]
    with open(os.path.join(ROOT, "python", "examples", "train_gpt.py")) as f:
        script = f.read()
    for line in block.splitlines():
        assert line in script, line
