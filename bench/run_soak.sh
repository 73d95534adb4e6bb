#!/usr/bin/env bash
# Soak test (not in CI): starts `strata serve` on stories260K (with the tests' chat template,
# since the model has none) and drives it with bench/soak for MINUTES (default 30), then
# stops it with SIGTERM and reports how long the exit took. Output: build/soak/soak-DATE.jsonl
# (one line a minute, the summary last) and the server's log beside it.
#   bench/run_soak.sh [MINUTES] [CLIENTS] [extra `strata serve` flags...]
# Environment: STRATA_BUILD_DIR (default build), SHARED (default ../shared).
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
OMP_WAIT_POLICY=PASSIVE "$BUILD/bin/strata" serve -m "$MODEL" --chat-template tests/serving/data/test_chat_template.jinja \
  --port 0 "$@" >"$LOG" 2>&1 &
PID=$!
trap 'kill -9 $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  grep -q "listening on http://" "$LOG" && break
  kill -0 $PID 2>/dev/null || { echo "run_soak: the server exited:" >&2; cat "$LOG" >&2; exit 1; }
  sleep 0.1
done
URL=$(grep -o "http://[0-9.]*:[0-9]*" "$LOG" | head -n 1)
echo "run_soak: server pid $PID at $URL; $MINUTES min, $CLIENTS clients; results $RESULT" >&2
set +e
"$BUILD/bin/soak" --url "$URL" --pid $PID --minutes "$MINUTES" --clients "$CLIENTS" | tee "$RESULT"
SOAK_RC=${PIPESTATUS[0]}
set -e
t0=$(date +%s.%N)
kill -TERM $PID
EXIT=0
wait $PID || EXIT=$?
t1=$(date +%s.%N)
trap - EXIT
printf '{"server_exit_status":%d,"sigterm_to_exit_seconds":%s}\n' "$EXIT" "$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}")" | tee -a "$RESULT"
exit $SOAK_RC
