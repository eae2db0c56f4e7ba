#!/usr/bin/env bash
# --ssd-streaming inside a memory cgroup half the size of the model file
# (issue 24): ds4 runs (no OOM kill), its logits are bit-identical to the
# resident run outside the cgroup, and the memory charged to the cgroup (RSS
# and page cache) peaks under the limit and under the file's size. With the
# automatic cache size (from the cgroup's headroom) and with one slot.
# cgroup v2 or v1, whichever the machine has; needs root (CI runs as root):
# skipped (77) where no memory cgroup can be made.
# Usage: test_ssd_streaming_cgroup.sh BUILD_DIR
set -euo pipefail
build=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }

work=$(mktemp -d)
cg=""
cleanup() {
  local status=$?
  [ -n "$cg" ] && rmdir "$cg" 2>/dev/null || true
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

[ "$(id -u)" -eq 0 ] || skip "not root: cannot make a memory cgroup"
if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
  version=2
  echo "+memory" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
  cg=/sys/fs/cgroup/ds4-streaming-test-$$
  mkdir "$cg" 2>/dev/null || skip "cannot create $cg"
  [ -f "$cg/memory.max" ] || skip "the memory controller is not enabled below /sys/fs/cgroup"
elif [ -d /sys/fs/cgroup/memory ]; then
  version=1
  cg=/sys/fs/cgroup/memory/ds4-streaming-test-$$
  mkdir "$cg" 2>/dev/null || skip "cannot create $cg"
else
  skip "no memory cgroup controller"
fi

# A model whose routed experts are nearly all of it: 256 experts of 1024 rows a layer.
model="$work/model.gguf"
"$build/bin/ds4-mkmodel" --preset tiny --mix ds4-q2 --experts 256 --experts-used 6 --expert-ff 1024 --seed 3 \
  --out "$model" >/dev/null
file_bytes=$(stat -c %s "$model")
limit=$((file_bytes / 2))
python3 -c 'import json; print(json.dumps([(i * 37 + 5) % 500 for i in range(48)]))' > "$work/t.json"

"$build/bin/ds4" -m "$model" --tokens-file "$work/t.json" --dump-logits "$work/resident.bin" -t 2 2>/dev/null \
  || fail "the resident run failed"

if [ "$version" = 2 ]; then
  echo "$limit" > "$cg/memory.max"
else
  echo "$limit" > "$cg/memory.limit_in_bytes"
fi
peak() {
  if [ "$version" = 2 ]; then
    cat "$cg/memory.peak" 2>/dev/null || echo 0
  else
    cat "$cg/memory.max_usage_in_bytes"
  fi
}

run_capped() {  # name, extra ds4 flags...
  local name=$1
  shift
  # The file leaves the page cache first, so that what the run maps is charged to it.
  python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$model"
  [ "$version" = 1 ] && echo 0 > "$cg/memory.max_usage_in_bytes"
  local status=0
  sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$cg" \
    "$build/bin/ds4" -m "$model" --tokens-file "$work/t.json" --dump-logits "$work/$name.bin" -t 2 --ssd-streaming "$@" \
    2>"$work/$name.err" || status=$?
  [ "$status" -eq 0 ] || fail "$name: ds4 exited with $status in a cgroup of $limit bytes: $(cat "$work/$name.err")"
  cmp -s "$work/resident.bin" "$work/$name.bin" || fail "$name: logits differ from the resident run"
  local p
  p=$(peak)
  [ "$p" -le "$limit" ] || fail "$name: the cgroup peaked at $p bytes, over its limit $limit"
  [ "$p" -lt "$file_bytes" ] || fail "$name: the cgroup peaked at $p bytes, not under the file's $file_bytes"
  echo "$name: logits equal, cgroup peak $p of $limit bytes (file $file_bytes)"
}
run_capped auto
run_capped one-slot --ssd-streaming-cache-experts 1
echo "ssd streaming in a memory cgroup (v$version): all checks passed"
