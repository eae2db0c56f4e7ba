#!/usr/bin/env bash
# `make run` as a person uses it, in a tmux terminal: it builds, shows the
# random-weights banner (no model file), starts the chat; a message gets a
# reply with the speed line, Ctrl+C stops a reply and the chat goes on,
# /nothink and /help answer, /quit ends it with status 0, and the line
# history is saved.
# Usage: test_make_run_tmux.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
sock="ds4-make-run-$$" pane=chat
# shellcheck source=tmux_helpers.sh
. "$(dirname "$0")/tmux_helpers.sh"

# An interactive shell in the terminal, and the command typed into it, as a
# person does (job control: Ctrl+C goes to the foreground job, not the
# shell). MODEL names a file that does not exist, so the demo model is used
# whatever the checkout holds.
tmux -L "$sock" new-session -d -s chat -x 132 -y 50 "env -i PATH='$PATH' HOME='$work' HISTFILE=/dev/null TERM=xterm bash --norc --noprofile -i"
sleep 0.5
tmux -L "$sock" send-keys -t chat \
  "cd '$src' && make run BUILD='$build' MODEL='$work/none.gguf' DEMO_DIR='$work/demo' ARGS='--seed 7 --ignore-eos -c 32768'; echo MAKE-EXIT=\$?" Enter

wait_for "RANDOM" 300
wait_for "ds4>" 120
tmux -L "$sock" send-keys -t chat "/nothink" Enter
wait_for "mode: no thinking" 10

# A reply that runs until interrupted (--ignore-eos; -c 32768 so that it
# does not fill the context first: the demo model decodes ~1000 t/s on a fast
# machine, and the 4096-token default fills in ~4 s): Ctrl+C stops it and the
# chat goes on.
tmux -L "$sock" send-keys -t chat "Hello there" Enter
sleep 2
tmux -L "$sock" send-keys -t chat C-c
wait_for "(interrupted)" 30
wait_for "prefill:" 30
tmux -L "$sock" send-keys -t chat "/help" Enter
wait_for "/think-max" 10

# A second turn continues the same conversation (the context grows).
before=$(count "prefill:")
tmux -L "$sock" send-keys -t chat "and again" Enter
sleep 1
tmux -L "$sock" send-keys -t chat C-c
deadline=$((SECONDS + 30))
while [ "$(count "prefill:")" -le "$before" ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
[ "$(count "prefill:")" -gt "$before" ] || fail "the second turn did not finish"
# The conversation grew: the second speed line reports a larger context.
ctx=$(screen | grep -oE 'context [0-9]+/' | tr -dc '0-9\n' | tail -n 2)
[ "$(echo "$ctx" | head -n 1)" -lt "$(echo "$ctx" | tail -n 1)" ] || fail "the second turn did not extend the conversation ($ctx)"

tmux -L "$sock" send-keys -t chat "/quit" Enter
wait_for "MAKE-EXIT=0" 20
grep -qF "Hello" "$work/.ds4_history" || fail "the line history was not saved"
echo "make run under tmux: all checks passed"
