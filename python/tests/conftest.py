# The suite runs against whichever `mixprec` is importable: the build tree's (PYTHONPATH set by
# the python.pytest CTest entry) or an installed one (`pip install .`). It says which, so a
# stale install can never pass for the code under test.
import mixprec


def pytest_report_header(config):
    return f"mixprec from {mixprec.__file__} (kernel level {mixprec.kernel_level()})"
