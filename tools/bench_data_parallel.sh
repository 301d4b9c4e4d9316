#!/bin/sh
# Data-parallel training on this machine (issue #20, docs/DISTRIBUTED.md): the same GPT trained
#   A) alone, 1 thread, batch B            (what one rank does)
#   B) on 2 ranks x 1 thread, batch B each  (global batch 2B; gradients all-reduced behind backward)
#   C) as B with --no-overlap               (the all-reduce after backward: all of it exposed)
# side by side in one run, then the scaling efficiency B / (2 x A) in tokens/s and the share of
# the all-reduce hidden behind backward, 1 - exposed(B) / exposed(C), from the per-rank summaries.
# Usage: tools/bench_data_parallel.sh [MIXPREC] [STEPS] [extra train gpt options...]
set -eu
mixprec=${1:-build/mixprec}
steps=${2:-20}
[ $# -ge 2 ] && shift 2 || shift $#
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Shared memory with CMA single copies (the default; 15x faster here than without):
# a container without ptrace rights needs OMPI_MCA_btl_vader_single_copy_mechanism=none.
export MIXPREC_NUM_THREADS=1
batch=4
context=128
gpt="train gpt --layers 4 --d-model 256 --heads 4 --context $context --precision bf16 --steps $steps
  --warmup 5 --eval-every 0 --eval-batches 1 --sample-tokens 0 --checkpoint-every 1000000 $*"
# tokens/s of a run from its final line ("... | 3.2 it/s | took 00:06") and the global batch
rate() { sed -n 's/.*| \([0-9.]*\) it\/s | took.*/\1/p' "$1" | tail -1; }
exposed() { sed -n 's/.*rank \([0-9]\): \([0-9.]*\) s of steps, [0-9.]* s computing, \([0-9.]*\) s in all-reduce.*/\3/p' "$1" | paste -sd+ | bc -l; }
# shellcheck disable=SC2086
"$mixprec" $gpt --batch $batch --out "$out/a" > "$out/a.log" 2>&1
# shellcheck disable=SC2086
mpirun -np 2 --oversubscribe --bind-to core "$mixprec" $gpt --batch $batch --out "$out/b" > "$out/b.log" 2>&1
# shellcheck disable=SC2086
mpirun -np 2 --oversubscribe --bind-to core "$mixprec" $gpt --batch $batch --no-overlap --out "$out/c" > "$out/c.log" 2>&1
grep -h "parameters" "$out/a.log" | head -1
grep -h "rank [01]:" "$out/b.log" "$out/c.log"
a=$(rate "$out/a.log"); b=$(rate "$out/b.log"); c=$(rate "$out/c.log")
ea=$(exposed "$out/b.log"); ec=$(exposed "$out/c.log")
printf 'alone, 1 thread, batch %d:           %8.1f tokens/s\n' $batch "$(echo "$a * $batch * $context" | bc -l)"
printf '2 ranks x 1 thread, overlapped:      %8.1f tokens/s, efficiency %.1f%%\n' \
  "$(echo "$b * 2 * $batch * $context" | bc -l)" "$(echo "100 * $b / $a" | bc -l)"
printf '2 ranks x 1 thread, after backward:  %8.1f tokens/s, efficiency %.1f%%\n' \
  "$(echo "$c * 2 * $batch * $context" | bc -l)" "$(echo "100 * $c / $a" | bc -l)"
printf 'all-reduce exposed (sum of ranks): %.3f s overlapped, %.3f s after backward: %.0f%% hidden\n' \
  "$ea" "$ec" "$(echo "100 * (1 - $ea / $ec)" | bc -l)"
