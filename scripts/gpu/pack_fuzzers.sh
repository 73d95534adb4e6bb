#!/usr/bin/env bash
# Packs the libFuzzer binaries of build-fuzz/ (scripts/fuzz.sh builds them) for the GPU machine:
# stripped, with every shared library ldd names except glibc's own (the GPU machine has a newer
# glibc and none of the Debian libraries), into .gpu/fuzz.tar.xz for scripts/gpu/fuzz_on_device.sh.
# Usage: scripts/gpu/pack_fuzzers.sh [TARGETS...]   (default: the five file and template targets)
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=${*:-chat_template tokenizer_json gguf llama2c hf_checkpoint}
tmp=$(mktemp -d)
mkdir -p "$tmp/fuzz/bin" "$tmp/fuzz/lib" .gpu
for t in $targets; do
  strip -o "$tmp/fuzz/bin/fuzz_$t" "build-fuzz/bin/fuzz_$t"
  ldd "build-fuzz/bin/fuzz_$t" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -vE "/(libc|libm|libresolv|libpthread|libdl|librt)\.so" | xargs -r -I{} cp -L {} "$tmp/fuzz/lib/"
tar -C "$tmp" -cJf .gpu/fuzz.tar.xz fuzz
rm -rf "$tmp"
du -h .gpu/fuzz.tar.xz
