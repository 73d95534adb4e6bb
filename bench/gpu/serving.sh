#!/usr/bin/env bash
# Serving measurements on the GPU machine, after run_gpu.sh built $BUILD (default build-gpu):
#  issue 4: continuous batching (fcfs) vs the static policy on 1,000 mixed-length requests
#           (prompts and outputs 16-400 tokens), Llama-3-1B shape; and 100 requests sharing a
#           1,000-token prefix with and without the prefix cache (TTFT p50), Llama-3-8B shape
#  issue 5: `strata serve` (Llama-3-8B shape, Llama 3 tokenizer) under bench/openai_load's
#           closed loop against the same loop on the in-process engine (openai_load --offline)
#  issue 4, weight-bound: the same 1,000-request comparison on the Llama-3-8B shape
#           (batching8b), at --max-num-seqs 64 (a decode step costs about the same for few
#           or many sequences) and 256
# JSON results go to $OUT. Usage: bench/gpu/serving.sh [batching] [batching8b] [http]
# (default: batching http)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
BUILD="${BUILD:-build-gpu}"
OUT="${OUT:-$ROOT/gpu-logs}"
mkdir -p "$OUT"
B="$BUILD/bin/strata bench --device cuda --json"
PARTS="${*:-batching http}"

if [[ " $PARTS " == *" batching "* ]]; then
for policy in fcfs static; do
  echo "--- 1000 mixed requests, llama3-1b, policy $policy"
  timeout 150 $B --synthetic llama3-1b --num-requests 1000 --prompt-len-min 16 --prompt-len-max 400 \
    --output-len-min 16 --output-len-max 400 --max-num-seqs 256 --max-batched-tokens 8192 --scheduling-policy $policy \
    | tee "$OUT/serving_mixed_$policy.json"
done
for cache in on off; do
  echo "--- 100 requests sharing a 1000-token prefix, llama3-8b, prefix cache $cache"
  extra=""; [ $cache = off ] && extra="--no-prefix-cache"
  timeout 120 $B --synthetic llama3-8b --num-requests 100 --shared-prefix-fraction 1 --shared-prefix-tokens 1000 \
    --prompt-len-min 16 --prompt-len-max 64 --output-len-min 32 --output-len-max 32 --max-num-seqs 64 \
    --max-batched-tokens 4096 $extra | tee "$OUT/serving_prefix_$cache.json"
done
fi

if [[ " $PARTS " == *" batching8b "* ]]; then
for seqs in 64 256; do
  for policy in fcfs static; do
    echo "--- 1000 mixed requests, llama3-8b, max-num-seqs $seqs, policy $policy"
    timeout 200 $B --synthetic llama3-8b --num-requests 1000 --prompt-len-min 16 --prompt-len-max 400 \
      --output-len-min 16 --output-len-max 400 --max-num-seqs $seqs --max-batched-tokens 8192 \
      --scheduling-policy $policy | tee "$OUT/serving_mixed_8b_${seqs}_$policy.json"
  done
done
fi

if [[ " $PARTS " == *" http "* ]]; then
TOK="$ROOT/.gpu/shared/tokenizers/llama3/tokenizer.json"
PROMPT="The annual report of the company describes revenue, costs and the outlook for next year in detail."
LOADGEN="$BUILD/bin/openai_load"
# STRATA_HTTP_LEVELS: the closed loop's concurrency levels; STRATA_HTTP_MAX_NUM_SEQS: the
# server's --max-num-seqs (default 64, as in the earlier runs; "auto" is serve's default, 256
# on GPUs), which the in-process engine then takes too (auto: 256).
LEVELS="${STRATA_HTTP_LEVELS:-16,64}"
SEQS="${STRATA_HTTP_MAX_NUM_SEQS:-64}"
OFFLINE_SEQS="$SEQS"; [ "$SEQS" = auto ] && OFFLINE_SEQS=256
REQUESTS="${STRATA_HTTP_REQUESTS:-256}"
# STRATA_HTTP_MODEL_FLAGS: extra model flags for the server and the in-process engine alike
# (e.g. "--synthetic-dtype fp8 --kv-dtype fp8"); STRATA_HTTP_TAG names the output files.
MODEL_FLAGS="${STRATA_HTTP_MODEL_FLAGS:-}"
TAG="${STRATA_HTTP_TAG:+_$STRATA_HTTP_TAG}"
echo "--- strata serve vs in-process engine, llama3-8b $MODEL_FLAGS, concurrency $LEVELS, max-num-seqs $SEQS"
"$BUILD/bin/strata" serve --synthetic llama3-8b $MODEL_FLAGS --tokenizer "$TOK" --device cuda --port 8123 \
  --max-num-seqs "$SEQS" > "$OUT/serve$TAG.log" 2>&1 &
SERVER=$!
for i in $(seq 1 120); do
  curl -sf http://127.0.0.1:8123/health >/dev/null 2>&1 && break
  sleep 1
done
timeout 150 "$LOADGEN" --url http://127.0.0.1:8123 --concurrency $LEVELS --requests "$REQUESTS" --max-tokens 128 \
  --prompt "$PROMPT" | tee "$OUT/http_load$TAG.json"
curl -s http://127.0.0.1:8123/metrics | grep -E "^strata_(requests|kv)" | head -12
kill -TERM $SERVER; wait $SERVER; echo "server exit: $?"
if [ -z "$MODEL_FLAGS" ]; then  # openai_load --offline takes no model flags
timeout 150 "$LOADGEN" --offline synthetic:llama3-8b --tokenizer "$TOK" --max-num-seqs "$OFFLINE_SEQS" \
  --concurrency $LEVELS --requests "$REQUESTS" --max-tokens 128 --prompt "$PROMPT" | tee "$OUT/offline_load.json"
fi
fi
