// The objects behind the ABI's opaque handles, and the registry that lets every entry point
// reject a handle that was never created or was already freed (instead of crashing). The
// handle types of device.h are only ever cast to and from these classes; the CUDA backend
// defines no strata_*_s struct of its own, so it can share a process (and a test binary)
// with the CPU backend.
#ifndef STRATA_BACKENDS_CUDA_CUDA_OBJECTS_H_
#define STRATA_BACKENDS_CUDA_CUDA_OBJECTS_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "backends/cuda/status.h"
#include "strata/device.h"

namespace strata::cuda {

class LtGemm;
class QuantLtGemm;
class OpProfiler;

// Downloads up to this size go through pinned memory (Device::download_pinned).
constexpr uint64_t kPinnedDownloadBytes = 64 * 1024;

// An ABI 1.4 readback: a pinned landing area, the error word's copy taken behind it, and
// the event that marks both done.
struct ReadbackSlot {
  void* pinned = nullptr;  // STRATA_READBACK_MAX_BYTES
  int* err = nullptr;      // pinned
  cudaEvent_t done = nullptr;
  uint64_t bytes = 0;
  bool busy = false;
};

// Small uploads are staged through pinned memory: a copy from pageable memory may wait for
// the stream (the driver stages it), which would stall the host behind the step in flight
// when the next step's arrays are uploaded while it runs (overlapped steps).
constexpr int kUploadSlots = 16;
constexpr uint64_t kUploadSlotBytes = 512 * 1024;
struct UploadSlot {
  void* pinned = nullptr;
  cudaEvent_t done = nullptr;  // the slot's last copy has left it
  bool used = false;
};

struct Device {
  int32_t index = 0;
  int32_t act_dtype = STRATA_DTYPE_BF16;  // activations and stored weights
  int32_t num_sms = 0;
  bool cluster_launch = false;  // thread-block clusters (sm_90+)
  // Kernel path choices (device options gemv= / prefill_attention=, see cuda_backend.h).
  bool use_gemv = true;        // small-n matmuls through kernels/cuda/gemv.cu, else cuBLASLt
  bool gemv_fused = true;        // its fused kernel for matmul_ex at one token (gemv=rows: never)
  bool gemv_fused_plain = false;  // ... and for plain one-token products (gemv=fused)
  int64_t gemv_max_tokens = 1;  // the GEMV's share without tuning: products of <= this many tokens
  // Prefill attention: 4 = the Hopper wgmma kernel (required: opening fails without sm_90),
  // 3 = auto (the wgmma kernel at head_dim 128; opening lowers it to 2 without sm_90 or the
  // driver's TMA encoder), 2 = FlashAttention-2-style mma.sync
  // kernel, 1 = the WMMA kernel, 0 = SIMT only (each where it supports the batch, else the
  // next lower one).
  int prefill_attention = 3;
  bool use_gqa_decode = true;  // decode attention through kernels/cuda/decode_attention_gqa.cu
  // ... or decode_attention_mma.cu: 0 never (decode_attention=gqa), 1 where the batch fills
  // the GPU (auto), 2 wherever it supports the batch (mma).
  int decode_mma = 1;
  // rope_attention=fused: decode steps run the rope/KV write inside the GQA decode kernel
  // (separate: rope_kv_write's kernel, then the attention, as for the separate ops).
  bool fuse_rope_attention = true;
  // gemm=wgmma on an sm_90 device: BF16 products of 2..kWgmmaMaxTokens tokens run
  // kernels/cuda/gemm_wgmma.cu (its code is sm_90a machine code only, so never elsewhere).
  bool use_wgmma = false;
  int32_t wgmma_splits = 0;  // its split-K factor, 0 = chosen per shape
  // gemm_tune=on: time the candidates of each matmul shape once and keep the fastest
  // (cuBLASLt algorithms; the GEMV or cuBLASLt at <= kGemvMaxTokens tokens). Off by
  // default: measured slower inside the forward pass (cuda_backend.h).
  bool tune_gemm = false;
  // pdl=on (sm_90+): the GEMV is launched with programmatic dependent launch, so it starts
  // streaming its weights while the kernel before it finishes.
  bool use_pdl = true;
  // pdl_small=on (with use_pdl; opt-in, STRATA_CUDA_PDL_SMALL=on): the decode attention
  // kernels, their split combine, and the rms_norm / silu_mul kernels are launched with
  // programmatic dependent launch too, so that at batch 1 their launch latency overlaps the
  // kernel before them (3-5 plain launches a layer otherwise). Off by default until it has
  // been measured on a GPU (scripts/gpu/run_gpu.sh cuda_b1).
  bool pdl_small = false;
  // The GEMV-or-cuBLASLt decision per (m, k, n, types, strides, bias): true = GEMV.
  std::map<std::tuple<int64_t, int64_t, int64_t, int32_t, int32_t, int64_t, int64_t, bool>, bool> gemv_faster;
  cudaStream_t stream = nullptr;
  std::unique_ptr<LtGemm> gemm;
  // STRATA_CUDA_PROFILE=1: GPU time per op, reported when the device closes (op_profiler.h).
  std::unique_ptr<OpProfiler> profiler;
  int* err_word = nullptr;  // device int: kErr* bits set by kernels on bad device indices
  int* err_word_host = nullptr;  // pinned host int it is read back into
  void* download_pinned = nullptr;  // kPinnedDownloadBytes of pinned memory for small downloads
  // Growable device scratch, stream-ordered: attention partials, uploaded small arrays.
  float* attn_ws = nullptr;
  int64_t attn_ws_floats = 0;
  // Outgrown attention workspaces: a recorded graph keeps the address it was recorded
  // with, so a workspace is never freed while the device is open (growth doubles, so these
  // add up to less than the current one).
  std::vector<float*> retired_attn_ws;
  // The tensor-core decode kernel's arrival counts for its fused split merge
  // (kDecodeMmaArrivals int32, zeroed once; every launch leaves them zeroed).
  int32_t* decode_arrivals = nullptr;
  void* small = nullptr;
  uint64_t small_bytes = 0;
  // Scratch of the quantized products (quantized activations, int32/F32 products, a weight
  // dequantized for a many-token product): grows like attn_ws and is never freed while the
  // device is open, since a recorded graph keeps the address it was recorded with.
  void* quant_ws = nullptr;
  uint64_t quant_ws_bytes = 0;
  std::vector<void*> retired_quant_ws;
  // ABI 1.9 quant_counters: saturated, nonfinite, outliers, STRATA_MAX_QUANT_COUNTER_SLOTS
  // each (device memory, zeroed at open, added to by the activation quantization kernel).
  unsigned long long* quant_counters = nullptr;
  // The int8 / FP8 tensor-core products (cuBLASLt), created at the first quantized product.
  std::unique_ptr<QuantLtGemm> quant_gemm;
  // Which GEMM multiplies W8A8 / FP8 weights by the 8-bit activations (device option
  // quant_gemm=, cuda_backend.h): kernels/cuda/gemm_wgmma.cu (scales, bias and residual add
  // in its epilogue; sm_90a only) for W8A8 at every size and FP8 up to 128 tokens
  // (auto; quant_product.cpp's WgmmaIsAutoChoice) or for every size (wgmma), else cuBLASLt
  // (+ the epilogue kernel for W8A8; cublas, and any device but sm_90).
  enum QuantGemm { kQuantGemmCublas = 0, kQuantGemmAuto = 1, kQuantGemmWgmma = 2 };
  int quant_gemm_mode = kQuantGemmAuto;
  // quant_fuse=on: matmul_ex's RMSNorm / SiLU*mul prologue of a W8A8 / FP8 product writes
  // the 8-bit activations itself (kernels/cuda/quant_prologue.cu).
  bool quant_fuse = true;
  // wgmma_multicast=on: the 8-bit wgmma GEMM's blocks of several token tiles share each
  // token tile in clusters of two through TMA multicast (WgmmaGemmArgs::multicast).
  bool wgmma_multicast = false;
  // wgmma_token_tile=128: the 8-bit wgmma GEMM's token tiles at most 128 wide (two blocks an
  // SM; WgmmaGemmArgs::token_tile), 0 = up to 256.
  int32_t wgmma_token_tile = 0;
  // wgmma_persistent=on: the 8-bit wgmma GEMM over several token tiles runs persistent blocks
  // (WgmmaGemmArgs::persistent).
  bool wgmma_persistent = false;
  // wgmma_wide=auto|on|off: the 8-bit wgmma GEMM of 33..256 tokens on 256-row weight tiles
  // (WgmmaGemmArgs::wide: kWideAuto, kWideOn, kWideOff).
  int32_t wgmma_wide = 0;
  // fp8_promote=on|128|256: the FP8 wgmma GEMM adds its tensor-core partial sums into separate
  // f32 accumulators every 128 (on) or 256 of K (WgmmaGemmArgs::promote); 0 = off.
  int32_t fp8_promote = 0;
  // wgmma_mgroup=2|4: the 8-bit wgmma GEMM's blocks of 2 / 4 neighbouring weight tiles share
  // each activation tile through TMA multicast (WgmmaGemmArgs::mgroup); 0 = off.
  int32_t wgmma_mgroup = 0;
  // wgmma_hold=1: the 8-bit wgmma GEMM's consumers hand each stage back as soon as its MMAs
  // are done (WgmmaGemmArgs::hold); 0 = the default (two stages held).
  int32_t wgmma_hold = 0;
  // wgmma_trigger=on: the 8-bit wgmma GEMM lets the next kernel launch once its blocks are
  // resident (WgmmaGemmArgs::trigger), and the fused activation quantizer is launched with
  // programmatic dependent launch (QuantActArgs::overlap_previous).
  bool wgmma_trigger = false;
  // wgmma_epilogue=preload: the 8-bit wgmma GEMM's epilogue issues a batch's loads before its
  // stores (WgmmaGemmArgs::epilogue_preload).
  bool wgmma_epilogue_preload = false;
  // prefill_wgmma_form=auto|0..6: the form of the Hopper prefill attention kernel
  // (kernels/cuda/prefill_attention_wgmma.h; -1 = auto, its default form).
  int32_t prefill_wgmma_form = -1;
  // True between graph_begin and graph_end: the stream is being captured, so ops must not
  // synchronize, allocate, or read host memory at replay time (see graph_begin, device.h).
  bool recording = false;
  std::mutex mu;  // ops of one device may come from several threads
  // Guards err_word_host, download_pinned and readbacks (synchronize, download and the
  // readbacks; not mu, so that a thread waiting for the device does not hold up others
  // enqueueing ops).
  std::mutex readback_mu;
  std::array<ReadbackSlot, STRATA_MAX_PENDING_READBACKS> readbacks;
  std::mutex upload_mu;  // guards upload_slots and next_upload_slot
  std::array<UploadSlot, kUploadSlots> upload_slots;
  int next_upload_slot = 0;
  ~Device();
};

struct Buffer {
  void* data = nullptr;
  uint64_t size = 0;
};

struct QuantWeight;  // backends/cuda/quant_weight.h: a weight stored quantized

struct Weight {
  int32_t dtype = STRATA_DTYPE_BF16;  // stored (compute) type, may differ from the source
  int32_t source_dtype = STRATA_DTYPE_BF16;
  int64_t rows = 0;
  int64_t cols = 0;
  void* data = nullptr;  // row-major [rows, cols]; null for a quantized weight
  // A quantized weight (format != DENSE): its packed data, scales and the rest, repacked at
  // weight_create into the layout the quantized kernels read. `dtype` is then the
  // activation type its products take and give.
  int32_t format = STRATA_WEIGHT_DENSE;
  std::unique_ptr<QuantWeight> quant;
  uint64_t stored_bytes = 0;  // device bytes of the weight (profiling: the bytes a product reads)
  ~Weight();
};

struct KvCache {
  strata_kv_cache_desc desc{};
  size_t elem_size = 0;
  uint64_t block_elems = 0;       // block_size * num_kv_heads * head_dim
  uint64_t layer_half_elems = 0;  // num_blocks * block_elems (K or V of one layer)
  void* data = nullptr;
  // I8 caches: the scales [num_layers][K, V][num_blocks][num_kv_heads] (F32), in the same
  // allocation after the values; null otherwise.
  float* scales = nullptr;
  ~KvCache();
};

// A captured and instantiated decode step (ABI 1.1 graphs).
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph();
};

enum class HandleKind { kDevice, kBuffer, kWeight, kKvCache, kGraph, kReadback };

void RegisterHandle(const void* handle, HandleKind kind);
void UnregisterHandle(const void* handle);
bool IsLiveHandle(const void* handle, HandleKind kind);
Status CheckHandle(const void* handle, HandleKind kind, const char* what);

inline Device* AsDevice(strata_device d) { return reinterpret_cast<Device*>(d); }
inline Buffer* AsBuffer(strata_buffer b) { return reinterpret_cast<Buffer*>(b); }
inline Weight* AsWeight(strata_weight w) { return reinterpret_cast<Weight*>(w); }
inline KvCache* AsKv(strata_kv_cache k) { return reinterpret_cast<KvCache*>(k); }
inline Graph* AsGraph(strata_graph g) { return reinterpret_cast<Graph*>(g); }

size_t DtypeSize(int32_t dtype);
const char* DtypeName(int32_t dtype);

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_CUDA_OBJECTS_H_
