#!/usr/bin/env bash
# Fresh Debian 12 machine -> packages, build, and the main job: generate text with stories260K.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
MODEL=../shared/models/stories260K/stories260K.gguf
if [ -f "$MODEL" ]; then
  ./build/bin/strata run -m "$MODEL" -p "Once upon a time" -n 200 --temp 0
else
  echo "No model at $MODEL. strata runs:"
  echo "  a GGUF file (llama, qwen2, qwen3; F32/F16/BF16, Q8_0/Q4_0/Q4_K/Q6_K): ./build/bin/strata run -m model.gguf -p 'Hello'"
  echo "  a Hugging Face directory (config.json + model.safetensors or model.safetensors.index.json;"
  echo "    Llama, Mistral, Qwen2, Qwen3; GPTQ / compressed-tensors):                           ./build/bin/strata run -m path/to/dir -p 'Hello'"
  echo "  a llama2.c checkpoint with its tokenizer.bin:         ./build/bin/strata run -m model.bin --tokenizer tokenizer.bin -p 'Hello'"
fi
