// Host-side launcher of the Hopper prefill attention (kernels/cuda/prefill_attention_wgmma.cu):
// warpgroup MMAs (wgmma) instead of FA2's warp-level mma.sync, the same inputs and
// semantics as LaunchPrefillAttentionFa2 (prefill_attention_fa2.h) and the other attention
// kernels, for batches whose longest query is at least kFa2PrefillMinQueryLen tokens, with
// BF16 activations, a BF16 KV cache, head_dim 64 or 128 and a cache block size that divides
// 128 (8..128: a TMA box is one block). sm_90a code only: the caller launches it only on a
// compute capability 9.0 device. Needs no workspace.
#ifndef STRATA_KERNELS_CUDA_PREFILL_ATTENTION_WGMMA_H_
#define STRATA_KERNELS_CUDA_PREFILL_ATTENTION_WGMMA_H_

#include <cuda_runtime.h>

#include "kernels/cuda/kernels.h"

namespace strata::cuda {

// True when LaunchPrefillAttentionWgmma handles this batch and cache.
bool WgmmaPrefillSupports(const AttentionArgs& a, const KvLayout& kv);
// True when the default path (prefill_attention=auto) on an sm_90 GPU gives it a batch it
// supports (docs/benchmarks.md):
// - head_dim 128: always; faster than FA2 on every measured case (H200, run 107: a 4,096-token
//   prompt 385 vs 536 us, a 512-token chunk after 3,584 cached tokens 95 vs 246, 8 prompts of
//   1,024 290 vs 378, 64 prompts of 128 156 vs 179);
// - head_dim 64: where the longest sequence has >= 2,048 positions. There FA2 runs two blocks
//   per SM and this kernel (~200 registers a thread) one, so FA2 wins on grids of many short
//   blocks (run 112: 8 prompts of 1,024 190 vs 198 us, 64 prompts of 128 76 vs 104) and this
//   kernel on long key ranges (a 4,096-token prompt 264 vs 299, a 512-token chunk after 3,584
//   cached 64.5 vs 107; Llama-3.2-1B-shape 4,096-token prefill +3.0%).
bool WgmmaPrefillPreferred(const AttentionArgs& a, const KvLayout& kv);
// Forms of the kernel (device option prefill_wgmma_form=, env STRATA_CUDA_PREFILL_WGMMA_FORM),
// kept selectable for A/Bs on the device. All seven passed WgmmaFormsMatchCpuOnConsecutiveBlocks
// on the H200 (scripts/gpu/run_gpu.sh cuda_pfa, 2026-12-03); the default is 5, the fastest at
// every measured shape but 64 prompts of 128 at head_dim 64 (6: 81.9 vs 83.5 us): a 4,096-token
// prompt 272.5 us (form 0: 385.0; 1: 300.6; 6: 291.9), 8 prompts of 1,024 218.1 (0: 290.2),
// 64 prompts of 128 109.1 (0: 155.9), all at head_dim 128; W8A8 prefill of 4,096 tokens end to
// end 56.3k tok/s against 53.7k with form 0 (docs/benchmarks.md):
//   0  the kernel of run 107 (docs/benchmarks.md): every key tile loaded as one TMA box per
//      (cache block, 64 head dims) of K and of V (32 boxes of 2 KB a tile with 16-slot blocks)
//   1  as 0, but a tile whose cache blocks are consecutive (as a fresh cache hands them out)
//      is loaded as one 16 KB box per 64 head dims of K and of V (4 boxes a tile at head_dim
//      128); other tiles as in 0
//   2  as 1, with the online-softmax step's row maxima and sums as four partial chains each
//   3  as 2, with O rescaled after the next tile's S = Q K^T is issued (FA3's order) instead
//      of before
//   4  as 3, with FA3's ping-pong: the two warpgroups issue their MMAs in turn (named
//      barriers), so one's softmax runs under the other's MMAs
//   5  as 3, with a shorter block prologue: the block-table entries of the first tiles in one
//      round trip, and each thread's Q loads all issued before its first shared-memory store
//   6  as 5, with 4's ping-pong
// A form out of range (e.g. -1) is kWgmmaPrefillDefaultForm.
inline constexpr int kWgmmaPrefillForms = 7;
inline constexpr int kWgmmaPrefillDefaultForm = 5;
cudaError_t LaunchPrefillAttentionWgmma(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream,
                                        int form = kWgmmaPrefillDefaultForm);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_PREFILL_ATTENTION_WGMMA_H_
