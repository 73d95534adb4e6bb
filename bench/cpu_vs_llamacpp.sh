#!/usr/bin/env bash
# strata's CPU backend beside llama.cpp (../shared/peers/llamacpp-cpu, set up as its README
# says, in $LLAMACPP_DIR, default /tmp/llamacpp-cpu) on the same GGUF files (issue 32): per
# round and model, the memory read bandwidth, then both engines, in alternating order from
# round to round (this VM's bandwidth moves from minute to minute). Same work on both sides:
# one prefill of P prompt tokens, then N greedy single-token decodes, T threads, medians.
# Prints one JSON object per measurement, then a markdown table of medians (decode as a
# fraction of the bandwidth floor: the bytes a decode step reads x tok/s / measured read GB/s;
# the embedding table of an untied model is not among them). strata runs with
# --device cpu, so the GPU backends' plugins (and their runtimes' memory) are not loaded.
# Usage: bench/cpu_vs_llamacpp.sh [BUILD_DIR] [ROUNDS] [MODEL.gguf ...]
#   no models: the 110M shape in f32 and f16 and the TinyLlama-1.1B shape in f16, made with
#   make_random_llama in $STRATA_BENCH_TMP (default /tmp/strata-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
LLAMACPP_DIR=${LLAMACPP_DIR:-/tmp/llamacpp-cpu}
THREADS=${THREADS:-2} P=${P:-128} N=${N:-64} REPS=${REPS:-3}
TMP=${STRATA_BENCH_TMP:-/tmp/strata-bench}
mkdir -p "$TMP"
make_model() {  # name dim layers heads kv hidden dtype
  local f="$TMP/$1.gguf"
  [ -f "$f" ] || "$BUILD/bin/make_random_llama" --out "$f" --dim "$2" --layers "$3" --heads "$4" --kv-heads "$5" \
      --hidden "$6" --vocab 32000 --dtype "$7" --seed 1 --context 2048 >&2
  echo "$f"
}
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  models=("$(make_model llama-110m-f32 768 12 12 12 2048 f32)" "$(make_model llama-110m-f16 768 12 12 12 2048 f16)"
          "$(make_model tinyllama-1.1b-f16 2048 22 32 4 5632 f16)")
fi
[ -f "$LLAMACPP_DIR/tpshim.so" ] || { echo "set up $LLAMACPP_DIR first (see ../shared/peers/llamacpp-cpu/README.md)" >&2; exit 1; }
LOG="$TMP/cpu_vs_llamacpp.jsonl"
: > "$LOG"
run_strata() {
  "$BUILD/bin/strata" bench --device cpu -m "$1" --prompt-tokens "$P" --gen-tokens "$N" -r "$REPS" --threads "$THREADS" --json |
    python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({"engine":"strata","model":sys.argv[1],"prefill_tok_s":d["prefill_tokens_per_s"],"decode_tok_s":d["decode_tokens_per_s"],"weight_bytes":d["weight_bytes"],"decode_read_bytes":d.get("decode_read_bytes",d["weight_bytes"]),"peak_rss_bytes":d["peak_rss_bytes"]}))' "$1"
}
run_llamacpp() {
  local out rss
  out=$( { /usr/bin/time -f 'RSS_KB %M' env LD_PRELOAD="$LLAMACPP_DIR/tpshim.so" node "$LLAMACPP_DIR/bench.mjs" -m "$1" -t "$THREADS" \
      -p "$P" -n "$N" -r "$REPS"; } 2>"$TMP/llamacpp.err")
  rss=$(grep -o 'RSS_KB [0-9]*' "$TMP/llamacpp.err" | tail -1 | cut -d' ' -f2)
  echo "$out" | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({"engine":"llama.cpp","model":sys.argv[1],"prefill_tok_s":d["native_prompt_tok_per_s"],"decode_tok_s":d["native_gen_tok_per_s"],"peak_rss_bytes":int(sys.argv[2] or 0)*1024}))' "$1" "$rss"
}
for ((r = 0; r < ROUNDS; r++)); do
  for m in "${models[@]}"; do
    "$BUILD/bin/memory_bandwidth" --mib 1024 --reps 5 | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); d["model"]=sys.argv[1]; print(json.dumps(d))' "$m" | tee -a "$LOG"
    if (( r % 2 == 0 )); then order=(run_strata run_llamacpp); else order=(run_llamacpp run_strata); fi
    for f in "${order[@]}"; do "$f" "$m" | tee -a "$LOG"; done
  done
done
python3 - "$LOG" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
bw, per = {}, {}
for d in rows:
    m = d["model"].split("/")[-1]
    if d.get("bench") == "memory_read_bandwidth":
        bw.setdefault(m, []).append(d["median_gb_per_s"]); continue
    e = per.setdefault(m, {}).setdefault(d["engine"], {"pre": [], "dec": [], "rss": [], "wb": []})
    e["pre"].append(d["prefill_tok_s"]); e["dec"].append(d["decode_tok_s"]); e["rss"].append(d["peak_rss_bytes"])
    if "weight_bytes" in d: e["wb"].append(d["weight_bytes"])
    if "decode_read_bytes" in d: e.setdefault("rb", []).append(d["decode_read_bytes"])
med = statistics.median
print("| model | read GB/s | llama.cpp decode | strata decode | strata/llama.cpp | strata share of floor | llama.cpp prefill | strata prefill | strata/llama.cpp | strata peak RSS / weights |")
print("|---|---|---|---|---|---|---|---|---|---|")
summary = {}
for m, e in per.items():
    s, l = e.get("strata"), e.get("llama.cpp")
    if not s or not l: continue
    g = med(bw[m]); wb = med(s["wb"])
    # The floor: the bytes a decode step reads (not the embedding table when the head is a
    # separate weight) at the measured read bandwidth.
    rb = med(s["rb"]) if s.get("rb") else wb
    floor = g * 1e9 / rb
    row = dict(read_gb_s=round(g, 1), llamacpp_decode=round(med(l["dec"]), 2), strata_decode=round(med(s["dec"]), 2),
               decode_ratio=round(med(s["dec"]) / med(l["dec"]), 3), strata_floor_share=round(med(s["dec"]) / floor, 3),
               llamacpp_prefill=round(med(l["pre"]), 1), strata_prefill=round(med(s["pre"]), 1),
               prefill_ratio=round(med(s["pre"]) / med(l["pre"]), 3), strata_rss_over_weights=round(med(s["rss"]) / wb, 3),
               llamacpp_peak_rss_mib=round(med(l["rss"]) / 2**20, 1), rounds=len(s["dec"]))
    summary[m] = row
    print(f"| {m} | {row['read_gb_s']} | {row['llamacpp_decode']} | {row['strata_decode']} | {row['decode_ratio']} | "
          f"{row['strata_floor_share']} | {row['llamacpp_prefill']} | {row['strata_prefill']} | {row['prefill_ratio']} | "
          f"{row['strata_rss_over_weights']} |")
print(json.dumps({"summary": summary}))
PY
