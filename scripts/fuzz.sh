#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for N seconds, seeded
# from its committed corpus (copied, so new inputs never land in the repo).
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS
# BUILD_DIR is configured as a fuzz build (DS4_FUZZ=ON) unless it already is
# one, or is clang's ASan+UBSan build, which has the same targets (its fuzzed
# libraries carry the coverage instrumentation): scripts/test.sh passes that.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
seconds=${2:-60}

# tests/fuzz/CMakeLists.txt records whether a build has the libFuzzer targets.
if ! grep -qx 'DS4_LIBFUZZER:INTERNAL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDS4_FUZZ=ON -DDS4_REFERENCE=OFF -DDS4_BENCH=OFF >/dev/null
fi

targets=()
for dir in tests/fuzz/corpus/*/; do
  name=$(basename "$dir")
  targets+=("fuzz_$name")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no corpora under tests/fuzz/corpus"; exit 1
fi
cmake --build "$build" --target "${targets[@]}"

status=0
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$name/." "$work/"
  echo "fuzz: $t for ${seconds}s"
  if ! "$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 "$work" > "$work.log" 2>&1; then
    tail -n 40 "$work.log"
    status=1
  else
    grep -E 'stat::number_of_executed_units|Done' "$work.log" | tail -n 2
  fi
  rm -rf "$work" "$work.log"
done
exit $status
