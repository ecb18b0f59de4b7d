#!/usr/bin/env bash
# heartbeat.sh LABEL CMD...: run CMD, printing "LABEL: still running (N s)" every 15 s while it runs, so a
# long quiet step (pip installing wheels prints nothing for a minute) still shows progress; CMD's exit status.
label=$1; shift
start=$SECONDS
( trap 'kill "$nap" 2>/dev/null; exit 0' TERM  # its sleep goes with it (no orphan holding stdout open)
  while :; do sleep 15 & nap=$!; wait "$nap"; echo "  $label: still running ($((SECONDS - start)) s)"; done ) &
beat=$!
"$@"
status=$?
kill "$beat" 2>/dev/null
exit "$status"
