# mixprec: the two commands are `make demo` and `make test`; both install (as root, with
# apt-get) and build whatever they need first.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

# Debian packages the build and the tests need; the benchmarks add their peer libraries.
# python3-dev, python3-pytest and python3-pip: the Python bindings (python/, docs/PYTHON.md),
# built against Debian's python3 ($(PYTHON)); nanobind comes from PyPI (install_nanobind.sh).
# libopenmpi-dev and openmpi-bin: data-parallel training under mpirun and its 2-rank tests
# (optional for the build: without an MPI it trains in one process, docs/DISTRIBUTED.md).
DEPS = cmake ninja-build g++ libgtest-dev python3-numpy libpng-dev libgif-dev libturbojpeg0-dev \
  libcpp-httplib-dev pkgconf libhdf5-dev python3-h5py libzmq3-dev python3-dev python3-pytest \
  python3-pip libopenmpi-dev openmpi-bin
# The Python the bindings are built for and tested with: Debian's, where apt puts numpy and
# pytest, whatever python3 comes first on PATH.
PYTHON ?= /usr/bin/python3
# libomp-dev: the HDF5 frame reader's fuzz target links the OpenMP thread helper under clang.
FUZZ_DEPS = clang libclang-rt-14-dev libomp-dev
BENCH_DEPS = libdnnl-dev libopenblas-dev
# The emulated AVX2-only CPU of `make test-haswell` (qemu-x86_64 from Debian's qemu-user).
HASWELL_DEPS = qemu-user
# The browser test of `mixprec video serve` (headless Chromium); skipped when it cannot be installed.
BROWSER_DEPS = chromium
BENCHES = bench_convert bench_gemm bench_conv bench_attention bench_optim bench_data bench_gpt bench_peaknet
# OpenBLAS is pinned to its AVX2 kernels on this machine by OPENBLAS_CORETYPE; the benchmark
# runs with that unset so the peer column shows OpenBLAS at its best (bench_gemm prints which).
BENCH_ENV = env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE

.PHONY: all deps bench-deps build check-layers test test-haswell test-asan fuzz demo bench bench-quick bench-unet-peer bench-peers format \
  python-wheel clean help

all: build

help:
	@echo "make demo        build, then run the main job (mixprec info, ...)"
	@echo "make test        check the layer order, build, then run every test (CTest)"
	@echo "make check-layers  only the layer check (tools/check_layers.py)"
	@echo "make test-haswell  the core, kernels, nn and amp tests on an emulated AVX2-only CPU (qemu)"
	@echo "make test-asan   every library test under AddressSanitizer + UBSan"
	@echo "make fuzz        the safetensors, ZeroMQ frame header and HDF5 frame file readers under libFuzzer (FUZZ_SECONDS=60 each)"
	@echo "make bench       build, then run the benchmarks (make bench-quick: under a minute)"
	@echo "make bench-unet-peer  UNetVideo forward, mixprec vs PyTorch side by side (issue #6)"
	@echo "make bench-peers  U-Net forward and GPT training step vs PyTorch 2.x and OpenVINO (issue #16)"
	@echo "make python-wheel  build the Python package's wheel with pip (as \`pip install .\` does)"
	@echo "make format      clang-format every source file"

deps:
	@tools/install_deps.sh $(DEPS)
	@tools/install_nanobind.sh $(PYTHON)

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(PYTHON) \
	  $(CMAKE_ARGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The layer check runs first (a fraction of a second): a lower layer never includes a higher one.
check-layers:
	python3 tools/check_layers.py

test: check-layers build
	@tools/install_deps.sh $(BROWSER_DEPS) || echo "mixprec: no chromium: the browser test will be skipped"
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The core, kernels, nn and amp suites on an emulated CPU without AVX-512 (qemu-user's Haswell-v4:
# AVX2, FMA, F16C): the library picks the avx2 level there, and any AVX-512 or AMX instruction
# on a path it runs faults (SIGILL), as on a real Haswell. Tests per kernel level skip the levels
# the CPU lacks (tests/support/isa_levels.h). Emulation is slow (10-50x), so HASWELL_FILTER
# leaves out the scalar-level instances of the per-level tests (plain C++ that every CPU runs)
# and the 4096-token attention memory test; everything else in the four suites runs, except
# ConvertFastPath.IndependentOfFlushToZeroAndRoundingMode/avx2: qemu 7.2's F16C emulation
# follows MXCSR's flush-to-zero and rounding settings, which the hardware's vcvtps2ph and
# vcvtph2ps do not (the test passes natively at the avx2 level). The features TCG cannot
# emulate are switched off so qemu does not warn about them.
HASWELL_SUITES = core kernels nn amp
HASWELL_CPU = Haswell-v4,pcid=off,x2apic=off,tsc-deadline=off,invpcid=off,spec-ctrl=off
HASWELL_FILTER ?= -*/scalar:*/scalar_*:Attention.Seq4096UsesLessThan64MiBExtra:Isa/ConvertFastPath.IndependentOfFlushToZeroAndRoundingMode/avx2
test-haswell: build
	@tools/install_deps.sh $(HASWELL_DEPS)
	@set -e; for suite in $(HASWELL_SUITES); do \
	  echo "== test_$$suite under qemu-x86_64 -cpu Haswell-v4"; \
	  tools/run_under_qemu.sh $$suite '$(HASWELL_CPU)' '$(HASWELL_FILTER)' $(BUILD); \
	done

# No Python extension here: an ASan-built module would need the sanitizer preloaded into python.
$(ASAN_BUILD)/build.ninja: | deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMIXPREC_SANITIZE=ON \
	  -DMIXPREC_BUILD_BENCH=OFF -DMIXPREC_PYTHON=OFF $(CMAKE_ARGS)

# The 300-step GPT precision-parity training runs in `make test` only: under ASan it takes minutes.
# The stream layer (HDF5 frames, CXI files, the finders) runs here too: it parses untrusted files.
test-asan: deps $(ASAN_BUILD)/build.ninja
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target test_core test_kernels test_io test_autograd test_nn test_amp test_optim test_data test_graph test_models test_pipeline test_stream io_test_tool zmq_bad_peer mixprec_cli
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -R '^(core|kernels|io|autograd|nn|amp|optim|data|graph|models|pipeline|stream)\.|^cli\.(io|inspect|convert|stream)' \
	  -E 'GPTParity'

# The parsers of untrusted input (safetensors, ZeroMQ frame headers, HDF5 frame files) under
# libFuzzer (clang, ASan + UBSan), FUZZ_SECONDS each. The HDF5 reader probes each file in a
# forked child, so a crash inside libhdf5 itself is a clean error there (tests/fuzz/run.sh).
FUZZ_SECONDS ?= 60
fuzz:
	@tools/install_deps.sh $(FUZZ_DEPS)
	tests/fuzz/run.sh $(FUZZ_SECONDS)

# The main job: the machine, a 500-frame real-time video stream from the shipped model
# (demo_stream.gif, frames 0, 50, ... in demo_strip.png, its quality report printed),
# and the lightweight benchmark matrix (bench_video.md, bench_video.svg). About 2-3 minutes.
demo: build
	$(BUILD)/mixprec info
	$(BUILD)/mixprec video generate --frames 500 --precision auto --out demo_stream.gif \
	  --strip demo_strip.png --strip-every 50
	$(BUILD)/mixprec bench video --presets lightweight --precisions fp32,fp16,bf16,autocast-bf16 \
	  --frames 12 --quality-frame 50
	@echo "Watch the stream live in a browser: $(BUILD)/mixprec video serve, then open http://127.0.0.1:8080/"

bench-deps:
	@tools/install_deps.sh $(DEPS) $(BENCH_DEPS)

# The peers are found at configure time: reconfigure once they are installed.
bench: bench-deps build
	cmake -S . -B $(BUILD) >/dev/null && cmake --build $(BUILD) -j $(JOBS)
	@for b in $(BENCHES); do echo "== $$b"; $(BENCH_ENV) $(BUILD)/bench/$$b || exit 1; done

bench-quick: bench-deps build
	cmake -S . -B $(BUILD) >/dev/null && cmake --build $(BUILD) -j $(JOBS)
	@for b in $(BENCHES); do echo "== $$b --quick"; $(BENCH_ENV) $(BUILD)/bench/$$b --quick || exit 1; done

# Issue #6: UNetVideo 'medium', mixprec vs PyTorch (Debian's python3-torch, run by Debian's
# python3, not whichever python is first on PATH). UNET_PEER_ARGS: e.g. --rounds 5 --reps 10.
UNET_PEER_ARGS ?=
bench-unet-peer: bench-deps build
	@tools/install_deps.sh python3-torch
	/usr/bin/python3 tools/bench_unet_peer.py --build $(BUILD) $(UNET_PEER_ARGS)

# Issue #16: the peers at their strongest, side by side with mixprec in one command. PyTorch 2.x
# (eager and torch.compile) and OpenVINO come from PyPI into a virtual environment under the
# build folder, versions pinned in bench/peers/requirements.txt: installed once (the default
# torch wheel brings its CUDA libraries, several GB), reused after, never used by `make test`.
# Debian's python3-torch 1.13 is an extra column where it is installed, not needed. mixprec runs
# on the non-AMX bf16 path (MIXPREC_ISA=avx512bf16) and, where the CPU has AMX, on AMX too.
# PEERS_UNET_ARGS / PEERS_GPT_ARGS: e.g. --rounds 5, --isa avx512bf16, --peer-args=--no-compile.
PEERS_VENV ?= $(BUILD)/peers-venv
PEERS_DEPS = python3-venv
PEERS_UNET_ARGS ?=
PEERS_GPT_ARGS ?=
$(PEERS_VENV)/installed: bench/peers/requirements.txt
	@tools/install_deps.sh $(PEERS_DEPS)
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install --progress-bar off -r bench/peers/requirements.txt
	touch $@

bench-peers: build $(PEERS_VENV)/installed
	$(PYTHON) tools/bench_unet_peer.py --build $(BUILD) --peer-python $(PEERS_VENV)/bin/python \
	  --optional-peer-python /usr/bin/python3 $(PEERS_UNET_ARGS)
	$(PYTHON) tools/bench_gpt_peer.py --build $(BUILD) --peer-python $(PEERS_VENV)/bin/python \
	  --optional-peer-python /usr/bin/python3 $(PEERS_GPT_ARGS)

# `pip install .` without installing: the wheel lands in dist/. pip builds in build-pip/ (its
# own full Release build of the library, minutes on a small machine), so this is not in `make test`,
# which tests the same extension built in $(BUILD).
python-wheel: deps
	$(PYTHON) -m pip wheel --no-deps -w dist .

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
