#!/usr/bin/env bash
# Runs the whole default suite and prints one line "N passed, N failed, N
# skipped" (skipped: a test that needs what this machine lacks, a CPU
# feature say, and says so). Stages: main build + every CTest test; on a
# machine with AVX-512, the unit and server tests again at the avx2 level
# (DS4_ISA=avx2), so what an AVX2-only CPU would see is caught here too;
# ASan+UBSan build + unit tests; short libFuzzer runs. A stage that fails to
# build counts as one failure.
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
ASAN_BUILD=${ASAN_BUILD:-build-asan}
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}  # per libFuzzer target
JOBS=${JOBS:-2}

passed=0
failed=0
skipped=0
log_dir=$(mktemp -d)

count_ctest() {  # $1 = ctest log, $2 = stage name
  local line
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$1" | tail -n 1)
  if [ -z "$line" ]; then
    failed=$((failed + 1))
    return
  fi
  local total nfail nskip
  nfail=$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/' <<<"$line")
  total=$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\2/' <<<"$line")
  # CTest counts a skipped test (GTEST_SKIP, exit 77) as passed; it lists it
  # under "The following tests did not run:" as "NNN - name (Skipped)".
  nskip=$(grep -cE '^[[:space:]]+[0-9]+ - .* \(Skipped\)$' "$1" || true)
  # The failed tests' names, repeated at the very end: CI shows only the
  # output's tail.
  grep -E '^[[:space:]]+[0-9]+ - .* \((Failed|SEGFAULT|Timeout|Subprocess aborted|Exception|Child aborted|Not Run)\)' "$1" |
    sed "s/^[[:space:]]*/  [$2] /" >>"$log_dir/failed_names" || true
  passed=$((passed + total - nfail - nskip))
  failed=$((failed + nfail))
  skipped=$((skipped + nskip))
}

# The AVX-512 levels' features (quant/dot.cpp's has_avx512).
has_avx512() {
  local flags
  flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null) || return 1
  for f in avx512f avx512bw avx512vl avx512dq; do
    grep -qw "$f" <<<"$flags" || return 1
  done
}

# Each stage's wall time goes into the summary: CI shows only the tail, and
# the suite's budget (45 minutes on 2 cores) is watched stage by stage.
stage_name=""
stage_start=0
stage_times=""
stage_end() {
  [ -n "$stage_name" ] && stage_times+="  $stage_name: $(($(date +%s) - stage_start)) s"$'\n'
  stage_name=""
}
stage() {
  stage_end
  stage_name="$*"
  stage_start=$(date +%s)
  echo; echo "==== $* ===="
}
start=$(date +%s)

stage "main build"
if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build "$BUILD"; then
  stage "main tests"
  ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" 2>&1 | tee "$log_dir/main.log"
  count_ctest "$log_dir/main.log" main
  if has_avx512; then
    stage "unit and server tests at the avx2 level (DS4_ISA=avx2)"
    DS4_ISA=avx2 ctest --test-dir "$BUILD" -L 'unit|server' --output-on-failure -j "$JOBS" 2>&1 |
      tee "$log_dir/avx2.log"
    count_ctest "$log_dir/avx2.log" avx2
  else
    echo "(no AVX-512 here: the main tests above already ran at the avx2 level or below)"
  fi
else
  echo "main build FAILED"; failed=$((failed + 1))
fi

asan_built=0
# clang: it compiles the ASan+UBSan test programs 2.5x faster than GCC
# (test_server_reply.cpp 10 s against 26 s) and its -O0 runs are no slower.
stage "ASan+UBSan build (clang)"
if cmake -S . -B "$ASAN_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
     -DDS4_SANITIZE=ON -DDS4_REFERENCE=OFF -DDS4_BENCH=OFF >/dev/null &&
   cmake --build "$ASAN_BUILD"; then
  asan_built=1
  stage "ASan+UBSan unit tests"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$ASAN_BUILD" -L unit --output-on-failure -j "$JOBS" 2>&1 | tee "$log_dir/asan.log"
  count_ctest "$log_dir/asan.log" asan
else
  echo "ASan build FAILED"; failed=$((failed + 1))
fi

# The ASan+UBSan build has the libFuzzer targets (tests/fuzz/CMakeLists.txt):
# fuzz there rather than compile the libraries a third time.
fuzz_build=$FUZZ_BUILD
if [ "$asan_built" = 1 ]; then fuzz_build=$ASAN_BUILD; fi
stage "libFuzzer, ${FUZZ_SECONDS}s per target"
if ./scripts/fuzz.sh "$fuzz_build" "$FUZZ_SECONDS"; then
  passed=$((passed + 1))
else
  echo "fuzzing FAILED"; failed=$((failed + 1))
fi

stage_end
end=$(date +%s)
echo
printf "stage times:\n%s" "$stage_times"
if [ -s "$log_dir/failed_names" ]; then
  echo "failed:"
  cat "$log_dir/failed_names"
fi
rm -rf "$log_dir"
echo "suite time: $((end - start)) s"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
