#!/usr/bin/env bash
# CPU benchmarks recorded in docs/benchmarks.md: `strata bench` on stories260K and on a
# random-weight 110M Llama shape (dim 768, 12 layers, 12 heads, hidden 2048, vocab 32000) in
# f32 and bf16, each run right after a measurement of the memory read bandwidth, so that the
# decode's share of the bandwidth floor is taken under the same conditions (a shared VM's
# bandwidth moves a lot from minute to minute). Prints one JSON object per line; the last
# line summarizes the medians. Usage: bench/run_cpu_bench.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-5}
TMP=${STRATA_BENCH_TMP:-/tmp/strata-bench}
mkdir -p "$TMP"
for dt in f32 bf16; do
  f="$TMP/llama-110m-$dt.gguf"
  [ -f "$f" ] || "$BUILD/bin/make_random_llama" --out "$f" --dim 768 --layers 12 --heads 12 --kv-heads 12 \
      --hidden 2048 --vocab 32000 --dtype "$dt" --seed 1 --context 1024 >&2
done
models=("$TMP/llama-110m-f32.gguf" "$TMP/llama-110m-bf16.gguf")
[ -f ../shared/models/stories260K/stories260K.gguf ] && models+=(../shared/models/stories260K/stories260K.gguf)
LOG="$TMP/cpu_bench.jsonl"
: > "$LOG"
for ((r = 0; r < ROUNDS; r++)); do
  for m in "${models[@]}"; do
    "$BUILD/bin/memory_bandwidth" --mib 1024 --reps 5 | tee -a "$LOG"
    "$BUILD/bin/strata" bench -m "$m" --prompt-tokens 128 --gen-tokens 64 -r 3 --json | tee -a "$LOG"
  done
done
python3 - "$LOG" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
out = {}
bw = None
for d in rows:
    if d.get("bench") == "memory_read_bandwidth":
        bw = d["median_gb_per_s"]
        continue
    m = out.setdefault(d["model"].split("/")[-1], {"prefill": [], "decode": [], "gbs": [], "floor": [], "rss": []})
    m["prefill"].append(d["prefill_tokens_per_s"])
    m["decode"].append(d["decode_tokens_per_s"])
    m["gbs"].append(d["decode_weight_gb_per_s"])
    m["floor"].append(d["decode_weight_gb_per_s"] / bw)
    m["rss"].append(d["peak_rss_bytes"] / 2**20)
summary = {k: {"prefill_tok_s": round(statistics.median(v["prefill"]), 1),
               "decode_tok_s": round(statistics.median(v["decode"]), 2),
               "decode_weight_gb_s": round(statistics.median(v["gbs"]), 2),
               "decode_fraction_of_bandwidth": round(statistics.median(v["floor"]), 3),
               "peak_rss_mib": round(statistics.median(v["rss"]), 1), "rounds": len(v["decode"])}
           for k, v in out.items()}
print(json.dumps({"summary": summary}))
PY
