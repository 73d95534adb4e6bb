#!/usr/bin/env bash
# Builds strata and runs every test. The file-format and tokenizer tests, which parse
# untrusted files, first run on their own under AddressSanitizer (build-asan/), and so does
# the replay of every fuzz target's corpus (tests/fuzz/corpus: seeds and past crashes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
FUZZ_TARGETS="request chat_template gguf llama2c hf_checkpoint tokenizer_json"
STRATA_BUILD_DIR=build-asan STRATA_BUILD_TYPE=RelWithDebInfo \
  STRATA_TARGETS="model_formats_test tokenizer_test $(printf 'fuzz_%s ' $FUZZ_TARGETS)" \
  bash scripts/build.sh -DSTRATA_SANITIZE=address -DSTRATA_BUILD_BENCH=OFF
for t in model_formats_test tokenizer_test; do
  echo "== $t under AddressSanitizer"
  ASAN_OPTIONS=detect_leaks=1 ./build-asan/bin/$t --gtest_brief=1
done
for t in $FUZZ_TARGETS; do
  echo "== fuzz corpus replay: $t under AddressSanitizer"
  # 77: shared data the harness needs is missing (it says which); anything else fails CI.
  ASAN_OPTIONS=detect_leaks=1 ./build-asan/bin/fuzz_$t tests/fuzz/corpus/$t || { rc=$?; [ $rc -eq 77 ] || exit $rc; }
done
bash scripts/build.sh
# ctest runs as many tests as there are cores and the CPU-backend tests use OpenMP teams of
# 2: with the default (spinning) wait policy a thread whose partner is descheduled burns its
# time slice at every barrier, which made some tests 100x slower on 2-core CI machines.
# STRATA_REQUIRE_BACKENDS: the OpenCL tests (PoCL, from install-deps.sh) must run, not skip.
cd build && STRATA_REQUIRE_BACKENDS=cpu,opencl OMP_WAIT_POLICY=PASSIVE ctest --output-on-failure -j "$(nproc)"
