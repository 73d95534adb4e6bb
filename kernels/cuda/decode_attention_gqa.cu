// Decode attention over the paged KV cache, GQA-aware and bandwidth-first: every sequence
// has one query token, so the work is one pass over each sequence's K/V rows, and the cost is
// the HBM traffic of those rows.
//
// Layout of the work:
//  - Grid (kv head, token, split): the KV head varies fastest. One block of 128 threads serves ALL query heads of its KV
//    head (GROUP = num_heads / num_kv_heads, up to 8), so each K/V row is read once, not once
//    per query head.
//  - Inside a block, each key row is owned by a "lane group" of G = pow2ceil(head_dim / 8)
//    adjacent lanes; lane c of the group owns columns [8c, 8c+8) and copies them with one
//    16-byte cp.async (two for an F32 cache). A warp thus handles 32/G keys at once (2 for
//    head_dim 128) and the block NG = 128/G keys; each thread copies U keys (K and V) per step,
//    so a block step covers NG*U keys (32 for head_dim 128, GROUP <= 4). The copies go through
//    a 3-stage per-thread shared-memory pipeline (each thread reads back only its own slots,
//    so no block barrier per step): two steps are in flight while one is computed.
//  - Per key and query head the partial dot products of the G lanes are summed with xor
//    shuffles (every lane of the group ends with the same score), then each lane group runs
//    its own online softmax (F32, log2 domain: q is prescaled by scale*log2(e)) and keeps the
//    unnormalised output of its 8 columns for every query head in registers. The query lives
//    in shared memory (F32), read as two float4 per head and step.
//  - At the end the lane groups of the block are merged through shared memory. With one split
//    the block writes the output; otherwise it writes its partial (max, sum, unnormalised
//    output) and CombineKernel merges the splits.
//  - With DecodeRopeArgs (device ABI 1.3 rope_attention) the rope/KV write is fused in: the
//    block computes the token's rotation angles (in double, as rope_kv_write.cu) into its
//    stage area, rotates its query heads while loading them, and the block whose slice
//    holds the new position rotates the token's key head and stores key and value in the
//    cache first (a block barrier orders that store before the block's own copies; no
//    other block reads that position). One kernel fewer per layer at decode.
//  - Split-K for CUDA graphs: the host picks only the NUMBER of splits (from the batch, the
//    head counts, the SM count and max_seq_len as an upper bound); each block computes its
//    own slice from its sequence's actual length on the device, so one captured launch is
//    correct for any seq_lens <= max_seq_len. Slices past a sequence's end (and seq_len-0
//    padding slots) read nothing and write an empty partial (sum 0, zeros), or zeros as the
//    output when there is one split.
//  - 8-bit caches (kv_element_access.cuh; bf16 activations). "Narrow" (CPL = 8, the layout
//    of the 16-bit caches; the default): a lane's 8 columns are 8 bytes, copied with an
//    8-byte cp.async into the low half of its slot, an I8 scale in the slot's word z.
//    "Wide" (STRATA_CUDA_GQA_KV8=wide; CPL = 16, GROUP <= 4, head_dim % 16 == 0; not yet
//    measured): a lane owns 16 columns, one 16-byte cp.async per row as for BF16, so a key
//    row has half the lanes (G = head_dim / 16) and the per-key shuffle reductions and
//    softmax work of the lane group shrink with it (at the cache's halved bytes the narrow
//    form may be bound by that arithmetic); I8 row scales go to their own per-thread slots. Values are
//    converted to float in registers. FP8's per-tensor k_scale is folded into the query's
//    scale and v_scale into the output; I8 scales are applied on conversion. The fused
//    rope/KV write handles FP8; an I8 cache's rows are written by rope_kv_write (they may
//    requantize their block), so it is never fused.
#include "kernels/cuda/decode_attention_gqa.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/decode_span.cuh"
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/kv_element_access.cuh"
#include "kernels/cuda/launch.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxGroup = 8;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxSplits = 64;
// Shortest slice worth its own block (keys): below this the fixed cost of a block (query
// load, merge, partial write, combine) outweighs the parallelism.
constexpr int kMinSliceKeys = 64;
// Shared memory of one SM, and what the runtime reserves per block (sm_90).
constexpr int64_t kSmemPerSm = 228 * 1024;
constexpr int64_t kSmemReservedPerBlock = 1024;
constexpr int64_t kMaxSmemPerBlock = 227 * 1024;
constexpr float kLog2e = 1.4426950408889634f;

// Launch constants the host derives once (all independent of the actual seq_lens).
struct GqaPlan {
  int32_t group = 1;       // query heads per KV head (runtime; <= the GROUP template)
  int32_t lanes_log2 = 0;  // log2(G), G = lanes per key row
  int32_t bs_shift = -1;   // log2(block_size) when a power of two, else -1
  int32_t splits = 1;
  int32_t cpl = 8;         // columns per lane: 8, or 16 for the wide 8-bit form
  float qmul = 1.0f;       // scale * log2(e) (no softcap) or scale (softcap)
  float softcap = 0.0f;
  float inv_softcap = 0.0f;
};

// 2^x on the SFU; ex2.approx(-inf) = +0, which the masked-key and empty-state paths rely on.
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 16-byte asynchronous copy global -> shared (L2 only: K/V rows are streamed once). Each
// thread later reads back only what it copied itself, so cp.async.wait_group is the only
// synchronisation the pipeline needs (no block barrier per step).
__device__ __forceinline__ void CpAsync16(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem_src) : "memory");
}
// 8- and 4-byte forms (8-bit caches: a lane's 8 columns, and an I8 row's scale); .ca is the
// only form of those sizes.
__device__ __forceinline__ void CpAsync8(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void CpAsync4(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// 8 consecutive cache elements as float, from kChunks 16-byte words.
template <typename K>
struct KvOctet;
template <>
struct KvOctet<__nv_bfloat16> {
  static constexpr int kChunks = 1;
  __device__ __forceinline__ static void ToFloat(const uint4 (&r)[1], float (&f)[8]) {
    const uint32_t w[4] = {r[0].x, r[0].y, r[0].z, r[0].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // little endian: the lower address is the low half
      f[2 * j] = __uint_as_float(w[j] << 16);
      f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    }
  }
};
template <>
struct KvOctet<__half> {
  static constexpr int kChunks = 1;
  __device__ __forceinline__ static void ToFloat(const uint4 (&r)[1], float (&f)[8]) {
    const uint32_t w[4] = {r[0].x, r[0].y, r[0].z, r[0].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      __half2 h;
      static_assert(sizeof(h) == sizeof(uint32_t), "half2 is 4 bytes");
      memcpy(&h, &w[j], sizeof(h));
      const float2 v = __half22float2(h);
      f[2 * j] = v.x;
      f[2 * j + 1] = v.y;
    }
  }
};
// 8-bit caches: the 8 values in the slot's low 8 bytes; I8 with its row's scale in word z.
template <>
struct KvOctet<__nv_fp8_e4m3> {
  static constexpr int kChunks = 1;
  __device__ __forceinline__ static void ToFloat(const uint4 (&r)[1], float (&f)[8]) {
    const uint32_t w[2] = {r[0].x, r[0].y};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const __half2_raw h2 = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[j] >> (16 * p)), __NV_E4M3);
        __half2 h;
        memcpy(&h, &h2, sizeof(h));
        const float2 v = __half22float2(h);
        f[4 * j + 2 * p] = v.x;
        f[4 * j + 2 * p + 1] = v.y;
      }
    }
  }
};
template <>
struct KvOctet<int8_t> {
  static constexpr int kChunks = 1;
  __device__ __forceinline__ static void ToFloat(const uint4 (&r)[1], float (&f)[8]) {
    const uint32_t w[2] = {r[0].x, r[0].y};
    const float s = __uint_as_float(r[0].z);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float q[4];
      I8x4ToFloat(w[j], q);
#pragma unroll
      for (int b = 0; b < 4; ++b) f[4 * j + b] = q[b] * s;
    }
  }
};
template <>
struct KvOctet<float> {
  static constexpr int kChunks = 2;
  __device__ __forceinline__ static void ToFloat(const uint4 (&r)[2], float (&f)[8]) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      f[4 * c + 0] = __uint_as_float(r[c].x);
      f[4 * c + 1] = __uint_as_float(r[c].y);
      f[4 * c + 2] = __uint_as_float(r[c].z);
      f[4 * c + 3] = __uint_as_float(r[c].w);
    }
  }
};

// The wide 8-bit form: 16 values of one 16-byte word as float (I8: times the row's scale s).
__device__ __forceinline__ void Wide16ToFloat(const uint4& r, float, __nv_fp8_e4m3, float (&f)[16]) {
  uint32_t h[8];
  Kv8ToHalf16(r, __nv_fp8_e4m3{}, h);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    __half2 v;
    memcpy(&v, &h[j], sizeof(v));
    const float2 x = __half22float2(v);
    f[2 * j] = x.x;
    f[2 * j + 1] = x.y;
  }
}
__device__ __forceinline__ void Wide16ToFloat(const uint4& r, float s, int8_t, float (&f)[16]) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float q[4];
    I8x4ToFloat(w[j], q);
#pragma unroll
    for (int b = 0; b < 4; ++b) f[4 * j + b] = q[b] * s;
  }
}

// Keys per thread and pipeline stage (U), and the blocks per SM the register budget is sized
// for (ptxas, sm_90a, no spills): acc holds GROUP*8 floats, the scores U*GROUP. An F32 cache
// doubles the bytes per key, so it halves U; a stage is then always U*2*kChunks 16-byte
// words per thread (16 KiB per block).
// The wide 8-bit form (16 columns per lane, GROUP <= 4) holds twice the accumulators: U = 2,
// and at GROUP 4 3 blocks per SM (170 registers; with 4 blocks and U = 4 ptxas spilled
// 250-420 bytes, with U = 2 still 72-108).
constexpr int KeysPerThreadFor(int group_tmpl, int chunks, int cpl = 8) {
  return cpl == 16 ? 2 : (group_tmpl >= 8 ? 2 : 4) / chunks;
}
constexpr int MinBlocksPerSmFor(int group_tmpl, int chunks, int cpl = 8) {
  return group_tmpl >= 8 ? (chunks == 2 ? 2 : 3) : cpl == 16 && group_tmpl >= 4 ? 3 : 4;
}
template <int GROUP, typename K, int CPL = 8>
constexpr int KeysPerThread() {
  return KeysPerThreadFor(GROUP, KvOctet<K>::kChunks, CPL);
}
template <int GROUP, typename K, int CPL = 8>
constexpr int MinBlocksPerSm() {
  return MinBlocksPerSmFor(GROUP, KvOctet<K>::kChunks, CPL);
}
// Pipeline depth: while a thread computes step j, steps j+1 and j+2 are in flight.
constexpr int kStages = 3;

// Shared memory of the attention block, in bytes:
//   K/V stages [kStages][U][K, V][kChunks][kThreads] 16-byte words (per-thread slots)
//   | key masks [kStages][kThreads] | query [GROUP][G*CPL] floats (zero-padded past D)
//   | (wide I8) row scales [kStages][U][K, V][kThreads] floats;
// after the key loop the stage area is reused for the merge: per-group outputs
// [NG][GROUP][D] | per-group max, sum, merge factor [NG][GROUP] each | block max, sum [2][GROUP].
struct SmemLayout {
  int64_t stage_bytes, mask_off, q_off, scale_off, total;
};
constexpr SmemLayout MakeSmemLayout(int group_tmpl, int keys_u, int chunks, int32_t head_dim, int32_t lanes_log2,
                                    int cpl = 8, bool slot_scales = false) {
  const int64_t G = int64_t{1} << lanes_log2, NG = kThreads / G;
  const int64_t stages = int64_t{kStages} * keys_u * 2 * chunks * kThreads * 16;
  const int64_t merge = 4 * (NG * group_tmpl * head_dim + 3 * NG * group_tmpl + 2 * group_tmpl);
  const int64_t area = stages > merge ? stages : merge;
  const int64_t mask_off = area;
  const int64_t q_off = mask_off + int64_t{kStages} * kThreads * 4;
  const int64_t scale_off = q_off + 4 * group_tmpl * G * cpl;
  const int64_t scale_bytes = slot_scales ? int64_t{kStages} * keys_u * 2 * kThreads * 4 : 0;
  return SmemLayout{area, mask_off, q_off, scale_off, scale_off + scale_bytes};
}
template <int GROUP, typename K, int CPL = 8>
constexpr SmemLayout SmemFor(int32_t head_dim, int32_t lanes_log2) {
  return MakeSmemLayout(GROUP, KeysPerThread<GROUP, K, CPL>(), KvOctet<K>::kChunks, head_dim, lanes_log2, CPL,
                        CPL == 16 && std::is_same_v<K, int8_t>);
}

// FUSE_ROPE: the rope/KV write is fused in (a template parameter, so that the plain
// attention's kernel carries none of its code or registers).
// CPL: columns per lane (8; 16 for the wide 8-bit form).
template <typename T, typename K, int GROUP, bool FUSE_ROPE, int CPL = 8>
__global__ void __launch_bounds__(kThreads, (MinBlocksPerSm<GROUP, K, CPL>()))
    DecodeGqaKernel(AttentionArgs a, KvLayout kv, GqaPlan plan, float* __restrict__ ws, DecodeRopeArgs rope) {
  AllowDependentLaunch();  // without splits, the o projection follows this kernel
  constexpr bool kWide = CPL == 16;
  static_assert(CPL == 8 || (kWide && sizeof(K) == 1), "16 columns per lane: 8-bit caches only");
  constexpr bool kSlotScales = kWide && std::is_same_v<K, int8_t>;
  constexpr int KC = KvOctet<K>::kChunks;
  constexpr int U = KeysPerThread<GROUP, K, CPL>();
  extern __shared__ float4 smem_f4[];  // float4: 16-byte alignment for the vector accesses
  float* smem = reinterpret_cast<float*>(smem_f4);

  // KV head fastest: the blocks of one token run side by side and read the interleaved rows
  // of the same cache blocks together (DRAM page locality).
  const int32_t kvh = blockIdx.x, i = blockIdx.y, split = blockIdx.z;
  const int32_t tid = threadIdx.x;
  const int32_t D = kv.head_dim;
  const int32_t G = 1 << plan.lanes_log2;       // lanes per key row
  const int32_t NG = kThreads >> plan.lanes_log2;  // lane groups (keys per step and unroll slot)
  const int32_t grp = tid >> plan.lanes_log2;
  const int32_t c = tid & (G - 1);              // this lane's columns: [CPL c, CPL c + CPL)
  const bool col_ok = c < D / CPL;              // lanes past head_dim/CPL idle (e.g. D = 96)
  const int32_t group = plan.group;
  const int32_t H = a.num_heads;
  const int32_t splits = plan.splits;

  // The fused rope's position and slot of token i are loaded with the sequence arrays below,
  // so that the prologue waits for one round trip to global memory, not three.
  int32_t rope_pos = 0, new_slot = -1;
  if constexpr (FUSE_ROPE) {
    if (rope.rope.style != STRATA_ROPE_NONE) rope_pos = __ldg(rope.positions + i);
    new_slot = __ldg(rope.slots + i);
  }
  // Sequence, position and visible keys of token i.
  const DecodeSpan span = DecodeSpanOf(a, kv.block_size, i, tid == 0 && split == 0 && kvh == 0);
  const int32_t s = span.seq, pos = span.pos, start = span.start, end = span.end;
  const int32_t len = max(0, end - start);
  const int32_t step = NG * U;
  int32_t chunk = (len + splits - 1) / splits;
  chunk = (chunk + step - 1) / step * step;  // whole block steps per slice
  const int64_t kb64 = static_cast<int64_t>(start) + static_cast<int64_t>(split) * chunk;
  const int32_t kb = static_cast<int32_t>(kb64 < end ? kb64 : static_cast<int64_t>(end));
  const int32_t ke = min(end, kb + chunk);
  // Launched with PDL (a.overlap_previous): q, k, v, the cache, the workspace and out are
  // touched only after the previous kernel has finished (the lookups above read the step's
  // arrays, uploaded before the step's first kernel).
  WaitForPreviousKernel();

  const int64_t slot_base = (static_cast<int64_t>(i) * H + static_cast<int64_t>(kvh) * group) * splits + split;
  float* ws_ml = ws + static_cast<int64_t>(a.num_tokens) * H * splits * D;
  T* out = static_cast<T*>(a.out) + static_cast<int64_t>(i) * a.out_stride + static_cast<int64_t>(kvh) * group * D;

  if (kb >= ke) {  // empty slice (seq_len 0, or past this sequence's end): read nothing
    if (splits == 1) {
      for (int32_t idx = tid; idx < group * D; idx += kThreads) out[idx] = FromF32<T>(0.0f);
    } else {  // an empty partial: sum 0 and zeros (the combine reads every split unguarded)
      for (int32_t idx = tid; idx < group * D; idx += kThreads) {
        const int32_t h = idx / D, d = idx - h * D;
        const int64_t slot = slot_base + static_cast<int64_t>(h) * splits;
        ws[slot * D + d] = 0.0f;
        if (d == 0) {
          ws_ml[2 * slot] = -INFINITY;
          ws_ml[2 * slot + 1] = 0.0f;
        }
      }
    }
    return;  // block-uniform: before any barrier
  }

  const SmemLayout lay = SmemFor<GROUP, K, CPL>(D, plan.lanes_log2);
  unsigned char* smem_b = reinterpret_cast<unsigned char*>(smem);
  uint4* s_kv = reinterpret_cast<uint4*>(smem_b);
  uint32_t* s_mask = reinterpret_cast<uint32_t*>(smem_b + lay.mask_off);
  float* s_q = reinterpret_cast<float*>(smem_b + lay.q_off);
  float* s_scale = reinterpret_cast<float*>(smem_b + lay.scale_off);  // wide I8 only
  const int32_t QS = G * CPL;  // query row stride in shared memory (zero-padded past D)
  // This thread's slot of (stage, key u, K or V, chunk).
  auto kv_slot = [&](int32_t stage, int u, int which, int ch) {
    return s_kv + ((static_cast<int32_t>(stage) * U + u) * 2 * KC + which * KC + ch) * kThreads + tid;
  };
  auto scale_slot = [&](int32_t stage, int u, int which) {
    return s_scale + ((static_cast<int32_t>(stage) * U + u) * 2 + which) * kThreads + tid;
  };

  // Fused rope: the angles of token i go to the stage area, free until the first copy.
  const bool rotate = FUSE_ROPE && rope.rope.style != STRATA_ROPE_NONE;
  const int32_t rot_dim = rotate ? 2 * rope.rope.half : 0;
  float* s_cs = smem;
  float* s_sn = smem + kMaxHeadDim / 2;
  if (rotate) {
    const double p = static_cast<double>(rope_pos);
    for (int32_t f = tid; f < rope.rope.half; f += kThreads) {
      double sv, cv;
      sincos(p * static_cast<double>(rope.rope.inv_freq[f]), &sv, &cv);
      s_cs[f] = static_cast<float>(cv * rope.rope.factor);
      s_sn[f] = static_cast<float>(sv * rope.rope.factor);
    }
    __syncthreads();
  }
  {
    // FP8: k_scale folded into the query (scores are q . (stored k) * k_scale).
    const float qmul = std::is_same_v<K, __nv_fp8_e4m3> ? plan.qmul * kv.k_scale : plan.qmul;
    const T* qrow = static_cast<const T*>(a.q) + static_cast<int64_t>(i) * a.q_stride +
                    static_cast<int64_t>(kvh) * group * D;
    for (int32_t idx = tid; idx < GROUP * QS; idx += kThreads) {
      const int32_t h = idx / QS, d = idx - h * QS;
      float x = 0.0f;
      if (h < group && d < D) {
        const T* qh = qrow + static_cast<int64_t>(h) * D;
        x = d < rot_dim ? RotatedElement(qh, d, rope.rope.style, rope.rope.half, s_cs, s_sn) : ToF32(qh[d]);
      }
      s_q[idx] = x * qmul;
    }
  }
  if constexpr (FUSE_ROPE) {
    // The block whose slice holds the new position stores this token's key and value.
    if (kb <= pos && pos < ke) {
      const int32_t slot = new_slot;
      const int64_t num_slots = static_cast<int64_t>(kv.num_blocks) * kv.block_size;
      if (slot >= num_slots) {
        if (tid == 0 && a.err != nullptr) atomicOr(a.err, kErrSlot);
      } else if (slot >= 0) {
        const T* krow = static_cast<const T*>(rope.k) + static_cast<int64_t>(i) * rope.k_stride +
                        static_cast<int64_t>(kvh) * D;
        const T* vrow = static_cast<const T*>(rope.v) + static_cast<int64_t>(i) * rope.v_stride +
                        static_cast<int64_t>(kvh) * D;
        K* kd = static_cast<K*>(kv.data) + static_cast<int64_t>(a.layer) * 2 * kv.layer_half_elems +
                static_cast<int64_t>(slot) * kv.num_kv_heads * D + static_cast<int64_t>(kvh) * D;
        K* vd = kd + kv.layer_half_elems;
        // FP8: value / scale, as rope_kv_write.cu stores it.
        const float inv_k = kIsKv8<K> ? __fdiv_rn(1.0f, kv.k_scale) : 1.0f;
        const float inv_v = kIsKv8<K> ? __fdiv_rn(1.0f, kv.v_scale) : 1.0f;
        for (int32_t d = tid; d < D; d += kThreads) {
          const float kx =
              d < rot_dim ? RotatedElement(krow, d, rope.rope.style, rope.rope.half, s_cs, s_sn) : ToF32(krow[d]);
          kd[d] = FromF32<K>(__fmul_rn(kx, inv_k));
          vd[d] = FromF32<K>(__fmul_rn(ToF32(vrow[d]), inv_v));
        }
      }
    }
    // The angles are read and the new key and value stored before any copy is issued.
    __threadfence_block();
    __syncthreads();
  }

  const K* kbase = static_cast<const K*>(kv.data) + static_cast<int64_t>(a.layer) * 2 * kv.layer_half_elems +
                   static_cast<int64_t>(kvh) * D + c * CPL;
  const K* vbase = kbase + kv.layer_half_elems;
  const int64_t pos_stride = static_cast<int64_t>(kv.num_kv_heads) * D;
  const int64_t blk_stride = pos_stride * kv.block_size;
  const int32_t* bt = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const int32_t bs = kv.block_size, bs_shift = plan.bs_shift;
  auto block_index = [&](int32_t p) { return bs_shift >= 0 ? (p >> bs_shift) : p / bs; };

  // Block ids of the keys of the step starting at b0 (-1 past the slice).
  auto fetch_blocks = [&](int32_t b0, int32_t (&blk)[U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t p = b0 + u * NG + grp;
      blk[u] = p < ke ? __ldg(bt + block_index(p)) : -1;
    }
  };
  // Starts the copies of the step at b0 into `stage` and records which keys are valid; a key
  // whose block-table entry is out of range is flagged and skipped.
  auto issue = [&](int32_t b0, const int32_t (&blk)[U], int32_t stage) {
    if (b0 >= ke) return;
    uint32_t mask = 0;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t p = b0 + u * NG + grp;
      const int32_t bk = blk[u];
      const bool in = p < ke;
      const bool ok = in && bk >= 0 && bk < kv.num_blocks;
      if (in && !ok && c == 0 && a.err != nullptr) atomicOr(a.err, kErrBlockTable);
      mask |= ok ? (1u << u) : 0u;
      if (ok && col_ok) {
        const int32_t bi = block_index(p);
        const int64_t off = static_cast<int64_t>(bk) * blk_stride + static_cast<int64_t>(p - bi * bs) * pos_stride;
        if constexpr (kWide) {
          CpAsync16(kv_slot(stage, u, 0, 0), kbase + off);
          CpAsync16(kv_slot(stage, u, 1, 0), vbase + off);
          if constexpr (kSlotScales) {
            CpAsync4(scale_slot(stage, u, 0), KvScalePtr(kv, a.layer, 0, bk, kvh));
            CpAsync4(scale_slot(stage, u, 1), KvScalePtr(kv, a.layer, 1, bk, kvh));
          }
        } else if constexpr (kIsKv8<K>) {
          CpAsync8(kv_slot(stage, u, 0, 0), kbase + off);
          CpAsync8(kv_slot(stage, u, 1, 0), vbase + off);
          if constexpr (std::is_same_v<K, int8_t>) {
            CpAsync4(&kv_slot(stage, u, 0, 0)->z, KvScalePtr(kv, a.layer, 0, bk, kvh));
            CpAsync4(&kv_slot(stage, u, 1, 0)->z, KvScalePtr(kv, a.layer, 1, bk, kvh));
          }
        } else {
#pragma unroll
          for (int ch = 0; ch < KC; ++ch) {
            CpAsync16(kv_slot(stage, u, 0, ch), kbase + off + ch * (8 / KC));
            CpAsync16(kv_slot(stage, u, 1, ch), vbase + off + ch * (8 / KC));
          }
        }
      }
    }
    s_mask[stage * kThreads + tid] = mask;
  };

  // Prologue: steps 0 and 1 in flight, block ids of step 2 loading.
  int32_t blk[U];
  {
    int32_t blk0[U];
    fetch_blocks(kb, blk0);
    fetch_blocks(kb + step, blk);
    issue(kb, blk0, 0);
    CpAsyncCommit();
    issue(kb + step, blk, 1);
    CpAsyncCommit();
    fetch_blocks(kb + 2 * step, blk);
  }

  float m[GROUP], l[GROUP], acc[GROUP][CPL];
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < CPL; ++e) acc[h][e] = 0.0f;
  }
  __syncthreads();  // s_q written

  int32_t stage_c = 0, stage_i = kStages - 1;
  for (int32_t b0 = kb; b0 < ke; b0 += step) {  // block-uniform trip count (shuffles below)
    issue(b0 + (kStages - 1) * step, blk, stage_i);
    CpAsyncCommit();  // possibly empty: keeps one group per step
    fetch_blocks(b0 + kStages * step, blk);
    CpAsyncWait<kStages - 1>();  // this thread's copies of step b0 have landed

    const uint32_t mask = col_ok ? s_mask[stage_c * kThreads + tid] : 0u;
    // Scores: partial dots over this lane's 8 columns, then summed over the G lanes.
    float sc[U][GROUP];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      uint4 kr[KC];
#pragma unroll
      for (int ch = 0; ch < KC; ++ch) {
        kr[ch] = (mask >> u) & 1u ? *kv_slot(stage_c, u, 0, ch) : make_uint4(0u, 0u, 0u, 0u);
      }
      float kf[CPL];
      if constexpr (kWide) {
        const float ks = kSlotScales && (mask >> u) & 1u ? *scale_slot(stage_c, u, 0) : 0.0f;
        Wide16ToFloat(kr[0], ks, K{}, kf);
      } else {
        KvOctet<K>::ToFloat(kr, kf);
      }
#pragma unroll
      for (int h = 0; h < GROUP; ++h) {
        float dsum = 0.0f;
#pragma unroll
        for (int e8 = 0; e8 < CPL; e8 += 8) {
          const float4 qa = *reinterpret_cast<const float4*>(s_q + h * QS + c * CPL + e8);
          const float4 qb = *reinterpret_cast<const float4*>(s_q + h * QS + c * CPL + e8 + 4);
          float d0 = qa.x * kf[e8 + 0];
          d0 = fmaf(qa.y, kf[e8 + 1], d0);
          d0 = fmaf(qa.z, kf[e8 + 2], d0);
          d0 = fmaf(qa.w, kf[e8 + 3], d0);
          float d1 = qb.x * kf[e8 + 4];
          d1 = fmaf(qb.y, kf[e8 + 5], d1);
          d1 = fmaf(qb.z, kf[e8 + 6], d1);
          d1 = fmaf(qb.w, kf[e8 + 7], d1);
          dsum += d0 + d1;
        }
        sc[u][h] = dsum;
      }
    }
    for (int32_t o = G >> 1; o > 0; o >>= 1) {  // xor within the aligned group of G lanes
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int h = 0; h < GROUP; ++h) sc[u][h] += __shfl_xor_sync(0xffffffffu, sc[u][h], o);
      }
    }
    // Key validity is the same for every lane of a group; idle lanes (col_ok false) read no
    // mask, so take it from the lane-group leader.
    const uint32_t key_ok = __shfl_sync(0xffffffffu, mask, (tid & 31) & ~(G - 1));
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int h = 0; h < GROUP; ++h) {
        float v = sc[u][h];
        if (plan.softcap > 0.0f) v = plan.softcap * tanhf(v * plan.inv_softcap) * kLog2e;
        sc[u][h] = (key_ok >> u) & 1u ? v : -INFINITY;
      }
    }

    // Online softmax per query head over this step's U keys (one rescale per step).
#pragma unroll
    for (int h = 0; h < GROUP; ++h) {
      float tmax = sc[0][h];
#pragma unroll
      for (int u = 1; u < U; ++u) tmax = fmaxf(tmax, sc[u][h]);
      const float mn = fmaxf(m[h], tmax);
      const float ms = mn == -INFINITY ? 0.0f : mn;  // all masked so far: no -inf - -inf
      const float alpha = Exp2(m[h] - ms);
      m[h] = mn;
      float psum = 0.0f;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        sc[u][h] = Exp2(sc[u][h] - ms);
        psum += sc[u][h];
      }
      l[h] = l[h] * alpha + psum;
#pragma unroll
      for (int e = 0; e < CPL; ++e) acc[h][e] *= alpha;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      uint4 vr[KC];
#pragma unroll
      for (int ch = 0; ch < KC; ++ch) {
        vr[ch] = (mask >> u) & 1u ? *kv_slot(stage_c, u, 1, ch) : make_uint4(0u, 0u, 0u, 0u);
      }
      float vf[CPL];
      if constexpr (kWide) {
        const float vs = kSlotScales && (mask >> u) & 1u ? *scale_slot(stage_c, u, 1) : 0.0f;
        Wide16ToFloat(vr[0], vs, K{}, vf);
      } else {
        KvOctet<K>::ToFloat(vr, vf);
      }
#pragma unroll
      for (int h = 0; h < GROUP; ++h) {
#pragma unroll
        for (int e = 0; e < CPL; ++e) acc[h][e] = fmaf(sc[u][h], vf[e], acc[h][e]);
      }
    }
    stage_c = stage_c == kStages - 1 ? 0 : stage_c + 1;
    stage_i = stage_i == kStages - 1 ? 0 : stage_i + 1;
  }
  CpAsyncWait<0>();  // no copy may land in the stage area once it holds the merge buffers
  __syncthreads();   // every thread is done with its stages

  float* s_acc = smem;
  float* s_m = s_acc + NG * GROUP * D;
  float* s_l = s_m + NG * GROUP;
  float* s_f = s_l + NG * GROUP;
  float* s_ML = s_f + NG * GROUP;

  // Merge the NG lane groups of the block.
  if (c == 0) {
#pragma unroll
    for (int h = 0; h < GROUP; ++h) {
      s_m[grp * GROUP + h] = m[h];
      s_l[grp * GROUP + h] = l[h];
    }
  }
  if (col_ok) {
#pragma unroll
    for (int h = 0; h < GROUP; ++h) {
      float4* dst = reinterpret_cast<float4*>(s_acc + (static_cast<int64_t>(grp) * GROUP + h) * D + c * CPL);
#pragma unroll
      for (int e4 = 0; e4 < CPL / 4; ++e4) {
        dst[e4] = make_float4(acc[h][4 * e4], acc[h][4 * e4 + 1], acc[h][4 * e4 + 2], acc[h][4 * e4 + 3]);
      }
    }
  }
  __syncthreads();
  if (tid < GROUP) {
    const int h = tid;
    float M = -INFINITY;
    for (int32_t g = 0; g < NG; ++g) M = fmaxf(M, s_m[g * GROUP + h]);
    const float ms = M == -INFINITY ? 0.0f : M;
    float L = 0.0f;
    for (int32_t g = 0; g < NG; ++g) {
      const float f = Exp2(s_m[g * GROUP + h] - ms);  // 0 for a group that saw no key
      s_f[g * GROUP + h] = f;
      L += s_l[g * GROUP + h] * f;
    }
    s_ML[h] = M;
    s_ML[GROUP + h] = L;
  }
  __syncthreads();
  // FP8: the values' per-tensor scale, applied once here (the partials are linear in it).
  const float vmul = std::is_same_v<K, __nv_fp8_e4m3> ? kv.v_scale : 1.0f;
  for (int32_t idx = tid; idx < group * D; idx += kThreads) {
    const int32_t h = idx / D, d = idx - h * D;
    float o = 0.0f;
    for (int32_t g = 0; g < NG; ++g) o = fmaf(s_acc[(g * GROUP + h) * D + d], s_f[g * GROUP + h], o);
    o *= vmul;
    const float L = s_ML[GROUP + h];
    if (splits == 1) {
      out[idx] = FromF32<T>(L > 0.0f ? o / L : 0.0f);
    } else {
      const int64_t slot = slot_base + static_cast<int64_t>(h) * splits;
      ws[slot * D + d] = o;
      if (d == 0) {
        ws_ml[2 * slot] = L > 0.0f ? s_ML[h] : -INFINITY;
        ws_ml[2 * slot + 1] = L;
      }
    }
  }
}

// Merges the split partials of one (token, query head): weights 2^(m_s - M) for the splits
// that saw a key (sum > 0), 0 for the others (whose partial outputs are zeros). Latency-bound
// (it runs after every decode step with splits), so it keeps the dependent round trips to
// two: each thread owns 4 columns of up to kCombineBatch splits and issues those float4
// loads before the weights are known; the split rows are then summed through shared memory.
constexpr int kCombineThreads = 256;
constexpr int kCombineBatch = 8;
template <typename T>
__global__ void __launch_bounds__(kCombineThreads)
    CombineKernel(AttentionArgs a, int32_t D, int32_t splits, const float* __restrict__ ws) {
  AllowDependentLaunch();  // the o projection may start loading its weights
  WaitForPreviousKernel();  // the partials come from the attention kernel (PDL launch)
  const int32_t i = blockIdx.x, hq = blockIdx.y;
  const int32_t tid = threadIdx.x;
  const int64_t slot0 = (static_cast<int64_t>(i) * a.num_heads + hq) * splits;
  const float* acc = ws + slot0 * D;
  const float* ml = ws + static_cast<int64_t>(a.num_tokens) * a.num_heads * splits * D + slot0 * 2;
  const int32_t vec = D >> 2;                      // float4 columns per split row (D % 8 == 0)
  const int32_t rows = blockDim.x / vec;           // split rows summed side by side (>= 1)
  const int32_t r = tid / vec, cv = tid - r * vec;
  const bool active = r < rows;
  __shared__ float s_w[kMaxSplits];
  __shared__ float s_inv;
  __shared__ float4 s_red[kCombineThreads];

  float4 pre[kCombineBatch];
#pragma unroll
  for (int k = 0; k < kCombineBatch; ++k) {
    const int32_t sp = r + k * rows;
    pre[k] = active && sp < splits ? __ldg(reinterpret_cast<const float4*>(acc + static_cast<int64_t>(sp) * D) + cv)
                                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  if (tid < 32) {
    const int lane = tid;
    float m0 = -INFINITY, l0 = 0.0f, m1 = -INFINITY, l1 = 0.0f;
    if (lane < splits) {
      m0 = ml[2 * lane];
      l0 = ml[2 * lane + 1];
    }
    if (lane + 32 < splits) {
      m1 = ml[2 * (lane + 32)];
      l1 = ml[2 * (lane + 32) + 1];
    }
    const float M = WarpMax(fmaxf(l0 > 0.0f ? m0 : -INFINITY, l1 > 0.0f ? m1 : -INFINITY));
    const float ms = M == -INFINITY ? 0.0f : M;
    const float w0 = l0 > 0.0f ? Exp2(m0 - ms) : 0.0f;
    const float w1 = l1 > 0.0f ? Exp2(m1 - ms) : 0.0f;
    const float L = WarpSum(w0 * l0 + w1 * l1);
    if (lane < splits) s_w[lane] = w0;
    if (lane + 32 < splits) s_w[lane + 32] = w1;
    if (lane == 0) s_inv = L > 0.0f ? 1.0f / L : 0.0f;
  }
  __syncthreads();
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int32_t base = 0; base < splits; base += kCombineBatch * rows) {
    if (base > 0) {  // more splits than one batch (large head_dim): load the next batch
#pragma unroll
      for (int k = 0; k < kCombineBatch; ++k) {
        const int32_t sp = base + r + k * rows;
        pre[k] = active && sp < splits
                     ? __ldg(reinterpret_cast<const float4*>(acc + static_cast<int64_t>(sp) * D) + cv)
                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int k = 0; k < kCombineBatch; ++k) {
      const int32_t sp = base + r + k * rows;
      const float w = active && sp < splits ? s_w[sp] : 0.0f;
      o.x = fmaf(pre[k].x, w, o.x);
      o.y = fmaf(pre[k].y, w, o.y);
      o.z = fmaf(pre[k].z, w, o.z);
      o.w = fmaf(pre[k].w, w, o.w);
    }
  }
  s_red[tid] = o;
  __syncthreads();
  T* out = static_cast<T*>(a.out) + static_cast<int64_t>(i) * a.out_stride + static_cast<int64_t>(hq) * D;
  const float inv = s_inv;
  for (int32_t c4 = tid; c4 < vec; c4 += blockDim.x) {
    float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int32_t rr = 0; rr < rows; ++rr) {
      const float4 v = s_red[rr * vec + c4];
      t.x += v.x;
      t.y += v.y;
      t.z += v.z;
      t.w += v.w;
    }
    out[4 * c4 + 0] = FromF32<T>(t.x * inv);
    out[4 * c4 + 1] = FromF32<T>(t.y * inv);
    out[4 * c4 + 2] = FromF32<T>(t.z * inv);
    out[4 * c4 + 3] = FromF32<T>(t.w * inv);
  }
}

int32_t CeilLog2(int64_t v) {
  int32_t r = 0;
  while ((int64_t{1} << r) < v) ++r;
  return r;
}

int GroupTemplate(int32_t group) { return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8; }

int ChunksOf(int32_t kv_dtype) { return kv_dtype == STRATA_DTYPE_F32 ? 2 : 1; }

// Columns per lane: 16 (the wide form, STRATA_CUDA_GQA_KV8=wide) for 8-bit caches where it
// applies, else 8.
int32_t ColumnsPerLane(const AttentionArgs& a, const KvLayout& kv) {
  static const bool wide = [] {
    const char* e = std::getenv("STRATA_CUDA_GQA_KV8");
    return e != nullptr && std::strcmp(e, "wide") == 0;
  }();
  const bool kv8 = kv.dtype == STRATA_DTYPE_FP8_E4M3 || kv.dtype == STRATA_DTYPE_I8;
  const bool fits = kv.num_kv_heads > 0 && GroupTemplate(a.num_heads / kv.num_kv_heads) <= 4 && kv.head_dim % 16 == 0;
  return kv8 && fits && wide ? 16 : 8;
}

SmemLayout HostSmemLayout(const AttentionArgs& a, const KvLayout& kv) {
  const int g = GroupTemplate(a.num_heads / kv.num_kv_heads);
  const int chunks = ChunksOf(kv.dtype);
  const int32_t cpl = ColumnsPerLane(a, kv);
  return MakeSmemLayout(g, KeysPerThreadFor(g, chunks, cpl), chunks, kv.head_dim, CeilLog2(kv.head_dim / cpl), cpl,
                        cpl == 16 && kv.dtype == STRATA_DTYPE_I8);
}

// Splits depend on the launch shape only (never on the actual seq_lens). Blocks resident at
// once ("slots") = SMs x blocks per SM (registers, shared memory). When the unsplit grid
// fills less than one wave, split to fill it (latency-bound small batches need every SM
// streaming); otherwise split at most 4 ways, only as far as it evens out the last wave. No
// slice is planned shorter than kMinSliceKeys keys of the longest possible context
// (max_seq_len, or the sliding window when smaller).
int32_t PlanSplits(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms) {
  const int64_t items = std::max<int64_t>(1, static_cast<int64_t>(a.num_tokens) * kv.num_kv_heads);
  const int64_t sms = num_sms > 0 ? num_sms : 132;
  const int g = GroupTemplate(a.num_heads / kv.num_kv_heads);
  const int64_t per_sm = std::max<int64_t>(
      1, std::min<int64_t>(MinBlocksPerSmFor(g, ChunksOf(kv.dtype), ColumnsPerLane(a, kv)),
                           kSmemPerSm / (HostSmemLayout(a, kv).total + kSmemReservedPerBlock)));
  const int64_t slots = sms * per_sm;
  int64_t len = std::max<int32_t>(1, a.max_seq_len);
  if (a.sliding_window > 0) len = std::min<int64_t>(len, a.sliding_window);
  const int64_t smax = std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, (len + kMinSliceKeys - 1) / kMinSliceKeys));
  int64_t splits = 1;
  if (items <= slots) {
    splits = std::min(smax, slots / items);
  } else {
    double best = -1.0;
    for (int64_t sp = 1; sp <= std::min<int64_t>(smax, 4); ++sp) {
      const int64_t ctas = items * sp, waves = (ctas + slots - 1) / slots;
      const double eff = static_cast<double>(ctas) / static_cast<double>(waves * slots);
      if (eff > best + 1e-9) {
        best = eff;
        splits = sp;
      }
      if (eff >= 0.85) break;
    }
  }
  return static_cast<int32_t>(std::max<int64_t>(1, splits));
}

GqaPlan MakePlan(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms) {
  GqaPlan p;
  p.group = a.num_heads / kv.num_kv_heads;
  p.cpl = ColumnsPerLane(a, kv);
  p.lanes_log2 = CeilLog2(kv.head_dim / p.cpl);
  const int32_t bsl = CeilLog2(kv.block_size);
  p.bs_shift = (int64_t{1} << bsl) == kv.block_size ? bsl : -1;
  p.splits = PlanSplits(a, kv, num_sms);
  if (a.softcap > 0.0f) {
    p.qmul = a.scale;
    p.softcap = a.softcap;
    p.inv_softcap = 1.0f / a.softcap;
  } else {
    p.qmul = a.scale * kLog2e;
  }
  return p;
}

int64_t ElemSize(int32_t dtype) {
  switch (dtype) {
    case STRATA_DTYPE_F32: return 4;
    case STRATA_DTYPE_F16:
    case STRATA_DTYPE_BF16: return 2;
    case STRATA_DTYPE_FP8_E4M3:
    case STRATA_DTYPE_I8: return 1;
    default: return 0;
  }
}

template <typename T, typename K, int GROUP, int CPL = 8>
cudaError_t LaunchTyped(const AttentionArgs& a, const KvLayout& kv, const GqaPlan& plan, float* ws,
                        const DecodeRopeArgs* rope, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(SmemFor<GROUP, K, CPL>(kv.head_dim, plan.lanes_log2).total);
  auto kernel = DecodeGqaKernel<T, K, GROUP, false, CPL>;
  if constexpr (std::is_same_v<K, int8_t>) {
    if (rope != nullptr) return cudaErrorInvalidValue;  // I8 rows are written by rope_kv_write
  } else if (rope != nullptr) {
    kernel = DecodeGqaKernel<T, K, GROUP, true, CPL>;
  }
  // Per device and function; cheap, and legal while a stream is being captured.
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(kv.num_kv_heads), static_cast<unsigned>(a.num_tokens),
                  static_cast<unsigned>(plan.splits));
  err = LaunchMaybeOverlapping(kernel, grid, dim3(kThreads), smem, a.overlap_previous, stream, a, kv, plan, ws,
                               rope != nullptr ? *rope : DecodeRopeArgs{});
  if (err != cudaSuccess) return err;
  if (plan.splits > 1) return LaunchDecodeSplitCombine(a, kv.head_dim, plan.splits, ws, stream);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchDecodeSplitCombine(const AttentionArgs& a, int32_t head_dim, int32_t splits, const float* ws,
                                     cudaStream_t stream) {
  if (splits < 2 || splits > kMaxSplits || head_dim % 8 != 0 || ws == nullptr) return cudaErrorInvalidValue;
  if (a.num_tokens == 0) return cudaSuccess;
  // Just enough threads for one float4 column of every split (few splits: small blocks).
  const int32_t vec = head_dim / 4;
  const int32_t rows = std::max(1, std::min(splits, kCombineThreads / vec));
  const int32_t threads = std::min(kCombineThreads, (vec * rows + 31) / 32 * 32);
  const dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(a.num_heads));
  if (a.act_dtype == STRATA_DTYPE_BF16) {
    const cudaError_t e = LaunchMaybeOverlapping(CombineKernel<__nv_bfloat16>, grid, dim3(static_cast<unsigned>(threads)),
                                                 0, a.overlap_previous, stream, a, head_dim, splits, ws);
    if (e != cudaSuccess) return e;
  } else if (a.act_dtype == STRATA_DTYPE_F32) {
    const cudaError_t e = LaunchMaybeOverlapping(CombineKernel<float>, grid, dim3(static_cast<unsigned>(threads)), 0,
                                                 a.overlap_previous, stream, a, head_dim, splits, ws);
    if (e != cudaSuccess) return e;
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

bool DecodeGqaSupports(const AttentionArgs& a, const KvLayout& kv) {
  if (a.max_query_len != 1 || a.num_tokens < 0 || a.num_tokens > 65535 || a.num_seqs <= 0) return false;
  if (a.q == nullptr || a.out == nullptr || a.query_start_loc == nullptr || a.seq_lens == nullptr ||
      a.block_tables == nullptr || kv.data == nullptr) {
    return false;
  }
  if (kv.num_kv_heads <= 0 || kv.num_kv_heads > 65535 || a.num_heads <= 0 || a.num_heads > 65535 ||
      a.num_heads % kv.num_kv_heads != 0 || a.num_heads / kv.num_kv_heads > kMaxGroup) {
    return false;
  }
  if (kv.head_dim < 8 || kv.head_dim > kMaxHeadDim || kv.head_dim % 8 != 0) return false;
  if (kv.block_size <= 0 || kv.num_blocks <= 0 || a.max_blocks_per_seq <= 0) return false;
  if (a.act_dtype != STRATA_DTYPE_F32 && a.act_dtype != STRATA_DTYPE_BF16) return false;
  const int64_t es = ElemSize(kv.dtype);
  if (es == 0) return false;
  // 8-bit caches: bf16 activations only (the instantiations CI compiles), I8 scales present.
  if (es == 1 && (a.act_dtype != STRATA_DTYPE_BF16 || (kv.dtype == STRATA_DTYPE_I8 && kv.scales == nullptr))) {
    return false;
  }
  // 16-byte loads: the cache base and each layer half must be 16-byte aligned (rows then are,
  // as head_dim is a multiple of 8).
  if (reinterpret_cast<uintptr_t>(kv.data) % 16 != 0 || (kv.layer_half_elems * es) % 16 != 0) return false;
  if (HostSmemLayout(a, kv).total > kMaxSmemPerBlock) return false;
  return true;
}

int64_t DecodeGqaWorkspaceFloats(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms) {
  if (!DecodeGqaSupports(a, kv) || a.num_tokens <= 0) return 0;
  const int32_t splits = PlanSplits(a, kv, num_sms);
  if (splits <= 1) return 0;
  return static_cast<int64_t>(a.num_tokens) * a.num_heads * splits * (kv.head_dim + 2);
}

cudaError_t LaunchDecodeAttentionGqa(const AttentionArgs& a, const KvLayout& kv, float* workspace,
                                     int32_t num_sms, cudaStream_t stream, const DecodeRopeArgs* rope) {
  if (!DecodeGqaSupports(a, kv)) return cudaErrorInvalidValue;
  if (rope != nullptr && kv.dtype == STRATA_DTYPE_I8) return cudaErrorInvalidValue;
  if (rope != nullptr && (rope->rope.half < 0 || 2 * rope->rope.half > kv.head_dim || rope->slots == nullptr ||
                          rope->k == nullptr || rope->v == nullptr ||
                          (rope->rope.style != STRATA_ROPE_NONE && rope->positions == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (a.num_tokens == 0) return cudaSuccess;
  const GqaPlan plan = MakePlan(a, kv, num_sms);
  if (plan.splits > 1 && workspace == nullptr) return cudaErrorInvalidValue;
  cudaError_t err = cudaErrorInvalidValue;
  DispatchAct(a.act_dtype, [&](auto t) {
    using T = decltype(t);
    DispatchKv(kv.dtype, [&](auto kt) {
      using K = decltype(kt);
      // 8-bit caches: bf16 activations only (refused by Supports otherwise).
      constexpr bool kInstantiated = !(sizeof(K) == 1 && sizeof(T) == 4);
      constexpr bool kWideForm = sizeof(K) == 1;  // the 8-bit caches also have the wide form
      if constexpr (kInstantiated) {
        if constexpr (kWideForm) {
          if (plan.cpl == 16) {
            switch (GroupTemplate(plan.group)) {
              case 1: err = LaunchTyped<T, K, 1, 16>(a, kv, plan, workspace, rope, stream); break;
              case 2: err = LaunchTyped<T, K, 2, 16>(a, kv, plan, workspace, rope, stream); break;
              default: err = LaunchTyped<T, K, 4, 16>(a, kv, plan, workspace, rope, stream); break;
            }
            return;
          }
        }
        switch (GroupTemplate(plan.group)) {
          case 1: err = LaunchTyped<T, K, 1>(a, kv, plan, workspace, rope, stream); break;
          case 2: err = LaunchTyped<T, K, 2>(a, kv, plan, workspace, rope, stream); break;
          case 4: err = LaunchTyped<T, K, 4>(a, kv, plan, workspace, rope, stream); break;
          default: err = LaunchTyped<T, K, 8>(a, kv, plan, workspace, rope, stream); break;
        }
      }
    });
  });
  return err;
}

}  // namespace strata::cuda
