// Tokens per engine step (the prefill chunk, and the budget decodes share with it:
// --batch-tokens, bench's --max-batched-tokens) and sequences per step (--max-num-seqs) when
// the user leaves them to strata ("auto").
// vLLM's defaults by device, so a user moving from it gets the same step sizes: on a GPU a
// step of thousands of tokens keeps the products compute-bound and takes a long prompt in
// few chunks (512-token chunks prefill a 4,096-token prompt on the H200 ~20% slower than one
// step), and an offline run (no one waits for a first token) takes twice as many.
#pragma once

#include <cstdint>

#include "strata/device.h"

namespace strata {

enum class StepBudgetUse {
  kOnline,   // serve, run: a step bounds how long running requests wait for their next token
  kOffline,  // bench's serving mode: throughput only
};

// GPUs of >= 70 GiB (H100, H200, MI300) but the A100: 8,192 online, 16,384 offline; other
// GPUs: 2,048 and 8,192 (vLLM's EngineArgs defaults). CPUs and other accelerators: 512 (llama.cpp's physical
// batch; a CPU's products are compute-bound at any size, and larger chunks only delay the
// decodes that share the step).
int32_t DefaultStepTokens(const strata_device_info& info, StepBudgetUse use);

// Requests running at once (--max-num-seqs) when left to strata: 256 on GPUs (vLLM's default
// below 70 GiB; it takes 1,024 on larger ones, where strata's serving runs were measured up
// to 256 sequences), 16 on CPUs and other accelerators, as before (a CPU's step time grows
// with the batch, so more sequences only stretch everyone's time per token).
int32_t DefaultMaxNumSeqs(const strata_device_info& info);

}  // namespace strata
