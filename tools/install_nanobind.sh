#!/usr/bin/env bash
# Makes sure nanobind (the Python bindings' C++ library, PyPI only: Debian 12 has no package)
# is importable by the Python that builds the bindings ($1, default Debian's /usr/bin/python3).
# As root it installs it with that Python's pip; --break-system-packages because Debian marks
# its Python as externally managed, and nanobind is a build-time header/CMake package that
# touches nothing else. Never fails the build: without nanobind the extension is not built and
# CTest reports python.pytest as SKIPPED.
set -uo pipefail
python="${1:-/usr/bin/python3}"
"$python" -c "import nanobind" 2>/dev/null && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "mixprec: nanobind missing: the Python bindings will be skipped; install it with:" >&2
  echo "mixprec:   $python -m pip install --break-system-packages 'nanobind>=2.4'" >&2
  exit 0
fi
echo "mixprec: installing nanobind for $python (pip)" >&2
if ! "$python" -m pip install -q --break-system-packages --no-warn-script-location \
    'nanobind>=2.4' >&2; then
  echo "mixprec: could not install nanobind: the Python bindings will be skipped" >&2
fi
exit 0
