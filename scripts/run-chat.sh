#!/usr/bin/env bash
# What `make run` starts once the build is done: the interactive chat on
# $MODEL (default ./ds4flash.gguf) when it exists, otherwise on a small
# generated demo model with random weights, said loudly in a banner.
# MODE=server starts ds4-server on that model instead (ARGS go to it, e.g.
# ARGS="--port 8080 --kv-disk-dir kv").
# Usage: scripts/run-chat.sh BUILD_DIR   (env: MODEL, DEMO_DIR, ARGS, MODE)
set -euo pipefail
build=${1:?usage: run-chat.sh BUILD_DIR}
model=${MODEL:-ds4flash.gguf}
demo_dir=${DEMO_DIR:-demo}
read -r -a extra <<<"${ARGS:-}"
mode=${MODE:-chat}
case "$mode" in
  chat) program=ds4 ;;
  server) program=ds4-server ;;
  *) echo "run-chat.sh: MODE must be chat or server, not '$mode'" >&2; exit 2 ;;
esac

if [ -e "$model" ]; then
  exec "$build/bin/$program" -m "$model" "${extra[@]}"
fi

demo="$demo_dir/ds4-demo-tiny.gguf"
if [ ! -s "$demo" ]; then
  mkdir -p "$demo_dir"
  "$build/bin/ds4-mkmodel" --preset tiny --mix ds4-q2 --seed 1 --out "$demo" >/dev/null
fi
what="this chat runs"
shows="line editing, /help commands, Ctrl+C, speed"
if [ "$mode" = server ]; then
  what="this server serves"
  shows="the APIs, streaming, tool calls, the KV cache"
fi
cat <<BANNER
======================================================================
  No $model here: $what a generated DEMO model with RANDOM
  weights ($demo). Its replies are noise; it shows the program
  working ($shows).
  For DeepSeek V4 Flash:  ./download_model.sh q2-imatrix   (~81 GB)
  then run \`make run\` again.
======================================================================
BANNER
exec "$build/bin/$program" -m "$demo" "${extra[@]}"
