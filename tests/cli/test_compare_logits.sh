#!/usr/bin/env bash
# scripts/compare-logits.py (the GPU check's comparison of two engines'
# logits) on hand-worked files: identical rows agree exactly; rows
# [1 2 3] [3 2 1] against [1 2 4] [1 2 3] agree on half the top tokens, worst
# |a - b| / max|b| = 2 / 3, median (1/4 + 2/3) / 2; thresholds missed exit 2;
# files of another size or not whole rows are refused by name.
# Usage: test_compare_logits.sh SOURCE_DIR
set -euo pipefail
script=$1/scripts/compare-logits.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
floats() { python3 -c 'import array, sys; array.array("f", map(float, sys.argv[2:])).tofile(open(sys.argv[1], "wb"))' "$@"; }

floats "$work/a.bin" 1 2 3 3 2 1
floats "$work/b.bin" 1 2 4 1 2 3
floats "$work/short.bin" 1 2 3
floats "$work/odd.bin" 1 2 3 4
same=$(python3 "$script" "$work/a.bin" "$work/a.bin" 3)
python3 -c 'import json, sys; r = json.loads(sys.argv[1]); assert r == {"rows": 2, "top1": 1.0, "max_rel": 0.0, "median_rel": 0.0, "min_cosine": r["min_cosine"]} and abs(r["min_cosine"] - 1) < 1e-12, r' "$same" ||
  fail "identical files: $same"
diff=$(python3 "$script" "$work/a.bin" "$work/b.bin" 3)
python3 -c 'import json, sys; r = json.loads(sys.argv[1]); assert r["top1"] == 0.5 and abs(r["max_rel"] - 2 / 3) < 1e-7 and abs(r["median_rel"] - (0.25 + 2 / 3) / 2) < 1e-7, r' "$diff" ||
  fail "hand-worked files: $diff"
python3 "$script" "$work/a.bin" "$work/b.bin" 3 --min-top1 0.5 --max-rel 0.7 >/dev/null || fail "thresholds met, yet refused"
status=0
python3 "$script" "$work/a.bin" "$work/b.bin" 3 --min-top1 0.9 >/dev/null || status=$?
[ $status -eq 2 ] || fail "a missed --min-top1 exits $status, not 2"
status=0
msg=$(python3 "$script" "$work/a.bin" "$work/short.bin" 3 2>&1) || status=$?
[ $status -eq 1 ] && [[ "$msg" == *"2 rows against 1"* ]] || fail "rows of another count: $status $msg"
status=0
msg=$(python3 "$script" "$work/odd.bin" "$work/a.bin" 3 2>&1) || status=$?
[ $status -eq 1 ] && [[ "$msg" == *"odd.bin"*"not whole rows of 3"* ]] || fail "not whole rows: $status $msg"
echo "compare-logits: ok"
