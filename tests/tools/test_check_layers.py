#!/usr/bin/env python3
"""tools/check_layers.py on tiny fixture trees: it passes a tree that holds its order and fails,
naming file:line and both layers, a tree that does not (quoted, angle and relative includes),
an unknown layer, and a documented exception that no longer matches anything."""
import importlib.util
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tools", "check_layers.py")
failures = []
passed = 0


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def run(root, *options):
    r = subprocess.run([sys.executable, SCRIPT, *options, root], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def expect(name, ok, detail=""):
    global passed
    if ok:
        passed += 1
    else:
        failures.append(f"{name}: {detail}")


def clean_tree(root):
    write(root, "include/mixprec/core/tensor.h", "#pragma once\n")
    write(root, "include/mixprec/ops/linalg.h", '#pragma once\n#include "mixprec/core/tensor.h"\n')
    write(root, "src/ops/linalg.cpp", '#include "mixprec/ops/linalg.h"\n#include "op_util.h"\n')
    write(root, "src/ops/op_util.h", "#pragma once\n#include <vector>\n")
    write(root, "apps/main.cpp", '#include "mixprec/ops/linalg.h"\n#include "commands.h"\n')
    write(root, "apps/commands.h", "#pragma once\n")
    # the Python bindings sit at the apps level
    write(root, "python/src/module.cpp", '#include "mixprec/ops/linalg.h"\n#include "bindings.h"\n')
    write(root, "python/src/bindings.h", "#pragma once\n")
    # tests and bench may include anything
    write(root, "tests/core/test_x.cpp", '#include "mixprec/ops/linalg.h"\n')


with tempfile.TemporaryDirectory() as tmp:
    root = os.path.join(tmp, "clean")
    clean_tree(root)
    code, out = run(root, "--no-exceptions")
    expect("clean tree passes", code == 0, f"exit {code}: {out}")

    root = os.path.join(tmp, "upward")
    clean_tree(root)
    write(root, "include/mixprec/core/dtype.h",
          '#pragma once\n// a comment\n#include "mixprec/ops/linalg.h"\n')
    code, out = run(root, "--no-exceptions")
    expect("an upward include fails", code == 1, f"exit {code}: {out}")
    expect("the message names file:line and both layers",
           "include/mixprec/core/dtype.h:3: layer 'core' includes \"mixprec/ops/linalg.h\" "
           "of the higher layer 'ops'" in out, out)

    root = os.path.join(tmp, "angle")
    clean_tree(root)
    write(root, "src/core/tensor.cpp", "#include <mixprec/ops/linalg.h>\n")
    code, out = run(root, "--no-exceptions")
    expect("an angle-bracket upward include fails",
           code == 1 and "src/core/tensor.cpp:1: layer 'core'" in out, f"exit {code}: {out}")

    root = os.path.join(tmp, "relative")
    clean_tree(root)
    write(root, "src/core/tensor.cpp", '#include "../ops/op_util.h"\n')
    code, out = run(root, "--no-exceptions")
    expect("a relative upward include fails",
           code == 1 and "src/core/tensor.cpp:1: layer 'core' includes \"../ops/op_util.h\" "
           "of the higher layer 'ops'" in out, f"exit {code}: {out}")

    root = os.path.join(tmp, "bindings")
    clean_tree(root)
    write(root, "src/ops/linalg.cpp", '#include "../../python/src/bindings.h"\n')
    code, out = run(root, "--no-exceptions")
    expect("a library file including the Python bindings fails",
           code == 1 and "src/ops/linalg.cpp:1: layer 'ops' includes" in out
           and "of the higher layer 'apps'" in out, f"exit {code}: {out}")

    root = os.path.join(tmp, "unknown")
    clean_tree(root)
    write(root, "include/mixprec/gizmos/g.h", "#pragma once\n")
    code, out = run(root, "--no-exceptions")
    expect("an unknown layer fails",
           code == 2 and "include/mixprec/gizmos/g.h: unknown layer 'gizmos'" in out,
           f"exit {code}: {out}")

# The exception list, through the module: a matching exception lets an include pass, one that
# matches nothing is reported stale.
spec = importlib.util.spec_from_file_location("check_layers", SCRIPT)
check_layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_layers)
with tempfile.TemporaryDirectory() as tmp:
    clean_tree(tmp)
    write(tmp, "src/core/tensor.cpp", '#include "mixprec/ops/linalg.h"\n')
    check_layers.EXCEPTIONS = [("src/core/*.cpp", "mixprec/ops/linalg.h", "fixture")]
    violations, unknown, stale = check_layers.scan(tmp)
    expect("a documented exception passes", not violations and not unknown and not stale,
           f"{violations} {unknown} {stale}")
    os.remove(os.path.join(tmp, "src/core/tensor.cpp"))
    violations, unknown, stale = check_layers.scan(tmp)
    expect("a stale exception is reported", len(stale) == 1 and "matches no include" in stale[0],
           f"{stale}")

# The real tree holds (the same check `make test` runs first).
code, out = run(os.path.join(HERE, "..", ".."))
expect("the repository holds its layers", code == 0, out)

for f in failures:
    print("FAIL", f)
print(f"check_layers test: {passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
