#!/usr/bin/env bash
# The ds4 CLI as a pipeline coordinator (issue 25): `ds4 --dist-listen ...
# --layers 0:2` with one ds4-worker serving 2:output over ZeroMQ/CURVE.
# Truth: ds4 alone on the same model. The logits of every token
# (--dump-logits) must be the same bytes, so the greedy ids and a one-shot
# chat reply are the same too; with three stages (the first worker handing
# over to the second) as well. No worker within --dist-wait: a clear error;
# --layers without --dist-listen: refused. Then each process with only its
# own shards (ds4-gguf split --split-layers 2 --no-tensor-first-split: the
# metadata shard and its stage's): the same logits; a worker whose shards do
# not hold its layers is refused, naming the tensor and the absent shard.
# Usage: test_dist_cli.sh DS4_BIN WORKER_BIN MKMODEL_BIN GGUF_BIN
set -euo pipefail
ds4=$1
worker=$2
mkmodel=$3
gguf=$4
# shellcheck source=server_processes.sh
source "$(dirname "${BASH_SOURCE[0]}")/server_processes.sh"

"$mkmodel" --preset tiny --mix ds4-q2 --seed 3 --out "$work/tiny.gguf" >/dev/null
"$worker" --gen-key "$work/key" 2>/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -c 'import json; print(json.dumps([(i * 7919 + 13) % 512 for i in range(40)]))' >"$work/tokens.json"
start worker "$worker" -m "$work/tiny.gguf" --coordinator "127.0.0.1:$port" --layers 2:output --dist-key "$work/key" \
  -t 1 -c 256
dist=(--dist-listen "127.0.0.1:$port" --dist-key "$work/key" --layers 0:2 --dist-wait 60)
common=(-m "$work/tiny.gguf" -t 1 -c 256)

"$ds4" "${common[@]}" --tokens-file "$work/tokens.json" --dump-logits "$work/one.bin" --greedy 6 \
  >"$work/one.ids" 2>"$work/one.log" || fail "ds4 alone"
"$ds4" "${common[@]}" "${dist[@]}" --tokens-file "$work/tokens.json" --dump-logits "$work/pipe.bin" --greedy 6 \
  >"$work/pipe.ids" 2>"$work/pipe.log" || fail "ds4 as the coordinator"
cmp -s "$work/one.bin" "$work/pipe.bin" || fail "the logits through the pipeline differ from one process's"
[ "$(cat "$work/one.ids")" = "$(cat "$work/pipe.ids")" ] || fail "greedy ids differ"
grep -q "hop 1: layers 2:output" "$work/pipe.log" || fail "ds4 did not name the worker's stage"

# Three stages, the workers with their default forward address (every
# interface, any port): the first hands its hidden states to the second at
# the address the coordinator sees it at; the same logits again.
port3=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start workerA "$worker" -m "$work/tiny.gguf" --coordinator "127.0.0.1:$port3" --layers 1:3 --dist-key "$work/key" \
  -t 1 -c 256
start workerB "$worker" -m "$work/tiny.gguf" --coordinator "127.0.0.1:$port3" --layers 3:output \
  --dist-key "$work/key" -t 1 -c 256
"$ds4" "${common[@]}" --dist-listen "127.0.0.1:$port3" --dist-key "$work/key" --layers 0:1 --dist-wait 60 \
  --tokens-file "$work/tokens.json" --dump-logits "$work/three.bin" --greedy 6 >"$work/three.ids" \
  2>"$work/three.log" || fail "ds4 coordinating three stages"
cmp -s "$work/one.bin" "$work/three.bin" || fail "the logits through three stages differ from one process's"
grep -q "hop 2: layers 3:output .*, handed over by the stage before at tcp://127.0.0.1:" "$work/three.log" ||
  fail "the second worker takes no hand-overs at the address the coordinator sees it at"

chat=(-p "Count to five." --nothink --temp 0 -n 8)
a=$("$ds4" "${common[@]}" "${chat[@]}" 2>>"$work/one.log") || fail "one-shot alone"
b=$("$ds4" "${common[@]}" "${dist[@]}" "${chat[@]}" 2>>"$work/pipe.log") || fail "one-shot as the coordinator"
[ -n "$a" ] || fail "empty one-shot reply"
[ "$a" = "$b" ] || fail "one-shot replies differ: '$a' and '$b'"

other=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if "$ds4" "${common[@]}" --dist-listen "127.0.0.1:$other" --dist-key "$work/key" --layers 0:2 --dist-wait 1 \
    --tokens-file "$work/tokens.json" --greedy 2 >"$work/none.log" 2>&1; then
  fail "ran with no worker"
fi
grep -q "dist-wait 1: no worker serves layers 2" "$work/none.log" || fail "no clear error without a worker"
if "$ds4" "${common[@]}" --layers 0:2 --tokens-file "$work/tokens.json" --greedy 2 >"$work/bad.log" 2>&1; then
  fail "--layers without --dist-listen was accepted"
fi
grep -q "layers needs --dist-listen" "$work/bad.log" || fail "no clear refusal of --layers alone"

# Stage hosts with only their shards.
"$gguf" split --split-layers 2 --no-tensor-first-split "$work/tiny.gguf" "$work/st" >/dev/null
mkdir -p "$work/host1" "$work/host2"
cp "$work/st-00001-of-00003.gguf" "$work/st-00002-of-00003.gguf" "$work/host1/"
cp "$work/st-00001-of-00003.gguf" "$work/st-00003-of-00003.gguf" "$work/host2/"
if "$worker" -m "$work/host1/st-00001-of-00003.gguf" --coordinator "127.0.0.1:$other" --layers 2:output \
    --dist-key "$work/key" -t 1 -c 256 >"$work/wrong-shards.log" 2>&1; then
  fail "a worker without its layers' shard ran"
fi
grep -q "layers 2:output needs tensor 'blk.2" "$work/wrong-shards.log" || fail "no clear refusal of the wrong shards"
grep -q "st-00003-of-00003.gguf" "$work/wrong-shards.log" || fail "the absent shard was not named"
port2=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start worker2 "$worker" -m "$work/host2/st-00001-of-00003.gguf" --coordinator "127.0.0.1:$port2" --layers 2:output \
  --dist-key "$work/key" -t 1 -c 256
"$ds4" -m "$work/host1/st-00001-of-00003.gguf" -t 1 -c 256 --dist-listen "127.0.0.1:$port2" --dist-key "$work/key" \
  --layers 0:2 --dist-wait 60 --tokens-file "$work/tokens.json" --dump-logits "$work/shards.bin" --greedy 6 \
  >"$work/shards.ids" 2>"$work/shards.log" || fail "the stages on their own shards"
cmp -s "$work/one.bin" "$work/shards.bin" || fail "the logits of the stages on their own shards differ"
"$gguf" info --partial "$work/host2/st-00001-of-00003.gguf" >"$work/partial-info.txt" || fail "info --partial"
grep -q "absent: $work/host2/st-00002-of-00003.gguf" "$work/partial-info.txt" || fail "info --partial: absent shard not listed"
grep -q "ds4.split.fingerprint" "$work/partial-info.txt" || fail "info --partial: no recorded fingerprint"
echo "PASS: ds4 as a pipeline coordinator equals one process, also with each stage on its own shards"
