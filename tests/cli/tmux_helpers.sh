# Sourced by the tests that drive a program in a tmux terminal as a person
# would, after setting $sock (the tmux server's socket name) and $pane (the
# session name). Makes $work, a temporary folder that goes at exit with the
# tmux server, and gives: fail MESSAGE (prints the screen, exits 1), screen,
# wait_for TEXT SECONDS, count TEXT.

fail() {
  echo "FAIL: $*" >&2
  echo "---- screen ----" >&2
  tmux -L "$sock" capture-pane -t "$pane" -p -S -300 >&2 || true
  exit 1
}

command -v tmux >/dev/null || { echo "FAIL: tmux is not installed (scripts/install-deps.sh installs it)"; exit 1; }

# The shell in the pane may still write into $work while the server goes
# down: retry the removal, and never let clean-up change the test's status.
tmux_cleanup() {
  local status=$?
  tmux -L "$sock" kill-server 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    rm -rf "$work" 2>/dev/null && break
    sleep 0.2
  done
  exit "$status"
}
work=$(mktemp -d)
trap tmux_cleanup EXIT

screen() { tmux -L "$sock" capture-pane -t "$pane" -p -S -300; }
# wait_for TEXT SECONDS: until TEXT is on the screen.
wait_for() {
  local deadline=$((SECONDS + $2))
  while [ $SECONDS -lt $deadline ]; do
    if screen | grep -qF -- "$1"; then return 0; fi
    sleep 0.2
  done
  fail "'$1' did not appear within $2 s"
}
count() { screen | grep -cF -- "$1" || true; }
