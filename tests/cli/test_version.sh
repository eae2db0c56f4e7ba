#!/usr/bin/env bash
# Every program answers --version with one line "NAME VERSION (commit C)" on
# stdout, nothing on stderr and exit status 0. VERSION is the project's; C is
# the commit of the source checkout (git rev-parse --short=12 HEAD, with
# "-dirty" accepted only while tracked files have uncommitted changes), or
# "unknown" when the sources are not a git checkout.
# Usage: test_version.sh SOURCE_DIR VERSION PROGRAM...   (empty PROGRAMs are skipped:
# the targets this build configuration does not have)
set -euo pipefail
src=$1
version=$2
shift 2
fail() { echo "FAIL: $*" >&2; exit 1; }

# The build reads the commit only from the checkout's own .git (cmake/Ds4VersionInfo.cmake).
commits=(unknown)
if [ -e "$src/.git" ] && head=$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null); then
  commits=("$head")
  if [ -n "$(git --no-optional-locks -C "$src" status --porcelain --untracked-files=no)" ]; then
    commits+=("$head-dirty")
  fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
checked=0
for program in "$@"; do
  [ -n "$program" ] || continue
  name=$(basename "$program")
  status=0
  "$program" --version >"$work/out" 2>"$work/err" </dev/null || status=$?
  [ "$status" -eq 0 ] || fail "$name --version: exit status $status: $(cat "$work/err")"
  [ ! -s "$work/err" ] || fail "$name --version wrote to stderr: $(cat "$work/err")"
  [ "$(wc -l <"$work/out")" -eq 1 ] || fail "$name --version: not one line: $(cat "$work/out")"
  line=$(cat "$work/out")
  ok=0
  for c in "${commits[@]}"; do
    [ "$line" = "$name $version (commit $c)" ] && ok=1
  done
  [ "$ok" -eq 1 ] || fail "$name --version printed '$line', expected '$name $version (commit ${commits[0]})'$(
    [ "${#commits[@]}" -eq 1 ] || echo " or the same with -dirty")"
  echo "$line"
  checked=$((checked + 1))
done
[ "$checked" -gt 0 ] || fail "no program to check"
echo "--version: $checked programs checked"
