#!/usr/bin/env bash
# Two strata builds on the CPU backend, alternating on one GGUF file: per round the memory
# read bandwidth, then both builds in an order that flips each round (this VM's bandwidth and
# the load from other users move from minute to minute, so only same-round ratios mean much).
# One line per run: round, build, read GB/s, decode and prefill tok/s, peak RSS / weights,
# load average. Usage: bench/cpu_ab_builds.sh BUILD_A BUILD_B MODEL.gguf [ROUNDS] [GEN]
#   env: P (prompt tokens, 128), REPS (timed runs per bench, 3), THREADS (2).
set -euo pipefail
A=$1 B=$2 MODEL=$3 ROUNDS=${4:-3} GEN=${5:-64}
P=${P:-128} REPS=${REPS:-3} THREADS=${THREADS:-2}
for ((r = 0; r < ROUNDS; r++)); do
  bw=$("$A/bin/memory_bandwidth" --mib 1024 --reps 5 | python3 -c 'import json,sys; print(json.load(sys.stdin)["median_gb_per_s"])')
  if (( r % 2 == 0 )); then order=("$A" "$B"); else order=("$B" "$A"); fi
  for b in "${order[@]}"; do
    "$b/bin/strata" bench --device cpu -m "$MODEL" --prompt-tokens "$P" --gen-tokens "$GEN" -r "$REPS" \
        --threads "$THREADS" --json |
      python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({"round": int(sys.argv[1]), "build": sys.argv[2], "read_gb_s": float(sys.argv[3]), "decode_tok_s": round(d["decode_tokens_per_s"], 2), "prefill_tok_s": round(d["prefill_tokens_per_s"], 1), "rss_over_weights": round(d["peak_rss_bytes"] / d["weight_bytes"], 4), "load": open("/proc/loadavg").read().split()[0]}))' \
        "$r" "$b" "$bw"
  done
done
