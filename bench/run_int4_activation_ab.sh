#!/usr/bin/env bash
# Q4_0 decode with int8 against int16 activation blocks (the CPU backend's int4_activations,
# set through STRATA_CPU_INT4_ACTIVATIONS), alternated with llama.cpp on the same file when its
# CPU peer is set up (LLAMACPP_DIR, as bench/run_quant_bench.sh), each round after a memory
# bandwidth measurement. The model: run_quant_bench.sh's random-weight 110M Llama in GGUF Q4_0.
# One JSON object per line; the last line has the medians and the per-round ratios.
# Usage: bench/run_int4_activation_ab.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
GEN=${GEN:-64}
REPS=${REPS:-3}
TMP=${STRATA_BENCH_TMP:-/tmp/strata-bench}
LLAMACPP_DIR=${LLAMACPP_DIR:-/tmp/llamacpp-cpu}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
mkdir -p "$TMP"
m="$TMP/llama-110m-q4_0.gguf"
[ -f "$m" ] || "$BUILD/bin/make_random_llama" --out "$m" --dim 768 --layers 12 --heads 12 --kv-heads 12 \
    --hidden 2048 --vocab 32000 --dtype q4_0 --seed 1 --context 1024 >&2
LOG="$TMP/int4_activation_ab.jsonl"
: > "$LOG"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 0; r < ROUNDS; r++)); do
  "$BUILD/bin/memory_bandwidth" --mib 1024 --reps 5 | tee -a "$LOG"
  for acts in int8 peer int16; do
    if [ "$acts" = peer ]; then
      if [ -f "$LLAMACPP_DIR/tpshim.so" ] && [ -d "$LLAMACPP_DIR/node_modules" ]; then
        (cd "$LLAMACPP_DIR" && LD_PRELOAD=$PWD/tpshim.so node bench.mjs -m "$m" -t 2 -p 128 -n "$GEN" -r "$REPS") |
          python3 -c 'import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(json.dumps({"run": "llama.cpp", "round": int(sys.argv[1]), "decode_tok_s": d["native_gen_tok_per_s"], "prefill_tok_s": d["native_prompt_tok_per_s"]}))' "$r" |
          tee -a "$LOG"
      fi
      continue
    fi
    STRATA_CPU_INT4_ACTIVATIONS=$acts "$BUILD/bin/strata" bench -m "$m" --prompt-tokens 128 --gen-tokens "$GEN" -r "$REPS" --json |
      python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({"run": "strata-" + sys.argv[1], "round": int(sys.argv[2]), "decode_tok_s": d["decode_tokens_per_s"], "prefill_tok_s": d["prefill_tokens_per_s"]}))' "$acts" "$r" |
      tee -a "$LOG"
  done
done
python3 - "$LOG" "$LOAD_START" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
runs = {}
for d in rows:
    if "run" in d:
        runs.setdefault(d["round"], {})[d["run"]] = d["decode_tok_s"]
med = lambda v: round(statistics.median(v), 2) if v else None
per_round = []
for r, v in sorted(runs.items()):
    e = {"round": r, **{k: round(x, 1) for k, x in v.items()}}
    if "strata-int8" in v and "strata-int16" in v:
        e["int8_vs_int16"] = round(v["strata-int8"] / v["strata-int16"], 2)
    if "strata-int8" in v and "llama.cpp" in v:
        e["int8_vs_llamacpp"] = round(v["strata-int8"] / v["llama.cpp"], 2)
    per_round.append(e)
col = lambda k: [v[k] for v in runs.values() if k in v]
bw = [d["median_gb_per_s"] for d in rows if d.get("bench") == "memory_read_bandwidth"]
print(json.dumps({"summary": {"strata_int8_decode_tok_s": med(col("strata-int8")),
                              "strata_int16_decode_tok_s": med(col("strata-int16")),
                              "llamacpp_decode_tok_s": med(col("llama.cpp"))},
                  "rounds": per_round, "read_gb_per_s_median": med(bw),
                  "loadavg_start": sys.argv[2], "loadavg_end": sys.argv[3]}))
PY
