#!/usr/bin/env bash
# `make install` and `make uninstall` as a user runs them, into a temporary
# prefix: the programs land in PREFIX/bin and run from another folder through
# PATH (ds4 --version, ds4-server --help); README.md and every docs/ page in
# PREFIX/share/doc/dwarfstar; the example systemd unit starts the installed
# ds4-server on 127.0.0.1 as an unprivileged user; installed-files.txt lists
# exactly the files installed, and `make uninstall PREFIX=...` removes them.
# Usage: test_install.sh SOURCE_DIR BUILD_DIR VERSION
set -euo pipefail
src=$1
build=$2
version=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
fail_make() { echo "FAIL: $*" >&2; sed 's/^/  | /' "$log" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
doc="$prefix/share/doc/dwarfstar"
log="$work/make.log"

make -C "$src" install BUILD="$build" PREFIX="$prefix" >"$log" 2>&1 || fail_make "make install exited with $?"
grep -q "Installing: $prefix/bin/ds4\$" "$log" || fail_make "make install did not print what it installed"

for p in ds4 ds4-agent ds4-server ds4-worker ds4-mkmodel ds4-gguf ds4-quantize ds4-imatrix ds4-bench; do
  [ -x "$prefix/bin/$p" ] || fail "$p is not installed in $prefix/bin"
done

# From another folder, by name through PATH, as a user runs them.
mkdir "$work/elsewhere"
cd "$work/elsewhere"
export PATH="$prefix/bin:$PATH"
[ "$(command -v ds4)" = "$prefix/bin/ds4" ] || fail "ds4 on PATH is $(command -v ds4), not the installed one"
out=$(ds4 --version) || fail "installed ds4 --version exited with $?"
[[ "$out" == "ds4 $version (commit "*")" ]] || fail "installed ds4 --version printed '$out'"
out=$(ds4-server --help) || fail "installed ds4-server --help exited with $?"
grep -q -- "--kv-disk-dir" <<<"$out" || fail "installed ds4-server --help does not list its options: $out"

[ -f "$doc/README.md" ] || fail "README.md is not in $doc"
for page in "$src"/docs/*.md; do
  cmp -s "$page" "$doc/docs/$(basename "$page")" || fail "docs/$(basename "$page") is not installed in $doc/docs"
done

unit="$doc/examples/ds4-server.service"
[ -f "$unit" ] || fail "no systemd unit example at $unit"
grep -qx "ExecStart=$prefix/bin/ds4-server .*--host 127\.0\.0\.1 .*" "$unit" ||
  fail "the unit's ExecStart does not start the installed ds4-server on 127.0.0.1: $(grep ExecStart "$unit")"
user=$(sed -n 's/^User=//p' "$unit")
[ -n "$user" ] && [ "$user" != root ] && [ "$user" != 0 ] || fail "the unit runs as '$user', not an unprivileged user"
grep -qx "NoNewPrivileges=yes" "$unit" || fail "the unit does not set NoNewPrivileges=yes"
grep -q "@" "$unit" && fail "the unit has unsubstituted @variables@: $(grep @ "$unit")"
# systemd's own reading of the unit, where systemd is installed.
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify "$unit" >"$work/verify" 2>&1 || fail "systemd-analyze verify: $(cat "$work/verify")"
  [ ! -s "$work/verify" ] || fail "systemd-analyze verify warns: $(cat "$work/verify")"
fi

# The list holds exactly the files in the prefix.
list="$doc/installed-files.txt"
[ -f "$list" ] || fail "no $list"
diff <(sort "$list") <(find "$prefix" -type f | sort) >"$work/diff" ||
  fail "installed-files.txt is not the set of installed files: $(cat "$work/diff")"

make -C "$src" uninstall PREFIX="$prefix" >"$log" 2>&1 || fail_make "make uninstall exited with $?"
left=$(find "$prefix" -type f)
[ -z "$left" ] || fail "make uninstall left files: $left"
[ ! -e "$doc" ] || fail "make uninstall left $doc"
echo "make install / uninstall: all checks passed"
