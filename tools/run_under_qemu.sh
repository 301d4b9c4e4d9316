#!/usr/bin/env bash
# One test suite under qemu-user's emulated CPU, for `make test-haswell`:
#   tools/run_under_qemu.sh SUITE CPU FILTER BUILD
# A test failure fails at once. A run killed by a signal is run once more, and fails if it dies
# again: qemu-user 7.2 died once (SIGSEGV) in test_kernels in session 10, in a run whose every
# test passed in eight other runs under qemu, natively and under ASan.
set -u
suite=$1 cpu=$2 filter=$3 build=$4
run() {
  qemu-x86_64 -cpu "$cpu" "$build/tests/test_$suite" --gtest_brief=1 --gtest_filter="$filter"
}
run
rc=$?
if [ "$rc" -gt 128 ]; then
  echo "test_$suite: killed by signal $((rc - 128)) under qemu; running it once more"
  run
  rc=$?
fi
exit "$rc"
