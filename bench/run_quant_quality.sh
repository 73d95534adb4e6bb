#!/usr/bin/env bash
# The quality figures of docs/benchmarks.md ("Quantization quality"): stories260K on the
# TinyStories sample (calibrated on WikiText-2, then on stories the model wrote itself, so no
# text is both calibration and test) and a
# synthetic Llama with injected outlier activation channels (make_random_llama
# --outlier-channels). JSON lines on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${STRATA_BIN:-build/bin}
SHARED=${STRATA_SHARED:-../shared}
TMP=${TMPDIR:-/tmp}
THREADS=${THREADS:-2}
S=$SHARED/models/stories260K
# A calibration file cut from WikiText-2 (its first 40 KB).
head -c 40000 "$SHARED/text/wikitext-2-test.txt" > "$TMP/calib_wikitext.txt"
"$BIN/quant_quality" --model "$S/stories260K.bin" --tokenizer "$S/tok512.bin" \
  --text "$SHARED/text/tinystories_sample.txt" --calib "$TMP/calib_wikitext.txt" --ctx 128 --calib-tokens 4096 \
  --threads "$THREADS" \
  --configs f32,int8,w8a8,w8a8-naive,w8a8-static,llm-int8,fp8,rtn-g32,rtn-g64,rtn-g128,gptq-g32,gptq-g64,gptq-g128,gptq-g32-act
# GPTQ against RTN (issue 27's target: GPTQ's increase at most 60% of RTN's at each group size)
# with 64k calibration tokens (the first 200 KB of WikiText-2): with the 4k above the share
# scatters by about +-15 points with the 40 KB slice chosen (docs/benchmarks.md). GPTQ is
# true-sequential (default) and, for comparison, one pass per layer (-nts).
head -c 200000 "$SHARED/text/wikitext-2-test.txt" > "$TMP/calib_wikitext_200k.txt"
"$BIN/quant_quality" --model "$S/stories260K.bin" --tokenizer "$S/tok512.bin" \
  --text "$SHARED/text/tinystories_sample.txt" --calib "$TMP/calib_wikitext_200k.txt" --ctx 128 --calib-tokens 65536 \
  --threads "$THREADS" \
  --configs f32,rtn-g32,rtn-g64,rtn-g128,gptq-g32,gptq-g64,gptq-g128,gptq-g32-nts,gptq-g64-nts,gptq-g128-nts
# In-domain calibration without leakage: 24 stories the f32 model writes itself.
rm -f "$TMP/calib_selfgen.jsonl"
for seed in $(seq 1 24); do
  "$BIN/strata" run -m "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -p "Once upon a time" --temp 1.0 --top-k 0 \
    --top-p 1 --min-p 0 -n 250 --seed "$seed" --json --device cpu -t 1 2>/dev/null |
    python3 -c "import json,sys; j=json.load(sys.stdin); print(json.dumps({'text': 'Once upon a time' + j['text']}))" \
    >> "$TMP/calib_selfgen.jsonl"
done
"$BIN/quant_quality" --model "$S/stories260K.bin" --tokenizer "$S/tok512.bin" \
  --text "$SHARED/text/tinystories_sample.txt" --calib "$TMP/calib_selfgen.jsonl" --ctx 128 --calib-tokens 8192 \
  --threads "$THREADS" \
  --configs f32,int8,w8a8,w8a8-naive,llm-int8,rtn-g32,rtn-g64,rtn-g128,gptq-g32,gptq-g64,gptq-g128,gptq-g32-act,gptq-g128-act
"$BIN/make_random_llama" --out "$TMP/outlier_llama.gguf" --dim 256 --layers 4 --heads 8 --kv-heads 8 \
  --hidden 688 --vocab 2048 --context 256 --seed 7 --outlier-channels 8 --outlier-scale 50 >/dev/null
"$BIN/quant_quality" --model "$TMP/outlier_llama.gguf" --text "$SHARED/text/tinystories_sample.txt" \
  --calib "$TMP/calib_wikitext.txt" --ctx 128 --calib-tokens 4096 --threads "$THREADS" \
  --configs f32,int8,w8a8-naive,w8a8,llm-int8
