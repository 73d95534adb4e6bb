#!/usr/bin/env bash
# Quantized decode on the CPU (issue 27): the random-weight 110M Llama (as run_cpu_bench.sh)
# in f32 and with its matrices in GGUF Q8_0 and Q4_0 (make_random_llama --dtype q8_0|q4_0,
# round to nearest through core/quant), `strata bench` on each, alternated with llama.cpp on
# the same files when its CPU peer is set up (LLAMACPP_DIR, see ../shared/peers/llamacpp-cpu:
# node_modules installed and tpshim.so built), each round after a memory bandwidth
# measurement. Prints one JSON object per line; the last line has the medians and the ratios
# to f32. Usage: bench/run_quant_bench.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
GEN=${GEN:-64}    # decode tokens per repetition
REPS=${REPS:-3}   # repetitions per run (medians)
TMP=${STRATA_BENCH_TMP:-/tmp/strata-bench}
LLAMACPP_DIR=${LLAMACPP_DIR:-/tmp/llamacpp-cpu}
mkdir -p "$TMP"
for dt in f32 q8_0 q4_0; do
  f="$TMP/llama-110m-$dt.gguf"
  [ -f "$f" ] || "$BUILD/bin/make_random_llama" --out "$f" --dim 768 --layers 12 --heads 12 --kv-heads 12 \
      --hidden 2048 --vocab 32000 --dtype "$dt" --seed 1 --context 1024 >&2
done
LOG="$TMP/quant_bench.jsonl"
: > "$LOG"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 0; r < ROUNDS; r++)); do
  for dt in f32 q8_0 q4_0; do
    m="$TMP/llama-110m-$dt.gguf"
    "$BUILD/bin/memory_bandwidth" --mib 1024 --reps 5 | tee -a "$LOG"
    "$BUILD/bin/strata" bench -m "$m" --prompt-tokens 128 --gen-tokens "$GEN" -r "$REPS" --json | tee -a "$LOG"
    if [ -f "$LLAMACPP_DIR/tpshim.so" ] && [ -d "$LLAMACPP_DIR/node_modules" ]; then
      (cd "$LLAMACPP_DIR" && LD_PRELOAD=$PWD/tpshim.so node bench.mjs -m "$m" -t 2 -p 128 -n "$GEN" -r "$REPS") |
        python3 -c 'import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); d["peer"]="llama.cpp"; d["model"]=sys.argv[1]; print(json.dumps(d))' "$m" |
        tee -a "$LOG"
    fi
  done
done
python3 - "$LOG" "$LOAD_START" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ours, peer = {}, {}
for d in rows:
    if d.get("bench") == "memory_read_bandwidth":
        continue
    name = d["model"].split("/")[-1].replace(".gguf", "")
    if d.get("peer") == "llama.cpp":
        peer.setdefault(name, {"prefill": [], "decode": []})
        peer[name]["prefill"].append(d["native_prompt_tok_per_s"])
        peer[name]["decode"].append(d["native_gen_tok_per_s"])
    else:
        ours.setdefault(name, {"prefill": [], "decode": [], "gbs": []})
        ours[name]["prefill"].append(d["prefill_tokens_per_s"])
        ours[name]["decode"].append(d["decode_tokens_per_s"])
        ours[name]["gbs"].append(d["decode_weight_gb_per_s"])
med = lambda v: round(statistics.median(v), 2) if v else None
summary = {}
for k, v in ours.items():
    s = {"prefill_tok_s": med(v["prefill"]), "decode_tok_s": med(v["decode"]),
         "decode_weight_gb_s": med(v["gbs"]), "rounds": len(v["decode"])}
    if k in peer:
        s["llamacpp_prefill_tok_s"] = med(peer[k]["prefill"])
        s["llamacpp_decode_tok_s"] = med(peer[k]["decode"])
    summary[k] = s
f32 = summary.get("llama-110m-f32", {}).get("decode_tok_s")
for k, s in summary.items():
    if f32:
        s["decode_vs_f32"] = round(s["decode_tok_s"] / f32, 2)
bw = [d["median_gb_per_s"] for d in rows if d.get("bench") == "memory_read_bandwidth"]
print(json.dumps({"summary": summary, "read_gb_per_s_median": med(bw), "loadavg_start": sys.argv[2],
                  "loadavg_end": sys.argv[3]}))
PY
