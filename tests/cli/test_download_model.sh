#!/usr/bin/env bash
# download_model.sh against a local "Hugging Face" (file:// URLs): a fresh
# download, the resume of a partial one (the result is byte-identical to the
# source), the ./ds4flash.gguf link for main models and not for mtp, a file
# that is not a GGUF refused, unknown targets and options refused.
# Usage: test_download_model.sh SOURCE_DIR
set -euo pipefail
src_dir=$1
script="$src_dir/download_model.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
hub="$work/hub"
mkdir -p "$hub" "$work/run"
name=$("$script" q2-imatrix --print-url | sed -n 1p)
name=${name##*/}
mtp=$("$script" mtp --print-url | sed -n 1p)
mtp=${mtp##*/}

# A 3 MiB "model": GGUF magic then seeded random bytes.
{ printf 'GGUF'; head -c $((3 * 1024 * 1024)) /dev/urandom; } >"$hub/$name"
cp "$hub/$name" "$hub/$mtp"
export DS4_HF_BASE_URL="file://$hub"
unset HF_TOKEN || true
cd "$work/run"

# Resume: a partial file holding the first 1 MiB.
mkdir -p gguf
head -c $((1024 * 1024)) "$hub/$name" >"gguf/$name.part"
HOME="$work" "$script" q2-imatrix >"$work/log" 2>&1 || { cat "$work/log"; fail "resumed download failed"; }
cmp "gguf/$name" "$hub/$name" || fail "resumed file differs from the source"
[ ! -e "gguf/$name.part" ] || fail "the .part file was left behind"
[ "$(readlink ds4flash.gguf)" = "$work/run/gguf/$name" ] || fail "ds4flash.gguf does not point at the model"

# Already there: nothing downloaded again.
HOME="$work" "$script" q2-imatrix >"$work/log" 2>&1 || fail "second run failed"
grep -q "already downloaded" "$work/log" || fail "second run did not notice the file"

# mtp: downloaded into --dir, ds4flash.gguf unchanged.
HOME="$work" "$script" mtp --dir other >"$work/log" 2>&1 || { cat "$work/log"; fail "mtp download failed"; }
cmp "other/$mtp" "$hub/$mtp" || fail "mtp file differs"
[ "$(readlink ds4flash.gguf)" = "$work/run/gguf/$name" ] || fail "mtp changed ds4flash.gguf"

# Not a GGUF: refused, nothing saved under the final name.
q4=$("$script" q4-imatrix --print-url | sed -n 1p)
q4=${q4##*/}
printf 'HTML error page' >"$hub/$q4"
if HOME="$work" "$script" q4-imatrix >"$work/log" 2>&1; then fail "a non-GGUF download was accepted"; fi
grep -q "GGUF magic" "$work/log" || fail "no message about the GGUF magic"
[ ! -e "gguf/$q4" ] || fail "a non-GGUF file was saved"

# Missing file on the server: a clear failure.
q2=$("$script" q2 --print-url | sed -n 1p)
if HOME="$work" "$script" q2 >"$work/log" 2>&1; then fail "a missing file was accepted"; fi
grep -q "download failed" "$work/log" || fail "no message for a failed download"

# Bad arguments.
if "$script" no-such-model >"$work/log" 2>&1; then fail "unknown target accepted"; fi
grep -q "unknown target 'no-such-model'" "$work/log" || fail "unknown target not named"
if "$script" q2 --bogus >"$work/log" 2>&1; then fail "unknown option accepted"; fi
grep -q "unknown option '--bogus'" "$work/log" || fail "unknown option not named"
"$script" --help | grep -q "q2-imatrix" || fail "--help does not list the targets"
echo "download_model.sh: all checks passed"
