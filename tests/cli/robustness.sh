#!/usr/bin/env bash
# The command line used carelessly or hostilely (issue 17: "runs you can trust"): each case
# replays a mistake or an accident and checks that no work is lost, nothing is silently wrong,
# every message names what it is about, and nothing is left behind.
#
#   robustness.sh CASE MIXPREC IO_TEST_TOOL WORKDIR
#
# CTest registers one test per case (tests/CMakeLists.txt, cli_robust.*). A case prints what
# failed and exits 1; WORKDIR is its own scratch folder, emptied first.
set -uo pipefail

case_name=$1
mixprec=$2
io_tool=$3
work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

# A GPT that trains in milliseconds per step.
tiny_gpt=(train gpt --layers 1 --d-model 32 --heads 1 --context 16 --batch 2 --warmup 1
          --eval-batches 1 --sample-tokens 0 --precision fp16)
tiny_video=(video train --batch 2 --size 32 --warmup 1 --checkpoint-every 1 --precision bf16)

fail() {
  echo "FAIL ($case_name): $*" >&2
  for f in out err; do [[ -s $f ]] && { echo "--- $f:" >&2; tail -n 20 "$f" >&2; }; done
  exit 1
}

# run EXPECTED_STATUS ARGS...: runs mixprec, stdout to ./out and stderr to ./err.
run() {
  local want=$1
  shift
  "$mixprec" "$@" >out 2>err
  local got=$?
  [[ $got == "$want" ]] || fail "mixprec $* exited $got, expected $want"
}

expect_err() { grep -qE -- "$1" err || fail "stderr does not match '$1'"; }
expect_out() { grep -qE -- "$1" out || fail "stdout does not match '$1'"; }
# No raw C++ exception text reaches the user.
expect_clear_err() {
  if grep -qE 'map::at|stoll|stoull|stoi|basic_string|vector::_M|std::' err; then
    fail "raw C++ exception text on stderr"
  fi
}
same_file() { cmp -s "$1" "$2" || fail "$1 and $2 differ"; }
no_temporaries() {
  local left
  left=$(find "${1:-.}" -name '.*.tmp-*' 2>/dev/null)
  [[ -z $left ]] || fail "temporary files left behind: $left"
}

# wait_for PATH [REGEX]: until PATH exists (and has a line matching REGEX), at most a minute.
wait_for() {
  local i
  for ((i = 0; i < 1200; ++i)); do
    [[ -e $1 ]] && { [[ -z ${2:-} ]] || grep -qE -- "$2" "$1"; } && return 0
    sleep 0.05
  done
  fail "$1 never appeared${2:+ with '$2'}"
}

case $case_name in

# 1. A run directory that holds a run is not overwritten without --overwrite.
overwrite_refused)
  run 0 "${tiny_gpt[@]}" --steps 2 --out gpt
  cp gpt/checkpoint.safetensors before.safetensors
  run 2 "${tiny_gpt[@]}" --steps 2 --out gpt
  expect_err "already holds a run.*--resume.*--overwrite"
  same_file gpt/checkpoint.safetensors before.safetensors
  run 0 "${tiny_gpt[@]}" --steps 2 --out gpt --overwrite
  run 0 "${tiny_video[@]}" --steps 1 --out video
  run 2 "${tiny_video[@]}" --steps 1 --out video
  expect_err "already holds a run.*--resume.*--overwrite"
  ;;

# 2. A diverged run keeps the last good checkpoint and exits non-zero with a summary.
divergence)
  run 0 "${tiny_gpt[@]}" --steps 4 --checkpoint-every 2 --out gpt
  cp gpt/checkpoint.safetensors good.safetensors
  run 1 "${tiny_gpt[@]}" --steps 100 --checkpoint-every 2 --out gpt --resume --lr 30 --override \
    --fallback-after 0
  expect_err "diverged at step [0-9]+: .*skipped [0-9]+ steps in a row"
  expect_err "still holds the last good state \(step 4\)"
  same_file gpt/checkpoint.safetensors good.safetensors
  # With the fallback (the default) the overflowing f16 run switches to bf16 first, and
  # diverges there: still nothing saved after the good state.
  run 1 "${tiny_gpt[@]}" --steps 100 --checkpoint-every 2 --out gpt --resume --lr 30 --override
  expect_err "falling back from fp16 to bf16"
  expect_err "diverged at step [0-9]+"
  expect_err "still holds the last good state \(step 4\)"
  same_file gpt/checkpoint.safetensors good.safetensors
  run 1 "${tiny_gpt[@]}" --steps 200 --precision bf16 --lr 30 --out bf16
  expect_err "diverged at step [0-9]+: the smoothed loss exploded"
  [[ ! -e bf16/checkpoint.safetensors ]] || fail "a diverged run saved a checkpoint"
  ;;

# 3. Everything that can be checked is checked before step 1.
preconditions)
  printf 'To be, or not to be.%.0s\n' {1..100} >small.txt  # 2,100 bytes: 210 validate
  run 2 "${tiny_gpt[@]}" --steps 5 --corpus small.txt --context 512 --out gpt
  expect_err "validation split of small.txt has [0-9]+ tokens, fewer than one --context window"
  [[ ! -e gpt ]] || fail "a refused run created its --out"
  echo file >not_a_dir
  run 1 "${tiny_gpt[@]}" --steps 5 --out not_a_dir/run
  expect_err "cannot create --out not_a_dir/run"
  grep -q 'train gpt \[' err && fail "training started before --out was checked"
  run 2 "${tiny_gpt[@]}" --steps 5 --out gpt --prompt '' --sample-tokens 4
  expect_err "--prompt must not be empty"
  run 1 "${tiny_gpt[@]}" --steps 5 --out gpt --corpus .
  expect_err ": is a directory"
  run 1 "${tiny_gpt[@]}" --steps 5 --out never --resume
  [[ ! -e never ]] || fail "a failing --resume created its --out"
  ;;

# 4 and 14. The first SIGINT/SIGTERM saves a checkpoint and stops (128 + signal); the run then
# resumes to the same bits as an uninterrupted one; no temporary is left.
signal_saves_and_resumes)
  "$mixprec" "${tiny_gpt[@]}" --steps 600 --checkpoint-every 100000 --eval-every 0 \
    --out gpt >out 2>err &
  pid=$!
  wait_for err 'train gpt \['  # in the training loop
  kill -INT $pid
  wait $pid
  status=$?
  [[ $status == 130 ]] || fail "stopped by SIGINT: exit $status, expected 130"
  expect_err "stopped by signal 2 after step [0-9]+, saved in gpt/checkpoint.safetensors"
  [[ -e gpt/checkpoint.safetensors ]] || fail "no checkpoint after SIGINT"
  no_temporaries gpt
  run 0 "${tiny_gpt[@]}" --steps 600 --checkpoint-every 100000 --eval-every 0 --out gpt --resume
  resumed_loss=$(grep -o 'final train loss [0-9.]*' out)
  run 0 "${tiny_gpt[@]}" --steps 600 --checkpoint-every 100000 --eval-every 0 --out straight
  same_file gpt/checkpoint.safetensors straight/checkpoint.safetensors
  [[ $(grep -o 'final train loss [0-9.]*' out) == "$resumed_loss" ]] ||
    fail "the smoothed loss differs after a resume"
  # A second signal ends the process at once, temporaries removed. (If both arrive before the
  # handler runs they count as one, and the run stops as above: the same status, no leftovers.)
  "$mixprec" "${tiny_gpt[@]}" --steps 100000 --checkpoint-every 1 --out twice >out 2>err &
  pid=$!
  wait_for twice/checkpoint.safetensors
  kill -TERM $pid
  kill -TERM $pid
  wait $pid
  status=$?
  [[ $status == 143 ]] || fail "two SIGTERMs: exit $status, expected 143"
  no_temporaries twice
  "$io_tool" dump twice/checkpoint.safetensors >/dev/null || fail "checkpoint unreadable"
  ;;

# 5. --resume refuses settings that differ from the checkpoint's unless --override.
resume_settings)
  run 0 "${tiny_gpt[@]}" --steps 2 --out gpt
  for changed in "--seed 1" "--batch 3" "--precision bf16" "--context 8" "--heads 2"; do
    # shellcheck disable=SC2086
    run 2 "${tiny_gpt[@]}" --steps 3 --out gpt --resume $changed
    expect_err "settings that differ .*${changed%% *} .*the checkpoint has"
  done
  run 0 "${tiny_gpt[@]}" --steps 3 --out gpt --resume --seed 1 --override
  expect_err "warning: --override"
  run 0 "${tiny_video[@]}" --steps 1 --out video
  for changed in "--prediction eps" "--size 16" "--context-noise 0.3"; do
    # shellcheck disable=SC2086
    run 2 "${tiny_video[@]}" --steps 2 --out video --resume $changed
    expect_err "settings that differ .*${changed%% *} "
  done
  # A fine-tuning run resumes with the same --init, and only with it.
  run 0 "${tiny_video[@]}" --steps 1 --out tuned --init video/model.safetensors
  run 0 "${tiny_video[@]}" --steps 2 --out tuned --init video/model.safetensors --resume
  expect_err "resuming .* at step 1"
  run 2 "${tiny_video[@]}" --steps 3 --out tuned --resume
  expect_err "settings that differ .*init"
  ;;

# 6. Resuming a finished run says so, without figures of zero steps.
already_finished)
  run 0 "${tiny_gpt[@]}" --steps 2 --out gpt
  run 0 "${tiny_gpt[@]}" --steps 2 --out gpt --resume
  expect_out "already at step 2 of --steps 2"
  grep -qE "final train loss|it/s" out err && fail "figures printed for a run that did nothing"
  ;;

# 7. video generate --json is valid JSON when no frame is timed: null, and why.
generate_json_without_timed_frames)
  run 0 "${tiny_video[@]}" --steps 1 --out video
  for frames in 1 2; do
    "$mixprec" video generate --checkpoint video/model.safetensors --frames $frames --steps 1 \
      --out '' --json >out 2>err
    grep -qiE 'nan|inf[^o]' out && fail "NaN or inf in the JSON"
    expect_out '"ms_per_frame": \{"mean": null'
    if command -v python3 >/dev/null; then
      python3 -c 'import json, sys; json.load(open("out"))' || fail "invalid JSON"
    fi
  done
  ;;

# 9 and 12. generate and drift read the model's size (and step, seed) metadata, checked.
metadata_checked)
  run 0 "${tiny_video[@]}" --steps 1 --out video
  cp video/model.safetensors bad_size.safetensors
  "$io_tool" set-metadata bad_size.safetensors size abc || fail "io_test_tool"
  run 1 video generate --checkpoint bad_size.safetensors --frames 1 --out ''
  expect_err "bad_size.safetensors: metadata 'size' is 'abc', expected an integer"
  run 1 video drift --models bad_size.safetensors --frames 1 --videos 1
  expect_err "bad_size.safetensors: metadata 'size' is 'abc', expected an integer"
  expect_clear_err
  # drift streams at the model's size: a 32x32 model on 64x64 frames would not match its truth
  run 0 video drift --models video/model.safetensors --frames 2 --videos 1 --steps 1
  "$io_tool" set-metadata video/checkpoint.safetensors step abc || fail "io_test_tool"
  run 1 "${tiny_video[@]}" --steps 2 --out video --resume
  expect_err "checkpoint.safetensors: metadata 'step' is 'abc', expected an integer >= 0"
  expect_clear_err
  "$io_tool" set-metadata video/checkpoint.safetensors step || fail "io_test_tool"
  run 1 "${tiny_video[@]}" --steps 2 --out video --resume
  expect_err "checkpoint.safetensors: metadata has no 'step'"
  expect_clear_err
  run 2 bench video --steps abc --frames 3
  expect_err "--steps expects an integer, got 'abc'"
  expect_clear_err
  ;;

# 13. Usage mistakes exit 2 in every command, and are caught before any work.
usage_exit_codes)
  run 2 "${tiny_gpt[@]}" --steps 2 --precision fp8 --out gpt
  run 2 "${tiny_video[@]}" --steps 1 --precision fp8 --out video
  run 2 "${tiny_video[@]}" --steps 1 --preset huge --out video
  run 2 "${tiny_video[@]}" --steps 1 --context-noise -1 --out video
  expect_err "--context-noise, --context-blur and --context-sharpen must be >= 0"
  run 2 "${tiny_video[@]}" --steps 1 --unroll 2 --out video
  expect_err "--unroll needs --prediction direct"
  run 2 "${tiny_video[@]}" --steps 1 --prediction direct --self-context 0.5 --out video
  expect_err "direct model trains on its own outputs with --unroll"
  run 2 "${tiny_video[@]}" --steps 1 --prediction direct --unroll 0 --out video
  run 2 "${tiny_video[@]}" --steps 1 --free-run 2 --out video
  expect_err "--free-run must be >= 0 and needs --prediction direct"
  run 2 "${tiny_video[@]}" --steps 1 --prediction direct --loss l2 --out video
  expect_err "unknown regression loss 'l2', expected mse|l1"
  run 2 "${tiny_video[@]}" --steps 1 --loss l1 --out video
  expect_err "--loss needs --prediction direct"
  run 2 "${tiny_video[@]}" --steps 1 --anchor --out video
  expect_err "--anchor needs --prediction direct"
  run 2 "${tiny_video[@]}" --steps 1 --adversarial 0.1 --out video
  expect_err "--adversarial must be >= 0 and needs --prediction direct"
  run 2 "${tiny_video[@]}" --steps 1 --distribution 1 --out video
  expect_err "--distribution must be >= 0 and needs --prediction direct"
  run 2 "${tiny_video[@]}" --steps 1 --prediction direct --distribution -1 --out video
  expect_err "--distribution must be >= 0 and needs --prediction direct"
  run 2 "${tiny_video[@]}" --steps 1 --prediction direct --adversarial 0.1 --critic-width 12 \
    --out video
  run 2 video generate --precision fp8
  run 2 stream run --input nothing.h5 --output out.cxi --overload spill
  expect_err "unknown overload policy 'spill', expected block|drop"
  run 2 bench video --presets huge --frames 3
  run 2 bench train --modes fp8
  [[ ! -e gpt && ! -e video ]] || fail "a usage mistake created an output directory"
  ;;

# 14. Temporaries: a signal removes the GIF being written; kill -9 leaves one that the next
# writer of the same file removes; bench video leaves no scratch folder behind on an error.
temporaries)
  run 0 "${tiny_video[@]}" --steps 1 --out video
  for sig in TERM KILL; do
    "$mixprec" video generate --checkpoint video/model.safetensors --frames 100000 --steps 1 \
      --out stream.gif >out 2>err &
    pid=$!
    for ((i = 0; i < 1200; ++i)); do
      compgen -G '.stream.gif.tmp-*' >/dev/null && break
      sleep 0.05
    done
    sleep 0.3
    kill -$sig $pid
    wait $pid
  done
  [[ -n $(compgen -G '.stream.gif.tmp-*') ]] || fail "kill -9 should leave its temporary"
  run 0 video generate --checkpoint video/model.safetensors --frames 2 --steps 1 --out stream.gif
  no_temporaries .
  mkdir scratch
  echo "not a model" >bad_model.safetensors  # each configuration's child process fails on it
  TMPDIR=$PWD/scratch "$mixprec" bench video --presets lightweight --precisions fp32 --steps 1 \
    --frames 3 --checkpoint bad_model.safetensors >out 2>err
  [[ $? != 0 ]] || fail "bench video with a broken model file succeeded"
  [[ -z $(ls scratch) ]] || fail "bench video left $(ls scratch) in the temporary directory"
  ;;

# 15. Outputs: an existing directory as --out fails before the work; convert onto a symlink
# writes through it.
outputs)
  run 0 "${tiny_video[@]}" --steps 1 --out video
  mkdir frames.gif
  run 1 video generate --checkpoint video/model.safetensors --frames 50 --steps 1 --out frames.gif
  expect_err "frames.gif: is a directory"
  grep -q 'video generate \[' err && fail "frames were generated before --out was checked"
  "$io_tool" sample sample.safetensors || fail "io_test_tool"
  cp sample.safetensors real.safetensors
  ln -s real.safetensors link.safetensors
  run 0 convert sample.safetensors link.safetensors --dtype bf16
  [[ -L link.safetensors ]] || fail "convert replaced the symlink"
  "$io_tool" check-convert sample.safetensors real.safetensors bf16 ||
    fail "the symlink's target was not converted"
  ;;

# Also: kill -9 during training saves, a few times; the checkpoint always loads, no temporary
# survives the next start, and the resumed run ends bit-identical to an uninterrupted one.
kill9_during_saves)
  steps=150
  args=("${tiny_gpt[@]}" --steps $steps --checkpoint-every 1 --eval-every 0)
  run 0 "${args[@]}" --out straight
  resume=()
  for kill in 1 2 3 4; do
    "$mixprec" "${args[@]}" --out killed "${resume[@]}" >out 2>err &
    pid=$!
    [[ $kill == 1 ]] && wait_for killed/checkpoint.safetensors
    sleep 0.$((RANDOM % 5 + 2))
    kill -9 $pid
    wait $pid 2>/dev/null
    "$io_tool" dump killed/checkpoint.safetensors >/dev/null ||
      fail "the checkpoint does not load after kill -9 number $kill"
    resume=(--resume)
  done
  run 0 "${args[@]}" --out killed --resume
  no_temporaries killed
  same_file killed/checkpoint.safetensors straight/checkpoint.safetensors
  ;;

# 14. An adversarial run (with the distribution term too) resumes bit for bit, the critic
# included, and refuses to resume without its critic or with one from another step.
adversarial_resume)
  adv=("${tiny_video[@]}" --prediction direct --residual --context-frames 2 --unroll 2
       --adversarial 0.1 --adversarial-from 1 --distribution 1)
  run 0 "${adv[@]}" --steps 3 --out straight
  expect_err "critic [0-9.]+ adv [0-9.-]+ \\| swd [0-9.]+"
  run 0 "${adv[@]}" --steps 2 --out resumed
  cp resumed/critic.safetensors critic_at_2.safetensors
  run 0 "${adv[@]}" --steps 3 --out resumed --resume
  same_file resumed/checkpoint.safetensors straight/checkpoint.safetensors
  same_file resumed/critic.safetensors straight/critic.safetensors
  cp critic_at_2.safetensors resumed/critic.safetensors
  run 1 "${adv[@]}" --steps 4 --out resumed --resume
  expect_err "critic.safetensors is from step 2, the checkpoint from step 3"
  rm resumed/critic.safetensors
  run 2 "${adv[@]}" --steps 4 --out resumed --resume
  expect_err "needs resumed/critic.safetensors"
  ;;

# 13. f16 training that keeps overflowing falls back to bf16, says so, records it in the
# checkpoint, and a resumed run continues in bf16; controls that change the numbers are settings.
precision_fallback)
  run 0 "${tiny_gpt[@]}" --steps 16 --checkpoint-every 2 --loss-scale 1e30 --fallback-after 3 \
    --out gpt
  expect_err "step 3: 3 steps in a row skipped for overflow: falling back from fp16 to bf16"
  grep -aqE '"fallback_precision" *: *"bf16"' gpt/checkpoint.safetensors ||
    fail "the checkpoint does not record the fallback"
  grep -aqE '"step" *: *"16"' gpt/checkpoint.safetensors || fail "the final checkpoint is missing"
  run 0 "${tiny_gpt[@]}" --steps 18 --checkpoint-every 2 --loss-scale 1e30 --fallback-after 3 \
    --out gpt --resume
  expect_err "fell back from fp16 to bf16 \(3 steps in a row skipped for overflow\): continuing in bf16"
  grep -q "falling back" err && fail "the resumed run fell back again"
  grep -q "skipped (overflow)" err && fail "the resumed run still scales the loss"
  run 2 "${tiny_gpt[@]}" --steps 20 --out gpt --resume --fallback-after 3 --precision bf16
  expect_err "settings that differ .*--precision bf16 \(the checkpoint has fp16\)"
  # 16-bit parameters: fp16-params falls back to bf16-params and resumes with bf16 weights.
  run 0 "${tiny_gpt[@]}" --precision fp16-params --steps 8 --checkpoint-every 2 \
    --loss-scale 1e30 --fallback-after 2 --rounding stochastic --out params
  expect_err "falling back from fp16-params to bf16-params"
  run 0 "${tiny_gpt[@]}" --precision fp16-params --steps 10 --checkpoint-every 2 \
    --fallback-after 2 --rounding stochastic --out params --resume
  expect_err "continuing in bf16-params"
  for changed in "--grad-accum 2" "--rounding nearest" "--fallback-after 5"; do
    # shellcheck disable=SC2086
    run 2 "${tiny_gpt[@]}" --precision fp16-params --steps 12 --fallback-after 2 \
      --rounding stochastic --out params --resume $changed
    expect_err "settings that differ .*${changed%% *} "
  done
  # Activation checkpointing gives the same bits, so it may change on a resume.
  run 0 "${tiny_gpt[@]}" --precision fp16-params --steps 12 --fallback-after 2 \
    --rounding stochastic --out params --resume --checkpoint-activations
  # Usage mistakes, before anything runs.
  run 2 "${tiny_gpt[@]}" --steps 2 --rounding stochastic --precision bf16 --out bad
  expect_err "stochastic rounding rounds into 16-bit parameters"
  run 2 "${tiny_gpt[@]}" --steps 2 --fallback-after 25 --out bad
  expect_err "--fallback-after must be below 25"
  run 2 "${tiny_gpt[@]}" --steps 2 --grad-accum 0 --out bad
  expect_err "grad_accum must be >= 1"
  [[ ! -e bad ]] || fail "a refused run created its --out"
  ;;

# 14. The same training controls in `video train` (issue #15): the fallback, the weights'
# moving average resumed bit for bit, activation checkpointing giving the same losses (to the
# order of a few gradient sums), and micro-batches giving the losses of the larger batch.
video_controls)
  run 0 "${tiny_video[@]}" --precision fp16 --steps 6 --checkpoint-every 2 --loss-scale 1e30 \
    --fallback-after 2 --out fp16
  expect_err "step 2: 2 steps in a row skipped for overflow: falling back from fp16 to bf16"
  grep -aqE '"fallback_precision" *: *"bf16"' fp16/checkpoint.safetensors ||
    fail "the checkpoint does not record the fallback"
  run 0 "${tiny_video[@]}" --precision fp16 --steps 8 --checkpoint-every 2 --fallback-after 2 \
    --out fp16 --resume
  expect_err "continuing in bf16"
  grep -q "skipped (overflow)" err && fail "the resumed run still scales the loss"
  # --ema: the model file holds the average, and a resumed run gives the same files.
  ema=("${tiny_video[@]}" --precision bf16-params --rounding stochastic --ema 0.9)
  run 0 "${ema[@]}" --steps 3 --out ema_straight
  expect_err "stochastic rounding; the model file holds the weights' moving average \(decay 0.9\)"
  run 0 "${ema[@]}" --steps 2 --out ema_resumed
  run 0 "${ema[@]}" --steps 3 --out ema_resumed --resume
  for f in checkpoint ema model; do
    same_file ema_resumed/$f.safetensors ema_straight/$f.safetensors
  done
  run 0 "${tiny_video[@]}" --precision bf16-params --rounding stochastic --steps 3 --out last
  cmp -s last/model.safetensors ema_straight/model.safetensors &&
    fail "the model file with --ema holds the last weights"
  rm ema_resumed/ema.safetensors
  run 2 "${ema[@]}" --steps 4 --out ema_resumed --resume
  expect_err "needs ema_resumed/ema.safetensors"
  run 2 "${tiny_video[@]}" --steps 4 --out ema_straight --resume --precision bf16-params \
    --rounding stochastic
  expect_err "settings that differ .*--ema"
  # Activation checkpointing: the same forward, gradients summed in another order (f32).
  check=("${tiny_video[@]}" --precision fp32 --steps 4 --checkpoint-every 4)
  run 0 "${check[@]}" --out plain --log-losses plain.txt
  run 0 "${check[@]}" --out recomputed --log-losses recomputed.txt --checkpoint-activations
  expect_err "activation checkpointing"
  python3 "$(dirname "$0")/../dist/compare_losses.py" plain.txt recomputed.txt 1e-6 4 \
    >compare.txt || fail "--checkpoint-activations changed the losses: $(cat compare.txt)"
  run 2 "${check[@]}" --steps 5 --out recomputed --resume
  expect_err "settings that differ .*--checkpoint-activations 0"
  # Micro-batches: the windows of the larger batch, the same losses (f32, no context noise).
  micro=("${tiny_video[@]}" --prediction direct --context-noise 0 --precision fp32 --steps 3)
  run 0 "${micro[@]}" --batch 4 --out big --log-losses big.txt
  run 0 "${micro[@]}" --batch 2 --grad-accum 2 --out accum --log-losses accum.txt
  expect_err "2 micro-batches of 2 per step"
  python3 "$(dirname "$0")/../dist/compare_losses.py" big.txt accum.txt 1e-5 3 >compare.txt ||
    fail "--grad-accum 2 --batch 2 is not --batch 4: $(cat compare.txt)"
  # The logs of a resumed run: the lines up to its checkpoint are kept, those a stopped run wrote
  # after it are replaced, so the log is the whole run's, each step once.
  logged=("${tiny_gpt[@]}" --precision fp32 --checkpoint-every 2 --eval-every 2)
  run 0 "${logged[@]}" --steps 4 --out gpt --log-losses log.txt --log-eval eval.txt
  cp log.txt log_at_4.txt && cp eval.txt eval_at_4.txt
  printf '5 9.9 0 0.1\n6 9.9 0 0.1\n' >>log.txt  # as a run stopped after step 4's checkpoint
  printf '6 9.9\n' >>eval.txt
  run 0 "${logged[@]}" --steps 6 --out gpt --log-losses log.txt --log-eval eval.txt --resume
  [[ $(wc -l <log.txt) == 6 && $(wc -l <eval.txt) == 3 ]] ||
    fail "the resumed logs hold $(wc -l <log.txt) and $(wc -l <eval.txt) lines, not 6 and 3"
  head -n 4 log.txt | cmp -s - log_at_4.txt || fail "the resumed log lost its first 4 lines"
  head -n 2 eval.txt | cmp -s - eval_at_4.txt || fail "the resumed log lost its evaluations"
  grep -q " 9.9" log.txt eval.txt && fail "the lines after the checkpoint were kept"
  # Usage mistakes, before anything runs.
  run 2 "${tiny_video[@]}" --steps 2 --rounding stochastic --out bad
  expect_err "stochastic rounding rounds into 16-bit parameters"
  run 2 "${tiny_video[@]}" --steps 2 --grad-accum 0 --out bad
  expect_err "--grad-accum must be >= 1"
  run 2 "${tiny_video[@]}" --steps 2 --ema 1 --out bad
  expect_err "--ema"
  run 2 "${tiny_video[@]}" --steps 2 --prediction direct --adversarial 0.1 --grad-accum 2 --out bad
  expect_err "--adversarial does not combine with --grad-accum"
  [[ ! -e bad ]] || fail "a refused run created its --out"
  ;;

*)
  fail "unknown case"
  ;;
esac
echo "ok: $case_name"
