#!/usr/bin/env bash
# Coverage-guided fuzzing of the safetensors parser with libFuzzer + ASan + UBSan, for a
# bounded time. Builds its own small clang build (the parser's sources only) beside any gcc
# build, starts from the seeds here plus the corpus kept from earlier runs, and fails (exit 1)
# if the fuzzer finds a crash, a leak or a timeout; the input that did it is saved in the
# build folder as crash-*/leak-*/timeout-*. Without clang's libFuzzer it says so and exits 0.
#
#   tests/fuzz/run.sh [SECONDS]        default 60; MIXPREC_FUZZ_BUILD picks the build folder
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
build=${MIXPREC_FUZZ_BUILD:-build-fuzz}

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found; skipped (apt-get install clang libclang-rt-14-dev)"
  exit 0
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cpp"
if ! clang++ -fsanitize=fuzzer,address "$probe/p.cpp" -o "$probe/p" >/dev/null 2>&1; then
  echo "fuzz: clang++ cannot link -fsanitize=fuzzer; skipped (apt-get install libclang-rt-14-dev)"
  exit 0
fi

cmake -S tests/fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$build"
mkdir -p "$build/corpus"
echo "fuzz: safetensors_fuzzer for ${seconds}s"
if "$build/safetensors_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=8192 -dict=tests/fuzz/safetensors.dict -artifact_prefix="$build/" \
    -print_final_stats=1 "$build/corpus" tests/fuzz/seeds >"$build/fuzz.log" 2>&1; then
  grep -E '^stat::(number_of_executed_units|peak_rss_mb|new_units_added)' "$build/fuzz.log" || true
  echo "fuzz: no crash in ${seconds}s (log: $build/fuzz.log)"
else
  status=$?
  tail -n 60 "$build/fuzz.log"
  echo "fuzz: FAILED (exit $status); the input is saved as $build/crash-* / leak-* / timeout-*"
  exit 1
fi
