# DwarfStar: the two set-up commands are `make run` and `make test`.
# Everything else here is a convenience target they are built from.

BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
BUILD_TYPE ?= RelWithDebInfo
FUZZ_SECONDS ?= 60
FUZZ_LONG_SECONDS ?= 3600

CMAKE_FLAGS ?=

.PHONY: all deps reference configure build test test-unit test-asan fuzz-short fuzz-long run demo bench clean

all: build

deps:
	@./scripts/install-deps.sh

reference: deps
	@./scripts/reference-setup.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD)

# The whole suite: main build (unit + reference + CLI tests), the ASan+UBSan
# build of the unit tests, and a short libFuzzer run. scripts/test.sh prints
# one summary line "N passed, N failed".
test: deps reference
	@./scripts/test.sh

test-unit: build
	@ctest --test-dir $(BUILD) -L unit --output-on-failure -j 2

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDS4_SANITIZE=ON -DDS4_REFERENCE=OFF -DDS4_BENCH=OFF >/dev/null
	@cmake --build $(ASAN_BUILD)
	@ctest --test-dir $(ASAN_BUILD) -L unit --output-on-failure -j 2

fuzz-short: deps
	@./scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

fuzz-long: deps
	@./scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_LONG_SECONDS)

# For now the main job generates a small random-weight demo model and prints
# its inspection; later the chat and the server take this place.
run: build
	@mkdir -p demo
	@$(BUILD)/bin/ds4-mkmodel --preset tiny --mix ds4-q2 --seed 1 --out demo/tiny-ds4-q2.gguf
	@$(BUILD)/bin/ds4-gguf info demo/tiny-ds4-q2.gguf

bench: build
	@$(BUILD)/bench/ds4-bench-kernels --benchmark_min_time=0.2

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) demo
