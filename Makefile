# DwarfStar: the two set-up commands are `make run` and `make test`.
# Everything else here is a convenience target they are built from, and
# `make install` / `make uninstall` (PREFIX=/usr/local).

BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
BUILD_TYPE ?= RelWithDebInfo
FUZZ_SECONDS ?= 60
FUZZ_LONG_SECONDS ?= 3600

CMAKE_FLAGS ?=
PREFIX ?= /usr/local

.PHONY: all deps reference server-test-deps web-test-deps configure build test test-unit test-asan test-server server-load fuzz-short fuzz-long run demo bench gpu-build gpu-bundle gpu-check install uninstall clean

all: build

deps:
	@./scripts/install-deps.sh

# llama.cpp (the reference implementation) and DeepSeek V3's tokenizer.json
# (tokenizer parity tests build a GGUF with it).
reference: deps
	@./scripts/reference-setup.sh
	@./scripts/fetch-deepseek-tokenizer.sh .reference/deepseek-v3-tokenizer.json

# The npm SDKs (openai, @anthropic-ai/sdk, pinned in tests/server) the server
# tests drive ds4-server with.
server-test-deps: deps
	@./scripts/server-test-setup.sh

# Debian's Chromium and playwright-core (pinned in tests/web) for the chat
# page's browser test.
web-test-deps: deps
	@./scripts/install-deps.sh chromium
	@./scripts/npm-ci.sh tests/web

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD)

# The whole suite: main build (unit + reference + CLI tests; on an AVX-512
# machine the unit and server tests a second time with DS4_ISA=avx2), the
# ASan+UBSan build of the unit tests, and a short libFuzzer run.
# scripts/test.sh prints one summary line "N passed, N failed, N skipped"
# (skipped: a test that needs what this machine lacks, and says so).
test: deps reference server-test-deps web-test-deps
	@./scripts/test.sh

test-unit: build
	@ctest --test-dir $(BUILD) -L unit --output-on-failure -j 2

# ds4-server through the real client SDKs (also part of `make test`).
test-server: build server-test-deps
	@ctest --test-dir $(BUILD) -L server --output-on-failure -j 2

# 32 concurrent streaming clients for 60 s against ds4-server on a tiny model
# (not part of `make test`): no 5xx, well-formed streams, RSS after warm-up.
server-load: build server-test-deps
	@DS4_SERVER_BIN=$(BUILD)/bin/ds4-server DS4_MKMODEL_BIN=$(BUILD)/bin/ds4-mkmodel node tests/server/load.mjs $(LOAD_ARGS)

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DDS4_SANITIZE=ON -DDS4_REFERENCE=OFF -DDS4_BENCH=OFF >/dev/null
	@cmake --build $(ASAN_BUILD)
	@ctest --test-dir $(ASAN_BUILD) -L unit --output-on-failure -j 2

fuzz-short: deps
	@./scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

fuzz-long: deps
	@./scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_LONG_SECONDS)

# The main job: the interactive chat on ./ds4flash.gguf (MODEL=...), or on a
# generated random-weight demo model when there is none. ARGS="..." passes
# options to ds4 (e.g. ARGS="--nothink --ctx 8192"). MODE=server starts
# ds4-server instead (it prints a curl example; ARGS="--port 8080 ...").
MODEL ?= ds4flash.gguf
DEMO_DIR ?= demo
ARGS ?=
MODE ?= chat
# Only what run-chat.sh starts: the chat or the server, and ds4-mkmodel for the
# demo model (tests, fuzz targets and benchmarks are left to `make test`).
RUN_TARGETS_chat = ds4 ds4-mkmodel
RUN_TARGETS_server = ds4-server ds4-mkmodel
run: configure
	@$(if $(RUN_TARGETS_$(MODE)),,echo "make run: MODE must be chat or server, not '$(MODE)'" >&2; exit 2)
	@cmake --build $(BUILD) --target $(RUN_TARGETS_$(MODE))
	@MODEL="$(MODEL)" DEMO_DIR="$(DEMO_DIR)" ARGS="$(ARGS)" MODE="$(MODE)" ./scripts/run-chat.sh $(BUILD)

bench: configure
	@cmake --build $(BUILD) --target ds4-bench-kernels
	@$(BUILD)/bench/ds4-bench-kernels --benchmark_min_time=0.2

# The programs (ds4_programs: every apps/ binary) into PREFIX/bin, README and
# docs/ into PREFIX/share/doc/dwarfstar with an example systemd unit for
# ds4-server (examples/ds4-server.service), and the list of what was installed
# there (installed-files.txt), which `make uninstall PREFIX=...` removes
# (it needs no build folder). DESTDIR=... stages both for packaging.
# The CUDA backend's GPU checks (docs/cuda.md): gpu-build compiles the kernel
# tests, ds4-bench-cuda and the programs the check runs (nvcc, no GPU needed);
# gpu-bundle packs them into .gpu-run/gpu-bundle.tar.xz to carry to a GPU
# machine; scripts/gpu-check.sh runs them where the GPU is; gpu-check does
# build and check on a machine that has one.
gpu-build: configure
	@cmake --build $(BUILD) --target test_cuda_kernels test_cuda_ops test_cuda_layers test_cuda_backend test_cuda_devices ds4-bench-cuda ds4 ds4-bench ds4-mkmodel

gpu-bundle: gpu-build
	@./scripts/gpu-bundle.sh $(BUILD)

gpu-check: gpu-build
	@./scripts/gpu-check.sh $(BUILD)

install: configure
	@cmake --build $(BUILD) --target ds4_programs
	@cmake --install $(BUILD) --prefix $(PREFIX)

uninstall:
	@cmake -DLIST="$(DESTDIR)$(PREFIX)/share/doc/dwarfstar/installed-files.txt" -P packaging/uninstall.cmake

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) demo
