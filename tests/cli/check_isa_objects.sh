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

# "symbol type object" for every defined symbol of every object.
defined=$(mktemp)
trap 'rm -f "$defined"' EXIT
# One nm for all objects (one per object, and an awk run per weak symbol,
# took 46 s of the suite).
printf '%s\0' "${all_objects[@]}" | xargs -0 nm --defined-only -P -A |
  awk '{ file = $1; sub(/:$/, "", file); print $2, $3, file }' | sort -u >"$defined"

# Every weak symbol of an ISA-level object that another object
# defines too, as "symbol object other...".
report=$(awk '
  NR == FNR { where[$1] = where[$1] " " $3; next }
  ($2 == "W" || $2 == "w") && $3 ~ /_avx(2|512)\.cpp\.o$/ {
    n = split(where[$1], objs, " ")
    others = ""
    for (i = 1; i <= n; i++) if (objs[i] != $3 && index(others, " " objs[i] " ") == 0) others = others " " objs[i] " "
    if (others != "") print $1, $3, others
  }' "$defined" "$defined")

bad=0
while read -r sym o others; do
  [[ -n "$sym" ]] || continue
  bad=$((bad + 1))
  echo "weak function defined in ${o#"$build"/} and elsewhere: $(c++filt "$sym")"
  for other in $others; do echo "    also in $other"; done
done <<<"$report"

echo "${#isa_objects[@]} ISA-level objects checked against ${#all_objects[@]} objects: $bad shared weak functions"
[[ $bad -eq 0 ]]
