#!/bin/sh
# Run by `mpirun -np 2` (CTest dist.rank_death_ends_the_job): every rank starts the same long
# `mixprec train gpt`; rank 1's is killed with SIGKILL a few seconds in, as if the node ran out of
# memory. mpirun must then end the job (rank 0 waits in an all-reduce that will never complete)
# rather than hang; CTest's timeout fails the test if it does not.
# Usage: rank_death.sh MIXPREC OUT
mixprec=$1
out=$2
"$mixprec" train gpt --layers 1 --d-model 32 --heads 4 --context 16 --batch 2 --steps 100000 \
  --eval-every 0 --eval-batches 1 --sample-tokens 0 --out "$out" --overwrite &
pid=$!
if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then
  sleep 4
  kill -9 "$pid"
fi
wait "$pid"
