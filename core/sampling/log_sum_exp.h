// log(sum(exp(x))) over a row of logits, the normalizer of log_softmax, vectorized for the
// CPU it runs on (Highway, dispatched at run time). The host computes it for every row whose
// request wants logprobs: with one scalar exp per entry that took ~0.5-1.7 ms per
// 128,256-entry row on the H200's host, more than a decode step's share.
#pragma once

#include <cstddef>

namespace strata {

// NaN entries count as -inf (they are never sampled) and +inf as the largest float, as the
// Sampler treats them. Exponentials in float, relative to the row's maximum; each block of
// 1,024 entries is summed in float lanes and the blocks in double, so the result is within
// ~1e-6 of the exact one. -inf for an empty row or one with nothing but -inf and NaN.
double LogSumExp(const float* x, size_t n);

}  // namespace strata
