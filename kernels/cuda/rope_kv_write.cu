// Fused RoPE + KV-cache write: one block per token rotates the token's query and key heads
// in place (NEOX or interleaved pairs, partial rotary_dim) and stores its key and value rows
// into the paged cache at slot_mapping (negative slot = skip). Angles in double, as the CPU
// backend does: pos * inv_freq loses precision in F32 at long positions.
// Where rows, strides and the rotary half split into aligned 8-element chunks (every
// Llama-family shape), each thread moves whole 16-byte chunks instead of 2-byte elements
// (RopeKvWriteKernel<T, K, true>: 37 us for a 4,096-token prefill step on the H200, run 66;
// 2026-11-30; A/B within noise to +1% on the whole prefill). Both forms compute the same values.
#include <cstdint>

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
  const int64_t row = static_cast<int64_t>(KVH) * D;
  const int64_t blk = slot / kv.block_size, off = slot % kv.block_size;
  K* base = static_cast<K*>(kv.data) + static_cast<int64_t>(layer) * 2 * kv.layer_half_elems;
  K* kd = base + (blk * kv.block_size + off) * row;
  K* vd = kd + kv.layer_half_elems;
  const T* vr = v + i * vs;
  if constexpr (kChunked) {
    const int32_t chunks = static_cast<int32_t>(row / 8);
    for (int32_t c = threadIdx.x; c < 2 * chunks; c += kThreads) {
      const bool is_v = c >= chunks;
      const int32_t cc = is_v ? c - chunks : c;
      const Chunk8<T> x = reinterpret_cast<const Chunk8<T>*>(is_v ? vr : kr)[cc];
      Chunk8<K> y;
#pragma unroll
      for (int j = 0; j < 8; ++j) y.v[j] = FromF32<K>(ToF32(x.v[j]));
      reinterpret_cast<Chunk8<K>*>(is_v ? vd : kd)[cc] = y;
    }
  } else {
    for (int64_t c = threadIdx.x; c < row; c += kThreads) {
      kd[c] = FromF32<K>(ToF32(kr[c]));
      vd[c] = FromF32<K>(ToF32(vr[c]));
    }
  }
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
    });
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace strata::cuda
