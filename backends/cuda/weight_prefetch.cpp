// ABI 1.5 weight_prefetch on CUDA: an L2 prefetch of the next product's weight
// (kernels/cuda/prefetch_l2.cu), issued before the kernels that leave memory bandwidth
// unused. The case it is for: a decode step of many sequences, where the attention reads
// the KV cache at ~2.6 of the H200's ~4.2 TB/s and the o projection after it (33.5 MB at
// the Llama-3-8B shape) then reads its weights at ~0.6 of the bandwidth. At small batches
// the attention is too short to hide the prefetch, so products of fewer than
// prefetch_min_tokens tokens get none.
#include "backends/cuda/cuda_ops.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

// Share of L2 a prefetch may fill: the attention's KV stream passes through L2 meanwhile
// and evicts what it finds least recently used, so a weight as large as L2 would evict
// its own first lines.
constexpr uint64_t kPrefetchL2Numerator = 3, kPrefetchL2Denominator = 4;

Status WeightPrefetch(Device* dev, const Weight* w, int32_t num_tokens) {
  if (num_tokens < 0) return InvalidArgument("weight_prefetch: num_tokens ", num_tokens, " < 0");
  if (dev->prefetch == 0 || num_tokens < dev->prefetch_min_tokens || w->data == nullptr) return Ok();
  const uint64_t bytes = static_cast<uint64_t>(w->rows) * static_cast<uint64_t>(w->cols) * DtypeSize(w->dtype);
  const uint64_t cap = dev->l2_bytes / kPrefetchL2Denominator * kPrefetchL2Numerator;
  return CudaStatus(LaunchPrefetchL2(w->data, std::min(bytes, cap), dev->prefetch == 2, dev->num_sms, dev->stream),
                    "weight_prefetch");
}

}  // namespace strata::cuda
