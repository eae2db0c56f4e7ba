#!/usr/bin/env bash
# What `make run` starts once the build is done: the interactive chat on
# $MODEL (default ./ds4flash.gguf) when it exists, otherwise on a small
# generated demo model with random weights, said loudly in a banner.
# Usage: scripts/run-chat.sh BUILD_DIR   (env: MODEL, DEMO_DIR, ARGS)
set -euo pipefail
build=${1:?usage: run-chat.sh BUILD_DIR}
model=${MODEL:-ds4flash.gguf}
demo_dir=${DEMO_DIR:-demo}
read -r -a extra <<<"${ARGS:-}"

if [ -e "$model" ]; then
  exec "$build/bin/ds4" -m "$model" "${extra[@]}"
fi

demo="$demo_dir/ds4-demo-tiny.gguf"
if [ ! -s "$demo" ]; then
  mkdir -p "$demo_dir"
  "$build/bin/ds4-mkmodel" --preset tiny --mix ds4-q2 --seed 1 --out "$demo" >/dev/null
fi
cat <<BANNER
======================================================================
  No $model here: this chat runs a generated DEMO model with RANDOM
  weights ($demo). Its replies are noise; it shows the program
  working (line editing, /help commands, Ctrl+C, speed).
  For DeepSeek V4 Flash:  ./download_model.sh q2-imatrix   (~81 GB)
  then run \`make run\` again.
======================================================================
BANNER
exec "$build/bin/ds4" -m "$demo" "${extra[@]}"
