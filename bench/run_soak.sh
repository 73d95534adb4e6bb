#!/usr/bin/env bash
# Soak test (not in CI): starts `strata serve` on stories260K (with the tests' chat template,
# since the model has none) and drives it with bench/soak for MINUTES (default 30), then
# stops it with SIGTERM and reports how long the exit took. Output: build/soak/soak-DATE.jsonl
# (one line a minute, the summary last) and the server's log beside it.
#   bench/run_soak.sh [MINUTES] [CLIENTS] [extra `strata serve` flags...]
# Environment: STRATA_BUILD_DIR (default build), SHARED (default ../shared); the server
# inherits the rest (e.g. MALLOC_ARENA_MAX). STRATA_SOAK_MALLOC_STATS=1: glibc's
# malloc_stats() of the server (per-arena bytes taken from the system and in use) after two
# minutes and at the end, then malloc_trim(0) and the RSS before and after it, through gdb
# (into the server's log): whether RSS growth is memory in use (a leak, a growing cache) or
# memory the allocator holds (fragmentation, arenas). STRATA_SOAK_WRAP: a command the server
# runs under, e.g. "heaptrack -o build/soak/heaptrack" (RSS is then read from the server
# process itself, the wrapper's descendant named strata).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-30}
CLIENTS=${2:-8}
shift $(( $# >= 2 ? 2 : $# ))
BUILD=${STRATA_BUILD_DIR:-build}
SHARED=${SHARED:-../shared}
MODEL="$SHARED/models/stories260K/stories260K.gguf"
OUT="$BUILD/soak"
mkdir -p "$OUT"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
LOG="$OUT/server-$STAMP.log"
RESULT="$OUT/soak-$STAMP.jsonl"
for b in strata soak; do
  [ -x "$BUILD/bin/$b" ] || { echo "run_soak: build $BUILD/bin/$b first (STRATA_TARGETS=\"strata strata-backend-cpu soak\")" >&2; exit 1; }
done
# OMP_WAIT_POLICY=PASSIVE: the host is shared; spinning OpenMP threads would distort it.
# shellcheck disable=SC2086
OMP_WAIT_POLICY=PASSIVE ${STRATA_SOAK_WRAP:-} "$BUILD/bin/strata" serve -m "$MODEL" --chat-template tests/serving/data/test_chat_template.jinja \
  --port 0 "$@" >"$LOG" 2>&1 &
PID=$!
WRAPPER=$PID
trap 'kill -9 $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  grep -q "listening on http://" "$LOG" && break
  kill -0 $PID 2>/dev/null || { echo "run_soak: the server exited:" >&2; cat "$LOG" >&2; exit 1; }
  sleep 0.1
done
if [ -n "${STRATA_SOAK_WRAP:-}" ]; then  # the server: the wrapper's descendant named strata
  todo=$WRAPPER
  while [ -n "$todo" ]; do
    next=""
    for p in $todo; do
      [ "$(cat /proc/$p/comm 2>/dev/null)" = strata ] && PID=$p
      next="$next $(pgrep -P "$p" | tr '\n' ' ' || true)"
    done
    todo=$(echo $next)
  done
fi
URL=$(grep -o "http://[0-9.]*:[0-9]*" "$LOG" | head -n 1)
echo "run_soak: server pid $PID at $URL; $MINUTES min, $CLIENTS clients; results $RESULT" >&2
rss() { awk '/^VmRSS:/ {print $2}' /proc/$PID/status; }
malloc_stats() {  # $1: a label in the server's log
  echo "== malloc_stats ($1): VmRSS $(rss) kB" >>"$LOG"
  gdb -p $PID -batch -ex 'call (void)malloc_stats()' >/dev/null 2>&1
}
if [ -n "${STRATA_SOAK_MALLOC_STATS:-}" ]; then
  (sleep 120 && malloc_stats "after 2 minutes") &
fi
set +e
"$BUILD/bin/soak" --url "$URL" --pid $PID --minutes "$MINUTES" --clients "$CLIENTS" | tee "$RESULT"
SOAK_RC=${PIPESTATUS[0]}
set -e
if [ -n "${STRATA_SOAK_MALLOC_STATS:-}" ]; then
  malloc_stats "at the end"
  before=$(rss)
  gdb -p $PID -batch -ex 'call (int)malloc_trim(0)' >/dev/null 2>&1
  printf '{"rss_kb_before_malloc_trim":%s,"rss_kb_after_malloc_trim":%s}\n' "$before" "$(rss)" | tee -a "$RESULT"
fi
t0=$(date +%s.%N)
kill -TERM $PID
EXIT=0
if [ "$WRAPPER" != "$PID" ]; then
  while kill -0 $PID 2>/dev/null; do sleep 0.05; done
  wait $WRAPPER || true
else
  wait $PID || EXIT=$?
fi
t1=$(date +%s.%N)
trap - EXIT
printf '{"server_exit_status":%d,"sigterm_to_exit_seconds":%s}\n' "$EXIT" "$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}")" | tee -a "$RESULT"
exit $SOAK_RC
