"""The Python examples of README.md and docs/PYTHON.md run as written (docs stay true)."""
import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def python_blocks(relative):
    with open(os.path.join(ROOT, relative), encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


@pytest.mark.parametrize("relative, index", [("README.md", 0), ("docs/PYTHON.md", 0)])
def test_example_runs(relative, index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the README example writes net.safetensors
    scope = {}
    exec(compile(python_blocks(relative)[index], f"{relative} example {index}", "exec"), scope)
    assert scope["loss"].item() < 0.1  # both examples train a small classifier
