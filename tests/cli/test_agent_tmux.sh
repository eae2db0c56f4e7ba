#!/usr/bin/env bash
# ds4-agent as a person uses it, in a tmux terminal, on the tiny random
# model with its tool calls forced by constrained decoding (--constrain-tools:
# enums pin the tool's arguments, so the random weights cannot take another
# path):
#  1. an edit really changes the file, the same edit again is refused (its
#     old text is gone), /save keeps the session;
#  2. in a new process, /switch restores it without prefilling it again, a
#     shell command waits for confirmation: "n" declines it (nothing runs),
#     "y" runs it;
#  3. Ctrl+C stops a running command and the turn, the agent goes on, /list
#     shows the session, /quit exits with status 0.
# Usage: test_agent_tmux.sh DS4_AGENT DS4_MKMODEL
set -euo pipefail
agent=$1
mkmodel=$2
sock="ds4-agent-$$" pane=agent
# shellcheck source=tmux_helpers.sh
. "$(dirname "$0")/tmux_helpers.sh"
type_line() { tmux -L "$sock" send-keys -t agent -l -- "$1"; tmux -L "$sock" send-keys -t agent Enter; }

"$mkmodel" --out "$work/tiny.gguf" --seed 3 >/dev/null
mkdir -p "$work/project"
printf 'hello foo world\n' > "$work/project/a.txt"
tool() {  # tool NAME PROPERTIES-JSON REQUIRED-JSON
  printf '[{"type":"function","function":{"name":"%s","parameters":{"type":"object","properties":%s,"required":%s}}}]' "$1" "$2" "$3"
}
tool edit '{"path":{"enum":["a.txt"]},"old":{"enum":["foo"]},"new":{"enum":["bar"]}}' '["path","old","new"]' > "$work/edit.json"
tool shell '{"command":{"enum":["touch confirmed.txt"]}}' '["command"]' > "$work/touch.json"
tool shell '{"command":{"enum":["sleep 60"]}}' '["command"]' > "$work/sleep.json"

tmux -L "$sock" new-session -d -s agent -x 160 -y 50 \
  "env -i PATH='$PATH' HOME='$work' TERM=xterm bash --norc --noprofile -i"
sleep 0.5
common="-m '$work/tiny.gguf' -c 8192 -n 400 --nothink --temp 0 --max-steps 2 --session-dir '$work/sessions' --chdir '$work/project' --no-color"
run_agent() {  # run_agent EXTRA-ARGS: on a clean screen, starts it and waits for its banner
  tmux -L "$sock" send-keys -t agent "clear" Enter
  sleep 0.3
  tmux -L "$sock" clear-history -t agent
  tmux -L "$sock" send-keys -t agent "'$agent' $common $1; echo AGENT-EXIT=\$?" Enter
  wait_for "/help lists the commands" 60
}

# 1. A real edit, a refused one, /save.
run_agent "--constrain-tools '$work/edit.json'"
type_line "change foo"
wait_for "edited a.txt at line 1" 120
wait_for "the old text does not occur in a.txt" 120
wait_for "stopped at --max-steps 2" 60
[ "$(cat "$work/project/a.txt")" = "hello bar world" ] || fail "a.txt holds '$(cat "$work/project/a.txt")'"
type_line "/save s1"
wait_for "saved s1 (" 30
saved=$(screen | grep -oE 'saved s1 \([0-9]+ tokens' | grep -oE '[0-9]+')
type_line "/quit"
wait_for "AGENT-EXIT=0" 20

# 2. /switch restores the context; the shell waits for confirmation.
run_agent "--constrain-tools '$work/touch.json'"
type_line "/switch s1"
wait_for "switched to s1 ($saved tokens" 60
type_line "make a file"
wait_for "run this command?" 120
type_line "n"
wait_for "the user declined to run this command" 30
[ ! -e "$work/project/confirmed.txt" ] || fail "the declined command ran"
wait_for "run this command?" 120
# Only what is new was evaluated: the saved turn's tool results and this message.
first=$(screen | grep -oE 'prefill: [0-9]+ tokens' | head -n 1 | grep -oE '[0-9]+')
[ "$first" -lt 300 ] || fail "after /switch the first step evaluated $first tokens: the session was prefilled again"
type_line "y"
wait_for "stopped at --max-steps 2" 60
[ -e "$work/project/confirmed.txt" ] || fail "the confirmed command did not run"
type_line "/quit"
wait_for "AGENT-EXIT=0" 20

# 3. Ctrl+C stops a running command; the agent goes on.
run_agent "--constrain-tools '$work/sleep.json' --yes"
type_line "wait a minute"
wait_for "[tool] shell" 120
sleep 1
tmux -L "$sock" send-keys -t agent C-c
wait_for "stopped by the user" 15
wait_for "(interrupted" 15
type_line "/list"
wait_for "$saved tokens" 15
type_line "/quit"
wait_for "AGENT-EXIT=0" 20
echo "ds4-agent under tmux: all checks passed"
