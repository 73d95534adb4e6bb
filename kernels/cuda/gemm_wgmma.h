// Host-side launcher of the Hopper decode GEMM (kernels/cuda/gemm_wgmma.cu): out[t, :] (+)=
// x[t, :] * W^T (+ bias) for 2..kWgmmaMaxTokens tokens, bf16 in, f32 accumulation, bf16 or
// f32 out. At these sizes a product is bound by reading W from HBM, and cuBLASLt reads it at
// only 0.48-0.82 of bandwidth on the H200 (its tiles leave most SMs idle for the narrow
// projections); this kernel streams W through TMA into every SM, splitting K across the
// blocks of a thread-block cluster that add their partial sums through distributed shared
// memory, so no workspace and no second kernel. Only for sm_90 (wgmma); the caller checks.
//
// The same kernel multiplies 8-bit weights by 8-bit activations (W8A8 INT8 with s32 sums,
// FP8 E4M3 with f32 sums; kernels/cuda/quant.h's layouts) and dequantizes in its epilogue
// (per weight row x per token scale), with the bias and residual add, so a quantized product
// has no I32 / F32 intermediate and no separate epilogue kernel.
//
// Status (H200, 2026-11-30, `STRATA_OP_BENCH=gemm cuda_op_bench`): correct (cuda_backend_test
// CudaWgmmaGemm), but opt-in (device option gemm=wgmma): it streams W at up to 0.99 of copy
// bandwidth where the grid is large (logits, 8-64 tokens) and matches cuBLASLt on gate_up,
// but at 128 tokens it reads W at 0.37-0.84 against cuBLASLt's 0.49-0.92, and the Llama-3-8B
// forward pass at 128 sequences is 11% slower with it. What it lacks: tensor-core
// throughput at 128+ tokens (docs/benchmarks.md). A stream-K schedule (persistent blocks
// sharing the (tile, K block) steps evenly, parts added from an f32 workspace by each tile's
// first block; commit 37f5b24) was correct but slower on every shape, the more so the more
// tokens (run 55, 128 tokens: qkv 35 us against 23 with cluster split-K and 16 with
// cuBLASLt): a tile's part is a 64 KB f32 tile at 128 tokens, and the block that adds them
// reads them through its one SM, at the end of the kernel.
// 2026-12-03 (docs/benchmarks.md, "The 8-bit wgmma GEMM at 128-256 tokens"): 256-row weight
// tiles (WgmmaGemmArgs::wide) are the default for 8-bit inputs at 97..128 tokens: slower per
// product alone but 6% faster in the decode step's products. Split-K partial tiles exchanged
// through an L2 workspace instead of distributed shared memory were slower (removed again).
#ifndef STRATA_KERNELS_CUDA_GEMM_WGMMA_H_
#define STRATA_KERNELS_CUDA_GEMM_WGMMA_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

constexpr int64_t kWgmmaMaxTokens = 256;
// WgmmaGemmArgs::wide.
constexpr int32_t kWideAuto = 0, kWideOn = 1, kWideOff = -1;

struct WgmmaGemmArgs {
  const void* w = nullptr;  // [m, k] row-major (row stride ldw, 0 = k), w_dtype
  int32_t w_dtype = 0;
  int64_t ldw = 0;
  const void* x = nullptr;  // [n, k], row stride ldx (elements), x_dtype
  int32_t x_dtype = 0;
  int64_t ldx = 0;
  const float* bias = nullptr;  // [m] F32 or null
  void* out = nullptr;          // [n, m], row stride ldo (elements), out_dtype (BF16 or F32)
  int64_t ldo = 0;
  int32_t out_dtype = 0;
  int64_t m = 0, n = 0, k = 0;
  // 8-bit inputs (w_dtype = x_dtype = I8 or FP8_E4M3: W8A8 / FP8 weights and activations
  // quantized per token): the product is dequantized in the epilogue, out (+)= (x * W^T) *
  // w_scale[row] * a_scale[t] (+ bias). Both required for 8-bit inputs, ignored for bf16.
  const float* w_scale = nullptr;  // [m]
  const float* a_scale = nullptr;  // [n]
  bool accumulate = false;        // out += product (+ bias): the residual add
  bool overlap_previous = false;  // programmatic dependent launch (W is prefetched first)
  int32_t splits = 0;             // split-K blocks per cluster, 1..8; 0 = chosen per shape
  // Several token tiles without split-K (8-bit prefill): blocks in clusters of two on
  // neighbouring weight tiles, each loading half of their shared token tile into both with
  // TMA multicast, so the activation tiles cross L2 half as often (a 128 x 256 tile's stage
  // is 16 KB of weights + 32 KB of activations: 48 -> 32 KB per block).
  bool multicast = false;
  // The widest token tile: 0 = 256 (one block an SM: 128 x 256 tiles, 4 stages), 128 (two
  // blocks an SM, 3 stages each: one block's epilogue and pipeline fill overlap the other's
  // MMAs, at 1.5x the L2 traffic per MMA without multicast, the same with it).
  int32_t token_tile = 0;
  // 8-bit inputs over several token tiles without split-K: persistent blocks, as many as are
  // resident, each looping over tiles with its pipeline running on from one tile into the
  // next and the epilogue written from the accumulators (no per-tile launch, pipeline fill
  // and shared-memory round trip of the partial tile).
  bool persistent = false;
  // 8-bit inputs, 33..256 tokens: 256-row weight tiles (each consumer warpgroup multiplies two
  // 64-row halves by the same token tile; one block an SM, token tiles of at most 128, run
  // weight tile by weight tile when there are two). A stage then carries one activation byte
  // per two weight bytes instead of one per one, and a block prefetches 128 KB of weights (4
  // stages) while the kernel before it runs. Fewer tiles: the split-K chooser fills the SMs
  // with more splits.
  // kWideOn: wherever it applies; kWideOff: never (the previous default, for A/Bs);
  // kWideAuto: the default, 97..128 tokens (gemm_wgmma.cu's TakesWide says why).
  int32_t wide = 0;
  // FP8 E4M3 inputs: promoted accumulation, every `promote` of K (128: one stage, 4 wgmma
  // instructions; 256: two; 0 = off). The tensor cores' partial sums are added to separate f32
  // accumulators with FADDs and the wgmma accumulators restart, as CUTLASS's FP8 kernels and
  // DeepSeek-V3 do: Hopper's FP8 wgmma keeps its accumulator at reduced precision (~14
  // significant bits, DeepSeek-V3's report), so sums over long K (the down product's 14,336)
  // lose the small terms. Token tiles of at most 128 (two accumulator sets, BN per thread),
  // the 128-row form only (no wide, no persistent form), two blocks an SM up to 64 tokens, one
  // beyond. INT8 and BF16 ignore it (their sums are exact / not FP8). Off by default: not yet
  // run on a GPU.
  int32_t promote = 0;
  // 8-bit inputs, one K-split grid (the plain or the wide form, not the grouped prefill order):
  // 2 or 4 (0/1 = off, the default): the blocks of one split on `mgroup` neighbouring weight tiles
  // form a cluster with the split-K blocks (splits x mgroup <= 8 blocks) and share each
  // activation tile, each loading BN / mgroup of its rows into all of them with TMA multicast.
  // At 128 tokens on 128-row tiles a product otherwise moves as many activation bytes from L2
  // into the SMs as weight bytes, at 256 tokens twice as many; with a group of mgroup that
  // part is divided by mgroup. Needs BN / mgroup a multiple of 8 and >= mgroup weight tiles
  // (else off). Opt-in: not yet run on a GPU.
  int32_t mgroup = 0;
  // 1: the consumers finish each stage's MMAs (wgmma wait_group 0) and hand its slot back at
  // once; 2 / 0 (the default): a stage stays queued until the next one's MMAs are issued
  // (wait_group 1), so the consumers hold two stages of the ring and two blocks an SM with 3
  // stages each have one stage loading at a time. Not with promote. Opt-in: not yet run on a GPU.
  int32_t hold = 0;
  // Programmatic dependent launch of the next kernel as soon as every block of this one is
  // resident (griddepcontrol.launch_dependents right after the barriers' set-up), instead of at
  // the end: a next kernel launched with PDL (the next product's activation quantizer with
  // QuantActArgs::overlap_previous, or the next GEMM) is launched and its blocks placed while
  // this one still runs; each waits for this one's completion before touching its data (the
  // PDL contract, kernels/cuda/launch.cuh), so only the launch latency and (next GEMM) its
  // first weight stages move off the critical path. Opt-in (wgmma_trigger=on): not yet run on a GPU.
  bool trigger = false;
  // The epilogue (after the split-K sum) issues each batch's global loads (a_scale, w_scale,
  // bias, the residual) before the batch's first store, holding them in registers, instead of
  // StoreOut's loads after the previous group's store, each waited for (two or three memory
  // round trips per 4 outputs; the :k1 grids of wgmma_sweep put the fixed cost at 10-16 us a
  // product, H200 2026-12-03). Same arithmetic and rounding. Non-persistent kernel only.
  // Opt-in (wgmma_epilogue=preload): not yet run on a GPU.
  bool epilogue_preload = false;
};

// True when LaunchWgmmaGemm takes the product: BF16 x BF16 -> BF16/F32, 1 <= n <= 256,
// k a multiple of 8, x and W 16-byte aligned with ldx a multiple of 8 (TMA's rules); or
// I8 x I8 / FP8 x FP8 -> BF16/F32 with both scales, any n (token tiles of 256 or 128 beyond),
// 16-byte aligned rows (ldx, ldw multiples of 16).
bool WgmmaGemmSupports(const WgmmaGemmArgs& a);
// The split-K factor the launcher uses for this shape when a.splits == 0.
int WgmmaGemmSplits(const WgmmaGemmArgs& a);
// The multicast group the launcher uses (WgmmaGemmArgs::mgroup; 1 = none).
int WgmmaGemmMGroup(const WgmmaGemmArgs& a);
// Whether the launcher runs this product on 256-row weight tiles (WgmmaGemmArgs::wide).
bool WgmmaGemmTakesWide(const WgmmaGemmArgs& a);
cudaError_t LaunchWgmmaGemm(const WgmmaGemmArgs& a, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_GEMM_WGMMA_H_
