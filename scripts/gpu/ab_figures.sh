#!/usr/bin/env bash
# The issue-3 figures (128 and 32 concurrent sequences, batch-1 decode, the 4,096-token
# prefill) from a base commit's build and this one, alternately on one lent machine
# (scripts/gpu/ab_base.sh with these four benchmarks). On the build machine first:
#   git archive --format=tar.gz -o .gpu/base.tar.gz <base-commit>
# Usage (repo root, on the GPU machine, after run_gpu.sh build): bash scripts/gpu/ab_figures.sh [ROUNDS]
# Then: python3 scripts/gpu/summarize_ab.py "$OUT/ab_base.jsonl"
set -uo pipefail
cd "$(cd "$(dirname "$0")/../.." && pwd)"
S="bench --synthetic llama3-8b --device cuda --json"
SV="--prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 --output-len-max 128 --max-batched-tokens 8192"
export STRATA_AB_ARGS="$S --num-requests 128 --max-num-seqs 128 $SV;$S --prompt-tokens 128 --gen-tokens 128 -r 3;$S --prompt-tokens 4096 --gen-tokens 2 --batch-tokens 4096 -r 3;$S --num-requests 32 --max-num-seqs 32 $SV"
BUILD="${BUILD:-build-gpu}" OUT="${OUT:-gpu-logs}" bash scripts/gpu/ab_base.sh "${1:-2}"
