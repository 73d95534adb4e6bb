#!/usr/bin/env bash
# CPU decode beside busy processes (issue 26): `strata bench` with --threads 1 and with all
# threads (the default), on stories260K and on a random-weight 110M f32 Llama, quiet and
# beside 1 and 3 busy processes (`yes > /dev/null`). Everything in one run, alternating
# thread counts (and builds, when a second build is given) inside each round, so that what
# else runs on the machine affects both sides alike; the figure that matters is the ratio
# default / --threads 1 at each load. Prints one JSON object per run, then a summary line.
# Usage: bench/cpu_contention_bench.sh [BUILD_DIR] [ROUNDS] [BASE_BUILD_DIR]
#   BASE_BUILD_DIR: an older build (e.g. of main) measured alternately, labelled "base".
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
BASE=${3:-}
TMP=${STRATA_BENCH_TMP:-/tmp/strata-bench}
mkdir -p "$TMP"
M110="$TMP/llama-110m-f32.gguf"
[ -f "$M110" ] || "$BUILD/bin/make_random_llama" --out "$M110" --dim 768 --layers 12 --heads 12 --kv-heads 12 \
    --hidden 2048 --vocab 32000 --dtype f32 --seed 1 --context 1024 >&2
M260=../shared/models/stories260K/stories260K.gguf
builds=("new:$BUILD")
[ -n "$BASE" ] && builds+=("base:$BASE")
busy=()
stop_busy() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; busy=(); }
trap stop_busy EXIT
LOG="$TMP/contention.jsonl"
: > "$LOG"
for load in 0 1 3; do
  stop_busy
  for ((i = 0; i < load; i++)); do yes > /dev/null & busy+=($!); done
  for ((r = 0; r < ROUNDS; r++)); do
    for model in "$M260" "$M110"; do
      if [ "$model" = "$M260" ]; then args=(--prompt-tokens 32 --gen-tokens 256 -r 3); else args=(--prompt-tokens 32 --gen-tokens 32 -r 2); fi
      for threads in 1 0; do
        for b in "${builds[@]}"; do
          label=${b%%:*} dir=${b#*:}
          line=$("$dir/bin/strata" bench -m "$model" "${args[@]}" --threads "$threads" --json)
          echo "$line" | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); d.update(load=int(sys.argv[1]), build=sys.argv[2], threads_flag=int(sys.argv[3])); print(json.dumps(d))' "$load" "$label" "$threads" | tee -a "$LOG"
        done
      done
    done
  done
done
stop_busy
python3 - "$LOG" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
acc = {}
for d in rows:
    k = (d["build"], d["model"].split("/")[-1], d["load"])
    acc.setdefault(k, {}).setdefault(d["threads_flag"], []).append(d["decode_tokens_per_s"])
summary = []
for (build, model, load), v in sorted(acc.items()):
    one = statistics.median(v.get(1, [0])); all_ = statistics.median(v.get(0, [0]))
    summary.append({"build": build, "model": model, "busy_processes": load,
                    "decode_tok_s_threads1": round(one, 1), "decode_tok_s_default": round(all_, 1),
                    "default_over_threads1": round(all_ / one, 3) if one else None, "rounds": len(v.get(0, []))})
print(json.dumps({"summary": summary}))
PY
