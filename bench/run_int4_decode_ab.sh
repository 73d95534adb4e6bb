#!/usr/bin/env bash
# INT4 decode against f32 decode in the same run (issue 27: INT4 >= 3x our f32, >= llama.cpp
# on its own Q4_0): the 110M-shape random Llama as f32, GGUF Q4_0 and (if present) an INT4
# g128 GPTQ-layout directory (`strata quantize --method rtn --group-size 128` of the f32
# file), `strata bench` of each alternated per round with the same files run by a second
# build (BASE, e.g. main's, for an A/B of a change) and by llama.cpp on the Q4_0 file (when
# its CPU peer is set up in LLAMACPP_DIR; its runs get a timeout, its spinning pool collapses
# on a loaded machine). Each round starts with a memory bandwidth measurement. JSON lines;
# the last has per-build medians, the best round (the quietest moment) and the ratios.
# Usage: bench/run_int4_decode_ab.sh BUILD [BASE_BUILD] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BASE=${2:-}
ROUNDS=${3:-5}
P=${P:-128}
GEN=${GEN:-64}
REPS=${REPS:-3}
TMP=${STRATA_BENCH_TMP:-/tmp/strata-bench}
LLAMACPP_DIR=${LLAMACPP_DIR:-/tmp/llamacpp-cpu}
mkdir -p "$TMP"
for dt in f32 q4_0; do
  f="$TMP/llama-110m-$dt.gguf"
  [ -f "$f" ] || "$BUILD/bin/make_random_llama" --out "$f" --dim 768 --layers 12 --heads 12 --kv-heads 12 \
      --hidden 2048 --vocab 32000 --dtype "$dt" --seed 1 --context 1024 >&2
done
G128="$TMP/llama-110m-rtn-g128"
LOG="$TMP/int4_decode_ab.jsonl"
: > "$LOG"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
run() {  # build label model
  "$1/bin/strata" bench --device cpu -m "$3" --prompt-tokens "$P" --gen-tokens "$GEN" -r "$REPS" --threads 2 --json \
      2>/dev/null | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); d["build"]=sys.argv[1]; d["round"]=int(sys.argv[2]); print(json.dumps(d))' "$2" "$r" |
      tee -a "$LOG"
}
for ((r = 0; r < ROUNDS; r++)); do
  "$BUILD/bin/memory_bandwidth" --mib 1024 --reps 5 | tee -a "$LOG"
  for b in "$BUILD" ${BASE:+"$BASE"}; do
    label=$([ "$b" = "$BUILD" ] && echo new || echo base)
    run "$b" "$label" "$TMP/llama-110m-q4_0.gguf"
    run "$b" "$label" "$TMP/llama-110m-f32.gguf"
    [ -d "$G128" ] && run "$b" "$label" "$G128"
  done
  if [ -f "$LLAMACPP_DIR/tpshim.so" ] && [ -d "$LLAMACPP_DIR/node_modules" ]; then
    (cd "$LLAMACPP_DIR" && timeout 150 env LD_PRELOAD=$PWD/tpshim.so node bench.mjs -m "$TMP/llama-110m-q4_0.gguf" -t 2 \
        -p "$P" -n "$GEN" -r "$REPS") 2>/dev/null |
      python3 -c 'import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); d["peer"]="llama.cpp"; d["round"]=int(sys.argv[1]); print(json.dumps(d))' "$r" |
      tee -a "$LOG" || echo '{"peer": "llama.cpp", "timed_out": true}' | tee -a "$LOG"
  fi
done
python3 - "$LOG" "$LOAD_START" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
runs = {}
for d in rows:
    if d.get("bench") == "memory_read_bandwidth" or d.get("timed_out"):
        continue
    if d.get("peer") == "llama.cpp":
        runs.setdefault(("llama.cpp", "q4_0"), {})[d["round"]] = d["native_gen_tok_per_s"]
    else:
        name = d["model"].rstrip("/").split("/")[-1].replace(".gguf", "").replace("llama-110m-", "")
        runs.setdefault((d["build"], name), {})[d["round"]] = d["decode_tokens_per_s"]
med = lambda v: round(statistics.median(v), 2) if v else None
out = {"decode_tok_s_median": {f"{b} {m}": med(list(v.values())) for (b, m), v in runs.items()},
       "decode_tok_s_max": {f"{b} {m}": round(max(v.values()), 2) for (b, m), v in runs.items()}}
ratios = {}
for b in ("new", "base"):
    q, f = runs.get((b, "q4_0"), {}), runs.get((b, "f32"), {})
    per_round = [q[r] / f[r] for r in q if r in f]
    if per_round:
        ratios[f"{b} q4_0 / f32, median of per-round ratios"] = round(statistics.median(per_round), 3)
    l = runs.get(("llama.cpp", "q4_0"), {})
    per_round = [q[r] / l[r] for r in q if r in l]
    if per_round:
        ratios[f"{b} q4_0 / llama.cpp q4_0, median of per-round ratios"] = round(statistics.median(per_round), 3)
out["ratios"] = ratios
bw = [d["median_gb_per_s"] for d in rows if d.get("bench") == "memory_read_bandwidth"]
out["read_gb_per_s"] = bw
out["loadavg_start"], out["loadavg_end"] = sys.argv[2], sys.argv[3]
print(json.dumps(out))
PY
