#!/usr/bin/env bash
# Fails when an object file compiled for one ISA level (*_avx2.cpp.o,
# *_avx512.cpp.o) defines a weak function that another object file of the
# build defines too. Such a function (an inline or template function emitted
# out of line: std::vector's growth, a header's helper) is one symbol for the
# whole program, and the linker keeps whichever copy it meets first: if that
# is the AVX-512 copy, every caller runs AVX-512 code, and an AVX2-only CPU
# dies with SIGILL (it did: vector<uint8_t>::_M_default_append from an
# AVX-512 tile file, called by the AVX2 tiles). core/kernel_scratch.h is where
# kernel files get their scratch memory instead.
#
# Usage: check_isa_objects.sh BUILD_DIR. Exit 77 (skipped) when the build has
# no ISA-level objects (not an x86 build).
set -euo pipefail
build=${1:?usage: check_isa_objects.sh BUILD_DIR}

mapfile -t isa_objects < <(find "$build" -name '*_avx2.cpp.o' -o -name '*_avx512.cpp.o' | sort)
if [[ ${#isa_objects[@]} -eq 0 ]]; then
  echo "no *_avx2.cpp.o / *_avx512.cpp.o objects under $build: nothing to check"
  exit 77
fi
mapfile -t all_objects < <(find "$build" -name '*.o' | sort)

# "symbol object" for every defined symbol of every object.
defined=$(mktemp)
trap 'rm -f "$defined"' EXIT
for o in "${all_objects[@]}"; do
  nm --defined-only -P "$o" | awk -v o="$o" '{print $1, o}'
done | sort -u >"$defined"

bad=0
for o in "${isa_objects[@]}"; do
  while read -r sym; do
    others=$(awk -v s="$sym" -v o="$o" '$1 == s && $2 != o {print $2}' "$defined")
    [[ -z "$others" ]] && continue
    bad=$((bad + 1))
    echo "weak function defined in ${o#"$build"/} and elsewhere: $(c++filt "$sym")"
    sed 's/^/    also in /' <<<"$others"
  done < <(nm --defined-only -P "$o" | awk '$2 == "W" || $2 == "w" {print $1}')
done

echo "${#isa_objects[@]} ISA-level objects checked against ${#all_objects[@]} objects: $bad shared weak functions"
[[ $bad -eq 0 ]]
