#!/usr/bin/env bash
# Throughput and latency against concurrency, for the plots of docs/benchmarks.md: for each
# concurrency C, `strata bench` in its offline serving mode (the engine, continuous batching)
# with C requests of PROMPT in / OUTPUT out tokens and --max-num-seqs C, so every decode step
# runs a batch of C. One JSON line per run (strata bench's own, plus "concurrency").
# Usage: bench/concurrency_sweep.sh STRATA_BIN OUT.jsonl "MODEL_FLAGS" [CONCURRENCIES] [PROMPT] [OUTPUT]
#   e.g. bench/concurrency_sweep.sh build/bin/strata bench/results/h200/sweep_llama3_8b_bf16.jsonl \
#          "--synthetic llama3-8b --device cuda" "1 2 4 8 16 32 64 128 256"
set -uo pipefail
BIN=$1 OUTFILE=$2 MODEL=$3
LEVELS=${4:-"1 2 4 8 16 32 64 128 256"}
PROMPT=${5:-128} OUTPUT=${6:-128}
mkdir -p "$(dirname "$OUTFILE")"
: > "$OUTFILE"
for c in $LEVELS; do
  # One wave: C requests at once, so TTFT is the prefill under load, not time in a queue.
  n=$c
  # shellcheck disable=SC2086
  line=$(timeout 300 "$BIN" bench $MODEL --json --num-requests "$n" --max-num-seqs "$c" \
    --prompt-len-min "$PROMPT" --prompt-len-max "$PROMPT" --output-len-min "$OUTPUT" --output-len-max "$OUTPUT" \
    --max-batched-tokens 8192 2>/dev/null | tail -1)
  if [ -z "$line" ]; then echo "concurrency $c: no result" >&2; continue; fi
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["concurrency"]=int(sys.argv[2]); print(json.dumps(r))' \
    "$line" "$c" | tee -a "$OUTFILE" | python3 -c 'import json,sys; r=json.loads(sys.stdin.read())
print("concurrency %4d  output tok/s %9.1f  TTFT p50 %8.2f ms  TPOT p50 %7.2f ms" % (r["concurrency"], r["output_tokens_per_s"], r["ttft_ms"]["p50"], r["tpot_ms"]["p50"]))' >&2
done
