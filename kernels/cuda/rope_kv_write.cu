// Fused RoPE + KV-cache write: one block per token rotates the token's query and key heads
// in place (NEOX or interleaved pairs, partial rotary_dim) and stores its key and value rows
// into the paged cache at slot_mapping (negative slot = skip). Angles in double, as the CPU
// backend does: pos * inv_freq loses precision in F32 at long positions.
// Where rows, strides and the rotary half split into aligned 8-element chunks (every
// Llama-family shape), each thread moves whole 16-byte chunks instead of 2-byte elements
// (RopeKvWriteKernel<T, K, true>: 37 us for a 4,096-token prefill step on the H200, run 66;
// 2026-11-30; A/B within noise to +1% on the whole prefill). Both forms compute the same values.
// 8-bit caches (kv_element_access.cuh): FP8 stores value / scale. I8 rows are stored by a
// second kernel (KvWriteI8Kernel), once every key is rotated: writes into one (block, kv
// head) must run in token order, since a row whose magnitude grows the block's scale
// requantizes the rows already there, as the CPU backend does.
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/kv_element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxHalf = 512;  // rotary_dim / 2 limit (head_dim <= 1024)

template <typename T>
__device__ void RotateHeads(T* row, int32_t heads, int32_t head_dim, int32_t half, int32_t style,
                            const float* cs, const float* sn) {
  for (int32_t i = threadIdx.x; i < heads * half; i += kThreads) {
    const int32_t h = i / half, f = i % half;
    T* x = row + static_cast<int64_t>(h) * head_dim;
    const int32_t ia = style == STRATA_ROPE_INTERLEAVED ? 2 * f : f;
    const int32_t ib = style == STRATA_ROPE_INTERLEAVED ? 2 * f + 1 : f + half;
    const float a = ToF32(x[ia]), b = ToF32(x[ib]);
    x[ia] = FromF32<T>(RopeFirst(a, b, cs[f], sn[f]));
    x[ib] = FromF32<T>(RopeSecond(a, b, cs[f], sn[f]));
  }
}


// Eight consecutive elements, loaded and stored as one aligned vector.
template <typename T>
struct alignas(sizeof(T) * 8) Chunk8 {
  T v[8];
};

// Rotates `heads` heads of one token row by whole chunks: NEOX pairs chunk c of the first
// half with chunk c of the second; interleaved pairs sit inside one chunk (4 pairs).
template <typename T>
__device__ void RotateHeadsByChunks(T* row, int32_t heads, int32_t head_dim, int32_t half, int32_t style,
                                    const float* cs, const float* sn) {
  const bool neox = style != STRATA_ROPE_INTERLEAVED;
  const int32_t chunks = neox ? half / 8 : half / 4;  // tasks per head
  for (int32_t t = threadIdx.x; t < heads * chunks; t += kThreads) {
    const int32_t h = t / chunks, c = t % chunks;
    T* x = row + static_cast<int64_t>(h) * head_dim;
    if (neox) {
      Chunk8<T>* pa = reinterpret_cast<Chunk8<T>*>(x + 8 * c);
      Chunk8<T>* pb = reinterpret_cast<Chunk8<T>*>(x + half + 8 * c);
      Chunk8<T> A = *pa, B = *pb;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int32_t f = 8 * c + j;
        const float a = ToF32(A.v[j]), b = ToF32(B.v[j]);
        A.v[j] = FromF32<T>(RopeFirst(a, b, cs[f], sn[f]));
        B.v[j] = FromF32<T>(RopeSecond(a, b, cs[f], sn[f]));
      }
      *pa = A;
      *pb = B;
    } else {
      Chunk8<T>* p = reinterpret_cast<Chunk8<T>*>(x + 8 * c);
      Chunk8<T> X = *p;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int32_t f = 4 * c + j;
        const float a = ToF32(X.v[2 * j]), b = ToF32(X.v[2 * j + 1]);
        X.v[2 * j] = FromF32<T>(RopeFirst(a, b, cs[f], sn[f]));
        X.v[2 * j + 1] = FromF32<T>(RopeSecond(a, b, cs[f], sn[f]));
      }
      *p = X;
    }
  }
}

// One block per token. kChunked: whole 8-element chunks (RotateHeadsByChunks and 16-byte
// copies; the launcher checks the alignment), else element by element.
template <typename T, typename K, bool kChunked>
__global__ void RopeKvWriteKernel(RopeArgs rope, T* q, int64_t qs, T* k, int64_t ks,
                                  const T* __restrict__ v, int64_t vs, int32_t num_heads,
                                  const int32_t* __restrict__ positions,
                                  const int32_t* __restrict__ slots, KvLayout kv, int32_t layer,
                                  int* err) {
  const int64_t i = blockIdx.x;
  const int32_t D = kv.head_dim, KVH = kv.num_kv_heads;
  T* qr = q + i * qs;
  T* kr = k + i * ks;
  if (rope.style != STRATA_ROPE_NONE) {
    __shared__ float cs[kMaxHalf], sn[kMaxHalf];
    const double pos = static_cast<double>(positions[i]);
    for (int32_t f = threadIdx.x; f < rope.half; f += kThreads) {
      double s, c;
      sincos(pos * static_cast<double>(rope.inv_freq[f]), &s, &c);
      cs[f] = static_cast<float>(c * rope.factor);
      sn[f] = static_cast<float>(s * rope.factor);
    }
    __syncthreads();
    if constexpr (kChunked) {
      RotateHeadsByChunks(qr, num_heads, D, rope.half, rope.style, cs, sn);
      RotateHeadsByChunks(kr, KVH, D, rope.half, rope.style, cs, sn);
    } else {
      RotateHeads(qr, num_heads, D, rope.half, rope.style, cs, sn);
      RotateHeads(kr, KVH, D, rope.half, rope.style, cs, sn);
    }
    __syncthreads();  // the rotated key is read back below by other threads
  }
  const int32_t slot = slots[i];
  if (slot < 0) return;
  const int64_t num_slots = static_cast<int64_t>(kv.num_blocks) * kv.block_size;
  if (slot >= num_slots) {
    if (threadIdx.x == 0) atomicOr(err, kErrSlot);
    return;
  }
  if constexpr (std::is_same_v<K, int8_t>) return;  // stored by KvWriteI8Kernel
  const int64_t row = static_cast<int64_t>(KVH) * D;
  const int64_t blk = slot / kv.block_size, off = slot % kv.block_size;
  K* base = static_cast<K*>(kv.data) + static_cast<int64_t>(layer) * 2 * kv.layer_half_elems;
  K* kd = base + (blk * kv.block_size + off) * row;
  K* vd = kd + kv.layer_half_elems;
  const T* vr = v + i * vs;
  // FP8: value / scale (as the CPU backend: multiplied by the rounded reciprocal); exact 1
  // otherwise.
  const float inv_k = kIsKv8<K> ? __fdiv_rn(1.0f, kv.k_scale) : 1.0f;
  const float inv_v = kIsKv8<K> ? __fdiv_rn(1.0f, kv.v_scale) : 1.0f;
  if constexpr (kChunked) {
    const int32_t chunks = static_cast<int32_t>(row / 8);
    for (int32_t c = threadIdx.x; c < 2 * chunks; c += kThreads) {
      const bool is_v = c >= chunks;
      const int32_t cc = is_v ? c - chunks : c;
      const Chunk8<T> x = reinterpret_cast<const Chunk8<T>*>(is_v ? vr : kr)[cc];
      Chunk8<K> y;
      const float inv = is_v ? inv_v : inv_k;
#pragma unroll
      for (int j = 0; j < 8; ++j) y.v[j] = FromF32<K>(__fmul_rn(ToF32(x.v[j]), inv));
      reinterpret_cast<Chunk8<K>*>(is_v ? vd : kd)[cc] = y;
    }
  } else {
    for (int64_t c = threadIdx.x; c < row; c += kThreads) {
      kd[c] = FromF32<K>(__fmul_rn(ToF32(kr[c]), inv_k));
      vd[c] = FromF32<K>(__fmul_rn(ToF32(vr[c]), inv_v));
    }
  }
}

// I8 rows: one warp per (token, kv head, K/V). The warp of the first token of a run of
// consecutive slots inside one block stores the whole run in token order (a prefill chunk
// fills a block in one run; a decode token is a run of one); the other warps return.
// Per row, exactly the CPU backend's StoreKvRow8 (backends/cpu/kv_quant.cpp): a write at
// offset 0 starts the block afresh (s = 0); s grows to max|x| / 127 when the row needs it,
// requantizing the block's other rows (q' = rne(q * s_old / s_new)); q = rne(x / s).
template <typename T>
__global__ void __launch_bounds__(32)
    KvWriteI8Kernel(const T* __restrict__ k, int64_t ks, const T* __restrict__ v, int64_t vs, int64_t n,
                    const int32_t* __restrict__ slots, KvLayout kv, int32_t layer) {
  const int64_t i = blockIdx.x;
  const int32_t task = blockIdx.y, h = task >> 1, which = task & 1;
  const int lane = threadIdx.x;
  const int32_t D = kv.head_dim, KVH = kv.num_kv_heads, bs = kv.block_size;
  const int64_t num_slots = static_cast<int64_t>(kv.num_blocks) * bs;
  auto valid = [&](int32_t slot) { return slot >= 0 && slot < num_slots; };
  const int32_t slot0 = slots[i];
  if (!valid(slot0)) return;  // skipped, or flagged by RopeKvWriteKernel
  if (i > 0 && slot0 % bs != 0 && slots[i - 1] == slot0 - 1) return;  // inside a run: its leader stores it
  const int32_t blk = slot0 / bs;
  int8_t* part = static_cast<int8_t*>(kv.data) + (static_cast<int64_t>(layer) * 2 + which) * kv.layer_half_elems +
                 static_cast<int64_t>(blk) * bs * KVH * D + static_cast<int64_t>(h) * D;
  float* sp = KvScalePtr(kv, layer, which, blk, h);
  const int64_t pos_stride = static_cast<int64_t>(KVH) * D;
  float s = *sp;
  for (int64_t j = i; j < n; ++j) {
    const int32_t slot = slots[j];
    if (j > i && (!valid(slot) || slot != slots[j - 1] + 1 || slot % bs == 0)) break;
    const int32_t off = slot % bs;
    const T* x = (which == 0 ? k + j * ks : v + j * vs) + static_cast<int64_t>(h) * D;
    if (off == 0) s = 0.0f;
    float amax = 0.0f;
    for (int32_t d = lane; d < D; d += 32) amax = fmaxf(amax, fabsf(ToF32(x[d])));
    amax = WarpMax(amax);
    const float need = __fdiv_rn(amax, 127.0f);
    if (need > s) {
      if (s > 0.0f) {
        const float ratio = __fdiv_rn(s, need);
        for (int32_t t = 0; t < bs; ++t) {
          if (t == off) continue;
          int8_t* r = part + t * pos_stride;
          for (int32_t d = lane; d < D; d += 32) r[d] = FromF32<int8_t>(__fmul_rn(static_cast<float>(r[d]), ratio));
        }
      }
      s = need;
    }
    int8_t* r = part + off * pos_stride;
    const float inv = s == 0.0f ? 0.0f : __fdiv_rn(1.0f, s);
    for (int32_t d = lane; d < D; d += 32) r[d] = FromF32<int8_t>(__fmul_rn(ToF32(x[d]), inv));
    __syncwarp();  // the next row's requantization reads what other lanes wrote
  }
  if (lane == 0) *sp = s;
}

bool Aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

cudaError_t LaunchRopeKvWrite(const RopeArgs& rope, void* q, int64_t q_stride, void* k,
                              int64_t k_stride, const void* v, int64_t v_stride, int32_t act_dtype,
                              int64_t n, int32_t num_heads, const int32_t* positions,
                              const int32_t* slots, const KvLayout& kv, int32_t layer, int* err,
                              cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (rope.half > kMaxHalf) return cudaErrorInvalidValue;
  bool ok = false;
  DispatchAct(act_dtype, [&](auto t) {
    using T = decltype(t);
    ok = DispatchKv(kv.dtype, [&](auto kt) {
      using K = decltype(kt);
      // Whole chunks where every row start and the rotary halves are chunk-aligned.
      const size_t ct = 8 * sizeof(T), ck = 8 * sizeof(K);
      const bool rotary_ok = rope.style == STRATA_ROPE_NONE ||
                             (rope.style == STRATA_ROPE_INTERLEAVED ? rope.half % 4 == 0 : rope.half % 8 == 0);
      const bool chunked = rotary_ok && kv.head_dim % 8 == 0 && q_stride % 8 == 0 && k_stride % 8 == 0 &&
                           v_stride % 8 == 0 && Aligned(q, ct) && Aligned(k, ct) && Aligned(v, ct) &&
                           Aligned(kv.data, ck) && kv.layer_half_elems % 8 == 0;
      auto launch = [&](auto kernel) {
        kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
            rope, static_cast<T*>(q), q_stride, static_cast<T*>(k), k_stride, static_cast<const T*>(v), v_stride,
            num_heads, positions, slots, kv, layer, err);
      };
      if (chunked) launch(RopeKvWriteKernel<T, K, true>);
      else launch(RopeKvWriteKernel<T, K, false>);
      if constexpr (std::is_same_v<K, int8_t>) {
        KvWriteI8Kernel<T><<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(2 * kv.num_kv_heads)), 32, 0,
                             stream>>>(static_cast<const T*>(k), k_stride, static_cast<const T*>(v), v_stride, n,
                                       slots, kv, layer);
      }
    });
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace strata::cuda
