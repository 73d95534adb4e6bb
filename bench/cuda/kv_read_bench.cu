// How fast can a decode step read a paged KV cache on this GPU, and with which load
// mechanism? Reads (and barely uses) exactly the bytes a decode attention step reads: for
// every (sequence, KV head) the K and V rows of its context, through the block table, in
// the CUDA backend's layout ([block][position][kv head][head_dim] per layer half). No
// attention math, so the figures are the memory system's ceiling for the access pattern,
// to hold the decode kernels (decode_attention_gqa.cu, decode_attention_mma.cu) against.
//
// Variants, each one warp per (sequence, KV head) unless said otherwise:
//   sequential     the same bytes as one contiguous stream (grid-stride 16-byte loads): the
//                  copy-bandwidth ceiling
//   ldg_u4 / u8    16 lanes per 256-byte row (two rows per warp load), 4 or 8 loads of K and
//                  of V in flight per lane, in registers
//   cpasync_ring   the tensor-core decode kernel's pattern: a 3-stage ring of 16-key chunks
//                  in shared memory, two lanes per row, 16-byte cp.async
//   cpasync_coal   the same ring with 16 lanes per row (each warp copy covers two whole rows)
//   bulk_ring      the same ring filled by the TMA engine: one 256-byte cp.async.bulk per row
//                  (lane r: K row r, lane 16 + r: V row r), completion on an mbarrier (sm_90)
// Usage: kv_read_bench [batch ctx ...] (default: 128 192 128 1024 32 1024). One JSON object
// per line; medians of 20 timed runs after 3 warm-ups, over two cache copies used in turn
// (each larger than L2). Not a test.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/cuda/exit_on_cuda_error.h"

namespace {

constexpr int kD = 128, kKvh = 8, kBs = 16;  // Llama-3-8B: 8 KV heads of 128, 16-token blocks
constexpr int kWarps = 4;                    // warps per block
constexpr int kChunk = 16;                   // keys per ring slot
constexpr int kStages = 3;
constexpr int kRowBytes = kD * 2;


struct Cache {
  const uint8_t* k;  // layer half K: [blocks][kBs][kKvh][kD] BF16
  const uint8_t* v;
  const int32_t* tables;  // [batch][bps]
  int32_t batch, ctx, bps;
};

__device__ __forceinline__ int64_t RowOffset(const Cache& c, int32_t seq, int32_t kvh, int32_t p) {
  const int32_t blk = __ldg(c.tables + static_cast<int64_t>(seq) * c.bps + p / kBs);
  return ((static_cast<int64_t>(blk) * kBs + p % kBs) * kKvh + kvh) * kRowBytes;
}

// Keeps the loads alive without costing time: the sink is written only if the sum is a
// value random data never produces.
__device__ __forceinline__ void Sink(uint32_t acc, uint32_t* sink) {
  if (acc == 0x12345678u) *sink = acc;
}

__global__ void Sequential(const uint4* a, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 x0 = __ldcs(a + i), x1 = __ldcs(a + i + stride), x2 = __ldcs(a + i + 2 * stride),
                x3 = __ldcs(a + i + 3 * stride);
    acc ^= x0.x ^ x1.y ^ x2.z ^ x3.w;
  }
  for (; i < n; i += stride) acc ^= __ldcs(a + i).x;
  Sink(acc, sink);
}

template <int U>
__global__ void __launch_bounds__(kWarps * 32) WarpLdg(Cache c, uint32_t* sink) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (item >= static_cast<int64_t>(c.batch) * kKvh) return;
  const int32_t seq = static_cast<int32_t>(item / kKvh), kvh = static_cast<int32_t>(item % kKvh);
  const int half = lane >> 4, col = (lane & 15) * 16;
  uint32_t acc = 0;
  for (int32_t p0 = 0; p0 < c.ctx; p0 += 2 * U) {
    uint4 kr[U], vr[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t p = p0 + 2 * u + half;
      if (p < c.ctx) {
        const int64_t off = RowOffset(c, seq, kvh, p) + col;
        kr[u] = __ldcs(reinterpret_cast<const uint4*>(c.k + off));
        vr[u] = __ldcs(reinterpret_cast<const uint4*>(c.v + off));
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= kr[u].x ^ vr[u].y;
  }
  Sink(acc, sink);
}

__device__ __forceinline__ uint32_t Smem(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(Smem(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

// COALESCED: 16 lanes per row (a copy instruction covers two whole rows), else two lanes
// per row with 8 vectors each (the tensor-core decode kernel's mapping).
template <bool COALESCED>
__global__ void __launch_bounds__(kWarps * 32, 2) CpAsyncRing(Cache c, uint32_t* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (item >= static_cast<int64_t>(c.batch) * kKvh) return;
  const int32_t seq = static_cast<int32_t>(item / kKvh), kvh = static_cast<int32_t>(item % kKvh);
  constexpr int kSlot = 2 * kChunk * (kRowBytes + 16);
  uint8_t* ring = smem + warp * kStages * kSlot;
  const int32_t chunks = (c.ctx + kChunk - 1) / kChunk;
  auto issue = [&](int32_t ch) {
    if (ch < chunks) {
      uint8_t* slot = ring + (ch % kStages) * kSlot;
      if (COALESCED) {
#pragma unroll
        for (int r2 = 0; r2 < kChunk / 2; ++r2) {
          const int r = 2 * r2 + (lane >> 4);
          const int32_t p = ch * kChunk + r;
          const bool ok = p < c.ctx;
          const int64_t off = ok ? RowOffset(c, seq, kvh, p) : 0;
          const int col = (lane & 15) * 16;
          CpAsync16(slot + r * (kRowBytes + 16) + col, c.k + off + col, ok);
          CpAsync16(slot + (kChunk + r) * (kRowBytes + 16) + col, c.v + off + col, ok);
        }
      } else {
        const int r = lane >> 1, h = lane & 1;
        const int32_t p = ch * kChunk + r;
        const bool ok = p < c.ctx;
        const int64_t off = ok ? RowOffset(c, seq, kvh, p) : 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int col = (h * 8 + j) * 16;
          CpAsync16(slot + r * (kRowBytes + 16) + col, c.k + off + col, ok);
          CpAsync16(slot + (kChunk + r) * (kRowBytes + 16) + col, c.v + off + col, ok);
        }
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  uint32_t acc = 0;
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  for (int32_t ch = 0; ch < chunks; ++ch) {
    issue(ch + kStages - 1);
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 1) : "memory");
    __syncwarp();
    const uint8_t* slot = ring + (ch % kStages) * kSlot;
    acc ^= *reinterpret_cast<const uint32_t*>(slot + (lane & 15) * (kRowBytes + 16) + (lane >> 4) * kRowBytes / 2);
    __syncwarp();
  }
  Sink(acc, sink);
}

// The split-K tensor-core decode kernel's pattern (decode_attention_mma.cu) for a cache whose
// rows are ROW bytes (256: BF16 at head_dim 128; 128: FP8 / I8): one warp per (split, sequence,
// KV head), the KV head fastest, each reading its slice of ctx / splits keys through a ring of
// STAGES 16-key chunks (STAGES - 1 in flight), ROW / 16 lanes per row so that every copy
// instruction covers whole rows; the rows stored unpadded. The same bytes per sequence as the
// other variants (the layout's row stride is ROW x 8 KV heads).
// HEADS = 2: a warp reads the rows of two adjacent KV heads as one contiguous 2 x ROW-byte row
// (half the (sequence, head) items, each twice the bytes), to tell the row size apart from
// the bytes per position.
template <int ROW, int STAGES, int HEADS = 1>
__global__ void __launch_bounds__(kWarps * 32) RingSplit(Cache c, int32_t splits, uint32_t* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int kItemsPerPos = kKvh / HEADS, kRow = ROW * HEADS;
  const int64_t pairs = static_cast<int64_t>(c.batch) * kItemsPerPos;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (item >= pairs * splits) return;
  const int32_t split = static_cast<int32_t>(item / pairs);
  const int64_t pair = item - split * pairs;
  const int32_t seq = static_cast<int32_t>(pair / kItemsPerPos), kvh = static_cast<int32_t>(pair % kItemsPerPos) * HEADS;
  const int32_t slice = ((c.ctx + splits - 1) / splits + kChunk - 1) / kChunk * kChunk;
  const int32_t p0 = min(c.ctx, split * slice), p1 = min(c.ctx, p0 + slice);
  constexpr int kSlot = 2 * kChunk * kRow, kLanesPerRow = kRow / 16, kRowsPerCopy = 32 / kLanesPerRow;
  uint8_t* ring = smem + warp * STAGES * kSlot;
  const int32_t chunks = (p1 - p0 + kChunk - 1) / kChunk;
  const int col = (lane % kLanesPerRow) * 16;
  auto issue = [&](int32_t ch) {
    if (ch < chunks) {
      uint8_t* slot = ring + (ch % STAGES) * kSlot;
#pragma unroll
      for (int j = 0; j < kChunk / kRowsPerCopy; ++j) {
        const int r = j * kRowsPerCopy + lane / kLanesPerRow;
        const int32_t p = p0 + ch * kChunk + r;
        const bool ok = p < p1;
        const int32_t blk = ok ? __ldg(c.tables + static_cast<int64_t>(seq) * c.bps + p / kBs) : 0;
        const int64_t off = ok ? ((static_cast<int64_t>(blk) * kBs + p % kBs) * kKvh + kvh) * ROW + col : 0;
        CpAsync16(slot + r * kRow + col, c.k + off, ok);
        CpAsync16(slot + (kChunk + r) * kRow + col, c.v + off, ok);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  uint32_t acc = 0;
  for (int s = 0; s < STAGES - 1; ++s) issue(s);
  for (int32_t ch = 0; ch < chunks; ++ch) {
    issue(ch + STAGES - 1);
    asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 1) : "memory");
    __syncwarp();
    acc ^= *reinterpret_cast<const uint32_t*>(ring + (ch % STAGES) * kSlot + lane * (kSlot / 32));
    __syncwarp();
  }
  Sink(acc, sink);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KV_BENCH_SM90 1
#endif

// One 256-byte row per lane through the TMA engine (cp.async.bulk), completion counted on
// one mbarrier per slot; lane 0 announces each slot's 8 KiB.
__global__ void __launch_bounds__(kWarps * 32, 2) BulkRing(Cache c, uint32_t* sink) {
#if defined(KV_BENCH_SM90)
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (item >= static_cast<int64_t>(c.batch) * kKvh) return;
  const int32_t seq = static_cast<int32_t>(item / kKvh), kvh = static_cast<int32_t>(item % kKvh);
  constexpr int kSlot = 2 * kChunk * kRowBytes;  // bulk copies need 16-byte alignment only
  uint8_t* ring = smem + warp * (kStages * kSlot + 64);
  uint64_t* bars = reinterpret_cast<uint64_t*>(ring + kStages * kSlot);
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(Smem(bars + s)));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  const int32_t chunks = (c.ctx + kChunk - 1) / kChunk;
  auto issue = [&](int32_t ch) {
    if (ch >= chunks) return;
    const int s = ch % kStages;
    const int32_t rows = min(kChunk, c.ctx - ch * kChunk);
    if (lane == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(Smem(bars + s)),
                   "r"(2 * rows * kRowBytes)
                   : "memory");
    }
    __syncwarp();
    const int r = lane & 15;
    if (r < rows) {
      const int64_t off = RowOffset(c, seq, kvh, ch * kChunk + r);
      const uint8_t* src = (lane < 16 ? c.k : c.v) + off;
      uint8_t* dst = ring + s * kSlot + (lane < 16 ? r : kChunk + r) * kRowBytes;
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(Smem(dst)),
          "l"(src), "r"(kRowBytes), "r"(Smem(bars + s))
          : "memory");
    }
  };
  uint32_t acc = 0;
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  for (int32_t ch = 0; ch < chunks; ++ch) {
    issue(ch + kStages - 1);
    const int s = ch % kStages;
    const uint32_t parity = (ch / kStages) & 1;
    asm volatile(
        "{\n.reg .pred P1;\nLAB_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n@P1 bra DONE;\n"
        "bra LAB_WAIT;\nDONE:\n}\n" ::"r"(Smem(bars + s)),
        "r"(parity)
        : "memory");
    acc ^= *reinterpret_cast<const uint32_t*>(ring + s * kSlot + lane * kRowBytes / 2);
    __syncwarp();
  }
  Sink(acc, sink);
#endif
}

template <typename F>
double MedianUs(F&& launch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch(i);
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    CK(cudaEventRecord(a));
    launch(i);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[ms.size() / 2] * 1000.0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> cfg;
  for (int i = 1; i < argc; ++i) cfg.push_back(std::atoi(argv[i]));
  if (cfg.empty()) cfg = {128, 192, 128, 1024, 32, 1024};
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("{\"skipped\":\"no CUDA device\"}\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  uint32_t* sink = nullptr;
  CK(cudaMalloc(&sink, 4));
  for (size_t ci = 0; ci + 1 < cfg.size(); ci += 2) {
    const int batch = cfg[ci], ctx = cfg[ci + 1];
    const int bps = (ctx + kBs - 1) / kBs;
    const int64_t blocks = static_cast<int64_t>(batch) * bps;
    const int64_t half_bytes = blocks * kBs * kKvh * kRowBytes;
    // Two copies of the cache, each K half + V half, used in turn: together > 2x L2.
    const int copies = 2 * half_bytes * 2 >= 4LL * prop.l2CacheSize ? 2 : 8;
    std::vector<uint8_t*> bufs(copies);
    for (auto& b : bufs) {
      CK(cudaMalloc(&b, 2 * half_bytes));
      CK(cudaMemset(b, 0x3c, 2 * half_bytes));
    }
    std::vector<int32_t> tables(static_cast<size_t>(blocks));
    for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i);
    int32_t* dt = nullptr;
    CK(cudaMalloc(&dt, tables.size() * 4));
    CK(cudaMemcpy(dt, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));
    auto cache = [&](int i) {
      Cache c;
      c.k = bufs[i % copies];
      c.v = bufs[i % copies] + half_bytes;
      c.tables = dt;
      c.batch = batch;
      c.ctx = ctx;
      c.bps = bps;
      return c;
    };
    const double bytes = 2.0 * batch * ctx * kKvh * kRowBytes;  // what decode attention reads
    const unsigned warp_blocks = static_cast<unsigned>((static_cast<int64_t>(batch) * kKvh + kWarps - 1) / kWarps);
    auto report = [&](const char* name, double us) {
      std::printf("{\"bench\":\"kv_read\",\"variant\":\"%s\",\"batch\":%d,\"context\":%d,\"us\":%.1f,\"GBps\":%.0f}\n",
                  name, batch, ctx, us, bytes / us / 1e3);
      std::fflush(stdout);
    };
    report("sequential", MedianUs([&](int i) {
             const Cache c = cache(i);
             // Only the bytes the pattern reads: the first `bytes` of the K half.
             Sequential<<<prop.multiProcessorCount * 8, 256>>>(reinterpret_cast<const uint4*>(c.k),
                                                               static_cast<int64_t>(bytes / 16), sink);
           }));
    report("ldg_u4", MedianUs([&](int i) { WarpLdg<4><<<warp_blocks, kWarps * 32>>>(cache(i), sink); }));
    report("ldg_u8", MedianUs([&](int i) { WarpLdg<8><<<warp_blocks, kWarps * 32>>>(cache(i), sink); }));
    const int ring_smem = kWarps * kStages * 2 * kChunk * (kRowBytes + 16);
    CK(cudaFuncSetAttribute(CpAsyncRing<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, ring_smem));
    CK(cudaFuncSetAttribute(CpAsyncRing<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, ring_smem));
    report("cpasync_ring",
           MedianUs([&](int i) { CpAsyncRing<false><<<warp_blocks, kWarps * 32, ring_smem>>>(cache(i), sink); }));
    report("cpasync_coal",
           MedianUs([&](int i) { CpAsyncRing<true><<<warp_blocks, kWarps * 32, ring_smem>>>(cache(i), sink); }));
    if (prop.major >= 9) {
      const int bulk_smem = kWarps * (kStages * 2 * kChunk * kRowBytes + 64);
      CK(cudaFuncSetAttribute(BulkRing, cudaFuncAttributeMaxDynamicSharedMemorySize, bulk_smem));
      report("bulk_ring", MedianUs([&](int i) { BulkRing<<<warp_blocks, kWarps * 32, bulk_smem>>>(cache(i), sink); }));
    }
    // The split-K kernel's pattern over BF16 rows (256 bytes) and over 8-bit rows (128 bytes:
    // the same layout with kRowBytes / 2 per row, so the first half of each cache copy), at
    // the kernel's planned splits (one wave of 8 warps per SM) and ring depths.
    const int64_t pairs = static_cast<int64_t>(batch) * kKvh;
    const int32_t splits = static_cast<int32_t>(std::max<int64_t>(
        1, std::min<int64_t>({64, ctx / 64, prop.multiProcessorCount * 8LL / pairs})));
    auto ring_split = [&](auto kernel, int row, int stages, const char* name, int heads = 1) {
      const int smem = kWarps * stages * 2 * kChunk * row * heads;
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      const int32_t sp = std::min(64, splits * heads);  // the same number of warps
      const unsigned blocks = static_cast<unsigned>((pairs / heads * sp + kWarps - 1) / kWarps);
      const double us = MedianUs([&](int i) { kernel<<<blocks, kWarps * 32, smem>>>(cache(i), sp, sink); });
      const double b = 2.0 * batch * ctx * kKvh * row;
      std::printf("{\"bench\":\"kv_read\",\"variant\":\"%s\",\"batch\":%d,\"context\":%d,\"splits\":%d,"
                  "\"row_bytes\":%d,\"stages\":%d,\"us\":%.1f,\"GBps\":%.0f}\n",
                  name, batch, ctx, sp, row, stages, us, b / us / 1e3);
      std::fflush(stdout);
    };
    ring_split(RingSplit<256, 3>, 256, 3, "split_ring_bf16_st3");
    ring_split(RingSplit<128, 5>, 128, 5, "split_ring_8bit_st5");
    ring_split(RingSplit<128, 3>, 128, 3, "split_ring_8bit_st3");
    ring_split(RingSplit<128, 7>, 128, 7, "split_ring_8bit_st7");
    ring_split(RingSplit<128, 3, 2>, 128, 3, "split_ring_8bit_2heads_st3", 2);
    for (auto& b : bufs) cudaFree(b);
    cudaFree(dt);
  }
  cudaFree(sink);
  return 0;
}
