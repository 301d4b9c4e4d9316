#!/usr/bin/env bash
# `mixprec stream produce --connect|--bind` and `mixprec stream run --zmq` together, as separate
# processes over loopback TCP and IPC (issue #13): every frame sent is processed exactly once,
# the counters balance, the peaks and F1 equal those of the same frames read from a file, a
# worker that drops under overload counts every frame, and bad input (malformed messages,
# frames of another detector, a producer that never comes) is counted, not fatal.
#
#   stream_zmq.sh CASE MIXPREC WORKDIR [ZMQ_BAD_PEER]
#
# CTest registers one test per case (tests/CMakeLists.txt, cli.stream_zmq_*). A case prints what
# failed and exits 1 (77: skipped).
set -uo pipefail

case_name=$1
mixprec=$2
work=$3
bad_peer=${4:-}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
export MIXPREC_NUM_THREADS=1

fail() {
  echo "FAIL ($case_name): $*" >&2
  for f in *.out *.err; do [[ -s $f ]] && { echo "--- $f:" >&2; tail -n 15 "$f" >&2; }; done
  exit 1
}

# The value of a top-level JSON field in a summary line.
field() { grep -oE "\"$2\": [^,}]+" "$1" | head -1 | sed -E 's/^"[^"]+": //'; }
expect_field() {
  local got
  got=$(field "$1" "$2")
  [[ $got == "$3" ]] || fail "$1: \"$2\" is '$got', expected '$3'"
}

# Waits (up to 20 s) for a consumer that binds to write its endpoint.
wait_for_file() {
  for _ in $(seq 200); do [[ -s $1 ]] && return 0; sleep 0.1; done
  fail "no endpoint file $1"
}

frames=24
make_file() {  # the same frames as the producer sends, with their ground truth
  "$mixprec" stream produce --synthetic --output frames.h5 --frames $frames --detector single \
    --seed 5 >produce_file.out 2>produce_file.err || fail "stream produce --output failed"
  "$mixprec" stream run --input frames.h5 --output file.cxi >file.out 2>file.err ||
    fail "stream run --input failed"
}

# A consumer binding ENDPOINT in the background; its pid in $consumer.
start_consumer() {
  local name=$1 endpoint=$2
  shift 2
  "$mixprec" stream run --zmq "$endpoint" --zmq-bind --geometry frames.h5 --output "$name.cxi" \
    --idle-timeout 20 "$@" >"$name.out" 2>"$name.err" &
  consumer=$!
}

check_same_as_file() {  # a consumer's summary against the file run's
  local out=$1
  expect_field "$out" source '"zmq"'
  expect_field "$out" malformed_messages 0
  expect_field "$out" in_flight 0
  for f in received processed peaks f1 true_positives false_positives; do
    expect_field "$out" $f "$(field file.out $f)"
  done
  [[ $(field "$out" processed) == "$frames" ]] || fail "$out: not every frame was processed"
}

case $case_name in
  tcp)
    # The consumer binds a free loopback port and writes it; the producer connects to it.
    make_file
    start_consumer tcp 'tcp://127.0.0.1:*' --endpoint-file endpoint --batch 4
    wait_for_file endpoint
    "$mixprec" stream produce --synthetic --frames $frames --detector single --seed 5 \
      --connect "$(cat endpoint)" >producer.out 2>producer.err || fail "stream produce --connect failed"
    grep -q "sent $frames frames of single" producer.out || fail "producer did not report $frames frames sent"
    wait $consumer || fail "stream run --zmq exited $?"
    check_same_as_file tcp.out
    expect_field tcp.out end_messages 1
    expect_field tcp.out frames_announced $frames
    expect_field tcp.out idle_timeout false
    ;;
  f32_wire)
    # f32 samples on the wire, the producer binding IPC and the consumer connecting: the same
    # peaks as u16 (every ADU value is exact in f32).
    make_file
    "$mixprec" stream produce --synthetic --frames $frames --detector single --seed 5 \
      --bind "ipc://$work/frames.ipc" --sample-type f32 >producer.out 2>producer.err &
    producer=$!
    "$mixprec" stream run --zmq "ipc://$work/frames.ipc" --geometry frames.h5 --output f32.cxi \
      --idle-timeout 20 >f32.out 2>f32.err || fail "stream run --zmq exited $?"
    wait $producer || fail "stream produce --bind exited $?"
    grep -q "(1 x 352 x 384 f32)" producer.out || fail "producer did not send f32"
    check_same_as_file f32.out
    ;;
  serve)
    # `stream serve --bind`: the long-running worker (stream run on a bound socket), the
    # producer connecting to it; the same peaks as the file.
    make_file
    "$mixprec" stream serve --bind 'tcp://127.0.0.1:*' --endpoint-file endpoint --geometry frames.h5 \
      --output serve.cxi --idle-timeout 20 --batch 4 >serve.out 2>serve.err &
    consumer=$!
    wait_for_file endpoint
    "$mixprec" stream produce --synthetic --frames $frames --detector single --seed 5 \
      --connect "$(cat endpoint)" >producer.out 2>producer.err || fail "stream produce --connect failed"
    wait $consumer || fail "stream serve exited $?"
    check_same_as_file serve.out
    expect_field serve.out end_messages 1
    ;;
  two_workers)
    # One producer, two workers: PUSH deals the frames round-robin; each frame is processed by
    # exactly one worker (the CXI files' frameIndex together hold every frame once).
    make_file
    start_consumer a "ipc://$work/a.ipc" --idle-timeout 5
    pid_a=$consumer
    start_consumer b "ipc://$work/b.ipc" --idle-timeout 5
    pid_b=$consumer
    "$mixprec" stream produce --synthetic --frames $frames --detector single --seed 5 --ends 2 \
      --connect "ipc://$work/a.ipc,ipc://$work/b.ipc" >producer.out 2>producer.err ||
      fail "stream produce --connect (two endpoints) failed"
    wait $pid_a || fail "worker a exited $?"
    wait $pid_b || fail "worker b exited $?"
    pa=$(field a.out processed)
    pb=$(field b.out processed)
    ((pa > 0 && pb > 0)) || fail "a worker got no frames (a: $pa, b: $pb)"
    ((pa + pb == frames)) || fail "workers processed $pa + $pb frames, expected $frames"
    for w in a b; do
      expect_field $w.out in_flight 0
      expect_field $w.out dropped 0
      expect_field $w.out malformed_messages 0
    done
    py=/usr/bin/python3
    if [[ -x $py ]] && $py -c 'import h5py' 2>/dev/null; then
      $py - a.cxi b.cxi $frames <<'PY' || fail "frameIndex check failed"
import sys, h5py
seen = []
for path in sys.argv[1:3]:
    with h5py.File(path, "r") as f:
        seen += [int(i) for i in f["/entry_1/result_1/frameIndex"][:]]
n = int(sys.argv[3])
assert sorted(seen) == list(range(n)), f"frame indices {sorted(seen)} are not 0..{n - 1} once each"
print(f"frameIndex: {n} frames, each once")
PY
    else
      echo "h5py missing: the frameIndex union is not checked (the counts are)"
    fi
    ;;
  overload_drop)
    # A producer faster than the worker (the file's frames cycled at 4000 frames/s) into a worker
    # that drops rather than hold the producer back: frames are dropped and counted, none is
    # lost in transport (received = what the producer announced), the counters balance.
    make_file
    start_consumer drop 'tcp://127.0.0.1:*' --endpoint-file endpoint --overload drop --queue 2 --batch 1
    wait_for_file endpoint
    "$mixprec" stream produce --input frames.h5 --frames 240 --rate 4000 --connect "$(cat endpoint)" \
      >producer.out 2>producer.err || fail "stream produce --input failed"
    wait $consumer || fail "stream run --zmq --overload drop exited $?"
    expect_field drop.out received 240
    expect_field drop.out frames_announced 240
    expect_field drop.out in_flight 0
    processed=$(field drop.out processed)
    dropped=$(field drop.out dropped)
    ((dropped > 0)) || fail "nothing was dropped at 4000 frames/s into a queue of 2"
    ((processed + dropped == 240)) || fail "processed $processed + dropped $dropped != 240"
    # Frames 24.. of the cycled file are past the ground truth by index: unscored, not misscored.
    ((processed - $(field drop.out unscored_frames) <= frames)) || fail "frames past the truth were scored"
    ;;
  bad_frames)
    # Frames of another detector are counted and reported, never fatal; then a consumer whose
    # producer never comes ends at its idle timeout with an empty, complete CXI file.
    make_file
    start_consumer bad 'tcp://127.0.0.1:*' --endpoint-file endpoint --idle-timeout 20
    wait_for_file endpoint
    "$mixprec" stream produce --synthetic --frames 3 --detector quad --seed 1 \
      --connect "$(cat endpoint)" >producer.out 2>producer.err || fail "stream produce failed"
    wait $consumer || fail "stream run --zmq exited $? on frames of another detector"
    expect_field bad.out wrong_shape_frames 3
    expect_field bad.out received 0
    expect_field bad.out end_messages 1
    grep -q "discarded message 1: frame 0 has shape \[4, 352, 384\], the detector single is \[1, 352, 384\]" bad.err ||
      fail "the wrong shape was not reported"
    "$mixprec" stream run --zmq "ipc://$work/nobody.ipc" --detector single --output idle.cxi \
      --idle-timeout 0.5 >idle.out 2>idle.err || fail "an idle consumer exited $?"
    expect_field idle.out idle_timeout true
    expect_field idle.out processed 0
    [[ -f idle.cxi ]] || fail "the idle consumer wrote no CXI file"
    ;;
  bad_messages)
    # A raw peer sends five malformed messages, then good frames and an end: each bad one is
    # counted and the first five reported with their reason; the good frames are processed.
    [[ -x $bad_peer ]] || fail "no zmq_bad_peer tool given"
    "$mixprec" stream run --zmq 'tcp://127.0.0.1:*' --zmq-bind --endpoint-file endpoint \
      --detector single --output bad.cxi --idle-timeout 20 >bad.out 2>bad.err &
    consumer=$!
    wait_for_file endpoint
    "$bad_peer" "$(cat endpoint)" 1 352 384 3 >peer.out 2>peer.err || fail "zmq_bad_peer failed"
    wait $consumer || fail "stream run --zmq exited $? on malformed messages"
    expect_field bad.out malformed_messages 5
    expect_field bad.out received 3
    expect_field bad.out processed 3
    expect_field bad.out end_messages 1
    expect_field bad.out frames_announced 3
    for reason in "discarded message 1: \[frame message\] header is 12 bytes" \
                  "discarded message 2: .*0 parts after the header" \
                  "discarded message 3: .*270335 data bytes, its header declares 270336" \
                  "discarded message 4: .*2 parts after the header" \
                  "discarded message 5: .*version 2, expected 1.*further ones only counted"; do
      grep -qE -- "$reason" bad.err || fail "stderr does not report '$reason'"
    done
    ;;
  *)
    echo "unknown case $case_name" >&2
    exit 2
    ;;
esac
echo "stream_zmq $case_name: passed"
