// The CUDA backend's in-process entry points. plugin_entry.cpp exports them through the
// device ABI as libstrata-backend-cuda.so (which links only cudart and cuBLAS/cuBLASLt).
//
// Device options (strata_device_options.options, "key=value;key=value"):
//   activations=bf16   (default) activations in BF16, weights stored as BF16, F32 accumulate
//   activations=f32    activations and weights in F32, F32 GEMMs without TF32: exact
//                      comparisons with the CPU backend (stories260K greedy, hf-tiny logits)
//   gemv=auto          (default) matmuls of 1..8 tokens may run the bandwidth-bound GEMV of
//                      kernels/cuda/gemv.cu (bias fused; with matmul_ex also the rms_norm or
//                      silu_mul before and the residual add after): its streaming kernel
//                      where rows are a multiple of 512 bytes, else its row kernel; larger
//                      products run cuBLASLt
//   gemv=rows          the same with the row kernel only (the previous path: no fusion)
//   gemv=cublas        every matmul runs cuBLASLt (the oldest path)
//   gemv_tokens=N      without tuning, products of up to N tokens (0..8) take the GEMV,
//                      larger ones cuBLASLt (default 1)
//   gemm_tune=off      (default) cuBLASLt's first heuristic algorithm per shape, cached; the
//                      GEMV at 1 token only
//   gemm_tune=on       the first call of a matmul shape of up to 256 tokens (a decode batch)
//                      times the candidates on its own operands, each alone from a cold L2,
//                      and caches the fastest: cuBLASLt's best 8 algorithms, and at 1..8
//                      tokens the GEMV against cuBLASLt. Not the default: on the H200 the
//                      choices it makes are slower inside the forward pass (Llama-3-8B
//                      shape, 32 / 128 sequences: -7% / -17% output tokens/s, 2026-11-30,
//                      scripts/gpu/ab_matmul_paths.sh), for reasons not yet understood
//   pdl=on             (default, sm_90+) the GEMV starts with programmatic dependent launch
//   pdl=off            every kernel waits for the previous one to finish before it starts
//   pdl_small=on       (opt-in, with pdl=on) the decode attention kernels, their split
//                      combine, rms_norm and silu_mul start with programmatic dependent
//                      launch too (they wait for the previous kernel before their first
//                      access to its data); pdl_small=off (default) launches them plainly
//   prefill_attention=auto (default) batches with a query of >= 16 tokens, BF16
//                      activations and head_dim 64 or 128 run, on an sm_90 GPU with a BF16
//                      cache (whose block size divides 128) and head_dim 128 (the measured
//                      case; 64 keeps FA2), the Hopper kernel of
//                      kernels/cuda/prefill_attention_wgmma.cu (warpgroup MMAs, TMA loads,
//                      FA3-style overlap of softmax and P V), else the FlashAttention-2-style
//                      kernel below
//   prefill_attention=wgmma   the Hopper kernel for every batch it supports (head_dim 64
//                      too); an error when opening a device that is not sm_90 (or whose
//                      driver lacks cuTensorMapEncodeTiled)
//   prefill_wgmma_form=auto|0..6  the form of that Hopper kernel (A/Bs; auto: its default form;
//                      the forms are listed in kernels/cuda/prefill_attention_wgmma.h)
//   prefill_attention=fa2     those batches (BF16/F16 cache) on the FlashAttention-2-style
//                      kernel of kernels/cuda/prefill_attention_fa2.cu (mma.sync, register
//                      accumulators, cp.async double buffering)
//   prefill_attention=wmma    the same batches on the older WMMA kernel (prefill_attention_tc.cu)
//   prefill_attention=simple  always the SIMT kernels of paged_attention.cu (the oldest path)
//   decode_attention=auto (default) decode batches with enough (token, KV head) pairs, times
//                      split-K slices, to fill the GPU (>= 6 warps per SM) run the tensor-core
//                      kernel of kernels/cuda/decode_attention_mma.cu (one warp per pair and
//                      slice, BF16 activations, BF16/F16/FP8/I8 cache, head_dim 64/128); the
//                      others the GQA kernel
//   decode_attention=gqa      every decode batch on kernels/cuda/decode_attention_gqa.cu: one
//                      pass over each KV head's rows for all query heads that share it
//   decode_attention=mma      the tensor-core kernel for every decode batch it supports
//   decode_attention=simple   the per-query-head split-K kernel of paged_attention.cu
//   rope_attention=fused (default) rope_attention() at a decode step on the GQA or tensor-core
//                      decode kernel rotates q and writes the new K/V inside that kernel (one
//                      launch)
//   rope_attention=separate   rope_kv_write's kernel, then the attention (two launches)
//   gemm=auto|cublas   (default) cuBLASLt for every product the GEMV does not take
//   gemm=wgmma         on sm_90 (H100/H200), BF16 matmuls of 2..256 tokens that the GEMV does
//                      not take run the TMA + wgmma kernel of kernels/cuda/gemm_wgmma.cu
//                      (split-K across a block cluster, bias and residual add in its
//                      epilogue); device_open fails on other GPUs. Not the default: slower
//                      than cuBLASLt in the forward pass at 128 sequences (11,316 against
//                      12,681 output tok/s, 2026-11-30, docs/benchmarks.md)
//   gemm_splitk=N      (default 0: off) cuBLASLt products of <= 256 tokens and <= 8192 output
//                      features (qkv, o, down of an 8B model) take the first heuristic
//                      candidate that accepts K split N ways (the narrow projections fill
//                      few SMs at decode batch sizes); for measurements
//   quant_gemm=auto    (default) W8A8 / FP8 weights times the 8-bit activations: on sm_90,
//                      W8A8 at every size and FP8 up to 128 tokens through
//                      kernels/cuda/gemm_wgmma.cu's s8 / e4m3 kernel (per-row x per-token
//                      scales, bias and residual add in its epilogue), FP8 beyond 128 tokens
//                      through cuBLASLt (outer-vector scales); elsewhere always cuBLASLt
//                      (IMMA -> I32 + the epilogue kernel for W8A8)
//   quant_gemm=wgmma   the wgmma kernel for every token count (device_open fails without sm_90)
//   quant_gemm=cublas  always cuBLASLt (env STRATA_CUDA_QUANT_GEMM=auto|wgmma|cublas)
//   quant_fuse=on|off  (default on) matmul_ex's RMSNorm / SiLU*mul prologue of a W8A8 / FP8
//                      product quantizes the activations in the same kernel
//                      (kernels/cuda/quant_prologue.cu; env STRATA_CUDA_QUANT_FUSE=off;
//                      env STRATA_CUDA_QUANT_PROLOGUE=v1: that file's previous kernel, for A/B)
//   wgmma_splits=N     force the wgmma kernel's split-K factor (1..8; 0 = per shape, default):
//                      for measurements
//   wgmma_multicast=on|off  (default off) the 8-bit wgmma GEMM over several token tiles
//                      (prefill) runs its blocks in pairs sharing each activation tile through
//                      TMA multicast (env STRATA_CUDA_WGMMA_MULTICAST=on|off)
//   wgmma_token_tile=128|256  (default 256) the 8-bit wgmma GEMM's widest token tile; 128 runs
//                      two blocks an SM (env STRATA_CUDA_WGMMA_TOKEN_TILE=128)
//   wgmma_persistent=on|off  (default off) the 8-bit wgmma GEMM over several token tiles runs
//                      persistent blocks (env STRATA_CUDA_WGMMA_PERSISTENT=on)
//   wgmma_wide=auto|on|off  (default auto) the 8-bit wgmma GEMM of 33..256 tokens on 256-row
//                      weight tiles, one block an SM: auto at 97..128 tokens (where it was
//                      measured faster in the decode step), on wherever it applies, off never
//                      (the previous default, for A/Bs) (env STRATA_CUDA_WGMMA_WIDE=auto|on|off)
//   fp8_promote=on|128|256|off  (default off) the FP8 wgmma GEMM (<= 256 tokens) adds the
//                      tensor cores' partial sums into separate f32 accumulators every 128 (on)
//                      or 256 of K (Hopper's FP8 wgmma accumulates at reduced precision); token
//                      tiles of at most 128, no wide / persistent form; INT8 unaffected. Not yet
//                      run on a GPU (env STRATA_CUDA_FP8_PROMOTE=on|128|256|off)
//   wgmma_mgroup=1|2|4  (default 1: off) the 8-bit wgmma GEMM of <= 256 tokens runs the blocks
//                      of 2 / 4 neighbouring weight tiles (and one K split) in a cluster that
//                      loads each activation tile once for all of them (TMA multicast); the
//                      split-K factor is then at most 8 / N. Not yet run on a GPU
//                      (env STRATA_CUDA_WGMMA_MGROUP=2|4)
//   wgmma_hold=1|2     (default 2) stages of the 8-bit wgmma GEMM's ring its consumers hold:
//                      1 waits for each stage's MMAs and frees it at once (one more stage
//                      loading, a gap in the tensor cores' queue). Not yet run on a GPU
//                      (env STRATA_CUDA_WGMMA_HOLD=1)
//   wgmma_trigger=on|off  (default off) the 8-bit wgmma GEMM lets the next kernel launch as
//                      soon as its own blocks are resident, and the fused activation quantizer
//                      of an 8-bit product is launched with programmatic dependent launch (it
//                      waits for the previous kernel first): the launch between a product and
//                      the next one's quantizer leaves the critical path. Not yet run on a GPU
//                      (env STRATA_CUDA_WGMMA_TRIGGER=on)
//   wgmma_epilogue=preload|default  (default: default) the 8-bit wgmma GEMM's epilogue issues a
//                      batch's scale, bias and residual loads before its stores (the default
//                      waits for two or three loads per 4 outputs after the previous store). Not
//                      yet run on a GPU (env STRATA_CUDA_WGMMA_EPILOGUE=preload)
//   gemm_candidate=N   cuBLASLt products of <= 256 tokens take the heuristic's N-th candidate
//                      (0..7; -1 = off, default: its first choice, or the tuned one): for
//                      measurements (STRATA_CUDA_GEMM_LOG=1 prints each one's tile)
//   gemm_configs=builtin (default) cuBLASLt products whose shape (m, tokens, k), types and
//                      beta have an entry in this GPU's built-in table (builtin_gemm_configs.cpp:
//                      the NVIDIA H200 with cuBLASLt 13, the Llama-3-8B shape's decode products at
//                      128 tokens) run that entry's algorithm, tile, stages, split-K, swizzle and
//                      cluster shape instead of the heuristic's first choice (+1.2% output tok/s
//                      at 128 sequences, docs/benchmarks.md); GPUs without a table, and other
//                      shapes, keep the heuristic's choice. An entry cuBLASLt refuses falls back
//                      to it, with a warning
//   gemm_configs=PATH  the same with the table at PATH (gemm_config_table.h has the format;
//                      bench/cuda/gemm_search --write makes one for a GPU)
//   gemm_configs=none  the heuristic's first choice everywhere
//   profile=on         GPU time of every op (by op and shape) between CUDA events, printed
//                      to stderr when the device closes (op_profiler.h); run eager
//                      (--enforce-eager) for per-op figures. Off by default
// The environment variable STRATA_CUDA_ACTIVATIONS=f32|bf16 sets the same for callers that
// pass no options (e.g. the CLI), and STRATA_CUDA_GEMV=rows|cublas, STRATA_CUDA_GEMV_TOKENS=N,
// STRATA_CUDA_PREFILL_ATTENTION=wgmma|fa2|wmma|simple, STRATA_CUDA_PREFILL_WGMMA_FORM=auto|0..6, STRATA_CUDA_DECODE_ATTENTION=gqa|mma|simple,
// STRATA_CUDA_ROPE_ATTENTION=separate, STRATA_CUDA_GEMM=wgmma, STRATA_CUDA_GEMM_SPLITK=N, STRATA_CUDA_GEMM_CANDIDATE=N, STRATA_CUDA_GEMM_TUNE=on,
// STRATA_CUDA_GEMM_CONFIGS=builtin|none|PATH (empty: none), STRATA_CUDA_PDL=off, STRATA_CUDA_PDL_SMALL=on and STRATA_CUDA_PROFILE=1 change the defaults of gemv=,
// prefill_attention=, decode_attention=, rope_attention=, gemm=, gemm_splitk=, gemm_candidate=, gemm_tune=,
// gemm_configs=, pdl=, pdl_small= and profile= (an explicit option wins).
// device_info() reports the activation type of the last
// device_open() of that index as preferred_activation_dtype.
//
// KV cache layout, which is also the packed host layout of swap_blocks() (the same as the
// CPU backend's): one block is kv_block_bytes() bytes, ordered [layer][K then V][block_size]
// [num_kv_heads][head_dim] in the cache dtype. Inside the cache each layer holds K as
// [num_blocks][block_size][num_kv_heads][head_dim] followed by V in the same shape.
#ifndef STRATA_BACKENDS_CUDA_CUDA_BACKEND_H_
#define STRATA_BACKENDS_CUDA_CUDA_BACKEND_H_

#include <stdint.h>

#include "strata/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The plugin description and its function table (static storage, never freed). */
const strata_plugin_info* strata_cuda_plugin_info(void);
/* 0 without a usable CUDA device; otherwise higher than any CPU backend's score. */
int32_t strata_cuda_backend_score(void);

#ifdef __cplusplus
}
#endif

#endif  // STRATA_BACKENDS_CUDA_CUDA_BACKEND_H_
